"""The weights' circuits (protocol §5h; rule lens_weights): what each head copies, what it matches, and
which earlier heads it reads from — from the weights alone, without a forward pass.

**The matrices.** Each head's query, key, value and output matrices (a key/value group's key and value
where heads share them), as TransformerLens processes them before it reads circuits: the weight of the
norm in front of attention folded into the reading matrices (its rows; Gemma's ``1 + w``), a QK-norm's
weight folded into the query's and key's columns, the weight of a norm between attention and the stream
(Gemma 2/3, OLMo 2) into the output's columns, the final norm's weight into the unembedding's rows; in a
family with LayerNorms, the reading matrices centred over the width and the writing ones (the output
matrices, the token embedding) centred across it, since a LayerNorm takes each vector's mean off; the
unembedding centred over the vocabulary (a softmax ignores a constant). What no matrix holds is left
out, as TransformerLens leaves it: each norm's scale, one number a token (it scales a head's input or
output, and every score here is a ratio that a scale cancels from — but the embeddings' per-token scales
do weight the rows of the full circuits), the biases, the attention's scale and soft-cap. Every matrix is
read into float64 on the host (the model may be on a GPU): the circuits are a few hundred head-size products.

**Rotary positions** turn a query at position i and a key at j by angles that depend on j − i: the QK
matrix is ``W_Q R(Δ) W_Kᵀ`` with Δ the query − key offset, a different matrix for each Δ. What is
computed is the matrix at one offset, ``lens.qk_offset`` (default 0: ``R(0) = I``, the position-free
product ``W_Q W_Kᵀ`` that TransformerLens reads, exact for a key at the query's own position); the
composition scores through a query or key use the same matrix.

* **OV copying score** (Elhage et al. 2021): the eigenvalues λ of the full OV circuit
  ``W_E W_V W_O W_U`` (vocabulary × vocabulary; its non-zero eigenvalues are those of the head-size
  matrix ``W_O W_U W_E W_V``): ``Σ λ / Σ |λ|`` (real part), 1 = every eigenvalue positive (the head
  copies the token it reads), −1 = every one negative;
* **QK same-token score**: the same of the full QK circuit ``W_E W_Q R(Δ) W_Kᵀ W_Eᵀ``: positive = a
  query prefers keys of its own token;
* **composition scores** between a head A and a head B of a later layer: ``‖W_OV^A W^B‖_F /
  (‖W_OV^A‖_F ‖W^B‖_F)`` with ``W^B`` = B's QK matrix (Q-composition), its transpose (K-composition) or
  B's OV matrix (V-composition). Per head, as TransformerLens's ``all_composition_scores`` (``head_score``);
  and, for the key and value of a model whose heads share them, per key/value group — the group's QK
  matrices (or OV matrices) side by side, what a key or value path patches (``score``; a query's is
  its head's). Computed from the factored forms: ``‖A B‖_F`` with ``A = W_V W_O`` and ``B = W_Q R W_Kᵀ``
  is ``‖G_V^½ (W_O W_Q) (R G_K Rᵀ)^½‖_F`` (``G`` the head-size Gram matrices), a head-size product per
  pair, in float64.
* **The nulls**: every score beside the same score of random matrices of the same shapes (independent
  normal entries; ``lens.null_draws`` draws, ``lens.seed``): its mean and spread, and each score's
  distance from the mean in spreads (``z``). The copying and same-token scores' nulls draw the head's
  matrices and keep the model's embeddings. The draws are scored a chunk at a time (:func:`chunk_of`:
  at most :data:`NULL_CHUNK_BYTES` of random matrices at once, whatever ``null_draws`` is), each matrix
  the rows of the one its generator would draw whole (:func:`null_draws`): the same numbers as drawing
  every matrix at once.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..jobs import phases, progress
from ..model.arch import head_label
from ..model.recompute import apply_rotary
from ..settings.lens import LensSettings, stream_seed

log = logging.getLogger("headwatch.lens.composition")

INPUTS = ("q", "k", "v")
"""A receiver head's inputs, as path patching names them."""

