"""Write docs/results/induction.md from the tables of a timed `make induction` run: every number
computed, none typed.

    make induction && .venv/bin/python benchmarks/induction_tables.py
    .venv/bin/python benchmarks/induction_tables.py [--root .] [--out docs/results/induction.md]

It reads, under ``--root`` (the checkout the run was made in): the run's timing record
(``results/timing/induction.json``: wall and CPU time, machine, load, commit), the induction sweep's
tables (``results/induction/{runs,summary,regression,controls}.parquet``, a training job's note for
the batch and context), and its figures, which it copies next to the page (``docs/results/induction/``). Refused (nothing written): a checkout whose
result inputs differ from its commit, a run made from such a tree or at a commit whose result
inputs differ from this one's, a run that failed.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "gpu"))

from laptop_tables import machine_lines  # noqa: E402  (the laptop page's account of a timed run)
from paper_tables import fmt, md_table  # noqa: E402

from headwatch import paths  # noqa: E402
from headwatch.induction.analysis import QUESTIONS  # noqa: E402
from headwatch.induction.tasks import CONTROLS  # noqa: E402
from headwatch.tableio import read_note, read_parquet  # noqa: E402
from headwatch.workflow import targets  # noqa: E402
from headwatch.workflow.provenance import page_header, require_clean_tree, run_attempts  # noqa: E402

COMMAND = "make induction && .venv/bin/python benchmarks/induction_tables.py"
RECORD = "induction"
TASK_NAMES = {"repeat": "Repeated random tokens", "markov": "In-context Markov chains"}
EVENT_NAMES = {"phase": "phase change", "induction": "first induction head"}
COVARIATE_NAMES = {"log2_heads": "more heads (at a fixed head size)", "log2_head_size": "larger heads (at a fixed head count)",
                   "fixed_width": "more, smaller heads (at a fixed width: twice the heads, half the size)"}
AOYAMA_T = 10 ** 5.7
"""Aoyama, Wilcox and Schneider (2025), "Predicting the Emergence of Induction Heads in Language Model
Pretraining" (arXiv 2511.16893): their fit of the tokens seen when induction heads emerge, N = T·√(B·C)
with B the batch size and C the context, and T about 10^5.7, on language-model pretraining."""


def share(k, n, lo, hi) -> str:
    """k of n runs, with the share's exact 95 % interval."""
    return f"{k} of {n} ({lo:.0%}–{hi:.0%})"


def median(row, event: str) -> str:
    m, lo, hi = row[f"{event}_median"], row[f"{event}_median_lo"], row[f"{event}_median_hi"]
    if pd.isna(m):
        return f"not reached by {row['cap']}"
    return f"{m:.0f} ({lo:.0f}–{'no upper bound' if pd.isna(hi) else f'{hi:.0f}'})"


def interval(row, col: str, spec: str = ".0f") -> str:
    m, lo, hi = row[f"{col}_mean"], row[f"{col}_lo"], row[f"{col}_hi"]
    if pd.isna(m):
        return "—"
    return f"{m:{spec}} ({lo:{spec}}–{hi:{spec}})"


def cell_table(summary: pd.DataFrame, task: str) -> str:
    rows = []
    for r in summary[summary.task == task].to_dict("records"):
        rows.append({"head size": r["head_size"], "heads": r["heads"], "width": r["width"], "runs": r["runs"],
                     "changed phase": share(r["changed"], r["runs"], r["changed_lo"], r["changed_hi"]),
                     "median step to it (95 %)": median(r, "phase"),
                     "grew an induction head": share(r["formed"], r["runs"], r["formed_lo"], r["formed_hi"]),
                     "median step to it (95 %) ": median(r, "induction"),
                     "stopped on the events / at the cap": f"{r['by_events']} / {r['capped']}",
                     "circuit at the end": f"{r['circuits']} of {r['runs']}",
                     "induction heads at the end": interval(r, "induction_heads", ".1f"),
                     "final loss − best (nats)": interval(r, "final_gap", ".3f")})
    return md_table(pd.DataFrame(rows))


def regression_table(regression: pd.DataFrame, task: str) -> str:
    rows = []
    for r in regression[regression.task == task].itertuples():
        rows.append({"event": EVENT_NAMES[r.event], "per doubling of": COVARIATE_NAMES[r.covariate],
                     "hazard ratio (95 %)": (f"{r.hr:.2f} ({r.hr_lo:.2f}–{r.hr_hi:.2f})" if r.estimable
                                             else f"— ({r.why})"),
                     "p": "—" if pd.isna(r.p) or not r.estimable else f"{r.p:.2g}",
                     "proportional hazards (Schoenfeld p)": "—" if pd.isna(r.ph_p) else
                     f"{'hold' if r.ph_holds else 'do not hold'} ({r.ph_p:.2g})",
                     "runs (events)": f"{r.runs} ({r.events})", "verdict": r.verdict})
    return md_table(pd.DataFrame(rows))


