"""Rule figures_edges: the faithfulness curves with the random band, and the best small circuit
drawn by layer (protocol §5g)."""
from headwatch.figures import edges as figs
from headwatch.figures.style import save
from headwatch.jobs import log_to
from headwatch.tableio import read_note, read_parquet

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    save(figs.faithfulness_curves(read_parquet(i.faithfulness), read_parquet(i.areas), read_note(i.faithfulness)),
         o.faithfulness_pdf, o.faithfulness_png)
    save(figs.circuit_by_layer(read_parquet(i.circuit), read_note(i.circuit), read_note(i.scores)["graph"]),
         o.circuit_pdf, o.circuit_png)
