"""The induction sweep read out (protocol §7c): per run its phase change, the step its first
induction head forms and the lag between them, the heads it ends with and whether it holds the
circuit; per shape their means with intervals over seeds; and the contrasts fixed before any
data — the phase-change step against the number of heads, at a fixed width and at a fixed head
size —, each with its interval and a verdict. Tables only, no torch.

* **Phase change** (:func:`phase_step`): the first evaluation at which the loss on the predictable
  part lies ``induction.margin`` below the *unordered* reference — the loss of the best predictor
  that reads which tokens the context holds but not their order (:mod:`headwatch.induction.tasks`):
  a level no model reaches without reading the order, which is what an induction head reads. <NA>
  if the run never gets there. Fixed before any data, from the tasks' references alone.
* **The plateau** (:func:`headwatch.sweep.course.plateau_events`, the rule every sweep's course
  reads, with ``sweep.course.margin``): where the loss on the predictable part first flattens and
  where it first leaves that level — often an earlier drop than the phase change (a model learns
  which tokens to expect before it learns their order); reported beside it.
* **Heads** (:func:`headwatch.sweep.course.formation_step`): the first evaluation at which the best
  head's ``induction`` score rises ``induction.threshold`` above what uniform attention scores on
  the same rows (``induction_excess``), or its ``prev`` score reaches the threshold; the lag is
  induction formation − phase change, paired per run. At the end: how many heads are induction
  heads and previous-token heads by the same thresholds.
* **The circuit**: at the end a previous-token head in layer 0, an induction head in layer 1, and
  path patching's strongest edge between the two through the induction head's *key*.
* **Contrasts** (:func:`contrasts`): within each arm, every pair of adjacent head counts (more −
  fewer heads), the phase-change step's difference paired by seed (every shape of a seed reads the
  same batches in the same order) over the seeds where both changed phase, with its percentile
  bootstrap interval; *resolved* when it excludes 0. The arm's verdict: *increasing* or
  *decreasing* when every pair is resolved the same way, *not monotone* when resolved pairs
  disagree, *not resolved* otherwise; *too few runs* where a pair has fewer than 2 seeds that
  changed phase.
* **Whether** (added after the first full run, whose arms all read *too few runs* because some
  shapes rarely or never change phase — a finding in itself that the rule above cannot state): per
  shape, the share of seeds that changed phase and that formed an induction head with its exact
  (Clopper–Pearson) 95 % interval; per adjacent pair, Fisher's exact two-sided test of the two
  shares of seeds that changed phase (*resolved* at p < 0.05); and the arm's verdict read over only
  the pairs with enough runs (``verdict_enough``, with how many pairs it reads), beside the verdict
  fixed before the data, which stays.
* **The control** (:func:`control_check`): each control's runs must show no phase change and no
  induction head: the check can fail, and says which runs made it fail.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..settings.induction import InductionSettings, shape_of
from ..sweep.course import formation_step, interval_frame, mean_interval, plateau_events, with_intervals
from .tasks import CONTROLS, TASKS

RUN_KEYS = ("task", "shape", "width", "heads", "seed")
VERDICTS = ("increasing", "decreasing", "not monotone", "not resolved", "too few runs")


def phase_step(curve: pd.DataFrame, margin: float) -> int | None:
    """The first evaluation step at which the loss lies ``margin`` below the unordered reference
    (module docstring); None if never."""
    c = curve.sort_values("step")
    below = c[c["loss"] <= c["unigram"] - margin]
    return None if below.empty else int(below["step"].iloc[0])


def run_row(curve: pd.DataFrame, heads: pd.DataFrame, edges: dict, s: InductionSettings,
            plateau_margin: float) -> dict:
    """One run's events and final state (module docstring)."""
    c = curve.sort_values("step")
    ev = plateau_events(c["step"], c["loss"], plateau_margin)
    phase = phase_step(c, s.margin)
    induction = formation_step(heads, s.threshold, "induction_excess")
    prev = formation_step(heads, s.threshold, "prev")
    last = heads[heads["step"] == heads["step"].max()]
    final = c.iloc[-1]
    prev_l0 = bool((last[last.layer == 0]["prev"] >= s.threshold).any())
    ind_l1 = bool((last[last.layer == 1]["induction_excess"] >= s.threshold).any())
    return dict(plateau_step=ev["plateau_step"], plateau_loss=ev["plateau_loss"], leave_step=ev["leave_step"],
                phase_step=phase, induction_step=induction, prev_step=prev,
                lag=induction - phase if induction is not None and phase is not None else None,
                induction_heads=int((last["induction_excess"] >= s.threshold).sum()),
                prev_heads=int((last["prev"] >= s.threshold).sum()),
                best_induction=float(last["induction"].max()),
                best_induction_excess=float(last["induction_excess"].max()), best_prev=float(last["prev"].max()),
                final_loss=float(final["loss"]), reference=float(final["reference"]), unigram=float(final["unigram"]),
                final_gap=float(final["gap"]), first_loss=float(c["loss"].iloc[0]), final_own_loss=float(final["own_loss"]),
                circuit=prev_l0 and ind_l1 and bool(edges["key_strongest"]),
                **{k: edges[k] for k in ("sender", "receiver", "edge_q", "edge_k", "edge_v", "key_strongest")})


