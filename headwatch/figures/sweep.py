"""Figures of the training sweep (protocol §7–8); they read the summary tables only."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..settings.kinds import KINDS
from ..sweep.contrasts import VERDICTS, better
from ..sweep.summary import split_verdict, width_verdict
from .style import ONE_COLUMN, PALETTE, SEQUENTIAL, TWO_COLUMNS, figure, styled


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def _seed_points(ax, finals: pd.DataFrame, x: str):
    ax.scatter(finals[x], finals["val_loss"], s=6, color="0.55", zorder=2, linewidths=0,
               label=f"single seeds (n = {finals['seed'].nunique()})")


def _loss_against(summary: pd.DataFrame, finals: pd.DataFrame, sweep: str, x: str, color: str, ticks,
                  xlabel: str):
    """One sweep's final validation loss against ``x`` (log 2 axis): single seeds and mean ± std.
    ``ticks(rows)``: the tick labels of the sweep's rows, sorted by ``x``."""
    s = summary[summary["sweep"] == sweep].sort_values(x)
    fig, ax = figure(ONE_COLUMN)
    _seed_points(ax, finals[finals["sweep"] == sweep], x)
    ax.errorbar(s[x], s["val_loss_mean"], yerr=s["val_loss_std"], marker="o", ms=3,
                capsize=2, color=color, zorder=3, label="mean ± std over seeds")
    ax.set_xscale("log", base=2)
    ax.set_xticks(s[x], ticks(s))
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("validation loss (nats/char)")
    return fig, ax, s


@styled
def loss_vs_heads(summary: pd.DataFrame, finals: pd.DataFrame, contrast: pd.Series):
    """Split sweep: final validation loss against the number of heads at fixed width."""
    fig, ax, _ = _loss_against(summary, finals, contrast["split_sweep"], "heads", PALETTE[0],
                               lambda s: [f"{h}\n({d})" for h, d in zip(s["heads"], s["head_size"])],
                               "heads (head size)")
    c = contrast
    ax.set_title(f"width {c['split_width']}, {c['split_params']:,} parameters each\n"
                 f"spread {c['spread']:.3f} ({_interval_text(c, 'spread', '.3f')}) = {c['spread_over_gain']:.2f}× "
                 f"the {c['capacity_from']}→{c['capacity_to']} gain ({_interval_text(c, 'spread_over_gain', '.2f')})\n"
                 f"{split_verdict(c)}", fontsize=6)
    ax.legend(frameon=False)
    return fig


def _interval_text(c: pd.Series, name: str, spec: str) -> str:
    """``<level> %: lo–hi`` of one of the contrast's quantities."""
    return f"{100 * c['level']:g} %: {c[name + '_lo']:{spec}}–{c[name + '_hi']:{spec}}"


@styled
def loss_vs_width(summary: pd.DataFrame, finals: pd.DataFrame, contrast: pd.Series):
    """Capacity sweep: final validation loss against the width."""
    fig, ax, s = _loss_against(summary, finals, contrast["capacity_sweep"], "width", PALETTE[1],
                               lambda s: [f"{w}\n{_count(p)}" for w, p in zip(s["width"], s["params"])],
                               "width (parameters)")
    sizes = sorted(s["head_size"].unique())
    ax.set_title(f"head size {', '.join(map(str, sizes))}\n{width_verdict(contrast)}", fontsize=6)
    ax.legend(frameon=False)
    return fig


def _interval_row(ax, y: float, c: pd.Series, name: str, color: str) -> None:
    """One quantity of the contrast at height ``y``: its interval as a bar with end ticks, its
    estimate as a point (which a percentile interval need not contain: the resampled spread of
    noisy means is larger than the spread of the means); the point alone where there is no interval
    (too few seeds)."""
    if pd.notna(c[name + "_lo"]):
        ax.hlines(y, c[name + "_lo"], c[name + "_hi"], color=color, lw=1.5)
        ax.plot([c[name + "_lo"], c[name + "_hi"]], [y, y], "|", ms=8, color=color)
    ax.plot(c[name], y, "o", ms=4, color=color)


