"""One sweep's course of training (protocol §7 and §7b, headwatch.sweep.course): where each run
leaves the plateau and forms its previous-token head, and each arm's gap to the reference arm at
every evaluation step, with its verdict."""
import math
from dataclasses import asdict

from headwatch import paths
from headwatch.settings.sweep import CourseJob
from headwatch.sweep.course import course
from headwatch.tableio import read_note, read_parquet, write_parquet
from headwatch.jobs import log_to

with log_to(snakemake.log[0]) as log:
    sm = snakemake
    c = CourseJob.from_config(sm.params.course)
    runs = [dict(r, metrics=read_parquet(paths.run_output(r, "metrics.parquet")),
                 records=read_parquet(paths.run_output(r, "heads.parquet")),
                 start=math.log(read_note(paths.run_output(r, "metrics.parquet"))["vocab_size"]))
            for r in sm.params.runs]
    tables = course(runs, c.reference, c.margin, c.threshold, c.bootstrap)
    note = dict(reference=c.reference, margin=c.margin, threshold=c.threshold, bootstrap=asdict(c.bootstrap),
                start="the loss before the first evaluation: ln V of the run's vocabulary (the untrained model)",
                gap="arm minus reference validation loss, nats per character, paired by seed")
    for name in paths.COURSE_TABLES:
        write_parquet(tables[name], sm.output[name], note=note)
    log.info("verdicts:\n%s", tables["verdicts"].to_string())
    log.info("events per shape:\n%s", tables["events_summary"].to_string())
