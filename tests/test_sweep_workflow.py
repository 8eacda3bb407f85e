"""The sweep stage through the real Snakefile, on a tiny config, in a temporary folder:
it trains end to end (a tiny vocab study included: characters vs a byte-level BPE
vocabulary), a second run has nothing to do, editing one sweep reruns only that sweep's
jobs, adding a vocabulary size schedules only its tokenizer and its models, and a bad
grid entry stops before any job."""
import os
import re
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from headwatch.charlm.model import count_params
from headwatch.charlm.spec import ModelSpec
from headwatch.settings.sweep import slug
from conftest import ROOT
from workflow import VOCAB_GRID, deep_merge, git, make_workdir, planned_jobs, tiny_config, write_config

TARGETS = ["results/sweep/summary.parquet", "results/sweep/contrast.parquet",
           "results/sweep/studies/experts.parquet", "results/sweep/studies/vocab.parquet",
           "results/sweep/heads/summary.parquet", "results/sweep/course/heads_split/verdicts.parquet"]
FIGURES = [f"figures/sweep/{n}.{e}" for n in ("loss_vs_heads", "loss_vs_width", "contrast", "training_curves",
                                              "study_experts", "study_vocab", "heads_formation", "heads_finals",
                                              "heads_grid")
           for e in ("pdf", "png")] + [f"figures/sweep/course/heads_split/{k}.{e}" for k in ("events", "gaps")
                                       for e in ("pdf", "png")]


def smk(workdir, configfile, *args, timed=False, targets=(*TARGETS, *FIGURES), record="laptop"):
    """Snakemake on only the sweep's targets (other stages are not needed here); ``timed``: through
    the Makefile's timer (``python -m headwatch.workflow.run_record timed laptop -- ...``), as `make laptop`."""
    cmd = [sys.executable, "-m", "snakemake", *targets, "--cores", "2",
           "--configfile", *map(str, [configfile] if not isinstance(configfile, list) else configfile), *args]
    if timed:
        cmd = [sys.executable, "-m", "headwatch.workflow.run_record", "timed", record, "--", *cmd]
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    return subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


def planned_wildcards(result, rule_name: str) -> list[str]:
    """The wildcards lines of every job of ``rule_name`` in a dry run's listing."""
    out, rule = [], None
    for line in (result.stdout + result.stderr).splitlines():
        line = line.strip()
        if line.startswith("rule "):
            rule = line[5:].rstrip(":")
        if line.startswith("wildcards:") and rule == rule_name:
            out.append(line)
    return out


def planned_runs(result) -> set[tuple[str, str, int]]:
    """(sweep, shape, seed) of every run whose files a dry run plans (rule sweep_run: from its stack)."""
    out, rule = set(), None
    for line in (result.stdout + result.stderr).splitlines():
        line = line.strip()
        if line.startswith("rule "):
            rule = line[5:].rstrip(":")
        m = re.match(r"wildcards: sweep=(\w+), shape=([\w-]+), seed=(\d+)", line)
        if m and rule == "sweep_run":
            out.add((m.group(1), m.group(2), int(m.group(3))))
    return out


@pytest.fixture(scope="module")
def sweep_run(dag_run):
    """(workdir, config, configfile) of the session's whole tiny run (tests/conftest.py): it trains
    the sweep, the tiny vocab study included, timed as `make laptop` in a committed checkout."""
    workdir, configfile, config = dag_run
    return workdir, config, configfile


