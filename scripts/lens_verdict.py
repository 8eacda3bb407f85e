"""Rule lens_verdict: do the weights predict the paths that matter? The composition scores against path
patching's paths, the copying score against the induction score, each a verdict (protocol §5h)."""
import headwatch as hw
from headwatch.jobs import log_to
from headwatch.settings.lens import LensSettings
from headwatch.tableio import read_parquet, write_parquet

i, o, p = snakemake.input, snakemake.output, snakemake.params
with log_to(snakemake.log[0], snakemake.threads):
    circuits = read_parquet(i.circuits)
    circuits.attrs["tables"] = dict(composition=read_parquet(i.composition))
    verdict = hw.weights_vs_paths(circuits, read_parquet(i.paths), read_parquet(i.scores), LensSettings.from_config(p.lens))
    write_parquet(verdict, o.verdict, note=verdict.attrs["note"])
    write_parquet(verdict.attrs["tables"]["top_paths"], o.top_paths, note=verdict.attrs["note"])
