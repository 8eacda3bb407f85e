"""Rule patching_kv: every layer's key group and value group patched clean → corrupted at every
position, and its guards (protocol §5d)."""
from pathlib import Path

from headwatch.models import load_prepared
from headwatch.patching_kv import run_kv_patching
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_note, read_parquet, write_parquet, write_record
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = PatchingSettings.from_config(p.patching)   # the rule's slice of patching:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    table, note, guards = run_kv_patching(model, adapter, read_parquet(i.prompts), settings)
    write_record(guards, o.guards)
    write_parquet(table, o.table, note=dict(note, templates=read_note(i.prompts)["templates"]))
