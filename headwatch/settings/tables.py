"""The tables and the plain arguments the public functions take, checked before any model pass and
before any drawing (one validation for tables and arguments as :mod:`headwatch.config` is for
settings): the columns each table reads, their kinds and ranges, what must hold between them, and
the kind of each argument that is not a setting — each error one line, naming the function, the
argument, the row by the table's own index label and, for a misspelt column, the right name.

A column (or an argument) has a kind: ``ids`` (a list of token ids), ``id`` (one token id), ``count``
(a whole number ≥ 0), ``positive`` (a whole number ≥ 1), ``number`` (a finite number), ``fraction`` (a
finite number from 0 to 1), ``share`` (a finite number above 0, at most 1), ``text`` (a non-empty
string), ``number_or_nan`` (a finite number, or NaN where a table has none), ``flag`` (True or False),
``layer`` and ``head`` (a head's address: a whole number ≥ 0 below
the model's layers or heads — or, for a table drawn without its model, below the bounds of the
largest model headwatch reads, :data:`headwatch.model.arch.FIELD_BOUNDS`), a tuple of the values
allowed, or ``any``. Token ids are below the model's vocabulary when it is known. :data:`TABLES`
names the tables of the protocol by what makes them.

Imports only the standard library and :mod:`headwatch.model.arch`'s bounds at import (pandas and
numpy inside the functions): the settings package is torch-free and light.
"""
from __future__ import annotations

import math
import reprlib
from numbers import Integral, Real

from ..model.arch import FIELD_BOUNDS
from ..model.sources.errors import ConfigError
from ..names import did_you_mean

HEAD = (("layer", "layer"), ("head", "head"))
TABLES = {
    "prompts": (("clean_ids", "ids"), ("corrupted_ids", "ids"), ("answer_id", "id"), ("distractor_id", "id")),
    "pairs": (("clean", "text"), ("corrupted", "text"), ("answer", "text"), ("distractor", "text")),
    "repeated": (("token_ids", "ids"), ("half_length", "count"), ("offset", "count")),
    "prose": (("token_ids", "ids"),),
    "phrases": (("phrase", "text"), ("token_ids", "ids"), ("expected", "text"), ("expected_id", "id")),
    "scores": (*HEAD, ("sink", "fraction"), ("prev", "fraction"), ("self", "fraction"), ("induction", "fraction")),
    "heads": (*HEAD, ("score", "number")),
    "heads_map": (*HEAD, ("score", "number"), ("estimate_score", "number")),
    "paths": (("sender_layer", "layer"), ("sender_head", "head"), ("receiver_layer", "layer"),
              ("receiver_head", "head"), ("input", ("q", "k", "v")), ("score", "number")),
    "edges": (("sender", "text"), ("receiver", "text")),
    "curves": (("method", "text"), ("ranking", ("signed", "absolute", "none")), ("fraction", "share"),
               ("faithfulness", "number")),
    "areas": (("method", "text"), ("draw", "any"), ("cpr", "number_or_nan"), ("cmd", "number_or_nan")),
    "cuts": (("k", "count"), ("n_cut_targeted", "count"), ("n_cut_random", "count"), ("n_draws", "count"),
             *((f"{what}_{copy}", "number") for copy in ("copy1", "copy2") for what in ("intact", "targeted")),
             *((f"random_{copy}_{stat}", "number") for copy in ("copy1", "copy2") for stat in ("mean", "min", "max"))),
    "direct": (("component", "text"), ("kind", "text"), ("clean", "number"), ("corrupted", "number"),
               ("direct", "number")),
    "direct_heads": (*HEAD, ("direct", "number"), ("total", "number"), ("indirect_share", "fraction"),
                     ("through_others", "flag")),
    "logit_lens": (("run", ("clean", "corrupted")), ("depth", "count"), ("position", "any"), ("logit_diff", "number"),
                   ("rank", "number"), ("p_answer", "fraction")),
    "circuits": (*HEAD, ("kv_group", "count"), ("ov_copying", "number"), ("ov_copying_z", "number"), ("qk_same_token", "number")),
    "composition": (("sender_layer", "layer"), ("sender_head", "head"), ("receiver_layer", "layer"),
                    ("receiver_head", "head"), ("input", ("q", "k", "v")), ("group", "any"), ("head_score", "number"),
                    ("score", "number"), ("z", "number")),
    "verdict": (("comparison", "text"), ("n", "count"), ("rho", "number"), ("low", "number"), ("high", "number"),
                ("null_low", "number"), ("null_high", "number"), ("verdict", "text")),
}
"""Each table kind's columns and their kinds (the rest of a table's columns are the caller's)."""
KEYS = {
    "prompts": ("prompt",), "pairs": ("clean", "corrupted", "answer", "distractor"), "repeated": ("seq",),
    "prose": ("seq",), "phrases": ("phrase",), "scores": ("layer", "head"), "heads": ("layer", "head"),
    "heads_map": ("layer", "head"), "paths": ("sender_layer", "sender_head", "receiver_layer", "receiver_head", "input"),
    "edges": ("sender", "receiver"), "nodes": ("name",), "curves": ("method", "ranking", "draw", "fraction"),
    "areas": ("method", "draw"), "cuts": ("method", "k"), "direct": ("component",), "direct_heads": ("layer", "head"),
    "logit_lens": ("run", "depth", "position"), "circuits": ("layer", "head"),
    "composition": ("sender_layer", "sender_head", "receiver_layer", "receiver_head", "input"),
    "verdict": ("comparison",),
}
"""Each table kind's key: the columns that name a row. A public function reads a table by its key — one row
a key, taken in the key's order (:func:`keyed`; phrases, :data:`GIVEN_ORDER`, each in turn) —, never by its
rows' order or its index, so that a table sorted, shuffled or reindexed gives the same result, and a key given
twice is refused. A key column the table lacks is left out of its key (a cuts table without ``method``: one
method)."""
GIVEN_ORDER = ("phrases",)
"""Tables whose rows are each computed alone (a phrase: its own passes, its own rows of every result): read in
the order given (the protocol's phrases in the config's order), a key given twice refused; their results are
the same, row for row, whatever the order."""
CONTENT_KEYS = {"prompts": ("clean_ids", "corrupted_ids", "answer_id", "distractor_id"), "repeated": ("token_ids",),
                "prose": ("token_ids",)}
