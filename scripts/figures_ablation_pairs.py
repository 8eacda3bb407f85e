"""Rule figures_ablation_pairs: §5c the non-additivity of the two costliest heads (protocol §8)."""

from headwatch.figures import ablation
from headwatch.figures.style import table_figure

table_figure(snakemake, ablation.pairs_bars)
