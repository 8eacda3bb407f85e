"""Rule circuits_paths: path patching from every earlier head into each receiver's q, k and v,
and its guards (protocol §5e)."""
from pathlib import Path

from headwatch.circuits import run_paths
from headwatch.models import load_prepared
from headwatch.settings.circuits import CircuitsSettings
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_parquet, write_parquet, write_record
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
patching = PatchingSettings.from_config(p.patching)   # the rule's slices, typed
circuits = CircuitsSettings.from_config(p.circuits)
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    table, note, guards = run_paths(model, adapter, read_parquet(i.prompts), read_parquet(i.heads), patching, circuits)
    write_record(guards, o.guards)
    write_parquet(table, o.paths, note=note)
