"""What the rules ask the library for, without Snakemake: every output path from one function
(headwatch.paths), the default target (headwatch.workflow.targets) and the record of the run a report
describes (headwatch.workflow.run_record)."""
import copy

import pytest
import yaml

from headwatch import paths
from headwatch.workflow import run_record, targets
from headwatch.sweep import plan
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def everything(path):
    return True


# ------------------------------------------------------------------ paths
def test_each_path_is_spelled_once_and_takes_wildcards_or_values():
    assert paths.scores("{model}") == "results/{model}/scores.parquet"
    assert paths.scores("m") == "results/m/scores.parquet"
    assert paths.sweep_run("{sweep}", "{shape}", "{seed}", "model.pt") == "results/sweep/{sweep}/{shape}/seed{seed}/model.pt"
    assert paths.guard_record("m", "topk") == "results/m/ablation/guards/topk.json"
    assert paths.log("sweep_train", "s", "a", "seed0") == "results/logs/sweep_train/s/a/seed0.log"
    assert paths.log("sweep_summary") == "results/logs/sweep_summary.log"
    assert paths.benchmark("scores_heads", "m") == "results/benchmarks/scores_heads/m.tsv"
    assert paths.head_figure("m", "grid_noise", "png") == "figures/m/grid_noise.png"
    assert paths.study_table("kv", "finals") == "results/sweep/studies/kv_finals.parquet"
    assert paths.study_table("kv", "contrasts") == "results/sweep/studies/kv_contrasts.parquet"
    # a further pair of the summary: the same table and figure names, in a folder of its own
    assert paths.sweep_table("contrast", "{pair}") == "results/sweep/pairs/{pair}/contrast.parquet"
    assert paths.sweep_figure("readings", "png", "reg") == "figures/sweep/pairs/reg/readings.png"
    # a run is read from the folder of the sweep that trains it
    run = dict(sweep="width", shape="w256-h4", seed=2, trained_under="heads_split")
    assert paths.run_output(run, "metrics.parquet") == "results/sweep/heads_split/w256-h4/seed2/metrics.parquet"


def test_a_tables_page_mirrors_its_path():
    assert paths.page_of(paths.table("m", "ablation/topk")) == "results/tables/m/ablation/topk.html"
    assert paths.page_of(paths.sweep_table("summary")) == paths.table_page("sweep", "summary")
    for bad in ("results/scores.parquet", "figures/m/x.parquet", "results/m/x.json"):
        with pytest.raises(ValueError, match="is not a table"):
            paths.page_of(bad)


# ------------------------------------------------------------------ targets
def test_the_default_target_holds_every_stage_once():
    out = targets.all_targets(CONFIG, everything)
    assert len(out) == len(set(out))
    m = CONFIG["models_studied"][0]
    for path in (paths.sequence_table(m, "phrases"), paths.attention_table(m, "maps"), paths.predictions(m),
                 paths.scores(m), paths.guards(m), paths.ablation_table(m, "pairs"),
                 paths.anatomy_table("survey"), paths.model_anatomy(m, "kv_similarity.parquet"),
                 paths.sweep_table("curves"), paths.study_table("experts_topk", "finals"),
                 paths.study_table("kv_sharing", "contrasts"), paths.page_of(paths.study_table("depth", "contrasts")),
                 paths.head_figure(m, "head_induction", "pdf"), paths.ablation_figure(m, "attribution_names", "png"),
                 paths.sweep_figure("study_depth", "pdf"), paths.explorer(m),
                 paths.page_of(paths.table(m, "ablation/topk"))):
        assert path in out, path
    trained = [p for p in out if p.endswith("/model.pt")]
    assert len(trained) == len(plan.train_jobs(CONFIG["sweep"])) > 24
    assert not any(p.startswith("results/sweep/width/w256-h4/") for p in out)     # heads_split trains it
    # the regularised pair: every table and figure the default pair has, of its own; its pages
    for t in targets.SWEEP_TABLES:
        assert paths.sweep_table(t, "regularised") in out, t
    for stem in targets.SWEEP_FIGURES.values():
        assert {paths.sweep_figure(stem, e, "regularised") for e in paths.EXTENSIONS} <= set(out), stem
    assert paths.page_of(paths.sweep_table("contrast", "regularised")) in out
    assert not any(p.startswith("results/sweep/width_drop/w256-h4-drop0.2/") for p in out)   # its split trains it


def test_the_laptop_scale_makes_the_sweep_only():
    laptop = run_record.config_of(ROOT, "config/laptop.yaml")
    out = targets.all_targets(laptop, everything)
    assert all(p.startswith(("results/sweep/", "figures/sweep/", "results/tables/sweep/")) for p in out), out
    assert paths.sweep_figure("contrast", "png") in out and paths.page_of(paths.sweep_table("contrast")) in out
    assert not any("w512" in p or "studies" in p or "pairs" in p or "drop" in p for p in out)
    more = run_record.config_of(ROOT, "config/laptop.yaml", "config/laptop_more.yaml")
    assert paths.study_table("vocab") in targets.all_targets(more, everything)
    assert [run_record.run_scale(c, ROOT)[0] for c in (laptop, more)] == ["laptop", "laptop+studies"]


def test_laptop_long_asks_only_for_its_own_sweep_and_course():
    """config/laptop_long.yaml skips the laptop run's sweeps: nothing it asks for is a path that
    `make laptop` makes, or one both runs would write (the corpus aside, with the same params)."""
    laptop = set(targets.all_targets(run_record.config_of(ROOT, "config/laptop.yaml"), everything))
    long = run_record.config_of(ROOT, "config/laptop.yaml", "config/laptop_long.yaml")
    out = targets.all_targets(long, everything)
    assert not targets.summarized(long) and not laptop & set(out)
    assert paths.course_table("heads_long", "verdicts") in out and paths.course_table("heads_split", "gaps") in laptop
    assert {p.split("/")[2] for p in out if p.startswith("results/sweep/")} == {"heads_long", "course"}
    assert paths.course_figure("heads_long", "gaps", "png") in out and len(plan.train_jobs(long["sweep"])) == 9
    assert run_record.run_scale(long, ROOT)[0] == "laptop-long"