COMPOSITION_NOTE = dict(
    head_score="Elhage et al.'s composition score of the sender head's OV matrix with the receiver head's QK matrix "
               "(input q), its transpose (k) or its OV matrix (v): ||OV_A W_B||_F / (||OV_A||_F ||W_B||_F); "
               "TransformerLens's all_composition_scores",
    score="what the input's path patches: the head's for q; for k and v the receiver's key/value group's, its "
          "heads' QK (or OV) matrices side by side (the head's own where heads share no key or value)",
    null="the same score of random matrices of the same shapes (independent normal entries), null_draws draws: "
         "null_mean, null_sd; z = (score - null_mean) / null_sd",
    matrices="each head's matrices with the norms' weights folded in, centred where the family's norms are "
             "LayerNorms, the unembedding centred over the vocabulary (TransformerLens's processing); each norm's "
             "per-token scale, the biases, the attention's scale and soft-cap are in no matrix",
)
HEADS_NOTE = dict(
    ov_copying="sum of the eigenvalues / sum of their sizes of the full OV circuit W_E W_V W_O W_U (real part): 1 = "
               "the head copies the token it reads (Elhage et al. 2021)",
    qk_same_token="the same of the full QK circuit W_E W_Q R(offset) W_K^T W_E^T: positive = a query prefers keys "
                  "of its own token",
    z="the score's distance from its null's mean (random matrices of the head's shapes, the model's embeddings "
      "kept), in null spreads",
)


# ------------------------------------------------------------------ the matrices
@dataclass
class LayerWeights:
    """One layer's matrices, each as a head reads or writes (float64): ``Q`` ``[heads, width, head_dim]``,
    ``K`` and ``V`` ``[groups, width, head_dim]``, ``O`` ``[heads, head_dim, width]``, ``R`` the query's turn
    relative to the key ``[head_dim, head_dim]`` (the identity without rotary positions or at offset 0)."""
    Q: torch.Tensor
    K: torch.Tensor
    V: torch.Tensor
    O: torch.Tensor
    R: torch.Tensor

    @property
    def group_size(self) -> int:
        return self.Q.shape[0] // self.K.shape[0]


def _columns(adapter, module, slices) -> torch.Tensor:
    """``[len(slices), width, head_dim]``: the projection's weight entries that produce each slice, as
    a head reads (width in, head_dim out)."""
    out = []
    for sl in slices:
        w = adapter.projection_rows(module, sl)[0].detach().cpu().double()
        out.append(w if adapter.family.conv1d else w.T)
    return torch.stack(out)


def _norm_weight(p: dict) -> torch.Tensor:
    return p["weight"].detach().cpu().double() + (p["offset"] if p["kind"] == "RMSNorm" else 0.0)


def rotation(adapter, layer: int, offset: int) -> torch.Tensor:
    """``[head_dim, head_dim]``: the query at ``offset`` positions after its key, turned relative to the
    key by the layer's rotary embedding (row vectors: ``q R``); the identity without one."""
    d = adapter.head_dim
    eye = torch.eye(d, dtype=torch.float64)
    r = adapter.rope(layer)
    if not r["dims"] or offset == 0:
        return eye
    turned = apply_rotary(eye[:, None, :].expand(d, offset + 1, d), r["dims"], r["base"], r["layout"], r["factor"])
    return turned[:, offset, :]


def layer_weights(adapter, layer: int, offset: int = 0) -> LayerWeights:
    """One layer's processed matrices (the module doc's rules)."""
    a, f = adapter, adapter.family
    H, G = a.n_heads, a.n_kv_heads
    Q = _columns(a, a.query_proj(layer), [a.query_slice(h) for h in range(H)])
    K = _columns(a, a.key_proj(layer), [a.key_slice(g) for g in range(G)])
    V = _columns(a, a.value_proj(layer), [a.value_slice(g) for g in range(G)])
    p = a.input_norm_params(layer)
    if p["kind"]:
        w = _norm_weight(p)[:, None]
        Q, K, V = Q * w, K * w, V * w
        if p["kind"] == "LayerNorm":                 # centre the reading weights
            Q, K, V = (x - x.mean(1, keepdim=True) for x in (Q, K, V))
    qk = a.qk_norm_params(layer)
    if qk is not None:                               # the query and key norms' weights on their columns
        wq, wk = _norm_weight(qk[0]), _norm_weight(qk[1])
        if f.qk_norm == "head":
            Q, K = Q * wq, K * wk
        else:                                        # over the whole projection: each head's slice of it
            Q = Q * wq.reshape(H, 1, a.head_dim)
            K = K * wk.reshape(G, 1, a.head_dim)
    from .direct import out_weights

    O = out_weights(a, layer).cpu().double()
    post = a.attn_out_norm(layer)
    if post is not None:
        O = O * _norm_weight(a.norm_params(post, "norm after attention"))
    if f.norm == "LayerNorm":                        # centre the writing weights
        O = O - O.mean(-1, keepdim=True)
    return LayerWeights(Q, K, V, O, rotation(a, layer, offset))


