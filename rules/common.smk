# Helpers shared by every stage: the slices of the config each job depends on, the input
# functions, and what the default target asks for. The rules files hold rules only.
# Paths are built by headwatch/paths.py, the targets by headwatch/workflow/targets.py, the sweep's
# plan by headwatch/sweep/plan.py (all three are tested without Snakemake).
from pathlib import Path

from headwatch import paths
from headwatch.workflow import gpu_shares, targets
from headwatch.config import ConfigError, check_config as _check_config, check_devices as _check_devices, model_entry
from headwatch.names import SAFE_NAME, SCORES
from headwatch.scores.sequences import SETS, set_params
from headwatch.settings import induction as induction_settings
from headwatch.settings.sweep import StudySettings, course_sweeps, summary_pairs, summary_slice
from headwatch.sweep import plan as sweep_plan
from headwatch.tableio import broken_records

# A wildcard that holds a name from the config is held to the schema's safe-name pattern
# (headwatch.names.SAFE_NAME = config/schema.yaml definitions.name): no rule can plan a path
# outside results/ and figures/, whatever a name holds (tests/test_hostile.py).
wildcard_constraints:
    model=SAFE_NAME,
    phrase=SAFE_NAME,
    score="|".join(SCORES),
    set="|".join(SETS),

# The gpu resource, counted in shares (headwatch/workflow/gpu_shares.py): a job that runs a model
# asks for GPU_JOB shares, a training job for GPU_TRAIN_JOB, so that model_jobs_per_gpu model jobs,
# or sweep.jobs_per_gpu training jobs, run beside each other on one GPU.
GPU_JOB, GPU_TRAIN_JOB = gpu_shares.share_gpus(workflow, config["sweep"]["jobs_per_gpu"],
                                               config["model_jobs_per_gpu"])


def check_config(config):
    """Semantic checks that a JSON schema cannot express (headwatch/config/). The memory the
    jobs need is compared with this machine's only where they run here: a cluster's jobs run
    on its nodes (as for devices, below)."""
    local = workflow.local_exec and not workflow.remote_exec
    verdict = _check_config(config, workdir=Path(workflow.basedir), **({} if local else dict(meminfo=None)))
    FAMILIES.update(verdict.families)


FAMILIES = {}
"""Each studied model's model_type, from the pre-job checks: a family without an edge graph gets no
edge circuits (headwatch/workflow/targets.py: edge_models)."""


def check_records():
    """The guard records of the studied models are read before any job (headwatch.tableio:
    read_record): one that is cut short, overwritten or altered is named with the rule that
    remakes it, even when Snakemake would find nothing to do."""
    errors = broken_records(targets.guard_records(config))
    if errors:
        raise ConfigError("a guard record cannot be trusted:\n  " + "\n  ".join(errors))


def check_report_tables():
    """Every table report.tables names is one some rule makes (headwatch.workflow.targets.unmade_tables),
    checked once every rules file is read, before any job."""
    errors = targets.unmade_tables(config, report_producible)
    if errors:
        raise ConfigError("report.tables names a table that no job of this workflow writes\n  " + "\n  ".join(errors))


def check_devices():
    """A CUDA device that this machine lacks, refused when a run starts (onstart, before any job)
    if its jobs run here; a cluster's jobs run on its nodes, whose GPUs the login node need not
    have. The device is not a param: changing it reruns nothing (headwatch/config/devices.py)."""
    if workflow.local_exec:
        _check_devices(config)


def studied_models():
    return list(config["models_studied"])


def get_dtype(model):
    return model_entry(config, model)["dtype"]


def model_source(model):
    """Where a model comes from: the part of its entry that its preparation depends on."""
    return {k: v for k, v in model_entry(config, model).items() if k in ("gguf", "source")}


def sequence_params(wildcards):
    return set_params(wildcards.set, config)


def ablation_slice(*keys):
    """The part of config["ablation"] an experiment depends on (its params: only stale jobs rerun)."""
    return {key: config["ablation"][key] for key in list(keys) + ["batch", "rounding_factor", "hook_tolerance",
                                                                   "method"]}


def reference_configs(names):
    return [paths.reference_config(n) for n in names]


