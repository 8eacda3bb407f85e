"""Rule patching_kv: every layer's key group and value group patched clean → corrupted at every
position, and its guards (protocol §5d)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_note, read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = PatchingSettings.from_config(p.patching)   # the rule's slice of patching:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    table = hw.patch_kv_groups(m, read_parquet(i.prompts), settings)
    write_record(table.attrs["guards"], o.guards)
    write_parquet(table, o.table, note=dict(table.attrs["note"], templates=read_note(i.prompts)["templates"]))
