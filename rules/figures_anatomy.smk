# Figures of the anatomy stage (protocol §6, §8), drawn from its tables, never from a model.
# Included by rules/figures.smk.


def figures_anatomy_targets():
    out = expand(f"{FIGURES}/anatomy/{{name}}.{{ext}}", name=["params_by_block", "rotary_clocks", "kv_cache"],
                 ext=["pdf", "png"])
    return out + expand_models(f"{FIGURES}/{{model}}/anatomy/kv_cut_matrix.{{ext}}", ext=["pdf", "png"])


rule figures_anatomy_params:
    input:
        f"{RESULTS}/anatomy/params_by_block.parquet",
    output:
        pdf=report(f"{FIGURES}/anatomy/params_by_block.pdf", caption="../report/anatomy_params_by_block.rst",
                   category="anatomy"),
        png=report(f"{FIGURES}/anatomy/params_by_block.png", caption="../report/anatomy_params_by_block.rst",
                   category="anatomy"),
    log:
        f"{RESULTS}/logs/figures_anatomy_params.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_anatomy_params.tsv"
    script:
        "../scripts/figures_anatomy.py"


rule figures_anatomy_rotary:
    input:
        f"{RESULTS}/anatomy/rotary.parquet",
    output:
        pdf=report(f"{FIGURES}/anatomy/rotary_clocks.pdf", caption="../report/anatomy_rotary_clocks.rst",
                   category="anatomy"),
        png=report(f"{FIGURES}/anatomy/rotary_clocks.png", caption="../report/anatomy_rotary_clocks.rst",
                   category="anatomy"),
    params:
        models=config["anatomy"]["clocks"],
    log:
        f"{RESULTS}/logs/figures_anatomy_rotary.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_anatomy_rotary.tsv"
    script:
        "../scripts/figures_anatomy.py"


rule figures_anatomy_kv_cache:
    input:
        f"{RESULTS}/anatomy/kv_cache.parquet",
    output:
        pdf=report(f"{FIGURES}/anatomy/kv_cache.pdf", caption="../report/anatomy_kv_cache.rst",
                   category="anatomy"),
        png=report(f"{FIGURES}/anatomy/kv_cache.png", caption="../report/anatomy_kv_cache.rst",
                   category="anatomy"),
    log:
        f"{RESULTS}/logs/figures_anatomy_kv_cache.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_anatomy_kv_cache.tsv"
    script:
        "../scripts/figures_anatomy.py"


rule figures_anatomy_kv_cut:
    input:
        f"{RESULTS}/{{model}}/anatomy/kv_groups.parquet",
    output:
        pdf=report(f"{FIGURES}/{{model}}/anatomy/kv_cut_matrix.pdf", caption="../report/anatomy_kv_cut_matrix.rst",
                   category="anatomy", subcategory="{model}"),
        png=report(f"{FIGURES}/{{model}}/anatomy/kv_cut_matrix.png", caption="../report/anatomy_kv_cut_matrix.rst",
                   category="anatomy", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_anatomy_kv_cut/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_anatomy_kv_cut/{{model}}.tsv"
    script:
        "../scripts/figures_anatomy.py"
