"""The GPU check (benchmarks/gpu/check.sh) in its --cpu-tiny mode, and what it reads: the
``resources:`` line every rule's log ends with and the kept log of a failed attempt
(headwatch.jobs.log_to), the exact-numerics settings of the guards (headwatch.model.device),
the shipped tokenizer and the wheel list.

The check runs once (a module fixture, ~60-100 s on 2 cores); each test compares a part of
its printed report with the files the run left, read here independently."""
from __future__ import annotations

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

import pandas as pd
import pytest
import torch
import yaml

from headwatch.model.device import exact_numerics, numerics, pick_device
from headwatch.paths import FILE_RULES
from headwatch.workflow.provenance import require_clean_tree, run_attempts
from headwatch.tableio import guard_records
from headwatch.jobs import keep_attempt_log, log_to, read_resources

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))
import check_install  # noqa: E402  (benchmarks/gpu/check.py's sections: install, model, phases, records)
import check_model  # noqa: E402
import check_phases  # noqa: E402
import check_records  # noqa: E402
import paper_tables  # noqa: E402  (benchmarks/gpu/paper_tables.py)


# ------------------------------------------------------------------ the check, tiny
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from workflow import job_env

    base = tmp_path_factory.mktemp("gpu-check")
    workdir, out = base / "run", base / "out"
    # Each job started warm, as every other Snakemake run of the tests (tests/warmstart.py): most of a tiny
    # model job is torch's and transformers' imports. The check's records are the jobs' own (their logs'
    # resources lines); only Snakemake's benchmark files time the hand-over, which no test here reads as a job's.
    env = dict(job_env(), PYTHON=sys.executable)
    env.pop("OUT", None)
    t0 = time.monotonic()
    # Alone on 2 cores the check takes about 160 s; in the suite the other worker shares those
    # cores (a CI run stopped it at 400 s of a 480 s limit). The limit is the check's own stop, not
    # a timing claim (benchmarks/ measure time): wide, so that a loaded machine passes.
    result = subprocess.run(["bash", str(GPU / "check.sh"), "--cpu-tiny", "--workdir", str(workdir),
                             "--out", str(out), "--cores", "2", "--time-limit", "1200"], env=env,
                            capture_output=True, text=True, timeout=1500)
    assert "STOPPED" not in result.stdout, result.stdout[-4000:]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    return dict(workdir=workdir, out=out, stdout=result.stdout, results=workdir / "results",
                seconds=time.monotonic() - t0)


def printed_table(stdout: str, header_start: str) -> list[list[str]]:
    """Rows (split on runs of spaces) of the table printed after the line starting ``header_start``."""
    lines = stdout.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[i + 2:]:           # the title, then the column names
        if not line.strip() or line.startswith(("jobs on CUDA", "==")):
            break
        rows.append(line.split())
    return rows


def test_the_steps_are_printed_in_order_and_the_report_file_holds_them(tiny):
    out = tiny["stdout"]
    steps = [out.index(s) for s in ("1. install", "2. model", "3. overlay", "4. phase", "== rules", "== sweep",
                                    "== guards", "== finished")]
    assert steps == sorted(steps)
    assert "nothing missing" in out        # this venv has every pin: nothing is installed
    assert (tiny["out"] / "report.txt").read_text().strip() == out.strip()


def test_the_overlay_studies_the_random_model_from_its_folder(tiny):
    cfg = yaml.safe_load((tiny["workdir"] / check_records.CONFIG_NAME).read_text())
    studied = cfg[check_model.studied_key()]
    assert studied == [check_model.MODEL_KEY]
    folder = Path(cfg[check_model.MODELS_KEY][check_model.MODEL_KEY]["source"])
    shape = json.loads((folder / "config.json").read_text())
    assert {k: shape[k] for k in check_model.TINY_SHAPE} == check_model.TINY_SHAPE
    assert shape["vocab_size"] == json.loads((GPU / "tokenizer" / "source.json").read_text())["vocab"]
    assert (tiny["results"] / "models" / check_model.MODEL_KEY / "prepared.json").exists()


def test_each_rules_wall_time_is_the_sum_of_its_benchmark_records(tiny):
    bench = tiny["results"] / "benchmarks"
    walls: dict[str, list[float]] = {}
    for p in bench.rglob("*.tsv"):
        rule = p.relative_to(bench).with_suffix("").parts[0]
        if rule not in FILE_RULES:          # jobs that only link a run's files are no rule's work
            walls.setdefault(rule, []).append(float(pd.read_csv(p, sep="\t")["s"].iloc[-1]))
    rows = {r[0]: r for r in printed_table(tiny["stdout"], "== rules")}
    assert set(walls) <= set(rows) and len(walls) >= 10
    for rule, wall in walls.items():
        # the check sums with math.fsum (correctly rounded, in any order): the same printed figure
        assert rows[rule][4] == format(math.fsum(wall), ".1f"), (rule, wall, rows[rule])
    # the model rules and the training jobs are among them
    assert {"scores_heads", "ablation_topk", "ablation_circuit", "ablation_attribution", "anatomy_weight_check",
            "anatomy_kv_groups", "sweep_train"} <= set(rows)


def test_no_job_touched_cuda_and_the_count_comes_from_the_logs(tiny):
    logs = [p for p in (tiny["results"] / "logs").rglob("*.log") if ".attempt-" not in p.name
            and p.relative_to(tiny["results"] / "logs").parts[0] not in FILE_RULES]
    records = [read_resources(p.read_text()) for p in logs]
    assert all(records), [str(p) for p, r in zip(logs, records) if not r]
    assert {r["device"] for r in records} == {"cpu"}
    assert all(r["peak_rss_mib"] > 50 and r["wall_s"] > 0 for r in records)
    m = re.search(r"jobs on CUDA \(logs whose resources line names a cuda device\): (\d+) of (\d+)", tiny["stdout"])
    assert m and (int(m.group(1)), int(m.group(2))) == (0, len(logs))
    for row in printed_table(tiny["stdout"], "== rules"):
        assert row[2] == "0" and row[3] == "cpu" and row[6] == "-"      # cuda jobs, device, peak GPU