def answer_lines(regression: pd.DataFrame, task: str) -> list[str]:
    """The two questions, answered in sentences read from the regression table."""
    out = []
    for covariate, (sooner, later) in QUESTIONS.items():
        parts = []
        for r in regression[(regression.task == task) & (regression.covariate == covariate)].itertuples():
            said = (f"hazard ratio {r.hr:.2f} per doubling ({r.hr_lo:.2f}–{r.hr_hi:.2f})" if r.estimable else r.why)
            caveat = "" if pd.isna(r.ph_holds) or bool(r.ph_holds) else "; the hazards are not proportional, so the ratio is an average over the run"
            parts.append(f"to the {EVENT_NAMES[r.event]}: **{r.verdict}** ({said}{caveat})")
        out.append(f"- {COVARIATE_NAMES[covariate][0].upper()}{COVARIATE_NAMES[covariate][1:]} — " + "; ".join(parts) + ".")
    return out


def stage_lines(runs: pd.DataFrame) -> list[str]:
    """Edelman et al.'s stages on the chains, measured from every markov run that changed phase."""
    m = runs[(runs.task == "markov") & runs["phase_step"].notna()]
    if m.empty:
        return ["No run changed phase on the chains: their stages cannot be read."]
    counts = m["stage"].fillna("no plateau before it").value_counts()
    at = m[m["stage"] == "unigram"]
    gap = at["plateau_gap"].astype(float)
    said = ", ".join(f"{int(v)} {k if k == 'no plateau before it' else f'at the {k} level'}" for k, v in counts.items())
    lines = [f"Of the {len(m)} runs that changed phase on the chains: {said}."]
    if len(at):
        lines.append(f"The {len(at)} unigram plateaus lie {gap.mean():+.3f} nats from the in-context unigram reference "
                     f"on average (from {gap.min():+.3f} to {gap.max():+.3f}), and last "
                     f"{(at['leave_step'].astype(float) - at['plateau_step'].astype(float)).median():.0f} steps "
                     "(median, plateau to leaving) before the drop to the bigram level.")
    return lines


def onset_lines(summary: pd.DataFrame, batch: int, context: int) -> list[str]:
    """Each task's fastest cell's median phase change in tokens, beside Aoyama et al.'s law."""
    predicted = AOYAMA_T * (batch * context) ** 0.5
    rows = []
    for task in [t for t in TASK_NAMES if t in set(summary.task)]:
        s = summary[(summary.task == task) & summary["phase_median"].notna()]
        if s.empty:
            continue
        fastest = s.sort_values("phase_median").iloc[0]
        slowest = s.sort_values("phase_median").iloc[-1]
        for label, r in (("fastest", fastest), ("slowest with a median", slowest)):
            tokens = float(r["phase_median"]) * batch * context
            rows.append({"task": TASK_NAMES[task], "cell": f"{r['shape']} ({label})",
                         "median phase change (steps)": f"{r['phase_median']:.0f}",
                         "tokens (steps × batch × context)": f"{tokens:,.0f}",
                         "Aoyama et al.'s N = T·√(B·C)": f"{predicted:,.0f}",
                         "ours ÷ theirs": f"{tokens / predicted:.3g}"})
    return [md_table(pd.DataFrame(rows))] if rows else ["No cell changed phase: no onset to compare."]


def control_lines(controls: pd.DataFrame) -> list[str]:
    out = []
    for c in controls.itertuples():
        out.append(f"- {CONTROLS[c.task]} ({c.runs} runs, scored on the {c.task} task's rows): {c.phase_changes} "
                   f"changed phase, {c.with_induction_heads} grew an induction head — "
                   + ("**clean**." if c.clean else f"**not clean**: {c.not_clean}."))
    return out


