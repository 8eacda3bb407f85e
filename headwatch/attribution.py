"""Attribution patching at the query, key and output sites, with AtP*'s fix for attention
saturation (Kramár et al. 2024), and its false negatives against exact patching (protocol §5e).

The one-pass estimate of a patch (:func:`headwatch.patching.attribution_patching` for ``z``)
is ``Σ ∂metric/∂x · (x_clean − x_corrupted)``, the gradient taken in the corrupted run. For a
query or key patch that linearizes the attention softmax, which is far from linear where it
saturates: a head whose clean query would move its attention from one position to another
can get an estimate near 0 (a *false negative*). AtP*'s **QK fix** recomputes the softmax
with the patched query (or key) exactly and linearizes only downstream of the pattern:

    estimate = Σ ∂metric/∂P_h · (P_h(patched q or k) − P_h(corrupted))

over the heads ``h`` the patch reaches (a query patch: its head; a key patch: every head of
the key/value group). ``∂metric/∂P_h`` comes from the gradient at ``z`` (``z_h = P_h · V``,
so ``∂metric/∂P_h = ∂metric/∂z_h · V_hᵀ``), one backward pass for every site; the patterns
are recomputed by the family's rules (:func:`headwatch.recompute.pattern`). The output site
``z`` has no softmax between the patch and the metric's first linear step: its AtP* estimate
is the plain one (AtP*'s other fix, GradDrop, is not implemented here).

:func:`site_patcher` is the exact reference: the Patcher of :mod:`headwatch.patching` that
also captures and patches ``q`` (a head's query slice) and ``k`` (a key/value group's key slice).
:func:`false_negatives`: the units in the exact top k (by |effect|) an estimate ranks below k.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from .arch import head_label
from .interventions import capture, intervene
from .patching import Patch, Patcher, attribution_patching, logit_diff
from .recompute import pattern, split_heads

SITES = ("z", "q", "k")
"""The sites estimated: a head's output (z), its query, its key/value group's key."""


def site_patcher(model, adapter, clean, corrupted, io, s, batch: int = 64) -> Patcher:
    """The exact reference: a :class:`headwatch.patching.Patcher` whose runs also capture ``q``
    (unit: a head) and ``k`` (unit: a key/value group), so that a patch takes the unit's slice."""
    return Patcher(model, adapter, clean, corrupted, io, s, batch, extra_sites=("q", "k"))


def units(adapter, site: str) -> list[tuple[int, int]]:
    """Every (layer, unit) of a site: heads for z and q, key/value groups for k."""
    return [(l, u) for l in range(adapter.n_layers) for u in range(adapter.site_units(site))]


def exact_effects(patcher: Patcher, site: str) -> np.ndarray:
    """Every unit's exact patched − corrupted mean logit difference, ``[layers, units]``."""
    a = patcher.adapter
    got = patcher.run([Patch(site, l, u) for l, u in units(a, site)]).double().mean(dim=1).numpy()
    return (got - patcher.corrupted_mean).reshape(a.n_layers, a.site_units(site))


