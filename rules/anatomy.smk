# Stage "anatomy" (protocol §6): what a head is physically, from configs, tensor shapes
# and weights. Model-independent tables go to results/anatomy/, per-model records
# to results/{model}/anatomy/. Every number is exact; every guard stops the rule.
ANATOMY = f"{RESULTS}/anatomy"


def anatomy_targets():
    return [f"{ANATOMY}/{name}.parquet" for name in
            ("survey", "params_by_block", "rotary", "kv_cache", "attention_cells")] + \
        expand_models(f"{RESULTS}/{{model}}/anatomy/{{name}}",
                      name=["head_slices.json", "weight_check.json", "kv_groups.parquet",
                            "kv_similarity.parquet"])


def anatomy_reference(name):
    return f"config/models/{name}.json"


def anatomy_sweep_shapes():
    """The slice of the sweep config that fixes its model shapes (not its training)."""
    s = config.get("sweep", {})
    return dict(model=s.get("model", {}),
                sweeps={k: {"grid": v.get("grid", [])} for k, v in s.get("sweeps", {}).items()})


# Survey and parameter blocks read the same configs; two rules so that each table
# is its own target.
rule anatomy_survey:
    input:
        models=lambda w: [prepared(m) for m in studied_models()],
        references=lambda w: [anatomy_reference(n) for n in config["anatomy"]["references"]],
    output:
        f"{ANATOMY}/survey.parquet",
    params:
        models_studied=studied_models(),
        references=config["anatomy"]["references"],
        sweep=anatomy_sweep_shapes(),
        sweep_vocab=config["anatomy"]["sweep_vocab"],
    log:
        f"{RESULTS}/logs/anatomy_survey.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_survey.tsv"
    script:
        "../scripts/anatomy_configs.py"


rule anatomy_params:
    input:
        models=lambda w: [prepared(m) for m in studied_models()],
        references=lambda w: [anatomy_reference(n) for n in config["anatomy"]["references"]],
    output:
        f"{ANATOMY}/params_by_block.parquet",
    params:
        models_studied=studied_models(),
        references=config["anatomy"]["references"],
        sweep=anatomy_sweep_shapes(),
        sweep_vocab=config["anatomy"]["sweep_vocab"],
    log:
        f"{RESULTS}/logs/anatomy_params.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_params.tsv"
    script:
        "../scripts/anatomy_configs.py"


# Context arithmetic from the survey: one rule per table, so that changing the
# rotary distance reruns the rotary table only.
rule anatomy_rotary:
    input:
        survey=f"{ANATOMY}/survey.parquet",
    output:
        f"{ANATOMY}/rotary.parquet",
    params:
        distance=config["anatomy"]["rotary_distance"],
        swap_base=config["anatomy"]["swap_base"],
    log:
        f"{RESULTS}/logs/anatomy_rotary.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_rotary.tsv"
    script:
        "../scripts/anatomy_context.py"


rule anatomy_kv_cache:
    input:
        survey=f"{ANATOMY}/survey.parquet",
    output:
        f"{ANATOMY}/kv_cache.parquet",
    log:
        f"{RESULTS}/logs/anatomy_kv_cache.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_kv_cache.tsv"
    script:
        "../scripts/anatomy_context.py"


rule anatomy_cells:
    input:
        survey=f"{ANATOMY}/survey.parquet",
    output:
        f"{ANATOMY}/attention_cells.parquet",
    log:
        f"{RESULTS}/logs/anatomy_cells.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_cells.tsv"
    script:
        "../scripts/anatomy_context.py"


# Reads weights only (no forward beyond the loader's check pass): CPU, no gpu resource.
rule anatomy_head_slices:
    input:
        model=lambda w: prepared(w.model),
    output:
        f"{RESULTS}/{{model}}/anatomy/head_slices.json",
    params:
        head=config["anatomy"]["head"],
        dtype=lambda w: get_dtype(w.model),
    log:
        f"{RESULTS}/logs/anatomy_head_slices/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_head_slices/{{model}}.tsv"
    script:
        "../scripts/anatomy_head_slices.py"


rule anatomy_weight_check:
    input:
        model=lambda w: prepared(w.model),
        phrases=lambda w: sequence_table(w.model, "phrases"),
    output:
        f"{RESULTS}/{{model}}/anatomy/weight_check.json",
    params:
        head=config["anatomy"]["head"],
        phrase=config["anatomy"]["weight_check_phrase"],
        tolerance=config["anatomy"]["weight_check_tolerance"],
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/anatomy_weight_check/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_weight_check/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/anatomy_weight_check.py"


rule anatomy_kv_groups:
    input:
        model=lambda w: prepared(w.model),
        phrases=lambda w: sequence_table(w.model, "phrases"),
    output:
        groups=f"{RESULTS}/{{model}}/anatomy/kv_groups.parquet",
        similarity=f"{RESULTS}/{{model}}/anatomy/kv_similarity.parquet",
    params:
        phrase=config["anatomy"]["kv_phrase"],
        control=config["anatomy"]["kv_control"],
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/anatomy_kv_groups/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/anatomy_kv_groups/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/anatomy_kv_groups.py"
