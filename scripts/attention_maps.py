"""Rule attention_maps: every head's map on every phrase, and the predictions."""
from pathlib import Path

from headwatch.attention import phrase_outputs
from headwatch.tableio import read_parquet, write_parquet
from headwatch.models import load_prepared
from headwatch.workflow import log_to

p, out = snakemake.params, snakemake.output
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    model, tokenizer, adapter = load_prepared(Path(snakemake.input.model).parent, p.dtype, device)
    maps, tokens, predictions = phrase_outputs(model, tokenizer, read_parquet(snakemake.input.phrases),
                                               p.quantum, p.top, adapter)
    write_parquet(maps, out.maps, note=dict(
        weight=f"quantized to 1/{p.quantum}: stored rows sum to 1 only within that step per cell",
        cells="row >= col only; cells above the diagonal are 0 (causal mask) and not stored",
        rows="the token that looks", cols="the token looked at", model=adapter.describe()))
    write_parquet(tokens, out.tokens)
    write_parquet(predictions, out.predictions)
