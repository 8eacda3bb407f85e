# Stage "figures": every figure is drawn from tables, never from a model; each
# is written as a PDF (papers) and a PNG (screens) in the one style of
# headwatch/figures/style.py.
SCORE_NAMES = ["sink", "prev", "self", "induction"]


def figures_heads_targets():
    out = []
    for model in studied_models():
        out += expand(f"{FIGURES}/{model}/grid_{{phrase}}.{{ext}}", phrase=list(config["phrases"]),
                      ext=["pdf", "png"])
        out += expand(f"{FIGURES}/{model}/head_{{score}}.{{ext}}", score=SCORE_NAMES, ext=["pdf", "png"])
        out += expand(f"{FIGURES}/{model}/{{name}}.{{ext}}", name=["scores_ranked", "sink_vs_induction"],
                      ext=["pdf", "png"])
    return out


# The figures of the other stages, one file per family of figures.
include: "figures_anatomy.smk"
include: "figures_ablation.smk"
include: "figures_sweep.smk"


def figures_targets():
    return (figures_heads_targets() + figures_anatomy_targets() + figures_ablation_targets()
            + figures_sweep_targets())


rule figures_grid:
    input:
        maps=f"{RESULTS}/{{model}}/attention/maps.parquet",
        tokens=f"{RESULTS}/{{model}}/attention/tokens.parquet",
    output:
        pdf=report(f"{FIGURES}/{{model}}/grid_{{phrase}}.pdf", caption="../report/figures_grid.rst",
                   category="heads", subcategory="{model}"),
        png=report(f"{FIGURES}/{{model}}/grid_{{phrase}}.png", caption="../report/figures_grid.rst",
                   category="heads", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_grid/{{model}}/{{phrase}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_grid/{{model}}/{{phrase}}.tsv"
    script:
        "../scripts/figures_heads.py"


rule figures_head:
    input:
        maps=f"{RESULTS}/{{model}}/attention/maps.parquet",
        tokens=f"{RESULTS}/{{model}}/attention/tokens.parquet",
        scores=f"{RESULTS}/{{model}}/scores.parquet",
    output:
        pdf=report(f"{FIGURES}/{{model}}/head_{{score}}.pdf", caption="../report/figures_head.rst",
                   category="heads", subcategory="{model}"),
        png=report(f"{FIGURES}/{{model}}/head_{{score}}.png", caption="../report/figures_head.rst",
                   category="heads", subcategory="{model}"),
    params:
        phrase="noise",  # the enlarged maps are drawn on the noise phrase (protocol §8)
    log:
        f"{RESULTS}/logs/figures_head/{{model}}/{{score}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_head/{{model}}/{{score}}.tsv"
    script:
        "../scripts/figures_heads.py"


rule figures_scores:
    input:
        scores=f"{RESULTS}/{{model}}/scores.parquet",
    output:
        ranked_pdf=report(f"{FIGURES}/{{model}}/scores_ranked.pdf", caption="../report/scores_ranked.rst",
                          category="heads", subcategory="{model}"),
        ranked_png=report(f"{FIGURES}/{{model}}/scores_ranked.png", caption="../report/scores_ranked.rst",
                          category="heads", subcategory="{model}"),
        scatter_pdf=report(f"{FIGURES}/{{model}}/sink_vs_induction.pdf", caption="../report/sink_vs_induction.rst",
                           category="heads", subcategory="{model}"),
        scatter_png=report(f"{FIGURES}/{{model}}/sink_vs_induction.png", caption="../report/sink_vs_induction.rst",
                           category="heads", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_scores/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_scores/{{model}}.tsv"
    script:
        "../scripts/figures_heads.py"
