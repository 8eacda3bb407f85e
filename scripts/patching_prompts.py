"""Rule patching_prompts: the two-names prompt set, clean and corrupted (protocol §5d)."""
from pathlib import Path

from transformers import AutoTokenizer

from headwatch.patching import prompt_set
from headwatch.tableio import write_parquet
from headwatch.workflow import log_to

with log_to(snakemake.log[0]) as log:
    tokenizer = AutoTokenizer.from_pretrained(Path(snakemake.input.model).parent)
    table, note = prompt_set(tokenizer, dict(snakemake.params.patching))
    log.info("%d prompts of %d tokens, names at %s", len(table), note["length"], note["slot_positions"])
    write_parquet(table, snakemake.output[0], note=note)
