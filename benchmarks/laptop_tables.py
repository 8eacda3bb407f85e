"""Write docs/results/laptop-scale.md from the tables of a timed `make laptop` run: every number
computed, none typed (but the original run's findings it is compared with: benchmarks/original.py).

    make laptop && .venv/bin/python benchmarks/laptop_tables.py
    .venv/bin/python benchmarks/laptop_tables.py [--root .] [--out docs/results/laptop-scale.md]
    make laptop-long && .venv/bin/python benchmarks/laptop_tables.py --only laptop-long
    make laptop-more && .venv/bin/python benchmarks/laptop_tables.py --only laptop-more

It reads, under ``--root`` (the checkout the run was made in): the run's timing record
(``results/timing/laptop.json``, written by the Makefile's timed target: wall and CPU time, machine,
load, commit), its merged configuration (``results/run_config.yaml``), the sweep's tables
(``results/sweep/{summary,contrast,finals,curves}.parquet``), the training jobs' Snakemake
benchmark records and the sweep's figures, which it copies next to the page
(``docs/results/laptop-scale/``), and the course of the split sweep (``results/sweep/course/``:
leaving the plateau, the previous-token head, the gaps). When ``results/timing/laptop-more.json``
is there too (`make laptop-more` after `make laptop`), its time and a section per study follow
(``results/sweep/studies/{study}.parquet`` and ``{study}_contrasts.parquet``, the study's figure):
the table, each contrast with its interval and verdict, and the original study's finding beside it
where the repository records one (``ORIGINAL_STUDIES`` of ``benchmarks/original.py``); without it,
the studies' section the page at ``--out`` has is kept word for word, under a line naming the commit
whose run wrote it. The
section on `make laptop-long` (``results/timing/laptop-long.json``, ``results/sweep/course/heads_long/``)
is written from its own timed record, beside the original run's numbers point by point; where
``--root`` has no laptop-long run, the section the page at ``--out`` has from its own run is kept
word for word (its commit and record at its head), else it says that the run has not been made;
the page is written either way. A run's configuration is read from
the config files its timed command names (the two runs share ``results/``, so
``results/run_config.yaml`` holds only the last one's).

``--only laptop-long`` writes that section alone, from a checkout where only `make laptop-long` was
run: the section (its own commit, command and timed record at its head) replaces the one the page
has, and the rest of the page stays as its own run wrote it, under its own commit. ``--only
laptop-more`` does the same for the studies' section, from a checkout where `make laptop-more` ran
after a `make laptop` made at another commit (the laptop run itself is then not read).

Refused (nothing written): a checkout whose result inputs differ from its commit
(:func:`headwatch.workflow.provenance.require_clean_tree`), a run made from such a tree or at a commit whose
result inputs differ from this one's, a run that failed.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
from itertools import takewhile
from pathlib import Path

import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "gpu"))
sys.path.insert(0, str(HERE))
from original import ORIGINAL_LONG, ORIGINAL_STUDIES, findings, verdict, where  # noqa: E402,F401  (the original's figures)
from paper_tables import fmt, md_table  # noqa: E402  (the paper page's own Markdown helpers)

from headwatch import paths  # noqa: E402
from headwatch.workflow import run_record, targets  # noqa: E402
from headwatch.markup import markdown  # noqa: E402
from headwatch.workflow.provenance import (DirtyTreeError, RunRecordError, page_header, require_clean_tree,  # noqa: E402
                                           run_attempts)
from headwatch.settings.sweep import BootstrapSettings, StudySettings, TrainSettings, course_sweeps, train_of  # noqa: E402
from headwatch.sweep import plan  # noqa: E402
from headwatch.settings.kinds import KINDS  # noqa: E402
from headwatch.sweep.contrasts import beside_text, contrast_sentence, range_caveat, study_contrasts  # noqa: E402
from headwatch.sweep.contrasts import metric as contrast_metric  # noqa: E402
from headwatch.sweep.course import markdown_section as course_section  # noqa: E402
from headwatch.sweep.heads import markdown_section as heads_section  # noqa: E402
from headwatch.sweep.course import mean_interval  # noqa: E402
from headwatch.sweep.summary import (MIN_SEEDS, READINGS, at_reading, fit_summary, overfitting, read_runs,  # noqa: E402
                                     readings_section, split_verdict, width_verdict)
from headwatch.tableio import read_note, read_parquet  # noqa: E402

COMMAND = "make laptop && .venv/bin/python benchmarks/laptop_tables.py"
LONG_COMMAND = "make laptop-long && .venv/bin/python benchmarks/laptop_tables.py --only laptop-long"
MORE_COMMAND = "make laptop-more && .venv/bin/python benchmarks/laptop_tables.py --only laptop-more"
NOT_MADE = "Not made in this checkout"
LONG_HEAD = "## Longer: `make laptop-long` (1, 4 and 32 heads, 4× the characters)"
STUDIES_HEAD = "## The studies at laptop scale (`make laptop-more`)"
STUDIES_KEPT = "As the page written at commit"
RECORD, MORE_RECORD, LONG_RECORD = "laptop", "laptop-more", "laptop-long"
FIGURES = ("training_curves", "contrast", "loss_vs_heads", "loss_vs_width", "readings", "heads_formation",
           "heads_finals", "heads_grid")
class PageError(RuntimeError):
    """The run cannot be published as it is."""


def timing(root: Path, name: str, commit: str) -> list[dict]:
    """The timed run's attempts (:func:`headwatch.workflow.provenance.run_attempts`); refused if the last failed
    or any was made from a tree with changes or at a commit whose result inputs are not this commit's."""
    return run_attempts(root, root / paths.timed_run(name), commit)


