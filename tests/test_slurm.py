"""The workflow on a real Slurm: a one-node cluster started here (cluster/local-slurm.sh),
jobs of the tiny DAG's spine submitted through snakemake-executor-plugin-slurm
with profiles/slurm, their tables identical to a local run's, and every model
job submitted with a GPU request (read back from `scontrol show job`: no accounting
database, so no sacct).

Slurm needs root and Debian's slurm-wlm + munge; the fixture installs them if
missing (apt-get, no service started) and skips, printing the daemons' own
error lines, only if the cluster cannot start."""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from workflow import ROOT, snakemake, write_config

SCRIPT = ROOT / "cluster" / "local-slurm.sh"
# The spine runs locally first; then the outputs of its two model rules
# (attention_maps, scores_heads: gpu=1) and of one CPU job (sequences_make for
# the prose set) are moved aside, and Snakemake remakes exactly those through
# Slurm in the same folder. Each Slurm job costs two Snakemake start-ups and the
# plugin's status polling: the other four jobs would add minutes, not checks.
TARGETS = ("results/tiny-llama/scores.parquet", "results/tiny-llama/predictions.parquet")
REMADE = ("scores.parquet", "predictions.parquet", "attention/maps.parquet", "attention/tokens.parquet",
          "sequences/prose.parquet")          # under results/tiny-llama/
SLURM_JOBS = ["attention_maps", "scores_heads", "sequences_make"]


# ------------------------------------------------------------ the profiles (no Slurm needed)

def gpu_rules(rules_dir: Path = ROOT / "rules") -> set[str]:
    """Rules whose resources declare a GPU (`gpu=` a number > 0 or a name: the whole GPU or one
    share of it, rules/common.smk), read from rules/*.smk."""
    found = set()
    for smk in rules_dir.glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)*)", smk.read_text(), re.M):
            if re.search(r"^\s+gpu\s*=\s*(?!0\b)\w", body, re.M):
                found.add(name)
    return found


PROFILE_ENV = ("HEADWATCH_SLURM_PARTITION", "HEADWATCH_SLURM_GPU_PARTITION", "HEADWATCH_SLURM_ACCOUNT")


def render_profile(path: Path, monkeypatch, **env: str) -> dict[str, list | str]:
    """The profile as Snakemake reads it (YTE rendered, flattened to CLI values),
    with exactly these HEADWATCH_SLURM_* variables set."""
    from snakemake.profiles import ProfileConfigFileParser

    with monkeypatch.context() as m:
        for key in PROFILE_ENV:
            m.delenv(key, raising=False)
        for key, value in env.items():
            m.setenv(key, value)
        with open(path) as f:
            return dict(ProfileConfigFileParser().parse(f))