def embeddings(adapter) -> tuple[torch.Tensor, torch.Tensor]:
    """(``W_E`` ``[vocab, width]``: the token embedding, centred across the width in a family with LayerNorms;
    ``W_U`` ``[width, vocab]``: the unembedding with the final norm's weight folded into its rows, centred
    over the vocabulary), float64."""
    emb_in, emb_out = adapter.embeddings()
    E = emb_in.weight.detach().cpu().double()
    if adapter.family.norm == "LayerNorm":
        E = E - E.mean(-1, keepdim=True)
    U = emb_out.weight.detach().cpu().double().T * _norm_weight(adapter.norm_params(adapter.final_norm(), "final norm"))[:, None]
    return E, U - U.mean(-1, keepdim=True)


# ------------------------------------------------------------------ the factored forms
def _gram(x: torch.Tensor) -> torch.Tensor:
    """``xᵀ x`` over the width: ``[..., width, d] → [..., d, d]``."""
    return x.transpose(-1, -2) @ x


def _factor(g: torch.Tensor) -> torch.Tensor:
    """``F`` with ``F Fᵀ = g`` for positive semi-definite matrices ``g`` ``[..., n, n]``: the Cholesky factor,
    or the symmetric square root where a matrix is singular (a head whose matrix has lost rank)."""
    f, info = torch.linalg.cholesky_ex(g)
    bad = info != 0
    if bool(bad.any()):
        vals, vecs = torch.linalg.eigh((g[bad] + g[bad].transpose(-1, -2)) / 2)
        f = f.clone()
        f[bad] = (vecs * vals.clamp(min=0).sqrt().unsqueeze(-2)) @ vecs.transpose(-1, -2)
    return f


@dataclass
class Factors:
    """One layer's factored forms (module doc). As a sender: ``P`` ``[heads, head_dim, width]`` = ``Fᵀ W_O``
    with ``F Fᵀ = G_V`` of the head's group, and ``ov`` ``[heads]`` = ‖W_V W_O‖_F. As a receiver: ``Sq``
    ``[heads, width, head_dim]`` = ``W_Q F`` with ``F Fᵀ = R G_K Rᵀ`` (what the sender's output meets in the
    query, times the far side's factor); for the key and the value the near matrices ``X["k"]`` = ``W_K``,
    ``X["v"]`` = ``W_V`` ``[groups, width, head_dim]`` and the far sides' factors, per head ``F["k"]``
    (``Rᵀ G_Q R``), ``F["v"]`` (``G_O``) ``[heads, head_dim, head_dim]`` and per group ``F["k_group"]``,
    ``F["v_group"]`` (the group's heads' summed) ``[groups, head_dim, head_dim]``; ``norm``: each receiving
    matrix's Frobenius norm (``q``, ``k``, ``v`` per head, ``k_group``, ``v_group`` per group)."""
    P: torch.Tensor
    ov: torch.Tensor
    Sq: torch.Tensor
    X: dict
    F: dict
    norm: dict


