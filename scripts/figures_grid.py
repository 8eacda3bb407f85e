"""Rule figures_grid: every head's map on one phrase, layers as rows × heads (protocol §8)."""

from headwatch.figures import heads
from headwatch.figures.style import table_figure

table_figure(snakemake, heads.grid, snakemake.wildcards.phrase)
