"""Rule edges_scores: every edge of the model's graph scored by EAP and EAP-IG, every node by
attribution patching (protocol §5g)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.tableio import read_parquet, write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    edges = hw.edge_scores(m, read_parquet(i.prompts), settings=p.edges)
    write_parquet(edges, o.scores, note=edges.attrs["note"])
    write_parquet(edges.attrs["tables"]["nodes"], o.nodes, note=edges.attrs["note"])
