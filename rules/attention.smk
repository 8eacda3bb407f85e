# Stage "attention": every head's map on every phrase, and the model's
# next-token predictions (protocol §3).


def attention_targets():
    return expand_models(f"{RESULTS}/{{model}}/attention/{{name}}.parquet", name=["maps", "tokens"]) + \
        expand_models(f"{RESULTS}/{{model}}/predictions.parquet")


rule attention_maps:
    input:
        model=lambda w: prepared(w.model),
        phrases=lambda w: sequence_table(w.model, "phrases"),
    output:
        maps=f"{RESULTS}/{{model}}/attention/maps.parquet",
        tokens=f"{RESULTS}/{{model}}/attention/tokens.parquet",
        predictions=f"{RESULTS}/{{model}}/predictions.parquet",
    params:
        quantum=config["attention"]["quantum"],
        top=config["attention"]["top_predictions"],
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/attention_maps/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/attention_maps/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/attention_maps.py"
