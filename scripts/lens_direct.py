"""Rule lens_direct: every component's direct effect on the logit difference (the final norm's scale
frozen), each head's beside the head sweep's total effect, and the logit lens, with their guards
(protocol §5h)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.lens.direct import direct_effects
from headwatch.settings.lens import LensSettings
from headwatch.tableio import read_note, read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = LensSettings.from_config(p.lens)   # the rule's slice, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    patched = read_parquet(i.heads)
    patched.attrs["note"] = read_note(i.heads)    # its clean and corrupted logit differences: the same prompts
    direct, heads, lens, note, guards = direct_effects(m.model, m.adapter, read_parquet(i.prompts), settings,
                                                       patched, p.top_k, lens=True)
    write_record(guards, o.guards)
    for table, path in ((direct, o.direct), (heads, o.direct_heads), (lens, o.logit_lens)):
        write_parquet(table, path, note=note)
