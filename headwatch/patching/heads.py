"""Rule patching_sweep (protocol §5d): every head's ``z`` patched clean → corrupted over every
position, the residual stream (each block's input) and the top heads at one position at a time,
attribution patching's estimate beside the exact scores, and the guards.

:func:`run_patching` is what the rule and :func:`headwatch.patch_heads` call; it returns a
:class:`PatchingResult` (the three tables, their note, the guard record). Its steps, in order, each a
function of its own below:

* :func:`exact_heads` — the clean and corrupted runs (a :class:`~.patcher.Patcher`) and every head's
  ``z`` patched, the exact sweep (:class:`ExactSweeps`; :meth:`ExactSweeps.by_position` adds the
  residual stream and the top heads at one position at a time);
* :func:`estimate_heads` — attribution patching's estimate of every head;
* :func:`heads_table` — the exact and the estimated score of every head side by side, each ranked;
* :func:`guard_runs`, :func:`guard_patches` — the guards of :mod:`.guards` on those runs and patches;
* :func:`position_tables` — the residual stream's and the top heads' tables by position;
* :func:`patching_note` — the note: the prompts, the pairs' separation, the names phrase, the estimate
  against the exact scores, the seconds each took (and the log's summary line).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

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


# ------------------------------------------------------------------ the rule
@dataclass(frozen=True)
class PatchingResult:
    """What :func:`run_patching` returns: the ``heads`` table, the residual stream's (``resid``) and the
    top heads' by position (``positions``; each None where not asked for), their ``note`` and the
    ``guards`` record."""
    heads: pd.DataFrame
    resid: pd.DataFrame | None
    positions: pd.DataFrame | None
    note: dict
    guards: dict


def run_patching(model, adapter, prompts, phrases, settings: PatchingSettings, resid: bool = True,
                 positions: bool = True, on_runs=None) -> PatchingResult:
    """Rule patching_sweep (see the module doc); ``resid`` and ``positions`` False leave out the
    residual stream's sweep (every block's input at every position) and the top heads at one position
    at a time (their tables then None), what a notebook asks for first. ``phrases`` None: no names
    phrase in the note.

    ``settings``: of the ``patching`` config slice, it reads top_k, batch, rounding_factor, guard_prompts,
    phrase. Every guard of :mod:`headwatch.guards` runs (under :func:`headwatch.model.device.exact_numerics`);
    a failure raises :class:`~headwatch.guards.GuardError` once the tables are made, carrying them. Each
    step is a named phase of the call's progress (:func:`headwatch.jobs.phases`). ``on_runs``: called with
    the :class:`~.patcher.Patcher` once the clean and corrupted runs are made, before any patch (what they
    alone say: whether the pairs separate).
    """
    prompt_batch = PromptBatch.of(prompts)
    total = 7 + (prompt_batch.mask is not None) + resid + positions + (phrases is not None)
    with exact_numerics(), phases("patch_heads", total) as step:
        settings.need("top_k", "batch", "rounding_factor", "guard_prompts", *(("phrase",) if phrases is not None else ()))
        records = GuardRecords(step)
        sample = list(range(min(settings.guard_prompts, len(prompt_batch))))
        exact = exact_heads(model, adapter, prompt_batch, settings.batch, step, on_runs)
        guard_runs(records, exact.patcher, sample, settings.rounding_factor)
        estimate, estimate_seconds = estimate_heads(model, adapter, prompt_batch, settings.batch, step)
        table = heads_table(exact, estimate)
        top = top_heads(table, "score", settings.top_k)
        records.check(guards.clean_to_clean, exact.patcher, sample, probe_heads(adapter, top))
        exact.by_position(top, resid, positions, step)
        guard_patches(records, exact, top, sample, settings.rounding_factor)
        resid_table, where_table = position_tables(exact, prompts, table)
        names = None
        if phrases is not None:
            step(f"the phrase {settings.phrase!r}: p(IO), p(S)")
            names = phrase_probabilities(model, adapter, phrases, settings.phrase)
        note = patching_note(prompts, exact, table, top, names, settings, estimate_seconds)
        guarded = records.record(model, dict(heads=table, resid=resid_table, positions=where_table), note)
    return PatchingResult(table, resid_table, where_table, note, guarded)


# ------------------------------------------------------------------ the exact sweeps and the estimate
@dataclass(frozen=True)
class Sweep:
    """One exact sweep: its patches and their patched logit differences ``[patches, prompts]`` (None
    when there are no patches)."""
    patches: list[Patch]
    ld: torch.Tensor | None


class ExactSweeps:
    """The exact sweeps on one :class:`~.patcher.Patcher`'s runs: every head (``heads``, timed with both
    runs: ``seconds``), then, by :meth:`by_position`, the residual stream (``resid``) and the top heads at
    one position at a time (``positions``), each None until run or where not asked for."""

    def __init__(self, patcher: Patcher, heads: Sweep, seconds: float):
        self.patcher, self.heads, self.seconds = patcher, heads, seconds
        self.resid: Sweep | None = None
        self.positions: Sweep | None = None

    def by_position(self, top: list[tuple[int, int]], resid: bool, positions: bool, step) -> None:
        """Every block's input at each position (``resid``) and the ``top`` heads' z at each position
        (``positions``), each one patch per position, batched."""
        p, t0 = self.patcher, time.perf_counter()
        if resid:
            patches = resid_patches(p.adapter, p.length)
            if patches:
                step("patch the residual stream (every layer × position)")
            self.resid = Sweep(patches, p.run(patches) if patches else None)
        if positions:
            patches = position_patches(top, p.length)
            if patches:
                step(f"patch the top {len(top)} heads at each position")
            self.positions = Sweep(patches, p.run(patches) if patches else None)
        log.info("%d residual patches (layer × position) and %d top-head × position patches in %.1f s",
                 len(self.resid.patches) if self.resid else 0, len(self.positions.patches) if self.positions else 0,
                 time.perf_counter() - t0)


def exact_heads(model, adapter, prompts: PromptBatch, batch: int, step, on_runs=None) -> ExactSweeps:
    """The clean and corrupted runs of ``prompts`` (captured by a :class:`~.patcher.Patcher`; handed to
    ``on_runs`` when given) and every head's ``z`` patched over every position: the exact sweep, timed."""
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts")
    patcher = Patcher(model, adapter, prompts, batch)
    if on_runs is not None:
        on_runs(patcher)
    heads = head_patches(adapter)
    step("patch every head")
    head_ld = patcher.run(heads)
    seconds = time.perf_counter() - t0
    log.info("%d prompts of %d tokens: logit difference clean %.4f, corrupted %.4f; %d heads patched in %.1f s",
             patcher.n, patcher.length, patcher.clean_mean, patcher.corrupted_mean, len(heads), seconds)
    return ExactSweeps(patcher, Sweep(heads, head_ld), seconds)


