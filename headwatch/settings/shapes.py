"""A sweep model's shape name — the ``{shape}`` wildcard, the ``shape`` column of every sweep table,
the folder of its runs — written and read in this module only, from one table of parts (:data:`PARTS`).

A grid entry (``width``, ``heads`` and options, :data:`ENTRY_KEYS`) is named ``w{width}-h{heads}``
followed by one part per option it sets, in this order::

    w{width}-h{heads}  [-l{layers}] [-d{head_size}] [-kv{kv_heads}]
                       [-e{experts}k{top_k} [-x{expert_width}] -b{balance}] [-drop{dropout}] [-v{vocab}]

e.g. ``w256-h4-e8k2-b0.01``, ``w192-h2-l8-d64``, ``w256-h4-kv2``, ``w256-h4-drop0.2``, ``w256-h4-vbpe1024``. An entry without
options keeps ``w{width}-h{heads}``, so the sweeps that list it share it. ``top_k`` and ``balance`` are shown
with experts only, always (``-b0`` = no balancing loss); ``vocab`` only when it is not ``char``, the corpus's
own characters; ``dropout`` only when it is not 0 (``{dropout: 0}`` is the plain entry). :func:`slug` writes a name; :data:`SLUG` (anchored) and :data:`SLUG_PATTERN` (the
workflow's wildcard constraint) are compiled from the same table, and :func:`parse_shape` reads a name
back into the entry it names (``slug(parse_shape(s)) == s`` for every name :func:`slug` writes).

**A new grid option is one entry of** :data:`PARTS` (its key, its letters, its value's kind, when it is
shown) beside the model's field that reads it (:class:`headwatch.charlm.spec.ModelSpec`), as dropout's
``Part("-drop", ("dropout",), value=NUMBER, shown=...)`` is (``w256-h4-drop0.2``; shown only when the entry
sets it above 0, so the plain names stay as they are). An option of the grid without a part
would give two models one name, which :func:`slug` refuses.

Standard library only: the Snakefile's parse and the pre-job checks read it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable

from ..charlm.spec import DEFAULTS, SWEEP_OPTIONS, TRAINING_OPTIONS
from ..charlm.vocab import VOCAB_PATTERN

CHAR = "char"
"""The default vocabulary: the corpus's characters (``ids.npy``)."""
GRID_OPTIONS = ("layers",) + SWEEP_OPTIONS + tuple(TRAINING_OPTIONS)
"""The model options a grid entry may add to ``width`` and ``heads``."""
DATA_OPTIONS = ("vocab",)
"""The options a grid entry may add that change the data, not the model."""
ENTRY_KEYS = ("width", "heads") + GRID_OPTIONS + DATA_OPTIONS
"""Every key a grid entry may hold."""

INTEGER, NUMBER, VOCAB = r"\d+", r"[0-9.e+-]+", VOCAB_PATTERN
"""What a part's value may be: a whole number, a number as ``:g`` writes it, a vocabulary's name."""


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _value(entry: dict, key: str):
    """A key's value in a name: the entry's, else the model's default (``top_k``, ``balance``)."""
    return entry[key] if key in entry else DEFAULTS.get(key, TRAINING_OPTIONS.get(key))


@dataclass(frozen=True)
class Part:
    """One option's part of a name: ``prefix`` then each of ``keys``' values, the later keys each after
    its own letter in ``joins`` (``-e{experts}k{top_k}``: prefix ``-e``, joins ``("k",)``); shown when
    ``shown(entry)``, always when ``required`` within its group; ``inner``: the parts shown only inside
    this one (the experts' width and balance)."""

    prefix: str
    keys: tuple[str, ...]
    value: str = INTEGER
    shown: Callable[[dict], bool] | None = None
    joins: tuple[str, ...] = ()
    inner: tuple["Part", ...] = ()
    required: bool = False

    def is_shown(self, entry: dict) -> bool:
        return self.required or (self.shown(entry) if self.shown else self.keys[0] in entry)

    def text(self, entry: dict) -> str:
        head = self.prefix + _num(_value(entry, self.keys[0]))
        for j, k in zip(self.joins, self.keys[1:]):
            head += j + _num(_value(entry, k))
        for p in self.inner:
            if p.is_shown(entry):
                head += p.text(entry)
        return head

    def pattern(self, named: bool) -> str:
        """This part as a regular expression (``named``: each value a named group, for reading)."""
        group = (lambda k, v: f"(?P<{k}>{v})") if named else (lambda k, v: f"(?:{v})")
        head = re.escape(self.prefix) + group(self.keys[0], self.value) + "".join(
            re.escape(j) + group(k, self.value) for j, k in zip(self.joins, self.keys[1:]))
        body = head + "".join(p.pattern(named) for p in self.inner)
        return body if self.required else f"(?:{body})?"


