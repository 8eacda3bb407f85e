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

Guards (raise, nothing is written): the split sweep's parameter counts must be
identical; no number may be NaN or inf; every configuration needs ≥ 2 seeds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

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
        label = {k: r[k] for k in ("sweep", "arch", "seed", "width", "heads", "trained_under")}
        last = m.iloc[-1]
        finals.append(dict(label, params=int(note["params"]), head_size=r["width"] // r["heads"],
                           steps=int(last["step"]), val_loss=float(last["val_loss"]),
                           train_loss=float(last["train_loss"]),
                           tokens_per_s=float(m["tokens_per_s"].mean())))
        curves.append(m.assign(**label))
    cols = ["sweep", "arch", "seed", "width", "heads", "trained_under"]
    curves = pd.concat(curves, ignore_index=True)
    return pd.DataFrame(finals), curves[cols + [c for c in curves.columns if c not in cols]]


def summarize(finals: pd.DataFrame, split_sweep: str, capacity: dict
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-configuration summary, one-row contrast); raises :class:`SummaryError`."""
    bad = finals[~np.isfinite(finals[["val_loss", "train_loss"]].to_numpy(dtype=float)).all(axis=1)]
    if len(bad):
        raise SummaryError("NaN/inf final loss in " + ", ".join(
            f"{r.sweep}/{r.arch}/seed{r.seed}" for r in bad.itertuples()) + "; refusing to summarize")
    split = finals[finals["sweep"] == split_sweep]
    if split.empty:
        raise SummaryError(f"sweep.summary.split_sweep: no results for sweep {split_sweep!r}")
    counts = split.groupby("arch")["params"].unique()
    if split["params"].nunique() != 1:
        raise SummaryError(f"sweep {split_sweep!r} must hold the parameter count fixed, but counts "
                           f"differ: {({c: [int(x) for x in v] for c, v in counts.items()})}; "
                           "refusing to write the summary")

    keys = ["sweep", "arch", "width", "heads", "head_size", "params", "trained_under"]
    g = finals.groupby(keys, sort=False)
    summary = g.agg(seeds=("seed", "count"), steps=("steps", "max"),
                    val_loss_mean=("val_loss", "mean"), val_loss_std=("val_loss", "std"),
                    val_loss_min=("val_loss", "min"), val_loss_max=("val_loss", "max"),
                    train_loss_mean=("train_loss", "mean"),
                    tokens_per_s=("tokens_per_s", "mean")).reset_index()
    few = summary[summary["seeds"] < 2]
    if len(few):
        raise SummaryError("a seed std needs at least 2 seeds; only one for " +
                           ", ".join(f"{r.sweep}/{r.arch}" for r in few.itertuples()))

    s = summary[summary["sweep"] == split_sweep]
    best, worst = s.loc[s["val_loss_mean"].idxmin()], s.loc[s["val_loss_mean"].idxmax()]
    spread = float(worst["val_loss_mean"] - best["val_loss_mean"])
    noise = float(s["val_loss_std"].mean())
    c = summary[summary["sweep"] == capacity["sweep"]]
    lo, hi = c[c["width"] == capacity["from"]], c[c["width"] == capacity["to"]]
    if len(lo) != 1 or len(hi) != 1:
        raise SummaryError(f"sweep.summary.capacity: widths {capacity['from']} and {capacity['to']} "
                           f"must each appear once in sweep {capacity['sweep']!r}")
    lo, hi = lo.iloc[0], hi.iloc[0]
    gain = float(lo["val_loss_mean"] - hi["val_loss_mean"])
    contrast = pd.DataFrame([dict(
        split_sweep=split_sweep, split_width=int(s["width"].iloc[0]), split_params=int(s["params"].iloc[0]),
        configs=len(s), seeds=int(s["seeds"].min()),
        best_arch=best["arch"], best_loss=float(best["val_loss_mean"]),
        worst_arch=worst["arch"], worst_loss=float(worst["val_loss_mean"]),
        spread=spread, mean_seed_std=noise, spread_over_std=spread / noise if noise else np.inf,
        capacity_sweep=capacity["sweep"], capacity_from=lo["arch"], capacity_to=hi["arch"],
        capacity_from_loss=float(lo["val_loss_mean"]), capacity_to_loss=float(hi["val_loss_mean"]),
        capacity_gain=gain, spread_over_gain=spread / gain if gain else np.inf)])
    assert_finite(summary, "sweep summary")
    assert_finite(contrast, "sweep contrast (a zero seed std or zero capacity gain gives inf)")
    return summary, contrast