def estimate_heads(model, adapter, prompts: PromptBatch, batch: int, step) -> tuple[np.ndarray, float]:
    """Attribution patching's estimate of every head (:func:`.attribution.attribution_patching`,
    ``[layers, heads]``) and the seconds it took."""
    t0 = time.perf_counter()
    step("attribution patching's estimate")
    estimate = attribution_patching(model, adapter, prompts, batch).numpy()
    return estimate, time.perf_counter() - t0


# ------------------------------------------------------------------ the tables
def heads_table(exact: ExactSweeps, estimate: np.ndarray) -> pd.DataFrame:
    """One row per head: its exact patched logit difference and score beside the estimate's, each
    ranked (1 = the highest score)."""
    p, heads = exact.patcher, exact.heads.patches
    mean = exact.heads.ld.double().mean(dim=1).numpy()
    est_mean = p.corrupted_mean + np.array([estimate[x.layer, x.unit] for x in heads])
    table = pd.DataFrame(dict(layer=[x.layer for x in heads], head=[x.unit for x in heads],
                              label=[head_label(x.layer, x.unit) for x in heads],
                              logit_diff=mean, score=p.score(mean),
                              estimate_logit_diff=est_mean, estimate_score=p.score(est_mean)))
    table["score_rank"] = table["score"].rank(ascending=False, method="min").astype(int)
    table["estimate_rank"] = table["estimate_score"].rank(ascending=False, method="min").astype(int)
    return table


