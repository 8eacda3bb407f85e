# Stage "sweep" (protocol §7): corpus -> one training job per stack of runs -> each run's files -> summary.
#
# Sweeps are data (config `sweep.sweeps`); what is trained where is planned by
# headwatch/sweep/plan.py. A training job trains a stack: the runs of one sweep whose models have
# the same parameter shapes (every head count of one width, the seeds of a shape; at most
# `sweep.stack` of them), in one process and one optimizer step (headwatch/charlm/stack.py), each
# model as it would train alone; rule sweep_run then gives each run its own files (hard links).
# A configuration listed by several sweeps with the same seed and identical training settings is
# trained ONCE, under the first sweep that lists it (its owner); the summary reads it from the
# owner's folder. With different settings each sweep trains its own. A stack job's params are
# only its members' slices of config (each one's width/heads and options, seed, its sweep's
# training settings (headwatch/settings/sweep.py: train_of, the scale's sweep.train with its own
# `train:` over it), the shared `model`, precision; not the device, which says where, not what):
# editing one sweep reruns that sweep's stacks and the summary, nothing else; adding a seed or a
# shape reruns the stack it joins.
#
# Pairs: the summary contrasts a split sweep with a capacity sweep (sweep.summary: the default pair, its
# tables results/sweep/*.parquet), and so does each further pair of sweep.summary.pairs (the regularised arm:
# the same split and width control with dropout), with the same script, into results/sweep/pairs/{pair}/
# (rule sweep_pair). A sweep a further pair names joins that pair's tables only.
#
# Studies: a sweep with a `study` block (a kind of headwatch/settings/kinds.py) is summarized on
# its own (rule sweep_study) after checking its invariant, instead of joining
# summary.parquet, with its contrasts (each arm against its reference, fixed by the study
# block and the grid, with a bootstrap interval over seeds: sweep.summary.bootstrap, and a verdict). Sweeps in `sweep.skip` are not planned at all, nor the studies when
# `sweep.studies` is off (make quick and make laptop leave them out; make quick-more and make
# laptop-more run them).
#
# The course of training (sweep.course): for each sweep named there, where each run leaves the
# plateau and forms its previous-token head, and every arm's gap to the reference arm at every
# evaluation step with its verdict (rule sweep_course; tables only, no torch).
#
# Vocabularies: a grid entry's `vocab` (bpe<size>) makes its jobs read that vocabulary's
# ids, trained on the corpus's training split by one sweep_vocab job per vocabulary
# (its only param is the name: adding a size trains only that tokenizer).


rule sweep_corpus:
    input:
        sweep_corpus_inputs,
    output:
        **{part: paths.sweep_corpus(part) for part in paths.SWEEP_CORPUS_FILES},
    params:
        corpus=config["sweep"]["corpus"],
    log:
        paths.log("sweep_corpus"),
    benchmark:
        paths.benchmark("sweep_corpus")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_corpus.py"


