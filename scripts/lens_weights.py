"""Rule lens_weights: each head's OV copying and QK same-token scores, every pair's composition scores and
their nulls, from the weights alone (protocol §5h)."""
from pathlib import Path

import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.lens import LensSettings
from headwatch.tableio import write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
settings = LensSettings.from_config(p.lens)   # the rule's slice, typed
device = snakemake.config["device"]   # not a param: where a job runs (rules/common.smk)
with log_to(snakemake.log[0], snakemake.threads):
    m = hw.load_model(Path(i.model).parent, p.dtype, device)
    circuits = hw.weight_circuits(m, settings)
    tables = circuits.attrs["tables"]
    for table, path in ((circuits, o.circuits), (tables["composition"], o.composition), (tables["null"], o.null)):
        write_parquet(table, path, note=circuits.attrs["note"])
