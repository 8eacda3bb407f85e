"""The induction sweep read out (protocol §7c): per run its phase change, the step its first
induction head forms, where it stopped and why, the heads it ends with and whether it holds the
circuit; per cell of the grid (head size × heads) the time to each event as a Kaplan–Meier curve with
every run counted (a run without the event when it stopped is censored there, never dropped); the
answer to the two questions fixed before the run — at a fixed head size, do more heads reach each
event sooner or later; at a fixed head count, does head size matter — from one Cox regression per
task and event on log2 heads and log2 head size together (:mod:`headwatch.induction.survival`); the
Markov chains' stages; the controls. Tables only, no torch.

* **Phase change** (:func:`phase_step`): the first evaluation at which the loss on the predictable
  part lies ``induction.margin`` below the *unordered* reference — the loss of the best predictor
  that reads which tokens the context holds but not their order (:mod:`headwatch.induction.tasks`):
  a level no model reaches without reading the order, which is what an induction head reads.
* **First induction head** (:func:`headwatch.sweep.course.formation_step`): the first evaluation at
  which the best head's ``induction`` score rises ``induction.threshold`` above what uniform attention
  scores on the same rows (``induction_excess``); a previous-token head likewise on ``prev``.
  :func:`run_events` gives both: a run stops on them (``settle`` steps later) and the summary reads
  them, one definition for both.
* **The plateau** (:func:`headwatch.sweep.course.plateau_events`, §7b's rule with
  ``sweep.course.margin``): where the loss first flattens and where it leaves that level. On the
  chains it is read against the three levels Edelman et al. (2024) name — the untrained model's loss
  (uniform prediction), the in-context unigram reference and the bigram (best) reference: a run shows
  the **unigram stage** when it has a plateau before its phase change and that plateau lies nearer the
  unigram reference than either other level (``stage``), measured from its own curve.
* **The circuit**: at the end a previous-token head in layer 0, an induction head in layer 1, and
  path patching's strongest edge between the two through the induction head's *key*.
* **The control** (:func:`control_check`): each control's runs must show no phase change and no
  induction head: the check can fail, and says which runs made it fail.
"""
from __future__ import annotations

import math

import pandas as pd

from ..settings.induction import InductionSettings
from ..sweep.course import formation_step, interval_frame, plateau_events, with_intervals
from .survival import cox, km_curve, km_median, ratio_verdict
from .tasks import CONTROLS, TASKS

RUN_KEYS = ("task", "shape", "width", "heads", "head_size", "seed")
EVENTS = {"phase": "phase_step", "induction": "induction_step"}
"""The two events whose time the sweep reads: the phase change and the first induction head (their
columns of the runs table)."""
COVARIATES = ("log2_heads", "log2_head_size")
"""What the regression reads: heads and head size, each on a log-2 scale (a ratio per doubling)."""
FIXED_WIDTH = {"fixed_width": {"log2_heads": 1.0, "log2_head_size": -1.0}}
"""The split at a fixed width, read from the same fit: twice the heads at half the size (the first
sweep's question, where head count and head size moved together)."""
QUESTIONS = {"log2_heads": ("more heads: sooner", "more heads: later"),
             "log2_head_size": ("larger heads: sooner", "larger heads: later"),
             "fixed_width": ("more, smaller heads: sooner", "more, smaller heads: later")}
"""Each row's two resolved verdicts, fixed before the run: a hazard ratio above 1 (its interval
entirely) means the event comes sooner per doubling, below 1 later. The first two answer the sweep's
questions; the third, at a fixed width, is set beside the first sweep's finding."""


def phase_step(curve: pd.DataFrame, margin: float) -> int | None:
    """The first evaluation step at which the loss lies ``margin`` below the unordered reference
    (module docstring); None if never."""
    c = curve.sort_values("step")
    below = c[c["loss"] <= c["unigram"] - margin]
    return None if below.empty else int(below["step"].iloc[0])


def run_events(curve: pd.DataFrame, heads: pd.DataFrame, threshold: float, margin: float) -> dict:
    """A run's events in its evaluations so far: ``phase_step``, ``induction_step`` and ``prev_step``
    (each None until it happens) — what a run stops on and what the summary reads."""
    return dict(phase_step=phase_step(curve, margin),
                induction_step=formation_step(heads, threshold, "induction_excess"),
                prev_step=formation_step(heads, threshold, "prev"))


def stage_of(plateau_loss, levels: dict) -> str | None:
    """The level (a key of ``levels``) a plateau lies nearest; None without a plateau."""
    if plateau_loss is None or pd.isna(plateau_loss):
        return None
    return min(levels, key=lambda k: abs(float(plateau_loss) - levels[k]))


