# Stage "ablation": cutting heads (protocol §5) — 5a targeted vs random, 5b the
# previous-token → induction circuit, 5c per-head attribution. Every rule runs
# the guards of headwatch/cut.py (hook vs zeroed weights on the full logits,
# batched vs one-at-a-time, the model back intact) and fails if one fails; its
# record goes to results/{model}/ablation/checks/{rule}.json, merged into
# results/{model}/ablation/checks.json.
ABLATION = f"{RESULTS}/{{model}}/ablation"
ABLATION_TABLES = ["topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary", "pairs"]
ABLATION_COMMON = ["batch", "tolerance", "hook_tolerance", "method"]


def ablation_targets():
    return (expand_models(f"{ABLATION}/{{name}}.parquet", name=ABLATION_TABLES)
            + expand_models(f"{ABLATION}/checks.json"))


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
        checks=f"{ABLATION}/checks/topk.json",
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
        checks=f"{ABLATION}/checks/circuit.json",
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
        checks=f"{ABLATION}/checks/attribution.json",
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


rule ablation_checks:
    input:
        topk=f"{ABLATION}/checks/topk.json",
        circuit=f"{ABLATION}/checks/circuit.json",
        attribution=f"{ABLATION}/checks/attribution.json",
    output:
        f"{ABLATION}/checks.json",
    log:
        f"{RESULTS}/logs/ablation_checks/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation_checks/{{model}}.tsv"
    script:
        "../scripts/ablation_checks.py"