def test_the_sweep_total_and_the_training_jobs_come_from_the_run(tiny):
    report = json.loads((tiny["out"] / "report.json").read_text())
    phase, models, bench, arms = report["steps"]["phases"]
    assert phase["phase"] == "sweep" and phase["returncode"] == 0 and not phase["stopped"]
    assert models["phase"] == "models" and models["returncode"] == 0      # beside it: its own Snakemake run
    assert "4. phase models (beside sweep)" in tiny["stdout"]
    assert bench["phase"] == check_records.BENCH and bench["returncode"] == 0
    assert arms["phase"] == check_records.ARMS and arms["returncode"] == 0 and "cut_short" not in arms
    assert f"sweep phase (sweep) wall time: {phase['wall_s']:.1f} s" in tiny["stdout"]
    assert "studies phase (not run) wall time: - s" in tiny["stdout"]       # tiny.yaml has no study
    metrics = [p for p in (tiny["results"] / "sweep").rglob("metrics.parquet") if "stacks" not in p.parts]
    stacks = list((tiny["results"] / "sweep").glob("*/stacks/*"))
    # heads_split's w16 and width's w8; the regularised pair's the same with dropout (its split's w16, its width's w8)
    assert len(metrics) == 12 and len(stacks) == report["training_jobs"] == 4
    assert sorted(p.parent.parent.name for p in stacks) == ["heads_split", "heads_split_drop", "width", "width_drop"]
    bench = sum(float(pd.read_csv(p, sep="\t")["s"].iloc[-1])
                for p in (tiny["results"] / "benchmarks" / "sweep_train").rglob("*.tsv"))
    assert report["training_wall_s_sum"] == pytest.approx(bench)       # (one rounding: the sums add in another order)
    assert f"job wall time sum {report['training_wall_s_sum']:.1f} s" in tiny["stdout"]
    summary = pd.read_parquet(tiny["results"] / "sweep" / "summary.parquet")
    assert "-- sweep/summary" in tiny["stdout"] and f"{summary.val_loss_mean.iloc[0]:.4g}" in tiny["stdout"]
    assert set(summary["sweep"]) == {"heads_split", "width"}               # the pair's sweeps join its own tables
    pair = pd.read_parquet(tiny["results"] / "sweep" / "pairs" / "regularised" / "summary.parquet")
    assert set(pair["sweep"]) == {"heads_split_drop", "width_drop"} and "-- sweep/pairs/regularised/contrast" in tiny["stdout"]


def test_the_training_step_is_timed_on_the_sweeps_plain_model_and_printed_from_its_record(tiny):
    record = json.loads((tiny["workdir"] / check_records.BENCH_RECORD).read_text())
    tiny_cfg = yaml.safe_load((GPU / "tiny.yaml").read_text())["sweep"]
    assert record["finished"] and record["device"] == "cpu"
    assert (record["width"], record["heads"]) == (16, 2)          # the capacity sweep's larger model
    assert (record["layers"], record["context"]) == (tiny_cfg["model"]["layers"], tiny_cfg["model"]["context"])
    assert record["batch"] == tiny_cfg["train"]["batch"]
    eager = record["variants"]["eager"]
    assert eager["steps"] == 2 and eager["best_s"] <= eager["median_s"]
    paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    assert record["stack"] == tiny_cfg.get("stack", paper["stack"])      # a stack as the sweep trains them
    assert eager["tokens_per_s"] == pytest.approx(record["stack"] * record["batch"] * record["context"]
                                                  / eager["best_s"])
    lines = tiny["stdout"].split("== training step", 1)[1].splitlines()
    row = next(line.split() for line in lines if line.startswith("eager"))
    assert row[1] == f"{eager['best_s']:.4f}" and row[3] == f"{eager['tokens_per_s']:,.0f}"
    assert json.loads((tiny["out"] / "report.json").read_text())["training_step"]["variants"] == record["variants"]


def test_the_experts_arms_are_the_studies_routings_each_timed_beside_the_dense_model(tiny):
    """The arms phase: dense, then each routing of the paper config's experts entries once (--cpu-tiny: the
    first two; tiny.yaml skips the studies, so their routing is timed at the tiny shape), each a stack of a
    study's seeds;
    the printed table is the record's, each arm against the dense step, with a profile of each."""
    record = json.loads((tiny["workdir"] / check_records.ARMS_RECORD).read_text())
    paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    names, stack = check_phases.experts_arms(paper)
    names = names[:check_phases.CPU_TINY_ARMS]                  # --cpu-tiny: dense and the first two routings
    assert len(names) == 3 and record["finished"] and [r["arm"] for r in record["rows"]] == names and names[0] == "dense"
    assert {r["variant"] for r in record["rows"]} == {"eager"} and record["stack"] == stack == 3
    step = json.loads((tiny["workdir"] / check_records.BENCH_RECORD).read_text())      # the training step's shape
    assert all(record[k] == step[k] for k in ("width", "heads", "layers", "context", "batch"))
    section = tiny["stdout"].split("== experts arms", 1)[1].split("== guards", 1)[0]
    dense = record["rows"][0]["best_s"]
    for r in record["rows"]:
        row = next(line.split() for line in section.splitlines() if line.startswith(f"{r['arm']} "))
        assert row[1:5] == ["eager", str(stack), "stack", f"{record['params'][r['arm']]:,}"]
        counts = r["ops_per_step"]
        assert row[-7:] == [f"{counts['ops']:,}/{counts['outermost']:,}", f"{r['best_s']:.4f}", f"{r['median_s']:.4f}",
                            f"{r['best_s'] / stack:.4f}", f"{r['tokens_per_s']:,.0f}", f"{r['best_s'] / dense:.2f}x",
                            "-"]                # no stack of one timed: no per-model comparison
        assert r["tokens_per_s"] == pytest.approx(stack * record["batch"] * record["context"] / r["best_s"])
        ops = r["profile"]["ops"]
        assert len(ops) == 5 and [o["ms_per_step"] for o in ops] == sorted((o["ms_per_step"] for o in ops),
                                                                            reverse=True)
        assert f"-- {r['arm']} eager (stack {stack}, routing stack): " in section
        assert "host_syncs_per_step" not in r     # no CUDA here
    assert any(o["op"] == "aten::_grouped_mm" for r in record["rows"][1:] for o in r["profile"]["ops"])
    assert json.loads((tiny["out"] / "report.json").read_text())["experts_arms"]["rows"] == record["rows"]


def test_the_experts_arms_take_each_routing_once_and_leave_out_their_own_expert_widths():
    sweeps = {"plain": {"grid": [{"width": 8, "heads": 2}], "seeds": [0]},
              "a": {"grid": [{"width": 8, "heads": 2, "experts": 4, "balance": 0.01},      # top_k: the default
                             {"width": 8, "heads": 2, "experts": 4, "top_k": 2, "balance": 0},   # the same routing
                             {"width": 8, "heads": 2, "experts": 8, "top_k": 1, "expert_width": 24},
                             {"width": 8, "heads": 2, "experts": 16, "top_k": 1}], "seeds": [0, 1, 2, 3]},
              "b": {"grid": [{"width": 8, "heads": 2, "experts": 2, "top_k": 1}], "seeds": [0]}}
    assert check_phases.experts_arms({"sweep": {"sweeps": sweeps}}) == (["dense", "e4k2b0.01", "e16k1", "e2k1"], 4)
    assert check_phases.experts_arms({"sweep": {"sweeps": {"plain": sweeps["plain"]}}}) == (["dense"], 1)


