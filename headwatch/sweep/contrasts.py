"""A contrast per study (protocol §7, "Studies"): each comparison a study exists for, fixed before
any data by its ``study`` block and grid (:func:`headwatch.settings.sweep.contrast_arms`), as a
difference in bits per character — arm − reference, so positive means the arm is worse — with its
percentile bootstrap interval over seeds and a computed verdict (``{study}_contrasts.parquet``,
written by the study's job beside its summary).

* **Metric**: bits per character of each run: the sampled validation windows' final loss ÷ ln 2
  (``experts``, ``depth``, ``kv``), the whole validation split's (``vocab``: ``val_full_bpc``),
  as in the study's summary.
* **Paired by seed** when the two arms see the same training windows in the same order for a seed
  (:func:`headwatch.settings.sweep.shares_data_order`: one sweep's arms do unless they read
  different vocabularies): the mean over the seeds of the per-seed difference, its interval from
  resamples of the seeds, so that the data order's part of the seed noise, which both arms share,
  cancels. **Unpaired** otherwise (two vocabularies): mean − mean, each arm's seeds resampled on
  their own. Both through :func:`headwatch.sweep.course.mean_interval` (``sweep.summary.bootstrap``).
* **Verdict**: ``resolved`` when the interval excludes 0 (the sign says which arm is better),
  ``not resolved`` when it holds 0, ``too few seeds`` with fewer than :data:`MIN_SEEDS` seeds
  (no interval is computed: with 2 seeds the percentile interval of their mean is the two values
  themselves). ``interval_is_range``: the interval reaches the smallest and the largest per-seed
  difference (each extreme resample, every draw the same seed, has probability n⁻ⁿ, at least the
  interval's tail when n ≤ 3 at 95 %): *resolved* then means that every seed's difference has the
  same sign, which seed noise alone, symmetric about 0, gives 2¹⁻ⁿ of the time (:func:`range_caveat`).
* ``extremes`` (``selected``): the worst arm − the best, both picked from these losses; its paired
  interval describes the gap, so *resolved* also needs the relabelling test of the head split
  (:func:`headwatch.sweep.summary.relabelling_p`, ``relabel_p`` < 1 − level), as ``split_resolved``.
* **Beside** each contrast (its kind's ``beside``, :data:`headwatch.settings.kinds.KINDS`), both arms' own
  numbers from the study's summary that the loss is weighed against (``arm_<column>``,
  ``reference_<column>``), and the columns its kind's ``extra`` adds: for ``kv`` the KV-cache bytes per
  token saved and **nats per byte saved** = difference × ln 2 ÷ bytes saved with its interval (the bytes
  are fixed by the shapes: the difference's interval, scaled).

Tables only, no torch.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..settings.kinds import CONTRASTS, KINDS
from ..settings.sweep import CHAR, BootstrapSettings, StudySettings, contrast_arms, shares_data_order, study_arm
from ..tableio import assert_finite
from .course import mean_interval
from .summary import MIN_SEEDS, SummaryError, at_reading, relabelling_p  # MIN_SEEDS: per arm, shared seeds when paired

VERDICTS = ("resolved", "not resolved", "too few seeds")
FLOAT_COLUMNS = ("diff_lo", "diff_hi", "relabel_p", "nats_per_byte_saved", "nats_per_byte_saved_lo",
                 "nats_per_byte_saved_hi")


def metric(kind: str) -> tuple[str, str]:
    """(the summary's mean column, what it is) of a study kind's bits per character: the whole validation
    split's where its arms read different vocabularies (the kind's ``vocabularies``), else the sampled
    windows'."""
    if KINDS[kind].vocabularies:
        return "val_full_bpc_mean", "bits per character of the whole validation split (val_full_bpc)"
    return "val_bpc_mean", "bits per character of the sampled validation windows (final val_loss / ln 2)"


def run_bits(finals: pd.DataFrame, kind: str, reading: str = "last") -> pd.Series:
    """Each run's bits per character (:func:`metric`) at ``reading`` (protocol §7, "Two readings": its last
    evaluation or its best), indexed by (shape, seed). A kind whose arms read different vocabularies has
    its metric, the whole validation split, scored at the end of training only: no best reading."""
    if reading == "best" and KINDS[kind].vocabularies:
        raise SummaryError(f"a {kind} study's metric, bits per character of the whole validation split, is scored "
                           "at the end of training only: it has no reading at each run's best")
    if KINDS[kind].vocabularies:
        bits = finals["val_full_bpc"]
    else:
        bits = at_reading(finals, reading)["val_loss"] / math.log(2)
    return pd.Series(bits.to_numpy(dtype=float), index=pd.MultiIndex.from_frame(finals[["shape", "seed"]]))


