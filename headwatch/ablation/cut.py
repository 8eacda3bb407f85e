"""Cutting heads (protocol §5): head-level cuts on top of :mod:`headwatch.model.interventions`.

A head is *cut* by an edit of its ``z`` — its ``head_dim`` slice of the
**input** to the attention output projection. The head still computes its
attention and its values; its voice is replaced:

* **zero** (the default): ``z_h = 0``;
* **mean** (``means`` given, :func:`head_means`): ``z_h`` = the head's mean
  over a reference set's rows and positions, which keeps the head in its
  usual operating range instead of taking it off it.

No weight is ever modified by a cut. Everything here goes through
:func:`headwatch.model.interventions.intervene`:

* :func:`cut_heads` — one set of heads for every row of every forward pass run inside it.
* :func:`cut_rows` — the batched form: a boolean mask ``[batch, n_layers, n_heads]``;
  row ``i`` of the batch has its own set of heads cut (per-row edits).
* :func:`zeroed_columns` — the weight-level reference of a zero cut (the output
  projection's entries that read the heads, zeroed and restored).
* :func:`intact_states` — one forward pass of the intact model, keeping every block's output (the
  hidden states that stand in for the blocks below a cut).
* :class:`BatchedCuts` — many (cut, sequence) rows in few forward passes: the
  intact computation below each chunk's earliest cut layer is reused (a ``skip``
  edit at ``resid``) and logits are asked for only where they are read.
* :func:`loop_cuts` — the plain reference: one forward per cut.

The guards that say a cut is what it claims (protocol §5) are in :mod:`headwatch.ablation.guards`.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from ..model.arch import Adapter, Head, HeadAddressError
from ..model.interventions import Edit, capture, full_logits, intervene, replace, skip, zero, zeroed_weights
from ..jobs import progress

log = logging.getLogger("headwatch.ablation.cut")

__all__ = ["Head", "HeadAddressError", "normalize_heads", "head_mask", "cut_edits", "cut_heads", "cut_rows",
           "zeroed_columns", "head_means", "intact_states", "BatchedCuts", "loop_cuts", "plan_chunks", "full_logits",
           "heads_one_per_layer"]


# --------------------------------------------------------------------- addresses
def normalize_heads(adapter: Adapter, heads: Iterable[Sequence[int]]) -> list[Head]:
    """``[(layer, head), ...]`` as plain ints, each checked (HeadAddressError if out of range)."""
    out = []
    for item in heads:
        try:
            layer, head = item
        except (TypeError, ValueError):
            raise HeadAddressError(f"a head is addressed (layer, head); got {item!r}") from None
        layer, head = int(layer), int(head)
        adapter.require_head(layer, head)
        out.append((layer, head))
    return out


def head_mask(adapter: Adapter, rows: Sequence[Iterable[Sequence[int]]],
              device=None) -> torch.Tensor:
    """Bool mask ``[len(rows), n_layers, n_heads]``: row i cuts the heads listed in ``rows[i]``."""
    mask = torch.zeros(len(rows), adapter.n_layers, adapter.n_heads, dtype=torch.bool)
    for i, heads in enumerate(rows):
        for layer, head in normalize_heads(adapter, heads):
            mask[i, layer, head] = True
    return mask.to(device) if device is not None else mask


def heads_one_per_layer(adapter: Adapter) -> list[Head]:
    """One head in every layer (head index cycles with the layer), for the guards."""
    return [(layer, layer % adapter.n_heads) for layer in range(adapter.n_layers)]


def _require_means(adapter: Adapter, means: torch.Tensor | None) -> None:
    """ValueError unless ``means`` (if given) is [n_layers, n_heads, head_dim]."""
    want = (adapter.n_layers, adapter.n_heads, adapter.head_dim)
    if means is not None and tuple(means.shape) != want:
        raise ValueError(f"means must be [n_layers, n_heads, head_dim] = {list(want)}; "
                         f"got {list(means.shape)}")


# --------------------------------------------------------------------- the cuts
def cut_edits(adapter: Adapter, heads: Iterable[Head], means: torch.Tensor | None = None,
              rows: torch.Tensor | None = None) -> list[Edit]:
    """The ``z`` edits that cut ``heads``: zero, or replace by ``means[layer, head]``; in every
    row, or in the rows where ``rows[:, layer, head]`` is True (``rows`` bool ``[batch, L, H]``)."""
    _require_means(adapter, means)
    out = []
    for layer, head in heads:
        r = None if rows is None else rows[:, layer, head]
        out.append(zero("z", layer, head, r) if means is None
                   else replace("z", layer, means[layer, head], head, r))
    return out


@contextlib.contextmanager
def cut_heads(adapter: Adapter, heads: Iterable[Sequence[int]], means: torch.Tensor | None = None):
    """Cut ``heads`` (``(layer, head)`` pairs) in every forward pass run inside the block.

    Every address is checked before any hook is registered; the hooks are removed on exit,
    also when the body raises. ``means`` ``[L, H, head_dim]``: mean cuts instead of zero cuts.
    Yields the list of heads cut.
    """
    heads = normalize_heads(adapter, heads)
    with intervene(adapter, cut_edits(adapter, heads, means)):
        yield heads


@contextlib.contextmanager
def cut_rows(adapter: Adapter, masks: torch.Tensor, means: torch.Tensor | None = None):
    """Batched cut: ``masks[i, layer, head]`` True cuts that head in batch row ``i`` only.

    ``masks`` is bool ``[batch, n_layers, n_heads]``; every forward pass run
    inside the block must have exactly ``batch`` rows (checked; a mismatch is an
    error, never a silent broadcast). Rows with no True entry run intact.
    Hooks go only on layers where some row cuts something, and are always removed.
    """
    if masks.dtype != torch.bool or masks.ndim != 3:
        raise ValueError(f"masks must be a bool tensor [batch, n_layers, n_heads]; got "
                         f"{masks.dtype} {tuple(masks.shape)}")
    if tuple(masks.shape[1:]) != (adapter.n_layers, adapter.n_heads):
        raise HeadAddressError(
            f"masks address {masks.shape[1]} layers × {masks.shape[2]} heads; the model has "
            f"{adapter.n_layers} layers × {adapter.n_heads} heads")
    heads = [(int(l), int(h)) for l, h in masks.any(dim=0).nonzero().tolist()]
    with intervene(adapter, cut_edits(adapter, heads, means, masks)):
        yield masks


@contextlib.contextmanager
def zeroed_columns(adapter: Adapter, heads: Iterable[Sequence[int]]):
    """Zero the output-projection weight entries that read ``heads``; restore them on exit.

    The reference a guard compares a zero cut with (:func:`headwatch.model.interventions.zeroed_weights`
    at ``z``): modifies weights in place, restores them also when the body raises, and
    verifies the restore bit for bit.
    """
    heads = normalize_heads(adapter, heads)
    with zeroed_weights(adapter, [("z", l, h) for l, h in heads]):
        yield heads


@torch.no_grad()
def head_means(model, adapter: Adapter, ids: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """Every head's ``z`` averaged over every row and position of ``ids``: ``[L, H, head_dim]``
    (float64 sums, returned in float32) — the values of a mean cut, by one capture at ``z``."""
    dev = next(model.parameters()).device
    ids = ids.to(dev)
    total = torch.zeros(adapter.n_layers, adapter.n_heads * adapter.head_dim, dtype=torch.float64, device=dev)
    for i in range(0, len(ids), batch):
        with intervene(adapter, [capture("z", l) for l in range(adapter.n_layers)]) as cap:
            adapter.run_body(ids[i:i + batch])
        for l in range(adapter.n_layers):
            total[l] += cap.one(("z", l, None)).double().sum(dim=(0, 1))
    return (total / ids.numel()).float().cpu().reshape(adapter.n_layers, adapter.n_heads, adapter.head_dim)


# ------------------------------------------------------------ forward passes
def _model_device(model) -> torch.device:
    return next(model.parameters()).device


Reduce = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reduce(logits [B, P, vocab], seq_index [B]) -> Tensor [B, ...]``: what is read from the logits."""


