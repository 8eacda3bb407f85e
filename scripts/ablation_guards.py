"""Rule ablation_guards: merge every ablation rule's guard record into guards.json."""
from headwatch.ablation.guards import merge_guards
from headwatch.tableio import read_record, write_record
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    records = {name: read_record(path) for name, path in snakemake.input.items()}
    write_record(merge_guards(records), snakemake.output[0])
