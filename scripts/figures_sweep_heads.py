"""Figures of the heads the split sweep's models grow (headwatch.figures.sweep, protocol §7b)."""
from headwatch.figures import sweep as figs
from headwatch.figures.style import save
from headwatch.tableio import read_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    sm = snakemake
    sweep, threshold = sm.params.sweep, sm.params.threshold
    save(figs.heads_formation(read_parquet(sm.input.curves), sweep, threshold), sm.output.formation_pdf,
         sm.output.formation_png)
    save(figs.heads_finals(read_parquet(sm.input.summary), read_parquet(sm.input.runs), sweep, threshold),
         sm.output.finals_pdf, sm.output.finals_png)
    save(figs.heads_grid(read_parquet(sm.input.grid), sweep), sm.output.grid_pdf, sm.output.grid_png)