def machine_lines(attempts: list[dict], name: str) -> list[str]:
    wall, cpu = sum(a["wall_s"] for a in attempts), sum(a["cpu_s"] for a in attempts)
    last = attempts[-1]
    loads = "; ".join((f"attempt {i}: " if len(attempts) > 1 else "")
                      + f"{', '.join(f'{x:.2f}' for x in a['load_before'])} before and "
                      f"{', '.join(f'{x:.2f}' for x in a['load_after'])} after" for i, a in enumerate(attempts, 1))
    runs = (f"`{last['command']}` ({last['started']} to {last['ended']})" if len(attempts) == 1 else
            f"`{last['command']}` in {len(attempts)} attempts (stopped and resumed; from {attempts[0]['started']} "
            f"to {last['ended']}; the times below are the attempts' sums)")
    return [f"{runs}: **{wall / 60:.1f} min** wall time, {cpu / 60:.1f} min of CPU time in its processes "
            f"({cpu / wall if wall else float('nan'):.2f} cores busy on average). Machine: {last['cpu_model']}, "
            f"{last['usable_cores']} usable of {last['logical_cores']} logical cores, {fmt(last['memory_gib'])} GiB; "
            f"load average (1, 5, 15 min) {loads} (from `{paths.timed_run(name)}`)."]


