"""Rule lens_known: the circuit known before looking (protocol §5f) read by the weights: is the
previous-token head -> induction head's key the first edge by composition score (protocol §5h)?"""
from headwatch import paths
from headwatch.circuits.known import KNOWN_NAMES
from headwatch.jobs import log_to
from headwatch.lens.prediction import run_known_weights
from headwatch.model.arch import Adapter
from headwatch.settings.lens import LensSettings
from headwatch.sweep.train import load_trained
from headwatch.tableio import read_note, write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    note = read_note(i.table)             # the models circuits_known trained, and the heads its attention named
    models = {}
    for name in paths.KNOWN_MODELS:
        model, _ = load_trained(getattr(i, name), sha256=note["model_sha256"][name])
        models[KNOWN_NAMES[name]] = (model, Adapter(model))
    table, known = run_known_weights(models, note, LensSettings.from_config(p.lens))
    write_parquet(table, o.table, note=known)
