"""Training jobs share a GPU (sweep.jobs_per_gpu) while `--resources gpu=1` still means one GPU:
the arithmetic of headwatch/workflow/gpu_shares.py, and Snakemake's own scheduler on the real rules.

The scheduler is run with `--touch` (no job runs; outputs are only marked), which, unlike a dry
run, chooses each round's jobs under the resource limits; `--verbose` prints each round's
choice and every job's resources."""
import os
import re
import subprocess
import sys

import pytest

from headwatch.workflow.gpu_shares import shares
from workflow import deep_merge, make_workdir, tiny_config, write_config

GPU_RULES = ("attention_maps", "scores_heads", "sweep_train")
TARGETS = ("results/tiny-llama/scores.parquet", "results/tiny-llama/predictions.parquet",
           "results/sweep/summary.parquet")


def test_the_gpu_is_counted_in_shares():
    assert shares(1, 3) == (3, 3, 1)          # 3 shares: three training jobs, or one other model job
    assert shares(2, 4) == (8, 4, 1)
    assert shares(4, 1) == (4, 1, 1)          # one model job per GPU, as without sharing
    assert shares(None, 3) == (None, 1, 1)    # no limit given (or a cluster's own): nothing to count
    assert shares(1, 8, 4) == (8, 2, 1)       # eight training jobs, or four model jobs, or a mix
    assert shares(1, 3, 2) == (6, 3, 2)       # the least common multiple: three training or two model jobs
    assert shares(1, 1, 4) == (4, 1, 4)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="sweep.jobs_per_gpu"):
            shares(1, bad)
        with pytest.raises(ValueError, match="model_jobs_per_gpu"):
            shares(1, 2, bad)


def rounds(output: str) -> list[list[tuple[str, int]]]:
    """Each scheduling round's jobs as (rule, gpu shares asked for), from `--touch --verbose`."""
    out, rule = [], None
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("Selected jobs:"):
            out.append([])
        elif re.match(r"^(local)?rule \w+:$", line):
            rule = line.split()[-1].rstrip(":")
        elif line.startswith("resources:") and out and rule:
            gpu = re.search(r"\bgpu=(\d+)", line)
            out[-1].append((rule, int(gpu.group(1)) if gpu else 0))
            rule = None
    return out


@pytest.fixture(scope="module")
def touch(tmp_path_factory, tiny_model_dir):
    base = tiny_config(tiny_model_dir)

    def run(jobs_per_gpu: int, *extra: str, model_jobs: int = 1):
        workdir = make_workdir(tmp_path_factory.mktemp(f"shares{jobs_per_gpu}"))
        config = deep_merge(base, {"sweep": {"jobs_per_gpu": jobs_per_gpu, "stack": 1},   # a job per run
                                   "model_jobs_per_gpu": model_jobs})
        cmd = [sys.executable, "-m", "snakemake", *TARGETS, "--touch", "--verbose", "--cores", "8",
               "--configfile", str(write_config(workdir, config)), *extra, "--resources", "gpu=1"]
        result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600,
                                env=dict(os.environ, HF_HUB_OFFLINE="1"))
        text = result.stdout + result.stderr
        assert result.returncode == 0, text[-3000:]
        return text, rounds(text)
    return run


def test_three_training_jobs_share_one_gpu_and_other_model_jobs_take_all_of_it(touch):
    text, picked = touch(3)
    assert "Resources before job selection: {'gpu': 3," in text          # gpu=1 given: 3 shares
    asked = {rule: gpu for r in picked for rule, gpu in r if rule in GPU_RULES}
    assert asked == {"attention_maps": 3, "scores_heads": 3, "sweep_train": 1}
    train = [sum(rule == "sweep_train" for rule, _ in r) for r in picked]
    assert max(train) == 3                                             # beside each other
    for r in picked:
        assert sum(gpu for _, gpu in r) <= 3
        if any(rule in ("attention_maps", "scores_heads") for rule, _ in r):
            assert sum(gpu > 0 for _, gpu in r) == 1, r                # alone on the GPU


@pytest.mark.parametrize("jobs_per_gpu, extra", [(1, ()), (3, ("--set-resources", "sweep_train:gpu=1"))],
                         ids=["one per gpu", "cluster profile sets the gpu"])
def test_without_sharing_one_model_job_at_a_time(touch, jobs_per_gpu, extra):
    text, picked = touch(jobs_per_gpu, *extra)
    assert "Resources before job selection: {'gpu': 1," in text
    assert all(sum(gpu > 0 for _, gpu in r) <= 1 for r in picked)
    assert {gpu for r in picked for rule, gpu in r if rule in GPU_RULES} == {1}
    assert sum(rule == "sweep_train" for r in picked for rule, _ in r) > 1


def test_model_jobs_share_the_gpu_when_asked(touch):
    """model_jobs_per_gpu: 2 with sweep.jobs_per_gpu: 2 — two shares; two model jobs, or two training
    jobs, run beside each other."""
    text, picked = touch(2, model_jobs=2)
    assert "Resources before job selection: {'gpu': 2," in text
    asked = {rule: gpu for r in picked for rule, gpu in r if rule in GPU_RULES}
    assert asked == {"attention_maps": 1, "scores_heads": 1, "sweep_train": 1}
    assert all(sum(gpu for _, gpu in r) <= 2 for r in picked)
    assert any(sum(gpu > 0 for _, gpu in r) == 2 for r in picked)             # two at once