def anatomy_sweep_shapes():
    """The slice of the sweep config that fixes its model shapes (not its training)."""
    s = config["sweep"]
    return dict(model=s["model"], sweeps={k: {"grid": v["grid"]} for k, v in s["sweeps"].items()})


def sweep_corpus_inputs(wildcards):
    return sweep_plan.corpus_inputs(config["sweep"])


def sweep_train_inputs(wildcards):
    """The ids a stack's training job reads: the corpus's characters, or its vocabulary's files (rule
    sweep_vocab); a stack's models read one vocabulary."""
    run = sweep_plan.stack_runs(config["sweep"], wildcards.sweep, wildcards.stack)[0]
    vocab = sweep_plan.job_vocab(config["sweep"], wildcards.sweep, run["shape"])
    if vocab == sweep_plan.CHAR:
        return dict(ids=paths.sweep_corpus("ids"), meta=paths.sweep_corpus("meta"))
    return {part: paths.sweep_vocab(vocab, part) for part in paths.VOCAB_FILES}


def sweep_stack_params(wildcards):
    """Exactly the slice of config one stack's training job depends on (each member's)."""
    return sweep_plan.stack_params(config["sweep"], wildcards.sweep, wildcards.stack)


def sweep_priority(wildcards):
    """The longest training jobs first (their expected cost, headwatch/sweep/plan.py: stack_priority), so
    that both cores stay busy to the end instead of a long job running alone at the end."""
    return sweep_plan.stack_priority(config["sweep"], wildcards.sweep, wildcards.stack)


def sweep_run_stack(wildcards):
    """The folder of the stack that trains a run; raises for a run another sweep owns (it is read
    from there, never retrained)."""
    return paths.sweep_stack(wildcards.sweep, sweep_plan.stack_of(config["sweep"], wildcards.sweep,
                                                                  wildcards.shape, int(wildcards.seed)))


def sweep_summary_runs():
    """The default pair's runs (sweep.summary): every planned sweep without a study that no other pair names."""
    return sweep_plan.summary_runs(config["sweep"])


def sweep_summary_inputs(wildcards):
    """Every run's metrics, read from the sweep that trains it (w256-h4 of `width` comes from
    heads_split/ when both sweeps train it the same way)."""
    return [paths.run_output(r, "metrics.parquet") for r in sweep_summary_runs()]


def sweep_summary_params():
    """The default pair's slice of sweep.summary (its split and capacity sweeps, the bootstrap)."""
    return summary_slice(config["sweep"])


def sweep_pair_constraint():
    """The {pair} wildcard: the summarized pairs of sweep.summary.pairs (a pattern matching nothing if none)."""
    return "|".join(summary_pairs(config["sweep"])) or "(?!)"


def sweep_pair_runs(wildcards):
    """One pair's runs: those of its split and capacity sweeps, each read from the sweep that trains it."""
    return sweep_plan.summary_runs(config["sweep"], wildcards.pair)


def sweep_pair_inputs(wildcards):
    return [paths.run_output(r, "metrics.parquet") for r in sweep_pair_runs(wildcards)]


def sweep_pair_params(wildcards):
    """One pair's slice of sweep.summary (its split and capacity sweeps, the bootstrap): editing another pair
    reruns nothing of this one."""
    return summary_slice(config["sweep"], wildcards.pair)


def sweep_heads_cut_params():
    """The cut's slice of sweep.heads (its sequences; not the probe, which the training job ran)."""
    return {k: config["sweep"]["heads"][k] for k in ("seed", "cut_sequences")}


def sweep_heads_ablation_params():
    """The §5a settings the sweep models' cut reads (top_n and k are 1: the top induction head)."""
    return {k: config["ablation"][k] for k in ("random_draws", "seed", "method", "batch", "rounding_factor",
                                                "hook_tolerance", "guard_sequences")}


def sweep_heads_inputs(wildcards):
    """Every trained model of the split and capacity sweeps (once each, from its owner): its
    metrics, its heads' records and its cut."""
    trained = {paths.run_output(r, "metrics.parquet"): r for r in sweep_summary_runs()}.values()
    return dict(metrics=[paths.run_output(r, "metrics.parquet") for r in trained],
                heads=[paths.run_output(r, "heads.parquet") for r in trained],
                cut=[paths.sweep_heads_cut(r["trained_under"], r["shape"], r["seed"]) for r in trained])


