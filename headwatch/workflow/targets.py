"""What the workflow makes: the targets of ``rule all``, stage by stage, and the inputs that
exist only when some rule of the DAG makes them (the explorer's optional tables, the
report's table pages).

Every function takes the validated config; those that depend on the DAG take
``producible(path) -> bool`` (does some rule write this path?), which the rules
answer from Snakemake's own rule list. Paths come from :mod:`headwatch.paths`.
"""
from __future__ import annotations

from typing import Callable

from .. import paths
from ..names import SCORES
from ..scores.sequences import SETS
from ..settings.induction import InductionSettings
from ..settings.induction import jobs as induction_jobs
from ..settings.sweep import SummarySettings, active_sweeps, course_sweeps, summary_pairs
from ..sweep import plan

ABLATION_EXPERIMENTS = ("topk", "circuit", "attribution")
"""The ablation rules' experiments (protocol §5a–c); each writes a guard record."""
ABLATION_TABLES = ("topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary", "pairs")
PATCHING_TABLES = ("prompts", "heads", "resid", "positions")
"""The activation-patching tables (protocol §5d); the rule also writes a guard record."""
PATCHING_FIGURES = ("heads", "resid", "top_heads")
PATCHING_GROUP_TABLES = ("kv_groups", "positions_all")
"""The key/value group sweep's and the cached per-position sweep's tables (protocol §5d), each with
its own guard record (``kv_groups_guards``, ``positions_all_guards``)."""
PATCHING_GROUP_FIGURES = ("kv_groups", "positions_all")
CIRCUITS_TABLES = ("paths",)
"""The path-patching tables (protocol §5e); the rule also writes a guard record."""
CIRCUITS_FIGURES = ("paths",)
EDGES_FIGURES = ("faithfulness", "circuit")
"""A studied model's edge-circuit figures (rule figures_edges): the faithfulness curves with the random
band, and the best small circuit drawn by layer."""
ANATOMY_TABLES = ("survey", "params_by_block", "rotary", "kv_cache", "attention_cells")
MODEL_ANATOMY_FILES = ("head_slices.json", "weight_check.json", "kv_groups.parquet", "kv_similarity.parquet")
SWEEP_TABLES = ("summary", "contrast", "finals", "curves", "summary_best", "contrast_best", "overfitting")
"""The sweep summary's tables (rule sweep_summary, protocol §7): the summary and the contrast at the last step
(their names from before the two readings), the same at each run's best validation (``_best``), every run's
finals and curves, and each configuration's rise from its best (``overfitting``). Each further pair of
``sweep.summary.pairs`` has the same tables of its own (rule sweep_pair, :func:`headwatch.paths.sweep_table`)."""
HEAD_FIGURES = ("scores_ranked", "sink_vs_induction")
ABLATION_FIGURES = ("topk", "circuit", "pairs")
ANATOMY_FIGURES = ("params_by_block", "rotary_clocks", "kv_cache")
SWEEP_FIGURES = {"heads": "loss_vs_heads", "width": "loss_vs_width", "contrast": "contrast",
                 "curves": "training_curves", "readings": "readings"}