def by_rule(set_resources: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in set_resources:
        rule, _, kv = item.partition(":")
        key, _, value = kv.partition("=")
        out.setdefault(rule, {})[key] = value
    return out


def test_gpu_rules_are_found_in_the_rules():
    # The parser the next test relies on: it must see the spine's model rules
    # and must not see rules without a gpu resource.
    found = gpu_rules()
    assert {"attention_maps", "scores_heads"} <= found
    assert not found & {"models_prepare", "sequences_make", "figures_grid"}


def test_slurm_profile_maps_every_gpu_rule_to_a_gpu_request(monkeypatch):
    profile = ROOT / "profiles" / "slurm" / "config.yaml"
    plain = render_profile(profile, monkeypatch)
    assert plain["executor"] == "slurm" and int(plain["retries"]) >= 1
    rules = by_rule(plain["set-resources"])
    # every rule that runs a model (and only those) is listed, asking for one GPU
    assert {r for r, res in rules.items() if res.get("gpu") == "1"} == gpu_rules()
    defaults = dict(item.split("=", 1) for item in plain["default-resources"])
    assert {"mem_mb", "runtime", "cpus_per_gpu"} <= set(defaults)
    # no cluster name in the profile: partition and account only from the environment
    assert "slurm_partition" not in defaults and "slurm_account" not in defaults
    assert not any("slurm_partition" in res for res in rules.values())

    named = render_profile(profile, monkeypatch, HEADWATCH_SLURM_PARTITION="cpuq",
                           HEADWATCH_SLURM_GPU_PARTITION="gpuq", HEADWATCH_SLURM_ACCOUNT="lab1")
    defaults = dict(item.split("=", 1) for item in named["default-resources"])
    assert defaults["slurm_partition"] == "'cpuq'" and defaults["slurm_account"] == "'lab1'"
    assert {res["slurm_partition"] for res in by_rule(named["set-resources"]).values()} == {"'gpuq'"}
    # without a separate GPU partition, model jobs go to the main one
    one = render_profile(profile, monkeypatch, HEADWATCH_SLURM_PARTITION="all")
    assert {res["slurm_partition"] for res in by_rule(one["set-resources"]).values()} == {"'all'"}


def test_default_profile_is_local_with_one_gpu_job_at_a_time(monkeypatch):
    local = render_profile(ROOT / "profiles" / "default" / "config.yaml", monkeypatch)
    assert "executor" not in local and local["cores"] == "all"
    assert local["resources"] == ["gpu=1"]


# ------------------------------------------------------------ a one-node Slurm

def _sh(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def _skip(reason: str, detail: str = ""):
    print(f"\nSLURM TEST SKIPPED: {reason}\n{detail}", file=sys.stderr)
    pytest.skip(f"{reason}\n{detail[-3000:]}")


@pytest.fixture(scope="module")
def slurm_cluster(request):
    """A running one-node Slurm; started here and stopped after the module
    (a cluster that was already running is used and left running)."""
    if os.name != "posix" or os.geteuid() != 0:
        _skip("a local Slurm needs root (slurmd, the munge key)")
    # One cluster per machine (fixed ports): serialize test runs that want it.
    lock = open("/tmp/headwatch-slurm.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    request.addfinalizer(lock.close)
    t = time.time()
    installed = _sh("install", timeout=900)          # returns at once when they are there
    print(f"\n{installed.stderr.strip()} ({time.time() - t:.0f} s)", file=sys.stderr)
    if installed.returncode != 0:
        _skip("slurm-wlm/munge could not be installed", installed.stdout + installed.stderr)
    was_running = _sh("status").returncode == 0
    started = _sh("start", timeout=120)
    if started.returncode != 0:
        _sh("stop")
        _skip("Slurm could not start on this machine; the daemons said:", started.stderr)
    if not was_running:
        request.addfinalizer(lambda: _sh("stop"))
    # no SLURM_CONF: the clients find the configless cluster's config themselves
    return dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")


def show_jobs(env: dict) -> list[dict[str, str]]:
    """Every job `scontrol show job` still knows (finished ones for MinJobAge), as dicts."""
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], env=env, capture_output=True,
                         text=True, check=True).stdout
    jobs = []
    for line in out.splitlines():
        fields = dict(m.groups() for m in re.finditer(r"(\S+?)=(\S*)", line))
        if "JobId" in fields:
            jobs.append(fields)
    return jobs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, slurm_cluster, scores_tree):
    """The spine locally, then its GPU jobs and one CPU job again through Slurm. The local part
    starts from a copy of the session's scores_tree (its model, sequences and scores are what
    tests/test_bad_inputs.py and tests/test_hostile.py read too): only the phrases and
    attention_maps are left to make here."""
    workdir = tmp_path_factory.mktemp("slurm") / "run"
    shutil.copytree(scores_tree[0], workdir, symlinks=True)
    configfile = str(write_config(workdir, scores_tree[1]))
    # (the helper's `--resources gpu=1` takes any words after it: the flag -p ends it)
    local = snakemake(workdir, "-p", *TARGETS, "--configfile", configfile)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    res, reference = workdir / "results" / "tiny-llama", workdir / "local"
    for name in REMADE:
        (reference / name).parent.mkdir(parents=True, exist_ok=True)
        (res / name).rename(reference / name)
    (workdir / "results" / "logs" / "attention_maps").rename(reference / "attention_maps_logs")

    cmd = [sys.executable, "-m", "snakemake", *TARGETS, "--executor", "slurm",
           "--workflow-profile", str(ROOT / "profiles" / "slurm"), "--configfile", configfile,
           # no accounting database here: status from squeue; no account is set, so the
           # plugin tries to guess one (sacct fails), warns and submits without -A
           "--slurm-status-command", "squeue",
           "--slurm-init-seconds-before-status-checks", "2",
           "--slurm-keep-successful-logs",
           "--retries", "0"]                  # a failure here should fail fast, not be retried 3 times
    t = time.time()
    result = subprocess.run(cmd, cwd=workdir, env=slurm_cluster, capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    print(f"\nSlurm run of {len(SLURM_JOBS)} jobs: {time.time() - t:.0f} s", file=sys.stderr)
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    jobs = [j for j in show_jobs(slurm_cluster) if j.get("JobName") == run_id]
    return reference, workdir, log, jobs


def test_outputs_identical_to_a_local_run(runs):
    reference, workdir, _, _ = runs
    for name in REMADE:
        a = pd.read_parquet(reference / name)
        b = pd.read_parquet(workdir / "results" / "tiny-llama" / name)
        assert len(a) > 0, name
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=name)


def rule_of(job: dict[str, str]) -> str:
    """The rule of a job submitted by the plugin (its --comment: rule_<name>_wildcards_<...>)."""
    return re.sub(r"^rule_(\w+?)(_wildcards_.*)?$", r"\1", job["Comment"])


def test_every_job_went_through_slurm(runs):
    _, workdir, log, jobs = runs
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", log)
    assert sorted(rule_of(j) for j in jobs) == SLURM_JOBS, [j["Comment"] for j in jobs]
    assert sorted(submitted) == sorted(j["JobId"] for j in jobs)
    assert all(j["JobState"] == "COMPLETED" for j in jobs), [(j["Comment"], j["JobState"]) for j in jobs]
    # the rule's own log (the local run's was moved aside) was written by the job
    # on the node: it asked for a GPU, saw none (the GRES is /dev/null) and ran on
    # the CPU, as device "auto" says
    assert "device=cpu" in (workdir / "results" / "logs" / "attention_maps" / "tiny-llama.log").read_text()


def test_model_jobs_asked_slurm_for_a_gpu_and_the_others_did_not(runs):
    _, _, _, jobs = runs
    gpu = [j for j in jobs if rule_of(j) in gpu_rules()]
    assert sorted(rule_of(j) for j in gpu) == ["attention_maps", "scores_heads"]
    for job in gpu:
        assert job["TresPerJob"] == "gres:gpu:1", job       # sbatch --gpus=1
        assert job["CpusPerTres"] == "gres:gpu:2", job      # --cpus-per-gpu=2 from the profile
        assert job["Partition"] == "debug", job             # the cluster's default: none named
    cpu = [j for j in jobs if j not in gpu]
    assert [rule_of(j) for j in cpu] == ["sequences_make"] and "prose" in cpu[0]["Comment"]
    for job in cpu:
        assert "gpu" not in job.get("TresPerJob", "") + job.get("TresPerNode", "") + job.get("CpusPerTres", ""), job
        assert job["NumCPUs"] == "1", job                   # --cpus-per-task = the rule's threads
