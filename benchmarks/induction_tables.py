"""Write docs/results/induction.md from the tables of a timed `make induction` run: every number
computed, none typed.

    make induction && .venv/bin/python benchmarks/induction_tables.py
    .venv/bin/python benchmarks/induction_tables.py [--root .] [--out docs/results/induction.md]

It reads, under ``--root`` (the checkout the run was made in): the run's timing record
(``results/timing/induction.json``: wall and CPU time, machine, load, commit), the induction sweep's
tables (``results/induction/{runs,summary,contrasts,controls}.parquet``) and its figures, which it
copies next to the page (``docs/results/induction/``). Refused (nothing written): a checkout whose
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
from headwatch.induction.analysis import arm_shapes  # noqa: E402
from headwatch.induction.tasks import CONTROLS  # noqa: E402
from headwatch.settings.induction import InductionSettings  # noqa: E402
from headwatch.tableio import read_note, read_parquet  # noqa: E402
from headwatch.workflow import targets  # noqa: E402
from headwatch.workflow.provenance import page_header, require_clean_tree, run_attempts  # noqa: E402

COMMAND = "make induction && .venv/bin/python benchmarks/induction_tables.py"
RECORD = "induction"
TASK_NAMES = {"repeat": "Repeated random tokens", "markov": "In-context Markov chains"}
ARM_NAMES = {"width": "at a fixed width", "head_size": "at a fixed head size"}


def interval(row, col: str, spec: str = ".0f") -> str:
    m, lo, hi = row[f"{col}_mean"], row[f"{col}_lo"], row[f"{col}_hi"]
    if pd.isna(m):
        return "—"
    return f"{m:{spec}} ({lo:{spec}}–{hi:{spec}})"


def share(row, col: str) -> str:
    """k of n seeds, with the share's exact 95 % interval."""
    return f"{row[col]} of {row['seeds']} ({row[f'{col}_lo']:.0%}–{row[f'{col}_hi']:.0%})"


def shape_table(summary: pd.DataFrame, task: str, arms: dict) -> str:
    s = summary[summary.task == task].sort_values(["width", "heads"])
    rows = []
    for r in s.itertuples(index=False):
        r = r._asdict()
        member = ", ".join(a for a, shapes in arms.items() if r["shape"] in shapes)
        rows.append({"shape": r["shape"], "arm": member, "heads": r["heads"], "head size": r["head_size"],
                     "seeds": r["seeds"], "changed phase": share(r, "changed"),
                     "phase-change step": interval(r, "phase_step"),
                     "induction head formed": share(r, "formed"),
                     "forms at step": interval(r, "induction_step"), "lag (steps)": interval(r, "lag", "+.0f"),
                     "induction heads at the end": interval(r, "induction_heads", ".1f"),
                     "circuit": f"{r['circuits']} of {r['seeds']}",
                     "final loss − best (nats)": interval(r, "final_gap", ".3f")})
    return md_table(pd.DataFrame(rows))


def contrast_lines(contrasts: pd.DataFrame, task: str) -> list[str]:
    out = []
    c = contrasts[contrasts.task == task]
    for arm in ("width", "head_size"):
        a = c[c.arm == arm]
        if a.empty:
            continue
        pairs = a[a.kind == "pair"]
        rows = [{"more − fewer heads": f"{p.more} − {p.fewer}", "seeds (both changed)": p.paired_seeds,
                 "difference in the phase-change step": "—" if pd.isna(p.diff) else f"{p.diff:+.0f}",
                 "95 % interval": "—" if pd.isna(p.diff_lo) else f"{p.diff_lo:+.0f} to {p.diff_hi:+.0f}",
                 "verdict": p.verdict,
                 "changed phase (fewer, more)": f"{p.changed_fewer} of {p.seeds_fewer}, {p.changed_more} of {p.seeds_more}",
                 "Fisher's exact p": "—" if pd.isna(p.whether_p) else f"{p.whether_p:.3f}",
                 "whether": p.whether} for p in pairs.itertuples()]
        whole = a[a.kind == "arm"].iloc[0]
        enough = pairs[pairs.verdict != "too few runs"]
        read = (f"over the {len(enough)} of {len(pairs)} pairs with enough runs "
                f"({', '.join(f'{p.more} − {p.fewer}' for p in enough.itertuples())}): **{whole.verdict_enough}**"
                if 0 < len(enough) < len(pairs) else "")
        out += [f"**Heads {ARM_NAMES[arm]}** — the arm's verdict as fixed before the data: **{whole.verdict}**"
                + ("" if pd.isna(whole["diff"]) else
                   f"; from {whole.fewer} to {whole.more} the phase change moves by {whole['diff']:+.0f} steps "
                   f"({whole.diff_lo:+.0f} to {whole.diff_hi:+.0f}, {whole.paired_seeds} seeds paired)")
                + (f"; read {read}" if read else "") + ".", "",
                md_table(pd.DataFrame(rows)), ""]
    return out


