# Stage "ablation": cutting heads (protocol §5) — 5a targeted vs random, 5b the
# previous-token → induction circuit, 5c per-head attribution. Every rule runs
# the guards of headwatch/cut.py (hook vs zeroed weights on the full logits,
# batched vs one-at-a-time, the model back intact) and fails if one fails; its
# record goes to results/{model}/ablation/guards/{rule}.json, merged into
# results/{model}/ablation/guards.json.
ABLATION = f"{RESULTS}/{{model}}/ablation"
ABLATION_TABLES = ["topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary", "pairs"]
ABLATION_COMMON = ["batch", "tolerance", "hook_tolerance", "method"]


def ablation_targets():
    return (expand_models(f"{ABLATION}/{{name}}.parquet", name=ABLATION_TABLES)
            + expand_models(f"{ABLATION}/guards.json"))


def ablation_slice(*keys):
    """The part of config["ablation"] a rule depends on (its params: only stale jobs rerun)."""
    return {key: config["ablation"][key] for key in list(keys) + ABLATION_COMMON}


rule ablation_topk:
    input:
        model=lambda w: prepared(w.model),
        eval=lambda w: sequence_table(w.model, "eval"),
        scores=lambda w: scores_table(w.model),
    output:
        table=f"{ABLATION}/topk.parquet",
        guards=f"{ABLATION}/guards/topk.json",
    params:
        ablation=ablation_slice("top_n", "k", "random_draws", "seed", "guard_sequences"),
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/ablation_topk/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation_topk/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/ablation_topk.py"


rule ablation_circuit:
    input:
        model=lambda w: prepared(w.model),
        circuit=lambda w: sequence_table(w.model, "circuit"),
        eval=lambda w: sequence_table(w.model, "eval"),     # ablation.method = mean: the means
        scores=lambda w: scores_table(w.model),
    output:
        scores=f"{ABLATION}/circuit_scores.parquet",
        loss=f"{ABLATION}/circuit_loss.parquet",
        guards=f"{ABLATION}/guards/circuit.json",
    params:
        ablation=ablation_slice("top_n", "random_draws", "seed", "circuit", "guard_sequences"),
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/ablation_circuit/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation_circuit/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/ablation_circuit.py"


rule ablation_attribution:
    input:
        model=lambda w: prepared(w.model),
        phrases=lambda w: sequence_table(w.model, "phrases"),
        eval=lambda w: sequence_table(w.model, "eval"),     # ablation.method = mean: the means
    output:
        attribution=f"{ABLATION}/attribution.parquet",
        summary=f"{ABLATION}/attribution_summary.parquet",
        pairs=f"{ABLATION}/pairs.parquet",
        guards=f"{ABLATION}/guards/attribution.json",
    params:
        ablation=ablation_slice("attribution"),
        dtype=lambda w: get_dtype(w.model),
        device=config["device"],
    log:
        f"{RESULTS}/logs/ablation_attribution/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation_attribution/{{model}}.tsv"
    resources:
        gpu=1,
    script:
        "../scripts/ablation_attribution.py"


rule ablation_guards:
    input:
        topk=f"{ABLATION}/guards/topk.json",
        circuit=f"{ABLATION}/guards/circuit.json",
        attribution=f"{ABLATION}/guards/attribution.json",
    output:
        f"{ABLATION}/guards.json",
    log:
        f"{RESULTS}/logs/ablation_guards/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation_guards/{{model}}.tsv"
    script:
        "../scripts/ablation_guards.py"
