"""Rule figures_anatomy_kv_cache: the KV cache per token of every surveyed model (protocol §6, §8)."""

from headwatch.figures import anatomy
from headwatch.figures.style import table_figure

table_figure(snakemake, anatomy.kv_cache)