@styled
def contrast_intervals(finals: pd.DataFrame, contrast: pd.Series):
    """The contrast with its intervals: left, the differences in loss (spread, the best and the
    worst split paired by seed with each seed's difference, the width gain) against 0; right, the
    ratios against 1. Point = the estimate, bar = its bootstrap interval."""
    c = contrast
    fig, (ax, ax2) = figure(TWO_COLUMNS, 2.4, ncols=2, gridspec_kw=dict(width_ratios=[3, 2]))
    rows = [("spread", f"spread: worst − best mean\n({c['worst_shape']} − {c['best_shape']})"),
            ("paired_diff", f"{c['worst_shape']} − {c['best_shape']}\npaired by seed (n = {c['paired_seeds']})"),
            ("capacity_gain", f"width gain\n{c['capacity_from']} − {c['capacity_to']}")]
    for y, (name, label) in enumerate(rows):
        _interval_row(ax, y, c, name, PALETTE[y])
    f = finals.set_index(["sweep", "shape", "seed"])["val_loss"].sort_index()
    diffs = (f.loc[(c["split_sweep"], c["worst_shape"])] - f.loc[(c["split_sweep"], c["best_shape"])])
    ax.scatter(diffs, np.full(len(diffs), 1.2), s=8, color="0.55", linewidths=0,
               label="worst − best, single seeds")
    ax.axvline(0, color="0.3", lw=0.6)
    ax.axvspan(-c["mean_seed_std"], c["mean_seed_std"], color="0.9", zorder=0,
               label=f"± mean seed std ({c['mean_seed_std']:.4f})")
    ax.set_yticks(range(len(rows)), [label for _, label in rows])
    ax.invert_yaxis()
    ax.set_xlabel("validation loss difference (nats/char)")
    ax.legend(frameon=False, fontsize=6, loc="lower right")
    ratios = [("spread_over_std", "spread / seed std"), ("spread_over_gain", "spread / width gain")]
    for y, (name, label) in enumerate(ratios):
        _interval_row(ax2, y, c, name, PALETTE[3 + y])
    ax2.axvline(1, color="0.3", lw=0.6)
    if all(c[f"{name}_lo"] > 0 for name, _ in ratios):     # ratios of different sizes: a log axis
        ax2.set_xscale("log")
    ax2.set_yticks(range(len(ratios)), [label for _, label in ratios])
    ax2.invert_yaxis()
    ax2.set_xlabel("ratio")
    ax2.margins(y=0.4)
    fig.suptitle(f"{split_verdict(c)}\n{width_verdict(c)}\nbars: {100 * c['level']:g} % percentile "
                 f"bootstrap intervals over {c['seeds']} seeds ({c['resamples']:,} resamples)", fontsize=7,
                 y=1.0, va="bottom")
    return fig


@styled
def training_curves(curves: pd.DataFrame):
    """Validation (solid) and training (dashed) loss against step, mean over seeds; one panel per sweep."""
    sweeps = list(dict.fromkeys(curves["sweep"]))
    fig, axes = figure(TWO_COLUMNS, 2.6, ncols=len(sweeps), sharey=True, squeeze=False)
    for ax, sweep in zip(axes[0], sweeps):
        c = curves[curves["sweep"] == sweep]
        configs = (c[["shape", "width", "heads"]].drop_duplicates()
                   .sort_values(["width", "heads"])["shape"])
        for i, cfg in enumerate(configs):
            m = c[c["shape"] == cfg].groupby("step")[["train_loss", "val_loss"]].mean()
            color = PALETTE[i % len(PALETTE)]
            ax.plot(m.index, m["val_loss"], color=color, marker="o", ms=2, label=cfg)
            ax.plot(m.index, m["train_loss"], color=color, ls="--", lw=0.8)
        n = c["seed"].nunique()
        ax.set_title(f"{sweep}: mean of {n} seed{'s' * (n != 1)}")
        ax.set_xlabel("step")
        ax.legend(frameon=False, ncols=2)
    axes[0][0].set_ylabel("loss (nats/char)")
    fig.suptitle("solid: validation; dashed: train, mean since the last point", y=1.0, va="bottom")
    return fig


