"""Rules figures_ablation_*: ablation figures from the ablation tables (protocol §5, §8)."""

from headwatch.tableio import read_parquet
from headwatch.figures import ablation as figs
from headwatch.figures.style import save
from headwatch.workflow import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    table = read_parquet(i.table)
    if snakemake.rule == "figures_ablation_topk":
        fig = figs.topk_curves(table)
    elif snakemake.rule == "figures_ablation_circuit":
        fig = figs.circuit_bars(table)
    elif snakemake.rule == "figures_ablation_attribution":
        fig = figs.attribution_heatmap(table, snakemake.wildcards.phrase)
    else:
        fig = figs.pairs_bars(table)
    save(fig, o.pdf, o.png)