def study_contrasts(finals: pd.DataFrame, summary: pd.DataFrame, study: StudySettings | dict,
                    bootstrap: BootstrapSettings | dict, reading: str = "last") -> pd.DataFrame:
    """One row per contrast of the study (module docstring) from its runs' finals and its summary, each run
    read at ``reading`` (its last evaluation, the table the study's job writes, or its best: :func:`run_bits`);
    :class:`SummaryError` when a contrast cannot be made (its arms absent, a paired contrast whose
    arms have different seeds, a best reading of a metric scored at the end only)."""
    study, b = StudySettings.of(study), BootstrapSettings.of(bootstrap)
    s = summary.set_index("shape")
    arms = [study_arm(shape, r, r.get("vocab", CHAR)) for shape, r in s.iterrows()]
    vocab = {a["shape"]: a["vocab"] for a in arms}
    name = str(summary["sweep"].iloc[0])
    try:
        planned = contrast_arms(study, arms)
    except ValueError as err:
        raise SummaryError(f"sweep {name!r} ({study.kind} study): {err}") from None
    bits = run_bits(finals, study.kind, reading)
    rows = []
    for c in planned:
        p = None
        if c["arm"] is None:        # extremes: the losses pick the two
            means = bits.groupby(level="shape", sort=False).mean().loc[list(s.index)]
            c = dict(c, arm=means.idxmax(), reference=means.idxmin())
            p = _relabelling(bits, list(s.index), b, name)
        rows.append(_row(study.kind, name, c, bits, s, vocab, b, p))
    out = pd.DataFrame(rows)
    out["reading"] = reading
    for col in FLOAT_COLUMNS:
        if col in out:
            out[col] = out[col].astype("Float64")
    for col in KINDS[study.kind].beside:   # the summary's own types (peak memory: <NA> where not recorded)
        for side in ("arm", "reference"):
            out[f"{side}_{col}"] = out[f"{side}_{col}"].astype(summary[col].dtype)
    assert_finite(out, f"{name} study contrasts")
    return out


def _relabelling(bits: pd.Series, shapes: list[str], b: BootstrapSettings, name: str) -> float | None:
    """``extremes``' test (:func:`headwatch.sweep.summary.relabelling_p`) over every arm, aligned by
    seed; None with fewer than :data:`MIN_SEEDS` seeds."""
    by_seed = [bits.loc[shape].sort_index() for shape in shapes]
    if any(not x.index.equals(by_seed[0].index) for x in by_seed):
        raise SummaryError(f"sweep {name!r}: the extremes' relabelling test needs every arm on the same seeds: "
                           + "; ".join(f"{a} {list(x.index)}" for a, x in zip(shapes, by_seed)))
    if len(by_seed[0]) < MIN_SEEDS:
        return None
    return relabelling_p([x.to_numpy() for x in by_seed], b.resamples, np.random.default_rng(b.seed))


def _row(kind: str, name: str, c: dict, bits: pd.Series, s: pd.DataFrame, vocab: dict, b: BootstrapSettings,
         p: float | None) -> dict:
    arm, ref = c["arm"], c["reference"]
    a, r = bits.loc[arm].sort_index(), bits.loc[ref].sort_index()
    paired = shares_data_order([dict(vocab=vocab[arm]), dict(vocab=vocab[ref])])
    if paired and not a.index.equals(r.index):
        raise SummaryError(f"sweep {name!r}: {arm} and {ref} share their data order, so their contrast is paired "
                           f"by seed, but their seeds differ: {list(a.index)} vs {list(r.index)}")
    n = len(a) if paired else min(len(a), len(r))
    diff, lo, hi = float(a.mean() - r.mean()), None, None
    if n >= MIN_SEEDS:
        _, lo, hi = mean_interval((a - r).tolist(), b) if paired else mean_interval(a.tolist(), b, minus=r.tolist())
    tail = (1 - b.level) / 2
    reach = float(n) ** -n if paired else float(len(a)) ** -len(a) * float(len(r)) ** -len(r)
    resolved = lo is not None and (lo > 0 or hi < 0) and (p is None or p < 1 - b.level)
    row = dict(sweep=name, kind=kind, contrast=c["contrast"], arm=arm, reference=ref, selected=c["contrast"] == "extremes",
               paired=paired, seeds=n, arm_seeds=len(a), reference_seeds=len(r), arm_bpc=float(a.mean()),
               reference_bpc=float(r.mean()), diff=diff, diff_lo=lo, diff_hi=hi, level=b.level,
               resamples=b.resamples, resample_seed=b.seed, relabel_p=p,
               verdict="too few seeds" if lo is None else "resolved" if resolved else "not resolved",
               interval_is_range=bool(lo is not None and reach >= tail))
    for col in KINDS[kind].beside:
        row[f"arm_{col}"], row[f"reference_{col}"] = s.loc[arm, col], s.loc[ref, col]
    if KINDS[kind].extra:
        row.update(KINDS[kind].extra(s.loc[arm], s.loc[ref], diff, lo, hi))
    return row


