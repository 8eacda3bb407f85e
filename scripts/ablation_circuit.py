"""Rule ablation_circuit: cut the previous-token head, re-score induction (protocol §5b)."""
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
    scores = hw.cut_circuit(m, read_parquet(i.scores), read_parquet(i.circuit), read_parquet(i.eval), settings)
    write_record(scores.attrs["guards"], o.guards)
    write_parquet(scores, o.scores, note=scores.attrs["note"])
    write_parquet(scores.attrs["tables"]["loss"], o.loss, note=scores.attrs["note"])
