"""The course of training, read step by step (protocol §7, "the course of a sweep", and §7b):
where each run leaves the loss plateau, where its best previous-token head forms, and how each
arm's gap to a reference arm moves from evaluation to evaluation.

For every planned sweep named in ``sweep.course.sweeps`` (with its reference arm):

* **Leaving the plateau** (:func:`plateau_events`, per run, from its validation curve). The
  early fall from ln V ends at the *arrival*: the first evaluation into which the curve has
  slowed — the fall into it (into the first evaluation: from ln V, the untrained model's loss) at
  least as large as the fall from it to the next — and from which it falls by less than
  ``margin``, or by less than it falls next (by a tenth of the margin: the fall speeds up again, the
  flattest point of a plateau that the evaluations pass within two intervals). Not a start that is slow because the
  learning rate is still warming up (nothing slowed into it), and not, where a run is on its
  plateau at its first evaluations or passes it between two, a later slow stretch below it (the
  warm-up gate and the margin alone of the first rule read the 1-head runs of the laptop-long sweep
  so: protocol §7b). The *plateau level* is the loss at the arrival; the run *leaves the plateau*
  at the first later evaluation whose loss lies ``margin`` or more below that level (<NA> if it
  never does; all <NA> if the curve never flattens: no plateau).
* **The previous-token head forms** (:func:`formation_step` on ``prev``)
  at the first evaluation at which the best head's ``prev`` score reaches ``sweep.heads.threshold``
  (the induction formation step's threshold and reasoning, §7b).
* Per shape (:func:`event_summary`): the mean over seeds of the plateau level, the two steps and
  their lag (formation − leaving, paired per run), each with its percentile bootstrap interval
  over seeds (``sweep.summary.bootstrap``), from the runs that have the event, counted.
* **Gaps** (:func:`gaps`): at every evaluation step, each arm's validation loss minus the
  reference arm's, paired by seed (every arm of a seed sees the same data in the same order),
  mean over seeds with its percentile bootstrap interval; every step's interval from the same
  resamples of the seeds.
* **Verdicts** (:func:`gaps`, protocol §7): the gap's *order* is the sign of its first clear
  gap — the first evaluation whose interval excludes 0 with a mean at least ``margin`` in size
  (without one, the sign of its largest mean); its *peak* is the evaluation of the largest mean
  gap in that order. ``flips`` when the interval at the last evaluation lies wholly
  on the other side of 0 (with the crossover step: the first evaluation after the peak from
  which the mean gap keeps the other sign to the end, and its interval over the same
  resamples); ``narrows`` when it does not flip and the interval at the end lies wholly below
  the peak's; ``holds`` when the interval at the end excludes 0 on the peak's side and does not
  lie below the peak's; ``not resolved`` otherwise (the end's interval holds 0 and overlaps the
  peak's). Nothing is extrapolated beyond the last evaluation.

Which sweeps and references are read is the sweep's settings'
(:func:`headwatch.settings.sweep.course_sweeps`); the tables are :data:`headwatch.paths.COURSE_TABLES`.
No torch: the rule reads tables only.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .. import paths
from ..settings.sweep import BootstrapSettings
from ..tableio import read_note, read_parquet
from .summary import SummaryError, markdown_table
from .summary import percentile_interval

RUN_KEYS = ("sweep", "shape", "width", "heads", "seed")
VERDICTS = ("holds", "narrows", "flips", "not resolved")


# ------------------------------------------------------------------ one run's events
def formation_step(heads: pd.DataFrame, threshold: float, score: str = "induction") -> int | None:
    """The first step at which the best head's ``score`` reaches ``threshold`` in a run's head
    records (``heads.parquet``); None if never (§7b: the induction head on either probe, the
    previous-token head on ``prev``). Here, not in :mod:`headwatch.sweep.heads`, so that reading
    records needs no torch."""
    best = heads.groupby("step")[score].max().sort_index()
    formed = best[best >= threshold]
    return None if formed.empty else int(formed.index[0])


def plateau_events(steps, losses, margin: float, start: float | None = None) -> dict:
    """Where one run's validation curve arrives on its plateau, the plateau level, and where it
    leaves it (module docstring); each None when it does not happen. ``start``: the loss before the
    first evaluation (ln V: the untrained model predicts uniformly); None: unknown, and the first
    evaluation cannot be the arrival."""
    steps = np.asarray(steps, dtype=np.int64)
    losses = np.asarray(losses, dtype=float)
    if len(steps) != len(losses) or np.any(np.diff(steps) <= 0):
        raise ValueError("plateau_events needs one loss per evaluation step, steps increasing")
    none = dict(plateau_step=None, plateau_loss=None, leave_step=None)
    falls = losses[:-1] - losses[1:]                                   # evaluation i -> i + 1
    into = np.concatenate([[-np.inf if start is None else start - losses[0]], falls[:-1]])[:len(falls)]
    speeds_up = np.concatenate([falls[1:] > falls[:-1] + margin / 10, [False]])   # the next fall is larger
    arrivals = np.flatnonzero((into >= falls) & ((falls < margin) | speeds_up))
    if not len(arrivals):
        return none
    i = int(arrivals[0])
    level = float(losses[i])
    below = np.flatnonzero(losses[i + 1:] <= level - margin)
    return dict(plateau_step=int(steps[i]), plateau_loss=level,
                leave_step=int(steps[i + 1 + below[0]]) if len(below) else None)


def run_events(metrics: pd.DataFrame, records: pd.DataFrame, margin: float, threshold: float,
               start: float | None = None) -> dict:
    """One run's plateau, leaving and previous-token formation steps, the best previous-token
    score when it leaves, and their lag (formation − leaving); its last and its best validation loss
    (protocol §7, "Two readings": the first evaluation of the lowest, ``best_step``) and the rise
    between them; ``start``: ln V of its vocabulary."""
    m = metrics.dropna(subset=["val_loss"]).sort_values("step")
    ev = plateau_events(m["step"], m["val_loss"], margin, start)
    prev = formation_step(records, threshold, "prev")
    best_prev = records.groupby("step")["prev"].max()
    leave = ev["leave_step"]
    best = int(np.argmin(m["val_loss"].to_numpy(dtype=float)))
    return dict(ev, prev_step=prev, prev_at_leave=float(best_prev.get(leave)) if leave is not None else None,
                lag=prev - leave if prev is not None and leave is not None else None,
                final_prev=float(best_prev.iloc[-1]), final_loss=float(m["val_loss"].iloc[-1]),
                best_step=int(m["step"].iloc[best]), best_loss=float(m["val_loss"].iloc[best]),
                rise=float(m["val_loss"].iloc[-1] - m["val_loss"].iloc[best]))


INT_EVENTS = ("plateau_step", "leave_step", "prev_step", "lag")
FLOAT_EVENTS = ("plateau_loss", "prev_at_leave")


def events_table(runs: list[dict], margin: float, threshold: float) -> pd.DataFrame:
    """One row per run (``runs``: dicts with :data:`RUN_KEYS`, ``metrics``, ``records`` and, where
    known, ``start``: ln V of its vocabulary); a missing event is <NA>."""
    rows = [dict({k: r[k] for k in RUN_KEYS},
                 **run_events(r["metrics"], r["records"], margin, threshold, r.get("start"))) for r in runs]
    out = pd.DataFrame(rows)
    for col in INT_EVENTS:
        out[col] = out[col].astype("Int64")
    for col in FLOAT_EVENTS:
        out[col] = out[col].astype("Float64")
    return out


# ------------------------------------------------------------------ intervals over seeds
def mean_interval(values, bootstrap: BootstrapSettings | dict,
                  minus=None) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of the percentile bootstrap interval of the mean of ``values`` (None where
    there are none; the interval of one value is that value). ``minus``: a second sample, not paired
    with the first (each of at least 2 values): then of mean(values) − mean(minus), each sample
    resampled on its own."""
    # scipy here, not at the top: every training job imports this module (through sweep.heads) and
    # never bootstraps, and importing scipy.stats takes 1.9 s.
    from scipy import stats

    b = BootstrapSettings.of(bootstrap)
    v = np.asarray([x for x in values if pd.notna(x)], dtype=float)
    w = None if minus is None else np.asarray([x for x in minus if pd.notna(x)], dtype=float)
    if not len(v) or (w is not None and not len(w)):
        return None, None, None
    samples = (v,) if w is None else (v, w)
    if all(len(s) == 1 or np.all(s == s[0]) for s in samples):
        value = float(v[0] - (0 if w is None else w[0]))
        return value, value, value
    estimate = float(v.mean() - (0 if w is None else w.mean()))
    boot = stats.bootstrap(samples, np.mean if w is None else _mean_difference, n_resamples=b.resamples,
                           method="percentile", confidence_level=b.level, rng=np.random.default_rng(b.seed))
    return estimate, float(boot.confidence_interval.low), float(boot.confidence_interval.high)


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """mean(a) − mean(b) along ``axis`` (resamples of two samples that are not paired)."""
    return a.mean(axis=axis) - b.mean(axis=axis)


