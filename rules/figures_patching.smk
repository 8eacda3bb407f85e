# Figures of activation patching (protocol §5d, §8): drawn from the patching tables (and
# the §4 scores), never from a model; PDF + PNG under figures/{model}/patching/. Included
# by rules/figures.smk.


rule figures_patching_heads:
    input:
        heads=paths.patching_table("{model}", "heads"),
    output:
        **{ext: report(paths.patching_figure("{model}", "heads", ext), caption="../report/patching_heads.rst",
                       category="patching", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_patching_heads", "{model}"),
    benchmark:
        paths.benchmark("figures_patching_heads", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_figures.py"


rule figures_patching_resid:
    input:
        resid=paths.patching_table("{model}", "resid"),
        positions=paths.patching_table("{model}", "positions"),
    output:
        **{ext: report(paths.patching_figure("{model}", "resid", ext), caption="../report/patching_resid.rst",
                       category="patching", subcategory="{model}") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_patching_resid", "{model}"),
    benchmark:
        paths.benchmark("figures_patching_resid", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_figures.py"


rule figures_patching_top_heads:
    input:
        heads=paths.patching_table("{model}", "heads"),
        scores=paths.scores("{model}"),
    output:
        **{ext: report(paths.patching_figure("{model}", "top_heads", ext),
                       caption="../report/patching_top_heads.rst", category="patching", subcategory="{model}")
           for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_patching_top_heads", "{model}"),
    benchmark:
        paths.benchmark("figures_patching_top_heads", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/patching_figures.py"