def contrasts_note(study: StudySettings | dict, bootstrap: BootstrapSettings | dict) -> dict:
    """What a contrasts table's metadata says about its numbers."""
    study, b = StudySettings.of(study), BootstrapSettings.of(bootstrap)
    return dict(study=study.kind, contrasts={n: CONTRASTS[n].meaning for n in study.contrast_names},
                metric=metric(study.kind)[1], diff="arm − reference (positive: the arm is worse)",
                bootstrap=dict(resamples=b.resamples, seed=b.seed, level=b.level), min_seeds=MIN_SEEDS,
                paired="by seed when both arms read the same vocabulary (the same training windows in the same "
                "order for a seed); otherwise each arm's seeds resampled on their own",
                verdict="resolved: the interval excludes 0 (extremes: and relabel_p < 1 - level); not resolved: "
                f"it holds 0; too few seeds: fewer than {MIN_SEEDS}, no interval")


# ------------------------------------------------------------------ in words
def better(c) -> str | None:
    """The arm a resolved contrast finds better (lower bits per character); None when not resolved."""
    if c["verdict"] != "resolved":
        return None
    return c["arm"] if c["diff"] < 0 else c["reference"]


def contrast_sentence(c) -> str:
    """One contrast in plain words with the numbers that decide its verdict (the figure's and the
    page's)."""
    n = int(c["seeds"])
    text = f"{c['arm']} − {c['reference']}: {c['diff']:+.4f} bits/char"
    if c["verdict"] == "too few seeds":
        return (text + f" over {n} seed{'s' * (n != 1)}: too few seeds for an interval (a verdict needs "
                f"{MIN_SEEDS}), no verdict")
    how = "paired by seed" if c["paired"] else "unpaired: the arms read different tokens"
    text += (f" ({100 * c['level']:g} % interval {c['diff_lo']:+.4f} to {c['diff_hi']:+.4f}, {how}, {n} seeds"
             + (f"; both picked from these losses, relabelling p = {c['relabel_p']:.3g}" if c["selected"] else "")
             + ")")
    if c["verdict"] == "resolved":
        return text + f": resolved, {better(c)} better"
    if c["selected"] and (c["diff_lo"] > 0 or c["diff_hi"] < 0):
        return text + (f": not resolved — the interval excludes 0, but the two arms were picked as the grid's "
                       f"worst and best, and the arms relabelled at random within each seed give a pair this far "
                       f"apart at least {100 * (1 - c['level']):g} % of the time")
    return text + ": not resolved"


def range_caveat(c) -> str:
    """What *resolved* means when the interval is the range of the per-seed differences (paired,
    few seeds); '' otherwise."""
    if not (c["interval_is_range"] and c["paired"]):
        return ""
    n = int(c["seeds"])
    return (f"with {n} seeds the {100 * c['level']:g} % interval reaches the smallest and the largest per-seed "
            f"difference, so resolved means every seed's difference has the same sign, which seed noise alone "
            f"(symmetric about 0) gives {100 * 2.0 ** (1 - n):g} % of the time")


def beside_text(c) -> str:
    """What the contrast's arms weigh the loss against (their kind's ``beside``), in words (the kind's
    ``beside_text``, :data:`headwatch.settings.kinds.KINDS`; a missing number is None there)."""
    return KINDS[c["kind"]].beside_text({k: None if _missing(v) else v for k, v in dict(c).items()})


def _missing(x) -> bool:
    return x is None or (not isinstance(x, (str, list, tuple, dict)) and bool(pd.isna(x)))