def event_summary(events: pd.DataFrame, bootstrap: BootstrapSettings | dict) -> pd.DataFrame:
    """Per shape: the runs, how many left the plateau and formed a previous-token head, and the
    mean with its interval of the plateau level, the two steps and their lag (over the runs that
    have them), and of where each run's validation loss was lowest and how far it rose after."""
    rows = []
    for keys, g in events.groupby(["sweep", "shape", "width", "heads"], sort=False):
        row = dict(zip(("sweep", "shape", "width", "heads"), keys), seeds=len(g),
                   left=int(g["leave_step"].notna().sum()), formed=int(g["prev_step"].notna().sum()))
        rows.append(with_intervals(row, g, ("plateau_loss", "leave_step", "prev_step", "lag", "best_step", "rise"),
                                   bootstrap))
    return interval_frame(rows, ["sweep", "width", "heads"])


def with_intervals(row: dict, runs: pd.DataFrame, columns, bootstrap: dict) -> dict:
    """``row`` with each of ``columns``' mean over ``runs`` and its interval (:func:`mean_interval`) as
    ``<column>_mean``, ``_lo`` and ``_hi``."""
    for col in columns:
        row[f"{col}_mean"], row[f"{col}_lo"], row[f"{col}_hi"] = mean_interval(runs[col].tolist(), bootstrap)
    return row


