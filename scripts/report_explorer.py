"""Rule report_explorer: the explorer page of one model, from its tables."""
from pathlib import Path

from headwatch.tableio import read_note, read_parquet
from headwatch.explorer import PANELS, ExplorerTables, build_explorer, model_shape, reference_base, rotary_options
from headwatch.jobs import log_to

i, p, w = snakemake.input, snakemake.params, snakemake.wildcards


def table(key):
    """An input table with its note on ``attrs`` (what a section's line reads: thresholds, sizes, methods)."""
    t = read_parquet(i[key])
    t.attrs["note"] = read_note(i[key])
    return t


with log_to(snakemake.log[0]) as log:
    shape = model_shape(Path(i.model).parent, p.dtype)
    rotary = rotary_options(w.model, shape, [reference_base(path) for path in i.references])
    names = [n for panel in PANELS.values() for n in panel.tables if n in i.keys()]
    tables = {n: table(n) for n in dict.fromkeys(names)}
    sources = {key: i[key] for key in ("maps", "tokens", "scores", "predictions", *tables) if key in i.keys()}
    log.info("explorer for %s: %s; sections' tables: %s", w.model, shape, sorted(tables) or "none")
    page = ExplorerTables(read_parquet(i.maps), read_parquet(i.tokens), read_parquet(i.scores), model=w.model,
                          shape=shape, quantum=p.quantum, predictions=read_parquet(i.predictions), tables=tables,
                          rotary=rotary, rotary_distance=p.rotary_distance, sources=sources)
    html = build_explorer(page, out=snakemake.output[0])
    log.info("wrote %s: %d bytes", snakemake.output[0], len(html.encode()))
