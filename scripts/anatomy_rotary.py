"""Rule anatomy_rotary: each model's rotary pairs, their periods and reach, from the survey."""
from headwatch.anatomy import rotary_table
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    p = snakemake.params
    table = rotary_table(read_parquet(snakemake.input.survey), p.distance, p.swap_base)
    log.info("anatomy_rotary: %d rows", len(table))
    write_parquet(table, snakemake.output[0], note=dict(
        period="2π·base^((n−1)/P) tokens for pair n = 1..P, P = rotary dims ÷ 2",
        reach="the slowest pair's period", wrapped="period <= distance", margin="reach ÷ declared context"))
