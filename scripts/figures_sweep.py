"""Sweep figures (headwatch.figures.sweep) from the summary tables."""

from headwatch.tableio import read_parquet
from headwatch.figures import sweep as figs
from headwatch.figures.style import save
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    sm = snakemake
    summary = read_parquet(sm.input.summary)
    finals = read_parquet(sm.input.finals)
    contrast = read_parquet(sm.input.contrast).iloc[0]
    save(figs.loss_vs_heads(summary, finals, contrast), sm.output.heads_pdf, sm.output.heads_png)
    save(figs.loss_vs_width(summary, finals, contrast), sm.output.width_pdf, sm.output.width_png)
    save(figs.contrast_intervals(finals, contrast), sm.output.contrast_pdf, sm.output.contrast_png)
    save(figs.training_curves(read_parquet(sm.input.curves)), sm.output.curves_pdf,
         sm.output.curves_png)
    save(figs.readings(finals, dict(last=contrast, best=read_parquet(sm.input.contrast_best).iloc[0]),
                       read_parquet(sm.input.overfitting)), sm.output.readings_pdf, sm.output.readings_png)
