"""Summarize one pair of sweeps (headwatch.sweep.summary): per configuration and the contrast at both readings
(each run's last validation loss and its best), every run's finals and curves, each configuration's rise from its
best against the seed noise. The default pair (rule sweep_summary) and every pair of sweep.summary.pairs (rule
sweep_pair) run this same script, each on its own runs and its own slice of sweep.summary."""
from headwatch.sweep.summary import READING_TABLES, READINGS, fit_sentence, read_runs, summary_tables
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    runs = [dict(r, metrics=path) for r, path in zip(sm.params.runs, sm.input.metrics, strict=True)]
    finals, curves = read_runs(runs)
    tables = summary_tables(finals, sm.params.summary)
    pair = getattr(sm.wildcards, "pair", None)
    named = {} if pair is None else dict(pair=pair)        # a further pair's tables name it
    for reading, (summary, contrast) in READING_TABLES.items():
        loss = f"validation loss {READINGS[reading]}, nats per character"
        write_parquet(tables[summary], sm.output[summary], note=dict(loss=loss, std="over seeds, ddof=1", **named))
        write_parquet(tables[contrast], sm.output[contrast], note=dict(
            loss=loss, interval="percentile bootstrap over seeds",
            test="split_p: configurations relabelled within each seed", **named))
        log.info("%s:\nsummary:\n%s\ncontrast:\n%s", READINGS[reading], tables[summary].to_string(),
                 tables[contrast].T.to_string())
    fit = tables["overfitting"]
    write_parquet(fit, sm.output.overfitting, note=dict(
        rise="last − best validation loss of each run, nats per character", seed_noise="the split sweep's mean "
        "seed std of the last validation loss (ddof 1)", interval="percentile bootstrap over seeds, each "
        "configuration resampled on its own, a run's last loss and rise together",
        verdict="overfits: the interval of rise / seed noise lies above 1; within seed noise: below 1; not "
        "resolved: it holds 1; too few seeds: no interval", **named))
    write_parquet(finals, sm.output.finals, note=named or None)
    write_parquet(curves, sm.output.curves, note=named or None)
    log.info("rise from each run's best:\n%s", "\n".join(fit_sentence(r) for r in fit.to_dict("records")))
