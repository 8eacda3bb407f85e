"""Every file the workflow writes, each built by one function.

The rules call these with wildcard placeholders (``scores("{model}")`` is the
pattern ``results/{model}/scores.parquet``) and the targets with real values
(``scores("smollm2-135m")``); nothing else spells a path. docs/outputs.md's Outputs
table lists what each file holds.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
from pathlib import Path

RESULTS = "results"
FIGURES = "figures"
SHARED_FOLDERS = ("anatomy", "benchmarks", "circuits", "induction", "logs", "models", "sweep", "tables")
"""The folders of results/ (and figures/) that belong to no model: no model key may take these names."""
EXTENSIONS = ("pdf", "png")          # every figure is written twice: for papers and for screens
PREPARED_RECORD = "prepared.json"
"""The record models_prepare writes last in a prepared model's folder (the source it was made from)."""


def _join(*parts) -> str:
    return "/".join(str(p) for p in parts)


# ------------------------------------------------------------------ models, sequences, maps, scores
def model_dir(model: str) -> str:
    """The prepared model: a float32 safetensors folder and its tokenizer."""
    return _join(RESULTS, "models", model)


def prepared(model: str) -> str:
    """The record written last by models_prepare; its folder is the model."""
    return _join(model_dir(model), PREPARED_RECORD)


def sequence_table(model: str, name: str) -> str:
    return _join(RESULTS, model, "sequences", f"{name}.parquet")


def attention_table(model: str, name: str) -> str:
    """``maps`` or ``tokens``."""
    return _join(RESULTS, model, "attention", f"{name}.parquet")


def predictions(model: str) -> str:
    return _join(RESULTS, model, "predictions.parquet")


def scores(model: str) -> str:
    return _join(RESULTS, model, "scores.parquet")


# ------------------------------------------------------------------ ablation
def ablation_table(model: str, name: str) -> str:
    return _join(RESULTS, model, "ablation", f"{name}.parquet")


def guard_record(model: str, experiment: str) -> str:
    """One ablation rule's guard record (``topk``, ``circuit``, ``attribution``)."""
    return _join(RESULTS, model, "ablation", "guards", f"{experiment}.json")


def guards(model: str) -> str:
    """Every ablation rule's guard record, merged."""
    return _join(RESULTS, model, "ablation", "guards.json")


# ------------------------------------------------------------------ patching
def patching_table(model: str, name: str) -> str:
    """An activation-patching table (``prompts``, ``heads``, ``resid``, ``positions``)."""
    return _join(RESULTS, model, "patching", f"{name}.parquet")


def patching_guards(model: str, name: str = "guards") -> str:
    """A patching rule's guard record (``guards``: the sweep's; ``kv_groups_guards``, ``positions_all_guards``)."""
    return _join(RESULTS, model, "patching", f"{name}.json")


# ------------------------------------------------------------------ circuits
def circuits_table(model: str, name: str) -> str:
    """A path-patching table of a studied model (``paths``)."""
    return _join(RESULTS, model, "circuits", f"{name}.parquet")


def circuits_guards(model: str) -> str:
    """The path-patching rule's guard record."""
    return _join(RESULTS, model, "circuits", "guards.json")


def known_circuit_table() -> str:
    """What each method recovers of the circuit known before looking (model-independent)."""
    return _join(RESULTS, "circuits", "known.parquet")


def circuits_figure(model: str, name: str, ext: str) -> str:
    return _join(FIGURES, model, "circuits", f"{name}.{ext}")


KNOWN_MODELS = ("repeated", "control")
"""The known circuit's two trained models (§5f): the one that grows the circuit and its control."""


def known_model(name: str) -> str:
    """One of the known circuit's trained models (:data:`KNOWN_MODELS`), saved by rule circuits_known."""
    return _join(RESULTS, "circuits", "known", f"{name}.pt")


# ------------------------------------------------------------------ edge circuits (§5g)
EDGES_TABLES = ("scores", "nodes", "faithfulness", "areas", "circuit", "agreement")
"""A studied model's edge-circuit tables: every edge's scores, every node's, the faithfulness curves,
their areas (CPR, CMD), the best small circuit and the agreement with path patching."""
KNOWN_EDGES_TABLES = ("known_edges", "known_edge_curves")
"""The known circuit read edge by edge (§5f, §5g): the claims and the faithfulness curves."""


def edges_table(model: str, name: str) -> str:
    """One of :data:`EDGES_TABLES`: ``results/{model}/edges/{name}.parquet``."""
    return _join(RESULTS, model, "edges", f"{name}.parquet")