@styled
def readings(finals: pd.DataFrame, contrasts: dict[str, pd.Series], fit: pd.DataFrame):
    """The split sweep read both ways (protocol §7, "Two readings"): above, each split's validation loss at
    each run's last evaluation and at its best (single seeds, mean ± std), the two contrasts' verdicts in
    the title; below, each configuration's rise from its best in units of the seed noise, with its interval
    against 1, each verdict beside its bar (a square-root axis: 0 and the largest rise on one page).
    ``contrasts``: the contrast row of each reading (``last``, ``best``)."""
    c = contrasts["last"]
    split = finals[finals["sweep"] == c["split_sweep"]]
    f = fit.drop_duplicates(["trained_under", "shape"]).reset_index(drop=True)
    fig, (ax, ax2) = figure(TWO_COLUMNS, 3.2 + 0.22 * len(f), nrows=2,
                            gridspec_kw=dict(height_ratios=[3.2, 0.5 + 0.22 * len(f)]), layout="constrained")
    for i, (reading, column, marker) in enumerate((("last", "val_loss", "o"), ("best", "best_val_loss", "^"))):
        m = split.groupby("heads")[column].agg(["mean", "std"])
        shift = 1.04 if i else 1 / 1.04                             # side by side on the log axis
        ax.scatter(split["heads"] * shift, split[column], s=5, color="0.6", linewidths=0, zorder=2)
        ax.errorbar(m.index.to_numpy() * shift, m["mean"], yerr=m["std"], marker=marker, ms=3, capsize=2,
                    color=PALETTE[i], zorder=3, label=f"each run's {reading} evaluation (mean ± std)")
    ax.set_xscale("log", base=2)
    heads = sorted(split["heads"].unique())
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.minorticks_off()
    ax.set_xlabel(f"heads at width {c['split_width']}")
    ax.set_ylabel("validation loss (nats/char)")
    ax.legend(frameon=False, fontsize=6)
    ax.set_title("\n".join(f"{r}: {split_verdict(contrasts[r])}" for r in ("last", "best")), fontsize=6)
    for y, r in enumerate(f.to_dict("records")):
        _interval_row(ax2, y, r, "rise_over_noise", PALETTE[y % len(PALETTE)])
        ax2.annotate(f"{r['verdict']} (rise {r['rise_mean']:.4f})", (1.0, y), xycoords=("axes fraction", "data"),
                     xytext=(4, 0), textcoords="offset points", va="center", fontsize=6)
    ax2.axvline(1, color="0.3", lw=0.8, ls="--")
    ax2.set_xscale("function", functions=(np.sqrt, np.square))
    top = float(np.nanmax(f["rise_over_noise_hi"].astype(float).fillna(0).to_numpy().tolist() + f["rise_over_noise"].tolist()))
    ticks = [t for t in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= 1.2 * top] or [0, 1]
    ax2.set_xticks(ticks, [str(t) for t in ticks])
    ax2.set_xlim(0, max(1.1, 1.1 * top))
    ax2.set_yticks(range(len(f)), [f"{r.shape}, best at step {r.best_step_min}" + (
        f"–{r.best_step_max}" if r.best_step_max != r.best_step_min else "") for r in f.itertuples()], fontsize=6)
    ax2.invert_yaxis()
    ax2.set_xlabel(f"rise from the best to the last evaluation / seed noise ({f['seed_noise'].iloc[0]:.4f} nats/char);"
                   " dashed: 1")
    fig.suptitle(f"bars: {100 * c['level']:g} % percentile bootstrap intervals over seeds ({int(c['resamples']):,} "
                 "resamples); overfits: the interval lies above 1", fontsize=7)
    return fig


