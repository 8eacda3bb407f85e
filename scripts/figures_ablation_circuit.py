"""Rule figures_ablation_circuit: §5b the top induction heads intact, with the previous-token head
cut, and under the largest random shift (protocol §8)."""

from headwatch.figures import ablation
from headwatch.figures.style import table_figure

table_figure(snakemake, ablation.circuit_bars)