def position_tables(exact: ExactSweeps, prompts: pd.DataFrame,
                    table: pd.DataFrame) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The residual stream's table (``layer, position, token``) and the top heads' by position (``layer,
    head, label, head_rank, position, token``; ``table``: the heads table, their ranks), each with its
    ``logit_diff`` and ``score``; None for a sweep not run."""
    from_end = pairs.from_pairs(prompts)             # a pairs file's prompts: positions counted from the end
    labels = pairs.labels_from_end(prompts) if from_end else position_labels(prompts)
    rank_of = {(r.layer, r.head): int(r.score_rank) for r in table.itertuples()}
    resid = where = None
    if exact.resid is not None:
        ps = exact.resid.patches
        resid = pd.DataFrame(dict(layer=[p.layer for p in ps], position=[p.position for p in ps],
                                  token=[labels[p.position] for p in ps]))
        _scores(resid, exact.resid, exact.patcher, from_end)
    if exact.positions is not None:
        ps = exact.positions.patches
        where = pd.DataFrame(dict(layer=[p.layer for p in ps], head=[p.unit for p in ps],
                                  label=[head_label(p.layer, p.unit) for p in ps],
                                  head_rank=[rank_of[(p.layer, p.unit)] for p in ps],
                                  position=[p.position for p in ps], token=[labels[p.position] for p in ps]))
        _scores(where, exact.positions, exact.patcher, from_end)
    return resid, where


def _scores(table: pd.DataFrame, sweep: Sweep, patcher: Patcher, from_end: bool) -> None:
    """``table`` (one row per patch of ``sweep``) given each patch's ``logit_diff`` and ``score``: the
    means over the prompts; for a pairs file's prompts (``from_end``), positions counted from the end
    and the means over the prompts that have the position (:func:`.pairs.position_scores`)."""
    if not sweep.patches:
        return
    if not from_end:
        table["logit_diff"] = sweep.ld.double().mean(dim=1).numpy()
        table["score"] = patcher.score(table["logit_diff"].to_numpy())
        return
    mask = patcher.prompts.mask                      # aligned from the end: -1 = each prompt's last token
    by_position = pairs.position_scores(sweep.ld, [p.position for p in sweep.patches],
                                        torch.ones_like(patcher.prompts.clean) if mask is None else mask,
                                        patcher.clean_ld, patcher.corrupted_ld)
    table["position"] -= patcher.length
    for col in by_position:
        table[col] = by_position[col].to_numpy()


# ------------------------------------------------------------------ the guards
def probe_heads(adapter, top: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The heads the guards patch one at a time: one head per layer, and the top heads."""
    return list(dict.fromkeys(heads_one_per_layer(adapter) + top))


def guard_runs(records: GuardRecords, patcher: Patcher, sample: list[int], rounding_factor: float) -> None:
    """The guards of the patcher's runs on the ``sample`` prompts: nothing patched is the corrupted run,
    everything patched the clean run; for prompts of different lengths, each padded prompt as when run
    alone (the guard prompts and the first prompt of each length)."""
    for guard in (guards.nothing_patched, guards.everything_patched):
        records.check(guard, patcher, sample)
    if patcher.prompts.mask is not None:
        lengths = patcher.prompts.mask.sum(dim=1).tolist()
        shortest = list(dict.fromkeys(sample + [lengths.index(n) for n in sorted(set(lengths))]))
        records.check(guards.padded_vs_alone, patcher, shortest, rounding_factor)


