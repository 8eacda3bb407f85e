"""Rule induction_summary: every run's events, where it stopped and its circuit; per cell of the grid
the Kaplan-Meier curves and medians of the time to each event; the regression on heads and head size
and its verdicts fixed before the run; the controls (protocol §7c)."""
from dataclasses import asdict

from headwatch import paths
from headwatch.induction.analysis import COVARIATES, summarize
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
                grid=asdict(s.grid), covariates=list(COVARIATES),
                phase="the first evaluation whose loss on the predictable part lies `margin` below the unordered "
                      "reference (the best predictor without the context's order)",
                formation="the first evaluation whose best head's induction score lies `threshold` above uniform "
                          "attention's (prev: whose best prev score reaches `threshold`)",
                censoring="a run without an event when it stopped (at the cap, or a control) is censored at its "
                          "last step: counted, not dropped",
                regression="Cox proportional hazards (statsmodels PHReg, Efron's ties) of each event on log2 heads "
                           "and log2 head size together, per task: hazard ratios per doubling with 95 % intervals; "
                           "ph_p: Schoenfeld residuals against the rank of the event step")
    for name in paths.INDUCTION_TABLES:
        write_parquet(tables[name], snakemake.output[name], note=note)
    log.info("per cell:\n%s", tables["summary"][["task", "shape", "runs", "changed", "formed", "capped",
                                                  "phase_median", "induction_median"]].to_string())
    log.info("regression:\n%s", tables["regression"][["task", "event", "covariate", "hr", "hr_lo", "hr_hi",
                                                        "ph_p", "verdict"]].to_string())
    log.info("controls:\n%s", tables["controls"].to_string())
