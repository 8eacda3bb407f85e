# Figures of the ablation stage (protocol §5, §8): drawn from the ablation tables,
# never from a model; PDF + PNG under figures/{model}/ablation/. Included by
# rules/figures.smk.


rule figures_ablation_topk:
    input:
        table=paths.ablation_table("{model}", "topk"),
    output:
        **{ext: report(paths.ablation_figure("{model}", "topk", ext), caption="../report/ablation_topk.rst",
                       category="ablation", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_ablation_topk", "{model}"),
    benchmark:
        paths.benchmark("figures_ablation_topk", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_ablation_topk.py"


rule figures_ablation_circuit:
    input:
        table=paths.ablation_table("{model}", "circuit_scores"),
    output:
        **{ext: report(paths.ablation_figure("{model}", "circuit", ext), caption="../report/ablation_circuit.rst",
                       category="ablation", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_ablation_circuit", "{model}"),
    benchmark:
        paths.benchmark("figures_ablation_circuit", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_ablation_circuit.py"


rule figures_ablation_attribution:
    input:
        table=paths.ablation_table("{model}", "attribution"),
    output:
        **{ext: report(paths.ablation_figure("{model}", "attribution_{phrase}", ext),
                       caption="../report/ablation_attribution.rst", category="ablation", subcategory="{model}")
           for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_ablation_attribution", "{model}", "{phrase}"),
    benchmark:
        paths.benchmark("figures_ablation_attribution", "{model}", "{phrase}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_ablation_attribution.py"


rule figures_ablation_pairs:
    input:
        table=paths.ablation_table("{model}", "pairs"),
    output:
        **{ext: report(paths.ablation_figure("{model}", "pairs", ext), caption="../report/ablation_pairs.rst",
                       category="ablation", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_ablation_pairs", "{model}"),
    benchmark:
        paths.benchmark("figures_ablation_pairs", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_ablation_pairs.py"
