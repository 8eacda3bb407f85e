"""One study sweep's figure (headwatch.figures.sweep.study_figure) from its tables: summary, finals, contrasts."""

from headwatch.tableio import read_parquet
from headwatch.figures.sweep import study_figure
from headwatch.figures.style import save
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    sm = snakemake
    fig = study_figure(sm.params.kind, read_parquet(sm.input.summary), read_parquet(sm.input.finals),
                       read_parquet(sm.input.contrasts))
    save(fig, sm.output.pdf, sm.output.png)
