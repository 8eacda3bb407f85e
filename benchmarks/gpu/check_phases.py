"""The GPU check's phases (section 4 of ``check.py``): the DAG in a copy of the workflow, run by
Snakemake in phases that name their targets from :mod:`headwatch.paths`, and the two phases that
time training steps in processes of their own (``benchmarks/train.py``).

``--phases`` is a comma-separated list of steps run one after another; a step is one Snakemake run
(``sweep+studies``: the targets of both phases in one run) or several side by side, joined by ``/``
(``sweep+studies/models``: two Snakemake processes at once, each with the whole ``--resources gpu``,
so that the GPU-light model jobs — most of their time is Python and CUDA starting — run beside the
training jobs instead of after them), or a step phase (:data:`STEP_PHASES`). :data:`DEFAULT` is the
order that gives the most when the time runs out (benchmarks/gpu/README.md sizes it for an H100)."""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

from check_model import MODEL_KEY
from check_records import (ARMS, ARMS_LOG, ARMS_RECORD, BENCH, BENCH_LOG, BENCH_RECORD, ROOT, STARTUP, STARTUP_LOG,
                           STARTUP_RECORD, say)
from headwatch import paths
from headwatch.workflow.gpu_shares import TRAIN_RULE
from headwatch.workflow.targets import SWEEP_TABLES

REPORT_RESERVE_S = 20          # kept for the report at the end of the time limit
GRACE_S = 60                   # before the limit: Snakemake starts no new job (at most 20 % of the limit)
KILL_AFTER_S = 30              # after the interrupt: what is still running is killed

#: The sweeps whose runs (and study tables, if they have any) the ``sweep`` phase trains besides the
#: runs its tables read (the split and capacity sweeps of ``sweep.summary`` and of each summarized pair
#: of ``sweep.summary.pairs``): the one place to name another arm of the paper's comparison — the
#: regularised arm's split and width control with dropout (config/config.yaml) — so that it trains in
#: the sweep phase, with the sweep's own, rather than among the studies, even where its pair is not
#: summarized (one of its sweeps skipped).
SWEEP_PHASE_SWEEPS: tuple[str, ...] = ("heads_split_drop", "width_drop")


def _under(path: str, folder: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(folder))


def _models(f: str) -> bool:
    """The studied random model's own outputs, in the folder of its scores (its explorer page is the
    report's)."""
    return _under(f, str(PurePosixPath(paths.scores(MODEL_KEY)).parent)) and f != paths.explorer(MODEL_KEY)


def _sweep(f: str) -> bool:
    """The sweep's own tables, the default pair's and each further pair's (their training runs come with
    them; the studies' do not), and every output of the sweeps of :data:`SWEEP_PHASE_SWEEPS`."""
    arms = {PurePosixPath(paths.sweep_stack(s, "any")).parent for s in SWEEP_PHASE_SWEEPS}
    pairs = PurePosixPath(paths.sweep_table("any", "any")).parent.parent
    return (f in {paths.sweep_table(t) for t in SWEEP_TABLES} or PurePosixPath(f).parent in arms
            or (PurePosixPath(f).parent.parent == pairs and PurePosixPath(f).name in
                {PurePosixPath(paths.sweep_table(t)).name for t in SWEEP_TABLES})
            or f in {paths.study_table(s, t) for s in SWEEP_PHASE_SWEEPS for t in paths.STUDY_TABLES})


def _studies(f: str) -> bool:
    """Everything else of the sweep: the studies' runs and tables, the courses, the heads study."""
    return _under(f, str(PurePosixPath(paths.sweep_table("any")).parent))


#: Phase -> which output files of the DAG it asks for (None: the default target, everything).
PHASES = {"models": _models, "sweep": _sweep, "studies": _studies, "rest": None}
STEP_PHASES = (BENCH, ARMS, STARTUP)         # phases that time things in a process of their own, not the DAG
DEFAULT = f"sweep+studies/models,{BENCH},{ARMS},{STARTUP},rest"
"""The whole check, in the order that gives the most: every training job (the sweep's, the regularised
arm's and the studies', longest first by their priorities) in one Snakemake run, with the model rules
beside it; the training step and the experts arms (reused when an earlier call of ``--phases
bench,arms`` finished them); a model job's start-up, cold and warm; then the figures, the pages and
the induction sweep (``rest``: the default target)."""
CPU_TINY = f"sweep/models,{BENCH},{ARMS}"
"""``--cpu-tiny``'s phases: the same steps, without the studies (tiny.yaml skips them) and the pages."""