"""The sweep's figures by output key (rule figures_sweep) and file stem."""
SWEEP_HEADS_FIGURES = {"formation": "heads_formation", "finals": "heads_finals", "grid": "heads_grid"}
"""The figures of the heads the split sweep's models grow (protocol §7b; rule figures_sweep_heads)."""
SWEEP_COURSE_FIGURES = ("events", "gaps")
"""The figures of a sweep's course (rule figures_sweep_course): ``course_{sweep}_{key}``."""
INDUCTION_FIGURES = ("curves", "survival", "heads")
"""The induction sweep's figures (rule figures_induction, protocol §7c): every run's loss on the predictable
part against step, the Kaplan–Meier curves of the time to each event per cell, the induction heads at the end."""
EXPLORER_ABLATION = ("topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary")
EXPLORER_PATCHING = {"patching_heads": "heads", "patching_resid": "resid", "patching_kv_groups": "kv_groups"}
"""The explorer's patching inputs by key (report_explorer) and table name."""
EXPLORER_CIRCUITS = {"circuits_paths": "paths"}
"""The explorer's path-patching input by key (report_explorer) and table name."""
EXPLORER_EDGES = {"edges_circuit": "circuit", "edges_areas": "areas"}
"""The explorer's edge-circuit inputs by key (report_explorer) and table name."""
EXPLORER_SWEEP = {"sweep_summary": "summary", "sweep_contrast": "contrast"}
EXPLORER_LENS = {"lens_circuits": "circuits", "lens_composition": "composition", "lens_direct_heads": "direct_heads",
                 "lens_verdict": "verdict", "lens_logit_lens": "logit_lens"}
"""The explorer's lens inputs by key (report_explorer; headwatch.explorer.panels' names) and table name."""

PARTS = ("models", "sweep", "induction")
"""What the default target may make (config ``default_target``): ``models`` = every stage on the
studied models (sequences, attention, scores, cuts, anatomy, their figures, the explorer and
their table pages); ``sweep`` = the training sweep, its studies, figures and table pages;
``induction`` = the induction sweep (protocol §7c), its tables, figures and table pages."""

Producible = Callable[[str], bool]


def figure_pair(make, *args) -> list[str]:
    """Both files (PDF, PNG) of one figure: ``make(*args, ext)`` for each extension."""
    return [make(*args, ext) for ext in paths.EXTENSIONS]


def models(config: dict) -> list[str]:
    return list(config["models_studied"])


def sequences(config: dict) -> list[str]:
    return [paths.sequence_table(m, s) for m in models(config) for s in SETS]


def attention(config: dict) -> list[str]:
    return [p for m in models(config) for p in (paths.attention_table(m, "maps"),
                                                paths.attention_table(m, "tokens"), paths.predictions(m))]


def scores(config: dict) -> list[str]:
    return [paths.scores(m) for m in models(config)]


def ablation(config: dict) -> list[str]:
    return [p for m in models(config)
            for p in [paths.ablation_table(m, t) for t in ABLATION_TABLES] + [paths.guards(m)]]


def paper_page(model: str) -> list[str]:
    """What the results page's section on one studied model reads (benchmarks/gpu/paper_tables.py),
    the targets its run asks for: the model's scores, every ablation table (5a with both cut
    methods, 5b, 5c) and their merged guard record, its anatomy files (the weight check's and
    the key-group cuts' guards), and its activation-patching tables and guard record. Their sequences
    and prepared model come with them."""
    return ([paths.scores(model)] + [paths.ablation_table(model, t) for t in ABLATION_TABLES]
            + [paths.guards(model)] + [paths.model_anatomy(model, f) for f in MODEL_ANATOMY_FILES]
            + [paths.patching_table(model, t) for t in PATCHING_TABLES] + [paths.patching_guards(model)])


def patching(config: dict) -> list[str]:
    return [p for m in models(config)
            for p in [paths.patching_table(m, t) for t in PATCHING_TABLES] + [paths.patching_guards(m)]
            + [paths.patching_table(m, t) for t in PATCHING_GROUP_TABLES]
            + [paths.patching_guards(m, f"{t}_guards") for t in PATCHING_GROUP_TABLES]]


def circuits(config: dict) -> list[str]:
    """Path patching's tables and guard record per studied model (§5e), the known circuit's table (§5f)."""
    return [p for m in models(config)
            for p in [paths.circuits_table(m, t) for t in CIRCUITS_TABLES] + [paths.circuits_guards(m)]] + [
        paths.known_circuit_table()]


