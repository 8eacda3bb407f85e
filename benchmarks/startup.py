"""Where a run's job time goes: starting (Python, imports, CUDA, reading inputs before the work's log
opens) against the work itself, per rule, from the files a run leaves.

    .venv/bin/python benchmarks/startup.py [--root .]        # a finished run's results/
    .venv/bin/python benchmarks/startup.py --imports         # the imports a job pays for, each alone
    .venv/bin/python benchmarks/startup.py --load FOLDER [--device cuda] [--repeat 3] [--json PATH]

Per job: Snakemake's benchmark record times the whole process (``s``); the ``resources:`` line that
:func:`headwatch.jobs.log_to` ends each log with times the work inside it (``wall_s``, from the log's
opening to its end). Their difference is the job's start-up: the interpreter, the imports and what a
script does before it opens its log. Per rule the sums of both, and the start-up's share. A rule
whose jobs spend most of their time starting is one to run beside others (``model_jobs_per_gpu``) or
to give more work per job; rules that only link files (:data:`headwatch.paths.FILE_RULES`) have no
work line and are left out. A job that loads a prepared model logs the rest of its start-up, inside
the work (:func:`headwatch.model.load.load_prepared`): importing transformers (``import_s``; wherever
the script first imported it, before its log or after), reading the weights (``weights_s``), moving
them to the device (``to_device_s``: on a GPU the process's CUDA context starts there) and the
tokenizer (``tokenizer_s``); per rule their means: what a process that had started once per device
would no longer pay, job after job. Run it on a GPU check's archive (``tar xzf run.tar.gz -C DIR``,
then ``--root DIR``) for a GPU's figures.

``--imports``: a fresh interpreter's seconds to import each module a job imports (the interpreter
alone first), each in its own process, best of ``--repeat``: what every job of a rule pays before
its first line of work.

``--load FOLDER``: what a model job pays until its prepared model (``FOLDER``, as ``models_prepare``
writes it) is loaded on ``--device`` and checked (:func:`headwatch.model.load.load_prepared`, its
first forward pass included), started two ways, ``--repeat`` times each, interleaved: **cold**, a
fresh interpreter (what every job of the workflow pays today), and **warm**, a process forked from
one that imported torch, headwatch's loading and the model family's transformers module once
(multiprocessing's ``forkserver``, as tests/warmstart.py starts the tests' jobs; the server never
touches CUDA, which a forked process could not use). Per start: seconds from the start to torch
imported, to the loading imported, to the model ready, and the load's own parts (weights,
``to_device_s`` — on a GPU the process's CUDA context starts there —, tokenizer); and the server's
own start, paid once. What the warm start saves a job is what a worker that starts once per device
would save it, but the CUDA context, which each process starts anew; a warm job that cannot start
CUDA is reported as failed, with its error.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The parts of a model's loading that :func:`headwatch.model.load.load_prepared` logs, in its order.
LOAD_PARTS = ("import_s", "weights_s", "to_device_s", "tokenizer_s")
_LOADED = re.compile(r"headwatch\.model\.load loaded .*")
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
        text = log.read_text(errors="replace")
        res = read_resources(text) or {}
        whole = float(pd.read_csv(tsv, sep="\t")["s"].iloc[-1])
        work = res.get("wall_s")
        rows.append(dict(rule=rule, job=str(rel), whole_s=whole, work_s=work,
                         startup_s=None if work is None else max(whole - work, 0.0), device=res.get("device"),
                         **load_parts(text)))
    return pd.DataFrame(rows, columns=["rule", "job", "whole_s", "work_s", "startup_s", "device", *LOAD_PARTS])


def load_parts(text: str) -> dict:
    """The parts of the model's loading a job's log names (:data:`LOAD_PARTS`, seconds; {} when it
    loaded no prepared model): its last ``loaded`` line's fields."""
    lines = _LOADED.findall(text)
    if not lines:
        return {}
    fields = dict(re.findall(r"(\w+_s)=([0-9.]+)", lines[-1]))
    return {k: float(fields[k]) for k in LOAD_PARTS if k in fields}


def per_rule(table):
    g = table.groupby("rule")
    out = g.agg(jobs=("job", "size"), whole_s=("whole_s", "sum"), work_s=("work_s", "sum"),
                startup_s=("startup_s", "sum"), startup_per_job_s=("startup_s", "mean"),
                **{part: (part, "mean") for part in LOAD_PARTS})
    out["startup_share"] = out["startup_s"] / out["whole_s"]
    out["load_per_job_s"] = out[list(LOAD_PARTS)].sum(axis=1, min_count=1)
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