# ------------------------------------------------------------ the studies
def _bpc_points(ax, summary: pd.DataFrame, finals: pd.DataFrame, color):
    """Mean ± std bits per character per configuration (x = position), single seeds in grey."""
    x = np.arange(len(summary))
    pos = dict(zip(summary["shape"], x))
    f = finals[finals["shape"].isin(pos)]
    ax.scatter(f["shape"].map(pos), f["val_loss"] / np.log(2), s=6, color="0.55", zorder=2,
               linewidths=0, label=f"single seeds (n = {f['seed'].nunique()})")
    ax.errorbar(x, summary["val_bpc_mean"], yerr=summary["val_bpc_std"], fmt="o", ms=3, capsize=2,
                color=color, zorder=3, label="mean ± std over seeds")
    ax.set_ylabel("validation bits per character")
    return x


def _experts_label(r) -> str:
    if not r.experts:
        return f"dense\n{r.ffn_active_width}"
    return f"{r.experts}e top{r.top_k}\n×{r.expert_width} b{r.balance:g}"


def experts_study(fig, summary: pd.DataFrame, finals: pd.DataFrame):
    """Experts: loss per arm (stored/active parameters, throughput) above each arm's expert load."""
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    x = _bpc_points(ax, summary, finals, PALETTE[0])
    for xi, r in zip(x, summary.itertuples()):
        ax.annotate(f"{_count(r.params)} / {_count(r.params_active)}\n{r.chars_per_s / 1e3:.1f}k ch/s",
                    (xi, r.val_bpc_mean + r.val_bpc_std), textcoords="offset points", xytext=(0, 4),
                    ha="center", va="bottom", fontsize=6)
    ax.set_title(f"FFN width per token {summary['ffn_active_width'].iloc[0]} in every arm; "
                 "labels: parameters stored / active per token, training throughput", fontsize=8)
    ax.margins(y=0.25)
    ax.legend(frameon=False, fontsize=6, loc="lower right")
    ax2.vlines(x, summary["expert_share_min"], summary["expert_share_max"], color=PALETTE[1], lw=3,
               label="min – max share of any expert, any layer (mean over seeds)")
    ax2.scatter(x, summary["uniform_share"], marker="_", s=150, color="k", zorder=3,
                label="uniform load (1 / experts)")
    ax2.set_xticks(x, [_experts_label(r) for r in summary.itertuples()], fontsize=7)
    ax2.set_ylabel("share of token→expert\nassignments (validation)")
    ax2.set_yscale("log")
    ax2.legend(frameon=False, fontsize=6, loc="lower left")


def depth_study(fig, summary: pd.DataFrame, finals: pd.DataFrame):
    """Depth at a fixed non-embedding budget: loss per depth."""
    s = summary
    ax = fig.subplots()
    x = _bpc_points(ax, s, finals, PALETTE[2])
    ax.set_xticks(x, [f"{r.layers} layers\nw{r.width}, {r.heads}×{r.head_size}\n"
                      f"{_count(r.non_embedding)} ({100 * r.non_embedding_vs_first:+.1f} %)"
                      for r in s.itertuples()], fontsize=6)
    ax.set_xlabel("depth (width, heads × head size, non-embedding parameters)")
    ax.set_title(f"fixed budget: {_count(int(s['non_embedding'].iloc[0]))} non-embedding parameters")
    ax.legend(frameon=False, fontsize=6)


def kv_study(fig, summary: pd.DataFrame, finals: pd.DataFrame):
    """Shared keys/values: loss against key/value heads, with the KV-cache bytes per token."""
    s = summary
    ax = fig.subplots()
    x = _bpc_points(ax, s, finals, PALETTE[3])
    ax.set_xticks(x, [f"{r.kv_heads} kv heads\n{r.kv_cache_bytes_per_token:,} B/token"
                      for r in s.itertuples()], fontsize=6)
    ax.set_xlabel("key/value heads (KV cache bytes per token)")
    ax.set_title(f"{s['heads'].iloc[0]} query heads of {s['head_size'].iloc[0]}, "
                 f"{s['layers'].iloc[0]} layers, width {s['width'].iloc[0]}")
    ax.legend(frameon=False, fontsize=6)


