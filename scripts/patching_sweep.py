"""Rule patching_sweep: every head, the residual stream and the top heads per position patched
clean → corrupted, the attribution-patching estimate, and the guards (protocol §5d)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.patching.pairs import source_note
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import read_note, read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = PatchingSettings.from_config(p.patching)   # the rule's slice of patching:, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    heads = hw.patch_heads(m, read_parquet(i.prompts), settings, resid=True, positions=True,
                           phrases=read_parquet(i.phrases))
    note = dict(heads.attrs["note"], **source_note(read_note(i.prompts)))   # the templates, or the pairs file and its SHA-256
    write_record(heads.attrs["guards"], o.guards)
    write_parquet(heads, o.heads, note=note)
    write_parquet(heads.attrs["tables"]["resid"], o.resid, note=note)
    write_parquet(heads.attrs["tables"]["positions"], o.positions, note=note)
