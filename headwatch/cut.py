"""Cutting heads (protocol §5): the one mechanism every ablation goes through.

A head is *cut* by zeroing its ``head_dim`` slice of the **input** to the
attention output projection (``adapter.out_proj(layer)``) with a forward
pre-hook. The head still computes its attention and its values; its voice is
zero. No weight is ever modified by a cut.

* :func:`cut_heads` — a context manager that cuts one set of heads for every
  row of every forward pass run inside it, and always removes its hooks.
* :func:`cut_rows` — the batched form: a boolean mask ``[batch, n_layers,
  n_heads]``; row ``i`` of the batch has its own set of heads cut, so one
  forward pass computes many different cuts.
* :func:`zeroed_columns` — the reference the hook is checked against: zero the
  output projection's weight entries that read the heads, restore them after
  (and verify the restore bit for bit). Used only by the guards.
* :class:`BatchedCuts` — runs many (cut, sequence) rows in few forward passes:
  reuses the intact computation below each chunk's earliest cut layer and asks
  the model for logits only at the positions that are read.
* :func:`loop_cuts` — the plain reference: one forward per cut with the hook.
* :func:`check_hook_vs_weights`, :func:`check_restore`, :func:`compare_batched`
  — the guards of protocol §5 (fatal when they fail: :class:`CutCheckError`).

Only :mod:`headwatch.arch` knows module names; this module asks the adapter.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterable, Sequence

import torch

from .arch import Adapter, HeadAddressError

log = logging.getLogger("headwatch.cut")

Head = tuple[int, int]

__all__ = ["Head", "HeadAddressError", "CutCheckError", "normalize_heads", "head_mask",
           "cut_heads", "cut_rows", "zeroed_columns", "BatchedCuts", "loop_cuts",
           "plan_chunks", "full_logits", "check_hook_vs_weights", "check_restore", "compare_batched",
           "heads_one_per_layer"]


class CutCheckError(RuntimeError):
    """A guard of protocol §5 failed: the cut is not what it claims to be."""


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
        adapter.check_head(layer, head)
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


def _feature_mask(adapter: Adapter, heads_mask: torch.Tensor) -> torch.Tensor:
    """``[..., n_heads]`` bool → ``[..., n_heads * head_dim]`` bool (each head's input slice)."""
    return heads_mask.repeat_interleave(adapter.head_dim, dim=-1)


# --------------------------------------------------------------------- the hooks
@contextlib.contextmanager
def cut_heads(adapter: Adapter, heads: Iterable[Sequence[int]]):
    """Cut ``heads`` (``(layer, head)`` pairs) in every forward pass run inside the block.

    A forward pre-hook on ``adapter.out_proj(layer)`` zeroes the head's
    ``head_dim`` slice of the projection's input. Every address is checked
    before any hook is registered; the hooks are removed on exit, also when
    the body raises. Yields the list of heads cut.
    """
    heads = normalize_heads(adapter, heads)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    try:
        for layer, hs in sorted(by_layer.items()):
            drop = torch.zeros(adapter.n_heads, dtype=torch.bool)
            drop[hs] = True
            handles.append(adapter.out_proj(layer).register_forward_pre_hook(
                _make_hook(_feature_mask(adapter, drop), layer)))
        yield heads
    finally:
        for h in handles:
            h.remove()


def _make_hook(feature_drop: torch.Tensor, layer: int):
    """The one zeroing pre-hook: ``feature_drop`` is ``[features]`` (the same cut for every
    row) or ``[batch, 1, features]`` (row i's own cut; the batch must match exactly)."""
    cache: dict = {}
    per_row = feature_drop.ndim == 3

    def hook(module, args):
        x = args[0]
        drop = cache.get(x.device)
        if drop is None:
            drop = cache[x.device] = feature_drop.to(x.device)
        if x.shape[-1] != drop.shape[-1] or (per_row and (x.ndim != 3 or x.shape[0] != drop.shape[0])):
            rows = f"{drop.shape[0]} rows × " if per_row else ""
            raise CutCheckError(f"layer {layer}: the cut has masks for {rows}{drop.shape[-1]} features "
                                f"but the output projection got {tuple(x.shape)}")
        return (x.masked_fill(drop, 0),) + tuple(args[1:])
    return hook


@contextlib.contextmanager
def cut_rows(adapter: Adapter, masks: torch.Tensor):
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
    handles = []
    try:
        for layer in range(adapter.n_layers):
            per_row = masks[:, layer, :]
            if not bool(per_row.any()):
                continue
            feat = _feature_mask(adapter, per_row)[:, None, :]      # [batch, 1, features]
            handles.append(adapter.out_proj(layer).register_forward_pre_hook(
                _make_hook(feat, layer)))
        yield masks
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def zeroed_columns(adapter: Adapter, heads: Iterable[Sequence[int]]):
    """Zero the output-projection weight entries that read ``heads``; restore them on exit.

    This *does* modify weights (in place, under ``no_grad``): it exists only as
    the reference the hook is checked against. The saved entries are written
    back on exit, also when the body raises, and the restore is verified bit
    for bit (CutCheckError otherwise).
    """
    heads = normalize_heads(adapter, heads)
    saved = []
    try:
        with torch.no_grad():
            for layer, head in heads:
                view = adapter.out_weight_for_head(layer, head)
                saved.append((view, view.detach().clone()))
                view.zero_()
        yield heads
    finally:
        with torch.no_grad():
            for view, orig in reversed(saved):
                view.copy_(orig)
        for (view, orig), (layer, head) in zip(saved, heads):
            if not torch.equal(view, orig):
                raise CutCheckError(f"weights of head ({layer}, {head}) were not restored exactly")


# ------------------------------------------------------------ forward passes
def _model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def full_logits(model, ids, batch: int = 64):
    """Every logit (every position, every vocabulary entry), float32 on the CPU.

    ``ids`` is a LongTensor ``[N, T]`` (→ one tensor ``[N, T, vocab]``) or a list of
    such tensors of different lengths (→ a list of logits tensors).
    """
    if isinstance(ids, (list, tuple)):
        return [full_logits(model, x, batch) for x in ids]
    dev = _model_device(model)
    out = [model(input_ids=ids[i:i + batch].to(dev), use_cache=False).logits.float().cpu()
           for i in range(0, len(ids), batch)]
    return torch.cat(out)


def _max_diff(a, b) -> float:
    if isinstance(a, list):
        return max(_max_diff(x, y) for x, y in zip(a, b))
    return float((a - b).abs().max())


def _equal(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(torch.equal(a, b))


def _shape(a) -> list:
    return [list(x.shape) for x in a] if isinstance(a, list) else list(a.shape)


Reduce = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reduce(logits [B, P, vocab], seq_index [B]) -> Tensor [B, ...]``: what is read from the logits."""


@torch.no_grad()
def loop_cuts(model, adapter: Adapter, ids: torch.Tensor, variants: Sequence[Iterable[Sequence[int]]],
              reduce: Reduce, positions: torch.Tensor | None = None, batch: int = 64) -> torch.Tensor:
    """The plain reference: for each variant (a set of heads), full forward passes with
    :func:`cut_heads` over all sequences of ``ids`` ``[N, T]``. Returns ``[V, N, ...]``.

    ``positions`` (1-D) selects the logit positions handed to ``reduce``; all when None.
    """
    dev = _model_device(model)
    ids = ids.to(dev)
    seq_all = torch.arange(len(ids), device=dev)
    out = []
    for heads in variants:
        parts = []
        with cut_heads(adapter, heads):
            for i in range(0, len(ids), batch):
                logits = model(input_ids=ids[i:i + batch], use_cache=False).logits
                if positions is not None:
                    logits = logits[:, positions.to(dev)]
                parts.append(reduce(logits, seq_all[i:i + batch]))
        out.append(torch.cat(parts))
    return torch.stack(out)


def plan_chunks(earliest: Sequence[int], n_layers: int, batch: int, overhead: float = 1.0
                ) -> list[tuple[int, int]]:
    """Split rows sorted by earliest cut layer into chunks ``[i, j)`` of at most ``batch`` rows.

    A chunk starting at layer ``e`` runs layers ``e .. n_layers-1`` for each of its rows plus a
    fixed ``overhead`` (in rows) per layer: cost ``(n_layers - earliest[i]) * (j - i + overhead)``.
    Dynamic programming gives the cheapest split (rows whose earliest cut is far above the
    chunk's start would otherwise recompute intact layers).
    """
    n = len(earliest)
    if any(a > b for a, b in zip(earliest, earliest[1:])):
        raise ValueError("rows must be sorted by earliest cut layer")
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(max(0, j - batch), j):
            c = best[i] + (n_layers - earliest[i]) * (j - i + overhead)
            if c < best[j]:
                best[j], cut[j] = c, i
    chunks, j = [], n
    while j > 0:
        chunks.append((cut[j], j))
        j = cut[j]
    return chunks[::-1]


class BatchedCuts:
    """Many cuts of the sequences ``ids`` ``[N, T]`` in few forward passes.

    Each *row* is one (mask, sequence) pair. Rows are sorted by their earliest
    cut layer and run in chunks of at most ``batch`` rows (:func:`plan_chunks`)
    with :func:`cut_rows`. Two savings,
    both exact up to float rounding (checked against :func:`loop_cuts` by the
    guards):

    * **prefix reuse** — below a chunk's earliest cut layer every row is the
      intact model, so the blocks there are not run: they are stood in for by
      the intact hidden states, computed once for all sequences.
    * **logits only where read** — the model's ``logits_to_keep`` projects the
      final hidden states onto the vocabulary only at ``positions``.
    """

    def __init__(self, model, adapter: Adapter, ids: torch.Tensor,
                 positions: torch.Tensor | None = None, batch: int = 64, reuse_prefix: bool = True):
        self.model, self.adapter, self.batch = model, adapter, int(batch)
        self.device = _model_device(model)
        self.ids = ids.to(self.device)
        self.positions = None if positions is None else positions.to(self.device)
        self.reuse_prefix = reuse_prefix
        # Fixed cost of one forward pass per layer, in rows: small on a CPU (compute-bound),
        # large on a GPU (launch-bound, so chunks should be full).
        self.overhead = 1 if self.device.type == "cpu" else self.batch
        self.hidden: list[torch.Tensor] | None = None   # hidden[l] = intact output of block l
        if reuse_prefix:
            self._cache_intact()

    @torch.no_grad()
    def _cache_intact(self) -> None:
        outs: list[list[torch.Tensor]] = [[] for _ in range(self.adapter.n_layers)]
        handles = []

        def grab(layer):
            def hook(module, args, output):
                if not isinstance(output, torch.Tensor):
                    raise TypeError(f"block {layer} returns {type(output).__name__}, not a tensor; "
                                    "prefix reuse needs blocks that return hidden states "
                                    "(use reuse_prefix=False)")
                outs[layer].append(output.detach())
            return hook
        try:
            for layer in range(self.adapter.n_layers):
                handles.append(self.adapter.block(layer).register_forward_hook(grab(layer)))
            for i in range(0, len(self.ids), self.batch):
                self.model(input_ids=self.ids[i:i + self.batch], use_cache=False, logits_to_keep=1)
        finally:
            for h in handles:
                h.remove()
        self.hidden = [torch.cat(o) for o in outs]

    @contextlib.contextmanager
    def _skip_below(self, start: int, seq_index: torch.Tensor):
        """Blocks ``0 .. start-1`` return the intact input of block ``start`` without computing."""
        if start == 0:
            yield
            return
        h = self.hidden[start - 1][seq_index]
        blocks = [self.adapter.block(j) for j in range(start)]
        try:
            for b in blocks:
                b.forward = lambda *a, _h=h, **k: _h
            yield
        finally:
            for b in blocks:
                b.__dict__.pop("forward", None)

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
        results: list[torch.Tensor | None] = [None] * len(order)
        keep = self.positions if self.positions is not None else 0
        for i, j in plan_chunks(earliest[order].tolist(), L, self.batch, self.overhead):
            rows = order[i:j]
            start = int(earliest[rows].min())
            sidx = seq_index[rows].to(self.device)
            m = masks[rows].to(self.device)
            with cut_rows(self.adapter, m), self._skip_below(start, sidx):
                logits = self.model(input_ids=self.ids[sidx], use_cache=False,
                                    logits_to_keep=keep).logits
            red = reduce(logits, sidx)
            for k, r in enumerate(rows.tolist()):
                results[r] = red[k]
        return torch.stack(results)

    def run_variants(self, variants: Sequence[Iterable[Sequence[int]]], reduce: Reduce) -> torch.Tensor:
        """Each variant (a set of heads) on every sequence: ``[V, N, ...]``, like :func:`loop_cuts`."""
        n = len(self.ids)
        base = head_mask(self.adapter, variants)                        # [V, L, H]
        masks = base.repeat_interleave(n, dim=0)                        # row = (variant, sequence)
        seq_index = torch.arange(n).repeat(len(variants))
        out = self.run(seq_index, masks, reduce)
        return out.reshape(len(variants), n, *out.shape[1:])


# -------------------------------------------------------------------- guards
@torch.no_grad()
def check_hook_vs_weights(model, adapter: Adapter, ids: torch.Tensor,
                          heads: Iterable[Sequence[int]], tolerance: float = 0.0,
                          batch: int = 64) -> dict:
    """Guard 1 (protocol §5): for each head, the FULL logits tensor (every position, every
    vocabulary entry, every sequence of ``ids``) with the hook cut vs with the head's
    output-projection weight entries zeroed. Raises CutCheckError if any max |Δ| > tolerance.
    """
    heads = normalize_heads(adapter, heads)
    per_head = []
    for layer, head in heads:
        with cut_heads(adapter, [(layer, head)]):
            hooked = full_logits(model, ids, batch)
        with zeroed_columns(adapter, [(layer, head)]):
            zeroed = full_logits(model, ids, batch)
        per_head.append(dict(layer=layer, head=head, max_abs_diff=_max_diff(hooked, zeroed),
                             identical=_equal(hooked, zeroed)))
    worst = max(p["max_abs_diff"] for p in per_head)
    record = dict(compared="full logits: every sequence, position and vocabulary entry",
                  logits_shape=_shape(hooked), n_cuts=len(per_head),
                  layers_covered=sorted({p["layer"] for p in per_head}),
                  max_abs_diff=worst, all_identical=all(p["identical"] for p in per_head),
                  tolerance=tolerance, passed=bool(worst <= tolerance), per_head=per_head)
    if not record["passed"]:
        raise CutCheckError(f"hook cut differs from zeroed weight columns: max |Δlogit| = {worst:g} "
                            f"> {tolerance:g} ({[p for p in per_head if p['max_abs_diff'] > tolerance]})")
    return record


@torch.no_grad()
def check_restore(model, ids: torch.Tensor, intact: torch.Tensor, batch: int = 64) -> dict:
    """Guard 2: the logits now (all hooks removed) are identical (torch.equal) to ``intact``."""
    now = full_logits(model, ids, batch)
    identical = _equal(now, intact)
    diff = _max_diff(now, intact)
    record = dict(compared="full logits before any cut vs after every hook was removed",
                  logits_shape=_shape(now), identical=identical, max_abs_diff=diff,
                  passed=identical)
    if not identical:
        raise CutCheckError(f"the model did not come back intact after the cuts: max |Δlogit| = {diff:g}")
    return record


def compare_batched(batched: torch.Tensor, looped: torch.Tensor, tolerance: float, what: str) -> dict:
    """Guard 3: the batched cuts equal the one-at-a-time loop to ``tolerance`` (max |Δ|)."""
    if batched.shape != looped.shape:
        raise CutCheckError(f"{what}: batched shape {tuple(batched.shape)} vs loop {tuple(looped.shape)}")
    diff = float((batched.double() - looped.double()).abs().max()) if batched.numel() else 0.0
    record = dict(compared=what, n_values=int(batched.numel()), max_abs_diff=diff,
                  tolerance=tolerance, passed=bool(diff <= tolerance))
    if not record["passed"]:
        raise CutCheckError(f"{what}: batched cuts differ from one-at-a-time by {diff:g} > {tolerance:g}")
    return record
