"""Where a run's job time goes: starting (Python, imports, CUDA, reading inputs before the work's log
opens) against the work itself, per rule, from the files a run leaves.

    .venv/bin/python benchmarks/startup.py [--root .]        # a finished run's results/
    .venv/bin/python benchmarks/startup.py --imports         # the imports a job pays for, each alone

Per job: Snakemake's benchmark record times the whole process (``s``); the ``resources:`` line that
:func:`headwatch.jobs.log_to` ends each log with times the work inside it (``wall_s``, from the log's
opening to its end). Their difference is the job's start-up: the interpreter, the imports and what a
script does before it opens its log. Per rule the sums of both, and the start-up's share. A rule
whose jobs spend most of their time starting is one to run beside others (``model_jobs_per_gpu``) or
to give more work per job; rules that only link files (:data:`headwatch.paths.FILE_RULES`) have no
work line and are left out.

``--imports``: a fresh interpreter's seconds to import each module a job imports (the interpreter
alone first), each in its own process, best of ``--repeat``: what every job of a rule pays before
its first line of work.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: What a job imports, heaviest last (each timed in a fresh interpreter, with those before it).
IMPORTS = ("headwatch", "numpy", "pandas", "pyarrow.parquet", "torch", "transformers", "headwatch.api",
           "headwatch.model.load", "matplotlib.pyplot", "headwatch.figures", "scipy.stats")


def jobs(root: Path):
    """One row per job: rule, job, whole seconds (benchmark), work seconds (log), start-up."""
    import pandas as pd

    from headwatch.jobs import read_resources
    from headwatch.paths import FILE_RULES

    bench, logs = root / "results" / "benchmarks", root / "results" / "logs"
    rows = []
    for tsv in sorted(bench.rglob("*.tsv")):
        rel = tsv.relative_to(bench).with_suffix("")
        rule = rel.parts[0]
        log = logs / rel.with_suffix(".log")
        if rule in FILE_RULES or not log.exists():
            continue
        res = read_resources(log.read_text(errors="replace")) or {}
        whole = float(pd.read_csv(tsv, sep="\t")["s"].iloc[-1])
        work = res.get("wall_s")
        rows.append(dict(rule=rule, job=str(rel), whole_s=whole, work_s=work,
                         startup_s=None if work is None else max(whole - work, 0.0), device=res.get("device")))
    return pd.DataFrame(rows, columns=["rule", "job", "whole_s", "work_s", "startup_s", "device"])


def per_rule(table):
    g = table.groupby("rule")
    out = g.agg(jobs=("job", "size"), whole_s=("whole_s", "sum"), work_s=("work_s", "sum"),
                startup_s=("startup_s", "sum"), startup_per_job_s=("startup_s", "mean"))
    out["startup_share"] = out["startup_s"] / out["whole_s"]
    return out.sort_values("whole_s", ascending=False).reset_index()


def import_seconds(repeat: int = 3) -> list[tuple[str, float]]:
    """(module, best seconds of a fresh interpreter importing it and everything before it)."""
    out, done = [], []
    for name in ("(the interpreter)", *IMPORTS):
        code = "; ".join(f"import {m}" for m in done + ([] if name.startswith("(") else [name])) or "pass"
        best = min(_time([sys.executable, "-c", code]) for _ in range(repeat))
        out.append((name, best))
        if not name.startswith("("):
            done.append(name)
    return out


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose results/ a run left")
    ap.add_argument("--imports", action="store_true", help="time the imports instead")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.imports:
        previous = 0.0
        print(f"{'import (with those above)':<28}{'s':>7}{'adds':>7}")
        for name, s in import_seconds(args.repeat):
            print(f"{name:<28}{s:>7.2f}{s - previous:>7.2f}")
            previous = s
        return 0
    table = jobs(Path(args.root))
    if table.empty:
        raise SystemExit(f"no job with both a benchmark record and a log under {args.root}/results")
    rules = per_rule(table)
    print(rules.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    total, start = table["whole_s"].sum(), table["startup_s"].sum()
    print(f"\n{len(table)} jobs, {total:.0f} s in all, {start:.0f} s of it starting ({start / total:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
