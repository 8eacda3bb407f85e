"""Attribution patching at the query, key and output sites, with AtP*'s two fixes (Kramár et
al. 2024) — the QK fix for attention saturation and GradDrop for cancellation —, and its false
negatives against exact patching (protocol §5e).

The one-pass estimate of a patch (:func:`attribution_patching` for ``z``)
is ``Σ ∂metric/∂x · (x_clean − x_corrupted)``, the gradient taken in the corrupted run. For a
query or key patch that linearizes the attention softmax, which is far from linear where it
saturates: a head whose clean query would move its attention from one position to another
can get an estimate near 0 (a *false negative*). AtP*'s **QK fix** recomputes the softmax
with the patched query (or key) exactly and linearizes only downstream of the pattern:

    estimate = Σ ∂metric/∂P_h · (P_h(patched q or k) − P_h(corrupted))

over the heads ``h`` the patch reaches (a query patch: its head; a key patch: every head of
the key/value group). ``∂metric/∂P_h`` comes from the gradient at ``z`` (``z_h = P_h · V``,
so ``∂metric/∂P_h = ∂metric/∂z_h · V_hᵀ``), one backward pass for every site; the patterns
are recomputed by the family's rules (:func:`headwatch.model.recompute.pattern`). The output site
``z`` has no softmax between the patch and the metric's first linear step: its QK-fixed
estimate is the plain one.

**GradDrop** (:func:`graddrop_estimates`): a unit's effect reaches the metric directly and
through later layers; where those paths nearly cancel in the gradient, the estimate is near 0
although the patch moves the answer. For each layer ℓ, the estimate is taken again with the
gradient through block ℓ's contribution to the residual stream stopped
(:func:`headwatch.model.interventions.stop_grad`: the backward pass reaches earlier layers along the
stream only), and the L estimates are combined in magnitude, per prompt:

    GradDrop(u) = mean over prompts of 1/(L − 1) · Σ_ℓ |estimate_ℓ(u, prompt)|

(the paper's AtP+GD; a unit of layer m gets 0 from ℓ = m, hence L − 1). Its estimates are the
QK-fixed ones at q and k and the plain one at z ("AtP* + GradDrop"): L more forward and
backward passes per batch. The result is a magnitude, ranked like the others by |·|.

:func:`site_patcher` is the exact reference: the :class:`~headwatch.patching.patcher.Patcher` that
also captures and patches ``q`` (a head's query slice) and ``k`` (a key/value group's key slice).
:func:`false_negatives`: the units in the exact top k (by |effect|) an estimate ranks below k.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from ..model.arch import head_label
from ..model.interventions import capture, intervene, stop_grad
from .batch import PromptBatch
from .patcher import Patch, Patcher
from ..settings.patching import PatchingError
from ..model.recompute import pattern, split_heads

SITES = ("z", "q", "k")
"""The sites estimated: a head's output (z), its query, its key/value group's key."""
GRADDROP = "atp*+graddrop"
"""The method name of AtP* with GradDrop (the QK fix at q and k, the plain estimate at z)."""


# ------------------------------------------------------------------ attribution patching at z
def attribution_patching(model, adapter, prompts: PromptBatch, batch: int = 64):
    """The first-order estimate of every head's patched mean logit difference minus the
    corrupted one, ``[n_layers, n_heads]`` (float64, CPU): one forward pass over the clean
    prompts (their z), then per batch of corrupted prompts one forward and one backward pass —
    ``∂metric/∂z`` (``capture`` with ``grad=True``) times ``z_clean − z_corrupted``, summed over
    prompts, positions and the head's ``head_dim`` slice; the metric is the mean over all
    prompts of the logit difference at the last position. Left-padded prompts run with their
    attention mask (the padding's gradient is 0: no position reads it)."""
    dev = next(model.parameters()).device
    prompts = prompts.to(dev)
    L, H, d = adapter.n_layers, adapter.n_heads, adapter.head_dim
    n = len(prompts)
    total = torch.zeros(L, H, dtype=torch.float64, device=dev)
    for i in range(0, n, batch):
        rows = slice(i, i + batch)
        with torch.no_grad(), intervene(adapter, [capture("z", l) for l in range(L)]) as cap:
            adapter.run_body(prompts.clean[rows], mask=prompts.mask_of(rows))
        z_clean = [cap.one(("z", l, None)) for l in range(L)]
        with torch.enable_grad(), intervene(adapter, [capture("z", l, grad=True) for l in range(L)]) as cap:
            logits = adapter.logits(prompts.corrupted[rows], keep=1, mask=prompts.mask_of(rows))[:, -1]
            metric = prompts.logit_diff(logits, rows).sum() / n
            zs = [cap.one(("z", l, None)) for l in range(L)]
            grads = torch.autograd.grad(metric, zs)
        for l in range(L):
            delta = (grads[l] * (z_clean[l] - zs[l].detach())).double()
            total[l] += delta.reshape(*delta.shape[:-1], H, d).sum(dim=(0, 1, 3))
    return total.cpu()


# ------------------------------------------------------------------ the exact reference, AtP at q and k, AtP*
def site_patcher(model, adapter, prompts: PromptBatch, batch: int = 64) -> Patcher:
    """The exact reference: a :class:`~headwatch.patching.patcher.Patcher` whose runs also capture ``q``
    (unit: a head) and ``k`` (unit: a key/value group), so that a patch takes the unit's slice."""
    return Patcher(model, adapter, _one_length(prompts), batch, extra_sites=("q", "k"))


def units(adapter, site: str) -> list[tuple[int, int]]:
    """Every (layer, unit) of a site: heads for z and q, key/value groups for k."""
    return [(l, u) for l in range(adapter.n_layers) for u in range(adapter.site_units(site))]


def exact_effects(patcher: Patcher, site: str) -> np.ndarray:
    """Every unit's exact patched − corrupted mean logit difference, ``[layers, units]``."""
    a = patcher.adapter
    got = patcher.run([Patch(site, l, u) for l, u in units(a, site)]).double().mean(dim=1).numpy()
    return (got - patcher.corrupted_mean).reshape(a.n_layers, a.site_units(site))


def _per_unit(adapter, site: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` ``[B, T, features]`` summed over positions and each unit's slice, per row: ``[B, units]``
    (float64)."""
    return torch.stack([x[..., adapter.site_slice(site, u)].double().sum(dim=(1, 2))
                        for u in range(adapter.site_units(site))], dim=1)


def _clean_run(adapter, ids) -> dict:
    """The clean run's q, k and z of every layer, ``{(site, layer): tensor}``: the modules' whole
    tensors (grad=True keeps the module's own layout; nothing is differentiated here)."""
    keys = [(x, l) for x in SITES for l in range(adapter.n_layers)]
    with torch.no_grad(), intervene(adapter, [capture(x, l, grad=True, key=(x, l)) for x, l in keys]) as cap:
        adapter.run_body(ids)
    return {key: cap.one(key) for key in keys}


def _corrupted_pass(adapter, prompts: PromptBatch, n: int, drop: int | None = None) -> tuple[dict, dict]:
    """One forward and one backward pass over the corrupted ``prompts``, the metric the sum of their
    logit differences / ``n``; with ``drop``, block ``drop``'s gradient stopped (GradDrop).
    Returns (the run's q, k, z and v ``{(site, layer): tensor}``, detached; the gradients at q,
    k and z — 0 at the dropped block's own sites)."""
    L = adapter.n_layers
    keys = [(x, l) for x in SITES for l in range(L)]
    # v too as the projection's whole output (grad=True: the module's own layout, which
    # Adapter.value_slice indexes, fused with q and k in some families); not differentiated
    edits = ([capture(x, l, grad=True, key=(x, l)) for x, l in keys + [("v", l) for l in range(L)]]
             + ([stop_grad(drop)] if drop is not None else []))
    with torch.enable_grad(), intervene(adapter, edits) as cap:
        logits = adapter.logits(prompts.corrupted, keep=1)[:, -1]
        metric = prompts.logit_diff(logits).sum() / n
        wrt = [cap.one(key) for key in keys]
        grads = torch.autograd.grad(metric, wrt, materialize_grads=True)
    run = {key: cap.one(key).detach() for key in keys + [("v", l) for l in range(L)]}
    return run, dict(zip(keys, grads))


def _pattern_moves(adapter, clean: dict, run: dict) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, how every head's pattern moves when the clean query of every head (``dq``), or
    the clean key of every group (``dk``), replaces the corrupted run's: ``[B, H, T, T]`` each
    (float64), recomputed by the family's rules. The same for every gradient pass of one batch."""
    out = []
    for l in range(adapter.n_layers):
        q0, k0 = split_heads(adapter, run[("q", l)], run[("k", l)])
        q1, k1 = split_heads(adapter, clean[("q", l)], clean[("k", l)])
        base = pattern(adapter, l, q0.float(), k0.float())
        out.append(((pattern(adapter, l, q1.float(), k0.float()) - base).double(),
                    (pattern(adapter, l, q0.float(), k1.float()) - base).double()))
    return out


def _row_estimates(adapter, clean: dict, run: dict, grads: dict,
                   moves: list | None = None) -> dict[tuple[str, str], torch.Tensor]:
    """Each prompt's estimates from one gradient pass, ``{(site, method): [B, layers, units]}``
    (float64, CPU): plain at z, q and k (the gradient at the site times clean − corrupted, per
    unit: the fused projection's whole output where q, k, v share one, the site's slices), and
    AtP* at q and k (the patterns' moves, :func:`_pattern_moves`, given or computed here)."""
    L, H = adapter.n_layers, adapter.n_heads
    moves = moves or _pattern_moves(adapter, clean, run)
    out = {key: [] for key in (("z", "plain"), ("q", "plain"), ("k", "plain"), ("q", "atp*"), ("k", "atp*"))}
    for l in range(L):
        for site in SITES:
            out[(site, "plain")].append(_per_unit(adapter, site, grads[(site, l)] * (clean[(site, l)] - run[(site, l)])))
        dq, dk = moves[l]
        v, gz = run[("v", l)], grads[("z", l)]
        q_star = torch.zeros(len(v), H, dtype=torch.float64, device=v.device)
        k_star = torch.zeros(len(v), adapter.n_kv_heads, dtype=torch.float64, device=v.device)
        for h in range(H):
            vh = v[..., adapter.value_slice(adapter.kv_group(h))].float()
            g_p = torch.matmul(gz[..., adapter.out_columns(h)].float(), vh.transpose(-1, -2)).double()
            q_star[:, h] = (g_p * dq[:, h]).sum(dim=(1, 2))
            k_star[:, adapter.kv_group(h)] += (g_p * dk[:, h]).sum(dim=(1, 2))
        out[("q", "atp*")].append(q_star)
        out[("k", "atp*")].append(k_star)
    return {key: torch.stack(rows, dim=1).cpu() for key, rows in out.items()}


def _one_length(prompts: PromptBatch) -> PromptBatch:
    """``prompts``, or PatchingError where they are padded: the estimates at q and k and their exact
    reference patch every position of prompts that line up."""
    if prompts.mask is not None:
        raise PatchingError("the prompts differ in length; AtP at q and k and its exact reference patch every "
                            "position of prompts that line up (give prompts of one length)")
    return prompts


def _batches(model, prompts: PromptBatch, batch: int) -> list[PromptBatch]:
    """The prompts (of one length) on the model's device, in batches of ``batch``."""
    prompts = _one_length(prompts).to(next(model.parameters()).device)
    return [prompts.rows(slice(i, i + batch)) for i in range(0, len(prompts), batch)]


def qk_estimates(model, adapter, prompts: PromptBatch, batch: int = 64) -> dict[str, dict[str, torch.Tensor]]:
    """Plain and AtP* estimates of every query and key patch: ``{"q": {"plain", "atp*"}, "k":
    {...}}``, each ``[layers, units]`` (float64, CPU; patched − corrupted mean logit difference).
    Per batch: one forward pass over the clean prompts (their q, k and z) and one forward and one
    backward pass over the corrupted prompts (the gradient at q, k and z; v captured)."""
    out = {site: {m: torch.zeros(adapter.n_layers, adapter.site_units(site), dtype=torch.float64)
                  for m in ("plain", "atp*")} for site in ("q", "k")}
    for part in _batches(model, prompts, batch):
        run, grads = _corrupted_pass(adapter, part, len(prompts))
        est = _row_estimates(adapter, _clean_run(adapter, part.clean), run, grads)
        for site, m in ((x, m) for x in ("q", "k") for m in ("plain", "atp*")):
            out[site][m] += est[(site, m)].sum(dim=0)
    return out


def graddrop_estimates(model, adapter, prompts: PromptBatch, batch: int = 64) -> dict[str, torch.Tensor]:
    """AtP* with GradDrop for every unit of z, q and k: ``{site: [layers, units]}`` (float64, CPU,
    ≥ 0), the mean over prompts of ``1/(L − 1) · Σ_ℓ |estimate with block ℓ's gradient stopped|``
    (see the module doc; the QK-fixed estimate at q and k, the plain one at z). Per batch: one
    forward pass over the clean prompts, then for each layer one forward and one backward pass
    over the corrupted prompts."""
    L = adapter.n_layers
    if L < 2:
        raise ValueError(f"GradDrop averages over the L − 1 layers whose dropped gradient can reach a unit; "
                         f"this model has {L} layer")
    total = {site: torch.zeros(L, adapter.site_units(site), dtype=torch.float64) for site in SITES}
    for part in _batches(model, prompts, batch):
        clean_run, moves = _clean_run(adapter, part.clean), None
        for drop in range(L):
            run, grads = _corrupted_pass(adapter, part, len(prompts), drop)
            moves = moves or _pattern_moves(adapter, clean_run, run)       # the forward pass is the same
            est = _row_estimates(adapter, clean_run, run, grads, moves)
            for site in SITES:
                total[site] += est[(site, "plain" if site == "z" else "atp*")].abs().sum(dim=0)
    return {site: t / (L - 1) for site, t in total.items()}


def false_negatives(exact: np.ndarray, estimate: np.ndarray, k: int) -> list[int]:
    """The flat indices of the units in the exact top ``k`` by |effect| that the estimate ranks
    below ``k`` by |estimate| (ties: the lower index first, in both rankings)."""
    top = np.argsort(-np.abs(exact.ravel()), kind="stable")[:k]
    est = set(np.argsort(-np.abs(estimate.ravel()), kind="stable")[:k].tolist())
    return sorted(int(i) for i in top if int(i) not in est)


def blind_spots(model, adapter, prompts: PromptBatch, batch: int, top_k: int,
                graddrop: bool = True) -> tuple[pd.DataFrame, dict]:
    """The false negatives of each estimate against exact patching, for z, q and k, plain, AtP*
    and (``graddrop``) AtP* + GradDrop, side by side: (one row per site and method — ``site,
    method, units, top_k, false_negatives, missed, seconds, forward_passes, backward_passes`` —,
    the effects ``{site: {"exact" or method: [layers, units]}}``). ``seconds`` is each estimate's
    own passes: q and k share one set, and GradDrop's L sets per batch serve z, q and k at once."""
    t0 = time.perf_counter()
    patcher = site_patcher(model, adapter, prompts, batch)
    setup = time.perf_counter() - t0
    n_batches = -(-len(prompts) // batch)
    rows, effects = [], {}
    for site in SITES:
        t0 = time.perf_counter()
        exact = exact_effects(patcher, site)
        effects[site] = dict(exact=exact)
        n = exact.size
        rows.append(dict(site=site, method="exact (batched patching)", units=n, top_k=top_k, false_negatives=0,
                         missed="", seconds=setup + time.perf_counter() - t0,
                         forward_passes=-(-n * len(prompts) // batch) + 2 * n_batches, backward_passes=0))
    t0 = time.perf_counter()
    z = attribution_patching(model, adapter, prompts, batch).numpy()
    t_z = time.perf_counter() - t0
    t0 = time.perf_counter()
    qk = qk_estimates(model, adapter, prompts, batch)
    t_qk = time.perf_counter() - t0
    one = (2 * n_batches, n_batches)                  # forward, backward passes of a one-pass estimate
    estimates = {("z", "plain"): (z, t_z, one), ("z", "atp*"): (z, t_z, one)}
    estimates.update({(site, m): (qk[site][m].numpy(), t_qk, one) for site in ("q", "k") for m in ("plain", "atp*")})
    if graddrop:
        t0 = time.perf_counter()
        gd = graddrop_estimates(model, adapter, prompts, batch)
        t_gd = time.perf_counter() - t0
        L = adapter.n_layers
        estimates.update({(site, GRADDROP): (gd[site].numpy(), t_gd, ((1 + L) * n_batches, L * n_batches))
                          for site in SITES})
    at_z = {"atp*": " (= plain: no softmax to fix at z)", GRADDROP: " (= plain + GradDrop: no softmax to fix at z)"}
    for (site, method), (est, secs, (forward, backward)) in estimates.items():
        exact = effects[site]["exact"]
        effects[site][method] = est
        miss = false_negatives(exact, est, top_k)
        H = exact.shape[1]
        label = (lambda i: head_label(i // H, i % H)) if site != "k" else (lambda i: f"L{i // H}G{i % H}")
        rows.append(dict(site=site, method=method + (at_z.get(method, "") if site == "z" else ""),
                         units=exact.size, top_k=top_k, false_negatives=len(miss),
                         missed=" ".join(label(i) for i in miss), seconds=secs,
                         forward_passes=forward, backward_passes=backward))
    table = pd.DataFrame(rows)           # by site, each site's exact row then its estimates
    return table.sort_values("site", key=lambda c: c.map(SITES.index), kind="stable").reset_index(drop=True), effects