def job_times(root: Path, finals: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: mean wall and CPU seconds of training one run, each run's share of its stack's
    training job (Snakemake's benchmark record of the job over the runs its folder holds; a run a
    stack took as it was, finished by an earlier job, counts as one of its runs)."""
    rows = []
    for r in finals.drop_duplicates(["trained_under", "shape", "seed"]).itertuples():
        for folder in sorted((root / paths.sweep_stack(r.trained_under, "x")).parent.glob(f"*/{r.shape}/seed{r.seed}")):
            stack = folder.parent.parent
            tsv = root / paths.benchmark("sweep_train", r.trained_under, stack.name)
            if tsv.exists():
                t = pd.read_csv(tsv, sep="\t").iloc[-1]
                n = len(list(stack.glob("*/seed*")))
                rows.append(dict(shape=r.shape, trained_under=r.trained_under, job_wall_s=float(t["s"]) / n,
                                 job_cpu_s=float(t["cpu_time"]) / n))
    if not rows:
        return pd.DataFrame(columns=["shape", "trained_under", "job_wall_s", "job_cpu_s"])
    return pd.DataFrame(rows).groupby(["trained_under", "shape"], as_index=False).mean()


def copy_figures(root: Path, out: Path) -> dict[str, str]:
    """The sweep's PNG figures next to the page; {stem: path relative to the page}."""
    folder = out.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    copied = {}
    for stem in FIGURES:
        src = root / paths.sweep_figure(stem, "png")
        if not src.exists():
            raise PageError(f"no {src}: the run did not make its figures")
        shutil.copy2(src, folder / src.name)
        copied[stem] = f"{folder.name}/{src.name}"
    return copied


def course_parts(root: Path, out: Path, sw: dict, sweep: str) -> list[str]:
    """The split sweep's course (leaving the plateau, the previous-token head, the gaps), its
    figures copied next to the page; nothing when the run's configuration does not read it."""
    if sweep not in course_sweeps(sw):
        return []
    return course_section(root, sweep, copy_course_figures(root, out, sweep))


def copy_course_figures(root: Path, out: Path, sweep: str) -> dict[str, str]:
    """A sweep's course figures (PNG) next to the page; {key: path relative to the page}."""
    folder = out.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    links = {}
    for key in targets.SWEEP_COURSE_FIGURES:
        src = root / paths.course_figure(sweep, key, "png")
        if not src.exists():
            raise PageError(f"no {src}: the run did not make its figures")
        name = f"course_{sweep}_{key}.png"
        shutil.copy2(src, folder / name)
        links[key] = f"{folder.name}/{name}"
    return links


def studies_section(root: Path, out: Path, attempts: list[dict], commit: str | None = None) -> list[str]:
    """The page's section on `make laptop-more`: its run, then a section per study it planned
    (:func:`study_section`), from the configuration its timed command names. With ``commit`` (the
    section written alone, ``--only laptop-more``) its own commit and command head it."""
    sw = run_config(root, attempts)["sweep"]
    names = plan.studies(sw)
    if not names:
        raise PageError(f"{root / paths.timed_run(MORE_RECORD)}: its configuration plans no study (sweep.studies)")
    boot = BootstrapSettings.from_config(sw["summary"]["bootstrap"])
    pct = f"{100 * boot.level:g} %"
    own = [page_header(commit, MORE_COMMAND)] if commit else []
    return [STUDIES_HEAD, "", *own, *machine_lines(attempts, MORE_RECORD),
            f"Each study answers its question with the contrasts its `study` block names, fixed with its grid before "
            f"any data (protocol §7, \"Studies\"): each arm minus its reference in bits per character (> 0: the arm "
            f"is worse), with the {pct} percentile bootstrap interval over seeds ({boot.resamples:,} resamples, seed "
            f"{boot.seed}), paired by seed where both arms read the same vocabulary (they then see the same training "
            f"windows in the same order) and unpaired where they do not. *Resolved* when the interval excludes 0 "
            f"(for `extremes`, the grid's worst arm against its best, both picked from these losses: and when "
            f"relabelling the arms within each seed gives a pair that far apart less than {100 * (1 - boot.level):g} % "
            f"of the time), *not resolved* otherwise, *too few seeds* (no interval) with fewer than {MIN_SEEDS}.",
            *reference_run(root, attempts),
            *[line for name in names for line in study_section(root, out, name, sw)]]


#: The claims :func:`original_verdict` reads, by what they are about.
LOSS_CLAIMS, SPEED_CLAIMS, CACHE_CLAIMS = ("arm better", "arm worse"), ("arm slower", "arm faster"), ("arm smaller cache",)


def original_here(claim: str, c) -> str:
    """What this run measured on an original finding's point."""
    if claim in SPEED_CLAIMS:
        arm, ref = c["arm_chars_per_s"], c["reference_chars_per_s"]
        return (f"training throughput {arm / ref:.2f}× the reference's ({arm:,.0f} against {ref:,.0f} characters/s; "
                "one figure per arm, its runs beside another job on the same cores: no interval)")
    if claim in CACHE_CLAIMS:
        arm, ref = c["arm_kv_cache_bytes_per_token"], c["reference_kv_cache_bytes_per_token"]
        return (f"{arm:,.0f} against {ref:,.0f} KV-cache bytes per token (×{ref / arm:g} smaller; "
                f"{c['arm_kv_heads']} against {c['reference_kv_heads']} key/value heads); the loss: "
                + contrast_sentence(c))
    return contrast_sentence(c)


def original_verdict(claim: str, c) -> str:
    """An original finding against this run: on the loss, holds / does not hold where this run's contrast
    is resolved, what this scale cannot tell where it is not; on the throughput and the cache, holds /
    does not hold by the figures (no interval)."""
    if claim in SPEED_CLAIMS:
        slower = c["arm_chars_per_s"] < c["reference_chars_per_s"]
        return "holds" if slower == (claim == "arm slower") else "does not hold"
    if claim in CACHE_CLAIMS:
        return "holds" if c["arm_kv_cache_bytes_per_token"] < c["reference_kv_cache_bytes_per_token"] else "does not hold"
    if claim not in LOSS_CLAIMS:
        raise PageError(f"an original finding's claim is one of {LOSS_CLAIMS + SPEED_CLAIMS + CACHE_CLAIMS}, "
                        f"not {claim!r}")
    if c["verdict"] != "resolved":
        return f"this scale cannot tell ({c['verdict']})"
    return "holds" if claim == ("arm better" if c["diff"] < 0 else "arm worse") else "does not hold"


def original_parts(name: str, contrasts: pd.DataFrame) -> list[str]:
    """What the original study said on this study's question, point by point beside this run's
    contrasts, or that the repository does not record it."""
    findings = ORIGINAL_STUDIES.get(name)
    if not findings:
        return ["The original study left this question unmeasured (or its finding is not recorded in this "
                "repository): nothing is set beside these numbers."]
    by_pair = {(c["arm"], c["reference"]): c for c in contrasts.to_dict("records")}
    rows = []
    for f in findings:
        c = by_pair.get((f["arm"], f["reference"]))
        if c is None:          # a grid of the user's own (or the tests'): said in the row, not hidden
            rows.append(dict(finding=f["finding"], here=f"this run's study has no {f['arm']} − {f['reference']} "
                             "contrast", verdict="not compared"))
            continue
        rows.append(dict(finding=f["finding"], here=original_here(f["claim"], c),
                         verdict=original_verdict(f["claim"], c)))
    return ["The original study's findings, point by point (a different corpus, model and length of training: "
            "where a finding holds, the direction agrees; the sizes are not comparable):", md_table(pd.DataFrame(rows))]


def reference_run(root: Path, attempts: list[dict]) -> list[str]:
    """Where the studies' run was made at another commit than `make laptop`'s, a line saying that the arms
    `make laptop` trains (a study's dense reference) may be that run's, with its commit; else nothing."""
    laptop = root / paths.timed_run(RECORD)
    if not laptop.exists():
        return []
    made = json.loads(laptop.read_text())["attempts"][-1]["commit"]
    if made == attempts[-1]["commit"]:
        return []
    return [f"The arms `make laptop` trains (a study's dense reference) are read from the results both runs share: "
            f"unless this run trained them again, they are that run's, made at commit `{made[:7]}`, beside arms "
            f"trained at `{attempts[-1]['commit'][:7]}` (a speed ratio then compares two runs)."]


def study_section(root: Path, out: Path, name: str, sw: dict) -> list[str]:
    """One study's section: its grid and seeds, its summary per arm with what the question weighs
    the loss against, its contrasts with their intervals and verdicts (and what *resolved* means with
    few seeds), its figure copied next to the page, and the original study's finding beside them."""
    tables = {}
    for t in ("summary", "contrasts"):
        p = root / paths.study_table(name, t)
        if not p.exists():
            raise PageError(f"no {p}: the run did not make study {name!r}'s tables")
        tables[t] = read_parquet(p)
    s, cs = tables["summary"], tables["contrasts"]
    kind = StudySettings.from_config(sw["sweeps"][name]["study"]).kind
    column, what = contrast_metric(kind)
    per_arm = pd.DataFrame({"shape": s["shape"], "seeds": s["seeds"],
                            "bits/char (mean ± std)": [f"{m:.4f} ± {d:.4f}" for m, d in
                                                       zip(s[column], s[column.replace("_mean", "_std")])],
                            **{c: s[c] for c in KINDS[kind].beside}})
    pct = f"{100 * cs['level'].iloc[0]:g} %"
    rows = pd.DataFrame({
        "contrast": cs["contrast"],
        "arm − reference": [f"{a} − {r}" for a, r in zip(cs["arm"], cs["reference"])],
        "pairing": ["paired by seed" if p else "unpaired" for p in cs["paired"]],
        "seeds": cs["seeds"], "difference (bits/char)": [f"{d:+.4f}" for d in cs["diff"]],
        f"{pct} interval": ["—" if pd.isna(lo) else f"{lo:+.4f} to {hi:+.4f}" for lo, hi in zip(cs["diff_lo"], cs["diff_hi"])],
        "verdict": cs["verdict"], "beside": [beside_text(c) for c in cs.to_dict("records")]})
    src = root / paths.sweep_figure(f"study_{name}", "png")
    if not src.exists():
        raise PageError(f"no {src}: the run did not make study {name!r}'s figure")
    folder = out.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, folder / src.name)
    caveats = list(dict.fromkeys(x for x in (range_caveat(c) for c in cs.to_dict("records")) if x))
    study = sw["sweeps"][name]
    c0 = cs.iloc[0]                 # the bootstrap the study's job used, as its contrasts record it
    best = study_best(root, name, kind, s, StudySettings.from_config(study["study"]), BootstrapSettings(
        resamples=c0["resamples"], seed=c0["resample_seed"], level=c0["level"]))
    return [f"### `{name}` ({kind} study)", "",
            f"Grid: {', '.join(s['shape'])}; seeds {', '.join(map(str, study['seeds']))}. Metric: {markdown(what)}. "
            f"From `{paths.study_table(name)}` and `{paths.study_table(name, 'contrasts')}`.",
            md_table(per_arm, ".4g", chars_per_s=",.0f", peak_memory_mb=",.0f", embedding_share=".3f",
                     chars_per_window=".1f"), md_table(rows),
            *[f"- {markdown(contrast_sentence(c))}." for c in cs.to_dict("records")],
            *([f"Read with care: {markdown('; '.join(caveats))}."] if caveats else []), *best,
            f"![study {name}]({folder.name}/{src.name})",
            *original_parts(name, cs)]


