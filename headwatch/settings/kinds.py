"""The study kinds and the contrasts they may ask for, one entry each (protocol §7, "Studies").

A sweep with a ``study`` block (``kind: …``) is a study of that kind: its arms are its grid, and the kind
says what makes their comparison fair and what is compared. Everything a kind means is its entry of
:data:`KINDS` (:class:`Kind`):

* ``invariant`` — '' when the arms' comparison is fair, else why not; checked on the config before any
  job (:func:`headwatch.settings.sweep.check_sweeps`) and again on what the training jobs recorded
  (:func:`headwatch.sweep.study.summarize_study`);
* ``contrasts`` — the contrasts (:data:`CONTRASTS`) a study of the kind may ask for (``study.contrasts``),
  and ``default_contrasts``, those it computes when its block names none;
* ``settings`` — the keys of the ``study`` block the kind reads, each with its default (another kind's
  key is refused before any job);
* ``beside`` — the columns of its summary set beside each contrast (what the loss is weighed against),
  ``beside_text`` — those in words, and ``extra`` — columns a contrast of the kind adds (its arithmetic),
  ``extra_note`` — those columns in the few words a figure writes under the contrast's bar;
* ``vocabularies`` — its arms read different vocabularies: its metric is bits per character of the whole
  validation split (recorded by each training job, at the end only), its runs name their vocabulary, and
  its contrasts pair by seed only where both arms read the same one;
* ``figure`` — its panels: the drawing function of :mod:`headwatch.figures.sweep` by name, and the
  figure's width in columns and height in inches.

**A new kind is one entry of** :data:`KINDS` (its panels' function beside the others in
:mod:`headwatch.figures.sweep`, a caption line); **a new contrast is one entry of** :data:`CONTRASTS` (its
meaning and how it pairs the arms of a grid). A contrast's pairs are fixed by the grid before any data
(:func:`headwatch.settings.sweep.contrast_arms`); ``extremes`` alone picks its two from the losses.

An arm (:data:`ARM_KEYS`) is one grid entry resolved: its model's shape, its balancing loss, its
vocabulary. Standard library only: the pre-job checks read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..names import BYTES_PER_NUMBER
from .shapes import CHAR

ARM_KEYS = ("width", "heads", "layers", "head_size", "kv_heads", "experts", "top_k", "expert_width", "balance",
            "vocab")
"""What tells a study's arms apart (:func:`headwatch.settings.sweep.contrast_arms`): the model's resolved
shape (:func:`headwatch.settings.sweep.model_numbers`), its balancing loss and its vocabulary."""

Pairs = list[tuple[str | None, str | None]]


# ------------------------------------------------------------------ the contrasts
def _twins(a: dict, b: dict, apart: tuple[str, ...]) -> bool:
    """Whether two arms differ in nothing but the keys ``apart``."""
    return all(a[k] == b[k] for k in ARM_KEYS if k not in apart)


def _against_one(name: str, meaning: str, is_reference: Callable[[dict], bool]) -> Callable[[list[dict]], Pairs]:
    """Every arm against the one arm ``is_reference`` picks (ValueError when the grid has two)."""
    def pairs(arms: list[dict]) -> Pairs:
        refs = [a for a in arms if is_reference(a)]
        if len(refs) > 1:
            raise ValueError(f"contrast {name!r} needs one reference arm ({meaning}); this grid has "
                             f"{len(refs)}: {', '.join(a['shape'] for a in refs)}")
        return [(a["shape"], refs[0]["shape"]) for a in arms if refs and a is not refs[0]]
    return pairs


def _balance(arms: list[dict]) -> Pairs:
    return [(a["shape"], b["shape"]) for a in arms if a["balance"] > 0
            for b in arms if b["balance"] == 0 and _twins(a, b, ("balance",))]


def _top_k(arms: list[dict]) -> Pairs:
    """The experts arms grouped by everything but top_k (and the expert width it sets): each larger
    top_k against the group's smallest."""
    groups: dict[tuple, list[dict]] = {}
    for a in arms:
        if a["experts"]:
            groups.setdefault(tuple(a[k] for k in ARM_KEYS if k not in ("top_k", "expert_width")), []).append(a)
    out = []
    for group in groups.values():
        smallest = min(group, key=lambda a: a["top_k"])
        out += [(a["shape"], smallest["shape"]) for a in group if a["top_k"] > smallest["top_k"]]
    return out


@dataclass(frozen=True)
class Contrast:
    """One contrast a study may ask for: what it compares (``meaning``) and its (arm, reference) shapes
    in a grid's arms (``pairs``; [] when the grid has none; ValueError when it is ambiguous)."""

    name: str
    meaning: str
    pairs: Callable[[list[dict]], Pairs]


