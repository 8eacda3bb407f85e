"""The tables the public functions take, checked before any model pass (one validation for tables as
:mod:`headwatch.config` is for settings): the columns each reads, their types and ranges, and what
must hold between them — each error one line, naming the function, the argument, the row by the
table's own index label and, for a misspelt column, the nearest one.

A table is described by its columns, each with a kind: ``ids`` (a list of token ids), ``id`` (one
token id), ``count`` (a whole number ≥ 0), ``number`` (a finite number), ``text`` (a non-empty
string) or ``any``. :data:`TABLES` names the tables of the protocol by what makes them.

Imports only the standard library at import (pandas inside the functions): the settings package is
torch-free and light.
"""
from __future__ import annotations

import difflib
import math
from numbers import Integral, Real

TABLES = {
    "prompts": (("clean_ids", "ids"), ("corrupted_ids", "ids"), ("answer_id", "id"), ("distractor_id", "id")),
    "pairs": (("clean", "text"), ("corrupted", "text"), ("answer", "text"), ("distractor", "text")),
    "repeated": (("token_ids", "ids"), ("half_length", "count"), ("offset", "count")),
    "prose": (("token_ids", "ids"),),
    "phrases": (("phrase", "text"), ("token_ids", "ids"), ("expected", "text"), ("expected_id", "id")),
    "scores": (("layer", "count"), ("head", "count"), ("sink", "number"), ("prev", "number"), ("self", "number"),
               ("induction", "number")),
    "heads": (("layer", "count"), ("head", "count"), ("score", "number")),
    "edges": (("sender", "text"), ("receiver", "text")),
    "cuts": (("k", "count"), ("n_cut_targeted", "count"), ("n_cut_random", "count"), ("n_draws", "count"),
             *((f"{what}_{copy}", "number") for copy in ("copy1", "copy2") for what in ("intact", "targeted")),
             *((f"random_{copy}_{stat}", "number") for copy in ("copy1", "copy2") for stat in ("mean", "min", "max"))),
}
"""Each table kind's columns and their kinds (the rest of a table's columns are the caller's)."""
MADE_BY = {"prompts": "hw.prompt_pairs(m, pairs)", "pairs": "a DataFrame with one row per prompt pair",
           "repeated": "hw.sequences(m, texts, repeat=True) or hw.token_set(m, 'induction')",
           "prose": "hw.sequences(m, texts) or hw.token_set(m, 'prose')", "phrases": "hw.token_set(m, 'phrases')",
           "scores": "hw.head_scores(m)", "heads": "hw.patch_heads(m, prompts)", "edges": "hw.edge_scores(m, prompts)",
           "cuts": "hw.cut_heads(m, scores)"}
"""What makes a table of each kind (said in an error)."""


class TableError(ValueError):
    """A table a public function cannot read; the message names the function, the argument and the row."""


def _kind_error(value, kind: str, vocab: int | None) -> str | None:
    """What is wrong with one cell of ``kind`` (None: nothing)."""
    if kind == "any":
        return None
    if kind == "text":
        return None if isinstance(value, str) and value.strip() else f"{value!r} is not a non-empty text"
    if kind == "number":
        ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))
        return None if ok else f"{value!r} is not a finite number"
    if kind in ("count", "id"):
        if not isinstance(value, Integral) or isinstance(value, bool) or value < 0:
            return f"{value!r} is not a whole number >= 0"
        if kind == "id" and vocab is not None and value >= vocab:
            return f"token id {value} is past the model's vocabulary of {vocab}"
        return None
    if kind == "ids":
        try:
            ids = list(value)
        except TypeError:
            return f"{value!r} is not a list of token ids"
        if not ids:
            return "holds no token ids"
        bad = next((x for x in ids if not isinstance(x, Integral) or isinstance(x, bool) or x < 0), None)
        if bad is not None:
            return f"holds {bad!r}, not a token id"
        if vocab is not None and max(ids) >= vocab:
            return f"holds token id {max(ids)}, past the model's vocabulary of {vocab}"
        return None
    raise ValueError(f"unknown column kind {kind!r}")


def check_table(table, kind: str | tuple, function: str, argument: str, vocab: int | None = None) -> None:
    """Refuse ``table`` (``argument`` of ``function``, e.g. ``"hw.head_scores"``, ``"induction"``) unless
    it is a DataFrame with rows and the columns of ``kind`` (a name of :data:`TABLES`, or its own
    ``((column, kind), …)``), every cell of its kind (token ids below ``vocab`` when given), and — for
    a ``repeated`` table — each row's ids two copies of ``half_length`` after ``offset``. One line,
    the row named by the table's index label."""
    import pandas as pd

    columns = TABLES[kind] if isinstance(kind, str) else tuple(kind)
    hint = f"; {MADE_BY[kind]} makes one" if isinstance(kind, str) else ""
    where = f"{function}: {argument}"
    if not isinstance(table, pd.DataFrame):
        raise TableError(f"{where} is a {type(table).__name__}, not a pandas DataFrame{hint}")
    if table.empty:
        raise TableError(f"{where} has no rows{hint}")
    have = [str(c) for c in table.columns]
    for name, _ in columns:
        if name not in table.columns:
            near = difflib.get_close_matches(name, have, n=1, cutoff=0.6)
            said = f" (did you mean {near[0]!r}?)" if near else ""
            raise TableError(f"{where} lacks the column {name!r}{said}; its columns are {have}{hint}")
    for name, k in columns:
        for label, value in table[name].items():
            why = _kind_error(value, k, vocab)
            if why:
                raise TableError(f"{where}, row {label!r}, column {name!r}: {why}")
    if kind == "repeated":
        for label, r in table.iterrows():
            ids, T, offset = list(r["token_ids"]), int(r["half_length"]), int(r["offset"])
            if len(ids) != offset + 2 * T or ids[offset:offset + T] != ids[offset + T:]:
                raise TableError(f"{where}, row {label!r}: its {len(ids)} token ids are not offset {offset} and then "
                                 f"two copies of half_length {T} ids; the induction score would read other positions "
                                 f"(hw.sequences(m, texts, repeat=True) makes such rows)")
        if table["half_length"].nunique() > 1 or table["offset"].nunique() > 1:
            raise TableError(f"{where}: its rows differ in half_length or offset ({sorted(set(table['half_length']))}, "
                             f"{sorted(set(table['offset']))}); the scores read one layout of positions for every row")
