"""Rule figures_anatomy_params: parameters by block of every surveyed model (protocol §6, §8)."""

from headwatch.figures import anatomy
from headwatch.figures.style import table_figure

table_figure(snakemake, anatomy.params_by_block)