def study_best(root: Path, name: str, kind: str, summary: pd.DataFrame, study: StudySettings,
               boot: BootstrapSettings) -> list[str]:
    """A study read at each run's best (protocol §7, "Two readings"): each arm's rise from its best, and the
    same contrasts of the runs' best losses, from the study's finals table; a kind whose metric is scored
    at the end only (the whole validation split) says so."""
    if KINDS[kind].vocabularies:
        return [f"At each run's best: none — a {kind} study's metric, bits per character of the whole validation "
                "split, is scored at the end of training only (protocol §7, \"Two readings\")."]
    if "rise_mean" in summary and (summary["rise_mean"] == 0).all():       # every arm best at its last step
        steps = sorted(set(summary["best_step_min"]) | set(summary["best_step_max"]))
        return [f"At each run's best (protocol §7, \"Two readings\"): every arm's best validation loss is its last "
                f"(step {', '.join(map(str, steps))}): the best reading is the last one, its contrasts those above."]
    path = root / paths.study_table(name, "finals")
    finals = read_parquet(path) if path.exists() else None
    if finals is None or "best_val_loss" not in finals or "rise_mean" not in summary:
        return [f"At each run's best: not in this run's tables (`{paths.study_table(name, 'finals')}` "
                + ("absent" if finals is None else "written before the two readings") + "; `make laptop-more` "
                "writes them)."]
    rise = "; ".join(f"{r.shape} {r.rise_mean:+.4f} (best at step {r.best_step_min}"
                     + (f"–{r.best_step_max}" if r.best_step_max != r.best_step_min else "") + ")"
                     for r in summary.itertuples())
    at_best = study_contrasts(finals, summary, study, boot, "best")
    return [f"At each run's best (protocol §7, \"Two readings\"): each arm's rise from its best validation loss to "
            f"its last, nats per character, {markdown(rise)}; the same contrasts of the runs' best losses:",
            *[f"- {markdown(contrast_sentence(c))}." for c in at_best.to_dict("records")]]


