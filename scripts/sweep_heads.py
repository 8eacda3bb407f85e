"""The heads the sweep's models grow (protocol §7b, headwatch.sweep.heads.study): per run, per
configuration (mean ± std over seeds) and per evaluation step."""
from headwatch import paths
from headwatch.sweep.heads import study
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    runs = [dict(r, metrics=read_parquet(paths.run_output(r, "metrics.parquet")),
                 records=read_parquet(paths.run_output(r, "heads.parquet")),
                 cut=read_parquet(paths.sweep_heads_cut(r["trained_under"], r["shape"], r["seed"])))
            for r in sm.params.runs]
    per_run, summary, curves, grid = study(runs, sm.params.threshold)
    note = dict(threshold=sm.params.threshold, scores="the best head's (maximum over every head)",
                cut="copy-2 loss with the head cut minus intact, nats per character", std="over seeds, ddof=1")
    write_parquet(per_run, sm.output.runs, note=note)
    write_parquet(summary, sm.output.summary, note=note)
    write_parquet(curves, sm.output.curves, note=note)
    write_parquet(grid, sm.output.grid, note=dict(scores="every head's scores at the run's last step"))
    log.info("heads study:\n%s", summary.to_string())