@torch.no_grad()
def intact_states(adapter: Adapter, ids: torch.Tensor, batch: int = 64, keep: int = 1):
    """One forward pass of ``ids`` ``[N, T]`` through the intact model, in chunks of ``batch`` rows:
    (its logits, ``keep`` as :meth:`~headwatch.model.arch.Adapter.logits` — 0 = every position —, and
    every block's output, ``hidden[l]`` ``[N, T, width]`` for block ``l``, by a capture at
    ``resid``). A cut or patch at layer ``l`` changes nothing below it, so ``hidden[l - 1]`` stands
    in for blocks ``0 .. l-1`` (a ``skip`` edit): :class:`BatchedCuts` and the hook guards."""
    ids = ids.to(_model_device(adapter.model))
    L = adapter.n_layers
    logits, parts = [], [[] for _ in range(L)]
    for i in range(0, len(ids), batch):
        with intervene(adapter, [capture("resid", l) for l in range(L)]) as cap:
            logits.append(adapter.logits(ids[i:i + batch], keep=keep))
        for l in range(L):
            parts[l].append(cap.one(("resid", l, None)))
    return torch.cat(logits), [torch.cat(p) for p in parts]


@torch.no_grad()
def loop_cuts(model, adapter: Adapter, ids: torch.Tensor, variants: Sequence[Iterable[Sequence[int]]],
              reduce: Reduce, positions: torch.Tensor | None = None, batch: int = 64,
              means: torch.Tensor | None = None) -> torch.Tensor:
    """The plain reference: for each variant (a set of heads), full forward passes with
    :func:`cut_heads` over all sequences of ``ids`` ``[N, T]``. Returns ``[V, N, ...]``.

    ``positions`` (1-D) selects the logit positions handed to ``reduce``; all when None.
    """
    dev = _model_device(model)
    ids = ids.to(dev)
    positions = None if positions is None else positions.to(dev)
    seq_all = torch.arange(len(ids), device=dev)
    out = []
    for heads in variants:
        parts = []
        with cut_heads(adapter, heads, means):
            for i in range(0, len(ids), batch):
                logits = adapter.logits(ids[i:i + batch])
                if positions is not None:
                    logits = logits[:, positions]
                parts.append(reduce(logits, seq_all[i:i + batch]))
        out.append(torch.cat(parts))
    return torch.stack(out)