_MEANINGS = {
    "first": "every other arm − the grid's first entry",
    "extremes": "the worst arm − the best (highest and lowest mean), picked from the losses",
    "dense": "every experts arm − the dense arm (experts 0) at the same FFN width per token",
    "balance": "every arm with a balancing loss − its twin without one (balance 0, nothing else differs)",
    "top_k": "at equal experts (and balance), every larger top_k − the smallest",
    "full": "every arm − the full-attention arm (as many key/value heads as query heads)",
    "char": "every vocabulary − the characters (char)",
}
CONTRASTS: dict[str, Contrast] = {c.name: c for c in (
    Contrast("first", _MEANINGS["first"], lambda arms: [(a["shape"], arms[0]["shape"]) for a in arms[1:]]),
    Contrast("extremes", _MEANINGS["extremes"], lambda arms: [(None, None)]),
    Contrast("dense", _MEANINGS["dense"], _against_one("dense", _MEANINGS["dense"], lambda a: a["experts"] == 0)),
    Contrast("balance", _MEANINGS["balance"], _balance),
    Contrast("top_k", _MEANINGS["top_k"], _top_k),
    Contrast("full", _MEANINGS["full"], _against_one("full", _MEANINGS["full"], lambda a: a["kv_heads"] == a["heads"])),
    Contrast("char", _MEANINGS["char"], _against_one("char", _MEANINGS["char"], lambda a: a["vocab"] == CHAR)),
)}
"""Every contrast a study may ask for (``study.contrasts``), each arm minus its reference in bits per
character, by name."""


# ------------------------------------------------------------------ the invariants
@dataclass(frozen=True)
class Arms:
    """What a kind's invariant reads of a study's arms: their model settings (``models``), their resolved
    numbers (``numbers``: :func:`headwatch.settings.sweep.model_numbers`), their labels, their non-embedding
    parameter counts (the ones the jobs recorded, or the formula's), their vocabularies, and the study
    block's own settings (``settings``: the kind's keys, defaults filled in)."""

    models: list[dict]
    numbers: list[dict]
    labels: list[str]
    non_embedding: list[int]
    vocabs: list[str]
    settings: dict = field(default_factory=dict)


def _experts_invariant(a: Arms) -> str:
    widths = {lab: x["ffn_active_width"] for lab, x in zip(a.labels, a.numbers)}
    if len(set(widths.values())) != 1:
        return ("active FFN width per token (4·width dense, top_k × expert_width with experts) "
                f"must be equal across the sweep; got {widths}")
    return ""


def _depth_invariant(a: Arms) -> str:
    ref, tol = a.non_embedding[0], a.settings["tolerance"]
    off = {lab: f"{n:,} ({100 * (n / ref - 1):+.2f} %)" for lab, n in zip(a.labels, a.non_embedding)
           if abs(n / ref - 1) > tol}
    if off:
        return f"non-embedding parameters must lie within {100 * tol:g} % of {a.labels[0]}'s {ref:,}; outside: {off}"
    size = a.settings["head_size"]
    bad = {lab: x["head_size"] for lab, x in zip(a.labels, a.numbers) if size is not None and x["head_size"] != size}
    return f"every head must have size {size}; got {bad}" if bad else ""


def _kv_invariant(a: Arms) -> str:
    fixed = ["width", "heads", "layers", "head_size", "experts", "expert_width"]
    shapes = {lab: tuple(x[k] for k in fixed) for lab, x in zip(a.labels, a.numbers)}
    if len(set(shapes.values())) != 1:
        return f"configurations may differ only in kv_heads; ({', '.join(fixed)}) = {shapes}"
    if len({x["kv_heads"] for x in a.numbers}) != len(a.numbers):
        return "every configuration needs its own kv_heads"
    return ""


def _vocab_invariant(a: Arms) -> str:
    shapes = {lab: tuple(sorted(m.items())) for lab, m in zip(a.labels, a.models)}
    if len(set(shapes.values())) != 1:
        return ("configurations may differ only in their vocabulary (same model: width, heads, layers, "
                f"context, FFN, options); got {({lab: dict(v) for lab, v in shapes.items()})}")
    if len(set(a.vocabs)) != len(a.vocabs):
        return f"every configuration needs its own vocabulary; got {dict(zip(a.labels, a.vocabs))}"
    return ""


