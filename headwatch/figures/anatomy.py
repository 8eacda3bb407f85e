"""Anatomy figures (protocol §6, §8): parameters by block, rotary clocks, KV cache per
token, and the key-group cut matrix. Each reads a table; every label comes from it."""
from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from .style import ONE_COLUMN, PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled

BLOCK_ORDER = ["input_embeddings", "position_embeddings", "attention", "ffn", "norms",
               "output_embeddings", "other"]


def _label(name: str, source: str, duplicated: bool) -> str:
    return f"{name} ({source})" if duplicated else name


def _millions(n: float) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def _compact(n: float) -> str:
    """6, 1.4k, 438k, 1.1M: a period that fits above a small dial."""
    if n < 1e3:
        return f"{n:.0f}"
    if n < 1e6:
        return f"{n / 1e3:.1f}k" if n < 1e4 else f"{n / 1e3:.0f}k"
    return f"{n / 1e6:.1f}M"


@styled
def params_by_block(table: pd.DataFrame):
    """Stacked shares of each block, one bar per model; the total printed beside it."""
    ok = table[table["block"] != "error"]
    keys = list(dict.fromkeys(zip(ok["name"], ok["source"])))
    names = [k[0] for k in keys]
    blocks = [b for b in BLOCK_ORDER if ok.loc[ok["block"] == b, "params"].sum() > 0]
    fig, ax = figure(TWO_COLUMNS, 0.9 + 0.26 * len(keys))
    left = np.zeros(len(keys))
    for i, block in enumerate(blocks):
        share = np.array([ok[(ok["name"] == n) & (ok["source"] == s) & (ok["block"] == block)]["share"].sum()
                          for n, s in keys])
        ax.barh(range(len(keys)), share, left=left, color=PALETTE[i % len(PALETTE)],
                label=block.replace("_", " "))
        for y, (x0, w) in enumerate(zip(left, share)):
            if w > 0.06:
                ax.text(x0 + w / 2, y, f"{100 * w:.0f}%", ha="center", va="center", fontsize=6,
                        color="white")
        left += share
    for y, (n, s) in enumerate(keys):
        total = ok[(ok["name"] == n) & (ok["source"] == s) & (ok["block"] == "total")]["params"].item()
        ax.text(1.01, y, _millions(total), va="center", fontsize=6)
    ax.set_yticks(range(len(keys)),
                  [_label(n, s, names.count(n) > 1) for n, s in keys])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the model's parameters (total at right)")
    ax.legend(ncol=len(blocks), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return fig


@styled
def rotary_clocks(table: pd.DataFrame, models: list[str], per_row: int = 16):
    """One dial per rotated pair: where its hand stands after ``distance`` tokens.

    Hands start at 12 o'clock and turn clockwise. Blue dials have not yet made a
    full turn (period > distance): they still tell that distance apart from 0.
    """
    sel = table[table["name"].isin(models)]
    if sel.empty:
        raise ValueError(f"no rotary rows for {models} (have {sorted(table['name'].unique())})")
    variants = list(dict.fromkeys(zip(sel["name"], sel["variant"])))
    lines = []  # (variant index, pairs on this line)
    for v, (name, variant) in enumerate(variants):
        rows = sel[(sel["name"] == name) & (sel["variant"] == variant)].sort_values("pair")
        for start in range(0, len(rows), per_row):
            lines.append((v, rows.iloc[start:start + per_row]))
    fig = plt.figure(figsize=(TWO_COLUMNS, 0.55 * len(lines) + 0.2 * len(variants) + 0.3))
    gs = fig.add_gridspec(len(lines), per_row, hspace=0.75, wspace=0.15)
    shown = set()
    for li, (v, rows) in enumerate(lines):
        for ci, r in enumerate(rows.itertuples()):
            ax = fig.add_subplot(gs[li, ci])
            colour = PALETTE[0] if not r.wrapped_at_distance else "0.6"
            ax.add_patch(plt.Circle((0, 0), 1, fill=False, lw=0.6, color="0.4"))
            a = r.angle_at_distance
            ax.plot([0, math.sin(a)], [0, math.cos(a)], color=colour, lw=1.2)
            ax.plot(0, 0, "o", ms=1.5, color="0.2")
            ax.set_xlim(-1.15, 1.15)
            ax.set_ylim(-1.15, 1.15)
            ax.set_aspect("equal")
            ax.axis("off")
            ax.set_title(f"{r.pair}: {_compact(r.period)}", fontsize=5, pad=1)
            if ci == 0 and v not in shown:
                shown.add(v)
                ax.text(-1.3, 1.75, f"{r.name}, {r.variant} ({r.base:,.0f}): {r.pairs_not_wrapped_at_distance} "
                        f"of {r.pairs} pairs not yet wrapped at {r.distance:,.0f} tokens; reach "
                        f"{r.reach:,.0f} tokens = {r.margin:.1f} × context {r.context:,}",
                        fontsize=6.5, ha="left", va="bottom", transform=ax.transData)
    fig.suptitle("rotary clocks: pair n and its period (tokens); grey = already wrapped, "
                 "blue = not yet", fontsize=7, y=1.0)
    return fig


@styled
def kv_cache(table: pd.DataFrame, dtype: str = "float16"):
    """KV cache per token in KiB, as built (key sharing) and without sharing, per model."""
    t = table[table["dtype"] == dtype]
    names = list(dict.fromkeys(t["name"]))
    fig, ax = figure(ONE_COLUMN, 0.8 + 0.22 * len(names))
    y = np.arange(len(names))
    shared = np.array([t[t["name"] == n]["per_token"].iloc[0] for n in names]) / 1024
    unshared = np.array([t[t["name"] == n]["per_token_no_sharing"].iloc[0] for n in names]) / 1024
    nbytes = int(t["bytes_per_number"].iloc[0])
    ax.barh(y + 0.2, unshared, height=0.4, color=PALETTE[1], label="without key sharing (kv heads = heads)")
    ax.barh(y - 0.2, shared, height=0.4, color=PALETTE[0], label="as built")
    for yi, (s, u) in enumerate(zip(shared, unshared)):
        ax.text(s * 1.05, yi - 0.2, f"{s:,.1f}", va="center", fontsize=5.5)
        if u != s:
            ax.text(u * 1.05, yi + 0.2, f"{u:,.1f} (×{u / s:g})", va="center", fontsize=5.5)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(right=max(unshared.max(), shared.max()) * 4)
    ax.set_xlabel(f"KV cache per token (KiB, {dtype}: {nbytes} bytes per number)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    return fig


def _wrap(text: str, width: int = 48) -> str:
    return "\n".join(textwrap.wrap(text, width))


@styled
def kv_cut_matrix(table: pd.DataFrame):
    """Max |Δattention| of every head of the cut layer (columns) for every cut key slice (rows).

    White cells changed by exactly 0. One panel for the model, one for its ungrouped control.
    """
    roles = [r for r in ("model", "control") if (table["role"] == r).any()]
    fig, axes = figure(TWO_COLUMNS, 5.5, ncols=len(roles), squeeze=False,
                       gridspec_kw=dict(width_ratios=[table[table["role"] == r]["head"].nunique() for r in roles]))
    vals = table.loc[table["max_delta"] > 0, "max_delta"]
    norm = LogNorm(vmin=max(vals.min(), 1e-8), vmax=vals.max())
    for ax, role in zip(axes[0], roles):
        t = table[table["role"] == role]
        cuts = list(dict.fromkeys(zip(t["layer"], t["kv_group"])))
        heads = sorted(t["head"].unique())
        m = np.zeros((len(cuts), len(heads)))
        index = {c: i for i, c in enumerate(cuts)}
        for r in t.itertuples():
            m[index[(r.layer, r.kv_group)], r.head] = r.max_delta
        im = ax.imshow(np.ma.masked_equal(m, 0), aspect="auto", cmap=SEQUENTIAL, norm=norm,
                       interpolation="nearest")
        moved = sorted(t.groupby(["layer", "kv_group"])["heads_moved"].first().unique())
        group = sorted(t.groupby(["layer", "kv_group"])["group_heads"].first().unique())
        ax.set_title(f"{_wrap(t['model'].iloc[0])}\n{len(cuts)} cuts; heads moved per cut: "
                     f"{', '.join(map(str, moved))}\n(group size {', '.join(map(str, group))}); "
                     f"outside the group: max |Δ| = {t['others_max_delta'].max():g}", fontsize=6)
        ax.set_xticks(range(len(heads)), heads)
        ax.set_xlabel("head of the cut layer")
        layers = sorted(t["layer"].unique())
        step = max(1, len(layers) // 15)
        ticks = [(i, f"L{l} g{g}") for i, (l, g) in enumerate(cuts) if g == 0 and l % step == 0]
        ax.set_yticks([i for i, _ in ticks], [s for _, s in ticks], fontsize=5)
        if role == roles[0]:
            ax.set_ylabel("key slice zeroed (layer, kv group)")
    fig.colorbar(im, ax=axes[0].tolist(), label="max |Δ attention| (white: exactly 0)", shrink=0.6)
    return fig
