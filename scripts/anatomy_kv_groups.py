"""Rule anatomy_kv_groups: zero each key/value group's key slice; which heads move (fatal when inexact)."""
from pathlib import Path

from headwatch.anatomy import run
from headwatch.settings.anatomy import KVControl
from headwatch.tableio import read_parquet, write_parquet
from headwatch.jobs import log_to

p, out = snakemake.params, snakemake.output
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    cuts, similarity = run.run_kv_groups(Path(snakemake.input.model).parent,
                                         read_parquet(snakemake.input.phrases), p.phrase,
                                         KVControl.from_config(p.control), p.dtype, device)
    write_parquet(cuts, out.groups, note=dict(
        cut="the kv group's head_dim slice of the key projection output of `layer`, zeroed by a hook",
        max_delta="max |Δ attention| of `head` (in the cut layer) over its whole map",
        exact="others_max_delta, before_max_delta and restore_max_delta must be exactly 0 (checked)",
        role="model = the studied model; control = the same architecture without key sharing"))
    write_parquet(similarity, out.similarity, note=dict(
        correlation="Pearson, over the cells on or below the diagonal, row 0 left out",
        within_mean="0 with within_pairs = 0 when no heads share keys"))
