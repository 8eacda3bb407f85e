# Stage "induction" (protocol §7c): which heads form, when, and how the number and the size of heads
# change it, on tasks where predicting from the context is the only way down. One training job per
# task and cell of the grid (every seed in one stack, each run stopping on its events or at the cap),
# its params exactly its slice of `induction:` (headwatch/settings/induction.py: job_params); then
# one summary that reads every run: events, Kaplan-Meier curves, the regression and the controls.


rule induction_train:
    output:
        **{name: paths.induction_run("{task}", "{shape}", name) for name in paths.INDUCTION_RUN_FILES},
    wildcard_constraints:
        task="|".join(INDUCTION_TASKS),
        shape=r"w\d+-h\d+",
    params:
        job=induction_job_params,
    threads: 1
    resources:
        gpu=GPU_TRAIN_JOB,
    priority: induction_priority
    log:
        paths.log("induction_train", "{task}", "{shape}"),
    benchmark:
        paths.benchmark("induction_train", "{task}", "{shape}")
    conda:
        "../environment.yml"
    script:
        "../scripts/induction_train.py"


rule induction_summary:
    input:
        unpack(induction_summary_inputs),
    output:
        **{name: paths.induction_table(name) for name in paths.INDUCTION_TABLES},
    params:
        induction=induction_summary_params(),
        plateau_margin=config["sweep"]["course"]["margin"],
        bootstrap=config["sweep"]["summary"]["bootstrap"],
    log:
        paths.log("induction_summary"),
    benchmark:
        paths.benchmark("induction_summary")
    conda:
        "../environment.yml"
    script:
        "../scripts/induction_summary.py"
