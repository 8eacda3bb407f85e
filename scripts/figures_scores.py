"""Rule figures_scores: the four scores ranked over all heads; sink vs induction per head."""

from headwatch.figures import heads
from headwatch.figures.style import save
from headwatch.tableio import read_parquet
from headwatch.jobs import log_to

o = snakemake.output
with log_to(snakemake.log[0]):
    scores = read_parquet(snakemake.input.scores)
    save(heads.ranked_scores(scores), o.ranked_pdf, o.ranked_png)
    save(heads.sink_vs_induction(scores), o.scatter_pdf, o.scatter_png)
