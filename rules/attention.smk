# Stage "attention": every head's map on every phrase, and the model's
# next-token predictions (protocol §3).


rule attention_maps:
    input:
        model=paths.prepared("{model}"),
        phrases=paths.sequence_table("{model}", "phrases"),
    output:
        maps=paths.attention_table("{model}", "maps"),
        tokens=paths.attention_table("{model}", "tokens"),
        predictions=paths.predictions("{model}"),
    params:
        quantum=config["attention"]["quantum"],
        top=config["attention"]["top_predictions"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("attention_maps", "{model}"),
    benchmark:
        paths.benchmark("attention_maps", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/attention_maps.py"