def factors(w: LayerWeights) -> Factors:
    """:class:`Factors` of one layer's matrices."""
    n = w.group_size
    GV, GO = _gram(w.V), w.O @ w.O.transpose(-1, -2)             # [G, d, d], [H, d, d]
    GVh, Kh = GV.repeat_interleave(n, 0), w.K.repeat_interleave(n, 0)
    ov = (GVh * GO).sum((-1, -2)).clamp(min=0).sqrt()            # ‖W_V W_O‖² = tr(G_V G_O)
    P = _factor(GVh).transpose(-1, -2) @ w.O
    GQ = _gram(w.Q @ w.R)                                        # Rᵀ G_Q R: the query side of W_K Rᵀ W_Qᵀ
    GKr = w.R @ _gram(Kh) @ w.R.T                                # R G_K Rᵀ: the key side of W_Q R W_Kᵀ
    qk = (_gram(w.Q) * GKr).sum((-1, -2)).clamp(min=0)           # ‖W_Q R W_Kᵀ‖²
    group = lambda x: x.reshape(-1, n, *x.shape[1:]).sum(1)      # each group's heads summed
    F = dict(k=_factor(GQ), v=_factor(GO), k_group=_factor(group(GQ)), v_group=_factor(group(GO)))
    norm = dict(q=qk.sqrt(), k=qk.sqrt(), v=ov, k_group=group(qk).sqrt(), v_group=group(ov ** 2).sqrt())
    return Factors(P, ov, w.Q @ _factor(GKr), dict(k=w.K, v=w.V), F, norm)


class Receivers:
    """Every layer's receiving factors (:class:`Factors`) stacked once, each as the product with a sender's
    ``P`` reads it (the width first), so that a sender layer's scores with every later layer are one
    product per input over a slice of them."""

    def __init__(self, made: list[Factors], group_size: int):
        self.n, self.heads, self.groups = group_size, made[0].Sq.shape[0], made[0].X["k"].shape[0]
        W, d = made[0].Sq.shape[1:]
        flat = lambda x: x.permute(1, 0, 2).reshape(W, -1).contiguous()        # [units, W, d] → [W, units·d]
        self.Sq = flat(torch.cat([m.Sq for m in made]))
        self.X = {i: flat(torch.cat([m.X[i] for m in made])) for i in ("k", "v")}
        self.F = {i: torch.cat([m.F[i] for m in made]) for i in made[0].F}
        self.norm = {i: torch.cat([m.norm[i] for m in made]) for i in made[0].norm}

    def from_layer(self, layer: int) -> tuple[int, int]:
        """The first receiving head and group of ``layer``."""
        return layer * self.heads, layer * self.groups


def _norms(y: torch.Tensor, dims) -> torch.Tensor:
    return y.square().sum(dims).sqrt()


def pair_scores(sender: Factors, rec: Receivers, layer: int) -> dict:
    """A sender layer's composition scores with every receiving head of layers ``layer`` on:
    ``{input: [heads, receiver heads]}`` per head (``q``, ``k``, ``v``) and per key/value group
    (``k_group``, ``v_group``: ``[heads, receiver groups]``). One product over the width per input (a key
    or value group's shared by its heads), head-size products for the rest."""
    H, d, W = sender.P.shape
    P = sender.P.reshape(H * d, W)
    h0, g0 = rec.from_layer(layer)
    out = dict(q=_norms((P @ rec.Sq[:, h0 * d:]).reshape(H, d, -1, d), (1, 3)) / rec.norm["q"][None, h0:])
    for i in ("k", "v"):
        Y = (P @ rec.X[i][:, g0 * d:]).reshape(H, d, -1, d).permute(2, 0, 1, 3)       # [groups, H, d, d]
        heads = Y.unsqueeze(1) @ rec.F[i][h0:].reshape(-1, rec.n, 1, d, d)          # [groups, n, H, d, d]
        out[i] = _norms(heads, (-2, -1)).permute(2, 0, 1).reshape(H, -1) / rec.norm[i][None, h0:]
        out[f"{i}_group"] = _norms(Y @ rec.F[f"{i}_group"][g0:, None], (-2, -1)).T / rec.norm[f"{i}_group"][None, g0:]
    return {k: v / sender.ov[:, None] for k, v in out.items()}


