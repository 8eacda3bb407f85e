# headwatch — score, cut, anatomize and sweep the attention heads of a causal LM.
# The protocol is docs/protocol.md; every choice lives in config/config.yaml.
# docs/architecture.md maps the files: rules/ hold rules only; paths, targets and the
# sweep's plan are in the library (headwatch/paths.py, targets.py, sweep/plan.py).
from snakemake.utils import min_version, validate

min_version("9.0")

# A YAML error in config/config.yaml is named with its line and column here (Snakemake's
# own message names neither; a --configfile is read before this file runs: docs/troubleshooting.md).
from headwatch.config import check_keys, check_yaml
from headwatch.workflow.outputs import keep_previous_outputs

check_yaml("config/config.yaml")

configfile: "config/config.yaml"

# Schema first (types, names, defaults), then the checks a schema cannot express
# (heads that do not divide the width, unknown model keys, expected tokens the
# tokenizer splits): both stop before any job runs, naming the key.
check_keys(config, f"{workflow.basedir}/config/schema.yaml")  # misspelled keys, unsafe names: in words
validate(config, "config/schema.yaml")

include: "rules/common.smk"

check_config(config)
check_records()  # a guard record cut short or altered is named before any job

include: "rules/models.smk"
include: "rules/sequences.smk"
include: "rules/attention.smk"
include: "rules/scores.smk"
include: "rules/ablation.smk"
include: "rules/patching.smk"
include: "rules/circuits.smk"
include: "rules/edges.smk"
include: "rules/lens.smk"
include: "rules/anatomy.smk"
include: "rules/sweep.smk"
include: "rules/induction.smk"
include: "rules/figures.smk"
include: "rules/report.smk"

check_report_tables()  # every rule is read: a report table no rule makes is named before any job

# A failed rerun loses nothing: each job's previous outputs are kept aside while it runs and put
# back if it fails (headwatch/workflow/outputs.py).
keep_previous_outputs(workflow)


rule all:
    default_target: True
    input:
        all_targets(),
