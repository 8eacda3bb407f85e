"""The induction sweep's pilot (protocol §7c): train chosen cells of the grid on its tasks, one
process, one thread, every seed of a cell in one stack as the workflow trains them (each run stopping
on its events or at the cap), and print each run's stop, events, CPU seconds and steps — what the
grid, the seeds and the cap in config/config.yaml's `induction:` were chosen from. A table of every
run is written with --out (CSV).

    .venv/bin/python benchmarks/induction_pilot.py --tasks repeat markov --shapes w64-h4 w8-h1 --seeds 0 1
    .venv/bin/python benchmarks/induction_pilot.py --set steps=2400 grid.max_width=128     # other settings
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

from headwatch.induction.analysis import run_events  # noqa: E402
from headwatch.induction.train import train_runs  # noqa: E402
from headwatch.settings.induction import InductionSettings, shapes  # noqa: E402


def settings(changes: list[str]) -> InductionSettings:
    """config/config.yaml's `induction:` with ``KEY=VALUE`` changes (a dotted key reaches inside)."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["induction"]
    for kv in changes:
        key, value = kv.split("=", 1)
        *outer, last = key.split(".")
        node = cfg
        for k in outer:
            node = node[k]
        node[last] = yaml.safe_load(value)
    return InductionSettings.from_config(cfg)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["repeat", "markov"])
    ap.add_argument("--shapes", nargs="+", default=None, help="w{width}-h{heads} (default: every cell of the grid)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="induction settings to change")
    ap.add_argument("--out", type=Path, default=None, help="a CSV of every run")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    s = settings(args.set)
    cells = [(k, w, h) for k, w, h in shapes(s) if args.shapes is None or k in args.shapes]
    print(f"cap {s.steps} steps, settle {s.settle}, eval every {s.eval_every}, batch {s.batch}, lr {s.lr}, "
          f"context {s.context}, ffn_mult {s.ffn_mult}; cells {[k for k, _, _ in cells]}", flush=True)
    rows, total = [], 0.0
    for task in args.tasks:
        for shape, width, heads in cells:
            t0 = time.process_time()
            runs = train_runs(task, width, heads, args.seeds, s)
            cpu = time.process_time() - t0
            total += cpu
            for seed, r in zip(args.seeds, runs):
                ev = run_events(r.curve, r.heads, s.threshold, s.margin)
                rows.append(dict(task=task, shape=shape, width=width, heads=heads, head_size=width // heads, seed=seed,
                                 stop_step=r.stop_step, stop_reason=r.stop_reason, cpu_s=round(r.seconds, 2),
                                 **ev, key_edge=r.edges["edge_k"], final_loss=float(r.curve.loss.iloc[-1]),
                                 unigram=float(r.curve.unigram.iloc[-1]), best=float(r.curve.reference.iloc[-1])))
                x = rows[-1]
                print(f"{task:15s} {shape:8s} seed {seed}: stopped at {r.stop_step} ({r.stop_reason}), "
                      f"{r.seconds:5.1f} CPU s; phase {ev['phase_step']}, induction head {ev['induction_step']}, "
                      f"prev head {ev['prev_step']}; loss {x['final_loss']:.2f} (unordered {x['unigram']:.2f}, "
                      f"best {x['best']:.2f})", flush=True)
            steps = sum(r.stop_step for r in runs)
            print(f"   {task} {shape}: {cpu:.1f} CPU s for {steps} run-steps ({1000 * cpu / max(steps, 1):.1f} ms a "
                  "run-step, evaluations included)", flush=True)
    print(f"{total:.0f} CPU s in all")
    if args.out:
        pd.DataFrame(rows).to_csv(args.out, index=False)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