"""The key of a table made by hand without its numbering column (``prompt``, ``seq``): its rows' own ids."""
SCORE_COLUMNS = {"edges": ("eap", "eap_ig")}
"""A table's score columns, each a finite number where present, at least one of them present."""
MADE_BY = {"prompts": "hw.prompt_pairs(m, pairs)", "pairs": "a DataFrame with one row per prompt pair",
           "repeated": "hw.sequences(m, texts, repeat=True) or hw.token_set(m, 'induction')",
           "prose": "hw.sequences(m, texts) or hw.token_set(m, 'prose')", "phrases": "hw.token_set(m, 'phrases')",
           "scores": "hw.head_scores(m)", "heads": "hw.patch_heads(m, prompts)",
           "heads_map": "hw.patch_heads(m, prompts)", "paths": "hw.path_patching(m, prompts, heads)",
           "edges": "hw.edge_scores(m, prompts)", "curves": "hw.edge_faithfulness(m, prompts, edges)",
           "areas": "hw.edge_faithfulness(m, prompts, edges)", "cuts": "hw.cut_heads(m, scores)",
           "direct": "hw.direct_effects(m, prompts)", "direct_heads": "hw.direct_effects(m, prompts, heads)",
           "logit_lens": "hw.logit_lens(m, prompts)", "circuits": "hw.weight_circuits(m)",
           "composition": "hw.weight_circuits(m)", "verdict": "hw.weights_vs_paths(circuits, paths)"}
