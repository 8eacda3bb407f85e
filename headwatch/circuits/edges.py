"""Edges run: every receiver of the edge graph fed its own input (protocol §5g).

A receiver reads the residual stream, the sum of every earlier sender's output
(:mod:`headwatch.circuits.graph`). :class:`EdgeRun` edits a forward pass — through the one
intervention layer, :func:`~headwatch.model.interventions.call` at the sites each receiver reads —
so that each receiver reads its own copy of the stream:

    input_r = x_r − Σ_s w[row, s, r] · (out_s − base_s)  (+ p_r)

with ``x_r`` the stream the model computed at the receiver, ``out_s`` each sender's output in
this run and ``base_s`` its output in a reference run (the corrupted prompts). ``w`` is 1 for
an edge patched and 0 for one kept, one matrix per batch row: many circuits in one batch. The
query / key / value receivers of a layer are then computed unit by unit from their own input
(the layer's input norm and the projection's rows of that unit), the feed-forward network from
its norm of its input, the logits from the final norm of theirs. With ``probe`` each receiver's
input also gets a zero tensor ``p_r`` in the autograd graph: the gradient of a metric with
respect to it is the gradient at that receiver's input, the factor of edge attribution.

* :func:`sender_outputs`: every sender's output of a plain forward pass ``[S, rows, T, width]``;
* :func:`edge_attribution`: EAP and EAP-IG scores of every edge;
* :func:`patched_metric`: the metric with every edge outside each circuit patched — exact
  patching, batched over circuits × prompts.

A patched edge carries the sender's output of the corrupted run into that one receiver; the
sender itself, and every other receiver, keep what this run gives them.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..model.interventions import call, intervene, replace
from ..patching.batch import PromptBatch
from ..settings.edges import METHODS
from .graph import EdgeGraph
from ..jobs import progress as progress_bar

log = logging.getLogger("headwatch.circuits.edges")



def _linear_rows(adapter, module: nn.Module, slices: list[slice]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights ``[units, width, d]`` and biases ``[units, d]`` (or None) that produce each of
    ``slices`` of a projection's output."""
    ws, bs = [], []
    for sl in slices:
        rows = adapter.projection_rows(module, sl)
        w = rows[0] if adapter.family.conv1d else rows[0].t()
        ws.append(w)
        bs.append(rows[1] if len(rows) > 1 else None)
    bias = None if bs[0] is None else torch.stack(bs)
    return torch.stack(ws), bias


