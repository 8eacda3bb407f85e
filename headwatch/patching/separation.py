"""Do the prompt pairs separate clean from corrupted enough for a normalized score to mean something?
(protocol §5d, "Do the pairs separate?")

Every patching score divides by the gap ``g = clean − corrupted`` of the mean logit differences. Two
things can make that division meaningless, and :func:`separation` tests both:

* **rounding** — each logit difference carries float32 rounding up to the bound ``ε`` of the sweep's
  guard (:func:`headwatch.guards.rounding` at the largest |logit| of both runs): a gap within ``ε`` is
  rounding, and every score is rounding over rounding;
* **the pairs drawn** — ``g`` is the mean of the per-pair gaps ``d_i = clean_i − corrupted_i`` over the
  ``N`` pairs given; a score says what share of *the task's* gap a head restores only where another
  draw of pairs of the same kind gives a gap of the same sign. The 95 % interval of the mean gap is
  Student's t, ``g ± t(0.975, N − 1) · s / √N`` (``s`` the standard deviation of the ``d_i``): exact
  for normally spread gaps at the few pairs a researcher writes by hand, where the percentile
  bootstrap covers too rarely (at ``N = 2`` its 95 % interval is the range of the two values, which
  holds the mean half the time).

The interval, widened by ``ε`` on each side, is the gap's: the pairs **separate** when it excludes 0.
Then every score is known, from its denominator alone, within the factors ``g / high`` to ``g / low``
(the note gives them); when it holds 0 another draw of pairs may give any score of either sign — the
scores are not resolved, and :func:`headwatch.patch_heads` warns (:class:`WeakPairsWarning`). One pair
has no spread: it is judged on rounding alone, and its scores are that pair's.
"""
from __future__ import annotations

import math

import numpy as np

from ..settings.patching import WeakPairsWarning  # noqa: F401  (the warning of weak pairs, torch-free)

LEVEL = 0.95
"""The interval's confidence level."""
KEYS = ("pairs_separate", "gap", "gap_low", "gap_high", "gap_pairs", "gap_rounding", "separation")
"""The keys :func:`separation` adds to a patching table's note."""


def separation(clean_ld, corrupted_ld, rounding_bound: float) -> dict:
    """The note's verdict (:data:`KEYS`) on per-pair logit differences ``clean_ld`` and ``corrupted_ld``
    (one value per pair, in the same order) with ``rounding_bound`` the float rounding a logit difference
    may carry (see the module doc)."""
    d = np.asarray(clean_ld, dtype=np.float64) - np.asarray(corrupted_ld, dtype=np.float64)
    n, gap, eps = len(d), float(d.mean()), float(rounding_bound)
    half = 0.0
    if n >= 2:
        from scipy.special import stdtrit           # Student's t quantile (scipy.stats: seconds to import)

        half = float(stdtrit(n - 1, 0.5 + LEVEL / 2) * d.std(ddof=1) / math.sqrt(n))
    low, high = gap - half - eps, gap + half + eps
    separate = bool(low > 0 or high < 0)
    interval = (f"{LEVEL:.0%} interval {low:.3g} to {high:.3g} over {n} pairs (Student's t, widened by the rounding "
                f"bound {eps:.2g})" if n >= 2 else
                f"one pair: no spread over pairs to judge it by, only the rounding bound {eps:.2g} (the scores are this "
                f"pair's)")
    if separate:
        verdict = (f"the pairs separate clean from corrupted: the gap clean − corrupted {gap:.3g} ({interval}) excludes 0; "
                   f"from the gap alone every score is known within a factor {_factor(gap, low, high)}")
    else:
        verdict = (f"WEAK PAIRS: the gap clean − corrupted {gap:.3g} ({interval}) includes 0 — the pairs do not separate "
                   "clean from corrupted, and the normalized scores (divided by that gap) are noise; choose pairs whose "
                   "clean prompt points at the answer and whose corrupted one does not, or more of them")
    return dict(pairs_separate=separate, gap=gap, gap_low=low, gap_high=high, gap_pairs=n, gap_rounding=eps,
                separation=verdict)


def _factor(gap: float, low: float, high: float) -> str:
    ends = sorted((gap / high, gap / low))
    return f"{ends[0]:.2f} to {ends[1]:.2f}"


def headline(note: dict) -> str | None:
    """The verdict as a figure's or a page's line says it (None: a note made before the verdict was kept)."""
    if "pairs_separate" not in note:
        return None
    if not note["pairs_separate"]:
        return (f"WEAK PAIRS: gap {note['gap']:.3g}, {LEVEL:.0%} interval {note['gap_low']:.3g} to "
                f"{note['gap_high']:.3g} includes 0 — the scores are noise")
    return (f"the pairs separate: gap {note['gap']:.3g}, {LEVEL:.0%} interval {note['gap_low']:.3g} to "
            f"{note['gap_high']:.3g} over {note['gap_pairs']} pair{'s' * (note['gap_pairs'] != 1)}")


def of_patcher(patcher, rounding_factor: float) -> dict:
    """:func:`separation` of a :class:`~headwatch.patching.patcher.Patcher`'s prompts, ``rounding_factor`` the
    patching guards' (``patching.rounding_factor``): the note's keys of every table made from its runs."""
    from ..guards import rounding

    bound = rounding(patcher.adapter, rounding_factor, patcher.largest_logit).bound
    return separation(patcher.clean_ld.double().cpu().numpy(), patcher.corrupted_ld.double().cpu().numpy(), bound)
