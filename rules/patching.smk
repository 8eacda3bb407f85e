# Stage "patching" (protocol §5d): activation patching on the two-names task. The prompt
# set (clean ABBA / BABA prompts and their corrupted ABC twins, names that are one token)
# is data; the sweep puts the clean run's activations into the corrupted run, many patches
# per forward pass through headwatch/model/interventions.py (headwatch/patching/heads.py), estimates the
# head scores by attribution patching, and runs the guards of headwatch/guards.py (a failed
# guard stops the rule: no table is written). Figures: rules/figures_patching.smk.
# With patching.pairs, the prompts are a researcher's pairs file instead (headwatch/patching/pairs.py).

from headwatch.settings.patching import prompt_keys


rule patching_prompts:
    input:
        model=paths.prepared("{model}"),      # its tokenizer
        pairs=[config["patching"]["pairs"]] if config["patching"].get("pairs") else [],   # its content reruns the rule
    output:
        paths.patching_table("{model}", "prompts"),
    params:
        # n, seed, templates, names; or pairs, pairs_outside_project (headwatch/settings/patching.py)
        patching={key: config["patching"][key] for key in prompt_keys(config["patching"])},
    log:
        paths.log("patching_prompts", "{model}"),
    benchmark:
        paths.benchmark("patching_prompts", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_prompts.py"


rule patching_sweep:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
        phrases=paths.sequence_table("{model}", "phrases"),   # patching.phrase: p(IO), p(S) reported
    output:
        heads=paths.patching_table("{model}", "heads"),
        resid=paths.patching_table("{model}", "resid"),
        positions=paths.patching_table("{model}", "positions"),
        guards=paths.patching_guards("{model}"),
    params:
        patching={key: config["patching"][key] for key in ("phrase", "top_k", "batch", "rounding_factor",
                                                           "guard_prompts")},
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("patching_sweep", "{model}"),
    benchmark:
        paths.benchmark("patching_sweep", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_sweep.py"


# Key/value groups (headwatch/patching/kv.py): each layer's key group and value group patched
# clean -> corrupted at every position, with its own guards (the ungrouped twin, q/k/v vs z).
rule patching_kv:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
    output:
        table=paths.patching_table("{model}", "kv_groups"),
        guards=paths.patching_guards("{model}", "kv_groups_guards"),
    params:
        patching={key: config["patching"][key] for key in ("batch", "rounding_factor", "guard_prompts", "kv_prompts")},
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("patching_kv", "{model}"),
    benchmark:
        paths.benchmark("patching_kv", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_kv.py"


# Every head at every position through the corrupted run's key/value cache
# (headwatch/patching/positions.py): the top patching.positions_all_heads heads of the head sweep
# (null = every head), each patched at one position at a time.
rule patching_positions_all:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
        heads=paths.patching_table("{model}", "heads"),
    output:
        table=paths.patching_table("{model}", "positions_all"),
        guards=paths.patching_guards("{model}", "positions_all_guards"),
    params:
        patching={key: config["patching"][key] for key in ("batch", "rounding_factor", "guard_prompts",
                                                           "positions_all_heads")},
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("patching_positions_all", "{model}"),
    benchmark:
        paths.benchmark("patching_positions_all", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_positions_all.py"