def run_config(root: Path, attempts: list[dict]) -> dict:
    """The configuration of a timed run: config/config.yaml with the files its command gives with
    --configfile (the record vouches that they are this commit's); results/run_config.yaml when the
    command names none."""
    words, files = shlex.split(attempts[-1]["command"]), []
    for i, w in enumerate(words):
        if w == "--configfile":
            files += list(takewhile(lambda x: not x.startswith("-"), words[i + 1:]))
    if not files:
        return yaml.safe_load((root / paths.run_config()).read_text())
    return run_record.config_of(root, *files)


def precision_line(root: Path, finals: pd.DataFrame) -> str:
    """What the runs computed in, from their metrics notes: the precision asked for and computed in,
    any fallback, and whether the steps were compiled."""
    notes = [read_note(root / paths.sweep_run(r.trained_under, r.shape, r.seed, "metrics.parquet"))
             for r in finals.drop_duplicates(["trained_under", "shape", "seed"]).itertuples()]
    asked = sorted({n.get("precision_requested", n.get("precision")) for n in notes})
    done = pd.Series([n.get("precision") for n in notes]).value_counts()
    compiled = sum(bool(n.get("compiled")) for n in notes)
    fell = [n["precision_fallback"] for n in notes if n.get("precision_fallback")]
    return (f"Precision asked for: {', '.join(map(str, asked))}; computed in "
            + ", ".join(f"{k} ({v} runs)" for k, v in done.items())
            + (f" (fallback: {fell[0]})" if fell else "")
            + f"; training steps compiled (`sweep.compile`) in {compiled} of {len(notes)} runs (from the runs' "
            "metrics notes).")


def long_findings(root: Path, sweep: str, reference: str) -> pd.DataFrame:
    """The original run's findings at 16.4 M characters, point by point, against laptop-long's last
    evaluation (its course tables: the gaps to the reference arm, paired by seed, and their
    intervals) and the laptop run's end where its course was read."""
    v = read_parquet(root / paths.course_table(sweep, "verdicts")).set_index("arm")
    curves = read_parquet(root / paths.course_table(sweep, "curves"))
    last = curves[curves["step"] == curves["step"].max()]
    final = last.groupby("heads")["val_loss"].mean()
    o = ORIGINAL_LONG
    arm = {int(h): shape for h, shape in zip(last["heads"], last["shape"])}
    rows = []
    h1, h4, h32 = (arm.get(h) for h in (1, 4, o["worst_heads"]))
    pct = lambda r: f"{r['end_gap']:+.4f} ({r['end_lo']:+.4f} to {r['end_hi']:+.4f})"
    if reference == h1 and h4 in v.index:
        r = v.loc[h4]
        orig = o["loss"][4] - o["loss"][1]
        rows.append(dict(finding=f"4 heads beat 1 (h4 − h1 = {orig:+.4f})", here=f"h4 − h1 at step {r['end_step']}: "
                         f"{pct(r)}", verdict="holds" if r["end_hi"] < 0 else "does not hold" if r["end_lo"] > 0
                         else "not resolved"))
        band = abs(orig)
        rows.append(dict(finding=f"1 and 4 heads within {band:.4f} of each other", here=pct(r),
                         verdict="holds" if -band <= r["end_lo"] and r["end_hi"] <= band else
                         "does not hold" if r["end_lo"] > band or r["end_hi"] < -band else "not resolved"))
    if reference == h1 and h32 in v.index:
        r = v.loc[h32]
        orig = o["loss"][4] + o["worst_by"] - o["loss"][1]
        rows.append(dict(finding=f"32 heads behind 1 head by {orig:.4f} (worst, {o['worst_by']:.3f} behind the best)",
                         here=f"h32 − h1 at step {r['end_step']}: {pct(r)}; {orig:.4f} lies "
                              f"{where(orig, r['end_lo'], r['end_hi'])}",
                         verdict="holds" if r["end_lo"] <= orig <= r["end_hi"] else "does not hold"))
        worst = int(final.idxmax())
        rows.append(dict(finding=f"{o['worst_heads']} heads worst", here=f"worst mean at step {int(last['step'].iloc[0])}: "
                         f"{worst} head{'s' * (worst != 1)} ({final.max():.4f})",
                         verdict=("holds" if worst == o["worst_heads"] and r["end_lo"] > 0 else
                                  "does not hold" if worst != o["worst_heads"] else "not resolved")))
    best = int(final.idxmin())
    rows.append(dict(finding="4 heads best", here=f"best mean at the end: {best} head{'s' * (best != 1)} "
                     f"({final.min():.4f}; the arms: {', '.join(f'{h}: {x:.4f}' for h, x in final.items())})",
                     verdict="holds" if best == 4 and h4 in v.index and v.loc[h4, "end_hi"] < 0 else
                     "does not hold" if best != 4 else "not resolved"))
    return pd.DataFrame(rows)