INT_COLUMNS = ("plateau_step", "leave_step", "phase_step", "induction_step", "prev_step", "lag")


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """One row per run (each dict: :data:`RUN_KEYS` and :func:`run_row`'s); missing events <NA>."""
    out = pd.DataFrame(rows)
    for col in INT_COLUMNS:
        out[col] = out[col].astype("Int64")
    out["plateau_loss"] = out["plateau_loss"].astype("Float64")
    return out.sort_values(["task", "width", "heads", "seed"], ignore_index=True)


def arm_shapes(s: InductionSettings) -> dict[str, list[str]]:
    """Each arm's shapes, fewest heads first (a shape may be in both arms)."""
    return {arm: [shape_of(w, h) for w, h in a.shapes()] for arm, a in s.arms.items()}


def summary(runs: pd.DataFrame, s: InductionSettings) -> pd.DataFrame:
    """Per task and shape: seeds, how many changed phase, formed an induction head, hold the circuit,
    and the mean with its interval of the phase-change step, the formation step, their lag, the
    induction heads at the end and the final loss and gap."""
    rows = []
    for (task, shape, width, heads), g in runs.groupby(["task", "shape", "width", "heads"], sort=False):
        changed, formed = int(g["phase_step"].notna().sum()), int(g["induction_step"].notna().sum())
        row = dict(task=task, shape=shape, width=width, heads=heads, head_size=width // heads, seeds=len(g),
                   changed=changed, formed=formed, circuits=int(g["circuit"].sum()))
        for name, k in (("changed", changed), ("formed", formed)):
            row[f"{name}_lo"], row[f"{name}_hi"] = share_interval(k, len(g))
        rows.append(with_intervals(row, g, ("phase_step", "induction_step", "lag", "induction_heads", "final_loss",
                                            "final_gap"), s.bootstrap))
    return interval_frame(rows, ["task", "width", "heads"])


def share_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % interval of a share of ``k`` in ``n``."""
    from scipy.stats import binomtest

    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def whether_p(changed_fewer: int, n_fewer: int, changed_more: int, n_more: int) -> float:
    """Fisher's exact two-sided p of two shares of seeds that changed phase."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[changed_more, n_more - changed_more],
                               [changed_fewer, n_fewer - changed_fewer]]).pvalue)


def pair_contrast(runs: pd.DataFrame, task: str, fewer: str, more: str, s: InductionSettings) -> dict:
    """``more`` − ``fewer`` heads: the phase-change step's difference, paired by seed, over the seeds
    where both changed phase; and the two shares of seeds that changed phase, with Fisher's p."""
    step = runs[runs.task == task].pivot(index="seed", columns="shape", values="phase_step")
    both = step[[fewer, more]].dropna() if {fewer, more} <= set(step.columns) else pd.DataFrame()
    diff = (both[more] - both[fewer]).astype(float).tolist() if len(both) else []
    mean, lo, hi = mean_interval(diff, s.bootstrap) if len(diff) >= 2 else (None, None, None)
    verdict = ("too few runs" if len(diff) < 2 else "resolved" if (lo > 0 or hi < 0) else "not resolved")
    counts = {x: (int(step[x].notna().sum()), int(len(step[x]))) if x in step.columns else (0, 0) for x in (fewer, more)}
    (cf, nf), (cm, nm) = counts[fewer], counts[more]
    p = whether_p(cf, nf, cm, nm) if nf and nm else None
    return dict(fewer=fewer, more=more, paired_seeds=len(diff), diff=mean, diff_lo=lo, diff_hi=hi, verdict=verdict,
                changed_fewer=cf, changed_more=cm, seeds_fewer=nf, seeds_more=nm, whether_p=p,
                whether="too few runs" if p is None else "resolved" if p < 0.05 else "not resolved")