def steps_of(phases: str) -> list[list[str]]:
    """``--phases`` as steps, each a list of Snakemake runs side by side (or one step phase)."""
    return [step.split("/") for step in phases.split(",")]


def unknown_phases(phases: str) -> list[str]:
    """The names in ``--phases`` that are no phase (a step phase stands alone in its step)."""
    out = []
    for step in steps_of(phases):
        for run in step:
            if run in STEP_PHASES and len(step) == 1:
                continue
            out += [p for p in run.split("+") if p not in PHASES]
    return out


def train_rules(outputs: dict[str, str]) -> list[str]:
    """The rules of the DAG that train (:data:`headwatch.workflow.gpu_shares.TRAIN_RULE`), as Snakemake
    lists them."""
    return sorted({rule for rule in outputs.values() if rule == TRAIN_RULE})


def snakemake_env() -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"), MPLBACKEND="Agg",
               PYTHONUNBUFFERED="1")
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return env


def dag_outputs(workdir: Path, configfile: Path) -> dict[str, str]:
    """Every output file of the DAG and the rule that makes it (Snakemake's --summary)."""
    out = subprocess.run([sys.executable, "-m", "snakemake", "--configfile", str(configfile), "--summary",
                          "--cores", "1", "--nolock"], cwd=workdir, env=snakemake_env(),
                         capture_output=True, text=True)
    rows = [line.split("\t") for line in out.stdout.splitlines()[1:] if line.count("\t") >= 2]
    if out.returncode or not rows:
        raise SystemExit(f"snakemake --summary failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return {r[0]: r[2] for r in rows}


def snakemake_cmd(args, configfile: Path, targets: list[str]) -> list[str]:
    # --resources takes a list: it goes last.
    return [sys.executable, "-m", "snakemake", *targets, "--configfile", str(configfile), "--cores",
            str(args.cores), "--rerun-incomplete", "--nolock", "--keep-going", "--resources", f"gpu={args.gpus}"]


def run_phases(runs: list[tuple[str, list[str], Path]], cwd: Path, deadline: float, grace: float = GRACE_S,
               kill_after: float = KILL_AFTER_S) -> list[dict]:
    """Run Snakemake processes side by side (``runs``: each its phase name, its command and its log)
    until each ends or the deadline (``time.monotonic()``): ``grace`` seconds before it, no new job
    (SIGTERM to each Snakemake: it lets running jobs finish); at it, Ctrl-C to every process of each
    run (SIGINT to its process group), then SIGKILL ``kill_after`` seconds later. One record each."""
    env = snakemake_env()
    t0 = time.monotonic()
    procs, logs = [], []
    for name, cmd, log in runs:
        fh = open(log, "w")
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        logs.append(fh)
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                      start_new_session=True))   # its own group: the interrupt reaches every job
    stop, kill_at = [None] * len(runs), None
    codes: list[int | None] = [None] * len(runs)
    ended = [None] * len(runs)
    while None in codes:
        time.sleep(0.5)
        now = time.monotonic()
        for i, proc in enumerate(procs):
            if codes[i] is not None:
                continue
            codes[i] = proc.poll()
            if codes[i] is not None:
                ended[i] = now
                continue
            try:
                if stop[i] is None and now >= deadline - grace:
                    proc.send_signal(signal.SIGTERM)
                    stop[i] = "no new jobs"
                if stop[i] not in ("interrupted", "killed") and now >= deadline:
                    os.killpg(proc.pid, signal.SIGINT)
                    stop[i], kill_at = "interrupted", now + kill_after
                if stop[i] == "interrupted" and now >= kill_at:
                    os.killpg(proc.pid, signal.SIGKILL)
                    stop[i] = "killed"
            except ProcessLookupError:
                pass
    out = []
    for (name, _, log), fh, rc, st, end in zip(runs, logs, codes, stop, ended):
        fh.close()
        text = log.read_text(errors="replace")
        failed = sorted(set(re.findall(r"Error in rule (\w+):", text)))
        out.append(dict(phase=name, returncode=rc, wall_s=round(end - t0, 1), stopped=st,
                        no_new_jobs_after_s=round(max(deadline - grace - t0, 0), 1) if st else None,
                        failed_rules=failed, log=str(log)))
    return out


