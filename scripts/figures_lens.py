"""Rule figures_lens: direct effects beside patching's total effect, the logit lens, and the weights'
circuits beside path patching's paths (protocol §5h)."""
from headwatch.figures import lens as figs
from headwatch.figures.style import save
from headwatch.jobs import log_to
from headwatch.tableio import read_parquet

i, o = snakemake.input, snakemake.output
with log_to(snakemake.log[0]):
    save(figs.direct_figure(read_parquet(i.direct), read_parquet(i.direct_heads)), o.direct_pdf, o.direct_png)
    save(figs.lens_figure(read_parquet(i.logit_lens)), o.logit_lens_pdf, o.logit_lens_png)
    save(figs.weights_figure(read_parquet(i.circuits), read_parquet(i.composition), read_parquet(i.paths)),
         o.weights_pdf, o.weights_png)
