"""One head's weights, and its attention map recomputed by hand (protocol §6).

:func:`head_slices` says where a head lives in the real tensors: the rows of
Wq, Wk, Wv (its key/value group's, for grouped models; inside the fused QKV
tensor for GPT-NeoX, GPT-2 and Phi-3) and the columns of Wo, as ranges in the stored
tensor, with their parameter counts.

:func:`weight_check` recomputes that head's attention map from the raw
weights — input norm (LayerNorm or RMSNorm, Gemma's 1 + w, none for OLMo 2),
q/k projections with biases, then :mod:`headwatch.model.recompute`: QK-norm, rotary
embedding (partial, rotate-half or GPT-J's interleaved pairs, the layer's
base), scale, soft-capping, causal mask and sliding window, softmax — in
float64 from the hidden state entering the layer, and compares it with the map
the model itself returns (both read by captures at the ``resid_in`` and
``pattern`` sites). What a family's rules are, the adapter says. Above a bound
derived from the model's rounding (:class:`headwatch.guards.Rounding`: u × the
largest |q|·|k|·scale of the head × depth 2 (the projection, then q·k) × √width)
it raises.
"""
from __future__ import annotations

import torch
from torch import nn

from ..model.arch import Adapter
from ..tableio import assert_finite
from ..model.device import exact_numerics, numerics
from ..guards import FLOAT64_HINT, GuardError, rounding
from ..model.interventions import capture, intervene
from ..model.recompute import norm, pattern, rules, score_size


class WeightCheckError(GuardError):
    """The hand-computed attention map disagrees with the model's own (a guard: it stops the rule)."""


# ------------------------------------------------------------- head slices
def _names(model: nn.Module) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


def _proj_slice(adapter: Adapter, module: nn.Module, sl: slice, names: dict) -> dict:
    """Where output features ``sl`` of a projection sit in its stored weight (and bias)."""
    w = module.weight
    axis = 1 if adapter.family.conv1d else 0   # Conv1D stores (in, out); Linear (out, in)
    width_in = w.shape[1 - axis]
    rec = dict(tensor=names[id(w)], shape=list(w.shape), axis=axis,
               **{("columns" if axis else "rows"): [sl.start, sl.stop],
                  ("rows" if axis else "columns"): [0, width_in]},
               fused=len(adapter.family.qkv) == 1, weights=(sl.stop - sl.start) * width_in)
    b = getattr(module, "bias", None)
    rec["bias"] = None if b is None else dict(tensor=names[id(b)], range=[sl.start, sl.stop])
    rec["params"] = rec["weights"] + (0 if b is None else sl.stop - sl.start)
    return rec


@torch.no_grad()
def head_slices(model: nn.Module, adapter: Adapter, layer: int, head: int) -> dict:
    """Ranges (half-open, 0-based) of one head's Wq/Wk/Wv rows and Wo columns, counts, Wq stats."""
    adapter.require_head(layer, head)
    names = _names(model)
    group = adapter.kv_group(head)
    q = _proj_slice(adapter, adapter.query_proj(layer), adapter.query_slice(head), names)
    k = _proj_slice(adapter, adapter.key_proj(layer), adapter.key_slice(group), names)
    v = _proj_slice(adapter, adapter.value_proj(layer), adapter.value_slice(group), names)
    wo = adapter.out_proj(layer).weight
    cols = adapter.out_columns(head)
    axis = 0 if adapter.family.conv1d else 1
    o = dict(tensor=names[id(wo)], shape=list(wo.shape), axis=axis,
             **{("rows" if axis == 0 else "columns"): [cols.start, cols.stop],
                ("columns" if axis == 0 else "rows"): [0, wo.shape[1 - axis]]},
             params=adapter.out_weight_for_head(layer, head).numel(),
             bias=None, note="the output projection's bias (if any) belongs to no single head")
    shared_by = [h for h in range(adapter.n_heads) if adapter.kv_group(h) == group]
    k["shared_by_heads"] = v["shared_by_heads"] = shared_by
    wq = adapter.query_proj(layer).weight
    wq_head = (wq[:, adapter.query_slice(head)] if adapter.family.conv1d
               else wq[adapter.query_slice(head), :]).double()
    total_model = sum(p.numel() for p in model.parameters())
    own = q["params"] + o["params"]
    shared = k["params"] + v["params"]
    return dict(
        layer=layer, head=head, kv_group=group, group_size=adapter.group_size,
        head_dim=adapter.head_dim, width=adapter.width, family=adapter.family.name,
        ranges="half-open [start, stop), 0-based, in the stored tensor; axis = the tensor "
               "dimension the range selects",
        query=q, key=k, value=v, output=o,
        params=dict(own=own, key_value=shared, key_value_note=f"shared by the {len(shared_by)} "
                    f"query heads of group {group}", total=own + shared, per_head=own + shared / len(shared_by),
                    model_total=total_model, share=(own + shared) / total_model,
                    share_per_head=(own + shared / len(shared_by)) / total_model),
        wq_stats=dict(min=wq_head.min().item(), max=wq_head.max().item(),
                      mean=wq_head.mean().item(), std=wq_head.std().item(),
                      numel=wq_head.numel()),
    )


