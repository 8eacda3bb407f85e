"""Rules figures_grid, figures_head, figures_scores: where heads look."""

from headwatch.tableio import read_parquet
from headwatch.figures import heads
from headwatch.figures.style import save
from headwatch.names import top_heads
from headwatch.workflow import log_to

i, o, w = snakemake.input, snakemake.output, snakemake.wildcards
with log_to(snakemake.log[0]):
    if snakemake.rule == "figures_grid":
        save(heads.grid(read_parquet(i.maps), w.phrase), o.pdf, o.png)
    elif snakemake.rule == "figures_head":
        scores = read_parquet(i.scores)
        (layer, head), = top_heads(scores, w.score, 1)
        value = scores[(scores.layer == layer) & (scores["head"] == head)][w.score].item()
        title = f"top {w.score} head {heads.head_label(layer, head)} ({w.score} = {value:.3f}) on '{snakemake.params.phrase}'"
        save(heads.head_map(read_parquet(i.maps), read_parquet(i.tokens), snakemake.params.phrase,
                            layer, head, title), o.pdf, o.png)
    else:
        scores = read_parquet(i.scores)
        save(heads.ranked_scores(scores), o.ranked_pdf, o.ranked_png)
        save(heads.sink_vs_induction(scores), o.scatter_pdf, o.scatter_png)
