"""Rules figures_anatomy_*: anatomy figures, drawn from the anatomy tables."""

from headwatch.tableio import read_parquet
from headwatch.figures import anatomy
from headwatch.figures.style import save
from headwatch.workflow import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    table = read_parquet(i[0])
    if snakemake.rule == "figures_anatomy_params":
        fig = anatomy.params_by_block(table)
    elif snakemake.rule == "figures_anatomy_rotary":
        fig = anatomy.rotary_clocks(table, snakemake.params.models)
    elif snakemake.rule == "figures_anatomy_kv_cache":
        fig = anatomy.kv_cache(table)
    else:
        fig = anatomy.kv_cut_matrix(table)
    save(fig, o.pdf, o.png)
