"""Attention weights recomputed from a layer's queries and keys, by its family's rules.

One formula for the two places that need it: the weight check (float64, from
the raw weights: :mod:`headwatch.anatomy.weights`) and the ``pattern`` site of
a family whose kernel returns no weights (:mod:`headwatch.model.interventions`).
What the rules are for a model, the adapter says (:class:`headwatch.model.arch.Family`):

* QK-norm (RMSNorm) over each head's ``head_dim`` (Qwen3, Gemma 3) or over the
  whole projection output (OLMo 2), before rotary;
* rotary embedding on the first ``dims`` of each head: pair i = dims
  (i, i + dims/2) (``half``, transformers' rotate_half) or (2i, 2i + 1)
  (``interleaved``, GPT-J), turning ``position × base^(-2i/dims) / factor``
  radians (``factor`` ≠ 1 only for the ``linear`` rope type); a base per layer
  where the config sets one per layer kind (Gemma 3);
* the logits ``q·k × scale``, soft-capped ``c·tanh(s / c)`` (Gemma 2);
* the causal mask and, where the layer has one, a sliding window (query i
  sees keys j with ``i − window < j ≤ i``); softmax over the keys.
"""
from __future__ import annotations

import math

import torch

from .arch import Adapter

ROPE_TYPES = ("default", "linear")
"""Rotary types recomputed here (others raise NotImplementedError, naming the type)."""


def norm(x: torch.Tensor, p: dict) -> torch.Tensor:
    """A LayerNorm or RMSNorm (``p`` as :meth:`headwatch.model.arch.Adapter.input_norm_params`;
    kind "" = none) over the last dimension, in ``x``'s dtype."""
    if not p["kind"]:
        return x
    w = p["weight"].detach().to(x)
    if p["kind"] == "LayerNorm":
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        b = p["bias"].detach().to(x) if p["bias"] is not None else 0.0
        return (x - mu) / torch.sqrt(var + p["eps"]) * w + b
    if p["kind"] == "RMSNorm":
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + p["eps"]) * (p["offset"] + w)
    raise NotImplementedError(f"no formula for the norm {p['kind']}")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] → [−x2, x1] over the last dimension (the transformers convention)."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, …) → (−x1, x0, −x3, x2, …): GPT-J's rotate_every_two."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def apply_rotary(x: torch.Tensor, rotary_dims: int, base: float, layout: str = "half",
                 factor: float = 1.0) -> torch.Tensor:
    """Rotate the first ``rotary_dims`` of each position's vector (``x`` [..., T, d]) by
    position × frequency; the rest pass unchanged.

    Pair i (0-based) turns base^(-2i/rotary_dims) / factor radians per token; it pairs dims
    i and i + rotary_dims/2 (``layout="half"``) or 2i and 2i + 1 (``"interleaved"``).
    """
    if not rotary_dims:
        return x
    T = x.shape[-2]
    inv = 1.0 / (float(base) ** (torch.arange(0, rotary_dims, 2, dtype=torch.float64) / rotary_dims)) / factor
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    if layout == "half":
        ang, turn = torch.cat((ang, ang), dim=-1), rotate_half
    elif layout == "interleaved":
        ang, turn = ang.repeat_interleave(2, dim=-1), rotate_pairs
    else:
        raise NotImplementedError(f"rotary layout {layout!r}")
    cos, sin = ang.cos().to(x), ang.sin().to(x)
    rot, rest = x[..., :rotary_dims], x[..., rotary_dims:]
    return torch.cat((rot * cos + turn(rot) * sin, rest), dim=-1)


