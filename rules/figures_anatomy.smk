# Figures of the anatomy stage (protocol §6, §8), drawn from its tables, never from a model.
# Included by rules/figures.smk.


rule figures_anatomy_params:
    input:
        paths.anatomy_table("params_by_block"),
    output:
        **{ext: report(paths.anatomy_figure("params_by_block", ext), caption="../report/anatomy_params_by_block.rst",
                       category="anatomy") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_anatomy_params"),
    benchmark:
        paths.benchmark("figures_anatomy_params")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_anatomy_params.py"


rule figures_anatomy_rotary:
    input:
        paths.anatomy_table("rotary"),
    output:
        **{ext: report(paths.anatomy_figure("rotary_clocks", ext), caption="../report/anatomy_rotary_clocks.rst",
                       category="anatomy") for ext in paths.EXTENSIONS},
    params:
        models=config["anatomy"]["clocks"],
    log:
        paths.log("figures_anatomy_rotary"),
    benchmark:
        paths.benchmark("figures_anatomy_rotary")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_anatomy_rotary.py"


rule figures_anatomy_kv_cache:
    input:
        paths.anatomy_table("kv_cache"),
    output:
        **{ext: report(paths.anatomy_figure("kv_cache", ext), caption="../report/anatomy_kv_cache.rst",
                       category="anatomy") for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_anatomy_kv_cache"),
    benchmark:
        paths.benchmark("figures_anatomy_kv_cache")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_anatomy_kv_cache.py"


rule figures_anatomy_kv_cut:
    input:
        paths.model_anatomy("{model}", "kv_groups.parquet"),
    output:
        **{ext: report(paths.model_anatomy_figure("{model}", "kv_cut_matrix", ext),
                       caption="../report/anatomy_kv_cut_matrix.rst", category="anatomy", subcategory="{model}")
           for ext in paths.EXTENSIONS},
    log:
        paths.log("figures_anatomy_kv_cut", "{model}"),
    benchmark:
        paths.benchmark("figures_anatomy_kv_cut", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/figures_anatomy_kv_cut.py"
