"""headwatch: open up the attention heads of a causal language model.

Measure what every head does, cut heads beside randomly chosen ones for comparison, patch
activations and paths between heads on prompt pairs of your own — from a notebook with the
functions below, or for a whole model with the Snakemake workflow (README.md), which calls the
same functions::

    import headwatch as hw

    m = hw.load_model()                          # the bundled SmolLM2-135M (or a folder, a hub id)
    scores = hw.head_scores(m)                   # sink, prev, self, induction for every head
    cuts = hw.cut_heads(m, scores)               # top induction heads cut, beside random heads
    prompts = hw.prompt_pairs(m, pairs)          # your clean/corrupted pairs (a DataFrame or a file)
    heads = hw.patch_heads(m, prompts)           # every head patched clean -> corrupted
    hw.plot_heads(heads)                         # a matplotlib Figure (hw.plot_scores, plot_cuts, ...)
    paths = hw.path_patching(m, prompts, heads)  # head -> head paths into the top heads
    edges = hw.edge_scores(m, prompts)           # every edge of the graph: EAP, EAP-IG
    curves = hw.edge_faithfulness(m, prompts, edges)   # circuits of MIB's sizes, how faithful
    direct = hw.direct_effects(m, prompts, heads)    # what each head writes into the answer, beside patching
    circuits = hw.weight_circuits(m)             # OV copying, QK, composition scores: the weights alone
    hw.guards_of(heads)                          # the checks the numbers passed
    mine = hw.sequences(m, ["your own text"])    # your text as the tables the scores read

A wrong argument, setting or table is refused before any model pass, in one line naming the function
and the argument: ``hw.ConfigError``, ``hw.TableError``, ``hw.PatchingError`` (prompt pairs),
``hw.ModelNotFoundError``, ``hw.ModelFileError`` (a model's file); a failed guard raises ``hw.GuardError``;
prompt pairs that do not separate clean from corrupted warn ``hw.WeakPairsWarning``.

Every function returns a pandas DataFrame with the columns of the workflow's table of the same
name (docs/api.md); notes, guard records and companion tables ride on its ``attrs``.

A head is addressed as ``(layer, head)``, 0-based, layer first, everywhere.

The library, by stage (each package mirrors a file of ``rules/``; docs/architecture.md maps it):

    model       load a model; one adapter per family (the only code that knows module names);
                every edit and capture of a forward pass; recomputed attention; parameters
    scores      the seeded token sets, attention maps, the four head scores (§2–§4)
    ablation    cutting heads, the experiments of §5, their guards
    patching    activation patching: prompts and pairs, the patcher, every position, key/value
                groups, attribution patching (AtP, AtP*), the guards of §5d–§5e
    circuits    path patching between heads (§5e), the circuit known before looking (§5f), the
                edge graph, its attribution (EAP, EAP-IG) and circuits' faithfulness (§5g)
    lens        direct effects, the logit lens, the weights' circuits (composition, copying) and
                whether they predict the paths patching measures (§5h)
    anatomy     configs, parameters by block, rotary, KV cache, weights by hand (§6)
    charlm      the sweep's character-level model, its corpus and tokenizers (§7)
    sweep       the training sweep: plan, training, the heads it grows, summaries, studies, course
    figures     one figure style and the plots; explorer: the offline page per model
    settings    each stage's settings, typed (torch-free); config: the checks before any job
    workflow    what the rules ask: targets, the run a report describes, provenance, GPU shares

and, at the top, the pieces every stage shares: ``api`` (the functions above), ``guards`` (the one
comparison and record every guard writes), ``tableio`` (guarded Parquet and JSON), ``paths`` (every
file the workflow writes), ``names`` (names shared with the rules, torch-free), ``markup`` (text
from a config as data on every page), ``jobs`` (a rule script's log and resources).

Importing headwatch loads nothing heavy: the functions are read from :mod:`headwatch.api` on first
use (the Snakefile imports this package on every parse).
"""
__version__ = "0.1.0"

from .names import ERRORS, FUNCTIONS, PUBLIC, WARNINGS

__all__ = list(PUBLIC)


def __getattr__(name: str):
    if name in ERRORS or name in WARNINGS:
        import importlib

        return getattr(importlib.import_module(ERRORS.get(name) or WARNINGS[name]), name)
    if name in FUNCTIONS:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'headwatch' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
