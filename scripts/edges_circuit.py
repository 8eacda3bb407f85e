"""Rule edges_circuit: the smallest faithful circuit with the roles §5d-§5e give its heads, and the
head -> head edges against path patching (protocol §5g). Tables only: no model is run."""
from headwatch.circuits.faithfulness import agreement, best_circuit, head_roles
from headwatch.circuits.graph import EdgeGraph
from headwatch.jobs import log_to
from headwatch.settings.edges import EdgesSettings
from headwatch.tableio import read_note, read_parquet, write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
edges = EdgesSettings.from_config(p.edges)
with log_to(snakemake.log[0], snakemake.threads):
    scores, curves = read_parquet(i.scores), read_parquet(i.faithfulness)
    graph = EdgeGraph(**read_note(i.scores)["graph"])
    paths = read_parquet(i.paths)
    roles = head_roles(read_parquet(i.heads), paths, p.top_k, p.edge_threshold)
    circuit, note = best_circuit(scores, curves, edges, graph, roles)
    write_parquet(circuit, o.circuit, note=note)
    table = agreement(scores, paths, edges.methods, edges.agreement_top_k)
    write_parquet(table, o.agreement, note=dict(
        compared="each method's score of the edge sender head -> receiver head's query (or its group's key or "
                 "value) against path patching's normalized score of the same edge (§5e)",
        spearman="rank correlation over the edges path patching measured", shared="of the top_k by |score|"))