def run_row(curve: pd.DataFrame, heads: pd.DataFrame, edges: dict, s: InductionSettings,
            plateau_margin: float) -> dict:
    """One run's events, where it stopped and its final state (module docstring)."""
    c = curve.sort_values("step")
    ev = plateau_events(c["step"], c["loss"], plateau_margin)
    events = run_events(c, heads, s.threshold, s.margin)
    phase, induction = events["phase_step"], events["induction_step"]
    last = heads[heads["step"] == heads["step"].max()]
    final, first = c.iloc[-1], c.iloc[0]
    levels = dict(uniform=float(first["loss"]), unigram=float(final["unigram"]), bigram=float(final["reference"]))
    before = ev["plateau_step"] is not None and (phase is None or ev["plateau_step"] < phase)
    stage = stage_of(ev["plateau_loss"], levels) if before else None
    prev_l0 = bool((last[last.layer == 0]["prev"] >= s.threshold).any())
    ind_l1 = bool((last[last.layer == 1]["induction_excess"] >= s.threshold).any())
    return dict(stop_step=int(edges.get("stop_step", c["step"].max())), stop_reason=edges.get("stop_reason", "cap"),
                plateau_step=ev["plateau_step"], plateau_loss=ev["plateau_loss"], leave_step=ev["leave_step"],
                stage=stage, plateau_gap=(ev["plateau_loss"] - levels["unigram"]) if stage else None,
                **events, lag=induction - phase if induction is not None and phase is not None else None,
                induction_heads=int((last["induction_excess"] >= s.threshold).sum()),
                prev_heads=int((last["prev"] >= s.threshold).sum()),
                best_induction=float(last["induction"].max()),
                best_induction_excess=float(last["induction_excess"].max()), best_prev=float(last["prev"].max()),
                final_loss=float(final["loss"]), reference=float(final["reference"]), unigram=float(final["unigram"]),
                final_gap=float(final["gap"]), first_loss=float(first["loss"]), final_own_loss=float(final["own_loss"]),
                circuit=prev_l0 and ind_l1 and bool(edges["key_strongest"]),
                **{k: edges[k] for k in ("sender", "receiver", "edge_q", "edge_k", "edge_v", "key_strongest")})


INT_COLUMNS = ("plateau_step", "leave_step", "phase_step", "induction_step", "prev_step", "lag")


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """One row per run (each dict: :data:`RUN_KEYS` and :func:`run_row`'s); missing events <NA>."""
    out = pd.DataFrame(rows)
    for col in INT_COLUMNS:
        out[col] = out[col].astype("Int64")
    for col in ("plateau_loss", "plateau_gap"):
        out[col] = out[col].astype("Float64")
    out["stage"] = out["stage"].astype("string")
    return out.sort_values(["task", "head_size", "heads", "seed"], ignore_index=True)


def survival_times(runs: pd.DataFrame, event: str) -> pd.DataFrame:
    """``runs`` with ``time`` (the event's step, or the step the run stopped at without it: censored)
    and ``observed`` for ``event`` (a key of :data:`EVENTS`), and the regression's covariates."""
    col = EVENTS[event]
    observed = runs[col].notna()
    return runs.assign(time=runs[col].astype("Float64").fillna(runs["stop_step"].astype(float)).astype(float),
                       observed=observed.to_numpy(), log2_heads=runs["heads"].map(math.log2).astype(float),
                       log2_head_size=runs["head_size"].map(math.log2).astype(float))


