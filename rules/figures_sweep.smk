# Figures of the training sweep (protocol §7, §8): read the summary tables, never a model.
FIGURES_SWEEP = {f"{name}_{ext}": f"{FIGURES}/sweep/{stem}.{ext}"
                 for name, stem in (("heads", "loss_vs_heads"), ("width", "loss_vs_width"),
                                    ("curves", "training_curves"))
                 for ext in ("pdf", "png")}


rule figures_sweep:
    input:
        summary=f"{RESULTS}/sweep/summary.parquet",
        contrast=f"{RESULTS}/sweep/contrast.parquet",
        finals=f"{RESULTS}/sweep/finals.parquet",
        curves=f"{RESULTS}/sweep/curves.parquet",
    output:
        **{key: report(path, caption=f"../report/sweep_{Path(path).stem}.rst", category="sweep",
                       subcategory="heads split and width") for key, path in FIGURES_SWEEP.items()},
    log:
        f"{RESULTS}/logs/figures_sweep.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_sweep.tsv"
    script:
        "../scripts/figures_sweep.py"


rule figures_sweep_study:
    input:
        summary=f"{RESULTS}/sweep/studies/{{study}}.parquet",
        finals=f"{RESULTS}/sweep/studies/{{study}}_finals.parquet",
    output:
        pdf=report(f"{FIGURES}/sweep/study_{{study}}.pdf", caption="../report/sweep_study.rst",
                   category="sweep", subcategory="study {study}"),
        png=report(f"{FIGURES}/sweep/study_{{study}}.png", caption="../report/sweep_study.rst",
                   category="sweep", subcategory="study {study}"),
    wildcard_constraints:
        study="|".join(sweep_studies()) or "(?!)",
    params:
        kind=lambda w: config["sweep"]["sweeps"][w.study]["study"]["kind"],
    log:
        f"{RESULTS}/logs/figures_sweep_study/{{study}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_sweep_study/{{study}}.tsv"
    script:
        "../scripts/figures_sweep_study.py"


def figures_sweep_targets():
    return list(FIGURES_SWEEP.values()) + [f"{FIGURES}/sweep/study_{n}.{ext}" for n in sweep_studies()
                                           for ext in ("pdf", "png")]
