"""Figures of activation patching (protocol §5d, §8), drawn from the patching tables (and the §4
scores) only.

Every label — the clean and corrupted logit differences, the number of prompts, the
correlations and times of the estimate, the tokens on the position axis, the heads — is read
from the tables and the note stored with them (:func:`headwatch.tableio.read_note`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.arch import head_label
from ..names import SCORES, top_rows
from ..patching.separation import headline
from .style import DIVERGING, TWO_COLUMNS, figure, styled


def _grid(table: pd.DataFrame, rows: str, cols: str, value: str) -> np.ndarray:
    out = np.full((int(table[rows].max()) + 1, int(table[cols].max()) + 1), np.nan)
    out[table[rows].to_numpy(int), table[cols].to_numpy(int)] = table[value].to_numpy(float)
    return out


def _limit(*grids) -> float:
    return max(max(float(np.nanmax(np.abs(g))) for g in grids), 1e-9)


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _baseline(note: dict) -> str:
    if "pairs" in note:        # a researcher's pairs file (headwatch/patching/pairs.py): its lengths, not its path
        lengths = note["lengths"]
        said = (f"{note['prompts']} prompt pairs of {lengths[0]}–{lengths[-1]} tokens: logit difference "
                f"answer − distractor clean {note['clean_logit_diff']:.3f}, corrupted {note['corrupted_logit_diff']:.3f}")
    else:
        said = (f"{note['prompts']} prompts: logit difference answer − distractor clean {note['clean_logit_diff']:.3f}, "
                f"corrupted {note['corrupted_logit_diff']:.3f}")
    return said + separated(note)


def separated(note: dict) -> str:
    """Whether the pairs separate clean from corrupted (:func:`headwatch.patching.separation.headline`) on a line of
    its own; nothing for a note made before the verdict was kept."""
    line = headline(note)
    return "" if line is None else f"\n{line}"


@styled
def heads_maps(heads: pd.DataFrame, note: dict):
    """Every head's score, exact (z patched over every position) beside the attribution-patching
    estimate: layers × heads (layer 0 on top), one diverging scale centred on 0 for both."""
    exact, estimate = _grid(heads, "layer", "head", "score"), _grid(heads, "layer", "head", "estimate_score")
    L, H = exact.shape
    lim = _limit(exact, estimate)
    fig, axes = figure(TWO_COLUMNS, min(9.0, 0.2 * L + 2.2), ncols=2, sharey=True, layout="constrained")
    for ax, grid, title in ((axes[0], exact, f"exact: each head's z patched, every position\n"
                                              f"(batched sweep, {note['exact_seconds']:.1f} s)"),
                            (axes[1], estimate, f"estimate: attribution patching\n"
                                                f"(one forward + backward, {note['estimate_seconds']:.2f} s)")):
        im = ax.imshow(grid, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel("head")
        ax.set_xticks(range(H))
        ax.set_yticks(range(0, L, max(1, L // 10)))
    axes[0].set_ylabel("layer")
    fig.suptitle(f"{_baseline(note)}\nestimate vs exact: Pearson {_fmt(note.get('estimate_pearson'))}, "
                 f"Spearman {_fmt(note.get('estimate_spearman'))}, top-{note['top10']} overlap "
                 f"{note['estimate_top10_overlap']}/{note['top10']}", fontsize=7)
    cb = fig.colorbar(im, ax=list(axes), shrink=0.8)
    cb.set_label("score: (patched − corrupted) / (clean − corrupted)")
    return fig


@styled
def resid_map(resid: pd.DataFrame, positions: pd.DataFrame, note: dict):
    """The residual stream (each block's input) patched at one layer and position, layers ×
    positions, and below it the top heads' z patched at one position; the tokens on the axis
    (a name's slot as {A}, {B}, {C}; positions where templates differ show their tokens). A pairs
    file's positions are counted from the end (−1 = each prompt's last token, protocol §5d): the
    columns run from the longest prompt's first token to −1."""
    first = int(resid["position"].min())          # 0, or −T when aligned from the end
    resid, positions = (t.assign(position=t["position"] - first) for t in (resid, positions))
    grid = _grid(resid, "layer", "position", "score")
    heads = positions.drop_duplicates(["layer", "head"]).sort_values("head_rank")
    order = {(int(r.layer), int(r.head)): i for i, r in enumerate(heads.itertuples())}
    rows = positions.assign(row=[order[(int(l), int(h))] for l, h in zip(positions["layer"], positions["head"])])
    top = _grid(rows, "row", "position", "score")
    labels = list(note["position_labels"])
    lim = _limit(grid, top)
    L, T = grid.shape
    fig, axes = figure(min(TWO_COLUMNS, 0.38 * T + 1.8), min(9.5, 0.17 * (L + len(heads)) + 2.2), nrows=2,
                       sharex=True, gridspec_kw=dict(height_ratios=[L, max(len(heads), 1)]))
    im = axes[0].imshow(grid, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    axes[0].set_ylabel("layer (block input)")
    axes[0].set_yticks(range(0, L, max(1, L // 10)))
    axes[0].set_title(f"residual stream patched at one layer and position; {_baseline(note)}", fontsize=7)
    axes[1].imshow(top, cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    axes[1].set_yticks(range(len(heads)), [f"{r.label} (#{int(r.head_rank)})" for r in heads.itertuples()])
    axes[1].set_title("the top heads' z patched at one position", fontsize=7)
    axes[1].set_xticks(range(T), labels, rotation=60, ha="right")
    axes[1].set_xlabel("position (token)" if first == 0 else "position from the end (token where the prompts agree)")
    cb = fig.colorbar(im, ax=list(axes), shrink=0.8)
    cb.set_label("score")
    return fig


@styled
def top_heads_table(heads: pd.DataFrame, scores: pd.DataFrame, note: dict):
    """The top heads by patching score as a table, with their estimate and their §4 scores (and
    ranks) beside them: do the heads that carry the name look like induction or previous-token
    heads?"""
    k = int(note["top10"])
    top = top_rows(heads, "score", k)
    merged = top.merge(scores, on=["layer", "head"], how="left", validate="one_to_one")
    if merged[list(SCORES)].isna().any().any():
        raise ValueError("scores.parquet lacks a head of the patching table")
    columns = ["head", "score", "logit diff", "estimate"] + [f"{s} (rank)" for s in SCORES]
    cells = [[head_label(int(r.layer), int(r.head)), f"{r.score:.3f}", f"{r.logit_diff:.3f}",
              f"{r.estimate_score:.3f}"] + [f"{getattr(r, s):.3f} (#{int(getattr(r, s + '_rank'))})" for s in SCORES]
             for r in merged.itertuples()]
    fig, ax = figure(TWO_COLUMNS, 0.22 * (len(cells) + 1) + 0.6)
    ax.axis("off")
    tab = ax.table(cellText=cells, colLabels=columns, loc="center", cellLoc="right", colLoc="right")
    tab.auto_set_font_size(False)
    tab.set_fontsize(7)
    tab.scale(1.0, 1.25)
    tab.auto_set_column_width(list(range(len(columns))))
    ax.set_title(f"top {len(cells)} heads by patching score ({_baseline(note)}) and their §4 scores; "
                 f"{len(heads)} heads in all", fontsize=7)
    return fig


__all__ = ["heads_maps", "resid_map", "top_heads_table", "separated"]
