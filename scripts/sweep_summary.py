"""Summarize the sweeps (headwatch.sweep.summary): per configuration, contrast, curves."""
from headwatch.settings.sweep import SummarySettings
from headwatch.sweep.summary import read_runs, summarize
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    runs = [dict(r, metrics=path) for r, path in zip(sm.params.runs, sm.input.metrics, strict=True)]
    finals, curves = read_runs(runs)
    s = SummarySettings.from_config(sm.params.summary)
    summary, contrast = summarize(finals, s.split_sweep, s.capacity, s.bootstrap)
    write_parquet(summary, sm.output.summary, note=dict(loss="final validation loss, nats per character",
                                                         std="over seeds, ddof=1"))
    write_parquet(contrast, sm.output.contrast, note=dict(
        loss="final validation loss, nats per character", interval="percentile bootstrap over seeds",
        test="split_p: configurations relabelled within each seed"))
    write_parquet(finals, sm.output.finals)
    write_parquet(curves, sm.output.curves)
    log.info("summary:\n%s\ncontrast:\n%s", summary.to_string(), contrast.T.to_string())