def _per_unit(adapter, site: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` ``[B, T, features]`` summed over rows, positions and each unit's slice: ``[units]``."""
    return torch.stack([x[..., adapter.site_slice(site, u)].double().sum() for u in range(adapter.site_units(site))])


def qk_estimates(model, adapter, clean, corrupted, io, s, batch: int = 64) -> dict[str, dict[str, torch.Tensor]]:
    """Plain and AtP* estimates of every query and key patch: ``{"q": {"plain", "atp*"}, "k":
    {...}}``, each ``[layers, units]`` (float64, CPU; patched − corrupted mean logit difference).
    Per batch: one forward pass over the clean prompts (their q, k) and one forward and one
    backward pass over the corrupted prompts (the gradient at q, k and z; v captured)."""
    dev = next(model.parameters()).device
    clean, corrupted, io, s = clean.to(dev), corrupted.to(dev), io.to(dev), s.to(dev)
    L, n = adapter.n_layers, len(clean)
    out = {site: {m: torch.zeros(L, adapter.site_units(site), dtype=torch.float64) for m in ("plain", "atp*")}
           for site in ("q", "k")}
    for i in range(0, n, batch):
        rows = slice(i, i + batch)
        # the projections' whole outputs (grad=True keeps the module's own layout; nothing is differentiated here)
        with torch.no_grad(), intervene(adapter, [capture(x, l, grad=True, key=(x, l))
                                                  for x in ("q", "k") for l in range(L)]) as cap:
            adapter.run_body(clean[rows])
        qc = [cap.one(("q", l)) for l in range(L)]
        kc = [cap.one(("k", l)) for l in range(L)]
        edits = ([capture(x, l, grad=True, key=(x, l)) for x in ("q", "k", "z") for l in range(L)]
                 + [capture("v", l) for l in range(L)])
        with torch.enable_grad(), intervene(adapter, edits) as cap:
            logits = adapter.logits(corrupted[rows], keep=1)[:, -1]
            metric = logit_diff(logits, io[rows], s[rows]).sum() / n
            wrt = [cap.one((x, l)) for x in ("q", "k", "z") for l in range(L)]
            grads = torch.autograd.grad(metric, wrt)
        gq, gk, gz = grads[:L], grads[L:2 * L], grads[2 * L:]
        with torch.no_grad():
            for l in range(L):
                q_run, k_run, v = wrt[l].detach(), wrt[L + l].detach(), cap.one(("v", l, None))
                # plain: the gradient at the site times the clean − corrupted difference, per unit
                # (the fused projection's whole output where q, k, v share one: the site's slices)
                out["q"]["plain"][l] += _per_unit(adapter, "q", gq[l] * (qc[l] - q_run))
                out["k"]["plain"][l] += _per_unit(adapter, "k", gk[l] * (kc[l] - k_run))
                # AtP*: the patterns recomputed with the clean q (every head) or k (every group)
                q0, k0 = split_heads(adapter, q_run, k_run)
                q1, k1 = split_heads(adapter, qc[l], kc[l])
                base = pattern(adapter, l, q0.float(), k0.float())
                dq = pattern(adapter, l, q1.float(), k0.float()) - base      # [B, H, T, T]
                dk = pattern(adapter, l, q0.float(), k1.float()) - base
                for h in range(adapter.n_heads):
                    vh = v[..., adapter.value_slice(adapter.kv_group(h))].float()
                    g_p = torch.matmul(gz[l][..., adapter.out_columns(h)].float(), vh.transpose(-1, -2))
                    out["q"]["atp*"][l, h] += float((g_p.double() * dq[:, h].double()).sum())
                    out["k"]["atp*"][l, adapter.kv_group(h)] += float((g_p.double() * dk[:, h].double()).sum())
    return out


def false_negatives(exact: np.ndarray, estimate: np.ndarray, k: int) -> list[int]:
    """The flat indices of the units in the exact top ``k`` by |effect| that the estimate ranks
    below ``k`` by |estimate| (ties: the lower index first, in both rankings)."""
    top = np.argsort(-np.abs(exact.ravel()), kind="stable")[:k]
    est = set(np.argsort(-np.abs(estimate.ravel()), kind="stable")[:k].tolist())
    return sorted(int(i) for i in top if int(i) not in est)


def blind_spots(model, adapter, clean, corrupted, io, s, batch: int, top_k: int) -> tuple[pd.DataFrame, dict]:
    """The false negatives of each estimate against exact patching, for z, q and k, plain and
    AtP*, side by side: (one row per site and method — ``site, method, units, top_k,
    false_negatives, missed, seconds, forward_passes, backward_passes`` —, the effects)."""
    t0 = time.perf_counter()
    patcher = site_patcher(model, adapter, clean, corrupted, io, s, batch)
    setup = time.perf_counter() - t0
    n_batches = -(-len(clean) // batch)
    rows, effects = [], {}
    for site in SITES:
        t0 = time.perf_counter()
        exact = exact_effects(patcher, site)
        effects[site] = dict(exact=exact)
        n = exact.size
        rows.append(dict(site=site, method="exact (batched patching)", units=n, top_k=top_k, false_negatives=0,
                         missed="", seconds=setup + time.perf_counter() - t0,
                         forward_passes=-(-n * len(clean) // batch) + 2 * n_batches, backward_passes=0))
    t0 = time.perf_counter()
    z = attribution_patching(model, adapter, clean, corrupted, io, s, batch).numpy()
    t_z = time.perf_counter() - t0
    t0 = time.perf_counter()
    qk = qk_estimates(model, adapter, clean, corrupted, io, s, batch)
    t_qk = time.perf_counter() - t0
    estimates = {("z", "plain"): (z, t_z), ("z", "atp*"): (z, t_z)}
    estimates.update({(site, m): (qk[site][m].numpy(), t_qk) for site in ("q", "k") for m in ("plain", "atp*")})
    for (site, method), (est, secs) in estimates.items():
        exact = effects[site]["exact"]
        effects[site][method] = est
        miss = false_negatives(exact, est, top_k)
        H = exact.shape[1]
        label = (lambda i: head_label(i // H, i % H)) if site != "k" else (lambda i: f"L{i // H}G{i % H}")
        rows.append(dict(site=site, method=method + (" (= plain: no softmax to fix at z)"
                                                     if site == "z" and method == "atp*" else ""),
                         units=exact.size, top_k=top_k, false_negatives=len(miss),
                         missed=" ".join(label(i) for i in miss), seconds=secs,
                         forward_passes=2 * n_batches, backward_passes=n_batches))
    return pd.DataFrame(rows), effects
