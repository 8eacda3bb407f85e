"""The plateau rule on a sweep's runs, as it reads them now and as the first rule read them
(protocol §7b, "leaving the plateau"): for each run of the sweep under ``--root``, the arrival, the
plateau level and the leaving step, beside the first rule's (the first evaluation at or after the
warm-up whose loss falls by less than the margin to the next). What shows the change on the runs
that the first rule misread.

    .venv/bin/python benchmarks/plateau_rule.py --root RESULTS_CHECKOUT --sweep heads_long --warmup 120
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headwatch.sweep.course import plateau_events  # noqa: E402
from headwatch.tableio import read_note, read_parquet  # noqa: E402


def first_rule(steps, losses, warmup: int, margin: float) -> dict:
    """The rule before this one: the arrival is the first evaluation at or after the warm-up whose loss
    falls by less than ``margin`` to the next."""
    steps, losses = np.asarray(steps), np.asarray(losses, dtype=float)
    after = np.flatnonzero((steps >= warmup)[:-1] & (losses[:-1] - losses[1:] < margin))
    if not len(after):
        return dict(plateau_step=None, plateau_loss=None, leave_step=None)
    i = int(after[0])
    below = np.flatnonzero(losses[i + 1:] <= losses[i] - margin)
    return dict(plateau_step=int(steps[i]), plateau_loss=float(losses[i]),
                leave_step=int(steps[i + 1 + below[0]]) if len(below) else None)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--sweep", default="heads_long")
    ap.add_argument("--warmup", type=int, required=True, help="the sweep's warm-up steps (the first rule's gate)")
    ap.add_argument("--margin", type=float, default=0.05)
    args = ap.parse_args(argv)
    fmt = lambda e: (f"plateau {e['plateau_loss']:.3f} at step {e['plateau_step']}, leaves at {e['leave_step']}"
                     if e["plateau_step"] is not None else "no plateau")
    for path in sorted((args.root / "results" / "sweep" / args.sweep).glob("*/seed*/metrics.parquet")):
        m = read_parquet(path).sort_values("step")
        start = math.log(read_note(path)["vocab_size"])
        now = plateau_events(m["step"], m["val_loss"], args.margin, start)
        before = first_rule(m["step"], m["val_loss"], args.warmup, args.margin)
        run = "/".join(path.parts[-3:-1])
        print(f"{run}: now {fmt(now)}; first rule {fmt(before)}")


if __name__ == "__main__":
    main()
