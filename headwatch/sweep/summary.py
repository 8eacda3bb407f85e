"""The sweep summary (protocol §7): per configuration mean ± std over seeds, and the
one comparison the sweep exists for — does splitting a fixed width into more or
fewer heads move the loss more than seed noise, and how does that compare with
doubling the width?

* ``spread``: best-to-worst difference of the split sweep's per-configuration
  mean final validation losses (nats per character).
* ``mean_seed_std``: the mean over the split sweep's configurations of the
  standard deviation over seeds (ddof = 1).
* ``capacity_gain``: mean loss at the capacity sweep's ``from`` width minus
  that at its ``to`` width (positive when the wider model is better).
* ``spread_over_std`` = spread / mean_seed_std and ``spread_over_gain`` =
  spread / capacity_gain.

Their uncertainty (:func:`contrast_intervals`, ``sweep.summary.bootstrap``), from the per-seed
final losses only:

* ``<quantity>_lo`` / ``_hi``: the percentile interval at ``level`` of each of the four
  quantities, from ``resamples`` bootstrap resamples of the seeds **within each configuration**
  (``scipy.stats.bootstrap``, every configuration resampled on its own; a run two sweeps share
  is one sample). A ratio is undefined in a resample whose denominator is 0 (every
  configuration drew one seed only, or the gain is exactly 0); those resamples are left out of
  that ratio's interval and counted (``undefined_resamples``).
* ``paired_diff``: the best and the worst split configuration on the **same** seeds: mean over
  seeds of (worst − best), with its bootstrap interval over seeds (``paired_seeds`` of them).
  Both were picked as best and worst from these losses, so the interval is descriptive, not a
  test (it excludes 0 for most pure-noise sweeps).
* ``split_p``: the test of the split effect: the share of ``resamples`` random relabellings of
  the configurations **within each seed** (``scipy.stats.permutation_test``,
  ``permutation_type='samples'``; what no effect of the split would allow) whose
  spread / mean_seed_std reaches the observed one. ``split_resolved``: the interval of
  spread / mean_seed_std lies above 1 **and** ``split_p`` < 1 − level (the interval alone
  lies above 1 for most sweeps of pure seed noise: protocol §7). ``width_resolved``: the
  interval of the capacity gain lies above 0.

Guards (raise, nothing is written): the split sweep's parameter counts must be
identical; no number may be NaN or inf; every configuration needs ≥ 2 seeds; the split
sweep's configurations must share their seeds (the paired comparison and the test).

**Two readings** (protocol §7): every run's curve is read at its last evaluation and at its best
(:data:`READINGS`, :func:`run_readings`); the summary and the contrast are computed at either
(:func:`summarize`'s ``reading``: the "final" losses above are the reading's), and
:func:`overfitting` weighs each configuration's rise from its best against the seed noise, with an
interval and a verdict. :func:`readings_section` writes both readings for the results pages.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from .. import paths
from ..markup import markdown
from ..settings.sweep import BootstrapSettings, CapacitySettings, SummarySettings
from ..tableio import assert_finite, read_note, read_parquet


class SummaryError(ValueError):
    """The sweep's results cannot be summarized honestly."""


READINGS = {"last": "at the last step: each run's validation loss at its last evaluation",
            "best": "at each run's best validation: its lowest validation loss over its evaluations (early "
                    "stopping: the weights one would keep), at the step where it fell"}
"""The two readings of a sweep (protocol §7, "Two readings"), by name; each summary and contrast table
names its own (``reading``)."""
READ_AT = {"last": ("val_loss", "steps"), "best": ("best_val_loss", "best_step")}
"""Each reading's columns of a run's finals: (its validation loss, the step it was read at)."""


def run_readings(metrics: pd.DataFrame) -> dict:
    """One run's validation curve read both ways (:data:`READINGS`), from its metrics rows (the rows with a
    validation loss: the evaluations; other columns a training job adds are not read): the last
    evaluation's step and losses (``steps``, ``val_loss``, ``train_loss``: the training loss there, the mean
    over the batches since the evaluation before it), the first evaluation of the lowest validation loss
    (``best_step``, ``best_val_loss``, and the training loss there, ``best_train_loss``), ``rise`` = last −
    best (≥ 0 by construction) and the ``evaluations`` read."""
    ev = metrics.dropna(subset=["val_loss"]).sort_values("step")
    if ev.empty:
        raise SummaryError("a run's metrics hold no validation loss: no evaluation to read")
    last = ev.iloc[-1]
    best = ev.iloc[int(np.argmin(ev["val_loss"].to_numpy(dtype=float)))]
    return dict(steps=int(last["step"]), val_loss=float(last["val_loss"]), train_loss=float(last["train_loss"]),
                best_step=int(best["step"]), best_val_loss=float(best["val_loss"]),
                best_train_loss=float(best["train_loss"]),
                rise=float(last["val_loss"] - best["val_loss"]), evaluations=len(ev))


