"""Rule anatomy_head_slices: where one head lives in the real tensors."""
from pathlib import Path

from headwatch.anatomy import run
from headwatch.settings.anatomy import HeadAddress
from headwatch.tableio import write_json
from headwatch.jobs import log_to

p = snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    write_json(run.run_head_slices(Path(snakemake.input.model).parent, HeadAddress.from_config(p.head), p.dtype),
               snakemake.output[0])
