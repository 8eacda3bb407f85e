"""Rule figures_induction: the induction sweep's three figures from its tables (protocol §7c)."""
from headwatch.figures.induction import final_heads, loss_curves, survival_curves
from headwatch.figures.style import save
from headwatch.jobs import log_to
from headwatch.tableio import read_parquet

with log_to(snakemake.log[0]):
    sm = snakemake
    t = {name: read_parquet(sm.input[name]) for name in ("runs", "curves", "heads", "summary", "survival")}
    save(loss_curves(t["curves"], t["runs"], sm.params.margin), sm.output.curves_pdf, sm.output.curves_png)
    save(survival_curves(t["survival"], t["summary"]), sm.output.survival_pdf,
         sm.output.survival_png)
    save(final_heads(t["heads"], t["runs"], sm.params.threshold), sm.output.heads_pdf, sm.output.heads_png)