def run_phase(name: str, cmd: list[str], cwd: Path, log: Path, deadline: float, grace: float = GRACE_S,
              kill_after: float = KILL_AFTER_S) -> dict:
    """One Snakemake run of :func:`run_phases`."""
    return run_phases([(name, cmd, log)], cwd, deadline, grace, kill_after)[0]


# ------------------------------------------------------------------ the step phases
def bench_shape(config: dict) -> dict:
    """The training step the sweep runs most: the capacity reference's larger model (the sweep's
    plain w256-h4 at paper scale), its layers, context and batch."""
    from headwatch.settings.sweep import SummarySettings, TrainSettings, train_of

    sweep = config["sweep"]
    capacity = SummarySettings.from_config(sweep["summary"]).capacity
    entry = next(e for e in sweep["sweeps"][capacity.sweep]["grid"] if e["width"] == capacity.to_width)
    return dict(width=entry["width"], heads=entry["heads"], layers=sweep["model"]["layers"],
                context=sweep["model"]["context"],
                batch=TrainSettings.from_config(train_of(sweep, capacity.sweep)).batch)


def step_phase_start(name: str, record_file: Path, budget: float) -> tuple[dict, bool]:
    """A phase that times steps in a process of its own (:data:`STEP_PHASES`): its record, and
    whether it is done already (a finished record from an earlier run, reused) or not started
    (under 20 s left)."""
    rec = dict(phase=name, returncode=None, wall_s=0.0, stopped=None, failed_rules=[], record=str(record_file))
    old = json.loads(record_file.read_text()) if record_file.exists() else {}
    if old.get("finished"):
        say(f"4. phase {name}: reused {record_file}")
        return dict(rec, returncode=0, reused=True), True
    if budget < 20:
        say(f"4. phase {name}: not started ({max(budget, 0):.0f} s left)")
        return dict(rec, skipped=f"{max(budget, 0):.0f} s left"), True
    return rec, False


def train_script(args, config: dict, record_file: Path, *options: str) -> list[str]:
    """benchmarks/train.py at the training step's shape (:func:`bench_shape`) on this check's device,
    writing ``record_file``, with these options."""
    return [sys.executable, str(ROOT / "benchmarks" / "train.py"), "--device", "cpu" if args.cpu_tiny else "cuda",
            *[a for k, v in bench_shape(config).items() for a in (f"--{k}", str(v))], *options,
            "--json", str(record_file)]


def run_step_phase(rec: dict, cmd: list[str], log: Path, budget: float) -> dict:
    """Run ``cmd`` (its output in ``log``) for at most ``budget`` seconds; at the limit its whole
    process group is stopped (the processes it started too) and the record says it was cut short."""
    t0 = time.monotonic()
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=snakemake_env(), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rec["returncode"] = proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rec["cut_short"] = f"cut short at {budget:.0f} s"
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    say(f"   {rec['phase']}: {rec['wall_s']:.1f} s, exit {rec['returncode']}"
        + (f", {rec['cut_short']}" if "cut_short" in rec else ""))
    return rec


def bench(args, config: dict, budget: float) -> dict:
    """Time one training step of a stack of the sweep's model (benchmarks/train.py; as many models as
    ``sweep.stack``, the most a training job trains at once): eager in float32 and in bf16 on a GPU
    (float32 alone with --cpu-tiny), for at most ``budget`` seconds. A finished record from an
    earlier run is reused; one cut short keeps what it measured."""
    record_file = args.workdir / BENCH_RECORD
    rec, done = step_phase_start(BENCH, record_file, budget)
    if done:
        return rec
    variants, steps, rounds, warmup = (("eager", 2, 1, 1) if args.cpu_tiny else ("eager,bf16", 10, 3, 3))
    stack = int(config["sweep"].get("stack") or 1)
    cmd = train_script(args, config, record_file, "--stack", str(stack), "--variants", variants, "--steps", str(steps),
                       "--rounds", str(rounds), "--warmup", str(warmup), "--threads", str(min(args.cores, 8)))
    say(f"4. phase {BENCH}: one training step of {bench_shape(config)}, {variants}, at most {budget:.0f} s")
    rec = run_step_phase(rec, cmd, args.workdir / BENCH_LOG, budget)
    if record_file.exists() and rec["returncode"] == 0:
        measured = json.loads(record_file.read_text())
        record_file.write_text(json.dumps(dict(measured, finished=True), indent=1))
    return rec


