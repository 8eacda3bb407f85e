"""Rule anatomy_cells: each model's attention cells over its whole context."""
from headwatch.anatomy import attention_cells_table
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    table = attention_cells_table(read_parquet(snakemake.input.survey))
    log.info("anatomy_cells: %d rows", len(table))
    write_parquet(table, snakemake.output[0], note=dict(
        cells="context² × heads × layers", cells_causal="context·(context+1)/2 × heads × layers"))
