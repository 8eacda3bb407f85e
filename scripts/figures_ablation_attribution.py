"""Rule figures_ablation_attribution: §5c one phrase's attribution heat map (layers × heads) (protocol §8)."""

from headwatch.figures import ablation
from headwatch.figures.style import table_figure

table_figure(snakemake, ablation.attribution_heatmap, snakemake.wildcards.phrase)
