"""Rule figures_patching_groups: the key/value groups' map and every head at every position
(protocol §5d, §8), from their tables."""

from headwatch.figures import patching_groups as figs
from headwatch.figures.style import save
from headwatch.tableio import read_note, read_parquet
from headwatch.jobs import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    save(figs.kv_groups_map(read_parquet(i.kv_groups), read_note(i.kv_groups)), o.kv_groups_pdf, o.kv_groups_png)
    save(figs.positions_all_map(read_parquet(i.positions_all), read_note(i.positions_all)), o.positions_all_pdf,
         o.positions_all_png)