def vocab_study(fig, summary: pd.DataFrame, finals: pd.DataFrame):
    """Vocabulary size: bits per character of the whole validation split against the vocabulary
    size (mean ± std over seeds, single seeds in grey), above the share of the parameters that
    the vocabulary sets (token embedding + output head)."""
    s = summary.sort_values("vocab_size")
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    f = finals[finals["shape"].isin(s["shape"])]
    ax.scatter(f["vocab_size"], f["val_full_bpc"], s=6, color="0.55", zorder=2, linewidths=0,
               label=f"single seeds (n = {f['seed'].nunique()})")
    ax.errorbar(s["vocab_size"], s["val_full_bpc_mean"], yerr=s["val_full_bpc_std"], marker="o", ms=3, capsize=2,
                color=PALETTE[4 % len(PALETTE)], zorder=3, label="mean ± std over seeds")
    for r in s.itertuples():
        ax.annotate(f"{r.chars_per_window:.0f} ch", (r.vocab_size, r.val_full_bpc_mean + r.val_full_bpc_std),
                    textcoords="offset points", xytext=(0, 3), ha="center", va="bottom", fontsize=6)
    ax.margins(y=0.2)
    ax.set_ylabel("validation bits per character\n(whole split)")
    ax.set_title(f"context {s['context'].iloc[0]} tokens in every arm (labels: characters per window)",
                 fontsize=7)
    ax.legend(frameon=False, fontsize=6)
    ax2.plot(s["vocab_size"], 100 * s["embedding_share"], marker="o", ms=3, color=PALETTE[1])
    ax2.set_ylabel("token embedding + head\n(% of parameters)")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(s["vocab_size"], [f"{r.vocab}\n{r.vocab_size}" for r in s.itertuples()], fontsize=6)
    ax2.minorticks_off()
    ax2.set_xlabel("vocabulary (tokens)")


def study_panels(kind: str):
    """(how to draw a study kind's panels on a (sub)figure, the figure's width and the panels' height in
    inches), from the kind's ``figure`` (:data:`headwatch.settings.kinds.KINDS`: its function here by name,
    its width in columns, its height)."""
    if kind not in KINDS:
        raise ValueError(f"no figure for study kind {kind!r} (known: {sorted(KINDS)})")
    name, columns, height = KINDS[kind].figure
    return globals()[name], TWO_COLUMNS if columns == 2 else ONE_COLUMN, height


def _contrast_note(c) -> str:
    """The words beside a contrast's bar: its verdict, and what its kind's extra columns say
    (``extra_note`` of :data:`headwatch.settings.kinds.KINDS`: a kv study's cost of a byte saved)."""
    if c["verdict"] == "too few seeds":
        return f"too few seeds ({int(c['seeds'])}): no interval"
    text = c["verdict"] + ((": the arm better" if better(c) == c["arm"] else ": the reference better")
                           if c["verdict"] == "resolved" else "")
    if c["selected"]:
        text += f" (relabelling p = {c['relabel_p']:.2g})"
    note = KINDS[c["kind"]].extra_note if c["kind"] in KINDS else None
    extra = note(c) if note is not None else ""
    return text + (f"\n{extra}" if extra else "")


def contrast_panel(ax, contrasts: pd.DataFrame) -> None:
    """A study's contrasts, arm − reference in bits per character: the difference as a point, its
    interval as a bar (none where the seeds are too few), 0 as a line, each verdict beside its bar."""
    for y, c in enumerate(contrasts.to_dict("records")):
        _interval_row(ax, y, c, "diff", PALETTE[y % len(PALETTE)])
        ax.annotate(_contrast_note(c), (1.0, y), xycoords=("axes fraction", "data"), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=6)
    ax.axvline(0, color="0.3", lw=0.6)
    ax.set_yticks(range(len(contrasts)), [f"{c.arm} − {c.reference}" + (" (worst − best)" if c.selected else "")
                                          for c in contrasts.itertuples()], fontsize=6)
    ax.invert_yaxis()
    ax.margins(y=0.3)
    ax.set_xlabel("bits per character, arm − reference (> 0: the arm is worse)")