def interval_frame(rows: list[dict], order: list[str]) -> pd.DataFrame:
    """The rows of :func:`with_intervals` as a table (the intervals nullable floats), sorted by ``order``."""
    out = pd.DataFrame(rows)
    for col in out.columns:
        if col.endswith(("_mean", "_lo", "_hi")):
            out[col] = out[col].astype("Float64")
    return out.sort_values(order, ignore_index=True)


# ------------------------------------------------------------------ gaps and their verdicts
def paired_losses(curves: pd.DataFrame, arm: str, reference: str) -> pd.DataFrame:
    """(steps × seeds) of arm − reference validation loss, on the seeds and steps both have; raises
    :class:`SummaryError` when their seeds differ (the gap is paired by seed)."""
    piv = {a: curves[curves["shape"] == a].pivot(index="step", columns="seed", values="val_loss")
           for a in (arm, reference)}
    if list(piv[arm].columns) != list(piv[reference].columns):
        raise SummaryError(f"{arm} and {reference} must share their seeds for a paired gap: "
                           f"{list(piv[arm].columns)} vs {list(piv[reference].columns)}")
    steps = piv[arm].index.intersection(piv[reference].index)
    return (piv[arm].loc[steps] - piv[reference].loc[steps]).sort_index()


def _resampled_means(diff: np.ndarray, bootstrap: BootstrapSettings) -> np.ndarray:
    """(steps, resamples) means over seeds of ``diff`` (steps × seeds), every step resampled with
    the same seeds (``scipy.stats.bootstrap``'s resamples of the seed axis)."""
    # scipy here, not at the top: every training job imports this module (through sweep.heads) and
    # never bootstraps, and importing scipy.stats takes 1.9 s.
    from scipy import stats

    if diff.shape[1] < 2:
        return diff.mean(axis=1, keepdims=True)
    with warnings.catch_warnings():    # steps where every seed's gap is equal: a degenerate interval
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        boot = stats.bootstrap((diff,), np.mean, axis=-1, n_resamples=bootstrap.resamples, vectorized=True,
                               method="percentile", confidence_level=bootstrap.level,
                               rng=np.random.default_rng(bootstrap.seed))
    return np.asarray(boot.bootstrap_distribution)


