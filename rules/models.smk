# Stage "models": each studied model is loaded once from its source (a GGUF in a
# wheel, a hub id from the local cache, or a folder) and saved as a float32
# safetensors folder; every later rule loads that folder in ~0.1 s.


rule models_prepare:
    output:
        paths.prepared("{model}"),
    params:
        source=lambda w: model_source(w.model),
    log:
        paths.log("models_prepare", "{model}"),
    benchmark:
        paths.benchmark("models_prepare", "{model}")
    conda:
        "../environment.yml"
    # Conversion runs on the CPU on purpose (dequantize + save); no gpu resource.
    script:
        "../scripts/models_prepare.py"
