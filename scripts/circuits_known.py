"""Rule circuits_known: the circuit known before looking (protocol §5f): a two-layer character
model trained on repeated random tokens and its control, what each method recovers of it, and
the two trained models (read edge by edge by rule edges_known)."""
from headwatch.circuits.known import run_known
from headwatch.jobs import log_to
from headwatch.sweep.train import save_trained
from headwatch.tableio import write_parquet

p = snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    table, note, models = run_known(p.known, p.patching["batch"])
    vocab = dict(vocab=[f"t{i}" for i in range(p.known["vocab"])])
    note["model_sha256"] = {name: save_trained(model, getattr(snakemake.output, name), vocab, dict(known=p.known))
                            for name, model in models.items()}
    write_parquet(table, snakemake.output.table, note=note)
