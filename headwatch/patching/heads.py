"""Rule patching_sweep (protocol §5d): every head's ``z`` patched clean → corrupted over every
position, the residual stream (each block's input) and the top heads at one position at a time,
attribution patching's estimate beside the exact scores, and the guards.

:func:`run_patching` is what the rule and :func:`headwatch.patch_heads` call.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch

from ..ablation.cut import heads_one_per_layer
from ..guards import GuardRecords, batched_vs_loop, rounding
from ..jobs import phases
from ..model.arch import head_label
from ..model.device import exact_numerics
from ..names import top_heads
from . import guards, pairs, separation
from .attribution import attribution_patching
from .batch import PromptBatch
from .patcher import Patch, Patcher, head_patches, position_patches, resid_patches
from .prompts import task_note, position_labels
from ..settings.patching import PatchingError, PatchingSettings

log = logging.getLogger("headwatch.patching.heads")


# ------------------------------------------------------------------ summaries
def ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (1 = smallest), ties sharing the mean of their ranks."""
    return pd.Series(np.asarray(x, dtype=float)).rank(method="average").to_numpy()


def correlations(exact: np.ndarray, estimate: np.ndarray) -> dict:
    """Pearson and Spearman (Pearson of average ranks) correlation; None where either side is
    constant (undefined), with the reason."""
    out = {}
    for name, (a, b) in (("pearson", (exact, estimate)), ("spearman", (ranks(exact), ranks(estimate)))):
        a, b = np.asarray(a, float), np.asarray(b, float)
        out[name] = None if a.std() == 0 or b.std() == 0 else float(np.corrcoef(a, b)[0, 1])
    if out["pearson"] is None:
        out["undefined"] = "one side is constant over the heads"
    return out


def phrase_probabilities(model, adapter, phrases, phrase: str) -> dict:
    """p(expected) and p(also) (softmax over the vocabulary) at the last position of ``phrase``
    in ``phrases.parquet``: the model's IO and S probabilities on the protocol's own prompt."""
    row = phrases[phrases["phrase"] == phrase]
    if len(row) != 1 or row["also_id"].isna().any():
        raise PatchingError(f"patching.phrase = {phrase!r}: phrases.parquet has no such phrase with an "
                            "expected and an also token")
    r = row.iloc[0]
    ids = torch.tensor([list(r.token_ids)], device=next(model.parameters()).device)
    with torch.no_grad():
        p = torch.softmax(adapter.logits(ids, keep=1)[0, -1].double(), -1)
    return {"phrase": phrase, "text": r.text, "io": r.expected, "s": r.also,
            "p_io": float(p[int(r.expected_id)]), "p_s": float(p[int(r.also_id)])}


# ------------------------------------------------------------------ the rule
def run_patching(model, adapter, prompts, phrases, settings: PatchingSettings, resid: bool = True,
                 positions: bool = True):
    """Rule patching_sweep: (heads, resid, positions tables, their note, the guard record); ``resid``
    and ``positions`` False leave out the residual stream's sweep (every block's input at every
    position) and the top heads at one position at a time (their tables then None), what a notebook
    asks for first. ``phrases`` None: no names phrase in the note.

    ``settings``: of the ``patching`` config slice, it reads top_k, batch, rounding_factor, guard_prompts,
    phrase. Every guard of :mod:`headwatch.guards` runs (under :func:`headwatch.model.device.exact_numerics`);
    a failure raises :class:`~headwatch.guards.GuardError` once the tables are made, carrying them. Each
    step is a named phase of the call's progress (:func:`headwatch.jobs.phases`).
    """
    total = 7 + (PromptBatch.of(prompts).mask is not None) + resid + positions + (phrases is not None)
    with exact_numerics(), phases("patch_heads", total) as step:
        return _run_patching(model, adapter, prompts, phrases, settings, resid, positions, step)


