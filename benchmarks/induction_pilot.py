"""The induction sweep's pilot (protocol §7c): train chosen shapes of the sweep on its tasks, one
process, one thread, and print each run's CPU seconds, phase-change step, induction formation
step, final loss against its references and the circuit's key edge — what the sizes and steps in
config/config.yaml's `induction:` were chosen from.

    .venv/bin/python benchmarks/induction_pilot.py --tasks repeat markov --shapes w64-h4 w8-h1 --seeds 0
    .venv/bin/python benchmarks/induction_pilot.py --set steps=1200 batch=32     # other settings
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import yaml  # noqa: E402

from headwatch.induction.analysis import phase_step, shape_of  # noqa: E402
from headwatch.induction.train import train_run  # noqa: E402
from headwatch.settings.induction import InductionSettings  # noqa: E402
from headwatch.sweep.course import formation_step  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["repeat", "markov"])
    ap.add_argument("--shapes", nargs="+", default=None, help="w{width}-h{heads} (default: every arm's)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="induction settings to change")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["induction"]
    for kv in args.set:
        k, v = kv.split("=", 1)
        cfg[k] = yaml.safe_load(v)
    s = InductionSettings.from_config(cfg)
    shapes = args.shapes or list(dict.fromkeys(shape_of(w, h) for a in s.arms.values() for w, h in a.shapes()))
    print(f"steps {s.steps}, batch {s.batch}, lr {s.lr}, context {s.context}, ffn_mult {s.ffn_mult}", flush=True)
    total = 0.0
    for task in args.tasks:
        for shape in shapes:
            width, heads = (int(x[1:]) for x in shape.split("-"))
            for seed in args.seeds:
                t0 = time.process_time()
                r = train_run(task, width, heads, seed, s)
                cpu = time.process_time() - t0
                total += cpu
                c = r.curve
                print(f"{task:15s} {shape:8s} seed {seed}: {cpu:5.1f} CPU s; loss {c.loss.iloc[0]:.2f} -> "
                      f"{c.loss.iloc[-1]:.2f} (unordered {c.unigram.iloc[-1]:.2f}, best {c.reference.iloc[-1]:.2f}); "
                      f"phase {phase_step(c, s.margin)}, induction head {formation_step(r.heads, s.threshold, 'induction_excess')}"
                      f", prev head {formation_step(r.heads, s.threshold, 'prev')}; key edge {r.edges['edge_k']:+.3f} "
                      f"(strongest: {r.edges['key_strongest']})", flush=True)
    print(f"{total:.0f} CPU s in all")


if __name__ == "__main__":
    main()