def long_readings(root: Path, sw: dict, sweep: str, reference: str) -> list[str]:
    """laptop-long's runs read both ways (protocol §7, "Two readings"), from their metrics files: per shape each
    reading's loss, where the best fell, the rise from it against the seed noise (the sweep's own, its shapes
    being one width's splits) and its verdict, and each arm − the reference at each reading, paired by seed."""
    runs = [dict(r, metrics=root / paths.run_output(r, "metrics.parquet")) for r in plan.runs(sw) if r["sweep"] == sweep]
    finals = read_runs(runs)[0]
    boot = BootstrapSettings.from_config(sw["summary"]["bootstrap"])
    fit = overfitting(finals, sweep, boot).set_index("shape")
    read = {r: at_reading(finals, r).set_index(["shape", "seed"])["val_loss"] for r in READINGS}
    pct = f"{100 * boot.level:g} %"
    rows = []
    for shape, f in fit.iterrows():
        row = {"shape": shape, "last": f"{f['last_mean']:.4f}", "best": f"{f['best_mean']:.4f}",
               "best at step": f"{f['best_step_min']}" + (f"–{f['best_step_max']}" if f["best_step_max"] !=
                                                          f["best_step_min"] else ""),
               f"rise ({pct})": f"{f['rise_mean']:+.4f}" + ("" if pd.isna(f["rise_lo"]) else
                                                            f" ({f['rise_lo']:+.4f} to {f['rise_hi']:+.4f})"),
               "rise / seed noise": f"{f['rise_over_noise']:.2f}", "verdict": f["verdict"]}
        for r in READINGS:
            if shape == reference:
                row[f"− {reference}, {r}"] = "—"
                continue
            diff = (read[r].loc[shape].sort_index() - read[r].loc[reference].sort_index()).dropna()
            mean, lo, hi = mean_interval(diff.tolist(), boot)
            resolved = len(diff) >= MIN_SEEDS and (lo > 0 or hi < 0)
            row[f"− {reference}, {r}"] = (f"{mean:+.4f}" + ("" if len(diff) < MIN_SEEDS else f" ({lo:+.4f} to {hi:+.4f})")
                                          + (": resolved" if resolved else ": not resolved"))
        rows.append(row)
    return ["### Both readings: the last evaluation and each run's best", "",
            f"Each run of `{sweep}` read at its last evaluation and at its best (its lowest validation loss; protocol §7, "
            f"\"Two readings\"), from its metrics file; the rise from the best against the seed noise of the sweep "
            f"({float(fit['seed_noise'].iloc[0]):.4f}, its shapes' mean seed std at the last evaluation), and each arm "
            f"minus `{reference}` at each reading, paired by seed, with its {pct} interval.",
            md_table(pd.DataFrame(rows)), fit_summary(fit.reset_index())]


def section_span(lines: list[str], head: str) -> tuple[int, int] | None:
    """Where the page's section under the level-2 heading ``head`` lies in ``lines``: (its heading's
    index, the next level-2 heading's or the end), or None when the page has no such section."""
    heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
    start = next((i for i in heads if lines[i] == head), None)
    if start is None:
        return None
    return start, next((i for i in heads if i > start), len(lines))