def edges_guards(model: str) -> str:
    """The faithfulness runs' guard record."""
    return _join(RESULTS, model, "edges", "guards.json")


def known_edges_table(name: str) -> str:
    """One of :data:`KNOWN_EDGES_TABLES`: ``results/circuits/{name}.parquet``."""
    return _join(RESULTS, "circuits", f"{name}.parquet")


def edges_figure(model: str, name: str, ext: str) -> str:
    return _join(FIGURES, model, "edges", f"{name}.{ext}")


# ------------------------------------------------------------------ the lens (§5h)
LENS_TABLES = ("direct", "direct_heads", "logit_lens", "circuits", "composition", "null", "verdict", "top_paths")
"""A studied model's lens tables: every component's direct effect, each head's beside patching's total
effect, the logit lens, each head's OV copying and QK same-token scores, every pair's composition scores,
the nulls, the weights against the activations (the verdict) and each receiver's strongest path by the
weights."""
LENS_FIGURES = ("direct", "logit_lens", "weights")


def lens_table(model: str, name: str) -> str:
    """One of :data:`LENS_TABLES`: ``results/{model}/lens/{name}.parquet``."""
    return _join(RESULTS, model, "lens", f"{name}.parquet")


def lens_guards(model: str) -> str:
    """The direct effects' guard record (the sum guard, the lens's)."""
    return _join(RESULTS, model, "lens", "guards.json")


def known_weights_table() -> str:
    """The circuit known before looking (§5f) read by the weights: ``results/circuits/known_weights.parquet``."""
    return _join(RESULTS, "circuits", "known_weights.parquet")


def lens_figure(model: str, name: str, ext: str) -> str:
    """One of :data:`LENS_FIGURES`."""
    return _join(FIGURES, model, "lens", f"{name}.{ext}")


# ------------------------------------------------------------------ anatomy
def anatomy_table(name: str) -> str:
    """A model-independent anatomy table (survey, params_by_block, rotary, ...)."""
    return _join(RESULTS, "anatomy", f"{name}.parquet")


def model_anatomy(model: str, file: str) -> str:
    """A per-model anatomy record, ``file`` with its extension (``weight_check.json``, ...)."""
    return _join(RESULTS, model, "anatomy", file)


def reference_config(name: str) -> str:
    """A reference config shipped with the workflow (an input, never written)."""
    return _join("config", "models", f"{name}.json")


# ------------------------------------------------------------------ sweep
SWEEP_CORPUS_FILES = {"ids": "ids.npy", "meta": "meta.json", "text": "corpus.txt"}


def sweep_corpus(part: str) -> str:
    """The character corpus: ``ids``, ``meta`` or ``text``."""
    return _join(RESULTS, "sweep", "corpus", SWEEP_CORPUS_FILES[part])


def sweep_run(sweep: str, shape: str, seed, file: str) -> str:
    """A training job's output (``metrics.parquet``, ``model.pt``, ``checkpoint.pt``)."""
    return _join(RESULTS, "sweep", sweep, shape, f"seed{seed}", file)


def sweep_stack(sweep: str, stack: str) -> str:
    """A training job's folder: every model of one stack (:func:`headwatch.sweep.plan.stacks`), each
    run's files under ``{shape}/seed{seed}/`` (rule sweep_run gives each its own place)."""
    return _join(RESULTS, "sweep", sweep, "stacks", stack)


def sweep_stack_checkpoint(sweep: str, stack: str) -> str:
    """A stack's checkpoint while it trains: beside its folder, not in it (Snakemake clears an
    output folder before its job runs; a checkpoint must outlive an interrupted job)."""
    return _join(RESULTS, "sweep", sweep, "stacks", f"{stack}.checkpoint.pt")


SWEEP_RUN_FILES = ("metrics.parquet", "model.pt", "heads.parquet")
"""What a trained run leaves, in its stack's folder and in its own (:func:`sweep_run`)."""
FILE_RULES = ("sweep_run",)
"""Rules whose jobs only give a run its own files (hard links to its stack's): no model, no Python,
so no resources line in their logs."""


def run_output(run: dict, file: str) -> str:
    """``file`` of a planned run (:func:`headwatch.sweep.plan.runs`), in the folder of the
    sweep that trains it (its owner)."""
    return sweep_run(run["trained_under"], run["shape"], run["seed"], file)


SWEEP_HEADS_TABLES = ("runs", "summary", "curves", "grid")
"""The study of the heads the sweep's models grow (protocol §7b): per run, per configuration, per step."""