def page(root: Path, commit: str) -> tuple[str, list[tuple[Path, str]]]:
    attempts = run_attempts(root, root / paths.timed_run(RECORD), commit)
    t = {n: read_parquet(root / paths.induction_table(n)) for n in ("runs", "summary", "regression", "controls")}
    note = read_note(root / paths.induction_table("runs"))
    runs = t["runs"]
    task_runs, control_runs = runs[~runs.task.str.endswith("_control")], runs[runs.task.str.endswith("_control")]
    first = read_note(root / paths.induction_run(runs.task.iloc[0], runs["shape"].iloc[0], "curves"))["job"]
    batch, context, cap, settle = int(first["batch"]), int(first["context"]), int(first["steps"]), int(first["settle"])
    grid = note["grid"]
    cells = runs[["shape", "head_size", "heads"]].drop_duplicates()
    seeds = sorted(task_runs["seed"].unique())
    cseeds = sorted(control_runs["seed"].unique())
    out = [page_header(commit, COMMAND), "", "# Head count or head size? Induction on a grid of both, every run counted",
           "", "Protocol §7c. Two-layer models with rotary positions, trained on tasks where predicting from the "
           f"context is the only way down, on every cell of a grid — heads {', '.join(map(str, grid['heads']))} × "
           f"head size {', '.join(map(str, grid['head_size']))} where the width (their product) is at most "
           f"{grid['max_width']}: {len(cells)} cells —, {len(seeds)} seeds a cell on each task "
           f"({', '.join(map(str, seeds))}) and {len(cseeds)} on each control ({', '.join(map(str, cseeds))}): "
           f"{len(runs)} runs. A run trains until {settle} steps after it has both changed phase and grown an "
           f"induction head, or to the cap of {cap} steps; a run without an event by its end is **censored** there — "
           "counted, never dropped.", "", *machine_lines(attempts, RECORD), "",
           f"A run **changes phase** at the first evaluation whose loss on the predictable part lies "
           f"{fmt(note['margin'])} nats below the best predictor's without the context's order; it **grows an "
           f"induction head** at the first evaluation at which a head's induction score lies {fmt(note['threshold'])} "
           "above uniform attention's; it holds the **circuit** when it ends with a previous-token head in layer 0, an "
           "induction head in layer 1, and path patching's strongest edge between them through the key. Per cell, "
           "the Kaplan–Meier median step to each event with its 95 % interval (read off the log-log band; *not "
           "reached*: past the runs' last steps; *no upper bound*: the band's upper curve stays above one half to "
           "the cell's last event, as it does for four runs that all have the event — the table's shares say how "
           "many had it). The questions fixed before the run are answered by one Cox "
           "regression per task and event on log2 heads and log2 head size together (statsmodels, Efron's ties): "
           "the hazard ratio per doubling of each with the other held, above 1 sooner, with its 95 % interval — "
           "*resolved* when the interval excludes 1 — and the proportional-hazards check (Schoenfeld residuals "
           "against the rank of the event step); it reads each covariate as one ratio per doubling over the whole "
           "grid, so where the cells show an effect that is not monotone (the cell tables), the ratio is a summary "
           "of it, not a law. From `results/induction/`. An earlier sweep at a fixed width of 64 "
           "(more heads, later) could not tell head count from head size and left out the runs that had not changed "
           "phase: protocol §7c keeps its finding, and says what was fixed before this run.", ""]
    for task in [x for x in TASK_NAMES if x in set(task_runs.task)]:
        out += [f"## {TASK_NAMES[task]}", "", "**The answer** (verdicts fixed before the run):", "",
                *answer_lines(t["regression"], task), "", regression_table(t["regression"], task), "",
                cell_table(t["summary"], task), ""]
    out += ["## The stages of the chains (Edelman et al. 2024)", "",
            "Edelman et al. (2024, *The Evolution of Statistical Induction Heads: In-Context Learning Markov "
            "Chains*) describe models trained on in-context chains passing from uniform prediction to an "
            "in-context unigram plateau before they drop to the bigram. Measured here from each run's own curve: "
            "the plateau §7b's rule finds before the phase change, and which of three levels it lies nearest — "
            "the untrained model's loss (uniform), the in-context unigram reference, the bigram (best) reference.",
            "", *stage_lines(runs), "",
            "## The onset in tokens (Aoyama et al. 2025)", "",
            "Aoyama, Wilcox and Schneider (2025, *Predicting the Emergence of Induction Heads in Language Model "
            "Pretraining*) fit the tokens a language model has seen when its induction heads emerge as "
            f"N = T·√(B·C), T about 10^5.7, with B the batch and C the context (here {batch} and {context}), and "
            "find it does not depend on the model's size. Beside it, the median phase change of each task's "
            "fastest and slowest cell (with a median), in tokens:", "", *onset_lines(t["summary"], batch, context), "",
            "## The controls", "", "The same models trained on sequences with nothing to read from the context "
            "(segments that never repeat; one fixed chain), scored on their task's rows, each to the cap: no phase "
            "change and no induction head may appear.", "", *control_lines(t["controls"]), ""]
    figures = []
    for key in targets.INDUCTION_FIGURES:
        src = root / paths.induction_figure(key, "png")
        figures.append((src, f"induction/{key}.png"))
        out += [f"![{key}](induction/{key}.png)", ""]
    return "\n".join(out).rstrip() + "\n", figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "induction.md")
    args = ap.parse_args(argv)
    commit = require_clean_tree(args.root)
    text, figures = page(args.root, commit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for src, rel in figures:
        dest = args.out.parent / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    args.out.write_text(text)
    print(f"wrote {args.out} and {len(figures)} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