def plan_chunks(earliest: Sequence[int], n_layers: int, batch: int, overhead: float = 1.0
                ) -> list[tuple[int, int]]:
    """Split rows sorted by earliest cut layer into chunks ``[i, j)`` of at most ``batch`` rows.

    A chunk starting at layer ``e`` runs layers ``e .. n_layers-1`` for each of its rows plus a
    fixed ``overhead`` (in rows) per layer: cost ``(n_layers - earliest[i]) * (j - i + overhead)``.
    Dynamic programming gives the cheapest split (rows whose earliest cut is far above the
    chunk's start would otherwise recompute intact layers). Each row's candidate chunk starts
    are scanned as one array, so that chunks of many rows (the cached per-position sweep's
    short rows, :mod:`headwatch.patching.positions`) cost little to plan.
    """
    n = len(earliest)
    e = np.asarray(earliest, dtype=np.float64)
    if np.any(e[:-1] > e[1:]):
        raise ValueError("rows must be sorted by earliest cut layer")
    if batch < 1:
        raise ValueError(f"a chunk holds at least one row; got batch = {batch}")
    best = np.zeros(n + 1)
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        i = max(0, j - batch)
        cost = best[i:j] + (n_layers - e[i:j]) * (j - np.arange(i, j) + overhead)
        k = int(np.argmin(cost))                   # the first of equal minima, as a strict < scan
        best[j], cut[j] = cost[k], i + k
    chunks, j = [], n
    while j > 0:
        chunks.append((cut[j], j))
        j = cut[j]
    return chunks[::-1]