def arm_verdict(pairs: list[dict]) -> str:
    """An arm's verdict from its adjacent pairs (module docstring)."""
    if not pairs or any(p["verdict"] == "too few runs" for p in pairs):
        return "too few runs"
    signs = {int(np.sign(p["diff"])) for p in pairs if p["verdict"] == "resolved"}
    if len(signs) > 1:
        return "not monotone"
    if all(p["verdict"] == "resolved" for p in pairs):
        return "increasing" if signs == {1} else "decreasing"
    return "not resolved"


def contrasts(runs: pd.DataFrame, s: InductionSettings) -> pd.DataFrame:
    """Every task's contrasts, fixed before the data: within each arm each adjacent pair of head
    counts (``kind`` pair) and the arm's verdict (``kind`` arm, its interval the first to last head
    count's difference)."""
    rows = []
    for task in [t for t in TASKS if t in set(runs.task)]:
        for arm, shapes in arm_shapes(s).items():
            shapes = [x for x in shapes if x in set(runs[runs.task == task]["shape"])]
            if len(shapes) < 2:
                continue
            pairs = [pair_contrast(runs, task, a, b, s) for a, b in zip(shapes, shapes[1:])]
            rows += [dict(task=task, arm=arm, kind="pair", **p) for p in pairs]
            ends = pair_contrast(runs, task, shapes[0], shapes[-1], s)
            enough = [p for p in pairs if p["verdict"] != "too few runs"]
            rows.append(dict(task=task, arm=arm, kind="arm", **dict(
                ends, verdict=arm_verdict(pairs), verdict_enough=arm_verdict(enough), pairs_enough=len(enough))))
    out = pd.DataFrame(rows, columns=["task", "arm", "kind", "fewer", "more", "paired_seeds", "diff", "diff_lo",
                                      "diff_hi", "verdict", "changed_fewer", "seeds_fewer", "changed_more",
                                      "seeds_more", "whether_p", "whether", "verdict_enough", "pairs_enough"])
    for col in ("diff", "diff_lo", "diff_hi", "whether_p"):
        out[col] = out[col].astype("Float64")
    for col in ("pairs_enough",):
        out[col] = out[col].astype("Int64")
    return out


def control_check(runs: pd.DataFrame) -> pd.DataFrame:
    """Per control: its runs, those with a phase change, with an induction head at the end, and
    whether the control is clean (neither in any run), naming the runs that are not."""
    rows = []
    for task, control in CONTROLS.items():
        g = runs[runs.task == control]
        if g.empty:
            continue
        bad = g[g["phase_step"].notna() | (g["induction_heads"] > 0)]
        rows.append(dict(task=task, control=control, runs=len(g), phase_changes=int(g["phase_step"].notna().sum()),
                         with_induction_heads=int((g["induction_heads"] > 0).sum()), clean=bad.empty,
                         not_clean=" ".join(f"{r.shape}/seed{r.seed}" for r in bad.itertuples())))
    return pd.DataFrame(rows, columns=["task", "control", "runs", "phase_changes", "with_induction_heads", "clean",
                                       "not_clean"])


def summarize(jobs: list[dict], s: InductionSettings, plateau_margin: float, bootstrap: dict) -> dict[str, pd.DataFrame]:
    """Every table of rule induction_summary (:data:`headwatch.paths.INDUCTION_TABLES`) from the
    training jobs (``jobs``: dicts with ``task``, ``shape``, ``width``, ``heads`` and their
    ``curves``, ``records`` and ``edges`` tables)."""
    s = InductionSettings.from_config({**{f: getattr(s, f) for f in ("arms", "run", "shapes", "seeds", "threshold",
                                                                    "margin")}, "bootstrap": bootstrap})
    rows, curves, finals = [], [], []
    for j in jobs:
        label = {k: j[k] for k in ("task", "shape", "width", "heads")}
        for e in j["edges"].to_dict("records"):
            seed = int(e["seed"])
            c = j["curves"][j["curves"]["seed"] == seed].drop(columns="seed")
            h = j["records"][j["records"]["seed"] == seed].drop(columns="seed")
            rows.append(dict(label, seed=seed, params=int(e["params"]), **run_row(c, h, e, s, plateau_margin)))
            last = h[h["step"] == h["step"].max()]
            finals.append(last.assign(**label, seed=seed))
        curves.append(j["curves"].assign(**label))
    runs = runs_table(rows)
    key = ["task", "shape", "width", "heads", "seed"]
    curves = pd.concat(curves, ignore_index=True)
    finals = pd.concat(finals, ignore_index=True)
    return dict(runs=runs, curves=curves[key + [c for c in curves.columns if c not in key]],
                heads=finals[key + [c for c in finals.columns if c not in key]], summary=summary(runs, s),
                contrasts=contrasts(runs, s), controls=control_check(runs))

