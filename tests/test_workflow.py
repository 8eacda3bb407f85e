"""The whole Snakemake DAG end to end on a tiny config, in a temporary folder."""
import subprocess
import sys

import pandas as pd
import pytest

from headwatch.tableio import read_note, read_record
from test_explorer import browser  # noqa: F401  (Chromium, for the explorer's patching panel)
from workflow import ROOT, planned_jobs, snakemake, write_config


@pytest.fixture(scope="module")
def run(dag_run):
    """(workdir, configfile, config) of the session's whole tiny run (tests/conftest.py)."""
    return dag_run


def test_spine_outputs_exist_with_their_schemas(run):
    workdir, _, config = run
    res = workdir / "results" / "tiny-llama"
    scores = pd.read_parquet(res / "scores.parquet")
    assert list(scores.columns) == ["layer", "head", "kv_group", "sink", "prev", "self", "induction",
                                    "sink_rank", "prev_rank", "self_rank", "induction_rank"]
    assert len(scores) == 3 * 4 and scores.kv_group.max() == 1
    assert scores[["sink", "prev", "self", "induction"]].stack().between(0, 1).all()
    maps = pd.read_parquet(res / "attention" / "maps.parquet")
    assert list(maps.columns) == ["phrase", "layer", "head", "row", "col", "weight"]
    assert set(maps.phrase) == set(config.get("phrases") or ["noise", "french", "names", "repetition"])
    assert "quantized to 1/256" in read_note(res / "attention" / "maps.parquet")["weight"]
    tokens = pd.read_parquet(res / "attention" / "tokens.parquet")
    assert list(tokens.columns) == ["phrase", "pos", "token_id", "token"]
    pred = pd.read_parquet(res / "predictions.parquet")
    assert pred.groupby("phrase").size().eq(10).all()
    assert pred.expected_rank.min() >= 1
    for name, n in (("induction", 4), ("eval", 4), ("circuit", 4), ("prose", 8), ("phrases", 4)):
        assert len(pd.read_parquet(res / "sequences" / f"{name}.parquet")) == n
    figs = workdir / "figures" / "tiny-llama"
    for name in ("grid_noise", "head_induction", "scores_ranked", "sink_vs_induction"):
        assert (figs / f"{name}.pdf").stat().st_size > 0 and (figs / f"{name}.png").stat().st_size > 0


def test_attribution_summary_says_each_costliest_cut_scope_from_the_prose(run):
    """Rule ablation_attribution reads the prose table: each phrase's costliest head cut there,
    global or specific by the configured threshold (protocol §5c)."""
    workdir, _, config = run
    summary = pd.read_parquet(workdir / "results" / "tiny-llama" / "ablation" / "attribution_summary.parquet")
    assert len(summary) == 4 and summary.prose_loss_intact.nunique() == 1     # one intact loss, every row
    assert (summary.prose_loss_intact > 0).all() and (summary.prose_loss_cut > 0).all()
    assert (summary.global_loss_nats == 0.1).all()          # config/config.yaml's, under the test overlays
    rise = summary.prose_loss_cut - summary.prose_loss_intact
    assert (summary.cut_scope == rise.gt(summary.global_loss_nats).map({True: "global", False: "specific"})).all()


def test_no_figure_prints_math_source(run):
    """Every PDF the run draws, read back as text: math text is off (config text is drawn as
    written), and no label prints math source either — a log axis or log colour bar is labelled
    10⁰, 10¹, …, not `$\\mathdefault{10^{0}}$` (headwatch/figures/style.py)."""
    import re

    from pypdf import PdfReader

    workdir, _, _ = run
    pdfs = sorted((workdir / "figures").rglob("*.pdf"))
    texts = {str(p.relative_to(workdir / "figures")): "\n".join(page.extract_text() for page in PdfReader(p).pages)
             for p in pdfs}
    logs = {"anatomy/kv_cache.pdf", "tiny-llama/anatomy/kv_cut_matrix.pdf", "sweep/study_experts.pdf"}
    assert logs <= set(texts) and len(texts) >= 25, sorted(texts)           # figures with log axes among them
    assert {name: text for name, text in texts.items() if "$" in text or "mathdefault" in text} == {}
    powers = re.compile("10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]")
    assert [name for name in sorted(logs) if not powers.search(texts[name])] == []   # the labels are there


