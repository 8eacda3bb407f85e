"""Rule anatomy_weight_check: one head's map recomputed by hand from the weights (fatal above its rounding bound)."""
from pathlib import Path

from headwatch.anatomy import run
from headwatch.settings.anatomy import HeadAddress
from headwatch.tableio import read_parquet, write_json
from headwatch.jobs import log_to

p = snakemake.params
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    write_json(run.run_weight_check(Path(snakemake.input.model).parent, read_parquet(snakemake.input.phrases),
                                    p.phrase, HeadAddress.from_config(p.head), p.rounding_factor, p.dtype, device),
               snakemake.output[0])
