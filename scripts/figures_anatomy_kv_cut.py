"""Rule figures_anatomy_kv_cut: a studied model's key-group cuts, which heads each cut moves (protocol §6, §8)."""

from headwatch.figures import anatomy
from headwatch.figures.style import table_figure

table_figure(snakemake, anatomy.kv_cut_matrix)