def test_a_check_of_the_step_phases_alone_reports(tmp_path):
    """Only the training step and a model job's start-up timed: no results folder exists, and the
    report still says what ran (the first GPU run's report stopped with FileNotFoundError there).
    The start-up: the random model loaded by a fresh process and by one forked from a process that
    had imported torch and transformers, each reaching a loaded model, the warm one sooner."""
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("OUT", None)
    result = subprocess.run(["bash", str(GPU / "check.sh"), "--cpu-tiny", "--workdir", str(tmp_path / "run"),
                             "--out", str(tmp_path / "out"), "--cores", "2", "--phases",
                             f"{check_records.BENCH},{check_records.STARTUP}", "--time-limit", "600", "--no-install",
                             "--set", "sweep.stack=2"], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (tmp_path / "run" / "results").exists()
    assert "no guard record yet" in result.stdout and "== finished" in result.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["training_step"]["stack"] == 2 and report["guards"] == [] and report["jobs"] == 0
    start = report["startup"]
    assert start["finished"] and [r["mode"] for r in start["rows"]] == ["cold", "warm"]
    cold, warm = start["rows"]
    for r in (cold, warm):
        assert "error" not in r and 0 < r["torch_s"] <= r["loading_imported_s"] < r["ready_s"]
        assert r["weights_s"] > 0 and r["tokenizer_s"] > 0
    assert warm["loading_imported_s"] < cold["loading_imported_s"]      # imported before it started
    assert f"cold {cold['ready_s']:.2f} s, warm {warm['ready_s']:.2f} s" in result.stdout


def test_the_training_step_keeps_what_it_measured_when_cut_short(tmp_path):
    """benchmarks/train.py writes its record as it goes: killed in its rounds, the warm-up is in it."""
    record = tmp_path / "step.json"
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "train.py"), "--width", "16", "--heads", "2",
                             "--layers", "1", "--batch", "2", "--context", "8", "--variants", "eager",
                             "--steps", "1", "--rounds", "100000", "--warmup", "1", "--threads", "1",
                             "--json", str(record)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (record.exists() and json.loads(record.read_text())["variants"]):
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    got = json.loads(record.read_text())
    assert got["variants"]["eager"]["steps"] >= 1 and "finished" not in got


def test_every_guard_record_is_printed_with_its_figures(tiny):
    rows = printed_table(tiny["stdout"], "== guards")
    text = "\n".join(" ".join(r) for r in rows)
    records = [p for p in (tiny["results"]).glob("*/ablation/**/*.json")
               if "restore" in json.loads(p.read_text())]
    assert len(records) == 3                      # topk, circuit, attribution
    for p in records:
        rec = json.loads(p.read_text())
        source = str(p.relative_to(tiny["results"]).with_suffix(""))
        mine = [r for r in rows if r[0] == source]
        assert any(" ".join(r).startswith(f"{source} hook_vs_weights {rec['hook_vs_weights']['n_cases']} "
                                          f"{rec['hook_vs_weights']['max_abs_diff']:.3g} 0 True True")
                   for r in mine), (source, mine)
        assert any(f"batched_vs_loop {rec['batched_vs_loop']['n_cases']} "
                   f"{rec['batched_vs_loop']['max_abs_diff']:.3g} {rec['batched_vs_loop']['bound']:.3g}" in " ".join(r)
                   for r in mine)
        assert sorted(r[1] for r in mine) == sorted(g["guard"] for g in guard_records(rec))   # every one
        assert rec["numerics"]["float32_matmul_precision"] == "highest"      # the guards ran exact
    # The patching and path-patching rules' records: every guard of each, by its name.
    later = sorted(tiny["results"].glob("*/patching/*guards.json")) + sorted(tiny["results"].glob("*/circuits/guards.json"))
    assert any(p.parent.name == "patching" for p in later)        # the check runs the patching rules
    for p in later:
        rec = json.loads(p.read_text())
        source = str(p.relative_to(tiny["results"]).with_suffix(""))
        mine = [r for r in rows if r[0] == source]
        assert sorted(r[1] for r in mine) == sorted(g["guard"] for g in guard_records(rec)) != [], (source, mine)
        first = guard_records(rec)[0]
        assert any(" ".join(r).startswith(f"{source} {first['guard']} {first['n_cases']} {first['max_abs_diff']:.3g} ")
                   for r in mine), (source, mine)
    wc = json.loads((tiny["results"] / check_model.MODEL_KEY / "anatomy" / "weight_check.json").read_text())
    assert f"map by hand (float64) vs the model's 1 {wc['max_abs_delta']:.3g} {wc['bound']:.3g}" in text
    assert text.count("key-group cut") == 2       # the model and its ungrouped control


def test_out_is_four_files_a_lent_machine_can_hand_back(tiny):
    """At most 8 files, each under 16 MiB, no folder, names of letters, digits, '.', '_', '-'."""
    out = tiny["out"]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted([*check_records.OUT_FILES, check_records.ARCHIVE])
    for p in out.iterdir():
        assert p.is_file() and 0 < p.stat().st_size < 16 * 2 ** 20 and re.fullmatch(r"[A-Za-z0-9._-]+", p.name)
    jobs = pd.read_csv(out / "jobs.tsv", sep="\t")
    assert len(jobs) == len([p for p in (tiny["results"] / "logs").rglob("*.log") if ".attempt-" not in p.name
                             and p.relative_to(tiny["results"] / "logs").parts[0] not in FILE_RULES])


def test_the_archive_holds_the_overlay_the_phase_logs_tables_logs_and_records_but_no_weights(tiny, tmp_path):
    import tarfile

    with tarfile.open(tiny["out"] / check_records.ARCHIVE) as tar:
        names = set(tar.getnames())
    made = {str(p.relative_to(tiny["workdir"])) for p in tiny["results"].rglob("*")
            if p.is_file() and p.suffix in (".parquet", ".json", ".tsv", ".log", ".yaml")
            and "models" != p.relative_to(tiny["results"]).parts[0]}
    assert names == made | {check_records.CONFIG_NAME, check_records.BENCH_RECORD, check_records.BENCH_LOG,
                            check_records.ARMS_RECORD, check_records.ARMS_LOG, "snakemake-sweep.log",
                            "snakemake-models.log"}
    assert not [n for n in names if n.endswith((".safetensors", ".pt"))]
    report = json.loads((tiny["out"] / "report.json").read_text())
    assert report["packed"]["files"] == len(names) and not report["packed"]["skipped"]
    back = check_records.unpack_out(tiny["out"], tmp_path)
    summary = "results/sweep/summary.parquet"
    assert pd.read_parquet(back / summary).equals(pd.read_parquet(tiny["workdir"] / summary))


