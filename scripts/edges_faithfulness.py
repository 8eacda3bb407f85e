"""Rule edges_faithfulness: circuits of the MIB benchmark's sizes run with every edge outside them
patched, their faithfulness curves and areas (CPR, CMD), and the guards (protocol §5g)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.tableio import read_parquet, write_parquet, write_record

i, o, p = snakemake.input, snakemake.output, snakemake.params
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    edges = read_parquet(i.scores)
    edges.attrs["tables"] = {"nodes": read_parquet(i.nodes)}
    curves = hw.edge_faithfulness(m, read_parquet(i.prompts), edges, settings=p.edges)
    write_record(curves.attrs["guards"], o.guards)
    write_parquet(curves, o.faithfulness, note=curves.attrs["note"])
    write_parquet(curves.attrs["tables"]["areas"], o.areas, note=curves.attrs["note"])