def edge_models(config: dict, families: dict | None = None) -> list[str]:
    """The studied models whose family has an edge graph (``families``: each model's ``model_type``,
    from the pre-job checks; a family with post-norms has none, and the checks say so; None: every
    studied model)."""
    from ..model.arch import all_families

    known = all_families()
    return [m for m in models(config)
            if families is None or not getattr(known.get(families.get(m)), "no_edges", "")]


def edges(config: dict, families: dict | None = None) -> list[str]:
    """Each edge-capable studied model's edge tables and guard record (§5g), and the known circuit
    read edge by edge."""
    return [p for m in edge_models(config, families)
            for p in [paths.edges_table(m, t) for t in paths.EDGES_TABLES] + [paths.edges_guards(m)]] + [
        paths.known_edges_table(t) for t in paths.KNOWN_EDGES_TABLES]


def lens(config: dict) -> list[str]:
    """Each studied model's lens tables and guard record (§5h: direct effects, the logit lens, the weights'
    circuits, their verdict), and the known circuit read by the weights."""
    return [p for m in models(config)
            for p in [paths.lens_table(m, t) for t in paths.LENS_TABLES] + [paths.lens_guards(m)]] + [
        paths.known_weights_table()]


def rule_guard_records(model: str) -> list[str]:
    """The guard records one model's rules write, each holding its guards by name: each ablation
    rule's, activation patching's (the head sweep's, the key/value groups', the cached sweep's) and
    path patching's."""
    return ([paths.guard_record(model, e) for e in ABLATION_EXPERIMENTS] + [paths.patching_guards(model)]
            + [paths.patching_guards(model, f"{t}_guards") for t in PATCHING_GROUP_TABLES]
            + [paths.circuits_guards(model), paths.lens_guards(model)])


def guard_records(config: dict) -> list[str]:
    """Every guard record of the studied models (read through headwatch.tableio.read_record):
    each rule's (:func:`rule_guard_records`) and the ablation rules' merge."""
    return [p for m in models(config) for p in rule_guard_records(m) + [paths.guards(m)]]


def anatomy(config: dict) -> list[str]:
    return ([paths.anatomy_table(t) for t in ANATOMY_TABLES]
            + [paths.model_anatomy(m, f) for m in models(config) for f in MODEL_ANATOMY_FILES])


def summarized(config: dict) -> bool:
    """Whether the sweep's summary and the heads study are made: both sweeps it compares
    (``sweep.summary``: the split sweep and the capacity sweep) are planned. An overlay that
    skips them (config/laptop_long.yaml) trains and reads only its own sweeps."""
    planned, summary = active_sweeps(config["sweep"]), SummarySettings.from_config(config["sweep"]["summary"])
    return summary.split_sweep in planned and summary.capacity.sweep in planned


def sweep(config: dict) -> list[str]:
    """Every training job's outputs (each once, under its owner), the summaries (when their sweeps
    are planned: the default pair's with the heads study, each further pair's), each study's tables,
    each course's tables."""
    s = config["sweep"]
    return ([paths.run_output(r, f) for r in plan.train_jobs(s)
             for f in ("metrics.parquet", "model.pt", "heads.parquet")]
            + ([paths.sweep_table(t) for t in SWEEP_TABLES]
               + [paths.sweep_heads_table(t) for t in paths.SWEEP_HEADS_TABLES] if summarized(config) else [])
            + [paths.sweep_table(t, p) for p in summary_pairs(s) for t in SWEEP_TABLES]
            + [paths.study_table(n, t) for n in plan.studies(s) for t in paths.STUDY_TABLES]
            + [paths.course_table(n, t) for n in course_sweeps(s) for t in paths.COURSE_TABLES])


def induction(config: dict) -> list[str]:
    """Every training job's tables and the summary's (protocol §7c)."""
    s = InductionSettings.from_config(config["induction"])
    return ([paths.induction_run(task, shape, name) for task, shape in induction_jobs(s)
             for name in paths.INDUCTION_RUN_FILES] + [paths.induction_table(n) for n in paths.INDUCTION_TABLES])


