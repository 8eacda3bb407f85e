# Stage "sweep" (protocol §7): corpus -> one training job per (sweep, config, seed) -> summary.
#
# Sweeps are data (config `sweep.sweeps`); every name below comes from the config.
# Sharing: a configuration listed by several sweeps with the same seed and
# identical `train` settings is trained ONCE, under the first sweep that lists it
# (its owner, headwatch.sweep.plan.owner); the summary reads it from the owner's folder.
# With different settings each sweep trains its own. Each training job's params
# are only its own slice of config (its width/heads, seed, its sweep's `train`,
# the shared `model`, precision, device): editing one sweep reruns that sweep's
# jobs and the summary, nothing else.
#
# Studies: a sweep with a `study` block (experts | depth | kv) is summarized
# on its own (results/sweep/studies/<sweep>.parquet, rule sweep_study) after checking
# its invariant, instead of joining summary.parquet. Sweeps in `sweep.skip` are not
# planned at all (make quick skips the studies; make quick-more runs them).
from headwatch.sweep import plan as sweep_plan

SWEEP = f"{RESULTS}/sweep"
SWEEP_CORPUS = dict(ids=f"{SWEEP}/corpus/ids.npy", meta=f"{SWEEP}/corpus/meta.json",
                    text=f"{SWEEP}/corpus/corpus.txt")
SWEEP_RUN = f"{SWEEP}/{{sweep}}/{{arch}}/seed{{seed}}"



def sweep_run_dir(run):
    """Folder of a run's outputs: under the sweep that trains it."""
    return SWEEP_RUN.format(sweep=run["trained_under"], arch=run["arch"], seed=run["seed"])


def sweep_summary_inputs(wildcards):
    """Every run's metrics, read from the sweep that trains it (w256-h4 of `width`
    comes from heads_split/ when both sweeps train it the same way)."""
    return [f"{sweep_run_dir(r)}/metrics.parquet" for r in sweep_plan.runs(config["sweep"], studies=False)]


def sweep_studies():
    return sweep_plan.studies(config["sweep"])


def sweep_study_inputs(wildcards):
    return [f"{sweep_run_dir(r)}/metrics.parquet" for r in sweep_plan.study_runs(config["sweep"], wildcards.study)]


def sweep_corpus_inputs(wildcards):
    return sweep_plan.corpus_inputs(config["sweep"])


rule sweep_corpus:
    input:
        sweep_corpus_inputs,
    output:
        **SWEEP_CORPUS,
    params:
        corpus=config["sweep"]["corpus"],
    log:
        f"{RESULTS}/logs/sweep_corpus.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep_corpus.tsv"
    script:
        "../scripts/sweep_corpus.py"


rule sweep_train:
    input:
        ids=SWEEP_CORPUS["ids"],
        meta=SWEEP_CORPUS["meta"],
    output:
        metrics=f"{SWEEP_RUN}/metrics.parquet",
        model=f"{SWEEP_RUN}/model.pt",
    wildcard_constraints:
        sweep="|".join(config["sweep"]["sweeps"]),
        arch=sweep_plan.SLUG_PATTERN,
        seed=r"\d+",
    params:
        # Raises for a run another sweep owns (it is read from there, never retrained).
        job=lambda w: sweep_plan.job_params(config["sweep"], w.sweep, w.arch, int(w.seed)),
    threads: config["sweep"].get("threads", 1)
    resources:
        gpu=1,
    log:
        f"{RESULTS}/logs/sweep_train/{{sweep}}/{{arch}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep_train/{{sweep}}/{{arch}}/seed{{seed}}.tsv"
    script:
        "../scripts/sweep_train.py"


rule sweep_summary:
    input:
        metrics=sweep_summary_inputs,
    output:
        summary=f"{SWEEP}/summary.parquet",
        contrast=f"{SWEEP}/contrast.parquet",
        finals=f"{SWEEP}/finals.parquet",
        curves=f"{SWEEP}/curves.parquet",
    params:
        runs=sweep_plan.runs(config["sweep"], studies=False),
        summary=config["sweep"]["summary"],
    log:
        f"{RESULTS}/logs/sweep_summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep_summary.tsv"
    script:
        "../scripts/sweep_summary.py"


rule sweep_study:
    input:
        metrics=sweep_study_inputs,
        meta=SWEEP_CORPUS["meta"],
    output:
        summary=f"{SWEEP}/studies/{{study}}.parquet",
        finals=f"{SWEEP}/studies/{{study}}_finals.parquet",
    wildcard_constraints:
        study="|".join(sweep_studies()) or "(?!)",
    params:
        runs=lambda w: sweep_plan.study_runs(config["sweep"], w.study),
        study=lambda w: config["sweep"]["sweeps"][w.study]["study"],
    log:
        f"{RESULTS}/logs/sweep_study/{{study}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep_study/{{study}}.tsv"
    script:
        "../scripts/sweep_study.py"


def sweep_train_targets():
    return [f"{sweep_run_dir(r)}/{f}" for r in sweep_plan.train_jobs(config["sweep"])
            for f in ("metrics.parquet", "model.pt")]


def sweep_targets():
    return sweep_train_targets() + [f"{SWEEP}/summary.parquet", f"{SWEEP}/contrast.parquet",
                                    f"{SWEEP}/finals.parquet", f"{SWEEP}/curves.parquet"] + [
        f"{SWEEP}/studies/{n}{suffix}.parquet" for n in sweep_studies() for suffix in ("", "_finals")]
