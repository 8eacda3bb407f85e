"""Rules figures_patching_*: activation-patching figures from the patching tables (protocol §5d, §8)."""

from headwatch.figures import patching as figs
from headwatch.figures.style import save
from headwatch.tableio import read_note, read_parquet
from headwatch.workflow import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    if snakemake.rule == "figures_patching_heads":
        fig = figs.heads_maps(read_parquet(i.heads), read_note(i.heads))
    elif snakemake.rule == "figures_patching_resid":
        fig = figs.resid_map(read_parquet(i.resid), read_parquet(i.positions), read_note(i.resid))
    else:
        fig = figs.top_heads_table(read_parquet(i.heads), read_parquet(i.scores), read_note(i.heads))
    save(fig, o.pdf, o.png)
