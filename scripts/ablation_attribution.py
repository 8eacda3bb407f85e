"""Rule ablation_attribution: every head cut alone on every phrase (protocol §5c)."""
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
    attribution = hw.cut_each_head(m, read_parquet(i.phrases), read_parquet(i.prose), read_parquet(i.eval), settings)
    note, tables = attribution.attrs["note"], attribution.attrs["tables"]
    write_record(attribution.attrs["guards"], o.guards)
    write_parquet(attribution, o.attribution, note=note)
    write_parquet(tables["summary"], o.summary, note=note)
    write_parquet(tables["pairs"], o.pairs, note=note)
