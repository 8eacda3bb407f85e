# Stage "edges" (protocol §5g): edge circuits on activation patching's prompts and metric. Every edge
# of the model's graph scored by EAP and EAP-IG (one model job), then circuits of the MIB benchmark's
# sizes run with every edge outside them patched (the expensive job, guarded as §5d's patching), the
# best small circuit with the roles §5d-§5e give its heads and the head -> head edges against path
# patching (tables only), and the circuit known before looking (§5f) read edge by edge
# (headwatch/circuits/graph.py, edges.py, faithfulness.py).


rule edges_scores:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
    output:
        scores=paths.edges_table("{model}", "scores"),
        nodes=paths.edges_table("{model}", "nodes"),
    params:
        edges=edges_slice("methods", "ig_steps", "prompts", "score_batch"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("edges_scores", "{model}"),
    benchmark:
        paths.benchmark("edges_scores", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/edges_scores.py"


rule edges_faithfulness:
    input:
        model=paths.prepared("{model}"),
        prompts=paths.patching_table("{model}", "prompts"),
        scores=paths.edges_table("{model}", "scores"),
        nodes=paths.edges_table("{model}", "nodes"),
    output:
        faithfulness=paths.edges_table("{model}", "faithfulness"),
        areas=paths.edges_table("{model}", "areas"),
        guards=paths.edges_guards("{model}"),
    params:
        edges=edges_slice("methods", "prompts", "fractions", "random_draws", "seed", "batch", "rounding_factor",
                          "guard_senders"),
        dtype=lambda w: get_dtype(w.model),
    log:
        paths.log("edges_faithfulness", "{model}"),
    benchmark:
        paths.benchmark("edges_faithfulness", "{model}")
    resources:
        gpu=GPU_JOB,
    conda:
        "../environment.yml"
    script:
        "../scripts/edges_faithfulness.py"


rule edges_circuit:
    input:
        scores=paths.edges_table("{model}", "scores"),
        faithfulness=paths.edges_table("{model}", "faithfulness"),
        heads=paths.patching_table("{model}", "heads"),
        paths=paths.circuits_table("{model}", "paths"),
    output:
        circuit=paths.edges_table("{model}", "circuit"),
        agreement=paths.edges_table("{model}", "agreement"),
    params:
        edges=edges_slice("methods", "fractions", "faithful", "agreement_top_k"),
        top_k=config["patching"]["top_k"],
        edge_threshold=config["circuits"]["edge_threshold"],
    log:
        paths.log("edges_circuit", "{model}"),
    benchmark:
        paths.benchmark("edges_circuit", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/edges_circuit.py"


# The known circuit's two small models, read on the CPU whatever `device` says (as circuits_known).
rule edges_known:
    input:
        table=paths.known_circuit_table(),
        **{name: paths.known_model(name) for name in paths.KNOWN_MODELS},
    output:
        **{name: paths.known_edges_table(name) for name in paths.KNOWN_EDGES_TABLES},
    params:
        known=config["circuits"]["known"],
        edges=edges_slice("methods", "ig_steps", "faithful", "batch", "score_batch"),
    log:
        paths.log("edges_known"),
    benchmark:
        paths.benchmark("edges_known")
    threads: 1
    conda:
        "../environment.yml"
    script:
        "../scripts/edges_known.py"