def share_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % interval of a share of ``k`` in ``n``."""
    from scipy.stats import binomtest

    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return float(ci.low), float(ci.high)


def summary(runs: pd.DataFrame, s: InductionSettings) -> pd.DataFrame:
    """Per task and cell: runs, how many changed phase, grew an induction head, hold the circuit,
    stopped on their events and reached the cap; each event's Kaplan–Meier median step with its
    interval (None: not reached by the runs' last steps), the share with the event by its run's end
    with its exact interval; the chains' unigram stage (runs with it, the plateau's distance to the
    unigram reference); the mean with its interval of the lag, the final induction heads and gap."""
    rows = []
    for (task, shape, width, heads, size), g in runs.groupby(["task", "shape", "width", "heads", "head_size"],
                                                           sort=False):
        n = len(g)
        row = dict(task=task, shape=shape, width=width, heads=heads, head_size=size, runs=n,
                   changed=int(g["phase_step"].notna().sum()), formed=int(g["induction_step"].notna().sum()),
                   circuits=int(g["circuit"].sum()), by_events=int((g["stop_reason"] == "events").sum()),
                   capped=int((g["stop_reason"] == "cap").sum()), cap=int(g["stop_step"].max()),
                   unigram_stage=int((g["stage"] == "unigram").sum()))
        for name, k in (("changed", row["changed"]), ("formed", row["formed"])):
            row[f"{name}_lo"], row[f"{name}_hi"] = share_interval(k, n)
        for event in EVENTS:
            t = survival_times(g, event)
            row[f"{event}_median"], row[f"{event}_median_lo"], row[f"{event}_median_hi"] = km_median(
                km_curve(t["time"], t["observed"]))
        rows.append(with_intervals(row, g, ("lag", "induction_heads", "final_gap", "plateau_gap"), s.bootstrap))
    out = interval_frame(rows, ["task", "head_size", "heads"])
    for event in EVENTS:
        for end in ("median", "median_lo", "median_hi"):
            out[f"{event}_{end}"] = out[f"{event}_{end}"].astype("Float64")
    return out


def km_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Every task's, cell's and event's Kaplan–Meier curve (:func:`headwatch.induction.survival.km_curve`):
    ``task, shape, width, heads, head_size, event, step, survival, lo, hi, at_risk, events``."""
    parts = []
    for (task, shape, width, heads, size), g in runs.groupby(["task", "shape", "width", "heads", "head_size"],
                                                           sort=False):
        for event in EVENTS:
            t = survival_times(g, event)
            parts.append(km_curve(t["time"], t["observed"]).assign(task=task, shape=shape, width=width, heads=heads,
                                                                    head_size=size, event=event))
    out = pd.concat(parts, ignore_index=True)
    key = ["task", "shape", "width", "heads", "head_size", "event"]
    return out[key + [c for c in out.columns if c not in key]]


def regression(runs: pd.DataFrame) -> pd.DataFrame:
    """Per task (not the controls) and event: the Cox regression on log2 heads and log2 head size
    together (:func:`headwatch.induction.survival.cox`), one row per covariate with its hazard ratio
    per doubling, interval, p, the proportional-hazards check and the verdict fixed before the run
    (:data:`QUESTIONS`; ``ph_holds`` False: the ratio changes over the run, an average of it)."""
    rows = []
    for task in [t for t in TASKS if t in set(runs["task"])]:
        g = runs[runs.task == task]
        for event in EVENTS:
            fit = cox(survival_times(g, event), list(COVARIATES), combinations=FIXED_WIDTH)
            for r in fit.to_dict("records"):
                faster, slower = QUESTIONS[r["covariate"]]
                rows.append(dict(task=task, event=event, **r, verdict=ratio_verdict(r, faster, slower),
                                 ph_holds=None if pd.isna(r["ph_p"]) else bool(r["ph_p"] >= 0.05)))
    out = pd.DataFrame(rows, columns=["task", "event", "covariate", "runs", "events", "coef", "se", "hr", "hr_lo",
                                      "hr_hi", "p", "ph_p", "estimable", "why", "verdict", "ph_holds"])
    for col in ("coef", "se", "hr", "hr_lo", "hr_hi", "p", "ph_p"):
        out[col] = out[col].astype("Float64")
    out["ph_holds"] = out["ph_holds"].astype("boolean")
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
    s = InductionSettings.from_config({**{f: getattr(s, f) for f in ("grid", "run", "shapes", "seeds", "control_seeds",
                                                                    "threshold", "margin")}, "bootstrap": bootstrap})
    rows, curves, finals = [], [], []
    for j in jobs:
        label = dict(task=j["task"], shape=j["shape"], width=j["width"], heads=j["heads"],
                     head_size=j["width"] // j["heads"])
        for e in j["edges"].to_dict("records"):
            seed = int(e["seed"])
            c = j["curves"][j["curves"]["seed"] == seed].drop(columns="seed")
            h = j["records"][j["records"]["seed"] == seed].drop(columns="seed")
            rows.append(dict(label, seed=seed, params=int(e["params"]), **run_row(c, h, e, s, plateau_margin)))
            last = h[h["step"] == h["step"].max()]
            finals.append(last.assign(**label, seed=seed))
        curves.append(j["curves"].assign(**label))
    runs = runs_table(rows)
    key = list(RUN_KEYS)
    curves = pd.concat(curves, ignore_index=True)
    finals = pd.concat(finals, ignore_index=True)
    return dict(runs=runs, curves=curves[key + [c for c in curves.columns if c not in key]],
                heads=finals[key + [c for c in finals.columns if c not in key]], summary=summary(runs, s),
                survival=km_curves(runs), regression=regression(runs), controls=control_check(runs))
