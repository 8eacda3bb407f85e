"""Figures of the induction sweep (protocol §7c), drawn from its tables only: every run's loss on the
predictable part against step, per task and head size; the Kaplan–Meier curves of the time to each
event per cell of the grid, with the regression's verdicts; and which heads are induction heads at
the end, per seed. Every label (cells, heads, references, thresholds, counts, verdicts) is read from
the tables."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .style import PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled

TASK_TITLES = {"repeat": "repeated random tokens", "markov": "in-context Markov chains"}
EVENT_TITLES = {"phase": "phase change", "induction": "first induction head"}


def _tasks(table: pd.DataFrame) -> list[str]:
    return [t for t in TASK_TITLES if t in set(table["task"])]


def _heads_colours(heads) -> dict:
    return {h: PALETTE[i % len(PALETTE)] for i, h in enumerate(sorted(set(heads)))}


@styled
def loss_curves(curves: pd.DataFrame, runs: pd.DataFrame, margin: float):
    """Per task and control (rows) and head size (columns): every run's loss on the predictable part
    against step until it stopped, coloured by its heads; the best predictor's and the unordered
    references and the phase-change level (the unordered reference − margin)."""
    names = [n for t in _tasks(runs) for n in (t, f"{t}_control") if n in set(runs["task"])]
    sizes = sorted(set(runs["head_size"]))
    colour = _heads_colours(runs["heads"])
    fig, axes = figure(TWO_COLUMNS, 1.8 * len(names) + 0.5, nrows=len(names), ncols=len(sizes), squeeze=False,
                       sharex=True, sharey="row")
    for r, name in enumerate(names):
        for c, size in enumerate(sizes):
            ax = axes[r][c]
            sub = curves[(curves.task == name) & (curves.head_size == size)]
            for (heads, _seed), g in sub.groupby(["heads", "seed"]):
                ax.plot(g["step"], g["loss"], color=colour[heads], lw=0.6, alpha=0.7)
            if not sub.empty:
                ref, uni = sub["reference"].mean(), sub["unigram"].mean()
                ax.axhline(ref, color="black", lw=0.8, ls=":")
                ax.axhline(uni, color="grey", lw=0.8, ls="--")
                ax.axhline(uni - margin, color="grey", lw=0.8, ls="-.")
            if r == 0:
                ax.set_title(f"head size {size}")
            if c == 0:
                kind = " (control)" if name.endswith("_control") else ""
                ax.set_ylabel(f"{TASK_TITLES[name.removesuffix('_control')]}{kind}\nloss (nats)")
            if r == len(names) - 1:
                ax.set_xlabel("step")
    handles = [axes[0][0].plot([], [], color=colour[h], lw=1.2, label=f"{h} head{'' if h == 1 else 's'}")[0] for h in sorted(colour)]
    handles += [axes[0][0].plot([], [], color=k, ls=ls, lw=0.8, label=label)[0] for k, ls, label in (
        ("black", ":", "best predictor"), ("grey", "--", "best without the order"),
        ("grey", "-.", f"phase change ({margin:g} below it)"))]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=min(5, len(handles)),
               frameon=False)
    fig.tight_layout()
    return fig


@styled
def survival_curves(survival: pd.DataFrame, summary: pd.DataFrame):
    """Per task and event (rows) and head size (columns): the Kaplan–Meier share of runs still without
    the event against step, one curve per head count with its 95 % band, a cross where a run was
    censored. The regression's verdicts are a table's (the page's, beside the figure): in a panel
    they would cover the curves."""
    rows = [(t, e) for t in _tasks(survival) for e in EVENT_TITLES if ((survival.task == t) & (survival.event == e)).any()]
    sizes = sorted(set(survival["head_size"]))
    colour = _heads_colours(survival["heads"])
    fig, axes = figure(TWO_COLUMNS, 1.9 * len(rows) + 0.5, nrows=len(rows), ncols=len(sizes), squeeze=False,
                       sharex=True, sharey=True)
    for r, (task, event) in enumerate(rows):
        for c, size in enumerate(sizes):
            ax = axes[r][c]
            sub = survival[(survival.task == task) & (survival.event == event) & (survival.head_size == size)]
            for heads, g in sub.groupby("heads"):
                ax.step(g["step"], g["survival"], where="post", color=colour[heads], lw=1.1)
                ax.fill_between(g["step"], g["lo"], g["hi"], step="post", color=colour[heads],
                                alpha=0.12, lw=0)
                s = summary[(summary.task == task) & (summary.head_size == size) & (summary.heads == heads)]
                censored = int(s["runs"].iloc[0] - s["changed" if event == "phase" else "formed"].iloc[0]) if len(s) else 0
                if censored:
                    ax.plot([g["step"].iloc[-1]], [g["survival"].iloc[-1]], "x", color=colour[heads], ms=4)
            ax.set_ylim(-0.03, 1.03)
            if r == 0:
                ax.set_title(f"head size {size}")
            if c == 0:
                ax.set_ylabel(f"{TASK_TITLES[task]}:\n{EVENT_TITLES[event]}", fontsize=7)
            if r == len(rows) - 1:
                ax.set_xlabel("step")
    handles = [axes[0][0].plot([], [], color=colour[h], lw=1.2, label=f"{h} head{'' if h == 1 else 's'}")[0] for h in sorted(colour)]
    handles.append(axes[0][0].plot([], [], "x", color="black", ms=4, label="censored runs (no event by their end)")[0])
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=min(6, len(handles)),
               frameon=False)
    fig.supylabel("share of runs still without the event")
    fig.tight_layout()
    return fig


@styled
def final_heads(heads: pd.DataFrame, runs: pd.DataFrame, threshold: float):
    """Per task (rows of panels) and cell (columns): each seed's layer-1 heads (rows: seeds,
    columns: heads) coloured by their final induction score above uniform attention's; a dot on
    every induction head (at least ``threshold`` above)."""
    tasks = _tasks(runs)
    shapes = list(dict.fromkeys(runs.sort_values(["head_size", "heads"])["shape"]))
    fig, axes = figure(TWO_COLUMNS, 1.4 * len(tasks) + 0.6, nrows=len(tasks), ncols=len(shapes), squeeze=False)
    image = None
    for r, task in enumerate(tasks):
        for c, shape in enumerate(shapes):
            ax = axes[r][c]
            h = heads[(heads.task == task) & (heads["shape"] == shape) & (heads.layer == 1)]
            if h.empty:
                ax.set_visible(False)
                continue
            grid = h.pivot(index="seed", columns="head", values="induction_excess").sort_index()
            image = ax.imshow(grid.to_numpy(), cmap=SEQUENTIAL, vmin=0, vmax=1, aspect="auto")
            ys, xs = np.nonzero(grid.to_numpy() >= threshold)
            ax.scatter(xs, ys, s=4, color="white")
            ax.set_xticks(range(grid.shape[1]), [str(x) for x in grid.columns] if grid.shape[1] <= 8 else
                          [str(x) if x % 4 == 0 else "" for x in grid.columns], fontsize=5)
            ax.set_yticks(range(grid.shape[0]), [str(s) for s in grid.index], fontsize=5)
            if r == 0:
                ax.set_title(shape, fontsize=6)
            if c == 0:
                ax.set_ylabel(f"{task}\nseed", fontsize=7)
            if r == len(tasks) - 1:
                ax.set_xlabel("layer-1 head", fontsize=6)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="final induction score above uniform attention's")
    return fig