"""What makes a table of each kind (said in an error)."""
NOTES = {
    "heads_map": (("prompts", "count"), ("clean_logit_diff", "number"), ("corrupted_logit_diff", "number"),
                  ("exact_seconds", "number"), ("estimate_seconds", "number"), ("top10", "count"),
                  ("estimate_top10_overlap", "count")),
    "paths": (("edge_threshold", "number"), ("receivers", "text"), ("prompts", "count"),
              ("clean_logit_diff", "number"), ("corrupted_logit_diff", "number")),
    "curves": (("edges", "count"), ("prompts", "count"), ("full", "number"), ("empty", "number")),
}
"""The keys of a table's note (``attrs["note"]``) that its figure writes into its labels, each of its kind."""
PLOT_HEADS = 128 * 128
"""The most heads a figure draws, a bar, a cell or a point each (``plot_scores``, ``plot_heads``,
``plot_paths``): every head of the largest models (Llama 3.1 405B: 126 layers × 128 heads) fits."""
PLOT_ITEMS = 2_000
"""The most bars (``plot_edges``' ``n``) or arrows (``plot_paths``' paths above the threshold) a figure
draws: ``plot_edges``' figure is 1.2 inches and 0.16 a bar tall, and matplotlib's Agg draws at most 2^16
pixels a side, 327 inches at the house style's 200 dpi: 2,040 bars (an arrow takes milliseconds to draw:
2,000 about 10 s on one core)."""
VERDICT_ROWS = 5
"""The most rows of a verdict table: the comparisons :func:`headwatch.weights_vs_paths` makes (over every input,
per input q, k and v, the copying score against the induction score)."""
ONE_ROW_PER_HEAD = ("scores", "heads", "heads_map", "direct_heads", "circuits")
"""Tables with one row per head: a head twice would be drawn or read over itself."""
MIN_TOKENS = 2
"""The fewest tokens of a prose row (as the model reads it): sink, prev and self read a token's attention
to earlier tokens, rows r ≥ 1 of its map, so a row of one token adds nothing and a table of such rows
has no cells to average (protocol §4)."""
MIN_HALF = 2
"""The shortest half of a repeated row: induction reads rows T … 2T − 2, T − 1 cells a row (protocol §4;
``sequences.half_length``'s minimum in config/schema.yaml)."""
FRACTION_SLACK = 2.0 ** -20
"""How far past 1 a mean of attention weights may lie: weights recomputed as exp(s − logsumexp) in
float32 (the fused-kernel families) can pass 1 by a few units of float32's rounding, 2^-24 each."""


class TableError(ValueError):
    """A table a public function cannot read: the message names the function, the argument and the row (or
    the key given twice). The explorer's own checks of its tables raise its subclass ``ExplorerDataError``.

    >>> try:
    ...     hw.head_scores(m, prose=pd.DataFrame({"ids": [[1, 2]]}))
    ... except hw.TableError as err:
    ...     print(err)      # hw.head_scores: prose lacks the column 'token_ids' ...
    """


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = 8


def shown(value) -> str:
    """``repr(value)`` as an error shows a caller's value: a long text or a long list cut short."""
    return _SHOWN.repr(value)


def limits_of(shape: dict | None) -> dict:
    """The bounds a table's cells are held to: the model's vocabulary, layers, heads and context where ``shape``
    (a model's, :func:`headwatch.config.calls.loaded_shape`) says them, else the bounds of the largest
    model headwatch reads (:data:`headwatch.model.arch.FIELD_BOUNDS`) for layers and heads."""
    shape = shape or {}
    out = {what: (shape[what], "the model") for what in ("vocab", "layers", "heads", "context") if shape.get(what)}
    for what in ("layers", "heads"):
        out.setdefault(what, (FIELD_BOUNDS[what][0], f"the largest model headwatch reads (model_file.{what})"))
    return out


READ_AS_NUMBER = ("a number, not a text: pd.read_csv reads a column of digits as numbers, and a number has lost the "
                  "text the tokenizer reads (' 7' and '7' both become 7, '07' too); read the file with "
                  "pd.read_csv(path, dtype=str, keep_default_na=False)")
"""A text cell that holds a number: refused, not turned back into a text, since which text it was is lost."""
READ_AS_NAN = ("empty (NaN): pd.read_csv reads an empty cell, and texts such as 'NA' or 'null', as NaN; read the file "
               "with pd.read_csv(path, dtype=str, keep_default_na=False)")


