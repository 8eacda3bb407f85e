# Figures of edge circuits (protocol §5g, §8): drawn from the edge tables, never from a model; PDF +
# PNG under figures/{model}/edges/ (headwatch/figures/edges.py). Included by rules/figures.smk.


rule figures_edges:
    input:
        faithfulness=paths.edges_table("{model}", "faithfulness"),
        areas=paths.edges_table("{model}", "areas"),
        circuit=paths.edges_table("{model}", "circuit"),
        scores=paths.edges_table("{model}", "scores"),
    output:
        **{f"{name}_{ext}": report(paths.edges_figure("{model}", name, ext), caption=f"../report/edges_{name}.rst",
                                   category="edges", subcategory="{model}")
           for name in targets.EDGES_FIGURES for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_edges", "{model}"),
    benchmark:
        paths.benchmark("figures_edges", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_edges.py"