def _load_job(folder: str, device: str, started: float, conn) -> None:
    """One start of ``--load`` (in a fresh interpreter, or forked from the warm server): seconds from
    ``started`` (the parent's clock when it asked for this process) to each step, sent on ``conn``."""
    import logging

    marks = {}
    try:
        import torch  # noqa: F401

        marks["torch_s"] = time.time() - started
        from headwatch.model.load import load_prepared

        marks["loading_imported_s"] = time.time() - started
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())
        logger = logging.getLogger("headwatch.model.load")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        load_prepared(folder, device=device)
        marks["ready_s"] = time.time() - started
        marks.update(load_parts("headwatch.model.load " + next(r for r in records if r.startswith("loaded "))))
    except Exception as err:  # noqa: BLE001 -- reported: a warm process that cannot start CUDA is a finding
        marks["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    conn.send(marks)
    conn.close()


def family_module(folder: str | Path) -> str:
    """The transformers module that holds the model class of the prepared model in ``folder``."""
    import json

    kind = json.loads((Path(folder) / "config.json").read_text())["model_type"]
    return f"transformers.models.{kind}.modeling_{kind}"


def cold_start(folder: str, device: str) -> dict:
    """One ``--load`` start in a fresh interpreter."""
    started = time.time()
    code = ("import json, sys, time; sys.path.insert(0, {bench!r}); from multiprocessing import Pipe; "
            "from startup import _load_job; a, b = Pipe(); _load_job({folder!r}, {device!r}, {started!r}, b); "
            "print(json.dumps(a.recv()))").format(bench=str(Path(__file__).parent), folder=str(folder),
                                                   device=device, started=started)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return dict(error=(done.stderr.strip().splitlines() or ["(no message)"])[-1][:200])
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


def warm_server(folder: str):
    """A forkserver that has imported torch, headwatch's loading and the family's module once (and
    run one trivial job, so that it is up): (its context, the seconds that took)."""
    import multiprocessing

    t0 = time.time()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "headwatch.model.load", family_module(folder)])
    probe = ctx.Process(target=time.sleep, args=(0,))
    probe.start()
    probe.join()
    return ctx, time.time() - t0


def warm_start(ctx, folder: str, device: str) -> dict:
    """One ``--load`` start forked from the warm server."""
    here, there = ctx.Pipe()
    job = ctx.Process(target=_load_job, args=(folder, device, time.time(), there))
    job.start()
    there.close()
    try:
        out = here.recv()
    except EOFError:
        out = dict(error="the warm process ended without a word")
    job.join()
    return out


def load_starts(folder: str, device: str, repeat: int) -> dict:
    """``--load``: ``repeat`` cold and warm starts, interleaved, and the warm server's own start."""
    sys.path.insert(0, str(Path(__file__).parent))
    ctx, server_s = warm_server(folder)
    rows = []
    for i in range(repeat):
        for mode in ("cold", "warm"):
            got = cold_start(folder, device) if mode == "cold" else warm_start(ctx, folder, device)
            rows.append(dict(mode=mode, start=i + 1, **got))
    return dict(folder=str(folder), device=device, torch=__import__("torch").__version__,
                server_start_s=server_s, rows=rows)


def load_table(record: dict) -> list[str]:
    """A ``--load`` record as lines: one per start, then the saving a warm start makes."""
    cols = ["torch_s", "loading_imported_s", "ready_s", *LOAD_PARTS[1:]]
    lines = [f"model {record['folder']} on {record['device']}, torch {record['torch']}; seconds from the start "
             f"(the warm server's own start, paid once: {record['server_start_s']:.1f} s)",
             f"{'start':<8}" + "".join(f"{c:>20}" for c in cols)]
    for r in record["rows"]:
        lines.append(f"{r['mode'] + ' ' + str(r['start']):<8}" + (
            f"  failed: {r['error']}" if "error" in r else "".join(f"{r.get(c, float('nan')):>20.2f}" for c in cols)))
    best = {m: min((r["ready_s"] for r in record["rows"] if r["mode"] == m and "ready_s" in r), default=None)
            for m in ("cold", "warm")}
    if best["cold"] is not None and best["warm"] is not None:
        lines.append(f"model ready: cold {best['cold']:.2f} s, warm {best['warm']:.2f} s (best of each): a warm "
                     f"start saves {best['cold'] - best['warm']:.2f} s a job")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose results/ a run left")
    ap.add_argument("--imports", action="store_true", help="time the imports instead")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--load", metavar="FOLDER", help="time a prepared model's loading, cold and warm, instead")
    ap.add_argument("--device", default="cpu", help="with --load: where the model goes (cpu, cuda)")
    ap.add_argument("--json", help="with --load: write the record here too")
    args = ap.parse_args(argv)
    if args.load:
        record = load_starts(args.load, args.device, args.repeat)
        if args.json:
            import json

            Path(args.json).write_text(json.dumps(record, indent=1))
        print("\n".join(load_table(record)))
        return 0
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
    load = table[list(LOAD_PARTS)].sum(axis=1, min_count=1)
    loads = load.notna()
    print(f"\n{len(table)} jobs, {total:.0f} s in all, {start:.0f} s of it starting ({start / total:.0%}); "
          f"{int(loads.sum())} of them loaded a prepared model, {load.sum():.0f} s in all (a mean of "
          f"{load[loads].mean() if loads.any() else float('nan'):.1f} s: " + ", ".join(
              f"{part} {table.loc[loads, part].mean():.2f}" for part in LOAD_PARTS) + "), inside the work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