def figures(config: dict, families: dict | None = None) -> list[str]:
    """Every figure of the default target's parts."""
    return ((model_figures(config, families) if "models" in parts(config) else [])
            + (sweep_figures(config) if "sweep" in parts(config) else [])
            + ([f for key in INDUCTION_FIGURES for f in figure_pair(paths.induction_figure, key)]
               if "induction" in parts(config) else []))


def sweep_figures(config: dict) -> list[str]:
    return ([f for stem in (*SWEEP_FIGURES.values(), *SWEEP_HEADS_FIGURES.values())
             for f in figure_pair(paths.sweep_figure, stem)] if summarized(config) else []) + (
        [paths.sweep_figure(stem, ext, p) for p in summary_pairs(config["sweep"]) for stem in SWEEP_FIGURES.values()
         for ext in paths.EXTENSIONS]) + (
        [f for n in plan.studies(config["sweep"]) for f in figure_pair(paths.sweep_figure, f"study_{n}")]
        + [f for n in course_sweeps(config["sweep"]) for key in SWEEP_COURSE_FIGURES
           for f in figure_pair(paths.course_figure, n, key)])


def model_figures(config: dict, families: dict | None = None) -> list[str]:
    out = [f for m in edge_models(config, families) for name in EDGES_FIGURES
           for f in figure_pair(paths.edges_figure, m, name)]
    for m in models(config):
        out += [f for phrase in config["phrases"] for f in figure_pair(paths.head_figure, m, f"grid_{phrase}")]
        out += [f for score in SCORES for f in figure_pair(paths.head_figure, m, f"head_{score}")]
        out += [f for name in HEAD_FIGURES for f in figure_pair(paths.head_figure, m, name)]
    out += [f for name in ANATOMY_FIGURES for f in figure_pair(paths.anatomy_figure, name)]
    out += [f for m in models(config) for f in figure_pair(paths.model_anatomy_figure, m, "kv_cut_matrix")]
    for m in models(config):
        out += [f for name in ABLATION_FIGURES for f in figure_pair(paths.ablation_figure, m, name)]
        out += [f for phrase in config["phrases"]
                for f in figure_pair(paths.ablation_figure, m, f"attribution_{phrase}")]
        out += [f for name in PATCHING_FIGURES for f in figure_pair(paths.patching_figure, m, name)]
        out += [f for name in PATCHING_GROUP_FIGURES for f in figure_pair(paths.patching_figure, m, name)]
        out += [f for name in CIRCUITS_FIGURES for f in figure_pair(paths.circuits_figure, m, name)]
        out += [f for name in paths.LENS_FIGURES for f in figure_pair(paths.lens_figure, m, name)]
    return out


def unmade_tables(config: dict, producible: Producible) -> list[str]:
    """Each entry of ``report.tables`` whose table no rule of the workflow makes, named by its
    key (a misspelled name would otherwise leave the report without its page, in silence):
    a per-model table for any studied model, a shared one under ``results/``."""
    tables, errors = config["report"]["tables"], []
    for i, name in enumerate(tables["per_model"]):
        missing = [paths.table(m, name) for m in models(config) if not producible(paths.table(m, name))]
        if missing:
            errors.append(f"report.tables.per_model[{i}] = {name!r}: no rule of the workflow makes {missing[0]}")
    for i, name in enumerate(tables["shared"]):
        if not producible(paths.table(*name.split("/", 1))):
            errors.append(f"report.tables.shared[{i}] = {name!r}: no rule of the workflow makes "
                          f"{paths.table(*name.split('/', 1))}")
    return errors