@styled
def study_figure(kind: str, summary: pd.DataFrame, finals: pd.DataFrame, contrasts: pd.DataFrame):
    """A study's figure: its kind's panels above its contrasts (:func:`contrast_panel`), the bars
    and verdicts read from its contrasts table, and a title that counts the verdicts."""
    draw, width, height = study_panels(kind)
    below = 0.6 + 0.3 * len(contrasts)
    fig = plt.figure(figsize=(width, height + below), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[height, below])
    draw(top, summary, finals)
    contrast_panel(bottom.subplots(), contrasts)
    c = contrasts.iloc[0]
    counts = contrasts["verdict"].value_counts()
    pairing = ", ".join(dict.fromkeys("paired by seed" if p else "unpaired" for p in contrasts["paired"]))
    fig.suptitle(f"{len(contrasts)} contrast{'s' * (len(contrasts) != 1)}: "
                 + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts)
                 + f"\nbars: {100 * c['level']:g} % percentile bootstrap intervals over seeds ({pairing}; "
                 f"{int(c['resamples']):,} resamples)", fontsize=7, y=1.0, va="bottom")
    return fig


# ------------------------------------------------------------ the heads they grow (§7b)
def _head_counts(df: pd.DataFrame, sweep: str) -> list[int]:
    return sorted(int(h) for h in df.loc[df["sweep"] == sweep, "heads"].unique())


@styled
def heads_formation(curves: pd.DataFrame, sweep: str, threshold: float):
    """The best head's induction score (random and text probes) against the step, one line per
    head count (mean over seeds, band = min–max over seeds), the validation loss below on the
    same step axis."""
    fig, axes = figure(TWO_COLUMNS, 4.2, nrows=2, ncols=2, sharex=True, squeeze=False)
    c = curves[curves["sweep"] == sweep]
    panels = [(axes[0][0], "best_induction", "best induction (random ids)"),
              (axes[0][1], "best_induction_text", "best induction (text seen twice)"),
              (axes[1][0], "val_loss", "validation loss (nats/char)"),
              (axes[1][1], "in_context_change", "in-context score's change\nsince the first evaluation (nats/char)")]
    for i, h in enumerate(_head_counts(c, sweep)):
        g = c[c["heads"] == h].groupby("step")
        color = PALETTE[i % len(PALETTE)]
        for ax, col, _ in panels:
            m = g[col].mean()
            ax.plot(m.index, m.to_numpy(), color=color, marker="o", ms=2, label=f"{h} head{'s' * (h != 1)}")
            ax.fill_between(m.index, g[col].min().to_numpy(), g[col].max().to_numpy(), color=color,
                            alpha=0.2, lw=0)
    for ax, _, label in panels:
        ax.set_ylabel(label)
    for ax in axes[0]:
        ax.axhline(threshold, color="0.4", ls=":", lw=0.8)
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0][0].legend(frameon=False, ncols=2)
    n = c["seed"].nunique()
    fig.suptitle(f"{sweep}: mean over {n} seed{'s' * (n != 1)} (band: min–max); dotted: formation "
                 f"threshold {threshold:g}", y=1.0, va="bottom")
    return fig