def long_section(root: Path, commit: str, figures_out: Path) -> list[str]:
    """The page's section on `make laptop-long`. Without a laptop-long run under ``root``: the section
    the page at ``figures_out`` already has, as its own run wrote it (under its own commit and timed
    record, its figures already beside it), when it has one written from a run; else a paragraph
    saying it has not been made. So the whole page, written again after `make laptop` and `make
    laptop-more` in a fresh clone, keeps what an earlier `--only laptop-long` published."""
    record = root / paths.timed_run(LONG_RECORD)
    if not record.exists():
        lines = figures_out.read_text().split("\n") if figures_out.exists() else []
        span = section_span(lines, LONG_HEAD)
        kept = lines[span[0]:span[1]] if span else []
        if kept and not any(line.startswith(NOT_MADE) for line in kept):
            return ["\n".join(kept).strip("\n")]
        return [LONG_HEAD, "", f"{NOT_MADE}: no `{paths.timed_run(LONG_RECORD)}`. `{LONG_COMMAND}` runs it "
                "(protocol §7, laptop-long) and writes this section."]
    attempts = timing(root, LONG_RECORD, commit)
    cfg = run_config(root, attempts)
    sw = cfg["sweep"]
    sweeps = course_sweeps(sw)
    if not sweeps:
        raise PageError(f"{record}: its configuration reads the course of no sweep (sweep.course.sweeps)")
    sweep, reference = next(iter(sweeps.items()))
    train = TrainSettings.from_config(train_of(sw, sweep))
    chars = train.steps * train.batch * sw["model"]["context"]
    links = copy_course_figures(root, figures_out, sweep)
    finals = read_parquet(root / paths.course_table(sweep, "curves"))
    finals = finals[finals["step"] == finals["step"].max()].assign(trained_under=sweep)
    return [LONG_HEAD, "", page_header(commit, LONG_COMMAND), *machine_lines(attempts, LONG_RECORD),
            f"Sweep `{sweep}` ({', '.join(sorted({s for s in finals['shape']}, key=lambda x: int(x.split('-h')[1])))}; "
            f"seeds {', '.join(map(str, sw['sweeps'][sweep]['seeds']))}): {train.steps} steps of {train.batch} × "
            f"{sw['model']['context']} = {chars:,} characters per model ({chars / ORIGINAL_LONG['chars']:.2f} of the "
            f"original run's {ORIGINAL_LONG['chars'] / 1e6:.1f} M), warm-up {train.warmup}, cosine decay to "
            f"{train.min_lr:g} at the last step; evaluations every {train.eval_every} steps. "
            + precision_line(root, finals),
            "### The original run's findings, point by point", "",
            "At its last evaluation, against the original run at 16.4 M characters per model; *not resolved* where the "
            "interval (over seeds, paired) cannot tell. Nothing is extrapolated beyond the run.",
            md_table(long_findings(root, sweep, reference)),
            *long_readings(root, sw, sweep, reference),
            *course_section(root, sweep, links, level="###")]


def page(root: Path, out: Path, command: str = COMMAND) -> str:
    """The page's Markdown (figures copied next to ``out``); raises DirtyTreeError / RunRecordError / PageError."""
    commit = require_clean_tree(root)
    attempts = timing(root, RECORD, commit)
    cfg = run_config(root, attempts)
    scale = run_record.run_scale(cfg, root)[1]
    t = {}
    for n in ("summary", "contrast", "finals", "summary_best", "contrast_best", "overfitting"):
        if not (root / paths.sweep_table(n)).exists():
            raise PageError(f"no {root / paths.sweep_table(n)}: the run predates the two readings (protocol §7); "
                            f"`{COMMAND}` makes it")
        t[n] = read_parquet(root / paths.sweep_table(n))
    summary, c, finals = t["summary"], t["contrast"].iloc[0], t["finals"]
    summaries, contrasts = dict(last=summary, best=t["summary_best"]), dict(last=c, best=t["contrast_best"].iloc[0])
    boot = BootstrapSettings.from_config(cfg["sweep"]["summary"]["bootstrap"])
    sw = cfg["sweep"]
    train = TrainSettings.from_config(train_of(sw, c["split_sweep"]))
    figs = copy_figures(root, out)
    pct = f"{100 * c['level']:g} %"

    per_config = summary.merge(job_times(root, finals), on=["trained_under", "shape"], how="left")
    per_config["val_loss"] = [f"{m:.4f} ± {s:.4f}" for m, s in zip(per_config["val_loss_mean"],
                                                                   per_config["val_loss_std"])]
    per_config = per_config[["sweep", "shape", "width", "heads", "head_size", "params", "seeds", "steps",
                             "val_loss", "job_wall_s", "job_cpu_s"]].rename(
        columns={"val_loss": "validation loss (mean ± std)", "job_wall_s": "wall s per run",
                 "job_cpu_s": "CPU s per run"})
    contrast = pd.DataFrame([dict(quantity=q, estimate=c[k], **{f"{pct} low": c[f"{k}_lo"],
                                                               f"{pct} high": c[f"{k}_hi"]})
                             for q, k in (("spread (worst − best mean)", "spread"),
                                          (f"{c['worst_shape']} − {c['best_shape']}, paired by seed", "paired_diff"),
                                          ("spread / mean seed std", "spread_over_std"),
                                          (f"width gain {c['capacity_from']} → {c['capacity_to']}", "capacity_gain"),
                                          ("spread / width gain", "spread_over_gain"))])
    parts = [
        "# Laptop-scale results",
        f"Written by `benchmarks/laptop_tables.py` from the run's tables and records; every number below is "
        f"read from them, none is typed (but the original run's findings it is compared with). Regenerate it, "
        f"never edit it. Scale: {scale}.",
        page_header(commit, command),
        "## The run", "", *machine_lines(attempts, RECORD),
        f"Corpus, model and training (the run's configuration, `{paths.run_config()}`): {sw['model']['layers']} "
        f"layers, context {sw['model']['context']}; {train.steps} steps of {train.batch} windows "
        f"(validation every {train.eval_every} steps on {train.eval_batches} × {train.batch} windows); "
        f"seeds {', '.join(map(str, sw['sweeps'][c['split_sweep']]['seeds']))}. " + precision_line(root, finals),
        "## Validation loss per configuration", "",
        "Final validation loss in nats per character, mean ± std over seeds (ddof 1); a configuration both "
        "sweeps list with the same settings is trained once. Job times: Snakemake's benchmark records.",
        md_table(per_config, ".1f"),
        f"![training curves]({figs['training_curves']})",
        "## The contrast, with its intervals", "",
        f"{pct} percentile bootstrap intervals over seeds ({int(c['resamples']):,} resamples, seed "
        f"{int(c['resample_seed'])}); with {int(c['seeds'])} seeds they are crude and wide. The split's "
        f"test: {int(c['resamples']):,} relabellings of the configurations within each seed (protocol §7).",
        md_table(contrast, ".4f"),
        f"**{split_verdict(c)}.** **{width_verdict(c)}.**",
        f"![contrast]({figs['contrast']})", f"![loss vs heads]({figs['loss_vs_heads']})",
        f"![loss vs width]({figs['loss_vs_width']})",
        *readings_section(summaries, contrasts, t["overfitting"], figs["readings"], interval=train.eval_every),
        "## The original run's findings at this scale", "",
        "Point by point, at both readings; *not resolved* where this run's intervals (or the split's test) cannot "
        "tell; where this run's best or worst split is not the original's, the two are weighed against each other, "
        "paired by seed, and the finding does not hold only where that difference is resolved too.",
        md_table(pd.concat([findings(contrasts[r], summaries[r], at_reading(finals, r), boot).assign(reading=r)
                            for r in READINGS], ignore_index=True)[["reading", "finding", "here", "verdict"]]),
        *heads_section(root, {s: figs[s] for s in targets.SWEEP_HEADS_FIGURES.values()}, c["split_sweep"]),
        *course_parts(root, out, sw, c["split_sweep"]),
        *long_section(root, commit, out),
    ]
    more = root / paths.timed_run(MORE_RECORD)
    parts += studies_section(root, out, timing(root, MORE_RECORD, commit)) if more.exists() else kept_studies(out)
    return re.sub(r"\n{3,}", "\n\n", "\n\n".join(parts) + "\n")