def test_tiny_sweep_trains_end_to_end(sweep_run):
    workdir, config, _ = sweep_run
    sw = config["sweep"]
    res = workdir / "results" / "sweep"
    summary = pd.read_parquet(res / "summary.parquet")
    pair = ("heads_split_drop", "width_drop")              # the regularised pair: its own tables, not these
    expected = [(name, slug(e)) for name, s in sw["sweeps"].items() if not s.get("study") and name not in pair
                for e in s["grid"]]
    assert list(zip(summary["sweep"], summary["shape"])) == expected
    regularised = pd.read_parquet(res / "pairs" / "regularised" / "summary.parquet")
    assert list(zip(regularised["sweep"], regularised["shape"])) == [
        (name, slug(e)) for name in pair for e in sw["sweeps"][name]["grid"]]
    assert regularised.loc[regularised["shape"] == "w16-h2-drop0.2", "trained_under"].tolist() == ["heads_split_drop"] * 2
    assert (regularised["seeds"] == 2).all()
    assert (summary["seeds"] == 2).all()
    split = summary[summary["sweep"] == "heads_split"]
    vocab = __import__("json").loads((res / "corpus" / "meta.json").read_text())["vocab_size"]
    hand = count_params(ModelSpec(vocab, int(split["width"].iloc[0]), 1,
                                 **{k: sw["model"][k] for k in ("layers", "context")}))
    assert set(split["params"]) == {hand["total"]}
    # The configuration both sweeps list with the same settings is trained once, under the first.
    shared = summary[(summary["sweep"] == "width") & (summary["shape"] == "w16-h2")].iloc[0]
    assert shared["trained_under"] == "heads_split" and not (res / "width" / "w16-h2").exists()
    for seed in (0, 1):
        m = pd.read_parquet(res / "heads_split" / "w16-h2" / f"seed{seed}" / "metrics.parquet")
        assert list(m.columns) == ["step", "train_loss", "train_sample_loss", "val_loss", "tokens_per_s", "in_context"]
        h = pd.read_parquet(res / "heads_split" / "w16-h2" / f"seed{seed}" / "heads.parquet")   # §7b records
        assert len(h) == len(m) * 2 * 2 and set(h["step"]) == set(m["step"])
        assert m["step"].iloc[-1] == sw["train"]["steps"]
        assert (res / "heads_split" / "w16-h2" / f"seed{seed}" / "model.pt").stat().st_size > 0
        assert not (res / "heads_split" / "w16-h2" / f"seed{seed}" / "checkpoint.pt").exists()
    contrast = pd.read_parquet(res / "contrast.parquet").iloc[0]
    assert contrast["capacity_from"] == "w8-h1" and contrast["capacity_to"] == "w16-h2"
    for f in FIGURES:
        assert (workdir / f).stat().st_size > 0
    # The tiny experts study: dense w16-h2 read from heads_split, two expert arms.
    study = pd.read_parquet(res / "studies" / "experts.parquet")
    assert study["shape"].tolist() == ["w16-h2", "w16-h2-e4k2-b0.01", "w16-h2-e4k2-b0"]
    assert study["trained_under"].tolist() == ["heads_split", "experts", "experts"]
    assert (study["ffn_active_width"] == 64).all() and (study["seeds"] == 2).all()
    assert (study["params_active"].iloc[1:] < study["params"].iloc[1:]).all()
    assert (res / "experts" / "w16-h2-e4k2-b0" / "seed1" / "model.pt").stat().st_size > 0
    # The regularised arm: its own stack (one dropout rate a stack), its model's record says its dropout.
    assert (res / "heads_split_drop" / "stacks" / "w16-l2-drop0.2").is_dir()
    from headwatch.sweep.train import load_trained
    assert load_trained(res / "heads_split_drop" / "w16-h2-drop0.2" / "seed0" / "model.pt")[0].spec.dropout == 0.2
    logs = {p.name for p in (workdir / "results" / "logs").rglob("*.log")}
    assert {"sweep_corpus.log", "sweep_summary.log", "figures_sweep.log", "seed0.log", "sweep_heads.log",
            "figures_sweep_heads.log"} <= logs
    # §7b: one cut per trained model of the split and capacity sweeps, the study over them.
    heads_runs = pd.read_parquet(res / "heads" / "runs.parquet")
    assert len(heads_runs) == len(summary) * 2 and heads_runs["top_head"].str.match(r"L\dH\d").all()
    assert (res / "heads" / "cut" / "heads_split" / "w16-h1" / "seed1.parquet").stat().st_size > 0
    # The tiny vocab study: characters (read from heads_split) vs 300 byte-level BPE tokens,
    # both scored in bits per character on the same validation text.
    vocab = pd.read_parquet(res / "studies" / "vocab.parquet")
    assert vocab["shape"].tolist() == ["w16-h2", "w16-h2-vbpe300"]
    assert vocab["vocab"].tolist() == ["char", "bpe300"] and vocab["vocab_size"].iloc[1] == 300
    assert vocab["trained_under"].tolist() == ["heads_split", "vocab"]
    assert vocab["val_sha256"].nunique() == 1 and (vocab["seeds"] == 2).all()
    assert vocab["chars_per_window"].iloc[1] > vocab["chars_per_window"].iloc[0] == 16
    assert (vocab["val_full_bpc_mean"] > 0).all() and (vocab["params"] > vocab["params_without_vocab"]).all()
    assert sorted(p.name for p in (res / "corpus" / "vocab" / "bpe300").iterdir()) == [
        "meta.json", "split.json", "tokenizer.json", "train.npy", "val.npy"]
    assert not (res / "vocab" / "w16-h2").exists()                # the char arm is heads_split's


