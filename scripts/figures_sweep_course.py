"""Figures of one sweep's course of training (headwatch.figures.sweep, protocol §7 and §7b): the
loss and the best previous-token score against the step with the two events marked, and the gaps
to the reference arm with their intervals and verdicts."""
from headwatch.figures import sweep as figs
from headwatch.figures.style import save
from headwatch.tableio import read_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]):
    sm = snakemake
    t = {name: read_parquet(sm.input[name]) for name in ("curves", "events", "events_summary", "gaps", "verdicts")}
    save(figs.course_events(t["curves"], t["events"], t["events_summary"], sm.wildcards.sweep, sm.params.threshold),
         sm.output.events_pdf, sm.output.events_png)
    save(figs.course_gaps(t["gaps"], t["verdicts"], sm.wildcards.sweep), sm.output.gaps_pdf, sm.output.gaps_png)
