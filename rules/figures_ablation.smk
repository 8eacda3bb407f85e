# Figures of the ablation stage (protocol §5, §8): drawn from the ablation tables,
# never from a model; PDF + PNG under figures/{model}/ablation/.
ABLATION_FIGURES = f"{FIGURES}/{{model}}/ablation"
ABLATION_DATA = f"{RESULTS}/{{model}}/ablation"


def figures_ablation_targets():
    out = []
    for model in studied_models():
        out += expand(f"{FIGURES}/{model}/ablation/{{name}}.{{ext}}",
                      name=["topk", "circuit", "pairs"], ext=["pdf", "png"])
        out += expand(f"{FIGURES}/{model}/ablation/attribution_{{phrase}}.{{ext}}",
                      phrase=list(config["phrases"]), ext=["pdf", "png"])
    return out


rule figures_ablation_topk:
    input:
        table=f"{ABLATION_DATA}/topk.parquet",
    output:
        pdf=report(f"{ABLATION_FIGURES}/topk.pdf", caption="../report/ablation_topk.rst",
                   category="ablation", subcategory="{model}"),
        png=report(f"{ABLATION_FIGURES}/topk.png", caption="../report/ablation_topk.rst",
                   category="ablation", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_ablation_topk/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_ablation_topk/{{model}}.tsv"
    script:
        "../scripts/figures_ablation.py"


rule figures_ablation_circuit:
    input:
        table=f"{ABLATION_DATA}/circuit_scores.parquet",
    output:
        pdf=report(f"{ABLATION_FIGURES}/circuit.pdf", caption="../report/ablation_circuit.rst",
                   category="ablation", subcategory="{model}"),
        png=report(f"{ABLATION_FIGURES}/circuit.png", caption="../report/ablation_circuit.rst",
                   category="ablation", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_ablation_circuit/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_ablation_circuit/{{model}}.tsv"
    script:
        "../scripts/figures_ablation.py"


rule figures_ablation_attribution:
    input:
        table=f"{ABLATION_DATA}/attribution.parquet",
    output:
        pdf=report(f"{ABLATION_FIGURES}/attribution_{{phrase}}.pdf", caption="../report/ablation_attribution.rst",
                   category="ablation", subcategory="{model}"),
        png=report(f"{ABLATION_FIGURES}/attribution_{{phrase}}.png", caption="../report/ablation_attribution.rst",
                   category="ablation", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_ablation_attribution/{{model}}/{{phrase}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_ablation_attribution/{{model}}/{{phrase}}.tsv"
    script:
        "../scripts/figures_ablation.py"


rule figures_ablation_pairs:
    input:
        table=f"{ABLATION_DATA}/pairs.parquet",
    output:
        pdf=report(f"{ABLATION_FIGURES}/pairs.pdf", caption="../report/ablation_pairs.rst",
                   category="ablation", subcategory="{model}"),
        png=report(f"{ABLATION_FIGURES}/pairs.png", caption="../report/ablation_pairs.rst",
                   category="ablation", subcategory="{model}"),
    log:
        f"{RESULTS}/logs/figures_ablation_pairs/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/figures_ablation_pairs/{{model}}.tsv"
    script:
        "../scripts/figures_ablation.py"
