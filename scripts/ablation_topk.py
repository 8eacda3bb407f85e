"""Rule ablation_topk: targeted vs random cuts, loss on copy 1 / copy 2 (protocol §5a)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.ablation import AblationSettings
from headwatch.tableio import read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = AblationSettings.from_config(p.ablation)   # the rule's slice of ablation:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    table = hw.cut_heads(m, read_parquet(i.scores), read_parquet(i.eval), settings)
    write_record(table.attrs["guards"], o.guards)
    write_parquet(table, o.table, note=table.attrs["note"])