def crossover(means: np.ndarray, steps: np.ndarray, peak: int, direction: int) -> np.ndarray:
    """For each column of ``means`` (steps × k): the first step after index ``peak`` from which the
    gap keeps the sign opposite ``direction`` to the last step; NaN where there is none."""
    other = direction * means < 0                         # (steps, k)
    # keeps[i] = the gap has the other sign at every step from i to the end
    keeps = np.flip(np.logical_and.accumulate(np.flip(other, axis=0), axis=0), axis=0)
    keeps[:peak + 1] = False
    first = np.argmax(keeps, axis=0)
    return np.where(keeps.any(axis=0), steps[first].astype(float), np.nan)


def gap_verdict(end: tuple[float, float], peak: tuple[float, float], direction: int) -> str:
    """The verdict of one gap from its intervals at the end and at the peak (module docstring)."""
    e = sorted(direction * np.asarray(end, dtype=float))
    p = sorted(direction * np.asarray(peak, dtype=float))
    if e[1] < 0:
        return "flips"
    if e[1] < p[0]:
        return "narrows"
    if e[0] > 0:
        return "holds"
    return "not resolved"


def order_and_peak(means: np.ndarray, lo: np.ndarray, hi: np.ndarray, margin: float) -> tuple[int, int]:
    """(direction, peak index) of one gap curve: the sign of its first clear gap (interval excluding
    0, mean at least ``margin`` in size; else of its largest mean), and where the gap is largest in
    that direction."""
    clear = np.flatnonzero(((lo > 0) | (hi < 0)) & (np.abs(means) >= margin))
    first = clear[0] if len(clear) else int(np.argmax(np.abs(means)))
    direction = 1 if means[first] >= 0 else -1
    return direction, int(np.argmax(direction * means))


