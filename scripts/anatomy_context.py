"""Rules anatomy_rotary, anatomy_kv_cache, anatomy_cells: context arithmetic from the survey."""

from headwatch.anatomy import attention_cells_table, kv_cache_table, rotary_table
from headwatch.tableio import read_parquet, write_parquet
from headwatch.workflow import log_to

with log_to(snakemake.log[0]) as log:
    survey = read_parquet(snakemake.input.survey)
    if snakemake.rule == "anatomy_rotary":
        p = snakemake.params
        table = rotary_table(survey, p.distance, p.swap_base)
        note = dict(period="2π·base^((n−1)/P) tokens for pair n = 1..P, P = rotary dims ÷ 2",
                    reach="the slowest pair's period", wrapped="period <= distance",
                    margin="reach ÷ declared context")
    elif snakemake.rule == "anatomy_kv_cache":
        table = kv_cache_table(survey)
        note = dict(per_token="2 × layers × kv heads × head size × bytes per number",
                    no_sharing="the same with kv heads = heads")
    else:
        table = attention_cells_table(survey)
        note = dict(cells="context² × heads × layers", cells_causal="context·(context+1)/2 × heads × layers")
    log.info("%s: %d rows", snakemake.rule, len(table))
    write_parquet(table, snakemake.output[0], note=note)
