"""Rule ablation_guards: merge every ablation rule's guard record into guards.json."""
import json

from headwatch.guards import merge_guards
from headwatch.tableio import write_json
from headwatch.workflow import log_to

with log_to(snakemake.log[0]):
    records = {name: json.loads(open(path).read()) for name, path in snakemake.input.items()}
    write_json(merge_guards(records), snakemake.output[0])
