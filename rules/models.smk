# Stage "models": each studied model is loaded once from its source (a GGUF in a
# wheel, a hub id from the local cache, or a folder) and saved as a float32
# safetensors folder; every later rule loads that folder in ~0.1 s.


rule models_prepare:
    output:
        f"{RESULTS}/models/{{model}}/prepared.json",
    params:
        source=lambda w: {k: v for k, v in get_model_cfg(w.model).items() if k in ("gguf", "source")},
    log:
        f"{RESULTS}/logs/models_prepare/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/models_prepare/{{model}}.tsv"
    # Conversion runs on the CPU on purpose (dequantize + save); no gpu resource.
    script:
        "../scripts/models_prepare.py"