def _whole(value) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _kind_error(value, kind, limits: dict, cell: bool = True) -> str | None:
    """What is wrong with one cell (or, ``cell`` False, an argument) of ``kind`` (None: nothing)."""
    if kind == "any":
        return None
    if isinstance(kind, tuple):
        if isinstance(value, str) and value in kind:
            return None
        hint = did_you_mean(value, kind) if isinstance(value, str) else ""
        return f"{shown(value)} is not one of {list(kind)}" + (f"; {hint}" if hint else "")
    if kind == "text":
        if isinstance(value, str) and value.strip():
            return None
        if cell and isinstance(value, Real) and not isinstance(value, bool):     # a table's cell: pd.read_csv's
            return f"{shown(value)} is {READ_AS_NUMBER if value == value else READ_AS_NAN}"
        return f"{shown(value)} is not a non-empty text"
    if kind == "flag":
        return None if type(value).__name__ in ("bool", "bool_") else f"{shown(value)} is not True or False"
    if kind == "number_or_nan":
        if value is None or isinstance(value, Real) and not isinstance(value, bool) and math.isnan(float(value)):
            return None
        kind = "number"
    if kind in ("number", "fraction", "share"):
        if not (isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))):
            return f"{shown(value)} is not a finite number"
        if kind == "fraction" and not 0 <= value <= 1 + FRACTION_SLACK:
            return f"{shown(value)} is not a fraction from 0 to 1 (a mean of attention weights)"
        if kind == "share" and not 0 < value <= 1:
            return f"{shown(value)} is not a fraction above 0 and at most 1 (of every edge)"
        return None
    if kind in ("count", "positive", "id", "layer", "head"):
        least = 1 if kind == "positive" else 0
        if not _whole(value) or value < least:
            return f"{shown(value)} is not a whole number >= {least}"
        if kind == "id" and "vocab" in limits and value >= limits["vocab"][0]:
            return f"token id {value} is past the model's vocabulary of {limits['vocab'][0]}"
        if kind in ("layer", "head"):
            bound, whose = limits[f"{kind}s"]
            if value >= bound:
                return f"{kind} {value} is past the {bound:,} {kind}s of {whose} (0 to {bound - 1:,})"
        return None
    if kind == "ids":
        if isinstance(value, (str, bytes)):
            return f"{shown(value)} is not a list of token ids"
        try:
            ids = list(value)
        except TypeError:
            return f"{shown(value)} is not a list of token ids"
        if not ids:
            return "holds no token ids"
        bad = next((x for x in ids if not _whole(x) or x < 0), None)
        if bad is not None:
            return f"holds {shown(bad)}, not a token id (a whole number >= 0)"
        if "vocab" in limits and max(ids) >= limits["vocab"][0]:
            return f"holds token id {max(ids)}, past the model's vocabulary of {limits['vocab'][0]}"
        if "context" in limits and len(ids) > limits["context"][0]:
            return (f"holds {len(ids):,} token ids, longer than the model's context of {limits['context'][0]:,} "
                    "positions; shorten it")
        return None
    raise ValueError(f"unknown kind {kind!r}")


_NONE = object()


def _column_error(column, kind, limits: dict):
    """(index label, what is wrong) of a bad cell of ``column`` (a Series), or None: numeric columns of a
    numeric kind at once (numpy), texts by their distinct values, the rest cell by cell."""
    import numpy as np
    import pandas as pd

    numbers = ("number", "fraction", "share", "number_or_nan")
    numeric = column.dtype.kind in "iuf" and kind in (*numbers, "count", "positive", "layer", "head", "id")
    if numeric and not (column.dtype.kind == "f" and kind not in numbers):
        values = column.to_numpy()
        ok = np.isfinite(values) if column.dtype.kind == "f" else np.ones(len(values), bool)
        if kind == "number_or_nan":
            ok |= np.isnan(values)
        if not ok.all():
            i = int(np.argmin(ok))
            return column.index[i], _kind_error(float(values[i]), kind, limits)
        finite = values[np.isfinite(values)] if column.dtype.kind == "f" else values
        wrong = [_kind_error(v.item(), kind, limits) for v in (finite.min(), finite.max())] if len(finite) else []
        if not any(wrong):
            return None
    elif column.dtype == object and (kind == "text" or isinstance(kind, tuple)):     # a long table: its values once
        try:
            values = pd.unique(column.to_numpy())
        except TypeError:                                   # unhashable cells: read one by one below
            values = None
        if values is not None:
            bad = next((v for v in values if _kind_error(v, kind, limits)), _NONE)
            if bad is _NONE:
                return None
            hits = column.isna().to_numpy() if pd.api.types.is_scalar(bad) and pd.isna(bad) else \
                np.array([v is bad or isinstance(v, type(bad)) and v == bad for v in column.to_numpy()])
            label = column.index[int(np.argmax(hits))]
            return label, _kind_error(bad, kind, limits)
    for label, value in column.items():
        why = _kind_error(value, kind, limits)
        if why:
            return label, why
    return None


def check_value(value, kind, function: str, argument: str, shape: dict | None = None):
    """Refuse an argument that is not of ``kind`` (one of the column kinds above), naming ``function``
    (``"hw.sequences"``) and ``argument`` as given; returned as it is."""
    why = _kind_error(value, kind, limits_of(shape), cell=False)
    if why:
        said = why[len(shown(value)):] if why.startswith(f"{shown(value)} ") else f": {why}"
        raise ConfigError(f"{function}: {argument}={shown(value)}{said}")
    return value


