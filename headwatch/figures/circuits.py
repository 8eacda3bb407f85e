"""The figure of path patching (protocol §5e), drawn from its table and note only: the edges
whose |score| reaches the note's threshold, as a graph of heads by layer.

Every label — the threshold, the receivers, the prompts and the clean and corrupted logit
differences — is read from the table and the note stored with it (:func:`headwatch.tableio.read_note`).
"""
from __future__ import annotations

import pandas as pd
from matplotlib.patches import FancyArrowPatch

from .style import PALETTE, TWO_COLUMNS, figure, styled
from .patching import separated

INPUT_COLOURS = {"q": PALETTE[0], "k": PALETTE[1], "v": PALETTE[2]}


@styled
def edge_graph(paths: pd.DataFrame, note: dict):
    """Heads as points (layer across, head up); each edge with |score| ≥ the note's
    ``edge_threshold`` an arrow from sender to receiver, its colour the receiver's input, its
    width and label the score; the receivers ringed."""
    threshold = float(note["edge_threshold"])
    kept = paths[paths["score"].abs() >= threshold].sort_values("score", key=abs)
    layers = int(max(paths["receiver_layer"].max(), paths["sender_layer"].max())) + 1
    heads = int(max(paths["receiver_head"].max(), paths["sender_head"].max())) + 1
    fig, ax = figure(TWO_COLUMNS, min(8.0, 0.35 * heads + 2.4), layout="constrained")
    ax.scatter([l for l in range(layers) for _ in range(heads)], [h for _ in range(layers) for h in range(heads)],
               s=8, color="0.75", zorder=1)
    recv = paths[["receiver_layer", "receiver_head"]].drop_duplicates()
    ax.scatter(recv["receiver_layer"], recv["receiver_head"], s=90, facecolors="none", edgecolors="black",
               linewidths=1.0, zorder=3, label="receiver")
    top = max(float(kept["score"].abs().max()), threshold) if len(kept) else 1.0
    for r in kept.itertuples():
        ax.add_patch(FancyArrowPatch((r.sender_layer, r.sender_head), (r.receiver_layer, r.receiver_head),
                                     connectionstyle="arc3,rad=0.12", arrowstyle="-|>", mutation_scale=8,
                                     linewidth=0.6 + 2.4 * abs(r.score) / top, color=INPUT_COLOURS[r.input],
                                     linestyle="-" if r.score > 0 else "--", alpha=0.85, zorder=2))
    for name, colour in INPUT_COLOURS.items():
        if name in set(paths["input"]):
            ax.plot([], [], color=colour, label=f"into {name}")
    ax.plot([], [], color="0.3", linestyle="--", label="negative score")
    ax.set_xlim(-0.5, layers - 0.5)
    ax.set_ylim(-0.7, heads - 0.3)
    ax.set_xlabel("layer")
    ax.set_ylabel("head")
    ax.set_xticks(range(0, layers, max(1, layers // 15)))
    ax.set_yticks(range(heads))
    ax.legend(loc="upper left", fontsize=6, frameon=False, ncols=5)
    ax.set_title(f"{len(kept)} of {len(paths)} edges with |score| ≥ {threshold:g} into {note['receivers']}; "
                 f"{note['prompts']} prompts, logit difference clean {note['clean_logit_diff']:.3f}, corrupted "
                 f"{note['corrupted_logit_diff']:.3f}{separated(note)}", fontsize=7)
    return fig
