# Figures of the training sweep (protocol §7, §8): read the summary tables, never a model.
# Included by rules/figures.smk.


rule figures_sweep:
    input:
        **{name: paths.sweep_table(name) for name in targets.SWEEP_TABLES},
    output:
        **{f"{key}_{ext}": report(paths.sweep_figure(stem, ext), caption=f"../report/sweep_{stem}.rst",
                                  category="sweep", subcategory="heads split and width")
           for key, stem in targets.SWEEP_FIGURES.items() for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_sweep"),
    benchmark:
        paths.benchmark("figures_sweep")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_sweep.py"


# A further pair of sweep.summary.pairs (the regularised arm): the same figures from its own tables.
rule figures_sweep_pair:
    input:
        **{name: paths.sweep_table(name, "{pair}") for name in targets.SWEEP_TABLES},
    output:
        **{f"{key}_{ext}": report(paths.sweep_figure(stem, ext, "{pair}"), caption=f"../report/sweep_{stem}.rst",
                                  category="sweep", subcategory="pair {pair}")
           for key, stem in targets.SWEEP_FIGURES.items() for ext in paths.EXTENSIONS},
    wildcard_constraints:
        pair=sweep_pair_constraint(),
    log:
        paths.log("figures_sweep_pair", "{pair}"),
    benchmark:
        paths.benchmark("figures_sweep_pair", "{pair}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_sweep.py"


rule figures_sweep_study:
    input:
        **{name: paths.study_table("{study}", name) for name in paths.STUDY_TABLES},
    output:
        **{ext: report(paths.sweep_figure("study_{study}", ext), caption="../report/sweep_study.rst",
                       category="sweep", subcategory="study {study}") for ext in paths.EXTENSIONS},
    wildcard_constraints:
        study=sweep_study_constraint(),
    params:
        kind=lambda w: sweep_study_block(w)["kind"],
        own=sweep_study_own,
    log:
        paths.log("figures_sweep_study", "{study}"),
    benchmark:
        paths.benchmark("figures_sweep_study", "{study}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_sweep_study.py"


rule figures_sweep_heads:
    input:
        **{name: paths.sweep_heads_table(name) for name in paths.SWEEP_HEADS_TABLES},
    output:
        **{f"{key}_{ext}": report(paths.sweep_figure(stem, ext), caption=f"../report/sweep_{stem}.rst",
                                  category="sweep", subcategory="the heads they grow")
           for key, stem in targets.SWEEP_HEADS_FIGURES.items() for ext in paths.EXTENSIONS},
    params:
        sweep=config["sweep"]["summary"]["split_sweep"],
        threshold=config["sweep"]["heads"]["threshold"],
    log:
        paths.log("figures_sweep_heads"),
    benchmark:
        paths.benchmark("figures_sweep_heads")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_sweep_heads.py"


rule figures_sweep_course:
    input:
        **{name: paths.course_table("{sweep}", name) for name in paths.COURSE_TABLES},
    output:
        **{f"{key}_{ext}": report(paths.course_figure("{sweep}", key, ext),
                                  caption=f"../report/sweep_course_{key}.rst", category="sweep",
                                  subcategory="the course of {sweep}")
           for key in targets.SWEEP_COURSE_FIGURES for ext in paths.EXTENSIONS},
    wildcard_constraints:
        sweep=sweep_course_constraint(),
    params:
        threshold=config["sweep"]["heads"]["threshold"],
    log:
        paths.log("figures_sweep_course", "{sweep}"),
    benchmark:
        paths.benchmark("figures_sweep_course", "{sweep}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_sweep_course.py"
