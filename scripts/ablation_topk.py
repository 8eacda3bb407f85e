"""Rule ablation_topk: targeted vs random cuts, loss on copy 1 / copy 2 (protocol §5a)."""
from pathlib import Path

from headwatch.ablation import run_topk
from headwatch.settings.ablation import AblationSettings
from headwatch.tableio import read_parquet, write_parquet, write_record
from headwatch.models import load_prepared
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = AblationSettings.from_config(p.ablation)   # the rule's slice of ablation:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    table, note, guards = run_topk(model, adapter, read_parquet(i.eval), read_parquet(i.scores),
                                   settings)
    write_record(guards, o.guards)
    write_parquet(table, o.table, note=note)