def kept_studies(out: Path) -> list[str]:
    """Without a laptop-more run under ``root``: the studies' section the page at ``out`` has, word for word
    (its figures already beside it), under a line naming the commit whose run wrote it — so a page written
    again after `make laptop` alone keeps what `make laptop-more` published; nothing where it has none."""
    lines = out.read_text().split("\n") if out.exists() else []
    span = section_span(lines, STUDIES_HEAD)
    if span is None:
        return []
    kept = lines[span[0]:span[1]]
    if not any(line.startswith((STUDIES_KEPT, "From commit `")) for line in kept):     # else it names its own
        written = next((m.group(1) for line in lines if (m := re.match(r"From commit `(\w+)`", line))), None)
        if written is None:
            raise PageError(f"{out}: its studies' section names no commit (the page's head has no 'From commit')")
        kept[1:1] = ["", f"{STUDIES_KEPT} `{written}` from its own run, word for word: `make laptop-more` was not "
                         "run with this page's run (its command, time and machine follow)."]
    return ["\n".join(kept).strip("\n")]


def with_section(root: Path, out: Path, record: str) -> str:
    """The page at ``out`` with the section of the timed run ``record`` (laptop-long or laptop-more) written
    again from ``root``'s run, under its own commit (refused like the whole page: a tree with changes, a
    failed run, no run): the section from its heading to the next heading of its level is replaced;
    a page without it gets laptop-long's before the studies (or at the end) and the studies' at the end."""
    if not out.exists():
        raise PageError(f"no {out}: write the whole page first (`{COMMAND}`)")
    commit = require_clean_tree(root)
    make = {LONG_RECORD: "make laptop-long", MORE_RECORD: "make laptop-more"}[record]
    if not (root / paths.timed_run(record)).exists():
        raise PageError(f"no {root / paths.timed_run(record)}: `{make}` has not been run here")
    if record == LONG_RECORD:
        head, section = LONG_HEAD, long_section(root, commit, out)
    else:
        head, section = STUDIES_HEAD, studies_section(root, out, timing(root, MORE_RECORD, commit), commit)
    lines = out.read_text().split("\n")
    span = section_span(lines, head)
    if span is None:
        heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
        start = (next((i for i in heads if lines[i] == STUDIES_HEAD), len(lines)) if record == LONG_RECORD
                 else len(lines))
        end = start
    else:
        start, end = span
    text = "\n".join(lines[:start]).rstrip("\n") + "\n\n" + "\n\n".join(section) + "\n\n" + "\n".join(lines[end:])
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout the run was made in")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "laptop-scale.md")
    ap.add_argument("--only", choices=[LONG_RECORD, MORE_RECORD],
                    help="write this run's section alone into the page at --out")
    args = ap.parse_args(argv)
    try:
        text = (with_section(args.root.resolve(), args.out, args.only) if args.only
                else page(args.root.resolve(), args.out))
    except (DirtyTreeError, RunRecordError, PageError) as err:
        raise SystemExit(f"laptop_tables: refused: {err}") from err
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