@styled
def heads_finals(summary: pd.DataFrame, per_run: pd.DataFrame, sweep: str, threshold: float):
    """Final best scores (mean ± std over seeds, single seeds as faint points) and the formation
    step against the number of heads."""
    s = summary[summary["sweep"] == sweep].sort_values("heads")
    r = per_run[per_run["sweep"] == sweep]
    fig, axes = figure(TWO_COLUMNS, 2.4, ncols=2, squeeze=False)
    ax = axes[0][0]
    for i, score in enumerate(("induction", "induction_text", "prev", "sink")):
        col = f"best_{score}"
        ax.scatter(r["heads"], r[col], s=5, color=PALETTE[i], alpha=0.5, linewidths=0)
        ax.errorbar(s["heads"], s[f"{col}_mean"], yerr=s[f"{col}_std"].fillna(0), marker="o", ms=3,
                    capsize=2, color=PALETTE[i], label=score)
    ax.axhline(threshold, color="0.4", ls=":", lw=0.8)
    ax.set_ylabel("final best head's score")
    ax.legend(frameon=False)
    ax = axes[0][1]
    formed = r.dropna(subset=["formation_step"])
    ax.scatter(formed["heads"], formed["formation_step"].astype(float), s=8, color=PALETTE[0])
    never = r[r["formation_step"].isna()]
    if len(never):
        ax.scatter(never["heads"], np.full(len(never), r["step"].max()), marker="x", s=10, color="0.4",
                   label="never formed (drawn at the last step)")
        ax.legend(frameon=False)
    ax.set_ylabel(f"formation step (best induction ≥ {threshold:g})")
    ax.set_ylim(0, r["step"].max() * 1.05)
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_xticks(s["heads"], [str(h) for h in s["heads"]])
        ax.minorticks_off()
        ax.set_xlabel("heads")
    fig.suptitle(f"{sweep}: formed in {int(r['formation_step'].notna().sum())} of {len(r)} runs",
                 y=1.0, va="bottom")
    return fig


@styled
def heads_grid(grid: pd.DataFrame, sweep: str):
    """Every head's final scores (layers × heads) of one seed's model per head count, one row of
    panels per score."""
    g = grid[grid["sweep"] == sweep]
    seed = int(g["seed"].min())
    g = g[g["seed"] == seed]
    counts = _head_counts(g, sweep)
    scores = ("induction", "induction_text", "prev", "sink")
    fig, axes = figure(TWO_COLUMNS, 1.1 * len(scores) + 0.4, nrows=len(scores), ncols=len(counts),
                       squeeze=False)
    for j, h in enumerate(counts):
        m = g[g["heads"] == h]
        L, H = int(m["layer"].max()) + 1, int(m["head"].max()) + 1
        for i, score in enumerate(scores):
            ax = axes[i][j]
            img = m.sort_values(["layer", "head"])[score].to_numpy().reshape(L, H)
            im = ax.imshow(img, vmin=0, vmax=1, cmap=SEQUENTIAL, aspect="auto")
            ax.set_xticks([])
            ax.set_yticks(range(L))
            if i == 0:
                ax.set_title(f"{h} head{'s' * (h != 1)}")
            if j == 0:
                ax.set_ylabel(f"{score}\nlayer")
    fig.colorbar(im, ax=axes, shrink=0.6, label="score")
    fig.suptitle(f"{sweep}, seed {seed}: every head's final scores (columns: heads)", y=1.0, va="bottom")
    return fig


# ------------------------------------------------------------ the course of a sweep (§7, §7b)
def _shape_label(heads: int, width: int) -> str:
    return f"{heads} head{'s' * (heads != 1)} (w{width})"


def _event_band(ax, s, col: str, color, y: float) -> None:
    """A shape's mean event step (a vertical line) and its interval over seeds (a bar at height ``y``)."""
    if pd.isna(s[f"{col}_mean"]):
        return
    ax.axvline(float(s[f"{col}_mean"]), color=color, ls="--", lw=0.7)
    ax.plot([float(s[f"{col}_lo"]), float(s[f"{col}_hi"])], [y, y], color=color, lw=2.5, marker="|", ms=6,
            solid_capstyle="butt")