def test_skipped_studies_and_absent_stages_are_left_out():
    cfg = copy.deepcopy(CONFIG)
    cfg["sweep"]["skip"] = plan.studies(cfg["sweep"])
    out = targets.all_targets(cfg, lambda p: not p.startswith("results/sweep/"))
    assert not any("studies" in p or "study_" in p for p in out)
    assert paths.page_of(paths.sweep_table("summary")) not in out           # no rule makes it: no page
    assert paths.page_of(paths.anatomy_table("rotary")) in out
    inputs = targets.explorer_inputs("m", cfg, lambda p: "ablation" in p)
    assert inputs["topk"] == paths.ablation_table("m", "topk") and "sweep_summary" not in inputs
    assert inputs["references"] == [paths.reference_config(r)
                                     for r in cfg["report"]["explorer"]["rotary_references"]]


def test_the_report_shows_the_patching_groups_paths_and_known_circuit_tables():
    out = targets.report_tables(CONFIG, everything)
    m = CONFIG["models_studied"][0]
    for table in (paths.patching_table(m, "kv_groups"), paths.patching_table(m, "positions_all"),
                  paths.circuits_table(m, "paths"), paths.known_circuit_table()):
        assert paths.page_of(table) in out, table
    laptop = run_record.config_of(ROOT, "config/laptop.yaml")             # the sweep only: no model's pages
    assert paths.page_of(paths.known_circuit_table()) not in targets.report_tables(laptop, everything)


def test_a_report_table_no_rule_makes_is_named_by_its_key():
    made = set(targets.all_targets(CONFIG, everything))     # every table the default target asks for
    assert targets.unmade_tables(CONFIG, made.__contains__) == []
    cfg = copy.deepcopy(CONFIG)
    cfg["report"]["tables"]["per_model"].append("patching/kv_group")
    cfg["report"]["tables"]["shared"].insert(0, "circuits/knwon")
    m = CONFIG["models_studied"][0]
    assert targets.unmade_tables(cfg, made.__contains__) == [
        f"report.tables.per_model[{len(cfg['report']['tables']['per_model']) - 1}] = 'patching/kv_group': "
        f"no rule of the workflow makes results/{m}/patching/kv_group.parquet",
        "report.tables.shared[0] = 'circuits/knwon': no rule of the workflow makes results/circuits/knwon.parquet"]


def test_the_explorer_reads_the_path_patching_edges_when_a_rule_makes_them():
    assert targets.explorer_inputs("m", CONFIG, everything)["circuits_paths"] == paths.circuits_table("m", "paths")
    assert "circuits_paths" not in targets.explorer_inputs("m", CONFIG, lambda p: "/circuits/" not in p)


# ------------------------------------------------------------------ the run a report describes
def test_the_scale_is_found_from_the_overlays():
    assert run_record.run_scale(run_record.config_of(ROOT), ROOT)[0] == "paper"
    assert run_record.run_scale(run_record.config_of(ROOT, "config/quick.yaml"), ROOT)[0] == "quick"
    both = run_record.config_of(ROOT, "config/quick.yaml", "config/quick_more.yaml")
    assert run_record.run_scale(both, ROOT)[0] == "quick+studies"
    custom = run_record.config_of(ROOT)         # the paper's, one key changed: the text names it
    custom["sweep"]["model"]["context"] = 32
    name, text = run_record.run_scale(custom, ROOT)
    assert name == "custom" and "sweep.model.context" in text


def test_a_recorded_run_is_written_read_back_and_compared(tmp_path):
    record = tmp_path / "run_config.yaml"
    assert run_record.recorded_run(record, CONFIG) == (None, [])
    config = dict(copy.deepcopy(CONFIG), **{run_record.COMPUTED_KEY: {"scale": "paper"}})
    run_record.write_record(record, config, "config/config.yaml + my.yaml")
    files, diff = run_record.recorded_run(record, CONFIG)
    assert files == "config/config.yaml + my.yaml" and diff == []
    assert run_record.COMPUTED_KEY not in yaml.safe_load(record.read_text())
    other = copy.deepcopy(CONFIG)
    other["attention"]["batch"] = 3
    assert run_record.recorded_run(record, other)[1] == ["attention.batch"]
    record.write_text("models: [unclosed\n")
    with pytest.raises(run_record.RunRecordError, match="not valid YAML"):
        run_record.recorded_run(record, CONFIG)


def test_a_timed_run_adds_an_attempt_each_time_it_is_started(tmp_path):
    """make laptop's timer: every start adds an attempt (a resumed run keeps its first part's time),
    the exit status and the CPU time of the command are kept, a tree outside git is recorded as such."""
    import json
    import sys

    assert run_record.timed("t", [sys.executable, "-c", "sum(range(10_000_000))"], root=tmp_path) == 0
    assert run_record.timed("t", [sys.executable, "-c", "raise SystemExit(3)"], root=tmp_path) == 3
    rec = json.loads((tmp_path / paths.timed_run("t")).read_text())
    assert rec["name"] == "t" and [a["exit_status"] for a in rec["attempts"]] == [0, 3]
    first = rec["attempts"][0]
    assert first["cpu_s"] > 0 and first["wall_s"] > 0 and first["usable_cores"] >= 1 and first["cpu_model"]
    assert first["commit"] is None and "git" in first["dirty"]
