"""Rule ablation_attribution: every head cut alone on every phrase (protocol §5c)."""
from pathlib import Path

from headwatch.ablation import run_attribution
from headwatch.settings.ablation import AblationSettings
from headwatch.tableio import read_parquet, write_parquet, write_record
from headwatch.models import load_prepared
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = AblationSettings.from_config(p.ablation)   # the rule's slice of ablation:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    attribution, summary, pairs, note, guards = run_attribution(
        model, adapter, read_parquet(i.phrases), read_parquet(i.prose), settings, read_parquet(i.eval))
    write_record(guards, o.guards)
    write_parquet(attribution, o.attribution, note=note)
    write_parquet(summary, o.summary, note=note)
    write_parquet(pairs, o.pairs, note=note)
