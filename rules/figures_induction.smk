# Figures of the induction sweep (protocol §7c, §8): read its tables, never a model.
# Included by rules/figures.smk.


rule figures_induction:
    input:
        **{name: paths.induction_table(name) for name in paths.INDUCTION_TABLES},
    output:
        **{f"{key}_{ext}": report(paths.induction_figure(key, ext), caption=f"../report/induction_{key}.rst",
                                  category="induction", subcategory="which heads form, and when")
           for key in targets.INDUCTION_FIGURES for ext in paths.EXTENSIONS},
    params:
        threshold=config["induction"]["threshold"],
        margin=config["induction"]["margin"],
    log:
        paths.log("figures_induction"),
    benchmark:
        paths.benchmark("figures_induction")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_induction.py"
