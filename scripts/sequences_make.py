"""Rule sequences_make: one seeded set (or the prose, or the phrases) as a table."""
from pathlib import Path

from headwatch.tableio import write_parquet
from headwatch.scores.sequences import make_set
from headwatch.model.sources import folder_tokenizer
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    tokenizer = folder_tokenizer(Path(snakemake.input.model).parent)
    table = make_set(tokenizer, snakemake.wildcards.set, snakemake.params.spec)
    log.info("%s: %d sequences", snakemake.wildcards.set, len(table))
    write_parquet(table, snakemake.output[0])
