"""Figures of the induction sweep (protocol §7c), drawn from its tables only: the loss on the
predictable part against step for each shape, the phase-change step against heads for both arms
with intervals, and which heads are induction heads at the end, per seed. Every label (shapes,
heads, references, thresholds, counts) is read from the tables."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..settings.induction import ARMS
from .style import PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled

TASK_TITLES = {"repeat": "repeated random tokens", "markov": "in-context Markov chains"}
ARM_TITLES = {"width": "heads at a fixed width", "head_size": "heads at a fixed head size"}


def _tasks(table: pd.DataFrame) -> list[str]:
    return [t for t in TASK_TITLES if t in set(table["task"])]


@styled
def loss_curves(curves: pd.DataFrame, runs: pd.DataFrame, margin: float):
    """Per task (rows) and whether a control (columns): the loss on the predictable part against
    step, one line per shape (mean over seeds, the band its min-max), the best predictor's and the
    unordered references, and the phase-change level (the unordered reference − margin)."""
    tasks = _tasks(runs)
    kinds = [k for k in ("task", "control") if (k == "task" and tasks) or any(runs.task.str.endswith("_control"))]
    fig, axes = figure(TWO_COLUMNS, 2.4 * len(tasks), nrows=len(tasks), ncols=len(kinds), squeeze=False,
                       sharex=True)
    shapes = list(dict.fromkeys(runs.sort_values(["width", "heads"])["shape"]))
    colour = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(shapes)}
    for r, task in enumerate(tasks):
        for c, kind in enumerate(kinds):
            name = task if kind == "task" else f"{task}_control"
            ax = axes[r][c]
            sub = curves[curves.task == name]
            if sub.empty:
                ax.set_visible(False)
                continue
            for shape in shapes:
                g = sub[sub["shape"] == shape].groupby("step")["loss"]
                if not len(g):
                    continue
                ax.plot(g.mean().index, g.mean(), color=colour[shape], lw=1, label=shape)
                ax.fill_between(g.mean().index, g.min(), g.max(), color=colour[shape], alpha=0.15, lw=0)
            ref, uni = sub["reference"].mean(), sub["unigram"].mean()
            ax.axhline(ref, color="black", lw=0.8, ls=":", label=f"best predictor {ref:.2f}")
            ax.axhline(uni, color="grey", lw=0.8, ls="--", label=f"without the order {uni:.2f}")
            ax.axhline(uni - margin, color="grey", lw=0.8, ls="-.", label=f"phase change {uni - margin:.2f}")
            seeds = sub["seed"].nunique()
            ax.set_title(f"{TASK_TITLES[task]}{' — control' if kind == 'control' else ''} ({seeds} seeds)")
            ax.set_ylabel("loss on the predictable part (nats)")
            if r == len(tasks) - 1:
                ax.set_xlabel("step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=min(6, len(labels)),
               frameon=False)
    fig.tight_layout()
    return fig


@styled
def phase_steps(runs: pd.DataFrame, summary: pd.DataFrame, contrasts: pd.DataFrame, arms: dict, steps: int):
    """Per task (rows) and arm (columns): the phase-change step against heads (log 2), each seed a
    point (a cross at the top, the run's last step ``steps``, for a run that never changed phase), the
    mean over the seeds that changed with its interval; the arm's verdict in the title."""
    tasks = _tasks(runs)
    arm_names = [a for a in ARMS if a in arms]
    fig, axes = figure(TWO_COLUMNS, 2.4 * len(tasks), nrows=len(tasks), ncols=len(arm_names), squeeze=False,
                       sharey="row")
    top = int(steps)
    for r, task in enumerate(tasks):
        for c, arm in enumerate(arm_names):
            ax = axes[r][c]
            shapes = arms[arm]
            rows = summary[(summary.task == task) & summary["shape"].isin(shapes)].set_index("shape").loc[
                [x for x in shapes if x in set(summary[summary.task == task]["shape"])]]
            x = rows["heads"].to_numpy()
            for shape, h in zip(rows.index, x):
                runs_of = runs[(runs.task == task) & (runs["shape"] == shape)]
                changed = runs_of["phase_step"].dropna().astype(float)
                ax.scatter(np.full(len(changed), h), changed, s=8, color=PALETTE[c], alpha=0.5, lw=0)
                never = len(runs_of) - len(changed)
                if never:
                    ax.scatter([h], [top], marker="x", s=14, color="black")
                    ax.annotate(f"{never} never", (h, top), fontsize=6, xytext=(0, 4), textcoords="offset points",
                                ha="center")
            m = rows["phase_step_mean"].astype(float).to_numpy()
            lo, hi = rows["phase_step_lo"].astype(float).to_numpy(), rows["phase_step_hi"].astype(float).to_numpy()
            ok = ~np.isnan(m)
            ax.errorbar(x[ok], m[ok], yerr=[m[ok] - lo[ok], hi[ok] - m[ok]], color=PALETTE[c], lw=1.2, marker="o",
                        ms=3, capsize=2)
            v = contrasts[(contrasts.task == task) & (contrasts.arm == arm) & (contrasts.kind == "arm")]
            verdict = v["verdict"].iloc[0] if len(v) else "—"
            fixed = f"width {rows['width'].iloc[0]}" if arm == "width" and len(rows) else (
                f"head size {rows['head_size'].iloc[0]}" if len(rows) else "")
            ax.set_title(f"{TASK_TITLES[task]}: {ARM_TITLES[arm]} ({fixed})\nphase-change step against heads: {verdict}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [str(int(h)) for h in x])
            ax.set_xlabel("heads per layer")
            ax.set_ylabel("phase-change step")
            ax.set_ylim(0, top * 1.12)
    fig.tight_layout()
    return fig


@styled
def final_heads(heads: pd.DataFrame, runs: pd.DataFrame, threshold: float):
    """Per task (rows of panels) and shape (columns): each seed's layer-1 heads (rows: seeds,
    columns: heads) coloured by their final induction score above uniform attention's; a dot on
    every induction head (at least ``threshold`` above)."""
    tasks = _tasks(runs)
    shapes = list(dict.fromkeys(runs.sort_values(["width", "heads"])["shape"]))
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
                ax.set_title(shape, fontsize=7)
            if c == 0:
                ax.set_ylabel(f"{task}\nseed", fontsize=7)
            if r == len(tasks) - 1:
                ax.set_xlabel("layer-1 head", fontsize=6)
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="final induction score above uniform attention's")
    return fig
