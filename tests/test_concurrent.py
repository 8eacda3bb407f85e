"""Two runs at once never collide: every file two processes can reach is written through a name of
its writer's own (``headwatch.paths.temporary``: host, process, 64 random bits) and put in place by
one rename (``paths.written``).

Two Snakemake runs started together in one folder (``--nolock``, as the GPU check starts its sweep
and model phases) once renamed one temporary ``results/run_config.yaml.tmp`` twice, and the second
run died. Here: the name itself, many processes writing one file at once, and 20 double-starts of
the real workflow with two different configurations, each of whose records must be one run's whole
record — the run that started last (docs/outputs.md)."""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from headwatch import paths
from headwatch.workflow import run_record

DOUBLE_STARTS = 20


# ------------------------------------------------------------------ the name
def test_a_temporary_name_is_unique_to_its_writer_and_bounded(tmp_path):
    target = tmp_path / "run_config.yaml"
    names = {paths.temporary(target) for _ in range(20_000)}
    assert len(names) == 20_000
    one = next(iter(names))
    assert one.parent == tmp_path and one.name.startswith(".run_config.yaml.") and one.name.endswith(".tmp")
    assert f"-{os.getpid()}-" in one.name
    long = paths.temporary(tmp_path / ("x" * 255))
    assert len(long.name) <= paths.TEMPORARY_NAME_MAX <= 255


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="mid-write"):
        with paths.written(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("mid-write")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
    with paths.written(target) as tmp:                 # a folder written through it, too
        tmp.write_text("new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def _write_many(args) -> str:
    """One process's writes of one record, all started at once (the barrier): '' or the error."""
    barrier, record, tag, times = args
    config = {"tag": tag, "sweep": {"sweeps": {}}, "values": list(range(200))}
    barrier.wait()
    try:
        for _ in range(times):
            run_record.write_record(record, config, f"config/config.yaml + {tag}.yaml")
    except Exception as err:          # noqa: BLE001 -- what a collision raises is the finding
        return f"{type(err).__name__}: {err}"
    return ""


def test_many_processes_writing_one_record_at_once_never_collide(tmp_path):
    """8 processes write results/run_config.yaml 40 times each, released together: no write fails,
    no temporary is left, and the record is one writer's whole record."""
    record = tmp_path / "results" / "run_config.yaml"
    n = 8
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(n)
    with ctx.Pool(n) as pool:
        errors = pool.map(_write_many, [(barrier, record, f"w{i}", 40) for i in range(n)])
    assert errors == [""] * n, errors
    assert sorted(p.name for p in record.parent.iterdir()) == ["run_config.yaml"]
    _whole_record(record, {f"w{i}": (lambda body, t=f"w{i}": body["tag"] == t) for i in range(n)})


# ------------------------------------------------------------------ two real runs at once
def _whole_record(record: Path, expected: dict) -> str:
    """The record is one run's, whole: the run its header names (the last config file's stem) is one
    of ``expected`` (stem → a function of the body that says whether the body is that run's), and the
    body, read as YAML, is that run's configuration. Returns the stem."""
    text = record.read_text()
    files = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("# config files:"))
    stem = Path(files.split(" + ")[-1]).stem
    assert stem in expected, (files, sorted(expected))
    assert expected[stem](yaml.safe_load(text)), (stem, text[:400])
    return stem


@pytest.fixture(scope="module")
def two_configs(tmp_path_factory, tiny_model_dir):
    """A copy of the workflow and two configurations that differ in one key (the corpus's size)."""
    from workflow import make_workdir, tiny_config, write_config

    workdir = make_workdir(tmp_path_factory.mktemp("concurrent"))
    sizes = {}
    for name, extra in (("a", 0), ("b", 1)):
        config = tiny_config(tiny_model_dir)
        config["sweep"]["corpus"]["target_chars"] += extra
        sizes[name] = config["sweep"]["corpus"]["target_chars"]
        write_config(workdir, config, f"{name}.yaml")
    return workdir, sizes


#: Each round: two Snakemake runs, each a process of its own forked from one that imported Snakemake once (its
#: import is half of a run's CPU here), started together; every run's exit status and output, then the record.
STARTER = """
import json, os, sys
from snakemake.cli import main

workdir, rounds, argvs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
os.chdir(workdir)
for i in range(rounds):
    pids = {}
    for name, argv in argvs.items():
        log = open(f"round{i}-{name}.log", "w")
        pid = os.fork()
        if pid == 0:                      # the run: this process's stdout and stderr to its log
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                main(argv)
            except SystemExit as stop:
                os._exit(stop.code if isinstance(stop.code, int) else 1)
            os._exit(0)
        pids[name] = pid
    codes = {name: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for name, pid in pids.items()}
    record = open("results/run_config.yaml").read()
    print(json.dumps(dict(codes=codes, record=record)), flush=True)
"""


def test_twenty_double_starts_of_the_workflow_never_collide(two_configs):
    """Two Snakemake runs of the workflow started together in one folder (``--nolock``), with two
    configurations, 20 times: every run succeeds, the record is always one run's whole record
    (the one whose start came last), and nothing temporary is left. The runs touch their job's
    outputs (``--touch``) instead of computing them: every write two runs share happens as a run
    starts (the record, the checks' cache); a job's own files are one job's. Each run is a process of
    its own, forked from one that imported Snakemake once (:data:`STARTER`)."""
    from workflow import job_env

    workdir, sizes = two_configs
    argvs = {name: [paths.sweep_corpus("meta"), "--configfile", f"{name}.yaml", "--forcerun", "sweep_corpus",
                    "--touch", "--nolock", "--cores", "1"] for name in sizes}
    done = subprocess.run([sys.executable, "-c", STARTER, str(workdir), str(DOUBLE_STARTS), json.dumps(argvs)],
                          env=job_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rounds) == DOUBLE_STARTS, done.stdout[-2000:] + done.stderr[-2000:]
    expected = {name: (lambda body, n=size: body["sweep"]["corpus"]["target_chars"] == n)
                for name, size in sizes.items()}
    failures = [(i, name, (workdir / f"round{i}-{name}.log").read_text()[-1500:])
                for i, r in enumerate(rounds) for name, code in r["codes"].items() if code != 0]
    assert not failures, failures[:2]
    for r in rounds:
        record = workdir / "record.yaml"
        record.write_text(r["record"])
        _whole_record(record, expected)
    leftovers = [str(p) for p in (workdir / "results").rglob("*.tmp")]
    assert not leftovers, leftovers