def _run_patching(model, adapter, prompts, phrases, settings: PatchingSettings, do_resid: bool, do_positions: bool,
                  step):
    settings.need("top_k", "batch", "rounding_factor", "guard_prompts", *(("phrase",) if phrases is not None else ()))
    batch, k = settings.batch, settings.top_k
    prompt_batch = PromptBatch.of(prompts)
    clean, corrupted, mask = prompt_batch.clean, prompt_batch.corrupted, prompt_batch.mask   # mask: pairs of lengths
    sample = list(range(min(settings.guard_prompts, len(prompts))))
    from_end = pairs.from_pairs(prompts)             # a pairs file's prompts: positions counted from the end
    labels = pairs.labels_from_end(prompts) if from_end else position_labels(prompts)
    records = GuardRecords(step)
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts")
    patcher = Patcher(model, adapter, prompt_batch, batch)
    heads = head_patches(adapter)
    step("patch every head")
    head_ld = patcher.run(heads)
    t_exact = time.perf_counter() - t0
    log.info("%d prompts of %d tokens: logit difference clean %.4f, corrupted %.4f; %d heads patched in %.1f s",
             patcher.n, patcher.length, patcher.clean_mean, patcher.corrupted_mean, len(heads), t_exact)
    for guard in (guards.nothing_patched, guards.everything_patched):
        records.check(guard, patcher, sample)
    if mask is not None:       # the guard prompts and the first prompt of each length
        lengths = mask.sum(dim=1).tolist()
        shortest = list(dict.fromkeys(sample + [lengths.index(n) for n in sorted(set(lengths))]))
        records.check(guards.padded_vs_alone, patcher, shortest, settings.rounding_factor)
    t0 = time.perf_counter()
    step("attribution patching's estimate")
    estimate = attribution_patching(model, adapter, prompt_batch, batch).numpy()
    t_estimate = time.perf_counter() - t0

    mean = head_ld.double().mean(dim=1).numpy()
    est_mean = patcher.corrupted_mean + np.array([estimate[p.layer, p.unit] for p in heads])
    table = pd.DataFrame(dict(layer=[p.layer for p in heads], head=[p.unit for p in heads],
                              label=[head_label(p.layer, p.unit) for p in heads],
                              logit_diff=mean, score=patcher.score(mean),
                              estimate_logit_diff=est_mean, estimate_score=patcher.score(est_mean)))
    table["score_rank"] = table["score"].rank(ascending=False, method="min").astype(int)
    table["estimate_rank"] = table["estimate_score"].rank(ascending=False, method="min").astype(int)
    top = top_heads(table, "score", k)
    records.check(guards.clean_to_clean, patcher, sample, list(dict.fromkeys(heads_one_per_layer(adapter) + top)))

    t0 = time.perf_counter()
    resid = resid_patches(adapter, patcher.length) if do_resid else []
    if resid:
        step("patch the residual stream (every layer × position)")
    resid_ld = patcher.run(resid) if resid else None
    where = position_patches(top, patcher.length) if do_positions else []
    if where:
        step(f"patch the top {len(top)} heads at each position")
    where_ld = patcher.run(where) if where else None
    log.info("%d residual patches (layer × position) and %d top-head × position patches in %.1f s",
             len(resid), len(where), time.perf_counter() - t0)
    # The batched sweep vs one patch per forward pass: one head per layer and the top heads
    # (every position), the last position and a name's position of every block's input, the
    # top head at every position.
    probe_heads = list(dict.fromkeys(heads_one_per_layer(adapter) + top))
    slot = int((clean != corrupted).any(dim=0).nonzero()[0, 0])         # the first name's position
    probe = ([(heads, head_ld, heads.index(Patch("z", l, h))) for l, h in probe_heads]
             + [(resid, resid_ld, resid.index(Patch("resid_in", l, None, p)))
                for l in range(adapter.n_layers) for p in sorted({slot, patcher.length - 1}) if resid]
             + [(where, where_ld, i) for i in range(patcher.length) if where])
    patches = [ps[i] for ps, _, i in probe]
    with records.guard("batched_vs_loop"):
        records.add(batched_vs_loop(
            patcher.against_loop(patches, torch.stack([ld[i, sample] for _, ld, i in probe]), sample),
            rounding(adapter, settings.rounding_factor, patcher.largest_logit),
            "logit difference answer − distractor of every guard prompt: the batched sweep vs one patch per forward "
            "pass", prompts=len(sample)))

    top10 = min(10, len(table))
    overlap = len(set(top_heads(table, "score", top10)) & set(top_heads(table, "estimate_score", top10)))
    rank_of = {(r.layer, r.head): int(r.score_rank) for r in table.itertuples()}
    resid_table = pd.DataFrame(dict(layer=[p.layer for p in resid], position=[p.position for p in resid],
                                    token=[labels[p.position] for p in resid]))
    where_table = pd.DataFrame(dict(layer=[p.layer for p in where], head=[p.unit for p in where],
                                    label=[head_label(p.layer, p.unit) for p in where],
                                    head_rank=[rank_of[(p.layer, p.unit)] for p in where],
                                    position=[p.position for p in where], token=[labels[p.position] for p in where]))
    for tab, ps, ld in ((resid_table, resid, resid_ld), (where_table, where, where_ld)):
        if not ps:
            continue
        if not from_end:
            tab["logit_diff"] = ld.double().mean(dim=1).numpy()
            tab["score"] = patcher.score(tab["logit_diff"].to_numpy())
        else:                  # aligned from the end: -1 = each prompt's last token
            by_position = pairs.position_scores(ld, [p.position for p in ps],
                                                torch.ones_like(clean) if mask is None else mask,
                                                patcher.clean_ld, patcher.corrupted_ld)
            tab["position"] -= patcher.length
            for col in by_position:
                tab[col] = by_position[col].to_numpy()
    if phrases is not None:
        step(f"the phrase {settings.phrase!r}: p(IO), p(S)")
    names = phrase_probabilities(model, adapter, phrases, settings.phrase) if phrases is not None else None
    note = dict(task_note(prompts), prompts=len(prompts), length=patcher.length, position_labels=labels,
                clean_logit_diff=patcher.clean_mean, corrupted_logit_diff=patcher.corrupted_mean,
                **separation.of_patcher(patcher, settings.rounding_factor),
                **(dict(names_phrase=f"{names['phrase']}: p(IO = {names['io']!r}) = {names['p_io']:.4g}, "
                                     f"p(S = {names['s']!r}) = {names['p_s']:.4g} at its last position",
                        names_phrase_p_io=names["p_io"], names_phrase_p_s=names["p_s"]) if names else {}),
                estimate="attribution patching: corrupted + sum over prompts, positions and the head's slice "
                         "of d(metric)/dz (corrupted run) x (z clean - z corrupted); one forward and one "
                         "backward pass per batch of prompts",
                **{f"estimate_{key}": v for key, v in correlations(table["score"], table["estimate_score"]).items()},
                estimate_top10_overlap=overlap, top10=top10,
                top10_note="heads in both top-10 lists (exact score and estimate, each by score descending)",
                exact_seconds=round(t_exact, 3), estimate_seconds=round(t_estimate, 3),
                seconds_note=f"wall-clock seconds in this rule on {patcher.device.type}: the exact head sweep "
                             "(both runs captured, every head patched, batched) and the estimate (one clean "
                             "forward, one corrupted forward and backward per batch)",
                top_k=k, top_heads=" ".join(head_label(*h) for h in top))
    log.info("patching: clean %.4f, corrupted %.4f; top heads %s; estimate pearson %s, top-10 overlap %d/%d; "
             "exact %.1f s, estimate %.2f s", patcher.clean_mean, patcher.corrupted_mean, note["top_heads"],
             note.get("estimate_pearson"), overlap, top10, t_exact, t_estimate)
    resid_table, where_table = resid_table if do_resid else None, where_table if do_positions else None
    guarded = records.record(model, dict(heads=table, resid=resid_table, positions=where_table), note)
    return table, resid_table, where_table, note, guarded
