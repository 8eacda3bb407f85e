"""The figures of edge circuits (protocol §5g), drawn from their tables and notes only.

* :func:`faithfulness_curves` — faithfulness against circuit size for each method, the signed
  ranking (its area is the CPR) and the absolute one (|1 − f|'s area is the CMD) side by side,
  with the random circuits' band (their lowest to highest at each size) and mean;
* :func:`circuit_by_layer` — the best small circuit drawn by layer: senders and receivers at their
  layer, each edge a line whose width is its score.

Every label — the methods, the areas, the sizes, the prompts, the threshold — comes from the
tables and notes.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .style import PALETTE, TWO_COLUMNS, figure, styled

RANDOM = "random"
RANKING_TITLES = {"signed": "signed ranking: area under f = CPR (higher is better)",
                  "absolute": "absolute ranking: area under |1 − f| = CMD (lower is better)"}


@styled
def faithfulness_curves(curves: pd.DataFrame, areas: pd.DataFrame, note: dict):
    """Two panels (signed, absolute ranking): each method's faithfulness at each size (a fraction
    of every edge, log axis), the random circuits' band and mean in grey, 0 and 1 marked."""
    fig, axes = figure(TWO_COLUMNS, 3.0, ncols=2, sharey=True, layout="constrained")
    methods = [m for m in dict.fromkeys(curves["method"]) if m != RANDOM]
    rand = curves[curves["method"] == RANDOM]
    band = rand.groupby("fraction")["faithfulness"].agg(["min", "max", "mean"]).reset_index() if len(rand) else None
    area = areas.set_index(["method", "draw"])
    for ax, (ranking, title) in zip(np.atleast_1d(axes), RANKING_TITLES.items()):
        if band is not None:
            ax.fill_between(band["fraction"], band["min"], band["max"], color="0.85",
                            label=f"random, {rand['draw'].nunique()} draws (lowest to highest)")
            ax.plot(band["fraction"], band["mean"], color="0.5", linewidth=0.8, label="random, mean")
        for i, method in enumerate(methods):
            c = curves[(curves["method"] == method) & (curves["ranking"] == ranking)].sort_values("fraction")
            if c.empty:
                continue
            key = "cpr" if ranking == "signed" else "cmd"
            value = area.loc[(method, -1), key] if (method, -1) in area.index else float("nan")
            ax.plot(c["fraction"], c["faithfulness"], marker="o", markersize=2.5, color=PALETTE[i % len(PALETTE)],
                    label=f"{method} ({key.upper()} {value:.3f})")
        ax.axhline(1.0, color="0.3", linewidth=0.5, linestyle=":")
        ax.axhline(0.0, color="0.3", linewidth=0.5, linestyle=":")
        ax.set_xscale("log")
        ax.set_xlabel("circuit size (fraction of every edge)")
        ax.set_title(title, fontsize=7)
        ax.legend(fontsize=6, frameon=False)
    np.atleast_1d(axes)[0].set_ylabel("faithfulness f")
    fig.suptitle(f"{note['edges']:,} edges, {note['prompts']} prompts; m(full) = {note['full']:.3f}, "
                 f"m(empty) = {note['empty']:.3f} (logit difference)", fontsize=7)
    return fig


@styled
def top_edges(edges: pd.DataFrame, n: int = 20):
    """The ``n`` edges of the highest score by each method (a panel a method), bars from zero, the
    edge's sender → receiver beside its bar."""
    methods = [c for c in ("eap", "eap_ig") if c in edges.columns]
    fig, axes = figure(TWO_COLUMNS, 0.16 * n + 1.2, ncols=len(methods), layout="constrained", squeeze=False)
    for ax, method, colour in zip(axes[0], methods, PALETTE):
        top = edges.reindex(edges[method].sort_values(ascending=False).index).head(n)[::-1]
        ax.barh(range(len(top)), top[method], color=colour)
        ax.set_yticks(range(len(top)), [f"{s} → {r}" for s, r in zip(top["sender"], top["receiver"])], fontsize=6)
        ax.axvline(0, color="0.3", linewidth=0.5)
        ax.set_xlabel(f"{method.replace('_', '-').upper()} score (the logit difference an edge carries, first order)")
        ax.set_title(f"the {len(top)} strongest of {len(edges):,} edges", fontsize=7)
    return fig


