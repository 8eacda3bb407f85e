"""Rule figures_circuits: the path-patching edges above the threshold as a graph of heads by layer (protocol §5e)."""
from headwatch.figures import circuits as figs
from headwatch.figures.style import save
from headwatch.tableio import read_note, read_parquet
from headwatch.jobs import log_to

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    save(figs.edge_graph(read_parquet(i.paths), read_note(i.paths)), o.paths_pdf, o.paths_png)
