"""Run the real Snakefile in a temporary folder, the way a user runs it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from headwatch.workflow import copy_workflow

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


def write_config(workdir: Path, config: dict, name: str = "tiny.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    # --resources takes a list: it goes last so that it cannot swallow targets in ``args``.
    cmd = [sys.executable, "-m", "snakemake", *args, "--cores", "2", "--resources", "gpu=1"]
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
