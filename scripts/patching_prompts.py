"""Rule patching_prompts: the two-names prompt set, clean and corrupted, or the pairs file's (protocol §5d)."""
from pathlib import Path

from transformers import AutoTokenizer

from headwatch.pairs import pair_prompt_set
from headwatch.patching import prompt_set
from headwatch.settings.patching import PatchingSettings
from headwatch.tableio import write_parquet
from headwatch.workflow import log_to

settings = PatchingSettings.from_config(snakemake.params.patching)   # the rule's slice of patching:, typed
with log_to(snakemake.log[0]) as log:
    tokenizer = AutoTokenizer.from_pretrained(Path(snakemake.input.model).parent)
    if settings.pairs:     # a researcher's prompt pairs (headwatch/pairs.py)
        table, note = pair_prompt_set(tokenizer, settings, ".", snakemake.wildcards.model)
        log.info("%d prompt pairs of %s tokens from %s", len(table), note["lengths"], settings.pairs)
    else:
        table, note = prompt_set(tokenizer, settings)
        log.info("%d prompts of %d tokens, names at %s", len(table), note["length"], note["slot_positions"])
    write_parquet(table, snakemake.output[0], note=note)
