"""Rule anatomy_kv_cache: each model's KV-cache bytes per token, with and without key sharing."""
from headwatch.anatomy import kv_cache_table
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    table = kv_cache_table(read_parquet(snakemake.input.survey))
    log.info("anatomy_kv_cache: %d rows", len(table))
    write_parquet(table, snakemake.output[0], note=dict(
        per_token="2 × layers × kv heads × head size × bytes per number", no_sharing="the same with kv heads = heads"))
