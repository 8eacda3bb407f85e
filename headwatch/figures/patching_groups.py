"""Figures of the key/value group sweep and of every head patched at every position through the
key/value cache (protocol §5d), drawn from their tables and notes only (every label read there)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .patching import _baseline, _grid, _limit
from .style import DIVERGING, TWO_COLUMNS, figure, styled


@styled
def kv_groups_map(kv: pd.DataFrame, note: dict):
    """The key groups' and the value groups' scores, layers × groups (layer 0 on top), side by
    side on one diverging scale centred on 0."""
    grids = {site: _grid(kv[kv["site"] == site], "layer", "group", "score") for site in ("k", "v")}
    L, G = grids["k"].shape
    lim = _limit(*grids.values())
    fig, axes = figure(TWO_COLUMNS, min(9.0, 0.2 * L + 2.2), ncols=2, sharey=True, layout="constrained")
    for ax, (site, grid) in zip(axes, grids.items()):
        im = ax.imshow(grid, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax.set_title(f"{'keys' if site == 'k' else 'values'} of each group patched, every position")
        ax.set_xlabel(f"key/value group ({note['group_size']} query head{'s' if note['group_size'] > 1 else ''} each)")
        ax.set_xticks(range(G))
        ax.set_yticks(range(0, L, max(1, L // 10)))
    axes[0].set_ylabel("layer")
    best = kv.sort_values(["score", "layer", "group"], ascending=[False, True, True]).iloc[0]
    fig.suptitle(f"{_baseline(note)}; {note['heads']} query heads over {note['kv_heads']} key/value groups a layer\n"
                 f"highest: {best['label']} (heads {best['heads']}), score {best['score']:.3f}", fontsize=7)
    cb = fig.colorbar(im, ax=list(axes), shrink=0.8)
    cb.set_label("score: (patched − corrupted) / (clean − corrupted)")
    return fig


@styled
def positions_all_map(table: pd.DataFrame, note: dict):
    """Each patched head's z at one position, heads (layer-major) × positions, the tokens on the
    axis; the heads chosen and the sweep's cost from the note."""
    heads = table.drop_duplicates(["layer", "head"]).sort_values(["layer", "head"])
    order = {(int(r.layer), int(r.head)): i for i, r in enumerate(heads.itertuples())}
    rows = table.assign(row=[order[(int(l), int(h))] for l, h in zip(table["layer"], table["head"])])
    grid = _grid(rows, "row", "position", "score")
    H, T = grid.shape
    lim = _limit(grid)
    fig, ax = figure(min(TWO_COLUMNS, 0.38 * T + 2.2), min(9.5, 0.12 * H + 1.8), layout="constrained")
    im = ax.imshow(grid, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    step = max(1, int(np.ceil(H / 40)))
    ax.set_yticks(range(0, H, step), [r.label for r in heads.itertuples()][::step], fontsize=5)
    ax.set_xticks(range(T), list(note["position_labels"]), rotation=60, ha="right")
    ax.set_xlabel("position (token)")
    ax.set_ylabel("head")
    ratio = note["multiply_adds_loop"] / note["multiply_adds_cached"]
    ax.set_title(f"{note['heads_chosen']} ({note['heads_patched']} of {note['heads_total']}): z patched at one "
                 f"position, through the corrupted run's key/value cache\n{_baseline(note)}; "
                 f"{note['sweep_seconds']:.1f} s, {ratio:.2f}× fewer multiply-adds than one patch per forward pass",
                 fontsize=7)
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label("score")
    return fig


__all__ = ["kv_groups_map", "positions_all_map"]
