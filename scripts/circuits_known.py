"""Rule circuits_known: the circuit known before looking (protocol §5f): a two-layer character
model trained on repeated random tokens and its control, and what each method recovers of it."""
from headwatch.circuits.known import run_known
from headwatch.tableio import write_parquet
from headwatch.jobs import log_to

p = snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    table, note = run_known(p.known, p.patching["batch"])
    write_parquet(table, snakemake.output[0], note=note)
