"""Rule report_table: one Parquet table as an HTML page for Snakemake's report."""
from headwatch.explorer.tables import write_table_page
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    rows = write_table_page(snakemake.input[0], snakemake.output[0])
    log.info("%s: %d rows -> %s", snakemake.input[0], rows, snakemake.output[0])