def test_the_contrast_carries_its_intervals_test_and_verdicts(sweep_run):
    workdir, _, _ = sweep_run
    c = pd.read_parquet(workdir / "results" / "sweep" / "contrast.parquet").iloc[0]
    boot = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]["summary"]["bootstrap"]
    assert (c["resamples"], c["resample_seed"], c["level"]) == (boot["resamples"], boot["seed"], boot["level"])
    for q in ("spread", "spread_over_std", "capacity_gain", "spread_over_gain", "paired_diff"):
        assert c[f"{q}_lo"] <= c[f"{q}_hi"], q            # (a percentile interval need not hold the estimate)
    assert c["paired_seeds"] == 2 and 0 < c["split_p"] <= 1
    assert c["split_resolved"] == (c["spread_over_std_lo"] > 1 and c["split_p"] < 1 - boot["level"])
    assert c["width_resolved"] == (c["capacity_gain_lo"] > 0)


def test_the_results_page_is_written_from_the_tables_and_refuses_a_dirty_tree(sweep_run, tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables
    from headwatch.markup import markdown
    from headwatch.workflow.provenance import DirtyTreeError
    from headwatch.sweep.summary import split_verdict

    workdir, _, _ = sweep_run
    res = workdir / "results" / "sweep"
    out = tmp_path / "laptop-scale.md"
    text = laptop_tables.page(workdir, out)
    head = git(workdir, "rev-parse", "HEAD").strip()
    timing = __import__("json").loads((workdir / "results" / "timing" / "laptop.json").read_text())["attempts"]
    assert len(timing) == 1 and timing[0]["commit"] == head and timing[0]["exit_status"] == 0
    timing = timing[0]
    assert timing["cpu_s"] > 0
    assert f"commit `{head[:7]}`" in text and laptop_tables.COMMAND in text
    assert f"{timing['wall_s'] / 60:.1f} min" in text and timing["cpu_model"] in text
    summary = pd.read_parquet(res / "summary.parquet")
    for r in summary.itertuples():
        assert f"| {markdown(r.sweep)} | {markdown(r.shape)} |" in text and f"{r.val_loss_mean:.4f} ± {r.val_loss_std:.4f}" in text
    c = pd.read_parquet(res / "contrast.parquet").iloc[0]
    assert split_verdict(c) in text and f"{c['spread_over_std_lo']:.4f}" in text
    findings = laptop_tables.findings(c, summary)
    assert len(findings) == 4 and set(findings["verdict"]) <= {"holds", "does not hold", "not resolved"}
    if not c["split_resolved"]:           # nothing that rests on the split effect holds
        assert (findings["verdict"].iloc[:2] == "not resolved").all() and "holds" not in set(findings["verdict"])
    heads = pd.read_parquet(res / "heads" / "summary.parquet")        # §7b: the heads section
    assert "## The heads the models grow (protocol §7b)" in text
    for r in heads.itertuples():
        assert f"| {markdown(r.sweep)} | {markdown(r.shape)} | {r.heads} |" in text and f"{r.best_induction_mean:.3f}" in text
    assert ("Nothing forms at this scale" in text) == (heads["formed"].max() == 0)
    # The course of the split sweep (protocol §7b): its events per shape and its gaps' verdicts.
    verdicts = pd.read_parquet(res / "course" / "heads_split" / "verdicts.parquet")
    assert "## The course of `heads_split`" in text and verdicts["arm"].tolist() == ["w16-h2"]
    assert f"| {markdown('w16-h2 − w16-h1')} |" in text and verdicts["verdict"].iloc[0] in text
    # both readings (protocol §7): the summary and the contrast at each run's best beside the last step's
    best = pd.read_parquet(res / "contrast_best.parquet").iloc[0]
    assert best["reading"] == "best" and "## Two readings: at the last step and at each run's best" in text
    assert split_verdict(best) in text and "(laptop-scale/readings.png)" in text
    fit = pd.read_parquet(res / "overfitting.parquet")
    assert set(fit["verdict"]) <= {"overfits", "within seed noise", "not resolved", "too few seeds"}
    assert "| best | optimum at 4 heads of 64 |" in text and "| last | optimum at 4 heads of 64 |" in text
    assert "Not made in this checkout" in text          # make laptop-long: not run (yet) here
    # The page already holds a laptop-long section written from its own run (an earlier --only
    # laptop-long): the whole page written again where only make laptop ran keeps it, word for word.
    kept = laptop_tables.LONG_HEAD + "\n\nwritten from its run\n\n### its course\n\nkept too"
    out.write_text("# Laptop-scale results\n\n" + kept + "\n\n## The studies at laptop scale\n\nold\n")
    again = laptop_tables.page(workdir, out)
    assert kept in again and "Not made in this checkout" not in again and again.count(laptop_tables.LONG_HEAD) == 1
    assert again.split(laptop_tables.LONG_HEAD)[0] == text.split(laptop_tables.LONG_HEAD)[0]
    # ... and the studies' section an earlier `make laptop-more` wrote, word for word, naming its commit.
    studies = laptop_tables.STUDIES_HEAD + "\n\nits run's time\n\n### `experts` (experts study)\n\nits table"
    out.write_text("# Laptop-scale results\n\nFrom commit `abc1234` (`abc1234...`) of headwatch\n\n" + studies + "\n")
    again = laptop_tables.page(workdir, out)
    section = again[again.index(laptop_tables.STUDIES_HEAD):]
    assert section.startswith(laptop_tables.STUDIES_HEAD + "\n\nAs the page written at commit `abc1234` from its own run")
    assert section.rstrip("\n").endswith("its run's time\n\n### `experts` (experts study)\n\nits table")
    out.write_text(again)                                # written again from that page: the same, one note
    assert laptop_tables.page(workdir, out) == again and again.count("As the page written at commit") == 1
    out.write_text("# Laptop-scale results\n\n" + studies + "\n")
    with pytest.raises(laptop_tables.PageError, match="names no commit"):
        laptop_tables.page(workdir, out)
    out.write_text(text)                                 # its own "not made" paragraph: written again
    assert laptop_tables.page(workdir, out) == text
    for stem in laptop_tables.FIGURES:
        assert (tmp_path / "laptop-scale" / f"{stem}.png").stat().st_size > 0
        assert f"(laptop-scale/{stem}.png)" in text
    # A result input changed since the commit: refused, the file named.
    rules = workdir / "rules" / "sweep.smk"
    kept = rules.read_text()
    try:
        rules.write_text(kept + "\n")
        with pytest.raises(DirtyTreeError, match="rules/sweep.smk"):
            laptop_tables.page(workdir, out)
    finally:
        rules.write_text(kept)


def test_a_second_dry_run_has_nothing_to_do(sweep_run):
    workdir, _, configfile = sweep_run
    result = smk(workdir, configfile, "-n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert planned_jobs(result) == {}, result.stdout[-2000:]


def test_changing_one_sweeps_steps_reruns_only_that_sweep(sweep_run):
    workdir, config, _ = sweep_run
    changed = deep_merge(config, {"sweep": {"sweeps": {"width": {"train": {"steps": 6}}}}})
    result = smk(workdir, write_config(workdir, changed, "width_steps.yaml"), "-n")
    assert result.returncode == 0, result.stderr[-2000:]
    # width's own w8-h1, plus w16-h2: its settings now differ from heads_split's, so
    # the width sweep trains its own copy; nothing of heads_split, no new corpus.
    assert planned_runs(result) == {("width", c, s) for c in ("w8-h1", "w16-h2") for s in (0, 1)}
    # two stacks (w8, and w16 for width's own w16-h2); §7b: each retrained model's cut, the heads
    # study and its figures
    assert planned_jobs(result) == {"sweep_train": 2, "sweep_run": 4, "sweep_summary": 1, "figures_sweep": 1,
                                    "sweep_heads_cut": 4, "sweep_heads": 1, "figures_sweep_heads": 1}

    # A shape added to heads_split joins its stack (every width-16 model): the stack's job runs again,
    # and takes the runs it finished before as they are (test_a_shape_that_joins_a_stack_...)
    changed = deep_merge(config, {"sweep": {"sweeps": {"heads_split": {"grid": [
        {"width": 16, "heads": 1}, {"width": 16, "heads": 2}, {"width": 16, "heads": 4}]}}}})
    result = smk(workdir, write_config(workdir, changed, "split_grid.yaml"), "-n")
    assert planned_runs(result) == {("heads_split", f"w16-h{h}", s) for h in (1, 2, 4) for s in (0, 1)}
    # (the experts and vocab studies read heads_split's w16-h2: their tables are made again from it)
    assert planned_jobs(result) == {"sweep_train": 1, "sweep_run": 6, "sweep_summary": 1, "figures_sweep": 1,
                                    "sweep_heads_cut": 6, "sweep_heads": 1, "figures_sweep_heads": 1,
                                    "sweep_course": 1, "figures_sweep_course": 1, "sweep_study": 2,
                                    "figures_sweep_study": 2}


def test_a_shape_that_joins_a_stack_trains_alone_and_the_others_are_taken_as_they_are(sweep_run, tmp_path):
    """Adding w16-h4 to heads_split reruns its stack's job, which trains w16-h4 only: the runs it
    finished before are taken as they are (the same model files, bit for bit), and the new shape's
    runs are there."""
    workdir, config, _ = sweep_run
    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy, symlinks=True)
    before = {s: (copy / f"results/sweep/heads_split/w16-h1/seed{s}/model.pt").read_bytes() for s in (0, 1)}
    changed = deep_merge(config, {"sweep": {"sweeps": {"heads_split": {"grid": [
        {"width": 16, "heads": 1}, {"width": 16, "heads": 2}, {"width": 16, "heads": 4}]}}}})
    target = [f"results/sweep/heads_split/w16-h{h}/seed{s}/metrics.parquet" for h in (1, 2, 4) for s in (0, 1)]
    result = smk(copy, write_config(copy, changed, "split_grid.yaml"), targets=target)
    assert result.returncode == 0, result.stderr[-3000:]
    log = (copy / "results/logs/sweep_train/heads_split/w16-l2.log").read_text()
    assert log.count("taken as it is") == 4 and "w16-h4" in log
    for s in (0, 1):
        assert (copy / f"results/sweep/heads_split/w16-h1/seed{s}/model.pt").read_bytes() == before[s]
        assert (copy / f"results/sweep/heads_split/w16-h4/seed{s}/metrics.parquet").is_file()
    again = smk(copy, write_config(copy, changed, "split_grid.yaml"), "-n", targets=target)
    assert planned_jobs(again) == {}, again.stdout[-2000:]


def test_adding_a_vocabulary_size_schedules_only_its_tokenizer_and_models(sweep_run):
    workdir, config, _ = sweep_run
    grid = VOCAB_GRID + [{"width": 16, "heads": 2, "vocab": "bpe320"}]
    changed = deep_merge(config, {"sweep": {"sweeps": {"vocab": {"grid": grid}}}})
    result = smk(workdir, write_config(workdir, changed, "vocab_size.yaml"), "-n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert planned_wildcards(result, "sweep_vocab") == ["wildcards: vocab=bpe320"]
    assert planned_runs(result) == {("vocab", "w16-h2-vbpe320", 0), ("vocab", "w16-h2-vbpe320", 1)}
    assert planned_jobs(result) == {"sweep_vocab": 1, "sweep_train": 1, "sweep_run": 2, "sweep_study": 1,
                                    "figures_sweep_study": 1}


def test_a_bad_grid_entry_stops_before_any_job(tmp_path, tiny_model_dir):
    workdir = make_workdir(tmp_path)
    config = tiny_config(tiny_model_dir)
    config["sweep"]["sweeps"]["heads_split"]["grid"].append({"width": 16, "heads": 3})
    result = smk(workdir, write_config(workdir, config))
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert re.search(r"sweep\.sweeps\.heads_split\.grid\[2\]: heads\W*3 do not divide width\W*16", out), out
    assert not (workdir / "results" / "sweep").exists() and not (workdir / "results" / "logs").exists()


LONG_TARGETS = ([f"results/sweep/course/heads_long/{t}.parquet" for t in ("curves", "events", "events_summary",
                                                                         "gaps", "verdicts")]
                + [f"figures/sweep/course/heads_long/{k}.{e}" for k in ("events", "gaps") for e in ("pdf", "png")])


def test_laptop_long_shares_the_results_tree_and_writes_its_section(sweep_run, tmp_path):
    """The laptop-long overlay's shape at tiny scale (its own sweep, the others skipped): it runs
    beside the laptop run's outputs, neither redoing nor invalidating them, and the page writer
    adds its section, the original run's findings point by point and its gaps' verdicts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables

    workdir, config, configfile = sweep_run
    long = {"sweep": {
        "sweeps": {"heads_long": {"grid": [{"width": 32, "heads": h} for h in (1, 4, 32)], "seeds": [0, 1],
                                  "train": {"steps": 12, "batch": 4, "lr": 1e-3, "min_lr": 1e-4, "warmup": 1,
                                            "weight_decay": 0.1, "eval_every": 3, "eval_batches": 2,
                                            "checkpoint_every": 12}}},
        "skip": [n for n in config["sweep"]["sweeps"]] + ["depth", "kv_sharing", "experts_topk"],
        "course": {"sweeps": {"heads_long": "w32-h1"}}}}
    overlay = write_config(workdir, long, "long.yaml")
    result = smk(workdir, [configfile, overlay], timed=True, targets=LONG_TARGETS, record="laptop-long")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert planned_jobs(smk(workdir, configfile, "-n")) == {}         # the laptop run's outputs stand
    assert planned_jobs(smk(workdir, [configfile, overlay], "-n", targets=LONG_TARGETS)) == {}
    res = workdir / "results" / "sweep"
    assert not (res / "heads_long" / "w32-h1" / "seed0" / "checkpoint.pt").exists()
    assert sorted(p.name for p in (res / "course").iterdir()) == ["heads_long", "heads_split"]
    curves = pd.read_parquet(res / "course" / "heads_long" / "curves.parquet")
    assert sorted(curves["step"].unique()) == [3, 6, 9, 12] and curves["best_prev"].between(0, 1).all()
    verdicts = pd.read_parquet(res / "course" / "heads_long" / "verdicts.parquet")
    assert verdicts["arm"].tolist() == ["w32-h4", "w32-h32"] and set(verdicts["verdict"]) <= {
        "holds", "narrows", "flips", "not resolved"}
    text = laptop_tables.page(workdir, tmp_path / "laptop-scale.md")
    assert "## Longer: `make laptop-long`" in text and "Not made in this checkout" not in text
    assert laptop_tables.LONG_COMMAND in text and "### The course of `heads_long`" in text
    # its runs read both ways from their metrics: each shape's last and best loss, its rise, each arm − w32-h1
    long = text[text.index("## Longer: `make laptop-long`"):]
    assert "### Both readings: the last evaluation and each run's best" in long
    assert "| w32-h4 |" in long and "− w32-h1, best" in long and "Of 3 configurations" in long
    findings = laptop_tables.long_findings(workdir, "heads_long", "w32-h1")
    assert findings["finding"].str.contains("4 heads beat 1").any() and len(findings) == 5
    assert set(findings["verdict"]) <= {"holds", "does not hold", "not resolved"}
    for r in verdicts.itertuples():
        assert f"{r.end_gap:+.4f} ({r.end_step})" in text
    for key in ("events", "gaps"):
        assert (tmp_path / "laptop-scale" / f"course_heads_long_{key}.png").stat().st_size > 0
    # --only laptop-long: the section alone replaces the page's own, the rest stays as it was
    page = tmp_path / "only" / "laptop-scale.md"
    with pytest.raises(laptop_tables.PageError, match="write the whole page first"):
        laptop_tables.with_section(workdir, page, "laptop-long")
    page.parent.mkdir()
    old = "# Laptop-scale results\n\n## The run\n\nkept\n\n" + laptop_tables.LONG_HEAD + "\n\nstale\n\n### old\n\n"
    page.write_text(old + "## The studies at laptop scale (`make laptop-more`)\n\nkept too\n")
    laptop_tables.main(["--root", str(workdir), "--out", str(page), "--only", "laptop-long"])
    new = page.read_text()
    assert "stale" not in new and "### old" not in new and new.count(laptop_tables.LONG_HEAD) == 1
    assert new.startswith("# Laptop-scale results\n\n## The run\n\nkept\n\n" + laptop_tables.LONG_HEAD)
    assert new.endswith("## The studies at laptop scale (`make laptop-more`)\n\nkept too\n")
    section = text[text.index(laptop_tables.LONG_HEAD):]
    assert section.strip() in new                      # the same section the whole page writes
    # A laptop-long record made at other result inputs is refused, as the laptop run's.
    refuses_a_failed_record(laptop_tables, workdir, "laptop-long", tmp_path / "laptop-scale.md")


def refuses_a_failed_record(laptop_tables, workdir, name: str, out) -> None:
    """The page refuses a timed run whose record (``results/timing/{name}.json``) says it failed."""
    record = workdir / "results" / "timing" / f"{name}.json"
    kept = record.read_text()
    try:
        record.write_text(kept.replace('"exit_status": 0', '"exit_status": 1'))
        with pytest.raises(laptop_tables.RunRecordError, match=f"{name}.json: the run failed"):
            laptop_tables.page(workdir, out)
    finally:
        record.write_text(kept)


def test_the_page_writes_a_section_per_study_from_a_timed_laptop_more_run(sweep_run, tmp_path):
    """`make laptop-more`'s shape at tiny scale: a timed run of the studies' targets (made already by
    the tiny run: nothing to do), then the page's section per study, read from the tables the run
    made (its contrasts from 2 seeds: no interval, no verdict); a failed record is refused."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables
    from headwatch.markup import markdown
    from headwatch.sweep.contrasts import contrast_sentence

    workdir, _, configfile = sweep_run
    studies = ("experts", "vocab")
    targets = [f"results/sweep/studies/{s}{t}.parquet" for s in studies for t in ("", "_contrasts")]
    result = smk(workdir, configfile, timed=True, targets=targets, record="laptop-more")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = laptop_tables.page(workdir, tmp_path / "laptop-scale.md")
    section = text[text.index("## The studies at laptop scale (`make laptop-more`)"):]
    res = workdir / "results" / "sweep" / "studies"
    for name, kind in zip(studies, ("experts", "vocab")):
        assert f"### `{name}` ({kind} study)" in section
        contrasts = pd.read_parquet(res / f"{name}_contrasts.parquet")
        assert len(contrasts) and (contrasts["verdict"] == "too few seeds").all()        # 2 seeds
        for c in contrasts.to_dict("records"):
            assert f"- {markdown(contrast_sentence(c))}." in section
        assert (tmp_path / "laptop-scale" / f"study_{name}.png").stat().st_size > 0
    vocab = pd.read_parquet(res / "vocab_contrasts.parquet").iloc[0]
    assert not vocab["paired"] and "| unpaired |" in section
    assert "not recorded in this repository" in section           # vocab: nothing on record
    # experts: the original findings name the laptop grid's shapes, which the tiny grid does not have
    assert "contrast | not compared |" in section and "| holds |" not in section
    refuses_a_failed_record(laptop_tables, workdir, "laptop-more", tmp_path / "laptop-scale.md")
    # --only laptop-more: the studies' section alone, under its own commit and command, replaces the
    # page's (kept from an older run); the rest stays; a page written later without a laptop-more run
    # keeps it word for word, naming its own commit rather than the page's
    page = tmp_path / "only" / "laptop-scale.md"
    page.parent.mkdir()
    old = "# Laptop-scale results\n\n## The run\n\nkept\n\n" + laptop_tables.LONG_HEAD + "\n\nlong kept\n\n"
    page.write_text(old + laptop_tables.STUDIES_HEAD + "\n\nAs the page written at commit `abc1234` stale\n\n### old\n")
    laptop_tables.main(["--root", str(workdir), "--out", str(page), "--only", "laptop-more"])
    new = page.read_text()
    assert new.startswith(old) and "stale" not in new and "### old" not in new
    assert new.count(laptop_tables.STUDIES_HEAD) == 1 and laptop_tables.MORE_COMMAND in new
    own = new[new.index(laptop_tables.STUDIES_HEAD):]
    assert re.search(r"From commit `[0-9a-f]{7}`", own) and "### `experts` (experts study)" in own
    assert section.split("\n", 2)[2].strip() in own       # the section the whole page writes, after its header
    kept = "\n\n".join(laptop_tables.kept_studies(page))
    assert kept == own.strip("\n") and laptop_tables.STUDIES_KEPT not in kept
