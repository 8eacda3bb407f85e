"""Rule ablation_circuit: cut the previous-token head, re-score induction (protocol §5b)."""
from pathlib import Path

from headwatch.ablation import run_circuit
from headwatch.settings.ablation import AblationSettings
from headwatch.tableio import read_parquet, write_parquet, write_record
from headwatch.models import load_prepared
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = AblationSettings.from_config(p.ablation)   # the rule's slice of ablation:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    scores, loss, note, guards = run_circuit(model, adapter, read_parquet(i.circuit),
                                             read_parquet(i.scores), settings, read_parquet(i.eval))
    write_record(guards, o.guards)
    write_parquet(scores, o.scores, note=note)
    write_parquet(loss, o.loss, note=note)
