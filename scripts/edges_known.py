"""Rule edges_known: the circuit known before looking and its control (protocol §5f), read edge by
edge (§5g): each method's faithfulness curve over every circuit size, and whether the smallest
faithful circuit holds the previous-token -> induction-key edge."""
from headwatch import paths
from headwatch.circuits.faithfulness import run_known_edges
from headwatch.circuits.known import KNOWN_NAMES
from headwatch.jobs import log_to
from headwatch.model.arch import Adapter
from headwatch.settings.edges import EdgesSettings
from headwatch.sweep.train import load_trained
from headwatch.tableio import read_note, write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    sha = read_note(i.table)["model_sha256"]          # the models circuits_known trained and read
    models = {}
    for name in paths.KNOWN_MODELS:
        model, _ = load_trained(getattr(i, name), sha256=sha[name])
        models[KNOWN_NAMES[name]] = (model, Adapter(model))
    claims, curves, note = run_known_edges(models, p.known, EdgesSettings.from_config(p.edges))
    write_parquet(claims, o.known_edges, note=note)
    write_parquet(curves, o.known_edge_curves, note=note)
