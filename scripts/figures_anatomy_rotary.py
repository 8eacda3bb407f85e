"""Rule figures_anatomy_rotary: the rotary clocks of the models of its params (protocol §6, §8)."""

from headwatch.figures import anatomy
from headwatch.figures.style import table_figure

table_figure(snakemake, anatomy.rotary_clocks, snakemake.params.models)
