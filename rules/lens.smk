# Stage "lens" (protocol §5h): what a head writes, reads and feeds, without patching
# (headwatch/lens/). Direct effects of every component on activation patching's prompts and logit
# difference, the final norm's scale frozen, beside the head sweep's total effect, and the logit
# lens (one model job, its guards: the terms sum to the logit difference, the lens's last depth is the
# output); the weights' circuits (OV copying, QK same-token, every pair's composition scores, their
# nulls: a model job on the weights alone); those against path patching's paths and the induction
# score, a verdict per model (tables only); the known circuit (§5f) ranked by the weights.


rule lens_direct:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
        heads=paths.patching_table("{model}", "heads"),     # each head's total effect, on the same prompts
    output:
        direct=paths.lens_table("{model}", "direct"),
        direct_heads=paths.lens_table("{model}", "direct_heads"),
        logit_lens=paths.lens_table("{model}", "logit_lens"),
        guards=paths.lens_guards("{model}"),
    params:
        lens=lens_slice("batch", "rounding_factor", "confidence"),
        top_k=config["patching"]["top_k"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("lens_direct", "{model}"),
    benchmark:
        paths.benchmark("lens_direct", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/lens_direct.py"


rule lens_weights:
    input:
        model=paths.prepared("{model}"),
    output:
        circuits=paths.lens_table("{model}", "circuits"),
        composition=paths.lens_table("{model}", "composition"),
        null=paths.lens_table("{model}", "null"),
    params:
        lens=lens_slice("qk_offset", "null_draws", "seed"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("lens_weights", "{model}"),
    benchmark:
        paths.benchmark("lens_weights", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/lens_weights.py"


rule lens_verdict:
    input:
        circuits=paths.lens_table("{model}", "circuits"),
        composition=paths.lens_table("{model}", "composition"),
        paths=paths.circuits_table("{model}", "paths"),
        scores=paths.scores("{model}"),
    output:
        verdict=paths.lens_table("{model}", "verdict"),
        top_paths=paths.lens_table("{model}", "top_paths"),
    params:
        lens=lens_slice("bootstrap", "confidence", "null_draws", "seed"),
    log:
        paths.log("lens_verdict", "{model}"),
    benchmark:
        paths.benchmark("lens_verdict", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/lens_verdict.py"


# The known circuit's two small models, read on the CPU whatever `device` says (as circuits_known).
rule lens_known:
    input:
        table=paths.known_circuit_table(),
        **{name: paths.known_model(name) for name in paths.KNOWN_MODELS},
    output:
        table=paths.known_weights_table(),
    params:
        lens=lens_slice("qk_offset", "null_draws", "seed"),
    log:
        paths.log("lens_known"),
    benchmark:
        paths.benchmark("lens_known")
    threads: 1
    conda:
        "../environment.yml"
    script:
        "../scripts/lens_known.py"
