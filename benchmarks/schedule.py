"""A timed run's training jobs scheduled three ways from their own measured durations, and the run's
float32 matmul floor.

Snakemake starts the ready job of the highest priority; the training jobs' priority is their expected
cost (headwatch/sweep/plan.py: job_priority; the induction sweep's: headwatch/settings/induction.py:
job_macs), so the longest start first and both cores stay busy to the end. With every job's measured
wall time (its benchmark file, ``results/benchmarks/<rule>/…tsv``) this prints the makespan of the jobs
on ``--cores`` cores when started longest first (what the priorities ask), shortest first (the order
in which a long job starts last and runs alone: what an unprioritized run can fall into, as the earlier
laptop-long run's last 32-head job did for 26 minutes), and the lower bound max(longest job, total /
cores); and the run's floor: the multiply-adds of its training jobs (steps and evaluations; for the
induction sweep, whose runs stop at their events, the steps each run trained) over the float32 matmul
rate its timing record measured before the run, with the run's wall time as a multiple.

    .venv/bin/python benchmarks/schedule.py --root /path/to/checkout --target laptop-long
    .venv/bin/python benchmarks/schedule.py --root /path/to/checkout --target induction
"""
from __future__ import annotations

import argparse
import csv
import heapq
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from page import add_row  # noqa: E402  (the records' one writer)

OVERLAYS = {"laptop": ["laptop.yaml"], "laptop-more": ["laptop.yaml", "laptop_more.yaml"],
            "laptop-long": ["laptop.yaml", "laptop_long.yaml"], "induction": ["induction.yaml"],
            "quick": ["quick.yaml"]}
RULES = {"induction": "induction_train"}


def makespan(durations: list[float], cores: int) -> float:
    """List scheduling: each job, in the given order, starts on the first core that is free."""
    free = [0.0] * cores
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def durations(root: Path, rule: str, attempts: list[dict]) -> dict[str, float]:
    """Each job's wall time, from its benchmark file, for the jobs the timed run's ``attempts`` ran: the
    files written while one of them ran (timed runs share ``results/``: `make laptop-long` after `make
    laptop` leaves the laptop run's files beside its own, which are not this run's jobs)."""
    from datetime import datetime, timedelta

    slack = timedelta(seconds=5)
    spans = [(datetime.fromisoformat(a["started"]) - slack, datetime.fromisoformat(a["ended"]) + slack)
             for a in attempts]
    out = {}
    for tsv in sorted((root / "results" / "benchmarks" / rule).rglob("*.tsv")):
        written = datetime.fromtimestamp(tsv.stat().st_mtime)
        if not any(start <= written <= end for start, end in spans):
            continue
        with open(tsv) as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        out[str(tsv.relative_to(root / "results" / "benchmarks" / rule))] = float(row["s"])
    return out


def work_macs(target: str, root: Path = ROOT, sweeps: set[str] | None = None) -> float:
    """The multiply-adds of the target's training (of its sweeps named in ``sweeps``, when given: those whose
    jobs the run itself ran). The induction sweep's runs stop at their events: each run's own steps, from
    the run's ``runs`` table (``stop_step``), where the run has written it."""
    import headwatch as hw
    from headwatch import paths
    from headwatch.settings import induction as ind
    from headwatch.sweep import plan

    cfg = hw.load_config(*[f"config/{o}" for o in OVERLAYS[target]])
    if target == "induction":
        runs = root / paths.induction_table("runs")
        if runs.exists():
            import pandas as pd

            t = pd.read_parquet(runs, columns=["task", "shape", "stop_step"])
            return sum(ind.run_macs(cfg["induction"], r.task, r.shape, int(r.stop_step)) for r in t.itertuples())
        return sum(ind.job_macs(cfg["induction"], task, shape)
                   for task, shape in ind.jobs(ind.InductionSettings.from_config(cfg["induction"])))
    return sum(plan.job_macs(cfg["sweep"], r["sweep"], r["shape"], r["seed"]) for r in plan.train_jobs(cfg["sweep"])
               if sweeps is None or r["sweep"] in sweeps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT), help="the checkout that ran the target")
    ap.add_argument("--target", choices=sorted(OVERLAYS), required=True)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--record", action="store_true",
                    help="add the run's row (wall, floor, schedule) to benchmarks/records/targets.json")
    args = ap.parse_args(argv)
    root = Path(args.root)
    rule = RULES.get(args.target, "sweep_train")
    record = root / "results" / "timing" / f"{args.target}.json"
    if not record.exists():
        raise SystemExit(f"{record} is missing: the target was not run through the Makefile's timer")
    attempts = json.loads(record.read_text())["attempts"]
    d = durations(root, rule, attempts)
    if not d:
        raise SystemExit(f"no benchmark files under {root}/results/benchmarks/{rule} written while {record.name}'s "
                         "run ran: run the target there first")
    jobs = list(d.values())
    longest, shortest = makespan(sorted(jobs, reverse=True), args.cores), makespan(sorted(jobs), args.cores)
    bound = max(max(jobs), sum(jobs) / args.cores)
    lines = [f"{len(jobs)} {rule} jobs, {sum(jobs) / 60:.1f} min in all, the longest {max(jobs) / 60:.1f} min; on "
             f"{args.cores} cores: longest first {longest / 60:.1f} min, shortest first {shortest / 60:.1f} min "
             f"(saving {(shortest - longest) / 60:.1f} min), lower bound {bound / 60:.1f} min"]
    wall = sum(a["wall_s"] for a in attempts)
    cpu = sum(a["cpu_s"] for a in attempts)
    rates = [a["matmul_macs_per_s"] for a in attempts if a.get("matmul_macs_per_s")]
    macs = work_macs(args.target, root, None if rule != "sweep_train" else {Path(k).parts[0] for k in d})
    if rates:
        floor = macs / rates[0][0]                 # the rate is of every core at once
        lines.append(f"the run: {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU; its training's {macs / 1e12:.1f} T "
                     f"multiply-adds at the float32 matmul rate measured before it ({rates[0][0] / 1e9:.1f} G/s; "
                     f"{rates[0][1] / 1e9:.1f} after): a floor of {floor / 60:.1f} min, the wall {wall / floor:.1f} x "
                     "the floor")
    else:
        lines.append(f"the run: {wall / 60:.1f} min wall; its record has no matmul rate (recorded from this commit on)")
    print("\n".join(lines))
    if args.record:
        a = attempts[0]
        row = dict(what=f"make {args.target}", figures="; ".join(lines) + f"; {len(attempts)} attempt(s)",
                   machine=f"{a['usable_cores']} {a['cpu_model']} cores",
                   load=f"load average {a['load_before'][0]:.2f} before, {attempts[-1]['load_after'][0]:.2f} after",
                   command=f"make {args.target}; .venv/bin/python benchmarks/schedule.py --root . --target "
                           f"{args.target} --record", commit=a["commit"] or "a dirty tree", date=a["started"][:10])
        path = add_row("targets", row)
        print(f"added to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