# ----------------------------------------------------------- by-hand attention
def _project(adapter: Adapter, module: nn.Module, sl: slice, x: torch.Tensor) -> torch.Tensor:
    w = module.weight.detach().double().cpu()
    w = w[:, sl] if adapter.family.conv1d else w[sl, :].T          # (in, d)
    b = getattr(module, "bias", None)
    return x @ w + (0.0 if b is None else b.detach().double().cpu()[sl])


def hand_map(adapter: Adapter, layer: int, head: int, hidden: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The head's attention map [T, T] in float64 from the layer's input hidden state [T, W]:
    the input norm and every head's q/k projections by hand from the stored weights, then
    the family's rules (:func:`headwatch.model.recompute.pattern`: QK-norm, rotary, scale,
    soft-cap, window). ``how`` holds the rules and ``score_size``, the size of the head's attention
    scores (:func:`headwatch.model.recompute.score_size`)."""
    x = hidden.detach().double().cpu()
    n = adapter.input_norm_params(layer)
    xn = norm(x, n)
    q = torch.stack([_project(adapter, adapter.query_proj(layer), adapter.query_slice(h), xn)
                     for h in range(adapter.n_heads)])
    k = torch.stack([_project(adapter, adapter.key_proj(layer), adapter.key_slice(g), xn)
                     for g in range(adapter.n_kv_heads)])
    how = dict(norm=n["kind"] or "none", eps=n["eps"], norm_offset=n["offset"], **rules(adapter, layer),
               precision="float64 on CPU", score_size=float(score_size(adapter, layer, q, k)[head]))
    return pattern(adapter, layer, q, k)[head], how


@torch.no_grad()
def model_map_and_input(model: nn.Module, adapter: Adapter, ids: torch.Tensor, layer: int):
    """(all maps [L][H, T, T], the hidden state entering ``layer`` [T, W]) from one forward pass:
    captures at every layer's ``pattern`` and at ``layer``'s ``resid_in``."""
    edits = [capture("pattern", l) for l in range(adapter.n_layers)] + [capture("resid_in", layer)]
    with intervene(adapter, edits) as cap:
        adapter.run_body(ids)
    maps = [cap.one(("pattern", l, None))[0] for l in range(adapter.n_layers)]
    assert_finite(maps[layer], f"layer {layer} attention maps")
    return maps, cap.one(("resid_in", layer, None))[0]


def _cell(r: int, c: int, tokens, hand, mine) -> dict:
    return dict(row=r, col=c, row_token=tokens[r], col_token=tokens[c],
                by_hand=float(hand[r, c]), model=float(mine[r, c]),
                abs_delta=float(abs(hand[r, c] - mine[r, c])))


@torch.no_grad()
@exact_numerics()
def weight_check(model: nn.Module, adapter: Adapter, ids, layer: int, head: int, tokens=None,
                 rounding_factor: float = 1.0) -> dict:
    """Compare the by-hand map with the model's; raise :class:`WeightCheckError` above the bound
    ``rounding_factor`` × u × the head's score size × 2 × √width (:func:`headwatch.guards.rounding`:
    the model's rounding of one block's projection and product; the by-hand side's float64 adds ~1e-16).

    The record names two cells both ways (by hand, model): where they differ
    most, and where the head looks hardest from the last token; ``bound``, ``ratio`` (max |Δ| /
    bound) and ``rounding`` (every number of the bound).
    """
    adapter.require_head(layer, head)
    device = next(model.parameters()).device
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(device)
    T = ids.shape[1]
    tokens = list(tokens) if tokens is not None else [str(int(i)) for i in ids[0]]
    maps, hidden = model_map_and_input(model, adapter, ids, layer)
    mine = maps[layer][head].double().cpu()
    hand, how = hand_map(adapter, layer, head, hidden)
    assert_finite(hand, "by-hand attention map")
    delta = (hand - mine).abs()
    bound = rounding(adapter, rounding_factor, how.pop("score_size"), depth=2, terms=adapter.width,
                     of="largest |q|·|k|·scale")
    worst = divmod(int(delta.argmax()), T)
    strongest = (T - 1, int(mine[T - 1].argmax()))
    record = dict(layer=layer, head=head, kv_group=adapter.kv_group(head), tokens=T,
                  model_dtype=str(next(model.parameters()).dtype), model_device=device.type, numerics=numerics(),
                  family=adapter.family.name, **how, bound=bound.bound, rounding=bound.facts(),
                  max_abs_delta=float(delta.max()), mean_abs_delta=float(delta.mean()),
                  ratio=float(delta.max()) / bound.bound if bound.bound else None,
                  cell_largest_delta=_cell(*worst, tokens, hand, mine),
                  cell_last_row_strongest=_cell(*strongest, tokens, hand, mine),
                  passed=bool(delta.max() <= bound.bound))
    if not record["passed"]:
        raise WeightCheckError(
            f"head (layer={layer}, head={head}): the map recomputed from the weights differs from the "
            f"model's by up to {record['max_abs_delta']:.3e} > bound {bound.bound:.3g}, {record['ratio']:.3g} × the "
            f"bound (cell {record['cell_largest_delta']}); the bound, {bound.formula()}, is what rounding of "
            f"numbers this size can do in {bound.dtype}; {FLOAT64_HINT}", record)
    return record
