# Stage "circuits" (protocol §5e, §5f): path patching between heads on activation patching's
# prompts and metric (headwatch/circuits/path_patching.py): every head of an earlier layer into each receiver
# (the head sweep's top heads, or heads named in the config) through its q, k and v, two forward
# passes per batch of senders; the guards of headwatch/guards.py stop the rule on a failure (no
# table is written). And the circuit known before looking: a two-layer character model trained
# on repeated random tokens, and its control, read by each method (a table of what each recovered).


rule circuits_paths:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
        heads=paths.patching_table("{model}", "heads"),    # the receivers: the head sweep's top k
    output:
        paths=paths.circuits_table("{model}", "paths"),
        guards=paths.circuits_guards("{model}"),
    params:
        patching={key: config["patching"][key] for key in ("batch", "rounding_factor", "guard_prompts")},
        circuits={key: config["circuits"][key] for key in ("receivers_top_k", "receivers", "senders", "sender_layers",
                                                           "inputs",
                                                           "edge_threshold", "guard_senders")},
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("circuits_paths", "{model}"),
    benchmark:
        paths.benchmark("circuits_paths", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/circuits_paths.py"


# Trains and reads two models of 2 layers × width 32 on the CPU, whatever `device` says (a GPU
# would wait on launches for models this small): no gpu resource, one thread.
rule circuits_known:
    output:
        table=paths.known_circuit_table(),
        **{name: paths.known_model(name) for name in paths.KNOWN_MODELS},
    params:
        known=config["circuits"]["known"],
        patching={key: config["patching"][key] for key in ("batch",)},
    log:
        paths.log("circuits_known"),
    benchmark:
        paths.benchmark("circuits_known")
    threads: 1
    conda:
        "../environment.yml"
    script:
        "../scripts/circuits_known.py"


rule figures_circuits:
    input:
        paths=paths.circuits_table("{model}", "paths"),
    output:
        **{f"paths_{ext}": report(paths.circuits_figure("{model}", "paths", ext), caption="../report/circuits_paths.rst",
                                  category="circuits", subcategory="{model}")
           for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_circuits", "{model}"),
    benchmark:
        paths.benchmark("figures_circuits", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_circuits.py"
