# Figures of activation patching (protocol §5d, §8): drawn from the patching tables (and
# the §4 scores), never from a model; PDF + PNG under figures/{model}/patching/. One rule
# draws the three (one job: they read the same small tables). Included by rules/figures.smk.


rule figures_patching:
    input:
        heads=paths.patching_table("{model}", "heads"),
        resid=paths.patching_table("{model}", "resid"),
        positions=paths.patching_table("{model}", "positions"),
        scores=paths.scores("{model}"),
    output:
        **{f"{name}_{ext}": report(paths.patching_figure("{model}", name, ext),
                                   caption=f"../report/patching_{name}.rst", category="patching",
                                   subcategory="{model}")
           for name in targets.PATCHING_FIGURES for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_patching", "{model}"),
    benchmark:
        paths.benchmark("figures_patching", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_patching.py"


# The key/value groups' map and every head at every position (through the key/value cache):
# one job, from their two small tables (headwatch/figures/patching_groups.py).
rule figures_patching_groups:
    input:
        kv_groups=paths.patching_table("{model}", "kv_groups"),
        positions_all=paths.patching_table("{model}", "positions_all"),
    output:
        **{f"{name}_{ext}": report(paths.patching_figure("{model}", name, ext),
                                   caption=f"../report/patching_{name}.rst", category="patching",
                                   subcategory="{model}")
           for name in targets.PATCHING_GROUP_FIGURES for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_patching_groups", "{model}"),
    benchmark:
        paths.benchmark("figures_patching_groups", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_patching_groups.py"
