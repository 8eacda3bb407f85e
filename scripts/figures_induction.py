"""Rule figures_induction: the induction sweep's three figures from its tables (protocol §7c)."""
from headwatch.figures.induction import final_heads, loss_curves, phase_steps
from headwatch.figures.style import save
from headwatch.induction.analysis import arm_shapes
from headwatch.jobs import log_to
from headwatch.settings.induction import InductionSettings
from headwatch.tableio import read_note, read_parquet

with log_to(snakemake.log[0]):
    sm = snakemake
    t = {name: read_parquet(sm.input[name]) for name in ("runs", "curves", "heads", "summary", "contrasts")}
    arms = arm_shapes(InductionSettings.from_config(dict(arms=read_note(sm.input.runs)["arms"])))
    save(loss_curves(t["curves"], t["runs"], sm.params.margin), sm.output.curves_pdf, sm.output.curves_png)
    save(phase_steps(t["runs"], t["summary"], t["contrasts"], arms, int(t["curves"]["step"].max())),
         sm.output.phase_pdf, sm.output.phase_png)
    save(final_heads(t["heads"], t["runs"], sm.params.threshold), sm.output.heads_pdf, sm.output.heads_png)
