# Stage "scores": sink, prev, self and induction for every head (protocol §4).


def scores_targets():
    return expand_models(f"{RESULTS}/{{model}}/scores.parquet")


def scores_table(model):
    return f"{RESULTS}/{model}/scores.parquet"


rule scores_heads:
    input:
        model=lambda w: prepared(w.model),
        induction=lambda w: sequence_table(w.model, "induction"),
        prose=lambda w: sequence_table(w.model, "prose"),
    output:
        f"{RESULTS}/{{model}}/scores.parquet",
    params:
        batch=config["attention"]["batch"],
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/scores_heads/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/scores_heads/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/scores_heads.py"