def read_runs(runs: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finals, curves) from each run's metrics Parquet (``runs[i]["metrics"]`` is its path).

    finals: one row per (sweep, config, seed) with the parameter count recorded at training and its
    curve read both ways (:func:`run_readings`); curves: every metrics row, labelled.
    """
    finals, curves = [], []
    for r in runs:
        m = read_parquet(r["metrics"])
        note = read_note(r["metrics"])
        label = {k: r[k] for k in ("sweep", "shape", "seed", "width", "heads", "trained_under")}
        finals.append(dict(label, params=int(note["params"]), head_size=r["width"] // r["heads"],
                           **run_readings(m), tokens_per_s=float(m["tokens_per_s"].mean())))
        curves.append(m.assign(**label))
    cols = ["sweep", "shape", "seed", "width", "heads", "trained_under"]
    curves = pd.concat(curves, ignore_index=True)
    return pd.DataFrame(finals), curves[cols + [c for c in curves.columns if c not in cols]]


QUANTITIES = ("spread", "spread_over_std", "capacity_gain", "spread_over_gain")
"""The contrast's quantities that get a bootstrap interval (columns ``<name>_lo``, ``<name>_hi``)."""


def _losses(finals: pd.DataFrame, sweep: str, shape: str) -> pd.Series:
    """One configuration's final validation losses, by seed."""
    rows = finals[(finals["sweep"] == sweep) & (finals["shape"] == shape)]
    return rows.set_index("seed")["val_loss"].sort_index()


def percentile_interval(values, level: float) -> tuple[float, float]:
    """The percentile interval at ``level`` of a bootstrap distribution's defined (finite) values."""
    values = np.asarray(values, dtype=float)
    tail = (1 - level) / 2
    lo, hi = np.quantile(values[np.isfinite(values)], [tail, 1 - tail])
    return float(lo), float(hi)