def test_every_rule_left_a_log(run):
    workdir, _, _ = run
    logs = list((workdir / "results" / "logs").rglob("*.log"))
    rules = {p.relative_to(workdir / "results" / "logs").parts[0] for p in logs}
    assert {"models_prepare", "sequences_make", "attention_maps", "scores_heads"} <= rules


def test_a_second_dry_run_has_nothing_to_do(run):
    workdir, configfile, _ = run
    result = snakemake(workdir, "-n", "--configfile", str(configfile))
    assert result.returncode == 0, result.stderr[-2000:]
    assert planned_jobs(result) == {}, result.stdout[-2000:]
    assert "Nothing to be done" in result.stdout + result.stderr


def test_changing_the_device_reruns_nothing(run):
    """The device says where a job runs, not what it computes: no rule holds it in its params
    (docs/security.md: "changing it reruns nothing")."""
    workdir, _, config = run
    assert config.get("device", "auto") == "auto"          # config/config.yaml's, under the test overlays
    configfile = write_config(workdir, dict(config, device="cpu"), "device_cpu.yaml")
    result = snakemake(workdir, "-n", "--configfile", str(configfile))
    assert result.returncode == 0, result.stderr[-2000:]
    assert planned_jobs(result) == {}, result.stdout[-2000:]


def test_changing_a_phrase_reruns_only_what_reads_phrases(run):
    workdir, _, config = run
    changed = dict(config, phrases=dict(config.get("phrases") or {}))
    changed["phrases"]["repetition"] = {"text": "The dog sat on the rug. The dog sat on the",
                                        "expected": " rug"}
    configfile = write_config(workdir, changed, "changed_phrase.yaml")
    jobs = planned_jobs(snakemake(workdir, "-n", "--configfile", str(configfile)))
    assert jobs.get("sequences_make") == 1            # only the phrases table
    assert "attention_maps" in jobs
    assert "scores_heads" not in jobs and "models_prepare" not in jobs


