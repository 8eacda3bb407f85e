"""Rule patching_prompts: the two-names prompt set, clean and corrupted, or the pairs file's (protocol §5d)."""
from pathlib import Path

from transformers import AutoTokenizer

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import write_parquet

settings = PatchingSettings.from_config(snakemake.params.patching)   # the rule's slice of patching:, typed
with log_to(snakemake.log[0]) as log:
    tokenizer = AutoTokenizer.from_pretrained(Path(snakemake.input.model).parent, trust_remote_code=False)
    table = hw.prompt_pairs(tokenizer, settings=settings, model=snakemake.wildcards.model)
    note = table.attrs["note"]
    if settings.pairs:     # a researcher's prompt pairs (headwatch/patching/pairs.py)
        log.info("%d prompt pairs of %s tokens from %s", len(table), note["lengths"], settings.pairs)
    else:
        log.info("%d prompts of %d tokens, names at %s", len(table), note["length"], note["slot_positions"])
    write_parquet(table, snakemake.output[0], note=note)