def contrast_intervals(finals: pd.DataFrame, split_sweep: str, split_shapes: list[str], best: str,
                       worst: str, capacity: CapacitySettings, lo_shape: str, hi_shape: str,
                       bootstrap: BootstrapSettings) -> dict:
    """The contrast's intervals, paired comparison and test (module docstring), from the
    per-seed final losses in ``finals`` (``bootstrap``: ``sweep.summary.bootstrap``); one generator
    seeded with ``bootstrap.seed`` draws every resample."""
    # scipy here, not at the top: the sweep's figure jobs import this module (the verdicts) and never
    # test, and importing scipy.stats takes 1.9 s.
    from scipy import stats

    level, resamples = bootstrap.level, bootstrap.resamples
    rng = np.random.default_rng(bootstrap.seed)
    # One sample per run, whichever sweeps list it (a shared run is resampled once).
    owner = finals.drop_duplicates(["sweep", "shape"]).set_index(["sweep", "shape"])["trained_under"]
    keys: list[tuple[str, str]] = []
    samples: list[np.ndarray] = []

    def sample_of(sweep: str, shape: str) -> int:
        key = (owner[(sweep, shape)], shape)
        if key not in keys:
            keys.append(key)
            samples.append(_losses(finals, sweep, shape).to_numpy(dtype=float))
        return keys.index(key)

    split = [sample_of(split_sweep, a) for a in split_shapes]
    lo, hi = sample_of(capacity.sweep, lo_shape), sample_of(capacity.sweep, hi_shape)

    def quantities(*xs, axis=-1):
        means = np.stack([xs[i].mean(axis=axis) for i in split])
        noise = np.stack([xs[i].std(axis=axis, ddof=1) for i in split]).mean(axis=0)
        spread = means.max(axis=0) - means.min(axis=0)
        gain = xs[lo].mean(axis=axis) - xs[hi].mean(axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.stack([spread, np.where(noise > 0, spread / noise, np.nan), gain,
                             np.where(gain != 0, spread / gain, np.nan)])

    with warnings.catch_warnings():   # a ratio undefined in some resamples: handled below
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        boot = stats.bootstrap(samples, quantities, n_resamples=resamples, vectorized=True,
                               method="percentile", confidence_level=level, rng=rng)
    dist = np.asarray(boot.bootstrap_distribution)
    out = dict(level=level, resamples=resamples, resample_seed=bootstrap.seed,
               undefined_resamples=int((~np.isfinite(dist)).any(axis=0).sum()))
    for name, row in zip(QUANTITIES, dist):
        out[f"{name}_lo"], out[f"{name}_hi"] = percentile_interval(row, level)

    by_seed = [_losses(finals, split_sweep, a) for a in split_shapes]
    seeds = by_seed[0].index
    if any(not s.index.equals(seeds) for s in by_seed):
        raise SummaryError(f"sweep {split_sweep!r}: every configuration needs the same seeds for the "
                           "paired comparison, but they differ: " + "; ".join(
                               f"{a} {list(s.index)}" for a, s in zip(split_shapes, by_seed)))
    diff = (by_seed[split_shapes.index(worst)] - by_seed[split_shapes.index(best)]).to_numpy(dtype=float)
    paired = stats.bootstrap((diff,), np.mean, n_resamples=resamples, vectorized=True,
                             method="percentile", confidence_level=level, rng=rng)
    out.update(paired_seeds=len(diff), paired_diff=float(diff.mean()),
               paired_diff_lo=float(paired.confidence_interval.low),
               paired_diff_hi=float(paired.confidence_interval.high))

    p = relabelling_p([s.to_numpy(dtype=float) for s in by_seed], resamples, rng)
    out.update(split_p=p, split_resolved=bool(out["spread_over_std_lo"] > 1 and p < 1 - level),
               width_resolved=bool(out["capacity_gain_lo"] > 0))
    return out


def relabelling_p(by_seed: list[np.ndarray], resamples: int, rng: np.random.Generator) -> float:
    """The test of a spread among configurations (``split_p``; a study's ``extremes``): the share of
    ``resamples`` random relabellings of the configurations **within each seed**
    (``scipy.stats.permutation_test``, ``permutation_type='samples'``; all of them when there are
    fewer) whose spread / mean seed std reaches the observed one. ``by_seed``: each configuration's
    losses, aligned by seed."""
    from scipy import stats

    def split_ratio(*xs, axis=-1):
        means, stds = np.stack([x.mean(axis=axis) for x in xs]), np.stack([x.std(axis=axis, ddof=1) for x in xs])
        with np.errstate(divide="ignore", invalid="ignore"):
            return (means.max(axis=0) - means.min(axis=0)) / stds.mean(axis=0)

    return float(stats.permutation_test(by_seed, split_ratio, permutation_type="samples", n_resamples=resamples,
                                        vectorized=True, alternative="greater", rng=rng).pvalue)


def at_reading(finals: pd.DataFrame, reading: str) -> pd.DataFrame:
    """``finals`` with ``val_loss`` the reading's (:data:`READ_AT`) and ``read_step`` the step it was read at:
    what :func:`summarize` and the pages read, whichever the reading."""
    if reading not in READ_AT:
        raise ValueError(f"reading {reading!r} is not one of {list(READ_AT)}")
    loss, step = READ_AT[reading]
    missing = [c for c in (loss, step) if c not in finals]
    if missing:
        raise SummaryError(f"the runs' finals hold no {missing}: reading {reading!r} needs each run's curve "
                           "(headwatch.sweep.summary.run_readings)")
    return finals.assign(val_loss=finals[loss], read_step=finals[step])


def summarize(finals: pd.DataFrame, split_sweep: str, capacity: CapacitySettings | dict,
              bootstrap: BootstrapSettings | dict, reading: str = "last") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-configuration summary, one-row contrast with its intervals) at ``reading``
    (:data:`READINGS`: each run's last or best validation loss); raises :class:`SummaryError`.
    ``capacity``, ``bootstrap``: ``sweep.summary``'s (the settings, or their mappings). Both tables name
    their reading; the summary gives the steps its losses were read at (``step_min``, ``step_max``)."""
    capacity, bootstrap = CapacitySettings.of(capacity), BootstrapSettings.of(bootstrap)
    finals = at_reading(finals, reading)
    bad = finals[~np.isfinite(finals[["val_loss", "train_loss"]].to_numpy(dtype=float)).all(axis=1)]
    if len(bad):
        raise SummaryError("NaN/inf final loss in " + ", ".join(
            f"{r.sweep}/{r.shape}/seed{r.seed}" for r in bad.itertuples()) + "; refusing to summarize")
    split = finals[finals["sweep"] == split_sweep]
    if split.empty:
        raise SummaryError(f"sweep.summary.split_sweep: no results for sweep {split_sweep!r}")
    counts = split.groupby("shape")["params"].unique()
    if split["params"].nunique() != 1:
        raise SummaryError(f"sweep {split_sweep!r} must hold the parameter count fixed, but counts "
                           f"differ: {({c: [int(x) for x in v] for c, v in counts.items()})}; "
                           "refusing to write the summary")

    keys = ["sweep", "shape", "width", "heads", "head_size", "params", "trained_under"]
    g = finals.groupby(keys, sort=False)
    summary = g.agg(seeds=("seed", "count"), steps=("steps", "max"),
                    val_loss_mean=("val_loss", "mean"), val_loss_std=("val_loss", "std"),
                    val_loss_min=("val_loss", "min"), val_loss_max=("val_loss", "max"),
                    train_loss_mean=("train_loss", "mean"),
                    tokens_per_s=("tokens_per_s", "mean"), step_min=("read_step", "min"),
                    step_max=("read_step", "max")).reset_index()
    summary["reading"] = reading
    few = summary[summary["seeds"] < 2]
    if len(few):
        raise SummaryError("a seed std needs at least 2 seeds; only one for " +
                           ", ".join(f"{r.sweep}/{r.shape}" for r in few.itertuples()))

    s = summary[summary["sweep"] == split_sweep]
    best, worst = s.loc[s["val_loss_mean"].idxmin()], s.loc[s["val_loss_mean"].idxmax()]
    spread = float(worst["val_loss_mean"] - best["val_loss_mean"])
    noise = float(s["val_loss_std"].mean())
    c = summary[summary["sweep"] == capacity.sweep]
    lo, hi = c[c["width"] == capacity.from_width], c[c["width"] == capacity.to_width]
    if len(lo) != 1 or len(hi) != 1:
        raise SummaryError(f"sweep.summary.capacity: widths {capacity.from_width} and {capacity.to_width} "
                           f"must each appear once in sweep {capacity.sweep!r}")
    lo, hi = lo.iloc[0], hi.iloc[0]
    gain = float(lo["val_loss_mean"] - hi["val_loss_mean"])
    row = dict(
        split_sweep=split_sweep, split_width=int(s["width"].iloc[0]), split_params=int(s["params"].iloc[0]),
        configs=len(s), seeds=int(s["seeds"].min()),
        best_shape=best["shape"], best_loss=float(best["val_loss_mean"]),
        worst_shape=worst["shape"], worst_loss=float(worst["val_loss_mean"]),
        spread=spread, mean_seed_std=noise, spread_over_std=spread / noise if noise else np.inf,
        capacity_sweep=capacity.sweep, capacity_from=lo["shape"], capacity_to=hi["shape"],
        capacity_from_loss=float(lo["val_loss_mean"]), capacity_to_loss=float(hi["val_loss_mean"]),
        capacity_gain=gain, spread_over_gain=spread / gain if gain else np.inf, reading=reading)
    assert_finite(pd.DataFrame([row]), "sweep contrast (a zero seed std or zero capacity gain gives inf)")
    row.update(contrast_intervals(finals, split_sweep, list(s["shape"]), best["shape"], worst["shape"],
                                  capacity, lo["shape"], hi["shape"], bootstrap))
    contrast = pd.DataFrame([row])
    assert_finite(summary, "sweep summary")
    assert_finite(contrast, "sweep contrast (a zero seed std or zero capacity gain gives inf)")
    return summary, contrast


READING_TABLES = {"last": ("summary", "contrast"), "best": ("summary_best", "contrast_best")}
"""Each reading's summary and contrast tables by name (:func:`summary_tables`; those of the last step keep
their names from before the two readings)."""


def summary_tables(finals: pd.DataFrame, settings: SummarySettings | dict) -> dict[str, pd.DataFrame]:
    """One pair's tables (protocol §7): the summary and the contrast at each reading (:data:`READING_TABLES`)
    and each configuration's rise from its best (``overfitting``), from the finals of the pair's runs
    (:func:`headwatch.sweep.plan.summary_runs`). ``settings``: the pair's slice of ``sweep.summary``
    (:func:`headwatch.settings.sweep.summary_slice`; the default pair's or another's, read the same way)."""
    s = SummarySettings.of(settings)
    out = {}
    for reading, (summary, contrast) in READING_TABLES.items():
        out[summary], out[contrast] = summarize(finals, s.split_sweep, s.capacity, s.bootstrap, reading)
    out["overfitting"] = overfitting(finals, s.split_sweep, s.bootstrap)
    return out


# ------------------------------------------------------------ overfitting: the rise from each run's best
MIN_SEEDS = 3
"""The fewest seeds from which a comparison over seeds gets an interval and a verdict (a shape's rise, a
study's contrast): with 2, the percentile interval of their mean is the two values themselves."""
FIT_VERDICTS = ("overfits", "within seed noise", "not resolved", "too few seeds")
"""A shape's verdict on its rise from its best validation loss to its last (:func:`overfitting`)."""


def overfitting(finals: pd.DataFrame, split_sweep: str, bootstrap: BootstrapSettings | dict) -> pd.DataFrame:
    """Per configuration of ``finals`` (every sweep of the summary): how far its validation loss rose from
    each run's best to its last evaluation, against the seed noise (protocol §7, "Two readings").

    * ``rise``: last − best validation loss of each run (≥ 0: the best is a minimum over the same
      evaluations), ``rise_mean`` over seeds with its percentile bootstrap interval (``_lo``, ``_hi``);
    * ``seed_noise``: the project's seed noise, the split sweep's ``mean_seed_std`` at the last step (the
      mean over its configurations of the seed std of the last validation loss, ddof 1);
    * ``rise_over_noise`` and its interval, from the same resamples: every configuration's seeds resampled
      on their own (a run two sweeps list is one sample), each run's last loss and rise together, the
      rise and the noise recomputed from them (``scipy.stats.bootstrap``, ``sweep.summary.bootstrap``);
    * ``verdict``: **overfits** when that ratio's interval lies above 1 (the validation loss rose from its
      best by more than the seed noise), **within seed noise** when it lies below 1, **not resolved** when
      it holds 1, **too few seeds** below :data:`MIN_SEEDS` (no interval). The rise is never below 0 and
      grows with the evaluation-to-evaluation noise of a flat curve, hence the seed noise, not 0, as the
      bar;
    * beside: each reading's mean loss and the steps the best fell at, ``best_at_end`` (the seeds whose
      best is their last evaluation), the last training loss (the mean over the batches since the
      evaluation before it), the training loss at the best evaluation (<NA> for finals read before it was
      recorded) and the last validation − training gap, and each configuration's rank within its sweep at
      each reading (1 = lowest mean loss).
    """
    from scipy import stats

    b = BootstrapSettings.of(bootstrap)
    at_reading(finals, "best")                         # the curves were read both ways
    split = finals[finals["sweep"] == split_sweep]
    if split.empty:
        raise SummaryError(f"sweep.summary.split_sweep: no results for sweep {split_sweep!r}")
    configs = finals.drop_duplicates(["sweep", "shape"])[["sweep", "shape", "trained_under"]]
    keys = list(dict.fromkeys(zip(configs["trained_under"], configs["shape"])))
    runs = finals.drop_duplicates(["trained_under", "shape", "seed"]).set_index(["trained_under", "shape"])
    samples = [np.stack([runs.loc[[k], "val_loss"].to_numpy(dtype=float), runs.loc[[k], "rise"].to_numpy(dtype=float)])
               for k in keys]
    noisy = [keys.index(k) for k in dict.fromkeys(zip(split["trained_under"], split["shape"]))]

    def ratios(*xs, axis=-1):
        noise = np.stack([xs[i][0].std(axis=axis, ddof=1) for i in noisy]).mean(axis=0)
        rise = np.stack([x[1].mean(axis=axis) for x in xs])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.concatenate([rise, np.where(noise > 0, rise / noise, np.nan)])

    noise = float(np.mean([x[0].std(ddof=1) for x in (samples[i] for i in noisy)]))
    few = min(x.shape[1] for x in samples) < MIN_SEEDS
    dist = None
    if not few:
        with warnings.catch_warnings():   # a rise of 0 in every seed: a degenerate interval, which is right
            warnings.simplefilter("ignore", stats.DegenerateDataWarning)
            boot = stats.bootstrap(samples, ratios, n_resamples=b.resamples, vectorized=True, method="percentile", axis=-1,
                                   confidence_level=b.level, rng=np.random.default_rng(b.seed))
        dist = np.asarray(boot.bootstrap_distribution)
    rank = {reading: finals.assign(loss=at_reading(finals, reading)["val_loss"]).groupby(
        ["sweep", "shape"], sort=False)["loss"].mean().groupby(level="sweep").rank(method="min")
        for reading in READ_AT}
    rows = []
    for (sweep, shape, owner) in configs.itertuples(index=False):
        i = keys.index((owner, shape))
        r = runs.loc[[(owner, shape)]]
        row = dict(sweep=sweep, shape=shape, trained_under=owner, seeds=len(r),
                   last_mean=float(r["val_loss"].mean()), best_mean=float(r["best_val_loss"].mean()),
                   best_step_min=int(r["best_step"].min()), best_step_max=int(r["best_step"].max()),
                   last_step=int(r["steps"].max()), best_at_end=int((r["best_step"] == r["steps"]).sum()),
                   train_loss_mean=float(r["train_loss"].mean()),
                   best_train_loss_mean=float(r["best_train_loss"].mean()) if "best_train_loss" in r else None,
                   gap_mean=float((r["val_loss"] - r["train_loss"]).mean()),
                   rise_mean=float(r["rise"].mean()), rise_lo=None, rise_hi=None, seed_noise=noise,
                   rise_over_noise=float(r["rise"].mean()) / noise if noise > 0 else np.inf,
                   rise_over_noise_lo=None, rise_over_noise_hi=None,
                   rank_last=int(rank["last"][(sweep, shape)]), rank_best=int(rank["best"][(sweep, shape)]),
                   level=b.level, resamples=b.resamples, resample_seed=b.seed)
        if dist is not None:
            row["rise_lo"], row["rise_hi"] = percentile_interval(dist[i], b.level)
            row["rise_over_noise_lo"], row["rise_over_noise_hi"] = percentile_interval(dist[len(keys) + i], b.level)
        row["verdict"] = fit_verdict(row)
        rows.append(row)
    out = pd.DataFrame(rows)
    for col in ("rise_lo", "rise_hi", "rise_over_noise_lo", "rise_over_noise_hi", "best_train_loss_mean"):
        out[col] = out[col].astype("Float64")
    assert_finite(out, "overfitting (a zero seed noise gives inf)")
    return out


def fit_verdict(row) -> str:
    """A configuration's verdict on its rise (:func:`overfitting`), from its ratio's interval."""
    lo, hi = row["rise_over_noise_lo"], row["rise_over_noise_hi"]
    if lo is None or pd.isna(lo):
        return "too few seeds"
    return "overfits" if lo > 1 else "within seed noise" if hi < 1 else "not resolved"


def fit_sentence(row) -> str:
    """A configuration's rise in words, with the numbers that decide its verdict."""
    best = (f"best at step {row['best_step_min']}" if row["best_step_min"] == row["best_step_max"] else
            f"best at steps {row['best_step_min']}–{row['best_step_max']}")
    text = (f"{row['shape']}: {best}, {row['best_mean']:.4f}; at step {row['last_step']} {row['last_mean']:.4f}, "
            f"a rise of {row['rise_mean']:+.4f}")
    if row["verdict"] == "too few seeds":
        return text + f" over {row['seeds']} seeds: too few for an interval, no verdict"
    return (text + f" ({_pct(row['level'])} interval {row['rise_lo']:+.4f} to {row['rise_hi']:+.4f}) = "
            f"{row['rise_over_noise']:.2f}× the seed noise {row['seed_noise']:.4f} ({row['rise_over_noise_lo']:.2f}–"
            f"{row['rise_over_noise_hi']:.2f}): {row['verdict']}")


# ------------------------------------------------------------ what the contrast says, in words
def _pct(level: float) -> str:
    return f"{100 * level:g} %"


def split_verdict(c) -> str:
    """One sentence from a contrast row: is the split effect resolved, with the numbers that decide."""
    ratio = (f"spread / seed std {c['spread_over_std']:.2f} ({_pct(c['level'])} interval "
             f"{c['spread_over_std_lo']:.2f}–{c['spread_over_std_hi']:.2f}), p = {c['split_p']:.3g}")
    if c["split_resolved"]:
        return f"head split resolved at {_pct(c['level'])}: {ratio}"
    why = [] if c["spread_over_std_lo"] > 1 else ["interval reaches 1"]
    why += [] if c["split_p"] < 1 - c["level"] else [f"p ≥ {1 - c['level']:.2g}"]
    return f"head split not resolved ({' and '.join(why)}): {ratio}"


def width_verdict(c) -> str:
    """One sentence from a contrast row: is the capacity gain resolved (its interval above 0)."""
    gain = (f"{c['capacity_from']}→{c['capacity_to']} gain {c['capacity_gain']:.4f} "
            f"({_pct(c['level'])} interval {c['capacity_gain_lo']:.4f}–{c['capacity_gain_hi']:.4f})")
    return f"width gain resolved: {gain}" if c["width_resolved"] else f"width gain not resolved: {gain}"


# ------------------------------------------------------------ the results pages' section on both readings
def markdown_table(df: pd.DataFrame) -> str:
    """A Markdown table of text cells (every cell escaped: :func:`headwatch.markup.markdown`); the
    results pages' sections on a sweep (:func:`readings_section`, :func:`headwatch.sweep.course.markdown_section`,
    :func:`headwatch.sweep.heads.markdown_section`)."""
    lines = ["| " + " | ".join(markdown(c) for c in df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(markdown(str(v)) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _span(mean, lo, hi, spec: str = ".4f") -> str:
    return f"{mean:{spec}}" + ("" if lo is None or pd.isna(lo) else f" ({lo:{spec}} to {hi:{spec}})")


def fit_table(summaries: dict[str, pd.DataFrame], fit: pd.DataFrame) -> pd.DataFrame:
    """Per configuration, both readings side by side (``summaries``: the summary of each reading; ``fit``:
    :func:`overfitting`): each reading's mean ± std and rank within the sweep, where the best fell, the
    last training loss, the rise with its interval, the rise over the seed noise with its interval, the
    verdict."""
    s = {r: t.set_index(["sweep", "shape"]) for r, t in summaries.items()}
    pct = _pct(float(fit["level"].iloc[0]))
    rows = []
    for f in fit.to_dict("records"):
        last, best = s["last"].loc[(f["sweep"], f["shape"])], s["best"].loc[(f["sweep"], f["shape"])]
        steps = f"{f['best_step_min']}" + (f"–{f['best_step_max']}" if f["best_step_max"] != f["best_step_min"] else "")
        rows.append({"sweep": f["sweep"], "shape": f["shape"], "seeds": f["seeds"],
                     f"last (step {f['last_step']})": f"{last['val_loss_mean']:.4f}", "± std, last": f"{last['val_loss_std']:.4f}",
                     "rank, last": f["rank_last"], "best": f"{best['val_loss_mean']:.4f}",
                     "± std, best": f"{best['val_loss_std']:.4f}", "best at step": steps, "rank, best": f["rank_best"],
                     "train loss, last": f"{f['train_loss_mean']:.3f}",
                     f"rise ({pct} interval)": _span(f["rise_mean"], f["rise_lo"], f["rise_hi"], "+.4f"),
                     "rise / seed noise": _span(f["rise_over_noise"], f["rise_over_noise_lo"], f["rise_over_noise_hi"],
                                                ".2f"),
                     "verdict": f["verdict"]})
    return pd.DataFrame(rows)


def fit_summary(fit: pd.DataFrame) -> str:
    """Whether any configuration overfits, in one sentence from :func:`overfitting`'s verdicts (each run
    counted once, whichever sweeps list it)."""
    f = fit.drop_duplicates(["trained_under", "shape"])
    noise = float(f["seed_noise"].iloc[0])
    by = {v: list(f.loc[f["verdict"] == v, "shape"]) for v in FIT_VERDICTS}
    text = (f"Of {len(f)} configurations, {len(by['overfits'])} overfit (the validation loss rose from each run's "
            f"best by more than the seed noise, {noise:.4f} nats/char, beyond the interval)")
    text += "".join(f"; {len(by[v])} {'are' if len(by[v]) != 1 else 'is'} {v}" for v in FIT_VERDICTS[1:] if by[v])
    text += ". " + "; ".join(f"{v}: {', '.join(by[v])}" for v in FIT_VERDICTS if by[v]) + "."
    return text if by["overfits"] else text + " **No configuration overfits** at this run's end."


def disagreements(contrasts: dict[str, pd.Series], fit: pd.DataFrame) -> str:
    """Where the two readings disagree, in one sentence: the split's best and worst configuration, its
    verdict, and the configurations whose rank moves."""
    c, b = contrasts["last"], contrasts["best"]
    split = fit[fit["sweep"] == c["split_sweep"]]
    moved = split[split["rank_last"] != split["rank_best"]]
    parts = []
    for name, key in (("best", "best_shape"), ("worst", "worst_shape")):
        parts.append(f"the {name} split is {c[key]} at the last step and {b[key]} at each run's best"
                     if c[key] != b[key] else f"the {name} split is {c[key]} at both")
    same = bool(c["split_resolved"]) == bool(b["split_resolved"])
    parts.append("the head split is " + ("resolved" if b["split_resolved"] else "not resolved") + " at both" if same
                 else f"the head split is {'resolved' if c['split_resolved'] else 'not resolved'} at the last step and "
                      f"{'resolved' if b['split_resolved'] else 'not resolved'} at each run's best")
    if len(moved):
        parts.append("the ranks that move (last → best): " + ", ".join(
            f"{r.shape} {r.rank_last} → {r.rank_best}" for r in moved.itertuples()))
    else:
        parts.append("no split changes its rank")
    return "Where the readings disagree: " + "; ".join(parts) + "."


def readings_section(summaries: dict[str, pd.DataFrame], contrasts: dict[str, pd.Series], fit: pd.DataFrame,
                     figure: str | None = None, level: str = "##", interval: int | None = None,
                     pair: str | None = None) -> list[str]:
    """A results page's section on the two readings (protocol §7, "Two readings"): each configuration at
    both, its rise and verdict, whether any overfits, the contrast at both readings with its intervals and
    verdicts, and where the two disagree. ``summaries``, ``contrasts``: each reading's summary and contrast
    row (``last``, ``best``); ``fit``: :func:`overfitting`; ``figure``: a link to the readings figure;
    ``interval``: the evaluations' interval in steps (the best is known to it); ``pair``: the further pair of
    ``sweep.summary.pairs`` whose tables these are (None: the default pair's)."""
    c = contrasts["last"]
    pct = _pct(float(c["level"]))
    quantities = [("best split", "best_shape", None), ("worst split", "worst_shape", None),
                  ("spread (worst − best mean)", "spread", ".4f"),
                  ("worst − best, paired by seed", "paired_diff", ".4f"),
                  ("mean seed std (the seed noise)", "mean_seed_std", ".4f"),
                  ("spread / mean seed std", "spread_over_std", ".2f"), ("relabelling test p", "split_p", ".3g"),
                  (f"width gain {c['capacity_from']} → {c['capacity_to']}", "capacity_gain", ".4f"),
                  ("spread / width gain", "spread_over_gain", ".2f")]
    rows = []
    for label, key, spec in quantities:
        row = {"quantity": label}
        for reading, name in (("last", "at the last step"), ("best", "at each run's best")):
            x = contrasts[reading]
            row[name] = (str(x[key]) if spec is None else
                         _span(float(x[key]), x.get(f"{key}_lo"), x.get(f"{key}_hi"), spec))
        rows.append(row)
    cadence = f" (evaluations every {interval} steps: the best is known to that resolution)" if interval else ""
    return [
        f"{level} Two readings: at the last step and at each run's best (protocol §7)", "",
        f"Two readings of each run: **at the last step**, its validation loss at its last evaluation; **at its best**, "
        f"its lowest validation loss over its evaluations, at the first evaluation that reaches it (early stopping: "
        f"the weights one would keep){cadence}. Rise = last − best, per run; "
        f"its {pct} percentile bootstrap interval over seeds and its ratio to the seed noise (the split's mean seed "
        f"std at the last step) with that ratio's interval; *overfits* where that interval lies above 1 "
        f"(`{paths.sweep_table('overfitting', pair)}`, `summary_best.parquet`, `contrast_best.parquet`).",
        markdown_table(fit_table(summaries, fit)), "", fit_summary(fit), "",
        f"The contrast at each reading ({pct} intervals in brackets; the same code, each run's loss at that reading):",
        markdown_table(pd.DataFrame(rows)), "",
        *[f"- {name}: {split_verdict(contrasts[r])}; {width_verdict(contrasts[r])}."
          for r, name in (("last", "At the last step"), ("best", "At each run's best"))],
        "", disagreements(contrasts, fit),
        *([f"![two readings]({figure})"] if figure else []),
    ]