def gaps(curves: pd.DataFrame, reference: str, bootstrap: BootstrapSettings | dict,
         margin: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(gaps, verdicts) of every arm against ``reference`` (``curves``: one sweep's metrics rows with
    ``shape``, ``seed``, ``step``, ``val_loss``); ``margin``: the size of a clear gap."""
    bootstrap = BootstrapSettings.of(bootstrap)
    level = bootstrap.level
    arms = [a for a in dict.fromkeys(curves["shape"]) if a != reference]
    rows, verdict_rows = [], []
    for arm in arms:
        diff = paired_losses(curves, arm, reference)
        steps, d = diff.index.to_numpy(), diff.to_numpy(dtype=float)
        means = d.mean(axis=1)
        boot = _resampled_means(d, bootstrap)
        tail = (1 - level) / 2
        lo, hi = np.quantile(boot, tail, axis=1), np.quantile(boot, 1 - tail, axis=1)
        ref_mean = curves[curves["shape"] == reference].groupby("step")["val_loss"].mean().loc[steps]
        rows += [dict(arm=arm, reference=reference, step=int(s), gap=float(g), gap_lo=float(a), gap_hi=float(b),
                      seeds=d.shape[1], reference_loss=float(r), arm_loss=float(r + g))
                 for s, g, a, b, r in zip(steps, means, lo, hi, ref_mean)]
        direction, peak = order_and_peak(means, lo, hi, margin)
        verdict = gap_verdict((lo[-1], hi[-1]), (lo[peak], hi[peak]), direction)
        row = dict(arm=arm, reference=reference, verdict=verdict, direction=direction, seeds=d.shape[1],
                   peak_step=int(steps[peak]), peak_gap=float(means[peak]), peak_lo=float(lo[peak]),
                   peak_hi=float(hi[peak]), end_step=int(steps[-1]), end_gap=float(means[-1]),
                   end_lo=float(lo[-1]), end_hi=float(hi[-1]), crossover_step=None, crossover_lo=None,
                   crossover_hi=None, crossover_resamples=0)
        if verdict == "flips":
            row["crossover_step"] = int(crossover(means[:, None], steps, peak, direction)[0])
            resampled = crossover(boot, steps, peak, direction)
            found = resampled[np.isfinite(resampled)]
            row["crossover_resamples"] = int(len(found))
            if len(found):
                row["crossover_lo"], row["crossover_hi"] = percentile_interval(found, level)
        verdict_rows.append(row)
    out = pd.DataFrame(verdict_rows)
    for col in ("crossover_step",):
        out[col] = out[col].astype("Int64")
    for col in ("crossover_lo", "crossover_hi"):
        out[col] = out[col].astype("Float64")
    return pd.DataFrame(rows), out


def course(runs: list[dict], reference: str, margin: float, threshold: float,
           bootstrap: BootstrapSettings | dict) -> dict[str, pd.DataFrame]:
    """Every table of one sweep's course (:data:`headwatch.paths.COURSE_TABLES`): every run's
    validation loss and best previous-token score at every evaluation (``curves``), its events, their
    summary per shape, the gaps and their verdicts."""
    bootstrap = BootstrapSettings.of(bootstrap)
    events = events_table(runs, margin, threshold)
    curves = pd.concat([r["metrics"].dropna(subset=["val_loss"])[["step", "val_loss"]].merge(
        r["records"].groupby("step", as_index=False)["prev"].max().rename(columns={"prev": "best_prev"}),
        on="step", how="left", validate="1:1").assign(**{k: r[k] for k in RUN_KEYS}) for r in runs],
        ignore_index=True)
    curves = curves[[*RUN_KEYS, "step", "val_loss", "best_prev"]]
    if curves["best_prev"].isna().any():
        raise SummaryError("an evaluation step without head records: the heads' records and the metrics must "
                           "share their steps (protocol §7b)")
    gap_table, verdict_table = gaps(curves, reference, bootstrap, margin)
    return dict(curves=curves, events=events, events_summary=event_summary(events, bootstrap), gaps=gap_table,
                verdicts=verdict_table)


# ------------------------------------------------------------------ in words
def verdict_sentence(v) -> str:
    """One gap's verdict with the intervals that decide it."""
    pct = lambda lo, hi: f"{lo:+.4f} to {hi:+.4f}"
    text = (f"{v['arm']} − {v['reference']}: **{v['verdict']}** — peak {v['peak_gap']:+.4f} at step {v['peak_step']} "
            f"({pct(v['peak_lo'], v['peak_hi'])}), at the end (step {v['end_step']}) {v['end_gap']:+.4f} "
            f"({pct(v['end_lo'], v['end_hi'])})")
    if v["verdict"] == "flips":
        text += (f"; crosses 0 at step {v['crossover_step']} (interval {_fmt(v['crossover_lo'])}–"
                 f"{_fmt(v['crossover_hi'])}, {v['crossover_resamples']} resamples with a crossover)")
    return text


def _fmt(x, spec: str = ".0f") -> str:
    return "—" if x is None or pd.isna(x) else format(float(x), spec)


def _with_interval(mean, lo, hi, spec: str = ".0f") -> str:
    return "—" if pd.isna(mean) else f"{_fmt(mean, spec)} ({_fmt(lo, spec)}–{_fmt(hi, spec)})"


def coincidence(events: pd.DataFrame, interval: int) -> str:
    """Is leaving the plateau the previous-token head forming? One sentence from the runs' events:
    how many runs have both, in how many they fall within one evaluation interval of each other,
    which came first in the others, and how many left the plateau without forming one."""
    both = events.dropna(subset=["leave_step", "prev_step"])
    lag = both["lag"].astype(float)
    near = int((lag.abs() <= interval).sum())
    only_left = int((events["leave_step"].notna() & events["prev_step"].isna()).sum())
    only_formed = int((events["leave_step"].isna() & events["prev_step"].notna()).sum())
    text = (f"Of {len(events)} runs, {len(both)} both left the plateau and formed a previous-token head: in {near} of "
            f"them the two events fall within one evaluation interval ({interval} steps) of each other, the head "
            f"formed earlier in {int((lag < -interval).sum())} and later in {int((lag > interval).sum())}")
    if len(both):
        text += f" (lag, formation − leaving: median {lag.median():+.0f} steps, from {lag.min():+.0f} to {lag.max():+.0f})"
    text += (f"; {only_left} left the plateau without forming one (best prev below the threshold throughout), "
             f"{only_formed} formed one without leaving.")
    if len(both) and near == len(both) and not only_left:
        return text + " **Leaving the plateau coincides with the previous-token head forming** in every run."
    if not near:
        return text + " **In no run does leaving the plateau coincide with the previous-token head forming.**"
    return text + (f" **Leaving the plateau coincides with the previous-token head forming in {near} of "
                   f"{len(events)} runs, not in every one.**")


def markdown_section(root, sweep: str, figures: dict[str, str] | None = None, level: str = "##") -> list[str]:
    """A results page's section on one sweep's course (its tables under ``root``): per shape, the
    plateau, leaving and formation steps with their intervals and the reading; every gap's verdict;
    ``figures``: links by key (``events``, ``gaps``)."""
    root = Path(root)
    t = {name: read_parquet(root / paths.course_table(sweep, name)) for name in paths.COURSE_TABLES}
    note = read_note(root / paths.course_table(sweep, "events"))
    s, v = t["events_summary"], t["verdicts"]
    pct = f"{100 * float(note['bootstrap']['level']):g} %"
    interval = int(np.diff(np.sort(t["curves"]["step"].unique())).min()) if t["curves"]["step"].nunique() > 1 else 0
    events = pd.DataFrame({
        "shape": s["shape"], "heads": s["heads"], "seeds": s["seeds"],
        "plateau level (nats)": [_with_interval(m, lo, hi, ".3f") for m, lo, hi in
                                 zip(s["plateau_loss_mean"], s["plateau_loss_lo"], s["plateau_loss_hi"])],
        "left": [f"{a} of {n}" for a, n in zip(s["left"], s["seeds"])],
        "leaves at step": [_with_interval(*x) for x in zip(s["leave_step_mean"], s["leave_step_lo"], s["leave_step_hi"])],
        "prev head formed": [f"{a} of {n}" for a, n in zip(s["formed"], s["seeds"])],
        "forms at step": [_with_interval(*x) for x in zip(s["prev_step_mean"], s["prev_step_lo"], s["prev_step_hi"])],
        "lag (steps)": [_with_interval(*x, "+.0f") for x in zip(s["lag_mean"], s["lag_lo"], s["lag_hi"])],
        "best loss at step": [_with_interval(*x) for x in zip(s["best_step_mean"], s["best_step_lo"], s["best_step_hi"])],
        "rise after it (nats)": [_with_interval(*x, ".4f") for x in zip(s["rise_mean"], s["rise_lo"], s["rise_hi"])],
    })
    verdicts = pd.DataFrame({
        "gap": [f"{a} − {r}" for a, r in zip(v["arm"], v["reference"])],
        "peak (step)": [f"{g:+.4f} ({p})" for g, p in zip(v["peak_gap"], v["peak_step"])],
        f"peak {pct}": [f"{lo:+.4f} to {hi:+.4f}" for lo, hi in zip(v["peak_lo"], v["peak_hi"])],
        "end (step)": [f"{g:+.4f} ({p})" for g, p in zip(v["end_gap"], v["end_step"])],
        f"end {pct}": [f"{lo:+.4f} to {hi:+.4f}" for lo, hi in zip(v["end_lo"], v["end_hi"])],
        "verdict": v["verdict"],
        "crossover step": ["—" if pd.isna(c) else f"{c} ({lo:.0f}–{hi:.0f})"
                           for c, lo, hi in zip(v["crossover_step"], v["crossover_lo"], v["crossover_hi"])],
    })
    figures = figures or {}
    return [
        f"{level} The course of `{sweep}`: the plateau, the previous-token head, the gaps (protocol §7, §7b)", "",
        f"A run arrives on its plateau at the first evaluation after warm-up whose loss falls by less than "
        f"{note['margin']:g} to the next; it leaves it at the first evaluation {note['margin']:g} below that level. "
        f"Its previous-token head forms when the best head's `prev` score first reaches {note['threshold']:g}. "
        f"Per shape: the mean over the runs that have the event, with its {pct} percentile bootstrap interval over "
        f"seeds; the lag is formation − leaving, paired per run; each run's lowest validation loss, where it fell and "
        f"how far the loss rose from it to the last evaluation (protocol §7, \"Two readings\"). Evaluations every "
        f"{interval} steps: an event is known to that resolution. From `{paths.course_table(sweep, 'events_summary')}`.",
        markdown_table(events), "", coincidence(t["events"], interval),
        *([f"![course events]({figures['events']})"] if "events" in figures else []),
        f"Each arm's validation loss minus `{note['reference']}`'s, paired by seed, at every evaluation "
        f"(`{paths.course_table(sweep, 'gaps')}`); the peak is the largest gap in the gap's order (the sign of "
        f"its first clear gap: interval off 0 and at least {note['margin']:g}); verdicts as in protocol §7.",
        markdown_table(verdicts), "", *[verdict_sentence(r) + "." for r in v.to_dict("records")],
        *([f"![course gaps]({figures['gaps']})"] if "gaps" in figures else []),
    ]
