"""The heads a sweep model grows (protocol §7b): the §4 scores of a character model, its
in-context score, and when its best induction head forms.

* **The probe** (:func:`make_probe`), built once per job from the validation split and the
  ``sweep.heads`` settings, seeded and fixed, so every evaluation step of a run (and every run)
  reads the same characters:

  - ``windows``: ``windows`` windows of ``context + 1`` characters spaced evenly over the
    validation split (the inputs are the first ``context``; the last character is the target
    of the in-context score);
  - ``random``: ``sequences`` sequences of ``T = context // 2`` ids drawn uniformly from the
    model's vocabulary with ``numpy.random.default_rng([seed, 0])``, each repeated once
    (``2T`` ≤ context);
  - ``text``: ``sequences`` validation passages of ``T`` characters (starts spaced evenly over
    the split), each seen twice.

* **Scores** (:func:`probe_scores`): the §4 functions of :mod:`headwatch.scores` on the charlm
  family's ``pattern`` site — ``sink``, ``prev``, ``self`` on the windows' inputs (rows r ≥ 1),
  ``induction`` on the repeated random sequences and ``induction_text`` on the repeated
  passages (``A[r, r-T+1]``, rows T … 2T-2). No second implementation: this module only
  chooses the sequences.
* **In-context score** (:func:`in_context_score`): on the same windows, the mean loss at the
  late positions (the last ``late``) minus the mean loss at the early positions
  (``1 … early``), nats per character; negative when later characters are predicted better
  than early ones, i.e. when the model uses its context. The probe's few windows carry their
  own content (at the first evaluation their late characters are already ~0.5 nats harder than
  their early ones), so the study reads it as a change from the run's first recorded value
  (``in_context_change``): what training did to it.
* **Formation step** (:func:`formation_step`): the first recorded step at which the best head's
  induction score reaches ``threshold``; None when it never does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from .. import paths
from ..ablation.experiments import run_topk
from ..model.arch import Adapter
from ..charlm.corpus import eval_offsets
from ..scores.heads import induction_scores, prose_scores, scores_table
from ..settings.ablation import AblationSettings
from ..settings.sweep import PROBE_KEYS, HeadsSettings, positions_error
from ..tableio import read_note, read_parquet
from .course import formation_step
from .summary import markdown_table

HEAD_SCORES = ("sink", "prev", "self", "induction", "induction_text")
"""The columns of ``heads.parquet`` beside ``step, layer, head``: the §4 scores, induction on
both probes."""
HEADS_COLUMNS = ("step", "layer", "head", *HEAD_SCORES)


@dataclass(frozen=True)
class Probe:
    """The fixed sequences one job scores its heads on (on the model's device)."""

    windows: torch.Tensor     # [windows, context + 1] validation characters
    random: torch.Tensor      # [sequences, 2T] random ids, repeated
    text: torch.Tensor        # [sequences, 2T] validation passages, repeated
    half_length: int          # T
    early: int
    late: int

    def to(self, device) -> "Probe":
        return Probe(self.windows.to(device), self.random.to(device), self.text.to(device),
                     self.half_length, self.early, self.late)


def make_probe(val_ids, vocab_size: int, context: int, cfg: HeadsSettings | dict) -> Probe:
    """The probe of one job (see the module doc): depends on the validation ids, the vocabulary
    size, the context and the probe's part of ``sweep.heads`` (:data:`PROBE_KEYS`) only."""
    h = HeadsSettings.of(cfg).need(*PROBE_KEYS)
    val = torch.as_tensor(np.asarray(val_ids, dtype=np.int64))
    T = context // 2
    if T < 2:
        raise ValueError(f"context {context} is too short for a repeated sequence")
    if (err := positions_error(context, h.early, h.late)):
        raise ValueError(err)
    starts = torch.as_tensor(eval_offsets(len(val), h.windows, context))
    windows = val[starts.unsqueeze(1) + torch.arange(context + 1)]
    random = repeated_uniform(vocab_size, h.sequences, T, h.seed, PROBE_STREAM)
    passages = torch.as_tensor(eval_offsets(len(val), h.sequences, T))
    text = val[passages.unsqueeze(1) + torch.arange(T)]
    return Probe(windows, random, text.repeat(1, 2), T, int(h.early), int(h.late))


PROBE_STREAM, CUT_STREAM = 0, 1
"""The random streams of the probe's sequences and of the cut's (never the same sequences)."""


def repeated_uniform(vocab_size: int, n: int, half_length: int, seed: int, stream: int) -> torch.Tensor:
    """``n`` sequences of ``half_length`` ids uniform over the vocabulary, each repeated once:
    ``numpy.random.default_rng([seed, stream])``. [n, 2 × half_length]"""
    rng = np.random.default_rng([int(seed), int(stream)])
    return torch.as_tensor(rng.integers(0, vocab_size, size=(n, half_length)), dtype=torch.long).repeat(1, 2)


@torch.no_grad()
def probe_scores(model, probe: Probe, adapter: Adapter | None = None) -> dict[str, torch.Tensor]:
    """The five scores of every head on the probe: {name: [layers, heads]} (the model's mode is
    kept)."""
    adapter = adapter or Adapter(model)
    was = model.training
    model.eval()
    x = probe.windows[:, :-1]
    scores = prose_scores(model, adapter, [x])
    scores["induction"] = induction_scores(model, adapter, probe.random, probe.half_length, batch=len(probe.random))
    scores["induction_text"] = induction_scores(model, adapter, probe.text, probe.half_length,
                                                batch=len(probe.text))
    model.train(was)
    return scores


def position_losses(model, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-character loss at each position of ``windows`` [N, context + 1]: [context]."""
    x, y = windows[:, :-1], windows[:, 1:]
    logits = model(x).float()
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").double().mean(0)


def in_context_from_losses(losses, early: int, late: int) -> float:
    """Mean of the last ``late`` positions' losses minus the mean at positions ``1 … early``
    (0-based: position t predicts character t + 1 from characters 0 … t)."""
    losses = torch.as_tensor(losses, dtype=torch.float64)
    if early < 1 or late < 1 or (err := positions_error(len(losses), early, late)):
        raise ValueError(err or f"early ({early}) and late ({late}) must be at least 1")
    return float(losses[-late:].mean() - losses[1:early + 1].mean())


@torch.no_grad()
def in_context_score(model, probe: Probe) -> float:
    """The in-context score of ``model`` on the probe's windows (nats per character)."""
    was = model.training
    model.eval()
    score = in_context_from_losses(position_losses(model, probe.windows), probe.early, probe.late)
    model.train(was)
    return score


def cut_table(model, scores: dict[str, torch.Tensor], cfg: HeadsSettings | dict, ablation: dict):
    """§5a on a sweep model: its top induction head (by ``scores``, the random probe's) cut, zero
    and mean, against one head drawn at random from the others (``ablation.random_draws`` draws,
    ``ablation.seed``); loss per character on copy 1 and copy 2 of ``sweep.heads.cut_sequences``
    repeated random sequences (T = context // 2; stream :data:`CUT_STREAM`, so not the probe's;
    ``cfg``: the cut's part of ``sweep.heads``). The §5a code itself
    (:func:`headwatch.ablation.experiments.run_topk`, its guards included) with top_n = k = 1.
    Returns (table, note, guard record)."""
    h = HeadsSettings.of(cfg).need("seed", "cut_sequences")
    adapter = Adapter(model)
    T = model.spec.context // 2
    ids = repeated_uniform(model.spec.vocab_size, int(h.cut_sequences), T, h.seed, CUT_STREAM)
    eval_df = pd.DataFrame(dict(token_ids=list(ids.numpy()), half_length=T, offset=0))
    return run_topk(model, adapter, eval_df, scores_table(adapter, scores),
                    AblationSettings.from_config(dict(ablation, top_n=1, k=[1])))


def final_scores(heads: pd.DataFrame) -> dict[str, torch.Tensor]:
    """The last recorded step's scores from a run's records: {name: [layers, heads]}."""
    last = heads[heads["step"] == heads["step"].max()].sort_values(["layer", "head"])
    L, H = int(last["layer"].max()) + 1, int(last["head"].max()) + 1
    if len(last) != L * H:
        raise ValueError(f"the last step's records hold {len(last)} heads, not {L} × {H}")
    return {k: torch.tensor(last[k].to_numpy(), dtype=torch.float32).reshape(L, H) for k in HEAD_SCORES}


def records(step: int, scores: dict[str, torch.Tensor]) -> list[dict]:
    """One plain row per head (layer-major): ``step, layer, head`` and the five scores."""
    L, H = scores["induction"].shape
    return [dict(step=int(step), layer=l, head=h, **{k: float(scores[k][l, h]) for k in HEAD_SCORES})
            for l in range(L) for h in range(H)]


def heads_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(HEADS_COLUMNS))


# ------------------------------------------------------------------ the study over the sweep
RUN_KEYS = ("sweep", "shape", "width", "heads", "seed")
"""What names a run in the study's tables (``heads`` = the number of heads)."""
FINAL_SCORES = ("induction", "induction_text", "prev", "sink")
"""The best head's final scores the study reports (each the maximum over every head)."""


def best_curves(metrics: pd.DataFrame, heads: pd.DataFrame) -> pd.DataFrame:
    """Per evaluation step of one run: the best head's score of each of :data:`FINAL_SCORES`
    (``best_<score>``) beside the validation loss, the in-context score and its change from the
    run's first recorded value (``in_context_change``)."""
    best = heads.groupby("step")[list(FINAL_SCORES)].max().add_prefix("best_").reset_index()
    m = metrics[["step", "val_loss", "in_context"]].sort_values("step")
    m = m.assign(in_context_change=m["in_context"] - m["in_context"].iloc[0])
    return m.merge(best, on="step", how="inner", validate="1:1")


def cut_effects(cut: pd.DataFrame) -> dict:
    """The cut's effect on copy 2 (nats per character, cut minus intact) for each method:
    the top induction head (``cut_top_<method>``) and the mean of the random heads
    (``cut_random_<method>``), and the top head's name."""
    out = {}
    for _, row in cut.iterrows():
        m = row["method"]
        out[f"cut_top_{m}"] = float(row["targeted_copy2"] - row["intact_copy2"])
        out[f"cut_random_{m}"] = float(row["random_copy2_mean"] - row["intact_copy2"])
        out["top_head"] = row["targeted_heads"]
    return out


def study(runs: list[dict], threshold: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The heads study (§7b) from each run's ``metrics``, ``records`` (its ``heads.parquet``) and
    ``cut`` tables (each run a dict with :data:`RUN_KEYS` and those three DataFrames). Returns (runs, summary, curves, grid):
    one row per run (final best scores, formation steps on both probes — <NA> when never —,
    final in-context score and validation loss, the cut's effects), mean ± std over seeds per
    configuration (``formed``: the fraction of seeds whose best induction reached ``threshold``;
    the formation step's mean over those seeds), every run's curves and every run's heads at its
    last step (``grid``: the five scores of each head)."""
    rows, curves, grid = [], [], []
    for r in runs:
        key = {k: r[k] for k in RUN_KEYS}
        curve = best_curves(r["metrics"], r["records"])
        curves.append(curve.assign(**key))
        h = r["records"]
        grid.append(h[h["step"] == h["step"].max()].assign(**key))
        last = curve.iloc[-1]
        rows.append(dict(key, step=int(last["step"]), val_loss=float(last["val_loss"]),
                         in_context=float(last["in_context"]), in_context_change=float(last["in_context_change"]),
                         **{f"best_{s}": float(last[f"best_{s}"]) for s in FINAL_SCORES},
                         formation_step=formation_step(r["records"], threshold),
                         formation_step_text=formation_step(r["records"], threshold, "induction_text"),
                         **cut_effects(r["cut"])))
    per_run = pd.DataFrame(rows)
    for col in ("formation_step", "formation_step_text"):
        per_run[col] = per_run[col].astype("Int64")
    curves = pd.DataFrame(pd.concat(curves, ignore_index=True))
    curves = curves[[*RUN_KEYS, *[c for c in curves.columns if c not in RUN_KEYS]]]
    grid = pd.concat(grid, ignore_index=True)
    grid = grid[[*RUN_KEYS, *[c for c in grid.columns if c not in RUN_KEYS]]]
    return per_run, summarize(per_run), curves, grid


def summarize(per_run: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (ddof 1) over seeds of every number of the per-run table, per configuration;
    ``formed`` (and ``formed_text``) the fraction of seeds with a formation step."""
    keys = [k for k in RUN_KEYS if k != "seed"]
    numbers = [c for c in per_run.columns if c not in (*RUN_KEYS, "top_head", "step", "formation_step",
                                                       "formation_step_text")]
    g = per_run.groupby(keys, sort=False)
    out = g[numbers].agg(["mean", "std"])
    out.columns = [f"{c}_{stat}" for c, stat in out.columns]
    stds = [c for c in out.columns if c.endswith("_std")]
    out[stds] = out[stds].astype("Float64")          # <NA> for a single seed: no std, not NaN
    out["seeds"] = g.size()
    for col, name in (("formation_step", "formed"), ("formation_step_text", "formed_text")):
        out[name] = g[col].agg(lambda s: float(s.notna().mean()))
        out[f"{col}_mean"] = g[col].agg(lambda s: s.dropna().astype(float).mean()).astype("Float64")
    return out.reset_index().sort_values(["sweep", "width", "heads"], ignore_index=True)


# ------------------------------------------------------------------ the results page's section
NOISE_FACTOR = 2.0
"""Head count changes a score "beyond seed noise" when the spread of its per-configuration means
exceeds this many times the mean seed std (a plain screen, not a test: with 3 seeds a test of
this has little power; the page says so)."""


def _pm(mean, std, spec=".3f") -> str:
    return f"{mean:{spec}} ± {std:{spec}}" if pd.notna(std) else f"{mean:{spec}}"


def head_count_effect(summary: pd.DataFrame, sweep: str, score: str) -> dict:
    """For one sweep: the spread (largest − smallest mean over seeds across head counts) of
    ``score`` against the mean seed std, and whether it is beyond seed noise (:data:`NOISE_FACTOR`)."""
    s = summary[summary["sweep"] == sweep]
    means, stds = s[f"{score}_mean"], s[f"{score}_std"]
    spread, noise = float(means.max() - means.min()), float(stds.astype(float).mean())
    return dict(spread=spread, noise=noise, known=bool(stds.notna().all()),
                beyond=bool(stds.notna().all() and spread > NOISE_FACTOR * noise),
                top=int(s.loc[means.idxmax(), "heads"]), bottom=int(s.loc[means.idxmin(), "heads"]))


def reading(per_run: pd.DataFrame, summary: pd.DataFrame, threshold: float, split_sweep: str) -> list[str]:
    """What the numbers say, as sentences computed from them."""
    out = []
    n = len(per_run)
    formed = per_run.dropna(subset=["formation_step"])
    best = per_run.loc[per_run["best_induction"].idxmax()]
    if formed.empty:
        out.append(f"**Nothing forms at this scale**: no run's best induction score reaches {threshold:g} "
                   f"(the highest, {best['best_induction']:.3f}, in {best['shape']} seed {best['seed']}; on text "
                   f"seen twice at most {per_run['best_induction_text'].max():.3f}).")
    else:
        out.append(f"An induction head formed (best score ≥ {threshold:g} on random characters) in "
                   f"{len(formed)} of {n} runs, first at step {int(formed['formation_step'].min())} "
                   f"(median {formed['formation_step'].astype(float).median():g}); the highest final "
                   f"score is {best['best_induction']:.3f} ({best['shape']} seed {best['seed']}).")
    text_formed = per_run["formation_step_text"].notna().sum()
    out.append(f"On a validation passage seen twice the threshold is reached in {text_formed} of {n} runs.")
    prev = per_run.loc[per_run["best_prev"].idxmax()]
    out.append(f"The strongest previous-token head scores {prev['best_prev']:.3f} ({prev['shape']} seed "
               f"{prev['seed']}); mean over runs {per_run['best_prev'].mean():.3f}.")
    for score, label in (("best_induction", "best induction"), ("best_prev", "best previous-token"),
                         ("in_context_change", "in-context score's change since the first evaluation")):
        e = head_count_effect(summary, split_sweep, score)
        head = (f"Head count and the {label} in `{split_sweep}`: spread {e['spread']:.3f} across head counts "
                f"(highest with {e['top']}, lowest with {e['bottom']} heads)")
        if not e["known"]:
            out.append(f"{head}; with one seed per configuration there is no seed noise to compare it with.")
            continue
        verdict = "beyond" if e["beyond"] else "not beyond"
        out.append(f"{head} against a mean seed std of {e['noise']:.3f}: {verdict} seed noise "
                   f"(spread > {NOISE_FACTOR:g} × std).")
    gap = per_run["cut_top_zero"] - per_run["cut_random_zero"]
    out.append(f"Cutting each model's top induction head (zero cut) moves the second copy's loss by "
               f"{per_run['cut_top_zero'].mean():+.3f} nats per character on average, a random head by "
               f"{per_run['cut_random_zero'].mean():+.3f}; the top head costs more than the random one in "
               f"{int((gap > 0).sum())} of {n} runs.")
    return out


def markdown_section(root, figures: dict[str, str] | None = None, split_sweep: str | None = None) -> list[str]:
    """The results page's section on the heads the sweep's models grow (protocol §7b), from the
    heads study's tables under ``root`` (the folder the workflow ran in); ``figures``: the heads
    figures' links by stem (``heads_formation``, ``heads_finals``, ``heads_grid``)."""
    root = Path(root)
    per_run = read_parquet(root / paths.sweep_heads_table("runs"))
    summary = read_parquet(root / paths.sweep_heads_table("summary"))
    threshold = float(read_note(root / paths.sweep_heads_table("runs"))["threshold"])
    split_sweep = split_sweep or str(summary["sweep"].iloc[0])
    table = pd.DataFrame({
        "sweep": summary["sweep"], "shape": summary["shape"], "heads": summary["heads"], "seeds": summary["seeds"],
        "best induction": [_pm(m, s) for m, s in zip(summary["best_induction_mean"], summary["best_induction_std"])],
        "on text": [_pm(m, s) for m, s in zip(summary["best_induction_text_mean"], summary["best_induction_text_std"])],
        "best prev": [_pm(m, s) for m, s in zip(summary["best_prev_mean"], summary["best_prev_std"])],
        "best sink": [_pm(m, s) for m, s in zip(summary["best_sink_mean"], summary["best_sink_std"])],
        "formed": [f"{round(f * n)} of {n}" for f, n in zip(summary["formed"], summary["seeds"])],
        "formation step": ["—" if pd.isna(x) else f"{x:.0f}" for x in summary["formation_step_mean"]],
        "in-context change (nats)": [_pm(m, s) for m, s in zip(summary["in_context_change_mean"],
                                                             summary["in_context_change_std"])],
        "cut top − random (nats)": [f"{t - r:+.3f}" for t, r in zip(summary["cut_top_zero_mean"],
                                                                    summary["cut_random_zero_mean"])],
    })
    parts = [
        "## The heads the models grow (protocol §7b)", "",
        f"Every head of every model scored with the §4 code at every evaluation step on a fixed probe; "
        f"final best-head scores mean ± std over seeds (ddof 1); *formed*: runs whose best induction score "
        f"reached {threshold:g}; in-context change: the in-context score (loss at the last positions minus at the "
        "first ones) at the end minus at the run's first evaluation, what training did to it; the cut: "
        "the copy-2 loss change of the top induction head cut (zero) minus that of a random head. From "
        f"`{paths.sweep_heads_table('summary')}` and `{paths.sweep_heads_table('runs')}`.",
        markdown_table(table), "", *reading(per_run, summary, threshold, split_sweep),
    ]
    parts += [f"![{stem.replace('_', ' ')}]({link})" for stem, link in (figures or {}).items()]
    return parts