@styled
def course_events(curves: pd.DataFrame, events: pd.DataFrame, summary: pd.DataFrame, sweep: str, threshold: float):
    """Validation loss (top) and the best head's previous-token score (bottom) against the step,
    one line per shape (mean over seeds, band min–max); dashed: each shape's mean step of leaving
    the plateau (top) and of its previous-token head forming (bottom), the bar below each panel's
    lines its bootstrap interval over seeds; dots: each run's own event."""
    fig, (ax, ax2) = figure(TWO_COLUMNS, 4.6, nrows=2, sharex=True)
    shapes = summary.sort_values(["width", "heads"])
    for i, s in enumerate(shapes.itertuples(index=False)):
        s = pd.Series(s._asdict())
        color = PALETTE[i % len(PALETTE)]
        c = curves[curves["shape"] == s["shape"]].groupby("step")
        for a, col in ((ax, "val_loss"), (ax2, "best_prev")):
            m = c[col].mean()
            a.plot(m.index, m.to_numpy(), color=color, lw=1, label=_shape_label(int(s["heads"]), int(s["width"])))
            a.fill_between(m.index, c[col].min().to_numpy(), c[col].max().to_numpy(), color=color, alpha=0.15, lw=0)
        e = events[events["shape"] == s["shape"]]
        left, formed = e.dropna(subset=["leave_step"]), e.dropna(subset=["prev_step"])
        at = curves.set_index(["shape", "seed", "step"])
        ax.scatter(left["leave_step"].astype(float), [at.loc[(s["shape"], r.seed, int(r.leave_step)), "val_loss"]
                                                       for r in left.itertuples()], s=8, color=color, zorder=3)
        ax2.scatter(formed["prev_step"].astype(float), [at.loc[(s["shape"], r.seed, int(r.prev_step)), "best_prev"]
                                                         for r in formed.itertuples()], s=8, color=color, zorder=3)
        _event_band(ax, s, "leave_step", color, float(curves["val_loss"].min()) - 0.04 * (i + 1))
        _event_band(ax2, s, "prev_step", color, -0.03 * (i + 1))
    ax2.axhline(threshold, color="0.4", ls=":", lw=0.8)
    ax.set_ylabel("validation loss (nats/char)")
    ax2.set_ylabel("best previous-token score")
    ax2.set_xlabel("step")
    ax.legend(frameon=False, ncols=2, fontsize=6)
    left = f"{int(summary['left'].sum())} of {int(summary['seeds'].sum())}"
    formed = f"{int(summary['formed'].sum())} of {int(summary['seeds'].sum())}"
    fig.suptitle(f"{sweep}: mean over seeds (band min–max). Dots, dashed: each run's and each shape's mean step\n"
                 f"of leaving the plateau (top; {left} runs) and of the previous-token head forming (bottom, best prev "
                 f"≥ {threshold:g}; {formed} runs);\nbars: their bootstrap intervals over seeds", y=1.0, va="bottom",
                 fontsize=7)
    return fig


@styled
def course_gaps(gaps: pd.DataFrame, verdicts: pd.DataFrame, sweep: str):
    """Each arm's validation loss minus the reference arm's against the step (mean over seeds,
    paired; band: the bootstrap interval at every step), its peak and, where it flips, its crossover
    step with its interval; the verdict in the legend."""
    fig, ax = figure(TWO_COLUMNS, 3.0)
    for i, v in enumerate(verdicts.itertuples()):
        color = PALETTE[i % len(PALETTE)]
        g = gaps[gaps["arm"] == v.arm]
        ax.plot(g["step"], g["gap"], color=color, marker="o", ms=2, lw=1,
                label=f"{v.arm} − {v.reference}: {v.verdict}")
        ax.fill_between(g["step"], g["gap_lo"], g["gap_hi"], color=color, alpha=0.2, lw=0)
        ax.plot([v.peak_step], [v.peak_gap], marker="^", ms=5, color=color, zorder=3)
        if pd.notna(v.crossover_step):
            ax.axvspan(v.crossover_lo, v.crossover_hi, color=color, alpha=0.1, lw=0)
            ax.axvline(v.crossover_step, color=color, ls="--", lw=0.7)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss gap (nats/char)")
    ax.legend(frameon=False, fontsize=6)
    n = int(verdicts["seeds"].min()) if len(verdicts) else 0
    ax.set_title(f"{sweep}: paired by seed ({n} seeds); band: bootstrap interval; triangle: peak;\ndashed: "
                 "crossover (shaded: its interval). Nothing beyond the last evaluation.", fontsize=7)
    return fig