def test_the_archive_stays_under_its_limit_and_names_what_it_left_out(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "results" / "sweep").mkdir(parents=True)
    (work / "results" / "m").mkdir(parents=True)
    out.mkdir()
    (work / check_records.CONFIG_NAME).write_text("models: {}\n")
    (work / "results" / "sweep" / "summary.parquet").write_bytes(os.urandom(200_000))
    (work / "results" / "m" / "maps.parquet").write_bytes(os.urandom(900_000))       # incompressible
    (work / "results" / "m" / "weights.pt").write_bytes(b"x" * 100)
    packed = check_records.pack_out(work, out, limit_mib=0.5)
    assert packed["files"] == 2 and len(packed["skipped"]) == 1 and "maps.parquet" in packed["skipped"][0]
    assert (out / check_records.ARCHIVE).stat().st_size < 0.5 * 2 ** 20


def test_a_rerun_has_nothing_to_do_and_keeps_what_was_made(tiny, tmp_path):
    """The resumable state: the same command again finds every target made (no job runs)."""
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("OUT", None)
    result = subprocess.run(["bash", str(GPU / "check.sh"), "--cpu-tiny", "--workdir", str(tiny["workdir"]),
                             "--out", str(tmp_path / "again"), "--cores", "2"], env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "reused" in result.stdout
    m = re.search(r"\((\d+) of them ran in this check", result.stdout)
    assert m and m.group(1) == "0"
    for phase in ("sweep", "models"):
        assert "Nothing to be done" in (tiny["workdir"] / f"snakemake-{phase}.log").read_text()
    for phase in (check_records.BENCH, check_records.ARMS):
        assert f"4. phase {phase}: reused" in result.stdout


def test_the_sweep_phase_asks_for_the_sweeps_tables_and_the_studies_phase_for_the_rest(monkeypatch):
    """The sweep's training runs come with its tables (what the studies read is not asked for), so
    run alone the head-count sweep finishes before any study starts; the phases name their files
    from headwatch.paths; the tables of each further pair of sweep.summary.pairs (the regularised arm's)
    are the sweep phase's too, and a sweep named in SWEEP_PHASE_SWEEPS (the regularised arm's two) joins
    the sweep phase with its runs and its study tables."""
    from headwatch import paths

    model = check_model.MODEL_KEY
    assert check_phases.SWEEP_PHASE_SWEEPS == ("heads_split_drop", "width_drop")
    files = [paths.sweep_table("summary"), paths.sweep_table("contrast"), paths.sweep_table("overfitting", "regularised"),
             paths.sweep_stack("width_drop", "w512-l4-drop0.2"),
             paths.sweep_run("heads_split", "w256-h1", 0, "model.pt"), paths.study_table("experts"),
             paths.sweep_stack("experts", "w256-l4-e8x512"), paths.sweep_stack("regularised", "w256-l4"),
             paths.study_table("regularised", "contrasts"), paths.scores(model), paths.explorer(model),
             "results/report.html", paths.sweep_table("summary", "regularised").replace(".parquet", ".json")]
    picked = lambda: {name: [f for f in files if select and select(f)]
                      for name, select in check_phases.PHASES.items()}
    assert picked()["sweep"] == files[:4]
    assert picked()["studies"] == files[:9] + files[12:]    # what the sweep phase made is already there: not redone
    assert picked()["models"] == [paths.scores(model)]
    assert check_phases.PHASES["rest"] is None           # the default target: everything
    monkeypatch.setattr(check_phases, "SWEEP_PHASE_SWEEPS", ("regularised",))
    assert picked()["sweep"] == files[:3] + files[7:9]


def test_phases_run_in_steps_one_after_another_and_side_by_side_within_a_step():
    assert check_phases.steps_of(check_phases.DEFAULT) == [["sweep+studies", "models"], ["bench"], ["arms"],
                                                           ["startup"], ["rest"]]
    assert check_phases.unknown_phases(check_phases.DEFAULT) == check_phases.unknown_phases(
        check_phases.CPU_TINY) == []
    assert check_phases.unknown_phases("models/bench,sweeps+rest") == ["bench", "sweeps"]   # a step phase alone


# ------------------------------------------------------------------ the time limit
def test_phases_side_by_side_are_each_stopped_at_the_deadline_and_timed_to_their_own_end(tmp_path):
    """Two runs at once: the one that ends early keeps its own wall time; the one still running at the
    deadline is asked to stop (SIGTERM) and ends of it."""
    runs = [("quick", [sys.executable, "-c", "pass"], tmp_path / "quick.log"),
            ("slow", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "slow.log")]
    t0 = time.monotonic()
    quick, slow = check_phases.run_phases(runs, tmp_path, deadline=time.monotonic() + 3.0, grace=1.0, kill_after=5)
    assert time.monotonic() - t0 < 15
    assert (quick["phase"], quick["returncode"], quick["stopped"]) == ("quick", 0, None)
    assert slow["stopped"] == "no new jobs" and slow["returncode"] == -signal.SIGTERM
    assert quick["wall_s"] < slow["wall_s"] and (tmp_path / "slow.log").read_text().startswith("$ ")


def test_a_phase_past_its_deadline_is_asked_to_stop_then_interrupted_then_killed(tmp_path):
    """A child that ignores SIGTERM and SIGINT: the phase sends both, then SIGKILL, and returns."""
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)")
    t0 = time.monotonic()
    rec = check_phases.run_phase("probe", [sys.executable, "-c", code], tmp_path, tmp_path / "probe.log",
                          deadline=time.monotonic() + 1.0, grace=0.5, kill_after=0.5)
    assert time.monotonic() - t0 < 10
    assert rec["stopped"] == "killed" and rec["returncode"] == -signal.SIGKILL
    rec = check_phases.run_phase("probe", [sys.executable, "-c", "import time; time.sleep(60)"], tmp_path,
                          tmp_path / "probe.log", deadline=time.monotonic() + 1.0, grace=0.5, kill_after=5)
    assert rec["stopped"] == "no new jobs" and rec["returncode"] == -signal.SIGTERM   # the graceful stop ended it


