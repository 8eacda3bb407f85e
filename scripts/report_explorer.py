"""Rule report_explorer: the explorer page of one model, from its tables."""
from pathlib import Path

from headwatch.tableio import read_note, read_parquet
from headwatch.explorer import build_explorer, model_shape, reference_base, rotary_options
from headwatch.jobs import log_to

i, p, w = snakemake.input, snakemake.params, snakemake.wildcards
OPTIONAL = ("predictions", "topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary",
            "patching_heads", "patching_resid", "patching_kv_groups", "circuits_paths", "edges_circuit",
            "edges_areas", "sweep_summary", "sweep_contrast")
with log_to(snakemake.log[0]) as log:
    shape = model_shape(Path(i.model).parent, p.dtype)
    rotary = rotary_options(w.model, shape, [reference_base(path) for path in i.references])
    tables = {key: read_parquet(i[key]) for key in OPTIONAL if key in i.keys()}
    if "patching_heads" in tables:
        tables["patching_note"] = read_note(i.patching_heads)
    if "circuits_paths" in tables:
        tables["circuits_note"] = read_note(i.circuits_paths)      # its edge_threshold: circuits.edge_threshold
    if "edges_circuit" in tables:
        tables["edges_note"] = read_note(i.edges_circuit)          # its method, threshold and size
    sources = {key: i[key] for key in ("maps", "tokens", "scores") + OPTIONAL if key in i.keys()}
    log.info("explorer for %s: %s; optional tables: %s", w.model, shape, sorted(tables) or "none")
    html = build_explorer(read_parquet(i.maps), read_parquet(i.tokens), read_parquet(i.scores),
                          model=w.model, shape=shape, quantum=p.quantum, rotary=rotary,
                          rotary_distance=p.rotary_distance, sources=sources, out=snakemake.output[0],
                          **tables)
    log.info("wrote %s: %d bytes", snakemake.output[0], len(html.encode()))
