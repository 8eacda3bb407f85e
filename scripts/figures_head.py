"""Rule figures_head: the top head of one score, enlarged on the phrase of its params."""

from headwatch.figures import heads
from headwatch.figures.style import save
from headwatch.names import top_heads
from headwatch.tableio import read_parquet
from headwatch.jobs import log_to

i, o, score, phrase = snakemake.input, snakemake.output, snakemake.wildcards.score, snakemake.params.phrase
with log_to(snakemake.log[0]):
    scores = read_parquet(i.scores)
    (layer, head), = top_heads(scores, score, 1)
    value = scores[(scores.layer == layer) & (scores["head"] == head)][score].item()
    title = f"top {score} head {heads.head_label(layer, head)} ({score} = {value:.3f}) on '{phrase}'"
    save(heads.head_map(read_parquet(i.maps), read_parquet(i.tokens), phrase, layer, head, title), o.pdf, o.png)