def test_a_job_cut_short_by_the_time_limit_is_not_called_a_failure(tmp_path):
    results = tmp_path / "results"
    logs = results / "logs" / "ablation_topk"
    logs.mkdir(parents=True)
    for name, error in (("a.log", "KeyboardInterrupt"), ("b.log", "headwatch.jobs.Terminated: 143")):
        with pytest.raises(BaseException):
            with log_to(logs / name):
                raise KeyboardInterrupt if error == "KeyboardInterrupt" else check_terminated()
    assert check_records.interrupted(results, "ablation_topk", since=0)
    with pytest.raises(ValueError):
        with log_to(logs / "c.log"):
            raise ValueError("a real failure")
    assert not check_records.interrupted(results, "ablation_topk", since=0)
    assert not check_records.interrupted(results, "no_such_rule", since=0)


def check_terminated():
    from headwatch.jobs import Terminated

    return Terminated(143)


# ------------------------------------------------------------------ log_to
def test_every_log_ends_with_its_resources_line(tmp_path):
    log = tmp_path / "rule.log"
    with log_to(log) as lg:
        lg.info("working")
        torch.ones(1000, 1000).sum()
    rec = read_resources(log.read_text())
    assert rec["device"] == "cpu" and rec["peak_rss_mib"] > 10 and rec["wall_s"] >= 0
    assert log.read_text().splitlines()[-1].split(" ", 3)[3].startswith("resources: device=cpu")
    assert read_resources("no such line") is None


def test_a_failed_attempts_log_is_kept_under_its_own_name(tmp_path):
    log = tmp_path / "logs" / "job.log"
    log.parent.mkdir()
    with pytest.raises(ZeroDivisionError):
        with log_to(log):
            1 / 0
    kept = log.with_name("job.attempt-1.log")
    assert os.path.samefile(kept, log) and "ZeroDivisionError" in kept.read_text()
    assert read_resources(kept.read_text())["device"] == "cpu"      # written after the link: in both
    log.unlink()                                                     # Snakemake, before the rerun
    with pytest.raises(KeyboardInterrupt):
        with log_to(log):
            raise KeyboardInterrupt
    assert "KeyboardInterrupt" in log.with_name("job.attempt-2.log").read_text()
    log.unlink()
    with log_to(log):
        pass
    assert sorted(p.name for p in log.parent.iterdir()) == ["job.attempt-1.log", "job.attempt-2.log", "job.log"]


