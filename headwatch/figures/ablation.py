"""Figures of cutting heads (protocol §5, §8), drawn from the ablation tables only.

Every label (numbers of heads cut, head names, thresholds, the phrase's expected
token) is read from the tables.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .style import DIVERGING, ONE_COLUMN, PALETTE, TWO_COLUMNS, figure, styled


METHOD_TITLES = {"zero": "zero cut (z = 0)", "mean": "mean cut (z = eval-set mean)"}


@styled
def topk_curves(topk: pd.DataFrame):
    """Loss per token vs heads cut, targeted vs random (min–max band), copy 1 beside copy 2;
    one row of panels per cut method (the table's order: the configured method first)."""
    methods = list(dict.fromkeys(topk["method"])) if "method" in topk else ["zero"]
    fig, axes = figure(TWO_COLUMNS, 2.6 * len(methods), nrows=len(methods), ncols=2, sharey=True,
                       squeeze=False)
    for i, (row, method) in enumerate(zip(axes, methods)):
        t = topk[topk["method"] == method] if "method" in topk else topk
        _topk_panels(row, t.sort_values("k"), METHOD_TITLES.get(method, method), titles=i == 0)
    axes[-1][0].set_xlabel("heads cut")
    axes[-1][1].set_xlabel("heads cut")
    handles, labels = axes[-1][1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=2, frameon=False)
    return fig


def _topk_panels(axes, t: pd.DataFrame, method: str, titles: bool) -> None:
    x_t, x_r = t.n_cut_targeted.to_numpy(), t.n_cut_random.to_numpy()
    draws = int(t.n_draws.iloc[0])
    for ax, copy, title in zip(axes, ("copy1", "copy2"),
                               ("copy 1 (unpredictable: control)", "copy 2 (repeat: induction)")):
        intact = float(t[f"intact_{copy}"].iloc[0])
        ax.axhline(intact, color=PALETTE[7], lw=0.8, ls=":", label="intact")
        ax.annotate(f"intact {intact:.2f}", (0.01, intact), xycoords=("axes fraction", "data"),
                    xytext=(0, 2), textcoords="offset points", fontsize=6, color=PALETTE[7])
        ax.plot(x_t, t[f"targeted_{copy}"], "o-", color=PALETTE[3], ms=3,
                label="targeted: top-k by induction")
        ax.plot(x_r, t[f"random_{copy}_mean"], "s-", color=PALETTE[0], ms=3,
                label=f"random: k heads outside the targeted set (mean of {draws})")
        ax.fill_between(x_r, t[f"random_{copy}_min"], t[f"random_{copy}_max"], color=PALETTE[0],
                        alpha=0.2, lw=0, label=f"random: min–max over {draws} draws")
        ax.set_xticks(sorted(set(x_t) | set(x_r)))
        if titles:
            ax.set_title(title)
    axes[0].set_ylabel(f"{method}\nloss per token (nats)")


@styled
def circuit_bars(scores: pd.DataFrame):
    """Induction score of the top heads: intact, previous-token head cut, largest random shift."""
    s = scores.sort_values("rank")
    x = np.arange(len(s))
    w = 0.27
    prev = s.prev_head.iloc[0]
    fig, ax = figure(TWO_COLUMNS * 0.7, 2.6)
    ax.bar(x - w, s.intact, w, color=PALETTE[7], label="intact")
    ax.bar(x, s.after_prev_cut, w, color=PALETTE[3], label=f"previous-token head {prev} cut")
    ax.bar(x + w, s.random_at_max_shift, w, color=PALETTE[0],
           label=f"one random head cut (largest shift of {int(s.n_random_draws.iloc[0])})")
    thr = float(s.half_threshold.iloc[0])
    ax.axhline(thr, color="0.5", lw=0.6, ls="--")
    ax.set_xticks(x, s.label, rotation=45, ha="right")
    ax.set_ylabel("induction score (circuit set)")
    ax.set_title(f"{int(s.n_lose_half_prev_cut.iloc[0])} of {int(s.n_above_threshold.iloc[0])} heads "
                 f"with induction > {thr:g} lose more than half when {prev} is cut "
                 f"(random: at most {int(s.n_lose_half_random_max.iloc[0])})")
    ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncols=3)
    return fig


@styled
def attribution_heatmap(attribution: pd.DataFrame, phrase: str):
    """Drop in probability (points) for each head cut alone: layers × heads, layer 0 on top."""
    a = attribution[attribution.phrase == phrase]
    if a.empty:
        raise ValueError(f"no attribution rows for phrase {phrase!r}")
    L, H = int(a.layer.max()) + 1, int(a["head"].max()) + 1
    grid = np.full((L, H), np.nan)
    grid[a.layer.to_numpy(), a["head"].to_numpy()] = a.drop_points.to_numpy()
    lim = max(float(np.nanmax(np.abs(grid))), 1e-9)
    fig, ax = figure(min(ONE_COLUMN * 1.4, 0.35 * H + 1.6), min(9.0, 0.18 * L + 1.2))
    im = ax.imshow(grid, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest",
                   origin="upper")
    ax.set_xticks(range(H))
    ax.set_yticks(range(0, L, max(1, L // 10)))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    p0 = float(a.p_intact.iloc[0])
    ax.set_title(f"{phrase}: p({a.expected.iloc[0]!r}) = {p0:.3f} intact")
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label("drop when cut (percentage points)")
    return fig


@styled
def pairs_bars(pairs: pd.DataFrame):
    """Non-additivity: drop(A) + drop(B) against drop(A and B together), per phrase."""
    p = pairs.reset_index(drop=True)
    x = np.arange(len(p))
    w = 0.2
    fig, ax = figure(TWO_COLUMNS * 0.7, 2.6)
    ax.bar(x - 1.5 * w, p.drop_a, w, color=PALETTE[1], label="drop(A)")
    ax.bar(x - 0.5 * w, p.drop_b, w, color=PALETTE[2], label="drop(B)")
    ax.bar(x + 0.5 * w, p.drop_sum, w, color=PALETTE[5], label="drop(A) + drop(B)")
    ax.bar(x + 1.5 * w, p.drop_both, w, color=PALETTE[3], label="drop(A and B together)")
    ax.axhline(0, color="0.3", lw=0.5)
    ax.set_xticks(x, [f"{r.phrase}\nA={r.a} B={r.b}" for r in p.itertuples()])
    ax.set_ylabel("drop in probability (points)")
    ax.set_title("two costliest heads per phrase: sum of single cuts vs cut together")
    ax.legend(frameon=False, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return fig
