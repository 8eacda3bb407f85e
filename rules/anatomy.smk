# Stage "anatomy" (protocol §6): what a head is physically, from configs, tensor shapes
# and weights. Model-independent tables go to results/anatomy/, per-model records
# to results/{model}/anatomy/. Every number is exact; every guard stops the rule.


# Survey and parameter blocks read the same configs; two rules so that each table
# is its own target.
rule anatomy_survey:
    input:
        models=[paths.prepared(m) for m in studied_models()],
        references=reference_configs(config["anatomy"]["references"]),
    output:
        paths.anatomy_table("survey"),
    params:
        models_studied=studied_models(),
        references=config["anatomy"]["references"],
        sweep=anatomy_sweep_shapes(),
        sweep_vocab=config["anatomy"]["sweep_vocab"],
    log:
        paths.log("anatomy_survey"),
    benchmark:
        paths.benchmark("anatomy_survey")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_survey.py"


rule anatomy_params:
    input:
        models=[paths.prepared(m) for m in studied_models()],
        references=reference_configs(config["anatomy"]["references"]),
    output:
        paths.anatomy_table("params_by_block"),
    params:
        models_studied=studied_models(),
        references=config["anatomy"]["references"],
        sweep=anatomy_sweep_shapes(),
        sweep_vocab=config["anatomy"]["sweep_vocab"],
    log:
        paths.log("anatomy_params"),
    benchmark:
        paths.benchmark("anatomy_params")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_params.py"


# Context arithmetic from the survey: one rule per table, so that changing the
# rotary distance reruns the rotary table only.
rule anatomy_rotary:
    input:
        survey=paths.anatomy_table("survey"),
    output:
        paths.anatomy_table("rotary"),
    params:
        distance=config["anatomy"]["rotary_distance"],
        swap_base=config["anatomy"]["swap_base"],
    log:
        paths.log("anatomy_rotary"),
    benchmark:
        paths.benchmark("anatomy_rotary")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_rotary.py"


rule anatomy_kv_cache:
    input:
        survey=paths.anatomy_table("survey"),
    output:
        paths.anatomy_table("kv_cache"),
    log:
        paths.log("anatomy_kv_cache"),
    benchmark:
        paths.benchmark("anatomy_kv_cache")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_kv_cache.py"


rule anatomy_cells:
    input:
        survey=paths.anatomy_table("survey"),
    output:
        paths.anatomy_table("attention_cells"),
    log:
        paths.log("anatomy_cells"),
    benchmark:
        paths.benchmark("anatomy_cells")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_cells.py"


# Reads weights only (no forward beyond the loader's check pass): CPU, no gpu resource.
rule anatomy_head_slices:
    input:
        model=paths.prepared("{model}"),
    output:
        paths.model_anatomy("{model}", "head_slices.json"),
    params:
        head=config["anatomy"]["head"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("anatomy_head_slices", "{model}"),
    benchmark:
        paths.benchmark("anatomy_head_slices", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_head_slices.py"


rule anatomy_weight_check:
    input:
        model=paths.prepared("{model}"),
        phrases=paths.sequence_table("{model}", "phrases"),
    output:
        paths.model_anatomy("{model}", "weight_check.json"),
    params:
        head=config["anatomy"]["head"],
        phrase=config["anatomy"]["weight_check_phrase"],
        rounding_factor=config["anatomy"]["weight_check_rounding_factor"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("anatomy_weight_check", "{model}"),
    benchmark:
        paths.benchmark("anatomy_weight_check", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_weight_check.py"


rule anatomy_kv_groups:
    input:
        model=paths.prepared("{model}"),
        phrases=paths.sequence_table("{model}", "phrases"),
    output:
        groups=paths.model_anatomy("{model}", "kv_groups.parquet"),
        similarity=paths.model_anatomy("{model}", "kv_similarity.parquet"),
    params:
        phrase=config["anatomy"]["kv_phrase"],
        control=config["anatomy"]["kv_control"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("anatomy_kv_groups", "{model}"),
    benchmark:
        paths.benchmark("anatomy_kv_groups", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/anatomy_kv_groups.py"