def report_tables(config: dict, producible: Producible, families: dict | None = None) -> list[str]:
    """The key tables of ``report.tables``, every planned study's summary and contrasts and every summarized
    further pair's summary and contrast (``sweep.summary.pairs``), as HTML
    pages, each only when some rule of the workflow makes its table (the Snakefile refuses an entry
    no rule makes before any job: :func:`unmade_tables`; a workflow built without a stage
    leaves its pages out) and its part is in the default target (a shared table under
    ``sweep/`` is the sweep's)."""
    tables, wanted = config["report"]["tables"], parts(config)
    edged = edge_models(config, families)
    found = [paths.table(m, t) for t in tables["per_model"] for m in models(config)
             if not t.startswith("edges/") or m in edged] if "models" in wanted else []
    found += [paths.table(*t.split("/", 1)) for t in tables["shared"]
              if _part_of(t.split("/", 1)[0]) in wanted and (t.split("/", 1)[0] != "sweep" or summarized(config))]
    found += [paths.study_table(n, t) for n in plan.studies(config["sweep"])
              for t in ("summary", "contrasts")] if "sweep" in wanted else []
    found += [paths.sweep_table(t, p) for p in summary_pairs(config["sweep"])
              for t in ("summary", "contrast")] if "sweep" in wanted else []
    return [paths.page_of(t) for t in found if producible(t)]


def _part_of(scope: str) -> str:
    """The part of the workflow a shared table's scope belongs to."""
    return scope if scope in ("sweep", "induction") else "models"


def report(config: dict, producible: Producible, families: dict | None = None) -> list[str]:
    explorers = [paths.explorer(m) for m in models(config)] if "models" in parts(config) else []
    return explorers + report_tables(config, producible, families)


def parts(config: dict) -> list[str]:
    """The parts of the workflow the default target makes (config ``default_target``, :data:`PARTS`)."""
    return list(config["default_target"])


def all_targets(config: dict, producible: Producible, families: dict | None = None) -> list[str]:
    """Everything ``rule all`` asks for: the parts in ``default_target`` (``families``: each studied
    model's ``model_type``, so that models without an edge graph get no edge circuits)."""
    wanted = parts(config)
    models_part = (sequences(config) + attention(config) + scores(config) + ablation(config)
                   + patching(config) + circuits(config) + edges(config, families) + lens(config)
                   + anatomy(config)) if "models" in wanted else []
    return (models_part + (sweep(config) if "sweep" in wanted else [])
            + (induction(config) if "induction" in wanted else []) + figures(config, families)
            + report(config, producible, families))


def explorer_inputs(model: str, config: dict, producible: Producible, families: dict | None = None) -> dict:
    """The explorer page's inputs: the spine tables always; the ablation, patching, path-patching
    and sweep tables whenever a rule of the workflow makes them (so a workflow without those
    stages still builds a page, without their sections)."""
    inputs = dict(model=paths.prepared(model), maps=paths.attention_table(model, "maps"),
                  tokens=paths.attention_table(model, "tokens"), predictions=paths.predictions(model),
                  scores=paths.scores(model),
                  references=[paths.reference_config(r) for r in config["report"]["explorer"]["rotary_references"]])
    for name in EXPLORER_ABLATION:
        if producible(paths.ablation_table(model, name)):
            inputs[name] = paths.ablation_table(model, name)
    for key, name in EXPLORER_PATCHING.items():
        if producible(paths.patching_table(model, name)):
            inputs[key] = paths.patching_table(model, name)
    for key, name in EXPLORER_CIRCUITS.items():
        if producible(paths.circuits_table(model, name)):
            inputs[key] = paths.circuits_table(model, name)
    for key, name in EXPLORER_EDGES.items():
        if producible(paths.edges_table(model, name)) and model in edge_models(config, families):
            inputs[key] = paths.edges_table(model, name)
    for key, name in EXPLORER_SWEEP.items():
        if producible(paths.sweep_table(name)) and summarized(config):
            inputs[key] = paths.sweep_table(name)
    for key, name in EXPLORER_LENS.items():
        if producible(paths.lens_table(model, name)):
            inputs[key] = paths.lens_table(model, name)
    return inputs
