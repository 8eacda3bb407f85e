"""Rule ablation_topk: targeted vs random cuts, loss on copy 1 / copy 2 (protocol §5a)."""
from pathlib import Path

from headwatch.ablation import run_topk
from headwatch.checks import read_parquet, write_json, write_parquet
from headwatch.models import load_prepared
from headwatch.workflow import log_to

i, o, p = snakemake.input, snakemake.output, snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    model, _, adapter = load_prepared(Path(i.model).parent, p.dtype, p.device)
    table, note, checks = run_topk(model, adapter, read_parquet(i.eval), read_parquet(i.scores),
                                   dict(p.ablation))
    write_json(checks, o.checks)
    write_parquet(table, o.table, note=note)
