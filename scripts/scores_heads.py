"""Rule scores_heads: sink, prev, self and induction for every head (protocol §4)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.names import SCORES, top_rows
from headwatch.tableio import read_parquet, write_parquet

p = snakemake.params
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads) as log:
    m = hw.load_model(Path(snakemake.input.model).parent, p.dtype, device)
    table = hw.head_scores(m, read_parquet(snakemake.input.induction), read_parquet(snakemake.input.prose), p.batch)
    for score in SCORES:
        log.info("top %s: %s", score, [(int(r.layer), int(r.head), round(getattr(r, score), 3))
                                       for r in top_rows(table, score, 5).itertuples()])
    write_parquet(table, snakemake.output[0])
