"""The ablation experiments of protocol §5, all through :mod:`headwatch.ablation.cut` (head cuts on the
intervention API).

* :func:`topk_table` — 5a, targeted vs random: loss per token on copy 1 and
  copy 2 of the eval set with the top-k induction heads cut, and with k heads
  drawn at random from outside the targeted set.
* :func:`circuit_tables` — 5b: cut the top previous-token head and re-score
  induction on the circuit set; a random-head control; the loss table.
* :func:`attribution_tables` — 5c: every head cut alone on every phrase, the
  summary (with the costliest head's cut scope on the prose sentences), and the
  non-additivity of the two costliest heads.

Every experiment reads its settings from one typed object,
:class:`headwatch.settings.ablation.AblationSettings` (the rule's slice of ``ablation:``).

**How a head is cut** (``ablation.method``): ``zero`` replaces its voice ``z``
(its slice of the output projection's input) by 0; ``mean`` replaces it by
its mean over the eval set's rows and positions (:func:`headwatch.ablation.cut.head_means`,
one capture at ``z``), which keeps the head in its usual range. 5a writes
both methods side by side (a ``method`` column, the configured one first);
5b and 5c use the configured method.

Every experiment runs the guards of protocol §5 through :class:`headwatch.ablation.guards.AblationGuards`
(hook vs its weight-level form on the full logits — zeroed Wo columns for zero
cuts, zeroed columns plus the mean's projection as a bias for mean cuts —,
batched vs one-at-a-time, the model back intact at the end; 5a's random control);
a failed guard raises :class:`~headwatch.guards.GuardError` and no table is written.

**Which positions a loss reads.** A sequence is ``offset`` BOS tokens (0 or 1)
then copy 1 (positions ``offset .. offset+T-1``) then copy 2 (positions
``offset+T .. offset+2T-1``). The loss *of a copy* is the mean cross-entropy
(nats) of predicting token ``t+1`` from position ``t``, for the positions ``t``
inside that copy whose next token is also inside it:

* copy 1: ``t = offset .. offset+T-2`` (targets ``offset+1 .. offset+T-1``),
* copy 2: ``t = offset+T .. offset+2T-2`` (targets ``offset+T+1 .. offset+2T-1``),

T-1 predictions per copy and sequence, averaged over all of them (every
sequence has the same length, so this is also the mean of per-sequence means).
The prediction of copy 2's first token (from copy 1's last position) is in
neither: nothing in the sequence predicts it. Copy 2's positions are the rows
the induction score reads (protocol §4).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from ..settings.ablation import METHODS, AblationSettings
from ..model.arch import Adapter, Head, head_label, heads_label
from ..jobs import phases
from ..model.device import exact_numerics
from .cut import (BatchedCuts, cut_heads, cut_rows, head_mask, head_means, heads_one_per_layer, loop_cuts,
                  normalize_heads)
from .guards import AblationGuards, random_control
from ..names import top_heads
from ..scores.heads import attention_maps, induction_cells, induction_scores
from ..scores.sequences import ids_tensor

log = logging.getLogger("headwatch.ablation")

# Independent random streams per experiment, so that changing one experiment's
# settings never changes another's draws.
STREAMS = {"topk": 0, "circuit": 1}

METHOD_NOTE = dict(
    zero_cut="a zero cut sets the head's z (its head_dim slice of the output projection's input) to 0",
    mean_cut="a mean cut sets the head's z to its mean over every position of every eval sequence")

LOSS_POSITIONS_NOTE = (
    "loss per token in nats: mean cross-entropy of predicting token t+1 from position t, "
    "copy 1: t = offset .. offset+T-2, copy 2: t = offset+T .. offset+2T-2 "
    "(T-1 predictions per copy and sequence; offset = 1 if a BOS token was prepended else 0)")


def method_means(model, adapter: Adapter, method: str, eval_df: pd.DataFrame | None, batch: int):
    """The values a cut puts in place of ``z``: None for zero cuts; for mean cuts every head's
    mean over the eval set's rows and positions ``[L, H, head_dim]``."""
    if method == "zero":
        return None
    if eval_df is None:
        raise ValueError("ablation.method = mean takes each head's mean over the eval set: "
                         "the eval sequences are needed")
    return head_means(model, adapter, ids_tensor(eval_df), batch)


