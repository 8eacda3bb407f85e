"""Rule patching_sweep: every head, the residual stream and the top heads per position patched
clean → corrupted, the attribution-patching estimate, and the guards (protocol §5d)."""
from pathlib import Path

from headwatch.models import load_prepared
from headwatch.pairs import source_note
from headwatch.patching import run_patching
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_note, read_parquet, write_parquet, write_record
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = PatchingSettings.from_config(p.patching)   # the rule's slice of patching:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, device)
    prompts = read_parquet(i.prompts)
    heads, resid, positions, note, guards = run_patching(model, adapter, prompts, read_parquet(i.phrases), settings)
    note = dict(note, **source_note(read_note(i.prompts)))   # the templates, or the pairs file and its SHA-256
    write_record(guards, o.guards)
    write_parquet(heads, o.heads, note=note)
    write_parquet(resid, o.resid, note=note)
    write_parquet(positions, o.positions, note=note)