# ------------------------------------------------------------------ beside each contrast, in words
def _fmt(x, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _experts_beside(c: dict) -> str:
    ratio = None if c["arm_chars_per_s"] is None or c["reference_chars_per_s"] is None else \
        c["arm_chars_per_s"] / c["reference_chars_per_s"]
    return (f"throughput {_fmt(ratio, '.2f')}× the reference's "
            f"({_fmt(c['arm_chars_per_s'], ',.0f')} vs {_fmt(c['reference_chars_per_s'], ',.0f')} characters/s); "
            f"parameters stored {c['arm_params']:,} vs {c['reference_params']:,}, active per token "
            f"{c['arm_params_active']:,} vs {c['reference_params_active']:,}; peak memory "
            f"{_fmt(c['arm_peak_memory_mb'], ',.0f')} vs {_fmt(c['reference_peak_memory_mb'], ',.0f')} MB")


def _depth_beside(c: dict) -> str:
    return (f"{c['arm_layers']} layers of width {c['arm_width']} vs {c['reference_layers']} of "
            f"{c['reference_width']}; non-embedding parameters {c['arm_non_embedding']:,} vs "
            f"{c['reference_non_embedding']:,}")


def _kv_beside(c: dict) -> str:
    text = (f"{c['arm_kv_heads']} vs {c['reference_kv_heads']} key/value heads: {c['kv_bytes_saved']:,} KV-cache "
            f"bytes per token saved ({c['arm_kv_cache_bytes_per_token']:,} vs "
            f"{c['reference_kv_cache_bytes_per_token']:,})")
    if c["nats_per_byte_saved"] is not None:
        text += f", {c['nats_per_byte_saved']:+.3g} nats/char per byte saved"
        if c["nats_per_byte_saved_lo"] is not None:
            text += f" ({c['nats_per_byte_saved_lo']:+.3g} to {c['nats_per_byte_saved_hi']:+.3g})"
    return text


def _vocab_beside(c: dict) -> str:
    return (f"{c['arm_vocab_size']:,} vs {c['reference_vocab_size']:,} tokens; token embedding + head "
            f"{100 * c['arm_embedding_share']:.1f} % vs {100 * c['reference_embedding_share']:.1f} % of the "
            f"parameters; {c['arm_chars_per_window']:.0f} vs {c['reference_chars_per_window']:.0f} characters per window")


def _kv_note(c: dict) -> str:
    """What a byte of KV cache saved costs, under a kv contrast's bar ('' where no byte is saved)."""
    value = c.get("nats_per_byte_saved")
    return "" if value is None or value != value else f"{value:+.2g} nats/char per byte saved"


def _kv_extra(arm: dict, reference: dict, diff: float, lo: float | None, hi: float | None) -> dict:
    """The KV cache's trade in one number: nats per character of loss for each byte of cache per token
    saved, difference × ln 2 ÷ bytes saved, its interval the difference's, scaled (the bytes are fixed
    by the shapes)."""
    ln2 = 0.6931471805599453
    saved = int(reference["kv_cache_bytes_per_token"] - arm["kv_cache_bytes_per_token"])
    scale = ln2 / saved if saved else None
    ends = sorted([lo * scale, hi * scale]) if scale and lo is not None else [None, None]
    return dict(kv_bytes_saved=saved, nats_per_byte_saved=diff * scale if scale else None,
                nats_per_byte_saved_lo=ends[0], nats_per_byte_saved_hi=ends[1])


# ------------------------------------------------------------------ the kinds
@dataclass(frozen=True)
class Kind:
    """A study kind: the module docstring says what each field means."""

    name: str
    question: str
    invariant: Callable[[Arms], str]
    contrasts: tuple[str, ...]
    default_contrasts: tuple[str, ...]
    beside: tuple[str, ...]
    beside_text: Callable[[dict], str]
    figure: tuple[str, int, float]
    settings: dict = field(default_factory=dict)
    extra: Callable[..., dict] | None = None
    extra_note: Callable[[dict], str] | None = None
    vocabularies: bool = False


DEPTH_TOLERANCE = 0.02
"""A depth study's default tolerance on the non-embedding parameters (relative)."""
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("experts", "experts against the dense FFN, at the same FFN width per token", _experts_invariant,
         contrasts=("first", "extremes", "dense", "balance", "top_k"), default_contrasts=("dense", "balance"),
         beside=("params", "params_active", "chars_per_s", "peak_memory_mb"), beside_text=_experts_beside,
         figure=("experts_study", 2, 5.2)),
    Kind("depth", "depth at a fixed budget of non-embedding parameters", _depth_invariant,
         contrasts=("first", "extremes"), default_contrasts=("first",),
         beside=("layers", "width", "non_embedding"), beside_text=_depth_beside, figure=("depth_study", 1, 2.6),
         settings=dict(tolerance=DEPTH_TOLERANCE, head_size=None)),
    Kind("kv", "keys and values shared among query heads: loss against KV-cache bytes", _kv_invariant,
         contrasts=("first", "extremes", "full"), default_contrasts=("full",),
         beside=("kv_heads", "kv_cache_bytes_per_token"), beside_text=_kv_beside, figure=("kv_study", 1, 2.6),
         settings=dict(bytes_per_number=BYTES_PER_NUMBER["float32"]), extra=_kv_extra,
         extra_note=_kv_note),
    Kind("vocab", "the vocabulary's size, in bits per character of the same text", _vocab_invariant,
         contrasts=("first", "extremes", "char"), default_contrasts=("char",),
         beside=("vocab_size", "embedding_share", "chars_per_window"), beside_text=_vocab_beside,
         figure=("vocab_study", 1, 4.4), vocabularies=True),
)}
"""Every study kind, by name (the module docstring)."""
