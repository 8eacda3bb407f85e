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
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..settings.sweep import BootstrapSettings, CapacitySettings
from ..tableio import assert_finite, read_note, read_parquet


class SummaryError(ValueError):
    """The sweep's results cannot be summarized honestly."""


def read_runs(runs: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finals, curves) from each run's metrics Parquet (``runs[i]["metrics"]`` is its path).

    finals: one row per (sweep, config, seed) with the final losses and the
    parameter count recorded at training; curves: every metrics row, labelled.
    """
    finals, curves = [], []
    for r in runs:
        m = read_parquet(r["metrics"])
        note = read_note(r["metrics"])
        label = {k: r[k] for k in ("sweep", "shape", "seed", "width", "heads", "trained_under")}
        last = m.iloc[-1]
        finals.append(dict(label, params=int(note["params"]), head_size=r["width"] // r["heads"],
                           steps=int(last["step"]), val_loss=float(last["val_loss"]),
                           train_loss=float(last["train_loss"]),
                           tokens_per_s=float(m["tokens_per_s"].mean())))
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


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval at ``level`` of a bootstrap distribution's defined (finite) values."""
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
        out[f"{name}_lo"], out[f"{name}_hi"] = _interval(row, level)

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


def summarize(finals: pd.DataFrame, split_sweep: str, capacity: CapacitySettings | dict,
              bootstrap: BootstrapSettings | dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-configuration summary, one-row contrast with its intervals); raises :class:`SummaryError`.
    ``capacity``, ``bootstrap``: ``sweep.summary``'s (the settings, or their mappings)."""
    capacity, bootstrap = CapacitySettings.of(capacity), BootstrapSettings.of(bootstrap)
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
                    tokens_per_s=("tokens_per_s", "mean")).reset_index()
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
        capacity_gain=gain, spread_over_gain=spread / gain if gain else np.inf)
    assert_finite(pd.DataFrame([row]), "sweep contrast (a zero seed std or zero capacity gain gives inf)")
    row.update(contrast_intervals(finals, split_sweep, list(s["shape"]), best["shape"], worst["shape"],
                                  capacity, lo["shape"], hi["shape"], bootstrap))
    contrast = pd.DataFrame([row])
    assert_finite(summary, "sweep summary")
    assert_finite(contrast, "sweep contrast (a zero seed std or zero capacity gain gives inf)")
    return summary, contrast


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