def _position(kind: str, layer: int, unit: int, heads: int, layers: int, group: int) -> tuple[float, float]:
    """(x, y) of a sender or receiver: layer up, head across; a feed-forward network right of the
    heads, the embeddings below, the logits above; a key or value group between its heads."""
    if kind == "input":
        return (heads - 1) / 2, -1.0
    if kind == "logits":
        return (heads - 1) / 2, float(layers)
    if kind == "mlp":
        return heads + 0.5, layer + 0.35
    if kind in ("k", "v"):
        return unit * group + (group - 1) / 2, float(layer)
    return float(unit), float(layer)


RECEIVER_COLOURS = {"q": PALETTE[0], "k": PALETTE[1], "v": PALETTE[2], "mlp": PALETTE[3], "logits": PALETTE[4]}


@styled
def circuit_by_layer(circuit: pd.DataFrame, note: dict, graph: dict):
    """The circuit's edges from sender to receiver (its colour the receiver's kind, its width the
    score, dashed when negative), heads as points by layer and head."""
    layers, heads, groups = int(graph["layers"]), int(graph["heads"]), int(graph["groups"])
    fig, ax = figure(TWO_COLUMNS, min(8.0, 0.22 * layers + 2.0), layout="constrained")
    ax.scatter([h for _ in range(layers) for h in range(heads)], [l for l in range(layers) for _ in range(heads)],
               s=6, color="0.8", zorder=1)
    if circuit.empty:
        ax.text(0.5, 0.5, f"no circuit of {note['method']} reaches faithfulness {note['threshold']:g} "
                          f"(best {note.get('best', float('nan')):.3f})", transform=ax.transAxes, ha="center")
    else:
        top = float(circuit["score"].abs().max()) or 1.0
        group = heads // groups
        at = lambda kind, layer, unit: _position(kind, int(layer), int(unit), heads, layers, group)
        for r in circuit.sort_values("score", key=abs).itertuples():
            x0, y0 = at(r.sender_kind, r.sender_layer, r.sender_unit)
            x1, y1 = at(r.receiver_kind, r.receiver_layer, r.receiver_unit)
            ax.plot([x0, x1], [y0, y1], color=RECEIVER_COLOURS[r.receiver_kind], alpha=0.8,
                    linewidth=0.4 + 2.2 * abs(r.score) / top, linestyle="-" if r.score > 0 else "--", zorder=2)
        for r in circuit[circuit["sender_kind"] == "head"].drop_duplicates("sender").itertuples():
            x, y = at("head", r.sender_layer, r.sender_unit)
            ax.scatter([x], [y], s=14, color="black", zorder=3)
            ax.annotate(r.sender, (x, y), fontsize=5, xytext=(2, 2), textcoords="offset points")
    for kind, colour in RECEIVER_COLOURS.items():
        ax.plot([], [], color=colour, label=f"into {kind}")
    ax.set_xlabel("head (a key or value edge ends between its group's heads; feed-forward at the right)")
    ax.set_ylabel("layer (embeddings below, logits above)")
    ax.set_ylim(-1.5, layers + 0.5)
    ax.legend(fontsize=6, frameon=False, ncols=5, loc="upper left")
    kept = f"{note['kept']} edges (the top {note['edges']} by score, pruned)" if note.get("found") else "none"
    ax.set_title(f"{note['method']}: the smallest circuit with faithfulness ≥ {note['threshold']:g}: {kept}"
                 + (f", f = {note['faithfulness']:.3f}" if note.get("found") else ""), fontsize=7)
    return fig