def _norm(adapter, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module``'s norm of ``x`` without its hooks; in float64 by the family's formula where the
    module itself would round through float32 (transformers' RMSNorms: as
    :func:`headwatch.model.interventions.in_float64` runs them)."""
    if x.dtype == torch.float64 and adapter.family.norm == "RMSNorm":
        from ..model.recompute import norm as formula

        return formula(x, adapter.norm_params(module))
    return module.forward(x)


class EdgeRun:
    """The edits of one forward pass over ``rows`` (module doc), as a context manager: every one a
    :func:`~headwatch.model.interventions.call` at a site, applied by
    :func:`~headwatch.model.interventions.intervene` (which registers and removes the hooks).

    ``record``: keep every sender's output (:attr:`outputs`, ``[S, rows, T, width]``).
    ``weights`` (``[rows, S, R]``, 1 = patched) with ``base`` (``[S, prompts, T, width]``, the
    reference run's outputs; row ``i`` reads prompt ``i % prompts``): patch. ``probe``: give every
    receiver a zero input term in the autograd graph (:attr:`probes`, ``[R, rows, T, width]``).
    ``edits``: further edits applied in the same pass, before these (a replaced embedding)."""

    def __init__(self, adapter, graph: EdgeGraph, *, record: bool = False, weights: torch.Tensor | None = None,
                 base: torch.Tensor | None = None, probe: bool = False, edits: list | None = None):
        if (weights is None) != (base is None):
            raise ValueError("patching needs both the weights and the base run's outputs")
        self.a, self.g = adapter, graph
        self.record, self.weights, self.base, self.probe = record, weights, base, probe
        self.rewire = weights is not None or probe
        self.before = list(edits or [])
        S, R = len(graph.senders), len(graph.receivers)
        self.S, self.R = S, R
        snd, rcv = graph.senders, graph.receivers
        self.s_head = {l: int(np.flatnonzero((snd.kind == "head") & (snd.layer == l))[0]) for l in range(graph.layers)}
        self.s_mlp = {l: int(np.flatnonzero((snd.kind == "mlp") & (snd.layer == l))[0]) for l in range(graph.layers)}
        self.r_qkv = {l: np.flatnonzero(rcv.kind.isin(["q", "k", "v"]).to_numpy() & (rcv.layer == l).to_numpy())
                      for l in range(graph.layers)}
        self.r_mlp = {l: int(np.flatnonzero((rcv.kind == "mlp") & (rcv.layer == l))[0]) for l in range(graph.layers)}
        self.prefix = graph.prefix
        self.outputs = self.delta = self.probes = None
        self.mid: dict = {}
        self.normed: dict = {}
        self._units: dict = {}
        self._scope = None

    def _groups(self) -> list[np.ndarray]:
        """The receivers fed at once, in receiver order: each layer's queries, keys and values, its
        feed-forward network; the logits."""
        groups = []
        for l in range(self.g.layers):
            groups += [self.r_qkv[l], np.array([self.r_mlp[l]])]
        groups.append(np.array([self.R - 1]))
        self._group_of = {int(r[0]): i for i, r in enumerate(groups)}
        return groups

    # ---- per layer and site, the q/k/v receivers: ([(index among the layer's q/k/v receivers, slice)], w, b)
    def _site_units(self, layer: int, site: str):
        key = (layer, site)
        if key not in self._units:
            a, rcv = self.a, self.g.receivers
            units = [(i, a.site_slice(site, int(rcv.unit.iat[r]))) for i, r in enumerate(self.r_qkv[layer])
                     if rcv.kind.iat[r] == site]
            w, b = _linear_rows(a, a.site_module(site, layer), [sl for _, sl in units]) if units else (None, None)
            self._units[key] = (units, w, b)
        return self._units[key]

    # ---- the bookkeeping of senders
    def _allocate(self, x: torch.Tensor) -> None:
        n, T, d = x.shape
        if self.record:
            self.outputs = x.new_zeros(self.S, n, T, d)
        if self.weights is not None:
            self.delta = x.new_zeros(n, self.S, T * d)
            self.w = self.weights.to(x.device, x.dtype)
        if self.probe:       # one leaf per group of receivers fed at once: a slice of one leaf would
            # make each slice's gradient a zero-filled tensor of the whole (every receiver) first
            self.probes = [x.new_zeros(len(r), n, T, d, requires_grad=True) for r in self._groups()]

    def _sent(self, s0: int, out: torch.Tensor) -> None:
        """Senders ``s0 …`` output ``out`` ``[units, rows, T, width]`` in this run."""
        if self.record:
            self.outputs[s0:s0 + len(out)] = out.detach()
        if self.weights is not None:
            base = self.base[s0:s0 + len(out)]                                   # [u, prompts, T, d]
            u, n, T, d = out.shape
            diff = out.detach().view(u, n // base.shape[1], base.shape[1], T, d) - base[:, None]
            self.delta[:, s0:s0 + u] = diff.reshape(u, n, T * d).transpose(0, 1)

    def _inputs(self, x: torch.Tensor, receivers: np.ndarray) -> torch.Tensor:
        """Each of ``receivers`` (contiguous indices, all reading the same prefix of senders) fed
        from the stream ``x`` ``[rows, T, width]``: ``[units, rows, T, width]``."""
        r0, r1 = int(receivers[0]), int(receivers[-1]) + 1
        out = x.unsqueeze(0).expand(r1 - r0, *x.shape)
        if self.weights is not None:
            k = int(self.prefix[r0])
            n, T, d = x.shape
            patch = torch.bmm(self.w[:, :k, r0:r1].transpose(1, 2), self.delta[:, :k])   # [rows, units, T·d]
            out = out - patch.transpose(0, 1).reshape(r1 - r0, n, T, d)
        if self.probe:
            out = out + self.probes[self._group_of[r0]]
        return out

    # ---- what each site does
    def _block_in(self, layer: int):
        """The block's input: the embeddings' output (layer 0); each query / key / value receiver's
        own input, normed as the block's input norm does."""
        norm = self.a.input_norm(layer)

        def fn(x):
            if layer == 0:
                self._allocate(x)
                self._sent(0, x.unsqueeze(0))
            if self.rewire:
                self.normed[layer] = _norm(self.a, norm, self._inputs(x, self.r_qkv[layer]))
        return fn

    def _projection(self, layer: int, site: str):
        """The q, k or v projection's output with each receiver's slice computed from its own input."""
        units, w, b = self._site_units(layer, site)

        def fn(output):
            xs = self.normed[layer][[i for i, _ in units]]                      # [u, rows, T, width]
            y = torch.matmul(xs.flatten(1, 2), w.to(xs.dtype))                   # [u, rows·T, d]
            if b is not None:
                y = y + b.to(xs.dtype)[:, None]
            out = output.clone()
            n, T = output.shape[:2]
            for j, (_, sl) in enumerate(units):
                out[..., sl] = y[j].view(n, T, -1)
            return out
        return fn

    def _heads_out(self, layer: int):
        """Each head's output: its share of the output projection, from ``z``."""
        a = self.a
        H, hd = a.n_heads, a.head_dim
        weight = a.out_proj(layer).weight
        wo = (weight.view(H, hd, -1) if a.family.conv1d else weight.t().reshape(H, hd, -1))   # [H, hd, width]

        def fn(z):
            self.normed.pop(layer, None)
            n, T, _ = z.shape
            self._sent(self.s_head[layer], torch.einsum("nthe,hed->hntd", z.view(n, T, H, hd), wo.to(z.dtype)))
        return fn

    def _mid(self, layer: int):
        def fn(x):
            self.mid[layer] = x
        return fn

    def _mlp_in(self, layer: int):
        """The feed-forward network's input: its receiver's own stream, normed as its norm does."""
        norm = self.a.mlp_norm(layer)

        def fn(_):
            x = self.mid.pop(layer)
            return _norm(self.a, norm, self._inputs(x, np.array([self.r_mlp[layer]]))[0])
        return fn

    def _mlp_out(self, layer: int):
        def fn(out):
            self._sent(self.s_mlp[layer], out.unsqueeze(0))
        return fn

    def _final(self, x):
        """The last block's output as the final norm reads it: the logits receiver's own stream."""
        return self._inputs(x, np.array([self.R - 1]))[0]

    def edits(self) -> list:
        """The pass's edits, in the order of the forward pass."""
        out = list(self.before)
        for l in range(self.a.n_layers):
            out.append(call("resid_in", l, self._block_in(l)))
            if self.rewire:
                out += [call(site, l, self._projection(l, site)) for site in ("q", "k", "v")
                        if self._site_units(l, site)[0]]
            out.append(call("z", l, self._heads_out(l)))
            if self.rewire:
                out += [call("resid_mid", l, self._mid(l)), call("mlp_in", l, self._mlp_in(l))]
            out.append(call("mlp_out", l, self._mlp_out(l)))
        if self.rewire:
            out.append(call("resid", self.a.n_layers - 1, self._final))
        return out

    def __enter__(self) -> "EdgeRun":
        self._scope = intervene(self.a, self.edits())
        self._scope.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._scope.__exit__(*exc)
        finally:
            self.mid.clear()
            self.normed.clear()


# ------------------------------------------------------------------ the forward passes
def last_logits(adapter, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The logits of the last position ``[rows, vocab]`` (``ids`` and ``mask`` anywhere: the adapter
    puts them on the model's device)."""
    return adapter.logits(ids, keep=1, mask=mask)[:, -1]


@torch.no_grad()
def sender_outputs(adapter, graph: EdgeGraph, ids: torch.Tensor, mask=None,
                   embeddings: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(every sender's output ``[S, rows, T, width]``, the last position's logits) of a plain
    forward pass (``embeddings``: the first block's input given instead of the model's own)."""
    edits = [] if embeddings is None else [replace("resid_in", 0, embeddings)]
    with EdgeRun(adapter, graph, record=True, edits=edits) as run:
        logits = last_logits(adapter, ids, mask)
    return run.outputs, logits


def edge_attribution(adapter, graph: EdgeGraph, prompts: PromptBatch, method: str = "eap", steps: int = 5,
                     batch: int = 16, progress: Callable[[str], None] | None = None) -> dict:
    """Every edge's attribution score (``[edges]`` float64, in the graph's edge order): the clean −
    corrupted difference of the sender's output times the gradient of the mean metric (logit
    difference answer − distractor at the last position) at the receiver's input, summed over positions
    — the first-order estimate of how much the metric falls when that one edge is patched to the
    corrupted run. ``eap``: the gradient at the clean run; ``eap-ig``: its mean over ``steps``
    runs whose embeddings go from the corrupted prompts' to the clean ones' (``k / steps``, ``k =
    0 … steps − 1``: MIB's EAP-IG-inputs). Also each sender's node score (the sum of its edges':
    attribution patching of the node) and the seconds of each pass. ``batch`` prompts a pass."""
    if method not in METHODS:
        raise ValueError(f"unknown edge attribution method {method!r}; known: {list(METHODS)}")
    if method == "eap-ig" and steps < 1:
        raise ValueError(f"eap-ig needs at least 1 interpolation step; got {steps}")
    S, R, N = len(graph.senders), len(graph.receivers), len(prompts)
    dense = torch.zeros(S, R, dtype=torch.float64, device=adapter.device)
    alphas = [1.0] if method == "eap" else [k / steps for k in range(steps)]
    seconds = {"outputs": 0.0, "gradients": 0.0}
    for start in progress_bar(range(0, N, batch), desc=f"{method}: edges", unit="batch"):
        sl = slice(start, min(start + batch, N))
        part = prompts.rows(sl)
        t0 = time.perf_counter()
        out_clean, _ = sender_outputs(adapter, graph, part.clean, part.mask)
        out_corr, _ = sender_outputs(adapter, graph, part.corrupted, part.mask)
        diff = (out_clean - out_corr).flatten(1)                                   # [S, rows·T·width]
        seconds["outputs"] += time.perf_counter() - t0
        for alpha in alphas:
            t0 = time.perf_counter()
            emb = None if alpha == 1.0 else out_corr[0] + alpha * (out_clean[0] - out_corr[0])
            edits = [] if emb is None else [replace("resid_in", 0, emb)]
            with torch.enable_grad(), EdgeRun(adapter, graph, probe=True, edits=edits) as run:
                metric = part.logit_diff(last_logits(adapter, part.clean, part.mask)).sum()
                grad = torch.cat(torch.autograd.grad(metric, run.probes))              # [R, rows, T, width]
            dense += (diff @ grad.flatten(1).t().to(diff.dtype)).double()
            seconds["gradients"] += time.perf_counter() - t0
        if progress:
            progress(f"{method}: prompts {sl.stop}/{N}")
    dense = dense.cpu() / (N * len(alphas))
    scores = dense[torch.as_tensor(graph.sender), torch.as_tensor(graph.receiver)].numpy()
    return dict(scores=scores, nodes=dense.sum(dim=1).numpy(), seconds=seconds, steps=len(alphas))


def circuit_weights(graph: EdgeGraph, circuits: np.ndarray) -> torch.Tensor:
    """``[circuits, S, R]``: 1 where an edge is patched (outside the circuit), 0 where it is kept (and
    on pairs that are no edge: a receiver never reads a later sender)."""
    circuits = np.asarray(circuits, dtype=bool)
    w = torch.zeros(len(circuits), len(graph.senders), len(graph.receivers))
    s, r = torch.as_tensor(graph.sender), torch.as_tensor(graph.receiver)
    for c, keep in enumerate(circuits):
        w[c, s, r] = torch.as_tensor(~keep, dtype=w.dtype)
    return w


@torch.no_grad()
def patched_metric(adapter, graph: EdgeGraph, prompts: PromptBatch, circuits: np.ndarray | None, batch: int = 64,
                   weights: torch.Tensor | None = None, progress: Callable[[str], None] | None = None) -> torch.Tensor:
    """The metric of every prompt ``[circuits, prompts]`` with every edge outside each circuit
    (bool ``[circuits, edges]``) patched to the corrupted run; or, with ``weights`` (``[circuits, S,
    R]``, any numbers), each edge's sender difference scaled by its weight. Rows of one pass:
    circuits × prompts, about ``batch``."""
    w_all = circuit_weights(graph, circuits) if weights is None else weights
    C, N = len(w_all), len(prompts)
    out = torch.empty(C, N, dtype=torch.float64)
    per = max(1, min(N, batch))
    done = 0
    bar = progress_bar(total=C * N, desc=f"{C} circuits × {N} prompts", unit="run")
    for start in range(0, N, per):
        sl = slice(start, min(start + per, N))
        p = sl.stop - sl.start
        part = prompts.rows(sl)
        base, _ = sender_outputs(adapter, graph, part.corrupted, part.mask)
        step = max(1, batch // p)
        for c0 in range(0, C, step):
            c1 = min(C, c0 + step)
            w = w_all[c0:c1].repeat_interleave(p, dim=0)                          # rows: circuit-major
            rows = part.rows(torch.arange(p).repeat(c1 - c0))                       # each prompt once a circuit
            with EdgeRun(adapter, graph, weights=w, base=base):
                logits = last_logits(adapter, rows.clean, rows.mask)
            out[c0:c1, sl] = rows.logit_diff(logits).double().view(c1 - c0, p).cpu()
            done += (c1 - c0) * p
            bar.update((c1 - c0) * p)
            if progress:
                progress(f"faithfulness: {done}/{C * N} circuit-prompt runs")
    return out