PARTS = (
    Part("-l", ("layers",)),
    Part("-d", ("head_size",)),
    Part("-kv", ("kv_heads",)),
    Part("-e", ("experts", "top_k"), joins=("k",), shown=lambda e: bool(e.get("experts")),
         inner=(Part("-x", ("expert_width",)), Part("-b", ("balance",), value=NUMBER, required=True))),
    Part("-drop", ("dropout",), value=NUMBER, shown=lambda e: bool(e.get("dropout"))),
    Part("-v", ("vocab",), value=VOCAB, shown=lambda e: e.get("vocab", CHAR) != CHAR),
)
"""Every option's part of a name, in the order they are written (the module docstring)."""
def _every(parts):
    """Each part and each part inside it, in the order they are written."""
    for p in parts:
        yield p
        yield from _every(p.inner)


SHOWN = tuple(k for p in _every(PARTS) for k in p.keys)
"""The options a name shows: every key of :data:`ENTRY_KEYS` but width and heads (a test holds them equal)."""
SLUG_PATTERN = r"w\d+-h\d+" + "".join(p.pattern(named=False) for p in PARTS)
"""A shape name as the workflow's ``{shape}`` wildcard matches it."""
SLUG = re.compile(r"^w(?P<width>\d+)-h(?P<heads>\d+)" + "".join(p.pattern(named=True) for p in PARTS) + "$")
"""A shape name, anchored, each value a named group (:func:`parse_shape`)."""
_TYPES = {k: {INTEGER: int, NUMBER: float, VOCAB: str}[p.value] for p in _every(PARTS) for k in p.keys}
"""How each shown key's value is read back (:func:`parse_shape`), from its part's kind of value."""


def slug(entry: dict) -> str:
    """The shape name of a grid entry (the module docstring). ValueError for a key no part shows: two
    entries differing only in it would get one name."""
    unshown = [k for k in entry if k not in SHOWN and k in ENTRY_KEYS and k not in ("width", "heads")]
    if unshown:
        raise ValueError(f"grid entry {entry}: {unshown} would not be shown in its shape name; a new grid option "
                         "needs its part in headwatch/settings/shapes.py (PARTS)")
    try:
        return _name(tuple(entry.items()))
    except TypeError:                 # a value that is not hashable (a config mistake the checks name)
        return _name.__wrapped__(tuple(entry.items()))


@functools.lru_cache(maxsize=4096)
def _name(items: tuple) -> str:
    """:func:`slug` of an entry's items (cached: the plan names the same few entries thousands of times)."""
    entry = dict(items)
    return f"w{entry['width']}-h{entry['heads']}" + "".join(p.text(entry) for p in PARTS if p.is_shown(entry))


def parse_shape(shape: str) -> dict:
    """The grid entry a shape name names: width, heads and every option it shows, typed (``top_k`` and
    ``balance`` as shown, with the experts). ValueError for a string that is not a shape name."""
    m = SLUG.match(shape)
    if not m:
        raise ValueError(f"{shape!r} is not a configuration slug w{{width}}-h{{heads}}[-options]")
    return {k: _TYPES.get(k, int)(v) for k, v in m.groupdict().items() if v is not None}


def parse_slug(shape: str) -> tuple[int, int]:
    """(width, heads) of a shape name; ValueError for a string that is not one."""
    entry = parse_shape(shape)
    return entry["width"], entry["heads"]