def check_table(table, kind: str | tuple, function: str, argument: str, shape: dict | None = None) -> None:
    """Refuse ``table`` (``argument`` of ``function``, e.g. ``"hw.head_scores"``, ``"induction"``) unless
    it is a DataFrame with rows and the columns of ``kind`` (a name of :data:`TABLES`, or its own
    ``((column, kind), …)``), every cell of its kind (token ids, layers and heads within ``shape``, the
    model's: :func:`limits_of`), and what must hold between them: one row per head, a path into a later
    layer, a score column of an edges table, a prose row of :data:`MIN_TOKENS`, a repeated row's ids two
    copies of ``half_length`` (at least :data:`MIN_HALF`) after ``offset``. One line, the row named by the
    table's index label."""
    import pandas as pd

    columns = TABLES[kind] if isinstance(kind, str) else tuple(kind)
    hint = f"; {MADE_BY[kind]} makes one" if isinstance(kind, str) else ""
    where = f"{function}: {argument}"
    if not isinstance(table, pd.DataFrame):
        raise TableError(f"{where} is a {type(table).__name__}, not a pandas DataFrame{hint}")
    if table.empty:
        raise TableError(f"{where} has no rows{hint}")
    have = [str(c) for c in table.columns]
    wanted = {name for name, _ in columns}
    for name, _ in columns:
        if name not in table.columns:
            typo = next((c for c in have if c not in wanted and did_you_mean(c, [name])), None)
            said = f" (it has {typo!r}: {did_you_mean(typo, [name])})" if typo else ""
            raise TableError(f"{where} lacks the column {name!r}{said}; its columns are {have}{hint}")
    limits = limits_of(shape)
    scores = SCORE_COLUMNS.get(kind, ()) if isinstance(kind, str) else ()
    if scores and not set(scores) & set(table.columns):
        raise TableError(f"{where} has no score column ({' or '.join(scores)}){hint}")
    for name, k in (*columns, *((s, "number") for s in scores if s in table.columns)):
        bad = _column_error(table[name], k, limits)
        if bad:
            raise TableError(f"{where}, row {bad[0]!r}, column {name!r}: {bad[1]}")
    _relation_errors(table, kind, where)


def _label(x):
    """An index label as Python writes it (``3``, not numpy's ``np.int64(3)``)."""
    return x.item() if hasattr(x, "item") and not isinstance(x, (str, bytes)) else x


def keyed(table, kind: str | tuple, function: str, argument: str, keep_index: bool = False):

    """``table`` as a public function reads it: by its key (:data:`KEYS` of ``kind``, or the columns
    ``kind`` names; :data:`CONTENT_KEYS` where a hand-made table lacks its numbering column) — its rows
    sorted by the key, its index 0, 1, … (``keep_index``: its own labels kept, for errors that name them),
    its ``attrs`` kept — so that no result depends on the order or the index of the rows handed over (a kind
    of :data:`GIVEN_ORDER` keeps its rows' order: its rows are computed each alone). A key given twice is
    refused, naming it and the two rows (by their index labels)."""
    import numpy as np
    import pandas as pd

    wanted = KEYS[kind] if isinstance(kind, str) else tuple(kind)
    keys = [c for c in wanted if c in table.columns]
    if isinstance(kind, str) and not [c for c in keys if c in wanted[:1]] and kind in CONTENT_KEYS:
        keys = [c for c in CONTENT_KEYS[kind] if c in table.columns]
    if not keys:
        return table
    frame = pd.DataFrame({c: [tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else v for v in table[c]]
                          if table[c].dtype == object else table[c].to_numpy() for c in keys})
    twice = frame.duplicated()
    if twice.any():
        i = int(twice.to_numpy().argmax())
        key = tuple(frame.iloc[i])
        same = np.ones(len(frame), dtype=bool)
        for c, v in zip(keys, key):
            same &= np.array([x == v for x in frame[c]], dtype=bool) if frame[c].dtype == object else \
                (frame[c].to_numpy() == v)
        first = int(same.argmax())
        said = ", ".join(f"{c} {shown(list(v) if isinstance(v, tuple) else _label(v))}" for c, v in zip(keys, key))
        raise TableError(f"{function}: {argument} holds {said} twice (rows {_label(table.index[first])!r} and "
                         f"{_label(table.index[i])!r}); a table is read by its key ({', '.join(keys)}), one row each: "
                         "drop a row given twice, or give rows that differ keys of their own (tables put together)")
    order = frame.index.to_numpy() if kind in GIVEN_ORDER else frame.sort_values(keys, kind="mergesort").index.to_numpy()
    out = table.iloc[order] if keep_index else table.iloc[order].reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out


