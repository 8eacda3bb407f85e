"""Figures of the training sweep (SPEC §7–8); they read the summary tables only."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .style import ONE_COLUMN, PALETTE, TWO_COLUMNS, figure


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _seed_points(ax, finals: pd.DataFrame, x: str):
    ax.scatter(finals[x], finals["val_loss"], s=6, color="0.55", zorder=2, linewidths=0,
               label=f"single seeds (n = {finals['seed'].nunique()})")


def loss_vs_heads(summary: pd.DataFrame, finals: pd.DataFrame, contrast: pd.Series):
    """Split sweep: final validation loss against the number of heads at fixed width."""
    sweep = contrast["split_sweep"]
    s = summary[summary["sweep"] == sweep].sort_values("heads")
    fig, ax = figure(ONE_COLUMN)
    _seed_points(ax, finals[finals["sweep"] == sweep], "heads")
    ax.errorbar(s["heads"], s["val_loss_mean"], yerr=s["val_loss_std"], marker="o", ms=3,
                capsize=2, color=PALETTE[0], zorder=3, label="mean ± std over seeds")
    ax.set_xscale("log", base=2)
    ax.set_xticks(s["heads"], [f"{h}\n({d})" for h, d in zip(s["heads"], s["head_size"])])
    ax.minorticks_off()
    ax.set_xlabel("heads (head size)")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(f"width {contrast['split_width']}, {contrast['split_params']:,} parameters each\n"
                 f"spread {contrast['spread']:.3f} = {contrast['spread_over_std']:.1f}× seed std "
                 f"= {contrast['spread_over_gain']:.2f}× the {contrast['capacity_from']}→"
                 f"{contrast['capacity_to']} gain")
    ax.legend(frameon=False)
    return fig


def loss_vs_width(summary: pd.DataFrame, finals: pd.DataFrame, contrast: pd.Series):
    """Capacity sweep: final validation loss against the width."""
    sweep = contrast["capacity_sweep"]
    s = summary[summary["sweep"] == sweep].sort_values("width")
    fig, ax = figure(ONE_COLUMN)
    _seed_points(ax, finals[finals["sweep"] == sweep], "width")
    ax.errorbar(s["width"], s["val_loss_mean"], yerr=s["val_loss_std"], marker="o", ms=3,
                capsize=2, color=PALETTE[1], zorder=3, label="mean ± std over seeds")
    ax.set_xscale("log", base=2)
    ax.set_xticks(s["width"], [f"{w}\n{_count(p)}" for w, p in zip(s["width"], s["params"])])
    ax.minorticks_off()
    sizes = sorted(s["head_size"].unique())
    ax.set_xlabel("width (parameters)")
    ax.set_ylabel("validation loss (nats/char)")
    ax.set_title(f"head size {', '.join(map(str, sizes))}; "
                 f"{contrast['capacity_from']}→{contrast['capacity_to']} gain "
                 f"{contrast['capacity_gain']:.3f}")
    ax.legend(frameon=False)
    return fig


def training_curves(curves: pd.DataFrame):
    """Validation (solid) and training (dashed) loss against step, mean over seeds; one panel per sweep."""
    sweeps = list(dict.fromkeys(curves["sweep"]))
    fig, axes = figure(TWO_COLUMNS, 2.6, ncols=len(sweeps), sharey=True, squeeze=False)
    for ax, sweep in zip(axes[0], sweeps):
        c = curves[curves["sweep"] == sweep]
        configs = (c[["config", "width", "heads"]].drop_duplicates()
                   .sort_values(["width", "heads"])["config"])
        for i, cfg in enumerate(configs):
            m = c[c["config"] == cfg].groupby("step")[["train_loss", "val_loss"]].mean()
            color = PALETTE[i % len(PALETTE)]
            ax.plot(m.index, m["val_loss"], color=color, marker="o", ms=2, label=cfg)
            ax.plot(m.index, m["train_loss"], color=color, ls="--", lw=0.8)
        n = c["seed"].nunique()
        ax.set_title(f"{sweep}: mean of {n} seed{'s' * (n != 1)}\n"
                     "(solid: validation; dashed: train, mean since the last point)")
        ax.set_xlabel("step")
        ax.legend(frameon=False, ncols=2)
    axes[0][0].set_ylabel("loss (nats/char)")
    return fig