# ------------------------------------------------------------------ the nulls
NULL_CHUNK_BYTES = 1 << 26
"""At most this many bytes of random matrices (float64) are drawn at once for a null (64 MiB; with their
factored forms and products a chunk of SmolLM2's shapes peaks at about 0.5 GB): the nulls are scored a chunk of draws at a
time (:func:`chunk_of`), so that their memory does not grow with ``null_draws`` (all at once, 100,000 draws
of SmolLM2's shapes held about 350 GB)."""
FILL_BLOCK = 16
"""torch fills a float64 tensor with normal numbers from its generator's uniforms in order, in blocks of 16
(Box–Muller within each; the last 16 drawn again where the size is no multiple of 16): a tensor drawn in
pieces that start on a block of the whole is the whole, number for number (tests/test_lens.py holds it)."""


def chunk_of(per_draw: list[int], draws: int, budget: int = NULL_CHUNK_BYTES) -> int:
    """How many draws of a null are scored at once: as many as ``budget`` bytes of their random matrices
    (``per_draw``: each matrix's numbers a draw, float64) hold, a multiple of what keeps every piece on a
    block of :data:`FILL_BLOCK` numbers of the matrix drawn whole (at least that many), at most ``draws``."""
    step = 1
    for n in per_draw:
        step = math.lcm(step, FILL_BLOCK // math.gcd(FILL_BLOCK, int(n)))
    fits = budget // (8 * sum(per_draw)) // step * step
    return int(min(draws, max(step, fits)))


def null_draws(seed: int, shapes: list[tuple], draws: int, chunk: int):
    """The random matrices of a null, a chunk of draws at a time: for each slice of ``chunk`` draws, a list
    with, for each of ``shapes``, its ``[draws in the chunk, *shape]`` — the rows of the ``[draws, *shape]``
    tensors a generator seeded with ``seed`` draws whole, one after the other (independent standard normal
    entries, float64). Each matrix has a generator of its own, set where the whole draw would start it (the
    generator is first run through every matrix once, a chunk at a time, discarding them)."""
    g = torch.Generator().manual_seed(int(seed))
    draw = lambda k, shape, gen: torch.randn(k, *shape, generator=gen, dtype=torch.float64)
    starts = []
    for shape in shapes:
        starts.append(torch.Generator().set_state(g.get_state()))
        for i in range(0, draws, chunk):
            draw(min(chunk, draws - i), shape, g)
    for i in range(0, draws, chunk):
        yield [draw(min(chunk, draws - i), shape, gen) for shape, gen in zip(shapes, starts)]


def _size(shape: tuple) -> int:
    return int(np.prod(shape))


def composition_null(shape: dict, group_size: int, draws: int, seed: int, budget: int = NULL_CHUNK_BYTES) -> pd.DataFrame:
    """The composition scores of random matrices of ``shape``'s width and head size, a receiver group of
    ``group_size`` heads: one row per input and kind (``head``: a receiving head's score; ``path``: what a
    path patches, the group's for k and v), with the mean, spread and 5 % / 95 % quantiles of ``draws``
    draws — draw k a random sender head and a random receiving group of its own, scored as the model's
    pairs are (:func:`factors`, :func:`pair_scores`' formulas). The sender's query, key, value and output
    matrices, then the receiving group's (its heads' queries and outputs, its key and value) are drawn in
    that order from ``seed``, scored ``budget`` bytes of them at a time (:func:`null_draws`)."""
    W, d, n = shape["width"], shape["head_dim"], group_size
    shapes = [(W, d), (W, d), (W, d), (d, W), (n, W, d), (W, d), (W, d), (n, d, W)]
    got = {}
    eye = torch.eye(d, dtype=torch.float64)
    for m in null_draws(seed, shapes, draws, chunk_of([_size(x) for x in shapes], draws, budget)):
        k = len(m[0])
        s = factors(LayerWeights(*m[:4], eye))
        r = factors(LayerWeights(m[4].reshape(k * n, W, d), m[5], m[6], m[7].reshape(k * n, d, W), eye))
        for key, value in _composition_draws(s, r, n).items():
            got.setdefault(key, []).append(value)
    return pd.DataFrame([dict(score=f"composition {i}", kind=kind, group_size=n, draws=draws, seed=seed,
                              **_summary(np.concatenate(got[(i, kind)])))
                         for i in INPUTS for kind in ("head", "path")])


def _composition_draws(s: Factors, r: Factors, n: int) -> dict:
    """Each draw's composition scores of a sender's factors ``s`` and a receiving group's ``r``: ``{(input,
    kind): [draws]}``."""
    first = slice(0, None, n)                                    # each group's first head
    got = {("q", "head"): _norms(s.P @ r.Sq[first], (-2, -1)) / r.norm["q"][first]}
    for i in ("k", "v"):
        Y = s.P @ r.X[i]                                         # [draws, d, d]
        got[(i, "head")] = _norms(Y @ r.F[i][first], (-2, -1)) / r.norm[i][first]
        got[(i, "path")] = _norms(Y @ r.F[f"{i}_group"], (-2, -1)) / r.norm[f"{i}_group"]
    got[("q", "path")] = got[("q", "head")]
    return {k: (v / s.ov).numpy() for k, v in got.items()}


def _summary(x: np.ndarray) -> dict:
    return dict(mean=float(x.mean()), sd=float(x.std(ddof=1)) if len(x) > 1 else 0.0,
                q05=float(np.quantile(x, 0.05)), q95=float(np.quantile(x, 0.95)))


# ------------------------------------------------------------------ the rule
def weight_circuits(adapter, settings: LensSettings):
    """Rule lens_weights: (each head's OV copying and QK same-token scores with their nulls, every
    pair's composition scores with their nulls, the nulls' table, the note). Each step is a named phase
    of the call's progress."""
    with torch.no_grad(), phases("weight_circuits", 4) as step:
        return _weight_circuits(adapter, settings, step)


def _weight_circuits(adapter, settings: LensSettings, step):
    settings.need("qk_offset", "null_draws", "seed")
    a, L, H = adapter, adapter.n_layers, adapter.n_heads
    t0 = time.perf_counter()
    step("read every layer's matrices")
    layers = [layer_weights(a, l, settings.qk_offset) for l in range(L)]
    made = [factors(w) for w in layers]
    step("every head's OV copying and QK same-token scores")
    heads, null_heads = head_scores(a, layers, settings)
    step(f"composition scores of every pair of heads in {L} layers")
    table = composition_table(a, made)
    step(f"the nulls: {settings.null_draws} draws of random matrices of each shape")
    null = composition_null(dict(width=a.width, head_dim=a.head_dim), a.group_size, settings.null_draws,
                            stream_seed(settings.seed, 0))
    paths = null[null["kind"] == "path"].set_index("score")
    table["null_mean"] = [float(paths.loc[f"composition {i}", "mean"]) for i in table["input"]]
    table["null_sd"] = [float(paths.loc[f"composition {i}", "sd"]) for i in table["input"]]
    table["z"] = (table["score"] - table["null_mean"]) / table["null_sd"]
    seconds = time.perf_counter() - t0
    note = dict(COMPOSITION_NOTE, **HEADS_NOTE, qk_offset=settings.qk_offset,
                rotary=("rotary positions: every QK matrix at query - key offset "
                        f"{settings.qk_offset} (the position-free product W_Q W_K^T at 0)") if a.rotary_dims else
                "no rotary positions: the QK matrix is the same at every offset",
                group_size=a.group_size, null_draws=settings.null_draws, seed=settings.seed, pairs=len(table),
                seconds=round(seconds, 3))
    log.info("weights' circuits of %d heads, %d composition scores in %.1f s", L * H, len(table), seconds)
    return heads, table, pd.concat([null_heads, null], ignore_index=True), note


def composition_table(adapter, made: list[Factors]) -> pd.DataFrame:
    """Every (sender head, later receiver head, input) with its per-head score and what its path patches
    (:func:`pair_scores`)."""
    L, H, n = adapter.n_layers, adapter.n_heads, adapter.group_size
    rec = Receivers(made, n)
    cols = {k: [] for k in ("sender_layer", "sender_head", "receiver_layer", "receiver_head", "input", "head_score",
                            "score")}
    for la in progress(range(L - 1), desc="composition scores", unit="layer"):
        got = pair_scores(made[la], rec, la + 1)
        later = (L - la - 1) * H
        for i in INPUTS:
            path = got[i] if i == "q" else got[f"{i}_group"].repeat_interleave(n, 1)    # each head: its group's
            cols["sender_layer"].append(np.full(H * later, la))
            cols["sender_head"].append(np.repeat(np.arange(H), later))
            cols["receiver_layer"].append(np.tile(np.repeat(np.arange(la + 1, L), H), H))
            cols["receiver_head"].append(np.tile(np.arange(H), H * (L - la - 1)))
            cols["input"].append(np.full(H * later, i))
            cols["head_score"].append(got[i].reshape(-1).numpy())
            cols["score"].append(path.reshape(-1).numpy())
    t = pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})
    t["group"] = pd.array(np.where(t["input"] == "q", -1, t["receiver_head"] // n), dtype="Int64")
    t.loc[t["input"] == "q", "group"] = pd.NA
    t.insert(0, "sender", [f"L{l}H{h}" for l, h in zip(t["sender_layer"].tolist(), t["sender_head"].tolist())])
    t.insert(3, "receiver", [f"L{l}H{h}" for l, h in zip(t["receiver_layer"].tolist(), t["receiver_head"].tolist())])
    return t[["sender", "sender_layer", "sender_head", "receiver", "receiver_layer", "receiver_head", "input", "group",
              "head_score", "score"]]


def head_scores(adapter, layers: list[LayerWeights], settings: LensSettings,
                budget: int = NULL_CHUNK_BYTES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(each head's OV copying and QK same-token scores beside their nulls' mean and spread, the nulls'
    rows): the eigenvalues of head-size matrices, the embeddings' products computed once; the nulls' random
    matrices drawn from stream 1 of ``lens.seed`` (:func:`~headwatch.settings.lens.stream_seed`) ``budget``
    bytes at a time (:func:`null_draws`)."""
    E, U = embeddings(adapter)
    P = U @ E                                    # W_U W_E [width, width]
    GE = E.T @ E                                 # W_Eᵀ W_E
    n = layers[0].group_size
    O = torch.cat([w.O for w in layers])                                 # [L·H, d, W]
    V = torch.cat([w.V.repeat_interleave(n, 0) for w in layers])         # each head's group's
    K = torch.cat([w.K.repeat_interleave(n, 0) for w in layers])
    QR = torch.cat([w.Q @ w.R for w in layers])
    ov = (O @ P) @ V                                                     # [L·H, d, d]
    qk = (K.transpose(-1, -2) @ GE) @ QR
    table = pd.DataFrame(dict(layer=[l for l, _ in adapter.heads()], head=[h for _, h in adapter.heads()],
                              label=[head_label(l, h) for l, h in adapter.heads()],
                              kv_group=[h // n for _, h in adapter.heads()],
                              ov_copying=_shares(ov), qk_same_token=_shares(qk)))
    W, d, D, seed = adapter.width, adapter.head_dim, settings.null_draws, stream_seed(settings.seed, 1)
    shapes = [(d, W), (W, d), (W, d), (W, d)]             # a head's output and value, then its key and query
    null_ov, null_qk = [], []
    for o, v, k, q in null_draws(seed, shapes, D, chunk_of([_size(x) for x in shapes], D, budget)):
        null_ov.append(_shares((o @ P) @ v))
        null_qk.append(_shares((k.transpose(-1, -2) @ GE) @ q))
    null = pd.DataFrame([dict(score=name, kind="head", group_size=1, draws=D, seed=seed, **_summary(np.concatenate(x)))
                         for name, x in (("ov_copying", null_ov), ("qk_same_token", null_qk))])
    for name in ("ov_copying", "qk_same_token"):
        mean, sd = null.set_index("score").loc[name, ["mean", "sd"]]
        table[f"{name}_z"] = (table[name] - mean) / sd if sd > 0 else 0.0
    return table, null


def _shares(m: torch.Tensor) -> np.ndarray:
    """Σ λ / Σ |λ| of the eigenvalues λ of each square matrix of ``m`` ``[..., n, n]`` (the real part; 0
    for a zero matrix)."""
    lam = torch.linalg.eigvals(m)
    size = lam.abs().sum(-1)
    return torch.where(size > 0, lam.sum(-1).real / size.clamp(min=1e-300), 0.0).numpy()
