"""The GPU check's records (section 5 of ``check.py``): what it prints and keeps, the files it writes
in its work folder and under ``--out``, and the report it makes from the files a run left — every
rule's wall time and peak memory, the jobs on CUDA, the sweep's tables, the training step's and the
experts arms' tables, every guard's figures. ``paper_tables.py`` reads a run through these
functions too. The bottom of the check's modules: it imports none of the others."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:      # the annotations only: pandas is imported where a table is read (a bare GPU machine lacks it at first)
    import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))     # this process imports the repository's headwatch, installed or not
from headwatch.paths import RESULTS  # noqa: E402  (the workflow's output folder: docs/outputs.md)

# ---- the check's own files in its work folder (beside the workflow's copy and its results/)
CONFIG_NAME = "gpu-check.yaml"               # the overlay
BENCH = "bench"        # the phase that times one training step: eager, torch.compile, CUDA graphs
BENCH_RECORD = "training-step.json"          # its figures (a finished one is reused)
BENCH_LOG = "training-step.log"              # its output
ARMS = "arms"          # the phase that times the studies' experts arms beside the dense model, with a profile
ARMS_RECORD = "training-arms.json"           # its figures (a finished one is reused)
ARMS_LOG = "training-arms.log"               # its output
STARTUP = "startup"    # the phase that times a model job's start-up, cold and warm (benchmarks/startup.py --load)
STARTUP_RECORD = "startup.json"              # its figures (a finished one is reused)
STARTUP_LOG = "startup.log"                  # its output
#: What a GPU machine lent for a session hands back: a few files, each of limited size, no deep
#: folders. So ``--out`` gets four files; the run's records travel in one archive (``ARCHIVE``).
OUT_FILES = ("report.txt", "report.json", "jobs.tsv")
ARCHIVE = "run.tar.gz"
OUT_FILE_LIMIT_MIB = 16.0
PACKED = (".parquet", ".json", ".tsv", ".log", ".yaml")

START = time.monotonic()
_printed: list[str] = []


def phase_log(workdir: Path, phase: str) -> Path:
    """Snakemake's output of one phase, in the work folder (packed in the archive)."""
    return workdir / f"snakemake-{phase}.log"


def say(line: str = "") -> None:
    """Print and keep (the report file holds everything printed)."""
    print(line, flush=True)
    _printed.append(line)


def elapsed() -> float:
    return time.monotonic() - START


