"""Rule figures_ablation_topk: §5a loss against heads cut, targeted vs random (protocol §8)."""

from headwatch.figures import ablation
from headwatch.figures.style import table_figure

table_figure(snakemake, ablation.topk_curves)