def split_heads(adapter: Adapter, q_out: torch.Tensor,
                k_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Query / key projection outputs [..., T, features] → q [..., heads, T, d], k [..., kv, T, d]
    (each head's slice where the adapter says it is: fused layouts included)."""
    a = adapter
    q = torch.stack([q_out[..., a.query_slice(h)] for h in range(a.n_heads)], dim=-3)
    k = torch.stack([k_out[..., a.key_slice(g)] for g in range(a.n_kv_heads)], dim=-3)
    return q, k


def _qk_norm(adapter: Adapter, x: torch.Tensor, p: dict) -> torch.Tensor:
    if adapter.family.qk_norm == "head":
        return norm(x, p)
    if adapter.family.qk_norm == "projection":             # over every head's features at once
        flat = x.transpose(-3, -2).flatten(-2)              # [..., T, heads·d] in head order
        return norm(flat, p).unflatten(-1, x.shape[-3::2]).transpose(-3, -2)
    raise NotImplementedError(f"QK-norm {adapter.family.qk_norm!r}")


def queries_keys(adapter: Adapter, layer: int, q: torch.Tensor,
                 k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [..., heads, T, d], k [..., kv, T, d] as the dot product sees them: QK-normed and
    rotated (positions 0 … T−1)."""
    norms = adapter.qk_norm_params(layer)
    if norms is not None:
        q, k = _qk_norm(adapter, q, norms[0]), _qk_norm(adapter, k, norms[1])
    r = adapter.rope(layer)
    if r["dims"]:
        if r["type"] not in ROPE_TYPES:
            raise NotImplementedError(f"rope_type {r['type']!r} (layer {layer}): only {ROPE_TYPES} "
                                      "rotary embeddings are recomputed")
        q, k = (apply_rotary(x, r["dims"], r["base"], r["layout"], r["factor"]) for x in (q, k))
    return q, k


def mask(adapter: Adapter, layer: int, T: int, device=None) -> torch.Tensor:
    """bool [T, T], True where query i may not see key j: j > i, or j ≤ i − window."""
    i = torch.arange(T, device=device)
    hidden = i[None, :] > i[:, None]
    w = adapter.window(layer)
    if w is not None:
        hidden |= i[None, :] <= i[:, None] - w
    return hidden


def pattern(adapter: Adapter, layer: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention weights [..., heads, T, T] from q [..., heads, T, d] and k [..., kv, T, d]
    (:func:`split_heads`), in their dtype: QK-norm, rotary, scale, soft-cap, mask, softmax."""
    q, k = queries_keys(adapter, layer, q, k)
    k = k.repeat_interleave(adapter.group_size, dim=-3)     # head h reads group h // group_size
    scores = torch.matmul(q, k.transpose(-1, -2)) * adapter.attention_scale(layer)
    cap = adapter.softcap(layer)
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    scores = scores.masked_fill(mask(adapter, layer, q.shape[-2], q.device), -math.inf)
    return torch.softmax(scores, dim=-1)


def score_size(adapter: Adapter, layer: int, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The size of each head's attention scores ``[..., heads]``: the largest |q_i| · |k_j| × |scale|
    over its positions (q, k as :func:`pattern` takes them), which bounds every score's terms
    (Cauchy–Schwarz): the magnitude of a guard's bound on attention weights
    (:class:`headwatch.guards.Rounding`)."""
    q, k = queries_keys(adapter, layer, q, k)
    largest_k = k.norm(dim=-1).amax(dim=-1).repeat_interleave(adapter.group_size, dim=-1)
    return q.norm(dim=-1).amax(dim=-1) * largest_k * abs(adapter.attention_scale(layer))


def rules(adapter: Adapter, layer: int) -> dict:
    """The rules :func:`pattern` applies in ``layer``, for a record (numbers and words only)."""
    r = adapter.rope(layer)
    f = adapter.family
    layout = {"half": "rotate-half: pair i = dims (i, i + rotary_dims/2)",
              "interleaved": "interleaved: pair i = dims (2i, 2i + 1)", "": "none"}[r["layout"]]
    return dict(rotary_dims=r["dims"], rotary_base=r["base"], rope_type=r["type"], rope_factor=r["factor"],
                rotary_convention=f"{layout}, angle = position × base^(-2i/rotary_dims) / factor",
                scale=adapter.attention_scale(layer), softcap=adapter.softcap(layer) or 0.0,
                qk_norm=f.qk_norm or "none", window=adapter.window(layer) or 0)
