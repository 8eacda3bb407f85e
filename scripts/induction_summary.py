"""Rule induction_summary: every run's phase change, heads and circuit; per shape their means with
intervals over seeds; the contrasts fixed before the data and the controls (protocol §7c)."""
from dataclasses import asdict

from headwatch import paths
from headwatch.induction.analysis import summarize
from headwatch.jobs import log_to
from headwatch.settings.induction import InductionSettings, jobs, shapes
from headwatch.settings.sweep import BootstrapSettings
from headwatch.tableio import read_parquet, write_parquet

with log_to(snakemake.log[0]) as log:
    p = snakemake.params
    s = InductionSettings.from_config(p.induction)
    size = {k: (w, h) for k, w, h in shapes(s)}
    runs = [dict(task=task, shape=shape, width=size[shape][0], heads=size[shape][1],
                 **{name: read_parquet(paths.induction_run(task, shape, name)) for name in paths.INDUCTION_RUN_FILES})
            for task, shape in jobs(s)]
    bootstrap = asdict(BootstrapSettings.of(p.bootstrap))
    tables = summarize(runs, s, p.plateau_margin, bootstrap)
    note = dict(threshold=s.threshold, margin=s.margin, plateau_margin=p.plateau_margin, bootstrap=bootstrap,
                arms={k: asdict(v) for k, v in s.arms.items()},
                phase="the first evaluation whose loss on the predictable part lies `margin` below the unordered "
                      "reference (the best predictor without the context's order)",
                formation="the first evaluation whose best head's induction score lies `threshold` above uniform "
                          "attention's (prev: whose best prev score reaches `threshold`)",
                contrast="more - fewer heads of an arm: the phase-change step, paired by seed over the seeds where "
                         "both changed phase, mean with its percentile bootstrap interval")
    for name in paths.INDUCTION_TABLES:
        write_parquet(tables[name], snakemake.output[name], note=note)
    log.info("per shape:\n%s", tables["summary"][["task", "shape", "seeds", "changed", "formed", "circuits",
                                                  "phase_step_mean"]].to_string())
    log.info("contrasts:\n%s", tables["contrasts"].to_string())
    log.info("controls:\n%s", tables["controls"].to_string())