def sweep_heads_cut(sweep: str, shape: str, seed) -> str:
    """One trained model's top induction head cut against random heads (§7b, the §5a code)."""
    return _join(RESULTS, "sweep", "heads", "cut", sweep, shape, f"seed{seed}.parquet")


def sweep_heads_table(name: str) -> str:
    """The heads study: ``runs``, ``summary``, ``curves`` or ``grid`` (:data:`SWEEP_HEADS_TABLES`)."""
    return _join(RESULTS, "sweep", "heads", f"{name}.parquet")


def sweep_table(name: str, pair: str | None = None) -> str:
    """One of the sweep summary's tables (:data:`headwatch.workflow.targets.SWEEP_TABLES`): the default
    pair's, ``results/sweep/{name}.parquet``, or those of the pair ``pair`` of ``sweep.summary.pairs``,
    ``results/sweep/pairs/{pair}/{name}.parquet`` (the same names)."""
    return _join(RESULTS, "sweep", f"{name}.parquet") if pair is None else \
        _join(RESULTS, "sweep", "pairs", pair, f"{name}.parquet")


COURSE_TABLES = ("curves", "events", "events_summary", "gaps", "verdicts")
"""The tables of one sweep's course (rule sweep_course, :func:`headwatch.sweep.course.course`)."""


def course_table(sweep: str, name: str) -> str:
    """One sweep's course of training (protocol §7, §7b): one of :data:`COURSE_TABLES`."""
    return _join(RESULTS, "sweep", "course", sweep, f"{name}.parquet")


STUDY_TABLES = {"summary": "", "finals": "_finals", "contrasts": "_contrasts"}
"""A study's tables (rule sweep_study) by name, and what each adds to the study's file name: its
summary per configuration, every run's final numbers, its contrasts with their intervals and verdicts."""


def study_table(study: str, table: str = "summary") -> str:
    """One of a study's tables (:data:`STUDY_TABLES`): ``results/sweep/studies/{study}[_{table}].parquet``."""
    return _join(RESULTS, "sweep", "studies", f"{study}{STUDY_TABLES[table]}.parquet")


VOCAB_FILES = {"tokenizer": "tokenizer.json", "meta": "meta.json", "train": "train.npy", "val": "val.npy",
               "split": "split.json"}


def sweep_vocab(vocab: str, part: str) -> str:
    """A vocabulary of the corpus (``bpe{size}``; headwatch.charlm.tokenizer): ``tokenizer``,
    ``meta``, the ``train``/``val`` token ids or the ``split`` record."""
    return _join(RESULTS, "sweep", "corpus", "vocab", vocab, VOCAB_FILES[part])


# ------------------------------------------------------------------ the induction sweep (§7c)
INDUCTION_RUN_FILES = ("curves", "records", "edges")
"""What one training job of the induction sweep writes (one task, one shape, every seed)."""
INDUCTION_TABLES = ("runs", "curves", "heads", "summary", "survival", "regression", "controls")
"""The induction sweep's tables (rule induction_summary, :mod:`headwatch.induction.analysis`)."""


def induction_run(task: str, shape: str, name: str) -> str:
    """``results/induction/{task}/{shape}/{name}.parquet``: one of :data:`INDUCTION_RUN_FILES`."""
    return _join(RESULTS, "induction", task, shape, f"{name}.parquet")


def induction_table(name: str) -> str:
    """One of :data:`INDUCTION_TABLES`: ``results/induction/{name}.parquet``."""
    return _join(RESULTS, "induction", f"{name}.parquet")


# ------------------------------------------------------------------ report
def explorer(model: str) -> str:
    return _join(RESULTS, model, "explorer.html")


def table(scope: str, name: str) -> str:
    """Any table by scope (``{model}``, ``sweep``, ``anatomy``) and name (may hold a ``/``)."""
    return _join(RESULTS, scope, f"{name}.parquet")


def table_page(scope: str, name: str) -> str:
    """The HTML page of :func:`table` for Snakemake's report."""
    return _join(RESULTS, "tables", scope, f"{name}.html")


def page_of(table_path: str) -> str:
    """The page of a table path under ``results/`` (``results/a/b.parquet`` → its page)."""
    rel = table_path[len(RESULTS) + 1:] if table_path.startswith(f"{RESULTS}/") else None
    if rel is None or not rel.endswith(".parquet") or "/" not in rel:
        raise ValueError(f"{table_path!r} is not a table under {RESULTS}/<scope>/")
    scope, name = rel[:-len(".parquet")].split("/", 1)
    return table_page(scope, name)