def guard_patches(records: GuardRecords, exact: ExactSweeps, top: list[tuple[int, int]], sample: list[int],
                  rounding_factor: float) -> None:
    """The batched sweeps against one patch per forward pass (:func:`headwatch.guards.batched_vs_loop`) on
    the ``sample`` prompts: one head per layer and the top heads (every position), the last position and
    a name's position of every block's input, the top head at every position."""
    p = exact.patcher
    slot = int((p.prompts.clean != p.prompts.corrupted).any(dim=0).nonzero()[0, 0])     # the first name's position
    heads, resid, where = exact.heads, exact.resid, exact.positions
    probe = ([(heads, heads.patches.index(Patch("z", l, h))) for l, h in probe_heads(p.adapter, top)]
             + [(resid, resid.patches.index(Patch("resid_in", l, None, q)))
                for l in range(p.adapter.n_layers) for q in sorted({slot, p.length - 1}) if resid and resid.patches]
             + [(where, i) for i in range(p.length) if where and where.patches])
    patches = [sweep.patches[i] for sweep, i in probe]
    with records.guard("batched_vs_loop"):
        records.add(batched_vs_loop(
            p.against_loop(patches, torch.stack([sweep.ld[i, sample] for sweep, i in probe]), sample),
            rounding(p.adapter, rounding_factor, p.largest_logit),
            "logit difference answer − distractor of every guard prompt: the batched sweep vs one patch per forward "
            "pass", prompts=len(sample)))


# ------------------------------------------------------------------ the note
ESTIMATE_NOTE = ("attribution patching: corrupted + sum over prompts, positions and the head's slice of d(metric)/dz "
                 "(corrupted run) x (z clean - z corrupted); one forward and one backward pass per batch of prompts")


def patching_note(prompts: pd.DataFrame, exact: ExactSweeps, table: pd.DataFrame, top: list[tuple[int, int]],
                  names: dict | None, settings: PatchingSettings, estimate_seconds: float) -> dict:
    """The tables' note — the prompts and their logit differences, whether the pairs separate, the names
    phrase's probabilities (``names``, :func:`phrase_probabilities`; None: none), the estimate against the
    exact scores, the seconds of each, the top heads — and its summary in the log."""
    p = exact.patcher
    labels = pairs.labels_from_end(prompts) if pairs.from_pairs(prompts) else position_labels(prompts)
    top10 = min(10, len(table))
    overlap = len(set(top_heads(table, "score", top10)) & set(top_heads(table, "estimate_score", top10)))
    note = dict(task_note(prompts), prompts=len(prompts), length=p.length, position_labels=labels,
                clean_logit_diff=p.clean_mean, corrupted_logit_diff=p.corrupted_mean,
                **separation.of_patcher(p, settings.rounding_factor),
                **(dict(names_phrase=f"{names['phrase']}: p(IO = {names['io']!r}) = {names['p_io']:.4g}, "
                                     f"p(S = {names['s']!r}) = {names['p_s']:.4g} at its last position",
                        names_phrase_p_io=names["p_io"], names_phrase_p_s=names["p_s"]) if names else {}),
                estimate=ESTIMATE_NOTE,
                **{f"estimate_{key}": v for key, v in correlations(table["score"], table["estimate_score"]).items()},
                estimate_top10_overlap=overlap, top10=top10,
                top10_note="heads in both top-10 lists (exact score and estimate, each by score descending)",
                exact_seconds=round(exact.seconds, 3), estimate_seconds=round(estimate_seconds, 3),
                seconds_note=f"wall-clock seconds in this rule on {p.device.type}: the exact head sweep "
                             "(both runs captured, every head patched, batched) and the estimate (one clean "
                             "forward, one corrupted forward and backward per batch)",
                top_k=settings.top_k, top_heads=" ".join(head_label(*h) for h in top))
    log.info("patching: clean %.4f, corrupted %.4f; top heads %s; estimate pearson %s, top-10 overlap %d/%d; "
             "exact %.1f s, estimate %.2f s", p.clean_mean, p.corrupted_mean, note["top_heads"],
             note.get("estimate_pearson"), overlap, top10, exact.seconds, estimate_seconds)
    return note


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
