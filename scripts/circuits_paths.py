"""Rule circuits_paths: path patching from every earlier head into each receiver's q, k and v,
and its guards (protocol §5e)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.circuits import CircuitsSettings
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
patching = PatchingSettings.from_config(p.patching)   # the rule's slices, typed
circuits = CircuitsSettings.from_config(p.circuits)
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    paths = hw.path_patching(m, read_parquet(i.prompts), read_parquet(i.heads), circuits, patching)
    write_record(paths.attrs["guards"], o.guards)
    write_parquet(paths, o.paths, note=paths.attrs["note"])
