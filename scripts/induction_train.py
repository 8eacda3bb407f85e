"""Rule induction_train: one shape on one task (or its control), every seed (protocol §7c)."""
from headwatch.induction.train import train_job
from headwatch.jobs import log_to
from headwatch.model.device import pick_device
from headwatch.tableio import write_parquet

with log_to(snakemake.log[0], snakemake.threads) as log:
    device = pick_device(snakemake.config["device"])    # not a param: where a job runs (rules/common.smk)
    curves, records, edges, note = train_job(dict(snakemake.params.job), log, device)
    for name, table in (("curves", curves), ("records", records), ("edges", edges)):
        write_parquet(table, snakemake.output[name], note=note)
