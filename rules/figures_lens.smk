# Figures of the lens stage (protocol §5h, §8): drawn from its tables and path patching's, never from a
# model; PDF + PNG under figures/{model}/lens/ (headwatch/figures/lens.py). Included by rules/figures.smk.


rule figures_lens:
    input:
        direct=paths.lens_table("{model}", "direct"),
        direct_heads=paths.lens_table("{model}", "direct_heads"),
        logit_lens=paths.lens_table("{model}", "logit_lens"),
        circuits=paths.lens_table("{model}", "circuits"),
        composition=paths.lens_table("{model}", "composition"),
        paths=paths.circuits_table("{model}", "paths"),
    output:
        **{f"{name}_{ext}": report(paths.lens_figure("{model}", name, ext), caption=f"../report/lens_{name}.rst",
                                   category="lens", subcategory="{model}")
           for name in paths.LENS_FIGURES for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_lens", "{model}"),
    benchmark:
        paths.benchmark("figures_lens", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_lens.py"