def test_a_job_that_keeps_its_own_attempt_log_gets_no_second_one(tmp_path):
    log = tmp_path / "seed0.log"
    log.write_text("started\n")
    own = tmp_path / "seed0.attempt-3.log"
    os.link(log, own)                                  # what training does at its start
    assert keep_attempt_log(log) == (own, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0.attempt-3.log", "seed0.log"]


def test_sigterm_fails_the_job_with_its_log_kept(tmp_path):
    log = tmp_path / "job.log"
    code = ("import os, signal, time; from headwatch.jobs import log_to\n"
            f"with log_to({str(log)!r}):\n"
            "    os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 143
    text = log.with_name("job.attempt-1.log").read_text()
    assert "Terminated" in text and "resources: device=cpu" in text


def test_sys_exit_zero_is_not_a_failure(tmp_path):
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit):
        with log_to(log):
            sys.exit(0)
    assert [p.name for p in tmp_path.iterdir()] == ["job.log"]


# ------------------------------------------------------------------ device policy
def test_exact_numerics_sets_every_switch_and_restores_each_one():
    torch.set_float32_matmul_precision("high")         # as a TF32 user would leave it
    before = numerics()
    try:
        with exact_numerics() as inside:
            assert inside == numerics()
            assert inside["float32_matmul_precision"] == "highest" and inside["deterministic_algorithms"]
            assert all(v in ("ieee", False) for k, v in inside.items() if "tf32" in k or "fp32_precision" in k)
            assert not inside["cuda.matmul.allow_fp16_reduced_precision_reduction"]
            with exact_numerics():
                pass
            assert numerics() == inside                 # nested: the outer settings are back
        assert numerics() == before
        with pytest.raises(RuntimeError):
            with exact_numerics():
                raise RuntimeError("a failed guard")
        assert numerics() == before
    finally:
        torch.set_float32_matmul_precision("highest")


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


# ------------------------------------------------------------------ what the check ships
def test_the_shipped_tokenizer_is_the_default_models(smollm2_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    check_model.unpack_tokenizer(tmp_path)
    shipped = AutoTokenizer.from_pretrained(tmp_path)
    assert shipped.backend_tokenizer.to_str() == smollm2_tokenizer.backend_tokenizer.to_str()
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for phrase in config["phrases"].values():
        if "text" in phrase:
            assert shipped(phrase["text"]).input_ids == smollm2_tokenizer(phrase["text"]).input_ids


def test_the_wheel_list_pins_what_requirements_pins():
    pins = check_install.requirement_pins()
    listed = dict(line.split("==") for line in (GPU / "wheels.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    for name in check_install.NEEDED + check_install.PINNED:
        assert listed[name] == pins[name], name
    assert "torch" not in listed and "numpy" not in listed       # the GPU machine's own


def test_the_studied_models_key_is_found_in_the_config():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    key = check_model.studied_key()
    assert config[key] and all(m in config[check_model.MODELS_KEY] for m in config[key])


# ------------------------------------------------------------------ docs/results/paper-scale.md
def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A committed, clean copy of this tree (its tracked and not-ignored files) with the record a timed
    run leaves in results/: the run's command is a stand-in (the page test puts the tiny run's
    tables there), its commit and clean tree are real."""
    root = tmp_path_factory.mktemp("page") / "repo"
    for name in git(ROOT, "ls-files", "-co", "--exclude-standard", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tiny")
    done = subprocess.run([sys.executable, "-m", "headwatch.workflow.run_record", "timed", paper_tables.run_name(check_model.MODEL_KEY),
                           "--", sys.executable, "-c", "pass"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def write_page(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The checkout's own benchmarks/gpu/paper_tables.py, run in it."""
    return subprocess.run([sys.executable, str(root / "benchmarks" / "gpu" / "paper_tables.py"), *args], cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_the_results_page_is_written_from_the_tables(tiny, checkout, tmp_path):
    """benchmarks/gpu/paper_tables.py on the tiny run (its model as if it were SmolLM2, its $OUT as
    the GPU's), from a clean checkout: each number on the page is the one in the tables; the header
    names the commit and the command, the model's section the run's commit and its commands. A
    stale guard record in an older layout (ablation/checks/) lies beside the current ones."""
    results = checkout / "results"
    shutil.copytree(tiny["results"], results, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.pt", "*.safetensors", "*.gguf"))
    stale = results / check_model.MODEL_KEY / "ablation" / "checks" / "topk.json"
    stale.parent.mkdir(exist_ok=True)
    shutil.copy2(results / check_model.MODEL_KEY / "ablation" / "guards" / "topk.json", stale)
    page = tmp_path / "paper-scale.md"
    args = ["--smollm2", str(checkout / "results"), "--model", check_model.MODEL_KEY, "--gpu", str(tiny["out"]),
            "--out", str(page)]
    done = write_page(checkout, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    text = page.read_text()
    head = git(checkout, "rev-parse", "HEAD").strip()
    command = paper_tables.page_command(args)
    assert text.index(f"From commit `{head[:7]}` (`{head}`)") < text.index(f"## {check_model.MODEL_KEY} at paper scale")
    assert text.count(f"```sh\n{command}\n```") == 1                      # the page's header
    run = json.loads((checkout / "results" / "timing" / f"paper-{check_model.MODEL_KEY}.json").read_text())["attempts"][-1]
    assert run["commit"] == head
    assert (f"```sh\n{paper_tables.TIMED} paper-{check_model.MODEL_KEY} -- {run['command']} && {command}\n```"
            in text[text.index(f"## {check_model.MODEL_KEY} at paper scale"):])   # the section: the run, then the page
    m = checkout / "results" / check_model.MODEL_KEY
    assert "ablation/guards/topk" in text and "ablation/checks" not in text  # current guard names only
    assert "/patching/guards | nothing\\_patched |" in text                  # the patching rule's guards too
    scores = pd.read_parquet(m / "scores.parquet")
    top = scores.sort_values(["induction", "layer", "head"], ascending=[False, True, True]).iloc[0]
    assert "| 1 | " in text and f"L{int(top.layer)}H{int(top['head'])} {top.induction:.3f} |" in text
    topk = pd.read_parquet(m / "ablation" / "topk.parquet")
    for r in topk.itertuples():
        assert (f"| {r.method} | {r.k} | {r.targeted_heads} | {r.intact_copy1:.4f} | {r.targeted_copy1:.4f} | "
                f"{r.random_copy1_mean:.4f} ({r.random_copy1_min:.4f}–{r.random_copy1_max:.4f}) |") in text
    summary = pd.read_parquet(m / "ablation" / "attribution_summary.parquet")
    for r in summary.itertuples():
        assert f"| {r.phrase} | {r.expected!r} | {r.p_intact:.4f} | {r.costliest} |" in text
        assert f"| {r.prose_loss_intact:.4f} | {r.prose_loss_cut:.4f} | {r.cut_scope} |" in text
    seq = len(pd.read_parquet(m / "sequences" / "eval.parquet"))
    assert f"{seq} eval" in text
    sweep = pd.read_parquet(tiny["results"] / "sweep" / "summary.parquet")
    assert f"| {sweep.val_loss_mean.iloc[0]:.4f} |" in text
    # the sweep read again from its runs' metrics at both readings, the original's table and recipes beside
    best = pd.read_parquet(tiny["results"] / "sweep" / "summary_best.parquet")
    assert "### Two readings: at the last step and at each run's best (protocol §7)" in text
    assert f"| {best.val_loss_mean.iloc[0]:.4f} |" in text and "![two readings](paper-scale/readings.png)" in text
    for heading in ("### The width control, from the curves", "### The original beside ours, point by point",
                    "### What could explain the differences: the recipes side by side"):
        assert text.count(heading) == 1, heading
    assert "| 4 (64) | 1.5144 ± 0.0050 (1) | — | — |" in text      # the original's 4 heads: not in the tiny grid
    assert (page.parent / "paper-scale" / "readings.png").stat().st_size > 0
    assert text.count("**Not yet measured**") == 1        # the studies only: tiny.yaml skips them
    # the regularised pair (tiny.yaml's): its section written from the run's records, at both readings, beside the
    # plain pair and the original; its numbers those of the pair's own tables
    section = text[text.index("## The pair `regularised` at paper scale (GPU)"):text.index("## The studies at paper scale")]
    assert "Not yet run on a GPU" not in section and "dropout 0.2 (their notes)" in section
    pair = tiny["results"] / "sweep" / "pairs" / "regularised"
    for name in ("summary", "summary_best"):
        for r in pd.read_parquet(pair / f"{name}.parquet").itertuples():
            assert f"| {paper_tables.markdown(r.sweep)} | {r.shape} | {r.seeds} |" in section
            assert f"| {r.val_loss_mean:.4f} |" in section, (name, r.shape)
    contrast = pd.read_parquet(pair / "contrast_best.parquet").iloc[0]
    assert f"| dropout 0.2 | at each run's best | {contrast.best_shape} | {contrast.worst_shape} |" in section
    assert "### Beside the default pair and the original: what dropout 0.2 changes" in section
    assert "| dropout 0 | at the last step |" in section and "### The original beside this pair" in section
    assert (page.parent / "paper-scale" / "pairs" / "regularised" / "readings.png").stat().st_size > 0
    assert "Jobs on CUDA: 0 of" in text
    assert "### One training step of the sweep's model" in text and "| eager |" in text
    arms = json.loads((tiny["workdir"] / check_records.ARMS_RECORD).read_text())
    for r in arms["rows"]:       # each arm's row, its params and its costliest operator, from the record
        assert f"| {paper_tables.markdown(r['arm'])} | {r['variant']} | {arms['params'][r['arm']]:,} |" in text
        top = r["profile"]["ops"][0]
        assert (f"| {paper_tables.markdown(r['arm'])} | {r['variant']} | 1 | {paper_tables.markdown(top['op'])} | "
                f"{top['ms_per_step']:.3g} | {top['share']:.1%} |") in text

    # the GPU part alone, later: the model's section is kept as it was
    model_part = text[text.index(f"## {check_model.MODEL_KEY} at paper scale"):text.index(paper_tables.GPU_HEADING)]
    again = write_page(checkout, "--model", check_model.MODEL_KEY, "--gpu", str(tiny["out"]), "--out", str(page))
    assert again.returncode == 0, again.stderr[-3000:]
    assert model_part in page.read_text() and page.read_text().count(paper_tables.GPU_HEADING) == 1
    # a check resumed by running it again: each run's folder, in order; the phases of each, one commit
    report = json.loads((tiny["out"] / "report.json").read_text())
    twice = write_page(checkout, "--model", check_model.MODEL_KEY, "--gpu", str(tiny["out"]), str(tiny["out"]),
                       "--out", str(page))
    assert twice.returncode == 0, twice.stderr[-3000:]
    text = page.read_text()
    assert "Run 1 of 2: at " in text and "Run 2 of 2: at " in text
    for run in (1, 2):
        for phase in report["steps"]["phases"]:
            assert f"| {run} | {phase['phase']} | " in text
    fresh = write_page(checkout, "--gpu", str(tiny["out"]), "--out", str(tmp_path / "none.md"))
    assert fresh.returncode != 0 and "give --smollm2" in fresh.stderr


def test_the_results_page_refuses_a_dirty_tree_and_a_run_of_other_code(checkout, tmp_path):
    """Nothing is written (exit status 1, the file named) from a tree with an uncommitted change to
    a result input, nor from results whose run was made at a commit with other result inputs."""
    page = tmp_path / "paper-scale.md"
    args = ["--smollm2", str(checkout / "results"), "--model", check_model.MODEL_KEY, "--out", str(page)]
    rules = checkout / "rules" / "ablation.smk"
    kept, committed = rules.read_text(), False
    try:
        rules.write_text(kept + "\n")
        done = write_page(checkout, *args)
        assert done.returncode == 1 and "refused" in done.stderr and "rules/ablation.smk" in done.stderr
        assert not page.exists()
        # committed: the tree is clean, but the results were computed by the commit before
        git(checkout, "commit", "-q", "-am", "a changed rule")
        committed = True
        done = write_page(checkout, *args)
        assert done.returncode == 1 and "result inputs differ" in done.stderr and "rules/ablation.smk" in done.stderr
        assert not page.exists()
    finally:
        if committed:
            git(checkout, "reset", "-q", "--hard", "HEAD~1")
        else:
            rules.write_text(kept)
    head = require_clean_tree(checkout)                          # back at the run's commit, clean
    assert run_attempts(checkout, checkout / "results" / "timing" / f"paper-{check_model.MODEL_KEY}.json", head)


def test_the_run_command_asks_for_the_models_page_targets_timed():
    cmd = paper_tables.run_command(check_model.MODEL_KEY)
    assert cmd.startswith(f"{paper_tables.TIMED} paper-{check_model.MODEL_KEY} -- .venv/bin/snakemake ")
    wanted = cmd.split()
    for target in (f"results/{check_model.MODEL_KEY}/scores.parquet", f"results/{check_model.MODEL_KEY}/ablation/topk.parquet",
                   f"results/{check_model.MODEL_KEY}/ablation/attribution_summary.parquet",
                   f"results/{check_model.MODEL_KEY}/ablation/circuit_scores.parquet",
                   f"results/{check_model.MODEL_KEY}/ablation/guards.json",
                   f"results/{check_model.MODEL_KEY}/anatomy/weight_check.json"):
        assert target in wanted
    assert f"results/{check_model.MODEL_KEY}/patching/resid.parquet" in wanted
    # Snakemake's --resources takes every word after it: the targets must come before the options.
    options = wanted.index("--cores", wanted.index(".venv/bin/snakemake"))
    assert all(w.startswith("results/") for w in wanted[wanted.index(".venv/bin/snakemake") + 1:options])
    assert not any(w.startswith("results/") for w in wanted[options:])
    printed = subprocess.run([sys.executable, str(GPU / "paper_tables.py"), "--model", check_model.MODEL_KEY,
                              "--run-command"], capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0 and printed.stdout.strip() == cmd


H200 = ROOT / "benchmarks" / "gpu" / "runs" / "2026-12-04-h200" / "run-2"


def test_the_committed_h200_sweep_is_read_both_ways_from_its_records(tmp_path):
    """paper_tables.sweep_records on the committed H200 archive: each configuration's last and best validation
    loss, the step of its best, its training loss at the end and its rise agree with the run's own curves table
    (results/sweep/curves.parquet, written by the run) read by hand here; every width-256 split but 32 heads and
    the widest model overfit; the widest model's best falls at 800–1000 of 2000."""
    run = check_records.unpack_out(H200, tmp_path)
    rec = paper_tables.sweep_records(run)
    curves = pd.read_parquet(run / "results" / "sweep" / "curves.parquet").drop_duplicates(
        ["trained_under", "shape", "seed", "step"])
    last = curves[curves["step"] == curves.groupby(["trained_under", "shape", "seed"])["step"].transform("max")]
    low = curves.loc[curves.groupby(["trained_under", "shape", "seed"])["val_loss"].idxmin()]
    fit = rec["fit"].drop_duplicates(["trained_under", "shape"]).set_index("shape")
    for shape, f in fit.iterrows():
        a, b = last[last["shape"] == shape], low[low["shape"] == shape]
        assert f["last_mean"] == pytest.approx(a["val_loss"].mean()) and f["best_mean"] == pytest.approx(b["val_loss"].mean())
        assert (f["best_step_min"], f["best_step_max"]) == (b["step"].min(), b["step"].max())
        assert f["train_loss_mean"] == pytest.approx(a["train_loss"].mean())
        assert f["rise_mean"] == pytest.approx(a["val_loss"].mean() - b["val_loss"].mean())
    assert sorted(fit.index[fit["verdict"] == "overfits"]) == sorted(
        ["w256-h1", "w256-h2", "w256-h4", "w256-h8", "w256-h16", "w512-h8"])
    assert (fit.loc["w512-h8", "best_step_min"], fit.loc["w512-h8", "best_step_max"]) == (800, 1000)
    assert fit["rise_mean"].idxmax() == "w512-h8" and fit["train_loss_mean"].idxmin() == "w512-h8"
    # the last reading is the summary the run itself wrote
    written = pd.read_parquet(run / "results" / "sweep" / "summary.parquet").set_index(["sweep", "shape"])
    ours = rec["summaries"]["last"].set_index(["sweep", "shape"])
    assert ours["val_loss_mean"].to_numpy() == pytest.approx(written.loc[ours.index, "val_loss_mean"].to_numpy())


def test_the_pages_regularised_section_says_it_awaits_a_gpu_run_while_the_records_lack_it(tmp_path):
    """The committed H200 records predate the regularised pair: its section says so, with the commands that give
    it; records whose configuration names the pair but whose runs did not end say how many did."""
    from headwatch import paths
    from headwatch.workflow import run_record

    run = check_records.unpack_out(H200, tmp_path)
    facts = paper_tables.sweep_facts(run_record.config_of(ROOT))["pairs"]["regularised"]
    assert facts["runs"] == 24 and facts["dropout"] == [0.2] and (facts["split"], facts["capacity"]) == (
        "heads_split_drop", "width_drop")
    assert paper_tables.pair_state(run, "regularised").startswith(
        "their configuration names no pair `regularised` in `sweep.summary.pairs`")
    text = "\n".join(paper_tables.pair_section("regularised", facts, run, paper_tables.sweep_records(run), None))
    assert "**Not yet run on a GPU**" in text and all(f"`{c}`" in text for c in paper_tables.NEXT_GPU_CALLS)
    assert "## The pair `regularised` at paper scale (GPU): the head split and the width control with dropout 0.2" in text
    assert "Not yet run" in "\n".join(paper_tables.pair_section("regularised", facts, None, None, None))
    config = run / paths.run_config()                 # a configuration that names it, none of its runs there
    recorded = yaml.safe_load(config.read_text())
    recorded["sweep"] = run_record.config_of(ROOT)["sweep"]
    config.write_text(yaml.safe_dump(recorded))
    assert paper_tables.pair_state(run, "regularised") == "0 of the pair's 24 runs had ended when the check stopped"
    recorded["sweep"]["skip"] = ["width_drop"]
    config.write_text(yaml.safe_dump(recorded))
    assert paper_tables.pair_state(run, "regularised").startswith("their configuration left the pair's sweeps out")
    config.unlink()                                  # a check of the step phases alone runs no job of the workflow
    assert paper_tables.pair_state(run, "regularised").startswith("the check ran no job of the workflow")


def test_the_original_figures_are_computed_from_its_table_as_it_published_them():
    """benchmarks/original.py: run-062's spread, seed noise, their ratio and the width gain, computed from its
    table, round to the figures it published; its parameter counts are this repository's model at 65
    characters."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import original
    from headwatch.charlm.spec import ModelSpec

    o, r = original.run_062_figures(), original.RUN_062_REPORTED
    assert (round(o["spread"], 4), round(o["seed_noise"], 4), round(o["gain"], 4)) == (r["spread"], r["seed_noise"], r["gain"])
    assert round(o["gain_over_spread"], 1) == r["gain_over_spread"] and round(o["spread_over_std"]) == r["spread_over_noise"]
    assert (o["best_heads"], o["worst_heads"]) == (4, 32)
    for x in original.RUN_062["splits"] + original.RUN_062["widths"]:
        spec = ModelSpec(65, x.get("width", original.RUN_062["split_width"]), x["heads"], layers=4, context=128)
        assert spec.param_counts()["total"] == x["params"]
    assert original.ORIGINAL_LONG["chars"] == 2000 * 64 * 128


def test_the_patching_section_is_written_from_the_tables(tmp_path):
    """The page's 5d section on hand-made patching tables: every number is the tables' or their
    note's; a pairs file's section names the file and its lengths; page text from a table is text."""
    from headwatch import paths
    from headwatch.tableio import write_parquet

    model = "m1"
    heads = pd.DataFrame(dict(layer=[0, 0, 1, 1], head=[0, 1, 0, 1], label=["L0H0", "L0H1", "L1H0", "L1H1"],
                              logit_diff=[0.5, 2.5, 1.25, 0.75], score=[0.1, 0.9, 0.4, 0.2],
                              estimate_logit_diff=[0.4, 2.0, 1.5, 0.5], estimate_score=[0.08, 0.7, 0.5, 0.1],
                              score_rank=[4, 1, 2, 3], estimate_rank=[4, 1, 2, 3]))
    resid = pd.DataFrame(dict(layer=[0, 0, 1, 1], position=[-2, -1, -2, -1], token=["−2 *x*", "−1 ␣to"] * 2,
                              logit_diff=[1.0, 2.0, 3.0, 0.5], score=[0.25, 0.5, 0.875, 0.125], prompts=[2, 3, 2, 3]))
    where = pd.DataFrame(dict(layer=[0, 0], head=[1, 1], label=["L0H1"] * 2, head_rank=[1, 1], position=[-2, -1],
                              token=["−2 *x*", "−1 ␣to"], logit_diff=[1.5, 0.2], score=[0.625, 0.0625], prompts=[2, 3]))
    note = dict(prompts=3, length=5, lengths=[4, 5, 5], pairs="data/p.csv", pairs_sha256="ab" * 32,
                clean_logit_diff=3.0, corrupted_logit_diff=0.25, names_phrase="names: p(IO = ' Mary') = 0.5",
                estimate_pearson=0.987654, estimate_spearman=0.8, estimate_top10_overlap=3, top10=4,
                exact_seconds=12.34, estimate_seconds=0.56)
    for name, t in (("heads", heads), ("resid", resid), ("positions", where)):
        path = tmp_path / Path(paths.patching_table(model, name)).relative_to(paths.RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(t, path, note=note)
    text = "\n".join(paper_tables.patching_section(tmp_path, model))
    assert "3 prompts from the rows of the pairs file `data/p.csv` (SHA-256 `abababababababab…`), of 4–5 tokens" in text
    assert "clean 3.0000, corrupted 0.2500" in text and "Pearson 0.988, Spearman 0.800, top-4 overlap 3/4" in text
    assert "exact head sweep 12.3 s, estimate 0.56 s" in text
    assert text.index("| L0H1 | 0.900 | 2.500 | 0.700 | 1 |") < text.index("| L1H0 | 0.400 | 1.250 | 0.500 | 2 |")
    assert "| 0 | -1 | −1 ␣to | 0.500 |" in text and "| 1 | -2 | −2 \\*x\\* | 0.875 |" in text
    assert "| L0H1 | 1 | -2 | −2 \\*x\\* | 0.625 |" in text
    assert f"results/{model}/patching/heads.parquet" in paper_tables.run_command(model).split()


def test_the_report_keeps_every_figure_exact_and_names_its_commit(tiny):
    """report.json holds a guard's figure as the record has it (pandas' to_json would keep 10 decimal
    places: 7.8e-15 read 0, as if exact) and the tree the check ran (its commit, whether clean)."""
    frame = pd.DataFrame(dict(max_abs_diff=[7.771561172376096e-15, float("nan")], cases=[37, 2],
                              identical=[False, None]))
    assert check_records.records(frame) == [dict(max_abs_diff=7.771561172376096e-15, cases=37, identical=False),
                                    dict(max_abs_diff=None, cases=2, identical=None)]
    report = json.loads((tiny["out"] / "report.json").read_text())
    records = {(g["source"], g["guard"]): g["max_abs_diff"] for g in report["guards"]}
    for g in check_records.guards(tiny["workdir"] / check_records.RESULTS):
        assert records[(g["source"], g["guard"])] == g["max_abs_diff"]
    tree = report["steps"]["tree"]
    assert set(tree) == {"commit", "clean", "why"}
    assert tree["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", tree["commit"])