def sweep_course_sweeps():
    """{sweep: reference shape} of the planned sweeps whose course is read (sweep.course)."""
    return course_sweeps(config["sweep"])


def sweep_course_constraint():
    """The {sweep} wildcard of the course's rules: those sweeps only (a pattern matching nothing if none)."""
    return "|".join(sweep_course_sweeps()) or "(?!)"


def sweep_course_runs(wildcards):
    """The sweep's runs, each read from the sweep that trains it."""
    return [r for r in sweep_plan.runs(config["sweep"]) if r["sweep"] == wildcards.sweep]


def sweep_course_inputs(wildcards):
    runs = sweep_course_runs(wildcards)
    return dict(metrics=[paths.run_output(r, "metrics.parquet") for r in runs],
                heads=[paths.run_output(r, "heads.parquet") for r in runs])


def sweep_course_params(wildcards):
    """Exactly what one sweep's course reads: its reference, the margin, the formation threshold and
    the bootstrap (its runs are sweep_course_runs)."""
    s = config["sweep"]
    return dict(reference=sweep_course_sweeps()[wildcards.sweep], margin=s["course"]["margin"],
                threshold=s["heads"]["threshold"], bootstrap=s["summary"]["bootstrap"])


def sweep_studies():
    return sweep_plan.studies(config["sweep"])


def sweep_study_constraint():
    """The {study} wildcard: the planned study sweeps only (a pattern matching nothing if none)."""
    return "|".join(sweep_studies()) or "(?!)"


def sweep_study_runs(wildcards):
    return sweep_plan.study_runs(config["sweep"], wildcards.study)


def sweep_study_inputs(wildcards):
    return [paths.run_output(r, "metrics.parquet") for r in sweep_study_runs(wildcards)]


def sweep_study_block(wildcards):
    return config["sweep"]["sweeps"][wildcards.study]["study"]


def sweep_study_own(wildcards):
    """The study's own settings: its kind's keys, their defaults filled in (headwatch/settings/kinds.py)."""
    return StudySettings.of(sweep_study_block(wildcards)).own


def report_producible(path):
    """Does some rule of this workflow write ``path``?"""
    return any(r.is_producer(path) for r in workflow.rules)


def explorer_inputs(wildcards):
    return targets.explorer_inputs(wildcards.model, config, report_producible, FAMILIES)


def all_targets():
    return targets.all_targets(config, report_producible, FAMILIES)


# ------------------------------------------------------------------ the induction sweep (§7c)
INDUCTION_TASKS = induction_settings.TASK_NAMES


def _induction():
    return induction_settings.InductionSettings.from_config(config["induction"])


def induction_job_params(wildcards):
    """Exactly the slice of `induction:` one training job (a task and a shape, every seed) reads."""
    return induction_settings.job_params(config["induction"], wildcards.task, wildcards.shape)


def induction_priority(wildcards):
    """The longest jobs first, so that the cores stay busy to the end: the job's multiply-adds
    (headwatch/settings/induction.py: job_macs), in units of 10^8."""
    return int(round(induction_settings.job_macs(config["induction"], wildcards.task, wildcards.shape) / 1e8))


def induction_summary_inputs(wildcards):
    return {f"{task}/{shape}/{name}": paths.induction_run(task, shape, name)
            for task, shape in induction_settings.jobs(_induction()) for name in paths.INDUCTION_RUN_FILES}


def induction_summary_params():
    """What the summary reads of `induction:`: its grid, the jobs it reads, the threshold and the margin."""
    s = config["induction"]
    return dict(grid=s["grid"], run=s["run"], shapes=s["shapes"], seeds=s["seeds"], control_seeds=s["control_seeds"],
                threshold=s["threshold"], margin=s["margin"])



# ------------------------------------------------------------------ edge circuits (§5g)
def edges_slice(*keys):
    """The part of config["edges"] a job depends on (its params, so that only stale jobs rerun)."""
    return {key: config["edges"][key] for key in keys}


# ------------------------------------------------------------------ the lens (§5h)
def lens_slice(*keys):
    """The part of config["lens"] a job depends on (its params, so that only stale jobs rerun)."""
    return {key: config["lens"][key] for key in keys}