def check_note(table, kind: str, function: str, argument: str) -> dict:
    """The note a figure of ``kind`` writes into its labels (``table.attrs["note"]``), refused without the
    keys of :data:`NOTES` or with one not of its kind (a table read back from its Parquet file keeps it)."""
    note = table.attrs.get("note")
    made = f"pass the table {MADE_BY[kind].split(' or ')[0]} returned"
    if not isinstance(note, dict):
        raise TableError(f"{function}: {argument} carries no note (attrs['note']): {made} (a table read back from a "
                         "file keeps it: headwatch.tableio.read_parquet)")
    for key, k in NOTES[kind]:
        if key not in note:
            raise TableError(f"{function}: {argument}'s note (attrs['note']) lacks {key!r}: {made}")
        why = _kind_error(note[key], k, {})
        if why:
            raise TableError(f"{function}: {argument}'s note (attrs['note']), {key!r}: {why}")
    return note


def check_drawn(count: int, bound: int, what: str, function: str, argument: str) -> None:
    """Refuse a figure that would draw more than ``bound`` of ``what`` (:data:`PLOT_HEADS`, :data:`PLOT_ITEMS`)."""
    if count > bound:
        raise TableError(f"{function}: {argument} would draw {count:,} {what}, more than a figure draws ({bound:,}); "
                         "draw a part of it (a filtered table)")


def _relation_errors(table, kind, where: str) -> None:
    """What must hold between a table's columns or rows (the cells are of their kinds)."""
    if kind in ONE_ROW_PER_HEAD:
        twice = table.duplicated(["layer", "head"])
        if twice.any():
            label = table.index[int(twice.to_numpy().argmax())]
            r = table.loc[label]
            raise TableError(f"{where}, row {label!r}: layer {r['layer']}, head {r['head']} again; the table has one "
                             "row per head")
    if kind in ("paths", "composition"):
        back = table["receiver_layer"] <= table["sender_layer"]
        if back.any():
            label = table.index[int(back.to_numpy().argmax())]
            raise TableError(f"{where}, row {label!r}: receiver layer {table.loc[label, 'receiver_layer']} is not "
                             f"after sender layer {table.loc[label, 'sender_layer']}; a path runs to a later layer")
    if kind == "prompts":
        for label, r in table[["clean_ids", "corrupted_ids", "answer_id", "distractor_id"]].iterrows():
            clean, corrupted = list(r["clean_ids"]), list(r["corrupted_ids"])
            if len(clean) != len(corrupted):
                raise TableError(f"{where}, row {label!r}: the clean prompt gives {len(clean)} tokens and the corrupted "
                                 f"one {len(corrupted)}; the two prompts of a pair give the same number of tokens (a head "
                                 "is patched over every position of its pair)")
            if clean == corrupted:
                raise TableError(f"{where}, row {label!r}: the clean and the corrupted ids are the same; patching one "
                                 "run into the other changes nothing, and every score would divide by a gap of 0")
            if r["answer_id"] == r["distractor_id"]:
                raise TableError(f"{where}, row {label!r}: answer_id and distractor_id are the same token "
                                 f"{r['answer_id']}; their logit difference would be 0")
    if kind == "prose":
        for label, ids in table["token_ids"].items():
            if len(ids) < MIN_TOKENS:
                raise TableError(f"{where}, row {label!r}: {len(ids)} token; the scores read a token's attention to "
                                 f"the tokens before it, so a row needs at least {MIN_TOKENS}")
    if kind == "repeated":
        for label, r in table.iterrows():
            ids, T, offset = list(r["token_ids"]), int(r["half_length"]), int(r["offset"])
            if len(ids) != offset + 2 * T or ids[offset:offset + T] != ids[offset + T:]:
                raise TableError(f"{where}, row {label!r}: its {len(ids)} token ids are not offset {offset} and then "
                                 f"two copies of half_length {T} ids; the induction score would read other positions "
                                 f"(hw.sequences(m, texts, repeat=True) makes such rows)")
            if T < MIN_HALF:
                raise TableError(f"{where}, row {label!r}: half_length {T}; induction reads the repeat's tokens after "
                                 f"its first, so each half needs at least {MIN_HALF} tokens")
        if table["half_length"].nunique() > 1 or table["offset"].nunique() > 1:
            raise TableError(f"{where}: its rows differ in half_length or offset ({sorted(set(table['half_length']))}, "
                             f"{sorted(set(table['offset']))}); the scores read one layout of positions for every row")