rule sweep_vocab:
    input:
        **{part: paths.sweep_corpus(part) for part in paths.SWEEP_CORPUS_FILES},
    output:
        **{part: paths.sweep_vocab("{vocab}", part) for part in paths.VOCAB_FILES},
    wildcard_constraints:
        vocab=sweep_plan.VOCAB_PATTERN,
    params:
        vocab=lambda w: w.vocab,
    log:
        paths.log("sweep_vocab", "{vocab}"),
    benchmark:
        paths.benchmark("sweep_vocab", "{vocab}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_vocab.py"


rule sweep_train:
    input:
        unpack(sweep_train_inputs),
    output:
        directory(paths.sweep_stack("{sweep}", "{stack}")),
    wildcard_constraints:
        sweep="|".join(config["sweep"]["sweeps"]),
        stack=sweep_plan.STACK_PATTERN,
    params:
        job=sweep_stack_params,
    threads: config["sweep"]["threads"]
    priority: sweep_priority
    resources:
        gpu=GPU_TRAIN_JOB,
    log:
        paths.log("sweep_train", "{sweep}", "{stack}"),
    benchmark:
        paths.benchmark("sweep_train", "{sweep}", "{stack}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_train.py"


# Each run's own files, from the folder of the stack that trained it (hard links: no copy; touched, so
# that they are newer than the stack that made them).
rule sweep_run:
    input:
        stack=sweep_run_stack,
    output:
        metrics=paths.sweep_run("{sweep}", "{shape}", "{seed}", "metrics.parquet"),
        model=paths.sweep_run("{sweep}", "{shape}", "{seed}", "model.pt"),
        heads=paths.sweep_run("{sweep}", "{shape}", "{seed}", "heads.parquet"),
    wildcard_constraints:
        sweep="|".join(config["sweep"]["sweeps"]),
        shape=sweep_plan.SLUG_PATTERN,
        seed=r"\d+",
    localrule: True
    log:
        paths.log("sweep_run", "{sweep}", "{shape}", "seed{seed}"),
    benchmark:
        paths.benchmark("sweep_run", "{sweep}", "{shape}", "seed{seed}")
    conda:
        "../environment.yml"
    params:
        source=lambda w, input: f"{input.stack}/{w.shape}/seed{w.seed}",
    shell:
        "(for f in metrics.parquet model.pt heads.parquet; do d=$(dirname {output.metrics:q})/$f; "
        "ln -f {params.source:q}/$f $d || cp {params.source:q}/$f $d; touch $d; done) > {log:q} 2>&1"


rule sweep_heads_cut:
    input:
        model=paths.sweep_run("{sweep}", "{shape}", "{seed}", "model.pt"),
        metrics=paths.sweep_run("{sweep}", "{shape}", "{seed}", "metrics.parquet"),
        heads=paths.sweep_run("{sweep}", "{shape}", "{seed}", "heads.parquet"),
    output:
        cut=paths.sweep_heads_cut("{sweep}", "{shape}", "{seed}"),
    wildcard_constraints:
        sweep="|".join(config["sweep"]["sweeps"]),
        shape=sweep_plan.SLUG_PATTERN,
        seed=r"\d+",
    params:
        heads=sweep_heads_cut_params(),
        ablation=sweep_heads_ablation_params(),
    resources:
        gpu=GPU_JOB,
    log:
        paths.log("sweep_heads_cut", "{sweep}", "{shape}", "seed{seed}"),
    benchmark:
        paths.benchmark("sweep_heads_cut", "{sweep}", "{shape}", "seed{seed}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_heads_cut.py"


rule sweep_heads:
    input:
        unpack(sweep_heads_inputs),
    output:
        **{name: paths.sweep_heads_table(name) for name in paths.SWEEP_HEADS_TABLES},
    params:
        runs=sweep_summary_runs(),
        threshold=config["sweep"]["heads"]["threshold"],
    log:
        paths.log("sweep_heads"),
    benchmark:
        paths.benchmark("sweep_heads")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_heads.py"


rule sweep_summary:
    input:
        metrics=sweep_summary_inputs,
    output:
        **{name: paths.sweep_table(name) for name in targets.SWEEP_TABLES},
    params:
        runs=sweep_summary_runs(),
        summary=sweep_summary_params(),
    log:
        paths.log("sweep_summary"),
    benchmark:
        paths.benchmark("sweep_summary")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_summary.py"


# A further pair of sweep.summary.pairs (the regularised arm's): its own runs, its slice of sweep.summary,
# the same script and tables as the default pair's, under results/sweep/pairs/{pair}/.
rule sweep_pair:
    input:
        metrics=sweep_pair_inputs,
    output:
        **{name: paths.sweep_table(name, "{pair}") for name in targets.SWEEP_TABLES},
    wildcard_constraints:
        pair=sweep_pair_constraint(),
    params:
        runs=sweep_pair_runs,
        summary=sweep_pair_params,
    log:
        paths.log("sweep_pair", "{pair}"),
    benchmark:
        paths.benchmark("sweep_pair", "{pair}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_summary.py"


rule sweep_study:
    input:
        metrics=sweep_study_inputs,
        meta=paths.sweep_corpus("meta"),
    output:
        **{name: paths.study_table("{study}", name) for name in paths.STUDY_TABLES},
    wildcard_constraints:
        study=sweep_study_constraint(),
    params:
        runs=sweep_study_runs,
        study=sweep_study_block,
        bootstrap=config["sweep"]["summary"]["bootstrap"],
    log:
        paths.log("sweep_study", "{study}"),
    benchmark:
        paths.benchmark("sweep_study", "{study}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_study.py"


rule sweep_course:
    input:
        unpack(sweep_course_inputs),
    output:
        **{name: paths.course_table("{sweep}", name) for name in paths.COURSE_TABLES},
    wildcard_constraints:
        sweep=sweep_course_constraint(),
    params:
        runs=sweep_course_runs,
        course=sweep_course_params,
    log:
        paths.log("sweep_course", "{sweep}"),
    benchmark:
        paths.benchmark("sweep_course", "{sweep}")
    conda:
        "../environment.yml"
    script:
        "../scripts/sweep_course.py"
