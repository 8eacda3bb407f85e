"""Summarize the sweeps (headwatch.sweep.summary): per configuration and the contrast at both readings (each
run's last validation loss and its best), every run's finals and curves, each configuration's rise from its
best against the seed noise."""
from headwatch.settings.sweep import SummarySettings
from headwatch.sweep.summary import READINGS, fit_sentence, overfitting, read_runs, summarize
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    runs = [dict(r, metrics=path) for r, path in zip(sm.params.runs, sm.input.metrics, strict=True)]
    finals, curves = read_runs(runs)
    s = SummarySettings.from_config(sm.params.summary)
    for reading, suffix in (("last", ""), ("best", "_best")):
        summary, contrast = summarize(finals, s.split_sweep, s.capacity, s.bootstrap, reading)
        loss = f"validation loss {READINGS[reading]}, nats per character"
        write_parquet(summary, sm.output[f"summary{suffix}"], note=dict(loss=loss, std="over seeds, ddof=1"))
        write_parquet(contrast, sm.output[f"contrast{suffix}"], note=dict(
            loss=loss, interval="percentile bootstrap over seeds",
            test="split_p: configurations relabelled within each seed"))
        log.info("%s:\nsummary:\n%s\ncontrast:\n%s", READINGS[reading], summary.to_string(), contrast.T.to_string())
    fit = overfitting(finals, s.split_sweep, s.bootstrap)
    write_parquet(fit, sm.output.overfitting, note=dict(
        rise="last − best validation loss of each run, nats per character", seed_noise="the split sweep's mean "
        "seed std of the last validation loss (ddof 1)", interval="percentile bootstrap over seeds, each "
        "configuration resampled on its own, a run's last loss and rise together",
        verdict="overfits: the interval of rise / seed noise lies above 1; within seed noise: below 1; not "
        "resolved: it holds 1; too few seeds: no interval"))
    write_parquet(finals, sm.output.finals)
    write_parquet(curves, sm.output.curves)
    log.info("rise from each run's best:\n%s", "\n".join(fit_sentence(r) for r in fit.to_dict("records")))