# ----------------------------------------------------------------- helpers
def copy_positions(half_length: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``t`` whose prediction of ``t+1`` counts for copy 1 and copy 2 (see module doc)."""
    T = int(half_length)
    if T < 2:
        raise ValueError("half_length must be at least 2 for a loss inside each copy")
    c1 = torch.arange(offset, offset + T - 1)
    c2 = torch.arange(offset + T, offset + 2 * T - 1)
    return c1, c2


def token_losses(ids: torch.Tensor, positions: torch.Tensor):
    """A reducer for :mod:`headwatch.ablation.cut`: per-position cross-entropy of the next token, [B, P].

    ``logits`` given to it hold only ``positions`` (in that order); targets are ``ids[:, positions+1]``.
    """
    targets_all = ids[:, positions + 1]

    def reduce(logits: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
        targets = targets_all.to(logits.device)[seq_index]
        logits = logits.float()
        return torch.logsumexp(logits, dim=-1) - logits.gather(-1, targets[..., None])[..., 0]
    return reduce


def prob_of(token_id: int):
    """A reducer: probability of ``token_id`` at each kept position (softmax over the full vocabulary)."""
    def reduce(logits: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float(), dim=-1)[..., token_id]
    return reduce


def random_heads(pool: Sequence[Head], size: int, draws: int, seed: int, stream: str,
                 key: int = 0) -> list[list[Head]]:
    """``draws`` sets of ``size`` distinct heads from ``pool``, reproducible from ``seed``.

    The generator is ``numpy.random.default_rng([seed, STREAMS[stream], key])``; each
    draw's heads are returned in (layer, head) order.
    """
    pool = sorted(pool)
    if size > len(pool):
        raise ValueError(f"cannot draw {size} heads: only {len(pool)} heads are outside the "
                         "targeted set (lower ablation.k or ablation.top_n)")
    rng = np.random.default_rng([int(seed), STREAMS[stream], int(key)])
    return [sorted(pool[i] for i in rng.choice(len(pool), size=size, replace=False))
            for _ in range(draws)]


def _targeted(scores: pd.DataFrame, top_n: int, adapter: Adapter) -> list[Head]:
    heads = normalize_heads(adapter, top_heads(scores, "induction", top_n))
    if len(heads) < top_n:
        raise ValueError(f"ablation.top_n = {top_n} but the scores table has {len(heads)} heads")
    return heads


# ----------------------------------------------------------------- 5a
def topk_table(model, adapter: Adapter, eval_df: pd.DataFrame, scores: pd.DataFrame,
               settings: AblationSettings, guards: AblationGuards) -> tuple[pd.DataFrame, dict]:
    """5a: loss per token on copy 1 / copy 2 for intact, targeted top-k and random k heads,
    with both cut methods (rows of the configured ``ablation.method`` first; the same draws).

    ``settings``: of the ``ablation`` config slice, it reads top_n, k, random_draws, seed, method,
    batch, rounding_factor, hook_tolerance, guard_sequences. Random heads come from outside the top_n
    targeted set (never a targeted head: the guard :func:`~headwatch.ablation.guards.random_control`).
    """
    settings.need("top_n", "k", "random_draws", "seed", "guard_sequences")
    top_n, ks, draws = settings.top_n, list(settings.k), settings.random_draws
    if max(ks) > top_n:
        raise ValueError(f"ablation.k = {ks} asks for more heads than ablation.top_n = {top_n}")
    targeted = _targeted(scores, top_n, adapter)
    pool = [h for h in adapter.heads() if h not in set(targeted)]
    log.info("targeted set (top %d by induction): %s", top_n, heads_label(targeted))
    configured = settings.method
    methods = [configured] + [m for m in METHODS if m != configured]
    guards.step("the heads' means on the eval set (mean cuts)")
    means = {m: method_means(model, adapter, m, eval_df, settings.batch) for m in methods}
    for m in methods:
        guards.hook(means[m], targeted, settings.hook_tolerance)

    ids = ids_tensor(eval_df)
    T, offset = int(eval_df.half_length.iloc[0]), int(eval_df.offset.iloc[0])
    c1, c2 = copy_positions(T, offset)
    positions = torch.cat([c1, c2])
    reduce = token_losses(ids, positions)

    variants: list[list[Head]] = [[]]
    index = {}
    for k in ks:
        index[("targeted", k)] = len(variants)
        variants.append(targeted[:k])
        rand = random_heads(pool, k, draws, settings.seed, "topk", k)
        index[("random", k)] = list(range(len(variants), len(variants) + draws))
        variants += rand
    guards.check(random_control, targeted, {k: [variants[v] for v in index[("random", k)]] for k in ks})
    log.info("5a: %d cut variants × %d eval sequences × %d methods", len(variants), len(ids), len(methods))
    kmax, n1 = max(ks), len(c1)
    # Guard 3 on the intact model, the largest targeted cut and the first random draw of it, on
    # the guard sequences (each row of the batched run is compared with its own loop).
    compared = [0, index[("targeted", kmax)], index[("random", kmax)][0]]
    g = min(settings.guard_sequences, len(ids))
    hidden = None                    # the intact hidden states: one capture for both methods

    def per_copy(method: str) -> np.ndarray:
        """[V, 2]: mean loss on copy 1 and copy 2 of every variant cut by ``method``."""
        nonlocal hidden
        guards.step(f"cut {len(variants)} head sets × {len(ids)} sequences ({method} cuts)")
        runner = BatchedCuts(model, adapter, ids, positions, settings.batch, means=means[method], hidden=hidden)
        hidden = runner.hidden
        losses = runner.run_variants(variants, reduce).cpu()                  # [V, N, P]
        guards.step(f"guard batched_vs_loop: {len(compared)} head sets cut one at a time ({method} cuts)")
        looped = loop_cuts(model, adapter, ids[:g], [variants[v] for v in compared], reduce, positions,
                           settings.batch, means[method]).cpu()
        guards.loop(losses[compared, :g], looped, f"5a loss per token (nats), {method} cuts, {len(compared)} "
                    f"variants × {g} sequences × {len(positions)} positions")
        return torch.stack([losses[:, :, :n1].mean(dim=(1, 2)), losses[:, :, n1:].mean(dim=(1, 2))],
                           dim=1).double().numpy()

    rows = [row for method in methods for row in _topk_rows(method, per_copy(method), variants, index, ks)]
    df = pd.DataFrame(rows)
    note = dict(positions=LOSS_POSITIONS_NOTE, half_length=T, offset=offset, sequences=len(ids),
                top_n=top_n, targeted_set=heads_label(targeted), random_pool=len(pool),
                random="k heads drawn without replacement from the heads outside the targeted set; "
                       f"numpy default_rng([seed={settings.seed}, stream={STREAMS['topk']}, k])",
                method=f"rows of each cut method, the configured ablation.method ({configured}) first; "
                       "the same heads and draws for both",
                **METHOD_NOTE)
    return df, note


def _topk_rows(method: str, loss: np.ndarray, variants: list, index: dict, ks: list[int]) -> list[dict]:
    """5a's rows of one cut method: per k, the intact, targeted and random (mean, min, max over the
    draws) loss on each copy (``loss`` [variant, copy], ``index``: the variants of each cut)."""
    rows = []
    for k in ks:
        t = index[("targeted", k)]
        r = index[("random", k)]
        row = dict(method=method, k=k, n_cut_targeted=len(set(variants[t])), n_cut_random=len(variants[r[0]]),
                   n_draws=len(r), targeted_heads=heads_label(variants[t]),
                   random_heads=[heads_label(variants[v]) for v in r])
        for c, name in ((0, "copy1"), (1, "copy2")):
            rl = loss[r, c]
            row.update({f"intact_{name}": loss[0, c], f"targeted_{name}": loss[t, c],
                        f"random_{name}_mean": rl.mean(), f"random_{name}_min": rl.min(),
                        f"random_{name}_max": rl.max()})
        rows.append(row)
    return rows


# ----------------------------------------------------------------- 5b
@torch.no_grad()
def induction_under_cuts(model, adapter: Adapter, ids: torch.Tensor, half_length: int, offset: int,
                         variants: Sequence[Sequence[Head]], batch: int = 64,
                         means: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """Every head's induction cells (protocol §4 formula, :func:`scores.induction_cells`) under each
    variant's cut (zero, or mean with ``means``), batched with :func:`cut_rows`, summed per sequence:
    (``[V, N, n_layers, n_heads]`` float64 on the model's device, the cells of one sequence);
    :func:`pooled_induction` makes the scores of them."""
    dev = next(model.parameters()).device
    ids = ids.to(dev)
    n = len(ids)
    masks = head_mask(adapter, variants, dev).repeat_interleave(n, dim=0)      # row = (variant, sequence)
    seq = torch.arange(n, device=dev).repeat(len(variants))
    rows_per = max(1, int(batch))
    sums, cells_per_row = [], 0
    for i in range(0, len(masks), rows_per):
        with cut_rows(adapter, masks[i:i + rows_per], means):
            cells = induction_cells(attention_maps(model, ids[seq[i:i + rows_per]], adapter),
                                    half_length, offset)                     # [B, L, H, T-1]
        sums.append(cells.sum(dim=-1).double())                             # stays on the device
        cells_per_row = cells.shape[-1]
    return torch.cat(sums).reshape(len(variants), n, adapter.n_layers, adapter.n_heads), cells_per_row


def pooled_induction(sums: torch.Tensor, cells: int, sequences: int | None = None) -> torch.Tensor:
    """The induction score of every head under each variant, ``[V, n_layers, n_heads]`` (float32, CPU):
    the cells of :func:`induction_under_cuts` pooled over its first ``sequences`` (all when None)."""
    sums = sums if sequences is None else sums[:, :sequences]
    return (sums.sum(dim=1) / (sums.shape[1] * cells)).float().cpu()


def circuit_tables(model, adapter: Adapter, circuit_df: pd.DataFrame, scores: pd.DataFrame,
                   settings: AblationSettings, guards: AblationGuards, eval_df: pd.DataFrame | None = None
                   ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """5b: re-score induction on the circuit set with the top previous-token head cut.

    ``settings``: of the ``ablation`` config slice, it reads top_n, random_draws, seed,
    circuit.half_threshold, method, batch, rounding_factor, hook_tolerance, guard_sequences. Cuts by the
    configured method (mean cuts take their means over ``eval_df``).
    The random control cuts one head at a time, ``random_draws`` distinct heads drawn from the
    heads that are neither the previous-token head nor in the top_n induction set.
    """
    settings.need("top_n", "random_draws", "seed", "circuit", "guard_sequences")
    top_n, draws = settings.top_n, settings.random_draws
    targeted = _targeted(scores, top_n, adapter)
    prev = normalize_heads(adapter, top_heads(scores, "prev", 1))[0]
    best = targeted[0]
    pool = [h for h in adapter.heads() if h != prev and h not in set(targeted)]
    rand = _distinct_singles(pool, draws, settings.seed)
    log.info("5b: previous-token head %s, best induction head %s, random heads %s",
             head_label(*prev), head_label(*best), heads_label(rand))
    method = settings.method
    guards.step("the heads' means on the eval set" if method == "mean" else "the cut method")
    means = method_means(model, adapter, method, eval_df, settings.batch)
    guards.hook(means, [prev, best] + rand, settings.hook_tolerance)

    ids = ids_tensor(circuit_df)
    T, offset = int(circuit_df.half_length.iloc[0]), int(circuit_df.offset.iloc[0])
    run = _CircuitRun(model, adapter, ids, T, offset, settings, guards, means)
    sc = run.rescored(scores, targeted, prev, rand)
    losses = run.losses(best, prev, rand)
    note = dict(positions=LOSS_POSITIONS_NOTE, half_length=T, offset=offset, sequences=len(ids),
                prev_head=head_label(*prev), best_induction_head=head_label(*best),
                random=f"{len(rand)} distinct single heads, not the previous-token head nor in the top "
                       f"{top_n} induction set; numpy default_rng([seed={settings.seed}, "
                       f"stream={STREAMS['circuit']}, 0])",
                lose_half="intact induction > half_threshold and score after the cut < intact / 2",
                method=method, cut=METHOD_NOTE[f"{method}_cut"])
    return sc, losses, note


@dataclass
class _CircuitRun:
    """5b's passes over the circuit set under one cut method: the induction scores re-scored and the
    loss, each batched and checked against its loop on the guard sequences."""
    model: object
    adapter: Adapter
    ids: torch.Tensor
    T: int
    offset: int
    settings: AblationSettings
    guards: AblationGuards
    means: torch.Tensor | None

    @property
    def g(self) -> int:
        return min(self.settings.guard_sequences, len(self.ids))

    def rescored(self, scores: pd.DataFrame, targeted: list[Head], prev: Head, rand: list[Head]) -> pd.DataFrame:
        """Every targeted head's induction score intact, with the previous-token head cut and with each
        random head cut; the counts of heads above the threshold that lose half."""
        adapter, settings, guards, ids, g = self.adapter, self.settings, self.guards, self.ids, self.g
        variants = [[], [prev]] + [[h] for h in rand]
        guards.step(f"every head's induction score under {len(variants)} cuts")
        sums, cells = induction_under_cuts(self.model, adapter, ids, self.T, self.offset, variants, settings.batch,
                                           self.means)
        ind = pooled_induction(sums, cells)                                                     # [V, L, H]
        # Guard 3 on the guard sequences: the batched re-scoring pooled over them equals
        # scores.induction_scores of them run under cut_heads.
        guards.step("guard batched_vs_loop: induction scores under 3 cuts, one at a time")
        looped = []
        for v in (0, 1, 2):
            with cut_heads(adapter, variants[v], self.means):
                looped.append(induction_scores(self.model, adapter, ids[:g], self.T, self.offset, settings.batch))
        guards.loop(pooled_induction(sums[:3], cells, g), torch.stack(looped),
                    f"5b induction scores of every head on {g} sequences: intact, previous-token cut, first random "
                    "cut", attention=True)
        intact, after, rnd = ind[0].double().numpy(), ind[1].double().numpy(), ind[2:].double().numpy()
        thr = settings.circuit.half_threshold
        above = intact > thr
        rows = []
        for rank, (l, h) in enumerate(targeted, start=1):
            shifts = rnd[:, l, h] - intact[l, h]
            j = int(np.argmax(np.abs(shifts)))
            rows.append(dict(rank=rank, layer=l, head=h, kv_group=adapter.kv_group(h),
                             label=head_label(l, h), scores_induction=_score(scores, (l, h), "induction"),
                             intact=intact[l, h], after_prev_cut=after[l, h],
                             prev_shift=after[l, h] - intact[l, h],
                             random_max_shift=shifts[j], random_max_shift_head=head_label(*rand[j]),
                             random_at_max_shift=rnd[j, l, h]))
        sc = pd.DataFrame(rows)
        sc["prev_head"] = head_label(*prev)
        sc["prev_score"] = _score(scores, prev, "prev")
        sc["half_threshold"] = thr
        sc["n_above_threshold"] = int(above.sum())
        sc["n_lose_half_prev_cut"] = int((above & (after < intact / 2)).sum())
        sc["n_lose_half_random_max"] = max(int((above & (r < intact / 2)).sum()) for r in rnd)
        sc["n_random_draws"] = len(rand)
        return sc

    def losses(self, best: Head, prev: Head, rand: list[Head]) -> pd.DataFrame:
        """The loss on the circuit set, copy 2 with copy 1 as control: intact, the best induction head cut,
        the previous-token head cut, each random head cut (mean, min and max over them)."""
        settings, guards, ids, g = self.settings, self.guards, self.ids, self.g
        c1, c2 = copy_positions(self.T, self.offset)
        positions = torch.cat([c1, c2])
        loss_variants = [[], [best], [prev]] + [[h] for h in rand]
        guards.step(f"the loss under {len(loss_variants)} cuts")
        runner = BatchedCuts(self.model, self.adapter, ids, positions, settings.batch, means=self.means)
        reduce = token_losses(ids, positions)
        losses = runner.run_variants(loss_variants, reduce).cpu()
        guards.step("guard batched_vs_loop: the loss under 3 cuts, one at a time")
        looped = loop_cuts(self.model, self.adapter, ids[:g], loss_variants[:3], reduce, positions, settings.batch,
                           self.means).cpu()
        guards.loop(losses[:3, :g], looped,
                    f"5b loss per token (nats) on {g} sequences: intact, best induction cut, previous-token cut")
        n1 = len(c1)
        per = torch.stack([losses[:, :, :n1].mean(dim=(1, 2)), losses[:, :, n1:].mean(dim=(1, 2))],
                          dim=1).double().numpy()
        rows = []
        for cond, vs in (("intact", [0]), ("random head", list(range(3, 3 + len(rand)))),
                         ("best induction head", [1]), ("previous-token head", [2])):
            row = dict(condition=cond, heads=[heads_label(loss_variants[v]) for v in vs],
                       n_heads_cut=len(loss_variants[vs[0]]), n_draws=len(vs))
            for c, name in ((0, "copy1"), (1, "copy2")):
                x = per[vs, c]
                row.update({f"loss_{name}": x.mean(), f"loss_{name}_min": x.min(), f"loss_{name}_max": x.max()})
            rows.append(row)
        return pd.DataFrame(rows)


def _score(scores: pd.DataFrame, head: Head, name: str) -> float:
    """One head's score ``name`` in a scores table, read by its (layer, head) key."""
    row = scores[(scores.layer == head[0]) & (scores["head"] == head[1])]
    return float(row[name].iloc[0])


def _distinct_singles(pool: Sequence[Head], draws: int, seed: int) -> list[Head]:
    """``draws`` distinct heads from ``pool`` (one per random cut), reproducible from ``seed``."""
    return random_heads(pool, draws, 1, seed, "circuit")[0] if draws else []


# ----------------------------------------------------------------- 5c
def _phrase_ids(row) -> torch.Tensor:
    return torch.tensor(list(row.token_ids), dtype=torch.long).reshape(1, -1)


def prose_losses(model, adapter: Adapter, prose: pd.DataFrame, variants: Sequence[Sequence[Head]],
                 guards: AblationGuards, settings: AblationSettings, means: torch.Tensor | None) -> np.ndarray:
    """Loss per token (nats) on the prose sentences under each variant's cut: ``[V]``.

    Every next-token prediction of every sentence counts (position ``t`` predicts ``t+1``,
    ``t = 0 .. len-2``), pooled over the sentences (a mean per token, not per sentence). Sentences
    differ in length, so each runs alone. Guard 3: every variant again one at a time, on the
    quantity returned, each variant's pooled loss (protocol §5c says why not per prediction)."""
    batched, looped = [], []
    guards.step(f"the prose loss under {len(variants)} cuts, batched and one at a time (guard batched_vs_loop)")
    for row in prose.itertuples():
        ids = _phrase_ids(row)
        if ids.shape[1] < 2:
            raise ValueError(f"prose sentence {row.seq} has {ids.shape[1]} token(s): nothing to predict")
        positions = torch.arange(ids.shape[1] - 1)
        reduce = token_losses(ids, positions)
        runner = BatchedCuts(model, adapter, ids, positions, settings.batch, means=means)
        batched.append(runner.run_variants(variants, reduce).cpu()[:, 0])                   # [V, P]
        looped.append(loop_cuts(model, adapter, ids, variants, reduce, positions, settings.batch,
                                means).cpu()[:, 0])
    n = sum(b.shape[1] for b in batched)
    pooled = torch.cat(batched, dim=1).double().mean(dim=1)                                 # [V]
    pooled_loop = torch.cat(looped, dim=1).double().mean(dim=1)
    guards.loop(pooled, pooled_loop, f"5c prose loss per token (nats, the mean over {n} predictions of "
                f"{len(prose)} sentences), {len(variants)} variants")
    return pooled.numpy()


CUT_SCOPES = ("global", "specific")


def cut_scope(rise: float, global_nats: float) -> str:
    """§5c: ``global`` when a cut raises the prose loss by more than ``global_nats``, else ``specific``."""
    return CUT_SCOPES[0] if rise > global_nats else CUT_SCOPES[1]


def attribution_tables(model, adapter: Adapter, phrases: pd.DataFrame, prose: pd.DataFrame,
                       settings: AblationSettings, guards: AblationGuards, eval_df: pd.DataFrame | None = None
                       ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """5c: probability of each phrase's expected token with every head cut alone.

    ``settings``: of the ``ablation`` config slice, it reads attribution.no_effect_points,
    attribution.together, attribution.global_loss_nats, method, batch, rounding_factor, hook_tolerance.
    Cuts by the configured method (mean cuts take their means over ``eval_df``).

    Each phrase's costliest head is also cut on the ``prose`` sentences: the loss per token there
    intact and with it cut says whether the cut breaks the model everywhere (``cut_scope`` =
    ``global``: the loss rises by more than ``global_loss_nats``) or only this prediction
    (``specific``).
    """
    settings.need("attribution")
    thr, together = settings.attribution.no_effect_points, settings.attribution.together
    global_nats = settings.attribution.global_loss_nats
    method = settings.method
    guards.step("the heads' means on the eval set" if method == "mean" else "the cut method")
    means = method_means(model, adapter, method, eval_df, settings.batch)
    guards.hook(means, (), settings.hook_tolerance)
    heads = adapter.heads()
    attr_rows, summary, pairs = [], [], []
    for row in phrases.itertuples():
        guards.step(f"cut every head on {row.phrase!r}, batched and one per layer at a time (guard batched_vs_loop)")
        ids = _phrase_ids(row)
        last = torch.tensor([ids.shape[1] - 1])
        reduce = prob_of(int(row.expected_id))
        runner = BatchedCuts(model, adapter, ids, last, settings.batch, means=means)
        singles = [[]] + [[h] for h in heads]
        p = runner.run_variants(singles, reduce).cpu()[:, 0, 0].double().numpy()   # [1 + L*H]
        p0 = p[0]
        drops = (p0 - p[1:]) * 100.0
        order = sorted(range(len(heads)), key=lambda i: (-drops[i], heads[i]))
        costly = [heads[i] for i in order[:together]]
        a, b = heads[order[0]], heads[order[1]]
        p2 = runner.run_variants([costly, [a, b]], reduce).cpu()[:, 0, 0].double().numpy()
        # Guard 3: one cut per layer, the intact model, the pair and the N costliest, one at a time.
        probe = [[]] + [[h] for h in heads_one_per_layer(adapter)]
        looped = loop_cuts(model, adapter, ids, probe + [costly, [a, b]], reduce, last, means=means).cpu()[:, 0, 0]
        batched = torch.tensor([p[0]] + [p[1 + heads.index(h[0])] for h in probe[1:]] + list(p2))
        guards.loop(batched, looped.double(), f"5c probability of {row.expected!r} on {row.phrase!r}")
        for (l, h), pc, d in zip(heads, p[1:], drops):
            attr_rows.append(dict(phrase=row.phrase, layer=l, head=h, kv_group=adapter.kv_group(h),
                                  expected=row.expected, p_intact=p0, p_cut=pc, drop_points=d))
        ia, ib = heads.index(a), heads.index(b)
        summary.append(dict(
            phrase=row.phrase, expected=row.expected, p_intact=p0,
            costliest_layer=a[0], costliest_head=a[1], costliest=head_label(*a), costliest_drop=drops[ia],
            no_effect_points=thr, n_no_effect=int((np.abs(drops) < thr).sum()), n_heads=len(heads),
            together=len(costly), together_heads=heads_label(costly), p_together=p2[0],
            drop_together=(p0 - p2[0]) * 100.0))
        pairs.append(dict(phrase=row.phrase, expected=row.expected, p_intact=p0,
                          a=head_label(*a), a_layer=a[0], a_head=a[1],
                          b=head_label(*b), b_layer=b[0], b_head=b[1],
                          drop_a=drops[ia], drop_b=drops[ib], drop_sum=drops[ia] + drops[ib],
                          drop_both=(p0 - p2[1]) * 100.0,
                          nonadditivity=(p0 - p2[1]) * 100.0 - (drops[ia] + drops[ib])))
        log.info("5c %s: p(%r) = %.4f; costliest %s drop %.2f points; %d heads |drop| < %g",
                 row.phrase, row.expected, p0, head_label(*a), drops[ia], summary[-1]["n_no_effect"], thr)
    costliest = list(dict.fromkeys((int(r["costliest_layer"]), int(r["costliest_head"])) for r in summary))
    loss = prose_losses(model, adapter, prose, [[]] + [[h] for h in costliest], guards, settings, means)
    for r in summary:
        cut = loss[1 + costliest.index((r["costliest_layer"], r["costliest_head"]))]
        r.update(prose_loss_intact=loss[0], prose_loss_cut=cut, prose_loss_rise=cut - loss[0],
                 global_loss_nats=global_nats, cut_scope=cut_scope(cut - loss[0], global_nats))
        log.info("5c %s: prose loss %.4f intact, %.4f with %s cut: %s", r["phrase"], loss[0], cut,
                 r["costliest"], r["cut_scope"])
    note = dict(drop_points="percentage points: 100 × (p_intact − p_cut)",
                probability="softmax over the full vocabulary at the phrase's last position, "
                            "of the expected next token",
                no_effect=f"|drop| < {thr} points", together=f"the {together} costliest heads cut together",
                pairs="A, B = the two costliest heads; nonadditivity = drop_both − (drop_a + drop_b)",
                prose_loss="loss per token in nats on the prose sentences, every next-token prediction "
                           "(t = 0 .. len-2) pooled, intact and with the phrase's costliest head cut",
                cut_scope=f"global if prose_loss_cut − prose_loss_intact > {global_nats} nats, else specific",
                method=method, cut=METHOD_NOTE[f"{method}_cut"])
    return pd.DataFrame(attr_rows), pd.DataFrame(summary), pd.DataFrame(pairs), note


# ----------------------------------------------------------------- rules
def phrase_ids(phrases: pd.DataFrame) -> list[torch.Tensor]:
    """Each phrase's token ids as a ``[1, T]`` LongTensor (phrases differ in length)."""
    return [_phrase_ids(row) for row in phrases.itertuples()]


@exact_numerics()
def run_topk(model, adapter: Adapter, eval_df: pd.DataFrame, scores: pd.DataFrame,
             settings: AblationSettings):
    """Rule ablation_topk: (table, parquet note, guard record); a failed guard raises once the table is
    made, carrying it. Each step is a named phase of the call's progress."""
    settings.need("guard_sequences")
    with phases("cut_heads") as step:
        step("the intact model on the guard sequences")
        guards = AblationGuards(model, adapter, ids_tensor(eval_df.head(settings.guard_sequences)), settings.batch,
                                settings.rounding_factor, step)
        table, note = topk_table(model, adapter, eval_df, scores, settings, guards)
        return table, note, guards.finish(dict(topk=table), note)


@exact_numerics()
def run_circuit(model, adapter: Adapter, circuit_df: pd.DataFrame, scores: pd.DataFrame,
                settings: AblationSettings, eval_df: pd.DataFrame | None = None):
    """Rule ablation_circuit: (scores table, loss table, note, guard record). ``eval_df``: the eval
    set, needed by mean cuts. A failed guard raises once the tables are made, carrying them; each step
    is a named phase of the call's progress."""
    settings.need("guard_sequences")
    with phases("cut_circuit") as step:
        step("the intact model on the guard sequences")
        guards = AblationGuards(model, adapter, ids_tensor(circuit_df.head(settings.guard_sequences)), settings.batch,
                                settings.rounding_factor, step)
        sc, loss, note = circuit_tables(model, adapter, circuit_df, scores, settings, guards, eval_df)
        return sc, loss, note, guards.finish(dict(circuit_scores=sc, circuit_loss=loss), note)


@exact_numerics()
def run_attribution(model, adapter: Adapter, phrases: pd.DataFrame, prose: pd.DataFrame,
                    settings: AblationSettings, eval_df: pd.DataFrame | None = None):
    """Rule ablation_attribution: (attribution, summary, pairs, note, guard record). ``prose``: the
    prose sentences (each costliest head's cut scope); ``eval_df``: the eval set, needed by mean cuts.

    The guards run on every phrase. A failed guard raises once the tables are made, carrying them; each
    step is a named phase of the call's progress."""
    with phases("cut_each_head") as step:
        step("the intact model on every phrase")
        guards = AblationGuards(model, adapter, phrase_ids(phrases), settings.batch, settings.rounding_factor, step)
        attr, summary, pairs, note = attribution_tables(model, adapter, phrases, prose, settings, guards, eval_df)
        return attr, summary, pairs, note, guards.finish(dict(attribution=attr, summary=summary, pairs=pairs), note)
