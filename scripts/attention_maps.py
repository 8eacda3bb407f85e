"""Rule attention_maps: every head's map on every phrase, and the predictions."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.tableio import read_parquet, write_parquet

p, out = snakemake.params, snakemake.output
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(snakemake.input.model).parent, p.dtype, device)
    maps = hw.attention_maps(m, read_parquet(snakemake.input.phrases), p.quantum, p.top)
    write_parquet(maps, out.maps, note=dict(
        weight=f"quantized to 1/{p.quantum}: stored rows sum to 1 only within that step per cell",
        cells="row >= col only; cells above the diagonal are 0 (causal mask) and not stored",
        rows="the token that looks", cols="the token looked at", model=m.adapter.describe()))
    write_parquet(maps.attrs["tables"]["tokens"], out.tokens)
    write_parquet(maps.attrs["tables"]["predictions"], out.predictions)