class BatchedCuts:
    """Many cuts of the sequences ``ids`` ``[N, T]`` in few forward passes.

    Each *row* is one (mask, sequence) pair. Rows are sorted by their earliest
    cut layer and run in chunks of at most ``batch`` rows (:func:`plan_chunks`)
    with per-row cuts (:func:`cut_edits`). Two savings, both exact up to float
    rounding (compared with :func:`loop_cuts` by the guards):

    * **prefix reuse** — below a chunk's earliest cut layer every row is the
      intact model, so the blocks there are not run: a ``skip`` edit at
      ``resid`` hands the next block the intact hidden states, captured once
      for all sequences (a capture at ``resid``).
    * **logits only where read** — the model projects the final hidden states
      onto the vocabulary only at ``positions``.

    ``means`` ``[L, H, head_dim]``: mean cuts instead of zero cuts. ``hidden``: the intact hidden
    states of ``ids`` when another runner of the same sequences and ``batch`` captured them already
    (its ``hidden``: the zero and the mean cuts of §5a share one capture).
    """

    def __init__(self, model, adapter: Adapter, ids: torch.Tensor,
                 positions: torch.Tensor | None = None, batch: int = 64, reuse_prefix: bool = True,
                 means: torch.Tensor | None = None, hidden: list[torch.Tensor] | None = None):
        self.model, self.adapter, self.batch = model, adapter, int(batch)
        _require_means(adapter, means)
        self.means = means
        self.device = _model_device(model)
        self.ids = ids.to(self.device)
        self.positions = None if positions is None else positions.to(self.device)
        self.reuse_prefix = reuse_prefix
        # Fixed cost of one forward pass per layer, in rows: small on a CPU (compute-bound),
        # large on a GPU (launch-bound, so chunks should be full).
        self.overhead = 1 if self.device.type == "cpu" else self.batch
        self.hidden: list[torch.Tensor] | None = None   # hidden[l] = intact output of block l
        if reuse_prefix:
            self.hidden = hidden if hidden is not None else intact_states(adapter, self.ids, self.batch)[1]

    @torch.no_grad()
    def run(self, seq_index: torch.Tensor, masks: torch.Tensor, reduce: Reduce) -> torch.Tensor:
        """``reduce`` of the logits of each row (sequence ``seq_index[r]`` with ``masks[r]`` cut),
        in row order."""
        L = self.adapter.n_layers
        seq_index = torch.as_tensor(seq_index, dtype=torch.long)
        if masks.shape[0] != len(seq_index):
            raise ValueError("one mask per row")
        any_layer = masks.any(dim=2)                                   # [R, L]
        earliest = torch.where(any_layer.any(dim=1), any_layer.float().argmax(dim=1),
                               torch.full((len(masks),), L))
        if not self.reuse_prefix:
            earliest = torch.zeros_like(earliest)
        order = torch.argsort(earliest, stable=True)
        # Planning reads the host copies; the forward passes index the device copies (one transfer each).
        masks_dev, seq_dev, order_dev = (t.to(self.device) for t in (masks, seq_index, order))
        parts = []
        keep = self.positions if self.positions is not None else 0
        for i, j in progress(plan_chunks(earliest[order].tolist(), L, self.batch, self.overhead), desc="cuts",
                             unit="pass"):
            rows = order[i:j]
            start = int(earliest[rows].min())
            sidx = seq_dev[order_dev[i:j]]
            heads = [(int(l), int(h)) for l, h in masks[rows].any(dim=0).nonzero().tolist()]
            edits = cut_edits(self.adapter, heads, self.means, masks_dev[order_dev[i:j]])
            if start > 0:       # blocks below the earliest cut: the intact hidden states, not run
                edits.append(skip(start - 1, self.hidden[start - 1][sidx]))
            with intervene(self.adapter, edits):
                logits = self.adapter.logits(self.ids[sidx], keep=keep)
            parts.append(reduce(logits, sidx))
        # parts hold the rows in `order`; argsort(order) puts each back at its own place
        return torch.cat(parts)[torch.argsort(order_dev)]

    def run_variants(self, variants: Sequence[Iterable[Sequence[int]]], reduce: Reduce) -> torch.Tensor:
        """Each variant (a set of heads) on every sequence: ``[V, N, ...]``, like :func:`loop_cuts`."""
        n = len(self.ids)
        base = head_mask(self.adapter, variants)                        # [V, L, H]
        masks = base.repeat_interleave(n, dim=0)                        # row = (variant, sequence)
        seq_index = torch.arange(n).repeat(len(variants))
        out = self.run(seq_index, masks, reduce)
        return out.reshape(len(variants), n, *out.shape[1:])