def reading(summary: pd.DataFrame, contrasts: pd.DataFrame, task: str, arms: dict) -> list[str]:
    """What the task's tables say, in sentences computed from them."""
    s = summary[summary.task == task]
    lines = []
    for arm, shapes in arms.items():
        rows = s.set_index("shape").reindex([x for x in shapes if x in set(s["shape"])])
        changed = [f"{k} {int(r.changed)}/{int(r.seeds)}" for k, r in rows.iterrows()]
        formed = [f"{k} {int(r.formed)}/{int(r.seeds)}" for k, r in rows.iterrows()]
        whole = contrasts[(contrasts.task == task) & (contrasts.arm == arm) & (contrasts.kind == "arm")]
        verdict = whole["verdict"].iloc[0] if len(whole) else "not measured"
        pairs = contrasts[(contrasts.task == task) & (contrasts.arm == arm) & (contrasts.kind == "pair")]
        moved = [f"{p.more} − {p.fewer} (p = {p.whether_p:.3f})" for p in pairs.itertuples() if p.whether == "resolved"]
        whether = ("whether a run changes phase differs, resolved, between " + ", ".join(moved) if moved else
                   "no adjacent pair differs resolvedly in whether its runs change phase")
        enough = whole["verdict_enough"].iloc[0] if len(whole) else None
        lines.append(f"- Heads {ARM_NAMES[arm]}: runs that changed phase — {', '.join(changed)}; that grew an "
                     f"induction head — {', '.join(formed)}. The phase-change step against heads: **{verdict}** as "
                     "fixed before the data" + (f", **{enough}** over the pairs with enough runs"
                                                if enough and enough != verdict else "") + f"; {whether}.")
    return lines


def control_lines(controls: pd.DataFrame) -> list[str]:
    out = []
    for c in controls.itertuples():
        out.append(f"- {CONTROLS[c.task]} ({c.runs} runs, scored on the {c.task} task's rows): {c.phase_changes} "
                   f"changed phase, {c.with_induction_heads} grew an induction head — "
                   + ("**clean**." if c.clean else f"**not clean**: {c.not_clean}."))
    return out


def page(root: Path, commit: str) -> tuple[str, list[tuple[Path, str]]]:
    attempts = run_attempts(root, root / paths.timed_run(RECORD), commit)
    t = {n: read_parquet(root / paths.induction_table(n)) for n in ("runs", "summary", "contrasts", "controls")}
    note = read_note(root / paths.induction_table("runs"))
    arms = arm_shapes(InductionSettings.from_config(dict(arms=note["arms"])))
    curves = read_parquet(root / paths.induction_table("curves"))
    steps = int(curves["step"].max())
    seeds = sorted(t["runs"]["seed"].unique())
    out = [page_header(commit, COMMAND), "", "# Which heads form, when, and how the number of heads changes it",
           "", "Protocol §7c. Two-layer models with rotary positions, trained on tasks where predicting from the "
           "context is the only way down, every shape of two arms — heads at a fixed width and heads at a fixed "
           f"head size —, {len(seeds)} seeds each ({', '.join(map(str, seeds))}), {steps} steps; each task's "
           "control trains the same models on sequences with nothing to read from the context.", "",
           *machine_lines(attempts, RECORD), "",
           f"A run **changes phase** at the first evaluation whose loss on the predictable part lies "
           f"{fmt(note['margin'])} nats below the best predictor's without the context's order; it **grows an "
           f"induction head** at the first evaluation at which a head's induction score lies {fmt(note['threshold'])} "
           "above uniform attention's; the **lag** is formation − phase change, per run; it holds the **circuit** "
           "when it ends with a previous-token head in layer 0, an induction head in layer 1, and path patching's "
           "strongest edge between them through the key. Means over the seeds that have the event, with 95 % "
           f"percentile bootstrap intervals over seeds ({note['bootstrap']['resamples']:,} resamples). "
           "From `results/induction/`.", ""]
    for task in [x for x in TASK_NAMES if x in set(t["runs"].task)]:
        out += [f"## {TASK_NAMES[task]}", "", shape_table(t["summary"], task, arms), "", *contrast_lines(t["contrasts"], task),
                *reading(t["summary"], t["contrasts"], task, arms), ""]
    out += ["## The controls", "", "The same models trained on sequences with nothing to read from the context "
            "(segments that never repeat; one fixed chain), scored on their task's rows: no phase change and no "
            "induction head may appear.", "", *control_lines(t["controls"]), ""]
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
