"""Rule scores_heads: sink, prev, self and induction for every head (protocol §4)."""
from pathlib import Path

import torch

from headwatch.tableio import read_parquet, write_parquet
from headwatch.models import load_prepared
from headwatch.scores import SCORES, head_scores
from headwatch.sequences import ids_tensor
from headwatch.workflow import log_to

p = snakemake.params
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads) as log:
    model, _, adapter = load_prepared(Path(snakemake.input.model).parent, p.dtype, device)
    induction = read_parquet(snakemake.input.induction)
    prose = read_parquet(snakemake.input.prose)
    table = head_scores(model, adapter, [torch.tensor(list(ids)) for ids in prose.token_ids],
                        ids_tensor(induction), int(induction.half_length.iloc[0]),
                        int(induction.offset.iloc[0]), p.batch)
    for score in SCORES:
        top = table.sort_values(score, ascending=False).head(5)
        log.info("top %s: %s", score, [(int(r.layer), int(r.head), round(getattr(r, score), 3))
                                       for r in top.itertuples()])
    write_parquet(table, snakemake.output[0])
