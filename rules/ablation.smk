# Stage "ablation": cutting heads (protocol §5) — 5a targeted vs random, 5b the
# previous-token → induction circuit, 5c per-head attribution. Every cut goes
# through headwatch/model/interventions.py (headwatch/ablation/cut.py: zero or mean, by
# ablation.method); every experiment runs the guards (hook vs zeroed weights or
# mean-bias weights on the full logits, batched vs one-at-a-time, the model back
# intact) and fails if one fails. Its record goes to
# results/{model}/ablation/guards/{experiment}.json, merged into
# results/{model}/ablation/guards.json.


rule ablation_topk:
    input:
        model=paths.prepared("{model}"),
        eval=paths.sequence_table("{model}", "eval"),
        scores=paths.scores("{model}"),
    output:
        table=paths.ablation_table("{model}", "topk"),
        guards=paths.guard_record("{model}", "topk"),
    params:
        ablation=ablation_slice("top_n", "k", "random_draws", "seed", "guard_sequences"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("ablation_topk", "{model}"),
    benchmark:
        paths.benchmark("ablation_topk", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/ablation_topk.py"


rule ablation_circuit:
    input:
        model=paths.prepared("{model}"),
        circuit=paths.sequence_table("{model}", "circuit"),
        eval=paths.sequence_table("{model}", "eval"),     # ablation.method = mean: the means
        scores=paths.scores("{model}"),
    output:
        scores=paths.ablation_table("{model}", "circuit_scores"),
        loss=paths.ablation_table("{model}", "circuit_loss"),
        guards=paths.guard_record("{model}", "circuit"),
    params:
        ablation=ablation_slice("top_n", "random_draws", "seed", "circuit", "guard_sequences"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("ablation_circuit", "{model}"),
    benchmark:
        paths.benchmark("ablation_circuit", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/ablation_circuit.py"


rule ablation_attribution:
    input:
        model=paths.prepared("{model}"),
        phrases=paths.sequence_table("{model}", "phrases"),
        prose=paths.sequence_table("{model}", "prose"),   # the costliest head's cut scope
        eval=paths.sequence_table("{model}", "eval"),     # ablation.method = mean: the means
    output:
        attribution=paths.ablation_table("{model}", "attribution"),
        summary=paths.ablation_table("{model}", "attribution_summary"),
        pairs=paths.ablation_table("{model}", "pairs"),
        guards=paths.guard_record("{model}", "attribution"),
    params:
        ablation=ablation_slice("attribution"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("ablation_attribution", "{model}"),
    benchmark:
        paths.benchmark("ablation_attribution", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/ablation_attribution.py"


rule ablation_guards:
    input:
        **{experiment: paths.guard_record("{model}", experiment) for experiment in targets.ABLATION_EXPERIMENTS},
    output:
        paths.guards("{model}"),
    log:
        paths.log("ablation_guards", "{model}"),
    benchmark:
        paths.benchmark("ablation_guards", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/ablation_guards.py"
