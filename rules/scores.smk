# Stage "scores": sink, prev, self and induction for every head (protocol §4).


rule scores_heads:
    input:
        model=paths.prepared("{model}"),
        induction=paths.sequence_table("{model}", "induction"),
        prose=paths.sequence_table("{model}", "prose"),
    output:
        paths.scores("{model}"),
    params:
        batch=config["attention"]["batch"],
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("scores_heads", "{model}"),
    benchmark:
        paths.benchmark("scores_heads", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/scores_heads.py"