def test_patching_outputs_guards_figures_and_pages(run):
    """Activation patching (protocol §5d) on the tiny model: the four tables with their schemas and
    the note the report shows, every guard passed with its figure, the figures, the table pages and
    the explorer's panel."""

    workdir, _, config = run
    res = workdir / "results" / "tiny-llama" / "patching"
    prompts = pd.read_parquet(res / "prompts.parquet")
    n = config["patching"]["n"]
    assert len(prompts) == n and list(prompts.order) == ["ABBA", "BABA"] * (n // 2)
    assert (prompts.clean_ids.map(len) == prompts.corrupted_ids.map(len)).all()
    heads = pd.read_parquet(res / "heads.parquet")
    assert list(heads.columns[:5]) == ["layer", "head", "label", "logit_diff", "score"] and len(heads) == 3 * 4
    length = len(prompts.clean_ids.iloc[0])
    resid = pd.read_parquet(res / "resid.parquet")
    assert len(resid) == 3 * length and list(resid.columns) == ["layer", "position", "token", "logit_diff", "score"]
    assert resid[resid.position == 0].score.abs().max() < 1e-5        # the same first token: nothing moves
    positions = pd.read_parquet(res / "positions.parquet")
    assert len(positions) == config["patching"]["top_k"] * length
    note = read_note(res / "heads.parquet")
    for key in ("clean_logit_diff", "corrupted_logit_diff", "names_phrase_p_io", "names_phrase_p_s",
                "estimate_pearson", "estimate_spearman", "estimate_top10_overlap", "exact_seconds",
                "estimate_seconds"):
        assert key in note, key
    assert note["clean_logit_diff"] != note["corrupted_logit_diff"] and note["position_labels"][1] == "{A}"
    guards = read_record(res / "guards.json")            # the one reader: verified against its SHA-256
    assert guards["passed"]
    for name in ("nothing_patched", "everything_patched", "clean_to_clean"):
        assert guards[name]["identical"] and guards[name]["max_abs_diff"] == 0.0, name
    assert guards["batched_vs_loop"]["passed"] and guards["batched_vs_loop"]["n_cases"] > 0
    for name in ("heads", "resid", "top_heads"):
        for ext in ("pdf", "png"):
            assert (workdir / "figures" / "tiny-llama" / "patching" / f"{name}.{ext}").stat().st_size > 0
    pages = workdir / "results" / "tables" / "tiny-llama" / "patching"
    assert "clean_logit_diff" in (pages / "heads.html").read_text()
    assert {p.name for p in pages.glob("*.html")} == {"prompts.html", "heads.html", "resid.html", "positions.html",
                                                       "kv_groups.html", "positions_all.html"}
    for table in ("tiny-llama/circuits/paths.html", "circuits/known.html"):     # report.tables: §5e, §5f
        assert (workdir / "results" / "tables" / table).stat().st_size > 0, table
    page = (workdir / "results" / "tiny-llama" / "explorer.html").read_text()
    assert '"patching":{"heads":{"columns":["layer","head"' in page
    assert '"kv_groups":{"columns":["layer","group","site","label","heads"' in page
    assert '"circuits":{"edges":{"columns":["sender","receiver","input","group","score"' in page


def test_the_lens_tables_guards_figures_and_pages(run):
    """The lens (protocol §5h) on the tiny model: every component's direct effect summing to the logit
    difference (its guard passed, the lens's too), each head beside the head sweep's total effect, the
    logit lens at every depth, the weights' circuits of every pair with their nulls, the verdict against
    path patching's paths, the known circuit's two models by the weights, the figures and the pages."""
    workdir, _, config = run
    res = workdir / "results" / "tiny-llama" / "lens"
    direct = pd.read_parquet(res / "direct.parquet")
    note = read_note(res / "direct.parquet")
    assert list(direct.columns) == ["component", "kind", "layer", "head", "clean", "corrupted", "direct", "direct_sem"]
    assert len(direct[direct["kind"] == "head"]) == 3 * 4 and note["prompts"] == config["patching"]["n"]
    assert abs(direct["clean"].sum() - note["clean_logit_diff"]) < 1e-4
    assert abs(direct["corrupted"].sum() - note["corrupted_logit_diff"]) < 1e-4
    guards = read_record(res / "guards.json")
    assert guards["passed"] and guards["sum_is_logit_diff"]["passed"] and guards["lens_is_the_output"]["passed"]
    heads = pd.read_parquet(workdir / "results" / "tiny-llama" / "patching" / "heads.parquet")
    beside = pd.read_parquet(res / "direct_heads.parquet")
    assert len(beside) == 3 * 4 and beside["indirect_share"].between(0, 1).all()
    total = heads.set_index(["layer", "head"])["logit_diff"] - note["corrupted_logit_diff"]
    assert (beside.set_index(["layer", "head"])["total"] - total).abs().max() < 1e-4
    lens = pd.read_parquet(res / "logit_lens.parquet")
    assert set(lens["depth"]) == set(range(4)) and set(lens["run"]) == {"clean", "corrupted"}
    circuits = pd.read_parquet(res / "circuits.parquet")
    composition = pd.read_parquet(res / "composition.parquet")
    null = pd.read_parquet(res / "null.parquet")
    assert len(circuits) == 12 and len(composition) == 3 * 4 * 4 * 3     # 3 inputs × 16 pairs × 3 pairs of layers
    assert (null["draws"] == config["lens"]["null_draws"]).all() and len(null) == 2 + 6
    paths = pd.read_parquet(workdir / "results" / "tiny-llama" / "circuits" / "paths.parquet")
    verdict = pd.read_parquet(res / "verdict.parquet")
    assert verdict["comparison"].iloc[0] == "composition vs path patching (q, k, v)" and verdict["n"].iloc[0] == len(paths)
    assert verdict["verdict"].str.match(r"(yes|no|not resolved): ").all()
    assert ((verdict["low"] <= verdict["rho"]) & (verdict["rho"] <= verdict["high"])).all()
    assert "OV copying vs induction score" in set(verdict["comparison"])
    assert len(pd.read_parquet(res / "top_paths.parquet")) == paths["receiver"].nunique()
    known = pd.read_parquet(workdir / "results" / "circuits" / "known_weights.parquet")
    assert list(known["model"]) == ["repeated", "control: never repeated"] and (known["edges"] == 12).all()
    assert not known["recovered"].iloc[1]                                   # the control has no circuit to find
    for name in ("direct", "logit_lens", "weights"):
        for ext in ("pdf", "png"):
            assert (workdir / "figures" / "tiny-llama" / "lens" / f"{name}.{ext}").stat().st_size > 0
    pages = workdir / "results" / "tables"
    for table in ("tiny-llama/lens/direct_heads.html", "tiny-llama/lens/verdict.html", "tiny-llama/lens/top_paths.html",
                  "circuits/known_weights.html"):
        assert (pages / table).stat().st_size > 0, table


def test_key_value_groups_and_every_position_with_the_cache(run):
    """The key/value group sweep (one row per layer x group x k|v of the tiny Llama: 2 groups of
    2 heads) and the cached per-position sweep, their guard records and figures."""
    workdir, _, config = run
    res = workdir / "results" / "tiny-llama" / "patching"
    kv = pd.read_parquet(res / "kv_groups.parquet")
    assert list(kv.columns) == ["layer", "group", "site", "label", "heads", "logit_diff", "score", "score_rank"]
    assert len(kv) == 3 * 2 * 2 and set(kv.site) == {"k", "v"} and kv["heads"].iloc[0] == "L0H0 L0H1"
    kv_guards = read_record(res / "kv_groups_guards.json")
    assert kv_guards["passed"] and kv_guards["qkv_is_z"]["identical"] and kv_guards["kv_ungrouped"]["n_cases"] == 3
    every = pd.read_parquet(res / "positions_all.parquet")
    length = len(pd.read_parquet(res / "prompts.parquet").clean_ids.iloc[0])
    chosen = config["patching"].get("positions_all_heads") or 3 * 4
    assert len(every) == chosen * length and every.groupby(["layer", "head"]).size().eq(length).all()
    note = read_note(res / "positions_all.parquet")
    assert note["multiply_adds_loop"] > note["multiply_adds_cached"]
    assert read_record(res / "positions_all_guards.json")["batched_vs_loop"]["passed"]
    for name in ("kv_groups", "positions_all"):
        for ext in ("pdf", "png"):
            assert (workdir / "figures" / "tiny-llama" / "patching" / f"{name}.{ext}").stat().st_size > 0


def test_the_explorer_shows_the_patching_panel(run, browser):  # noqa: F811 -- the fixture imported above
    """The page of the tiny run in Chromium: both layers × heads maps hold the heads table's
    scores, hovering a head reads it out, the residual map has the tokens on its axis."""
    import json

    from test_explorer import _hover, _open

    workdir, _, _ = run
    res = workdir / "results" / "tiny-llama"
    heads = pd.read_parquet(res / "patching" / "heads.parquet").sort_values(["layer", "head"])
    labels = read_note(res / "patching" / "heads.parquet")["position_labels"]
    _open(browser, res / "explorer.html")
    by = "css selector"
    assert browser.find_element(by, "#patching-section").is_displayed()
    assert "Activation patching: the heads that carry the name" in [a.text for a in browser.find_elements(by, "#toc a")]
    for grid, column in (("exact", "score"), ("estimate", "estimate_score")):
        cells = browser.find_elements(by, f"#patching-{grid} .patch-cell")
        assert [float(c.get_attribute("data-score")) for c in cells] == pytest.approx(heads[column].tolist())
    _hover(browser, browser.find_element(by, "#patch-estimate-L1-H2"))
    readout = browser.find_element(by, "#patch-readout")
    assert (readout.get_attribute("data-layer"), readout.get_attribute("data-head")) == ("1", "2")
    assert readout.text.startswith("L1 H2: score ")
    assert len(browser.find_elements(by, "#patching-resid .patch-cell")) == 3 * len(labels)
    assert [t.get_attribute("textContent") for t in browser.find_elements(by, "#patching-resid .tok")] == labels
    assert "prompts; logit difference answer − distractor: clean" in browser.find_element(by, "#patching-line").text
    kv = browser.find_elements(by, "#patching-kv-data tbody tr")         # the top 10 of 12 key/value groups
    assert len(kv) == 10 and kv[0].find_elements(by, "td")[3].text.startswith("L")
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], json.dumps(browser.get_log("browser"))


