"""Rule figures_patching: the activation-patching figures from the patching tables (protocol §5d, §8)."""

from headwatch.figures import patching as figs
from headwatch.figures.style import save
from headwatch.tableio import read_note, read_parquet
from headwatch.jobs import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    heads, note = read_parquet(i.heads), read_note(i.heads)
    save(figs.heads_maps(heads, note), o.heads_pdf, o.heads_png)
    save(figs.resid_map(read_parquet(i.resid), read_parquet(i.positions), note), o.resid_pdf, o.resid_png)
    save(figs.top_heads_table(heads, read_parquet(i.scores), note), o.top_heads_pdf, o.top_heads_png)
