# Stage "figures": every figure is drawn from tables, never from a model; each
# is written as a PDF (papers) and a PNG (screens) in the one style of
# headwatch/figures/style.py. The figures of the other stages are in the files
# included at the end, one per family of figures.


rule figures_grid:
    input:
        maps=paths.attention_table("{model}", "maps"),
        tokens=paths.attention_table("{model}", "tokens"),
    output:
        **{ext: report(paths.head_figure("{model}", "grid_{phrase}", ext), caption="../report/figures_grid.rst",
                       category="heads", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_grid", "{model}", "{phrase}"),
    benchmark:
        paths.benchmark("figures_grid", "{model}", "{phrase}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_grid.py"


rule figures_head:
    input:
        maps=paths.attention_table("{model}", "maps"),
        tokens=paths.attention_table("{model}", "tokens"),
        scores=paths.scores("{model}"),
    output:
        **{ext: report(paths.head_figure("{model}", "head_{score}", ext), caption="../report/figures_head.rst",
                       category="heads", subcategory="{model}") for ext in paths.EXTENSIONS},
    params:
        phrase="noise",  # the enlarged maps are drawn on the noise phrase (protocol §8)
    log:
        paths.log("figures_head", "{model}", "{score}"),
    benchmark:
        paths.benchmark("figures_head", "{model}", "{score}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_head.py"


rule figures_scores:
    input:
        scores=paths.scores("{model}"),
    output:
        **{f"ranked_{ext}": report(paths.head_figure("{model}", "scores_ranked", ext),
                                   caption="../report/scores_ranked.rst", category="heads", subcategory="{model}")
           for ext in paths.EXTENSIONS},
        **{f"scatter_{ext}": report(paths.head_figure("{model}", "sink_vs_induction", ext),
                                    caption="../report/sink_vs_induction.rst", category="heads",
                                    subcategory="{model}")
           for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_scores", "{model}"),
    benchmark:
        paths.benchmark("figures_scores", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_scores.py"


include: "figures_anatomy.smk"
include: "figures_ablation.smk"
include: "figures_patching.smk"
include: "figures_edges.smk"
include: "figures_lens.smk"
include: "figures_sweep.smk"
include: "figures_induction.smk"