CPU_TINY_ARMS = 3
"""``--cpu-tiny`` times dense and the first two routings only: it checks the phase's machinery (each arm a
process of its own, a few seconds each on a CPU), not the arms' speed."""


def experts_arms(config: dict) -> tuple[list[str], int]:
    """The arms the ``arms`` phase times: dense, then each routing (experts E, top k) of the
    sweeps' experts entries once, in the config's order, as benchmarks/train.py names them
    (``e{E}k{k}``, ``b{w}`` with a balancing loss); and the models a stack trains (the first such
    sweep's seeds). Entries with their own ``expert_width`` are left out (the arm names give the
    default width only)."""
    from headwatch.charlm.spec import ModelSpec

    arms, stack, seen = ["dense"], None, set()
    for sweep in config["sweep"]["sweeps"].values():
        for entry in sweep.get("grid") or []:
            if not entry.get("experts") or entry.get("expert_width") is not None:
                continue
            stack = stack or len(sweep.get("seeds") or [0])
            routing = (int(entry["experts"]), int(entry.get("top_k", ModelSpec.top_k)))
            if routing not in seen:
                seen.add(routing)
                balance = entry.get("balance") or 0
                arms.append(f"e{routing[0]}k{routing[1]}" + (f"b{balance}" if balance else ""))
    return arms, stack or 1


def arms(args, config: dict, budget: float) -> dict:
    """Time a training step of each arm of :func:`experts_arms` at the training step's shape, in the
    sweep's precision (bf16 where the overlay set it; eager float32 with --cpu-tiny), each a stack of
    a study's seeds, with its costliest kernels and (CUDA) its host synchronisations, for at most
    ``budget`` seconds (``benchmarks/train.py --arms``; its process group is stopped at the limit and
    the record keeps the arms it measured). A finished record from an earlier run is reused."""
    record_file = args.workdir / ARMS_RECORD
    rec, done = step_phase_start(ARMS, record_file, budget)
    if done:
        return rec
    names, stack = experts_arms(config)
    names = names[:CPU_TINY_ARMS] if args.cpu_tiny else names
    if len(names) == 1:
        say(f"4. phase {ARMS}: no experts entry in the config's sweeps: nothing to compare")
        return dict(rec, returncode=0, note="no experts entry")
    variant = "bf16" if not args.cpu_tiny and config["sweep"].get("precision") == "bf16" else "eager"
    warmup, steps, top = (1, 2, 5) if args.cpu_tiny else (2, 3, 8)
    cmd = train_script(args, config, record_file, "--stack", str(stack), "--arms", ",".join(names), "--variants",
                       variant, "--steps", str(steps), "--rounds", "1", "--warmup", str(warmup), "--arm-profile",
                       str(top), "--threads", str(config["sweep"].get("threads") or 1))
    say(f"4. phase {ARMS}: a step of {', '.join(names)} at {bench_shape(config)}, {stack} models a stack, "
        f"{variant}, at most {budget:.0f} s")
    return run_step_phase(rec, cmd, args.workdir / ARMS_LOG, budget)


def startup(args, config: dict, budget: float) -> dict:
    """Time a model job's start-up on this check's device: the random model loaded by a fresh
    interpreter and by a process forked from one that imported torch and transformers once
    (``benchmarks/startup.py --load``; once each), for at most ``budget`` seconds: what a worker
    started once per device would save each model job, and whether a forked process starts CUDA. A
    finished record from an earlier run is reused."""
    record_file = args.workdir / STARTUP_RECORD
    rec, done = step_phase_start(STARTUP, record_file, budget)
    if done:
        return rec
    cmd = [sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--load", str(args.model_folder),
           "--device", "cpu" if args.cpu_tiny else "cuda", "--repeat", "1", "--json", str(record_file)]
    say(f"4. phase {STARTUP}: the random model loaded cold and warm, at most {budget:.0f} s")
    rec = run_step_phase(rec, cmd, args.workdir / STARTUP_LOG, budget)
    if record_file.exists() and rec["returncode"] == 0:
        record_file.write_text(json.dumps(dict(json.loads(record_file.read_text()), finished=True), indent=1))
    return rec


#: Each step phase: the function that runs it and the option that bounds its seconds.
STEP_TIMERS = {BENCH: (bench, "bench_seconds"), ARMS: (arms, "arms_seconds"), STARTUP: (startup, "startup_seconds")}
