"""Figures of the lens stage (protocol §5h), drawn from its tables only: direct effects beside patching's
total effect, the logit lens, the weights' circuits beside path patching. Every label — the logit
differences, the counts, the heads named, the correlations — is computed from the tables."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..lens.prediction import spearman
from .style import DIVERGING, PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled


def _grid(table: pd.DataFrame, value: str) -> np.ndarray:
    out = np.full((int(table["layer"].max()) + 1, int(table["head"].max()) + 1), np.nan)
    out[table["layer"].to_numpy(int), table["head"].to_numpy(int)] = table[value].to_numpy(float)
    return out


def _head_map(ax, fig, grid: np.ndarray, title: str, label: str, diverging: bool = True):
    lim = max(float(np.nanmax(np.abs(grid))), 1e-9)
    im = ax.imshow(grid, cmap=DIVERGING if diverging else SEQUENTIAL, vmin=-lim if diverging else np.nanmin(grid),
                   vmax=lim if diverging else np.nanmax(grid), aspect="auto", interpolation="nearest")
    L, H = grid.shape
    ax.set_title(title)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(H))
    ax.set_yticks(range(0, L, max(1, L // 10)))
    fig.colorbar(im, ax=ax, shrink=0.8).set_label(label)


@styled
def direct_figure(direct: pd.DataFrame, beside: pd.DataFrame | None = None):
    """Left: every head's direct effect on the clean run (layer × head). Right: each head's direct effect
    against its total effect (patching) with the heads acting mostly through others named, or, without
    the heads' table, the components with the largest direct effects."""
    heads = direct[direct["kind"] == "head"]
    fig, axes = figure(TWO_COLUMNS, 3.4, ncols=2, layout="constrained")
    total = float(direct["clean"].sum())
    _head_map(axes[0], fig, _grid(heads.astype({"layer": int, "head": int}), "clean"),
              f"each head's direct effect, clean run\n(all {len(direct)} components sum to {total:.3f})",
              "logit difference answer − distractor")
    ax = axes[1]
    if beside is not None:
        named = beside[beside["through_others"]]
        ax.scatter(beside["direct"], beside["total"], s=8, color=PALETTE[0], label="a head")
        ax.scatter(named["direct"], named["total"], s=14, color=PALETTE[3],
                   label=f"mostly through others ({len(named)})")
        lo = float(min(beside["direct"].min(), beside["total"].min()))
        hi = float(max(beside["direct"].max(), beside["total"].max()))
        ax.plot([lo, hi], [lo, hi], color="0.6", lw=0.8, ls="--", label="total = direct")
        top = beside.reindex(beside["total"].abs().sort_values(ascending=False).index).head(8)
        for r in pd.concat([top, named]).drop_duplicates("label").itertuples():
            ax.annotate(r.label, (r.direct, r.total), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel("direct effect of patching it clean → corrupted")
        ax.set_ylabel("total effect (activation patching)")
        ax.set_title("direct vs total effect per head")
        ax.legend(loc="best", frameon=False)
    else:
        top = direct.reindex(direct["clean"].abs().sort_values(ascending=False).index).head(15)[::-1]
        ax.barh(range(len(top)), top["clean"], color=[PALETTE[0] if v >= 0 else PALETTE[3] for v in top["clean"]])
        ax.set_yticks(range(len(top)))
        ax.set_yticklabels(top["component"])
        ax.set_xlabel("direct effect, clean run")
        ax.set_title(f"the {len(top)} largest components")
    return fig


@styled
def lens_figure(lens: pd.DataFrame):
    """Left: the logit difference at the last position against depth, both runs; middle: the answer's
    probability and rank there (clean); right: the clean run's logit difference at every depth and
    position."""
    fig, axes = figure(TWO_COLUMNS, 3.0, ncols=3, layout="constrained")
    last = lens[lens["position"] == lens.groupby("run")["position"].transform("max")]
    for run, color in (("clean", PALETTE[0]), ("corrupted", PALETTE[1])):
        r = last[last["run"] == run].sort_values("depth")
        axes[0].plot(r["depth"], r["logit_diff"], marker=".", color=color, label=run)
    axes[0].axhline(0, color="0.6", lw=0.8)
    axes[0].set_xlabel("depth (0: embeddings; d: after block d − 1)")
    axes[0].set_ylabel("logit difference at the last position")
    axes[0].legend(frameon=False)
    clean = last[last["run"] == "clean"].sort_values("depth")
    axes[1].plot(clean["depth"], clean["p_answer"], marker=".", color=PALETTE[2], label="p(answer) (left axis)")
    axes[1].set_ylabel("p(answer), clean")
    twin = axes[1].twinx()
    twin.plot(clean["depth"], clean["rank"], marker=".", color=PALETTE[4], label="rank (right axis)")
    twin.set_yscale("log")
    twin.set_ylabel("answer's rank (1 = top), clean")
    axes[1].set_xlabel("depth")
    lines = axes[1].get_lines() + twin.get_lines()
    axes[1].legend(lines, [line.get_label() for line in lines], loc="center left", frameon=False)
    grid_rows = lens[lens["run"] == "clean"]
    positions = sorted(grid_rows["position"].unique())
    grid = grid_rows.pivot_table(index="depth", columns="position", values="logit_diff").reindex(columns=positions)
    lim = max(float(np.nanmax(np.abs(grid.to_numpy()))), 1e-9)
    im = axes[2].imshow(grid.to_numpy(), cmap=DIVERGING, vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
    tokens = grid_rows.drop_duplicates("position").set_index("position").reindex(positions)["token"]
    axes[2].set_xticks(range(len(positions)))
    axes[2].set_xticklabels([_tick(p, t) for p, t in zip(positions, tokens)], rotation=90, fontsize=5)
    axes[2].set_ylabel("depth")
    axes[2].set_title("clean: logit difference")
    fig.colorbar(im, ax=axes[2], shrink=0.8)
    n = int(clean["prompts"].max()) if "prompts" in clean else 0
    fig.suptitle(f"the logit lens over {n} prompts: each depth through the final norm (its own scale) and the "
                 "unembedding", fontsize=7)
    return fig


def _tick(position, token) -> str:
    """A position's label on the lens's axis: its token, with "(varies)" where the prompts' tokens differ there
    (the table's label is then the position alone: a pairs file's ``−k``, or nothing)."""
    said = str(token).strip()
    bare = said in ("", f"−{-int(position)}", str(position))
    return f"{said} (varies)".strip() if bare else said


@styled
def weights_figure(circuits: pd.DataFrame, composition: pd.DataFrame, paths: pd.DataFrame | None = None):
    """Left: each head's OV copying score (layer × head). Right: each measured path's size against its
    composition score's distance from the null (z), input by input, with Spearman's ρ; without paths,
    the composition scores' distance from their null by input."""
    fig, axes = figure(TWO_COLUMNS, 3.2, ncols=2, layout="constrained")
    _head_map(axes[0], fig, _grid(circuits, "ov_copying"), "OV copying score (1: copies what it reads)",
              "Σλ / Σ|λ| of W_E W_V W_O W_U")
    ax = axes[1]
    if paths is not None:
        keys = ["sender_layer", "sender_head", "receiver_layer", "receiver_head", "input"]
        both = paths.astype({k: int for k in keys[:4]}).merge(
            composition.astype({k: int for k in keys[:4]})[keys + ["z"]], on=keys)
        for i, color in zip(("q", "k", "v"), PALETTE):
            part = both[both["input"] == i]
            if len(part):
                rho = float(spearman(part["z"], part["score"].abs())) if len(part) > 2 else float("nan")
                ax.scatter(part["z"], part["score"].abs(), s=8, color=color, label=f"{i}: ρ = {rho:.2f} ({len(part)})")
        ax.set_xlabel("composition score − null mean,\nin null spreads (z)")
        ax.set_ylabel("|path score| (path patching)")
        ax.set_title("the weights against the paths")
    else:
        for i, color in zip(("q", "k", "v"), PALETTE):
            ax.hist(composition.loc[composition["input"] == i, "z"], bins=40, histtype="step", color=color,
                    label=f"{i}-composition")
        ax.set_xlabel("z: (score − null mean)\n/ null spread")
        ax.set_ylabel("pairs of heads")
        ax.set_title(f"composition scores of {len(composition) // 3:,} pairs")
    ax.legend(frameon=False)
    return fig
