"""Run the real Snakefile in a temporary folder, the way a user runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

import warmstart
from headwatch.jobs import copy_workflow

ROOT = Path(__file__).resolve().parents[1]
SCORES_TARGET = "results/tiny-llama/scores.parquet"     # models_prepare, two sequence sets, scores_heads


def make_workdir(path: Path) -> Path:
    """A copy of the workflow (not of results/) in ``path``."""
    return copy_workflow(ROOT, path)


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def tiny_config(model_dir: Path) -> dict:
    """The stage overrides of tests/configs/*.yaml, on one tiny local model."""
    config = {}
    for part in sorted((ROOT / "tests" / "configs").glob("*.yaml")):
        config = deep_merge(config, yaml.safe_load(part.read_text()) or {})
    return deep_merge(config, {"models": {"tiny-llama": {"source": str(model_dir), "dtype": "float32"}},
                               "models_studied": ["tiny-llama"]})


#: The tiny vocab study: the plain w16-h2 (heads_split's) and a 300-token byte-level BPE arm.
VOCAB_GRID = [{"width": 16, "heads": 2}, {"width": 16, "heads": 2, "vocab": "bpe300"}]


def with_vocab_study(config: dict) -> dict:
    """The tiny config with the tiny vocab study (characters vs a byte-level BPE vocabulary)."""
    sw = config["sweep"]
    return deep_merge(config, {"sweep": {
        "skip": [n for n in sw["skip"] if n != "vocab"],
        "sweeps": {"vocab": {"study": {"kind": "vocab"}, "grid": VOCAB_GRID, "seeds": [0, 1]}}}})


def git(workdir: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=workdir,
                          capture_output=True, text=True, check=True).stdout


def pristine(workdir: Path) -> Path:
    """Where the whole DAG's results (and Snakemake's metadata) are kept as its run made them, beside
    ``workdir``: the sweep's tests add to the run's own folder while other workers read it."""
    return workdir.parent / "pristine"


def whole_dag(workdir: Path, model_dir: Path) -> tuple[Path, Path, dict]:
    """The whole DAG on the tiny config (the vocab study included) in a committed checkout
    ``workdir``, timed as `make laptop` times its run (``results/timing/laptop.json``): the one run
    the workflow and the sweep tests read (tests/conftest.py, ``dag_run``)."""
    make_workdir(workdir)
    config = with_vocab_study(tiny_config(model_dir))
    configfile = write_config(workdir, config)
    git(workdir, "init", "-q")                  # a checkout, as the results page's provenance needs
    git(workdir, "add", "-A")
    git(workdir, "commit", "-q", "-m", "tiny")
    result = snakemake(workdir, "--configfile", str(configfile), timed="laptop", timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return workdir, configfile, config


def write_config(workdir: Path, config: dict, name: str = "tiny.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


#: This test process's warm-start server (tests/warmstart.py), started by the first run that needs it.
WARM = warmstart.Server(ROOT)


def job_env() -> dict:
    """The environment of the tests' Snakemake runs: offline, and each job started warm (forked from
    a process that has imported torch and transformers: most of a tiny job's cost is those imports)
    unless ``HEADWATCH_TEST_COLD=1``, where every job starts a fresh Python, as a user's run does."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    return env if os.environ.get("HEADWATCH_TEST_COLD") == "1" else WARM.env(env)


def snakemake(workdir: Path, *args: str, timeout: int = 900, timed: str | None = None) -> subprocess.CompletedProcess:
    """Snakemake in ``workdir``; ``timed``: through the Makefile's timer under that record name
    (``python -m headwatch.workflow.run_record timed laptop -- ...``, as `make laptop`)."""
    env = job_env()
    # --resources takes a list: it goes last so that it cannot swallow targets in ``args``.
    cmd = [sys.executable, "-m", "snakemake", *args, "--cores", "2", "--resources", "gpu=1"]
    if timed:
        cmd = [sys.executable, "-m", "headwatch.workflow.run_record", "timed", timed, "--", *cmd]
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)


def planned_jobs(result: subprocess.CompletedProcess) -> dict[str, int]:
    """{rule: count} from the job table of a `snakemake -n` run ({} when nothing to do)."""
    counts, in_table = {}, False
    for line in result.stdout.splitlines():
        parts = line.split()
        if parts[:2] == ["job", "count"]:
            in_table = True
            continue
        if in_table:
            if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
                counts[parts[0]] = int(parts[1])
            elif parts and parts[0] == "total":
                break
    return counts