# ------------------------------------------------------------------ the step phases' records
def train_module():
    """benchmarks/train.py, imported: its tables are the ones it prints itself."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import train

    return train


def bench_lines(workdir: Path) -> list[str]:
    """The training-step table, from the bench record (empty when there is none)."""
    path = workdir / BENCH_RECORD
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    return [f"model: width {r['width']}, heads {r['heads']}, layers {r['layers']}, {r['params']:,} parameters; "
            f"{r.get('stack', 1)} model(s) stacked a step, each batch {r['batch']} x context {r['context']}; "
            f"device {r['device']}, torch {r['torch']}; float32 "
            f"matmul rate {_fmt(max(r['matmul_rates'], default=float('nan')) / 1e9, '.1f')} GFLOP/s"
            + ("" if r.get("finished") else " (cut short: what it measured)")] + train_module().step_table(r)


def startup_lines(workdir: Path) -> list[str]:
    """The start-up table, from the startup record (empty when there is none)."""
    path = workdir / STARTUP_RECORD
    if not path.exists():
        return []
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import startup

    return startup.load_table(json.loads(path.read_text()))


def arms_lines(workdir: Path) -> list[str]:
    """The arms table, from the arms record (empty when there is none or it holds no arm)."""
    path = workdir / ARMS_RECORD
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    if not r["rows"]:
        return []
    return train_module().arms_table(r)


# ------------------------------------------------------------------ the DAG's records
def job_key(path: Path, base: Path) -> str:
    return str(path.relative_to(base).with_suffix(""))


def rule_of(key: str) -> str:
    return key.split("/")[0]


def collect_jobs(results: Path, since: float) -> "pd.DataFrame":
    """One row per job that left a log or a benchmark record: rule, its wildcards' path, wall
    time (benchmark), device and peak memory (the log's resources line), failed or not."""
    import pandas as pd

    from headwatch.jobs import read_resources

    rows: dict[str, dict] = {}
    logs, bench = results / "logs", results / "benchmarks"
    from headwatch.paths import FILE_RULES

    for p in sorted(logs.rglob("*.log")) if logs.is_dir() else []:
        if ".attempt-" in p.name or rule_of(job_key(p, logs)) in FILE_RULES:
            continue
        text = p.read_text(errors="replace")
        res = read_resources(text) or {}
        rows[job_key(p, logs)] = dict(
            device=res.get("device"), gpu=res.get("gpu"),
            peak_gpu_mib=res.get("peak_gpu_allocated_mib"), peak_gpu_reserved_mib=res.get("peak_gpu_reserved_mib"),
            peak_rss_mib=res.get("peak_rss_mib"), log_wall_s=res.get("wall_s"),
            failed="this attempt failed" in text, this_run=p.stat().st_mtime >= since)
    for p in sorted(bench.rglob("*.tsv")) if bench.is_dir() else []:
        if rule_of(job_key(p, bench)) in FILE_RULES:
            continue
        t = pd.read_csv(p, sep="\t")
        row = rows.setdefault(job_key(p, bench), {})
        row.update(wall_s=float(t["s"].iloc[-1]), max_rss_mib=float(t["max_rss"].iloc[-1]))
    df = pd.DataFrame([dict(job=k, rule=rule_of(k), **v) for k, v in rows.items()])
    if df.empty:
        return pd.DataFrame(columns=["job", "rule", "device", "wall_s", "peak_gpu_mib", "peak_rss_mib",
                                     "failed", "this_run"])
    for col in ("wall_s", "peak_gpu_mib", "peak_rss_mib", "device", "failed", "this_run"):
        if col not in df:
            df[col] = None
    return df


def interrupted(results: Path, rule: str, since: float) -> bool:
    """Did every log of ``rule`` that failed in this run fail on the check's own interrupt?"""
    texts = [p.read_text(errors="replace") for p in (results / "logs" / rule).rglob("*.log")
             if p.stat().st_mtime >= since] if (results / "logs" / rule).is_dir() else []
    failed = [t for t in texts if "this attempt failed" in t]
    return bool(failed) and all(re.search(r"^(KeyboardInterrupt|headwatch\.jobs\.Terminated)", t, re.M)
                                for t in failed)


def rules_table(jobs) -> "pd.DataFrame":
    import pandas as pd

    out = []
    for rule, g in jobs.groupby("rule", sort=False):
        walls = g["wall_s"].dropna()
        dev = sorted({str(d) for d in g["device"].dropna()})
        out.append(dict(rule=rule, jobs=len(g), cuda=int(g["device"].astype(str).str.startswith("cuda").sum()),
                        device=",".join(dev) or "-",
                        wall_s_total=math.fsum(walls) if len(walls) else float("nan"), wall_s_max=g["wall_s"].max(),
                        peak_gpu_mib=g["peak_gpu_mib"].max(), peak_rss_mib=g["peak_rss_mib"].max(),
                        failed=int(g["failed"].fillna(False).astype(bool).sum())))
    return pd.DataFrame(out).sort_values("wall_s_total", ascending=False, na_position="last")


def _fmt(x, spec=".4g") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def guard_bound(record: dict) -> float:
    """A guard record's bound: ``bound`` (derived from rounding), or ``tolerance``, the typed bound of the
    records written before bounds were derived (the H200 run's of 2026-12-04)."""
    return record["bound"] if "bound" in record else record["tolerance"]


def guards(results: Path) -> list[dict]:
    """Every guard's figures: each guard record (by its name) of each ablation rule's record, read
    where the rules write it for rule ``ablation_guards``
    (``results/{model}/ablation/guards/{experiment}.json``, so that a record left over from an older
    layout is not shown) and of the patching and path-patching rules' records where those rules ran
    (:func:`headwatch.workflow.targets.rule_guard_records`), then each model's anatomy records (:data:`headwatch.workflow.targets.MODEL_ANATOMY_FILES`,
    where :mod:`headwatch.paths` puts them; tables read through :mod:`headwatch.tableio`), found by
    what they hold: the weight check (``max_abs_delta``) and the key-group cuts (a table with
    ``others_max_delta``)."""
    from headwatch import paths
    from headwatch.tableio import guard_records, read_parquet, read_record
    from headwatch.workflow.targets import MODEL_ANATOMY_FILES, rule_guard_records

    rows = []
    if not results.is_dir():          # a run of only the bench phase made no results
        return rows
    models = sorted(p.name for p in results.iterdir() if p.is_dir())
    records = [under(results, p) for m in models for p in rule_guard_records(m)]
    for path in (p for p in records if p.exists()):
        rec = read_record(path)
        src = str(path.relative_to(results).with_suffix(""))
        dev = f"{rec.get('device')} {rec.get('dtype')}"
        for g in guard_records(rec):
            rows.append(dict(source=src, guard=g["guard"], cases=g["n_cases"], max_abs_diff=g["max_abs_diff"],
                             bound=guard_bound(g), identical=g["identical"], passed=g["passed"], device=dev))
    anatomy = [under(results, paths.model_anatomy(m, f)) for m in models for f in MODEL_ANATOMY_FILES]
    for path in (p for p in anatomy if p.suffix == ".json" and p.exists()):
        g = json.loads(path.read_text())
        if isinstance(g, dict) and "max_abs_delta" in g:
            rows.append(dict(source=str(path.relative_to(results).with_suffix("")),
                             guard="map by hand (float64) vs the model's", cases=1,
                             max_abs_diff=g["max_abs_delta"], bound=guard_bound(g), identical=None,
                             passed=g["passed"], device=f"{g.get('model_device')} {g.get('model_dtype')}"))
    deltas = ["others_max_delta", "before_max_delta", "restore_max_delta"]
    for path in (p for p in anatomy if p.suffix == ".parquet" and p.exists()):
        kv = read_parquet(path)
        if not set(deltas + ["role", "layer", "kv_group"]) <= set(kv.columns):
            continue
        for role, g in kv.groupby("role"):
            cuts = g.drop_duplicates(["layer", "kv_group"])
            worst = float(cuts[deltas].max().max())
            rows.append(dict(source=f"{path.relative_to(results).with_suffix('')} ({role})",
                             guard="key-group cut: other heads, earlier layers, restore", cases=len(cuts),
                             max_abs_diff=worst, bound=0.0, identical=worst == 0, passed=worst == 0,
                             device="-"))
    return rows


def tree_record(root: Path) -> dict:
    """The commit of the tree this check runs (``commit``, or None where it is not a git checkout: a copy
    without ``.git``) and whether its result inputs equal that commit (``clean``; None when unknown), as
    :func:`headwatch.workflow.provenance.require_clean_tree` judges it: ``paper_tables.py`` names it."""
    from headwatch.workflow.provenance import DirtyTreeError, NotACheckoutError, require_clean_tree

    try:
        return dict(commit=require_clean_tree(root), clean=True, why=None)
    except NotACheckoutError as err:
        return dict(commit=None, clean=None, why=str(err))
    except DirtyTreeError as err:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        return dict(commit=head.stdout.strip() or None, clean=False, why=str(err))


def records(df) -> list[dict]:
    """A table's rows as JSON-ready dicts, every float exact (``DataFrame.to_json`` keeps 10 decimal
    places: a guard's 7.8e-15 would read 0, as if exact), missing values None."""
    import pandas as pd

    def plain(v):
        if not isinstance(v, (list, tuple, dict, str)) and pd.isna(v):
            return None
        return v.item() if hasattr(v, "item") else v
    return [{k: plain(v) for k, v in row.items()} for row in df.astype(object).to_dict(orient="records")]


def table_text(df, floats: str = ".4g") -> str:
    return df.to_string(index=False, float_format=lambda v: format(v, floats), na_rep="-")


def under(results: Path, path: str) -> Path:
    """A path of :mod:`headwatch.paths` (``results/...``) inside the results folder ``results``."""
    return results / Path(path).relative_to(RESULTS)


def sweep_tables(results: Path) -> list[tuple[str, "pd.DataFrame"]]:
    """The sweep's summary and contrast (the default pair's, then each further pair's of
    ``sweep.summary.pairs``) and each study's table, from the results folder ``results`` (where
    :mod:`headwatch.paths` puts them; read through :mod:`headwatch.tableio`)."""
    from headwatch import paths
    from headwatch.tableio import read_parquet

    out = []
    pairs = under(results, paths.sweep_table("any", "any")).parent.parent
    for pair in [None] + (sorted(p.name for p in pairs.iterdir() if p.is_dir()) if pairs.is_dir() else []):
        for name in ("summary", "contrast"):
            p = under(results, paths.sweep_table(name, pair))
            if p.exists():
                out.append((f"sweep/{name}" if pair is None else f"sweep/pairs/{pair}/{name}", read_parquet(p)))
    for p in sorted(under(results, paths.study_table("any")).parent.glob("*.parquet")):
        if not p.stem.endswith("_finals"):
            out.append((f"sweep/studies/{p.stem}", read_parquet(p)))
    return out


# ------------------------------------------------------------------ what --out gets
def packed_files(workdir: Path) -> list[Path]:
    """What the archive holds, most wanted first: the overlay, the training-step record and its
    output, Snakemake's output per phase, then every table, log, guard record and benchmark record
    under ``results/`` (no weights, no checkpoints, nothing of ``results/models/``): the sweep's
    first, then by size."""
    own = [workdir / name for name in (CONFIG_NAME, BENCH_RECORD, BENCH_LOG, ARMS_RECORD, ARMS_LOG, STARTUP_RECORD,
                                       STARTUP_LOG)] + sorted(workdir.glob(phase_log(Path(), "*").name))
    results = workdir / RESULTS
    found = [p for p in results.rglob("*") if p.is_file() and p.suffix in PACKED
             and p.relative_to(results).parts[0] != "models"] if results.is_dir() else []
    found.sort(key=lambda p: (p.relative_to(results).parts[0] != "sweep", p.stat().st_size, str(p)))
    return [p for p in own if p.is_file()] + found


def pack_out(workdir: Path, out: Path, limit_mib: float = OUT_FILE_LIMIT_MIB) -> dict:
    """``out/run.tar.gz``: :func:`packed_files`, paths relative to the work folder, the archive kept
    under ``limit_mib`` (a file that would take it over is left out and named)."""
    import tarfile

    archive, budget = out / ARCHIVE, limit_mib * 2 ** 20 * 0.95      # gzip's tail and tar's padding
    packed, skipped = [], []
    with open(archive, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for p in packed_files(workdir):
            size = p.stat().st_size
            if raw.tell() + size > budget:          # parquet is compressed already: no gain to count on
                skipped.append(f"{p.relative_to(workdir)} ({size / 2 ** 20:.1f} MiB)")
                continue
            tar.add(p, arcname=str(p.relative_to(workdir)))
            packed.append(str(p.relative_to(workdir)))
    return dict(archive=str(archive), files=len(packed), mib=round(archive.stat().st_size / 2 ** 20, 2),
                skipped=skipped)


def unpack_out(out: Path, into: Path) -> Path:
    """The work folder's files from a check's ``out`` folder (its archive), extracted under ``into``."""
    import tarfile

    with tarfile.open(out / ARCHIVE) as tar:
        tar.extractall(into, filter="data")
    return into


def report(args, steps: dict, phases: list[dict], started_wall: float) -> dict:
    import pandas as pd

    results = args.workdir / RESULTS
    jobs = collect_jobs(results, started_wall)
    jobs.to_csv(args.out / "jobs.tsv", sep="\t", index=False)
    say("")
    say("== rules: wall time (Snakemake's benchmark records) and peak memory (each log's resources line)")
    rules = rules_table(jobs) if len(jobs) else pd.DataFrame()
    if len(rules):
        say(table_text(rules.rename(columns=dict(wall_s_total="wall_s", wall_s_max="max_job_s",
                                                 peak_gpu_mib="peak_gpu_MiB", peak_rss_mib="peak_rss_MiB")),
                       ".1f"))
    n_cuda = int(jobs["device"].astype(str).str.startswith("cuda").sum()) if len(jobs) else 0
    n_this = int(jobs["this_run"].fillna(False).astype(bool).sum()) if len(jobs) else 0
    say(f"jobs on CUDA (logs whose resources line names a cuda device): {n_cuda} of {len(jobs)} "
        f"({n_this} of them ran in this check, the others in an earlier one)")
    train = jobs[jobs["rule"].isin(args.train_rules)] if len(jobs) else jobs
    walls = {}
    say("")
    say("== sweep")
    for part, what in (("sweep", "the sweep's training jobs and its summary"), ("studies", "the studies")):
        phase = next((p for p in phases if part in p["phase"].split("+") and not p.get("skipped")), None)
        walls[part] = phase and phase["wall_s"]
        say(f"{part} phase ({phase['phase'] if phase else 'not run'}) wall time: {_fmt(walls[part], '.1f')} s "
            f"({what}, as scheduled with --resources gpu={args.gpus}"
            + (f"; {phase['stopped']}" if phase and phase.get("stopped") else "") + ")")
    if len(train):
        say(f"training jobs: {len(train)} with a log ({int(train['wall_s'].notna().sum())} finished), "
            f"{int(train['device'].astype(str).str.startswith('cuda').sum())} on CUDA; job wall time "
            f"sum {_fmt(train['wall_s'].sum(), '.1f')} s, mean {_fmt(train['wall_s'].mean(), '.1f')} s, "
            f"max {_fmt(train['wall_s'].max(), '.1f')} s; peak GPU memory of one job "
            f"{_fmt(train['peak_gpu_mib'].max(), '.1f')} MiB")
    for name, df in sweep_tables(results):
        say(f"-- {name}")
        say(table_text(df))
    say("")
    say(f"== training step (benchmarks/train.py; the {BENCH!r} phase)")
    for line in bench_lines(args.workdir) or ["not measured in this check"]:
        say(line)
    say("")
    say(f"== experts arms (benchmarks/train.py --arms; the {ARMS!r} phase): the studies' routing at the "
        "training step's shape")
    for line in arms_lines(args.workdir) or ["not measured in this check"]:
        say(line)
    say("")
    say(f"== a model job's start-up (benchmarks/startup.py --load; the {STARTUP!r} phase): a fresh process "
        "against one forked from a process that imported torch and transformers once")
    for line in startup_lines(args.workdir) or ["not measured in this check"]:
        say(line)
    say("")
    say("== guards (from the guard records); bound 0 means exact")
    g = pd.DataFrame(guards(results))
    if len(g):
        say(table_text(g, ".3g"))
    else:
        say("no guard record yet")
    return dict(jobs=len(jobs), jobs_on_cuda=n_cuda, jobs_this_run=n_this,
                rules=records(rules) if len(rules) else [],
                guards=records(g) if len(g) else [],
                sweep_phase_wall_s=walls["sweep"], studies_phase_wall_s=walls["studies"],
                training_step=json.loads((args.workdir / BENCH_RECORD).read_text())
                if (args.workdir / BENCH_RECORD).exists() else None,
                experts_arms=json.loads((args.workdir / ARMS_RECORD).read_text())
                if (args.workdir / ARMS_RECORD).exists() else None,
                startup=json.loads((args.workdir / STARTUP_RECORD).read_text())
                if (args.workdir / STARTUP_RECORD).exists() else None,
                training_jobs=len(train), training_wall_s_sum=float(train["wall_s"].sum()) if len(train) else None)
