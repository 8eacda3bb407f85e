"""Figures of where heads look: all-heads grids, one head enlarged, ranked scores."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.arch import head_label
from ..names import SCORES, top_rows
from .style import ONE_COLUMN, PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled


def map_of(maps: pd.DataFrame, phrase: str, layer: int, head: int) -> np.ndarray:
    """One head's stored map as a dense [T, T] array (zeros above the diagonal): the inverse of
    :func:`headwatch.scores.attention.maps_table`, kept here so that the figure jobs need not import torch."""
    m = maps[(maps.phrase == phrase) & (maps.layer == layer) & (maps["head"] == head)]
    T = int(m["row"].max()) + 1
    A = np.zeros((T, T), dtype=np.float32)
    A[m["row"].to_numpy(), m["col"].to_numpy()] = m["weight"].to_numpy()
    return A


def mosaic(maps: pd.DataFrame, phrase: str) -> tuple[np.ndarray, int, int, int]:
    """All heads' maps of a phrase tiled into one image: layer rows (layer 0 on top) × head columns.

    Tiles are separated by a one-cell NaN gutter (drawn blank)."""
    m = maps[maps.phrase == phrase]
    L, H = int(m.layer.max()) + 1, int(m["head"].max()) + 1
    T = int(m["row"].max()) + 1
    step = T + 1
    img = np.full((L * step - 1, H * step - 1), np.nan, dtype=np.float32)
    for l in range(L):
        for h in range(H):
            img[l * step:l * step + T, h * step:h * step + T] = 0.0  # above the diagonal: 0
    img_rows = m.layer.to_numpy() * step + m["row"].to_numpy()
    img_cols = m["head"].to_numpy() * step + m["col"].to_numpy()
    img[img_rows, img_cols] = m.weight.to_numpy()
    return img, L, H, T


@styled
def grid(maps: pd.DataFrame, phrase: str):
    """Small multiples of every head's map on one phrase (layers × heads, layer 0 on top)."""
    img, L, H, T = mosaic(maps, phrase)
    cell = min(TWO_COLUMNS / H, 9.0 / L, 0.8)            # inches per head; fits one page
    fig, ax = figure(max(cell * H + 0.9, 2.5), cell * L + 0.8)
    im = ax.imshow(img, cmap=SEQUENTIAL, vmin=0, vmax=1, interpolation="nearest", aspect="equal")
    step = T + 1
    ax.set_yticks(np.arange(L) * step + T / 2, [str(l) for l in range(L)])
    ax.set_xticks(np.arange(H) * step + T / 2, [str(h) for h in range(H)])
    ax.tick_params(length=0, labelsize=max(5, min(7, 150 / max(L, H))))
    ax.set_ylabel("layer")
    ax.set_xlabel("head")
    ax.set_title(f"attention on '{phrase}' ({T} tokens; rows look, columns are looked at)")
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.colorbar(im, ax=ax, shrink=0.5, label="attention weight")
    return fig


@styled
def head_map(maps: pd.DataFrame, tokens: pd.DataFrame, phrase: str, layer: int, head: int,
             title: str = ""):
    """One head enlarged, with the phrase's tokens written on both axes."""
    A = map_of(maps, phrase, layer, head)
    toks = tokens[tokens.phrase == phrase].sort_values("pos").token.map(repr).str[1:-1].tolist()
    T = len(toks)
    size = min(TWO_COLUMNS, max(ONE_COLUMN, 0.16 * T + 1.2))
    fig, ax = figure(size, size)
    im = ax.imshow(np.where(np.tril(np.ones_like(A)) > 0, A, np.nan), cmap=SEQUENTIAL, vmin=0, vmax=1)
    ax.set_xticks(range(T), toks, rotation=90, fontsize=6)
    ax.set_yticks(range(T), toks, fontsize=6)
    ax.set_xlabel("token looked at")
    ax.set_ylabel("token that looks")
    ax.set_title(title or f"{head_label(layer, head)} on '{phrase}'")
    fig.colorbar(im, ax=ax, shrink=0.6, label="attention weight")
    return fig


@styled
def ranked_scores(scores: pd.DataFrame, label_top: int = 5):
    """The four scores, every head sorted from highest to lowest; the top heads labelled."""
    fig, axes = figure(TWO_COLUMNS, 4.8, nrows=2, ncols=2)
    for ax, name, colour in zip(axes.flat, SCORES, PALETTE):
        ranked = top_rows(scores, name, len(scores)).reset_index(drop=True)
        # a bar per head as one filled outline: 16,384 heads draw in a second, as bars in minutes
        y = ranked[name].to_numpy()
        ax.fill_between(np.arange(len(y) + 1) - 0.5, np.append(y, y[-1]), step="post", color=colour, lw=0)


        top = "\n".join(f"{head_label(int(r.layer), int(r.head))}  {getattr(r, name):.3f}"
                        for r in ranked.head(label_top).itertuples())
        ax.text(0.98, 0.95, f"top {label_top}\n{top}", transform=ax.transAxes, ha="right", va="top",
                fontsize=6, family="monospace")
        ax.set_title(f"{name} (median {ranked[name].median():.3f})")
        ax.set_xlabel(f"heads ranked by {name} (of {len(ranked)})")
        ax.set_ylabel("score (mean attention)")
        ax.set_ylim(0, 1.05)
    fig.tight_layout()
    return fig


@styled
def sink_vs_induction(scores: pd.DataFrame, label_top: int = 5):
    """Each head as a point: attention to token 0 against induction score, coloured by layer."""
    fig, ax = figure(ONE_COLUMN, ONE_COLUMN * 0.9)
    pts = ax.scatter(scores.sink, scores.induction, c=scores.layer, cmap=SEQUENTIAL, s=8)
    top = top_rows(scores, "induction", label_top)
    for i, r in enumerate(top.itertuples()):  # alternate sides so neighbours do not collide
        ax.annotate(head_label(int(r.layer), int(r.head)), (r.sink, r.induction), fontsize=6,
                    xytext=(4, 0) if i % 2 == 0 else (-4, 0), ha="left" if i % 2 == 0 else "right",
                    va="center", textcoords="offset points")
    ax.set_xlabel("sink score (attention to token 0)")
    ax.set_ylabel("induction score")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    fig.colorbar(pts, ax=ax, label="layer")
    return fig