def run_config() -> str:
    """The merged configuration of the last run that executed jobs."""
    return _join(RESULTS, "run_config.yaml")


def timed_run(name: str) -> str:
    """The record of one timed make target (``make laptop``: ``laptop``): wall and CPU time, machine,
    load, commit (:func:`headwatch.workflow.run_record.timed`)."""
    return _join(RESULTS, "timing", f"{name}.json")


# ------------------------------------------------------------------ figures
def head_figure(model: str, name: str, ext: str) -> str:
    """figures/{model}/{name}.{ext}: grids, enlarged heads, ranked scores."""
    return _join(FIGURES, model, f"{name}.{ext}")


def ablation_figure(model: str, name: str, ext: str) -> str:
    return _join(FIGURES, model, "ablation", f"{name}.{ext}")


def patching_figure(model: str, name: str, ext: str) -> str:
    return _join(FIGURES, model, "patching", f"{name}.{ext}")


def anatomy_figure(name: str, ext: str) -> str:
    return _join(FIGURES, "anatomy", f"{name}.{ext}")


def model_anatomy_figure(model: str, name: str, ext: str) -> str:
    return _join(FIGURES, model, "anatomy", f"{name}.{ext}")


def sweep_figure(name: str, ext: str, pair: str | None = None) -> str:
    """``figures/sweep/{name}.{ext}``; a summary pair's own (``pair``): ``figures/sweep/pairs/{pair}/{name}.{ext}``."""
    return _join(FIGURES, "sweep", f"{name}.{ext}") if pair is None else \
        _join(FIGURES, "sweep", "pairs", pair, f"{name}.{ext}")


def course_figure(sweep: str, key: str, ext: str) -> str:
    """One sweep's course figure (protocol §7, §7b; :data:`headwatch.workflow.targets.SWEEP_COURSE_FIGURES`):
    ``figures/sweep/course/{sweep}/{key}.{ext}`` — the sweep's name a folder of its own, so that the
    longest file name stays the name plus what every other figure adds."""
    return _join(FIGURES, "sweep", "course", sweep, f"{key}.{ext}")


def induction_figure(name: str, ext: str) -> str:
    """``figures/induction/{name}.{ext}`` (:data:`headwatch.workflow.targets.INDUCTION_FIGURES`)."""
    return _join(FIGURES, "induction", f"{name}.{ext}")


# ------------------------------------------------------------------ logs and time/memory records
def log(rule: str, *wildcards: str) -> str:
    """A rule's log: ``results/logs/{rule}.log``, or ``results/logs/{rule}/{w1}/.../{wn}.log``."""
    return _join(RESULTS, "logs", rule, *wildcards) + ".log" if wildcards else _join(RESULTS, "logs", f"{rule}.log")


def benchmark(rule: str, *wildcards: str) -> str:
    """A rule's time/memory record, laid out like its log."""
    return (_join(RESULTS, "benchmarks", rule, *wildcards) + ".tsv" if wildcards
            else _join(RESULTS, "benchmarks", f"{rule}.tsv"))


# ------------------------------------------------------------------ temporary names
def temporary(target) -> Path:
    """A name beside ``target`` that no other writer can be given: the host, the process and 64
    random bits (``.<name>.<host>-<pid>-<hex>.tmp``). Two processes — on one machine, or on the
    nodes of a cluster sharing a file system, where process ids can coincide — never write through
    one temporary name; the finished file then takes ``target``'s name by one atomic rename
    (:func:`written`). The name is at most :data:`TEMPORARY_NAME_MAX` characters whatever the
    target's (its first 100 characters kept), within every file system's 255."""
    target = Path(target)
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:16] or "host"
    return target.with_name(f".{target.name[:100]}.{host}-{os.getpid()}-{secrets.token_hex(8)}.tmp")


TEMPORARY_NAME_MAX = 1 + 100 + 1 + 16 + 1 + 10 + 1 + 16 + 4
"""The longest name :func:`temporary` gives (a process id has at most 10 digits on Linux)."""


@contextlib.contextmanager
def written(target):
    """A context manager: the temporary name (:func:`temporary`) to write ``target`` through; on a
    clean exit it replaces ``target`` in one rename (a reader sees the old file or the new, whole),
    on an error it is removed. A folder written through it may replace only a missing ``target``
    or an empty folder (``os.replace``'s rule)::

        with paths.written("results/run_config.yaml") as tmp:
            tmp.write_text(text)
    """
    tmp = temporary(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