TABLE_ONLY_SCRIPTS = ("anatomy_rotary", "anatomy_kv_cache", "anatomy_cells", "figures_ablation_topk",
                      "figures_ablation_circuit", "figures_ablation_attribution", "figures_ablation_pairs",
                      "figures_anatomy_params", "figures_anatomy_rotary", "figures_anatomy_kv_cache",
                      "figures_anatomy_kv_cut", "figures_grid", "figures_head", "figures_scores", "figures_sweep",
                      "figures_sweep_study", "figures_patching", "figures_patching_groups", "report_explorer", "report_table", "sweep_study",
                      "sweep_summary", "sweep_course", "figures_sweep_course", "lens_verdict", "figures_lens")
"""Scripts whose jobs read tables and write tables, figures or pages, never a model: about half
the jobs of a run. Importing torch would cost each of them ~2 s of CPU."""


def test_the_snakefiles_parse_imports_neither_torch_nor_pandas():
    """Snakemake parses the Snakefile and every rules file for each command (`snakemake -n` too):
    the library modules they import, all in one fresh interpreter, bring in neither torch nor
    pandas. A table-only job's module (headwatch.sweep.summary) comes last, to show that the
    probe sees pandas when it is imported."""
    sources = [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]
    lines = [line.strip() for f in sources for line in f.read_text().splitlines()
             if line.strip().startswith(("from headwatch", "import headwatch"))]
    assert len(lines) >= 5, lines
    code = "\n".join(["import sys", *lines, "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))",
                      "import headwatch.sweep.summary", "print('pandas' in sys.modules)"])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[]", "True"], result.stdout


def test_table_only_jobs_start_without_torch():
    """The module-level imports of each table-only script, one after the other in one fresh
    interpreter: the first that brings torch in is named. What a model job's script calls
    (scores_heads: ``hw.load_model``, which imports headwatch.model.load when called) comes last,
    to show that the probe sees torch when it is imported."""
    probe = ["import sys"]
    for script in (*TABLE_ONLY_SCRIPTS, "scores_heads"):
        lines = (ROOT / "scripts" / f"{script}.py").read_text().splitlines()
        probe += [line for line in lines if line.startswith(("import ", "from ")) and "__future__" not in line]
        if script == "scores_heads":
            probe.append("import headwatch.model.load")
        probe.append(f"print({script!r}, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", "\n".join(probe)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = dict(line.split() for line in result.stdout.splitlines())
    assert [s for s in TABLE_ONLY_SCRIPTS if seen[s] == "True"] == []
    assert seen["scores_heads"] == "True"
