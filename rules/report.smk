# Stage "report" (protocol §8): the explorer page of each studied model
# (results/{model}/explorer.html) and the key tables rendered as HTML pages for
# Snakemake's own report (`make report` = snakemake --report results/report.html;
# every figure output is declared with report(...) in the rules files, with a
# caption under report/).
#
# The explorer needs the spine tables (maps, tokens, predictions, scores); the
# ablation and sweep tables are inputs whenever a rule of this workflow produces
# them (so the page has those sections in the full DAG, and a workflow without
# those stages still builds a page). Rule names are not consulted: a table is
# required exactly when some rule's output matches its path.
#
# The run a report describes: every run that executes jobs (make quick/run/quick-more
# or a plain `snakemake --configfile ...`) records its merged configuration in
# results/run_config.yaml (onstart below; dry runs and --report record nothing), and
# `make report` hands that file back with --configfile. The captions name the scale
# of the configuration they are rendered with (config["report_run"], computed here
# by comparing it with config/config.yaml and the quick overlays) and the workflow
# page says when it differs from the recorded run.
import json
import os
from datetime import datetime

import yaml
from snakemake.common.configfile import load_configfile
from snakemake.exceptions import WorkflowError
from snakemake.utils import update_config

report: "../report/workflow.rst"

RUN_CONFIG = f"{RESULTS}/run_config.yaml"
# The overlays that define the scales (Makefile: make quick, make quick-more).
SCALES = [
    ("paper", "paper scale", []),
    ("quick", "quick scale", ["config/quick.yaml"]),
    ("quick+studies", "quick scale with the sweep studies", ["config/quick.yaml", "config/quick_more.yaml"]),
]


def _leaves(d, prefix=()):
    """{path tuple: value} of a nested dict; lists and empty dicts are values."""
    out = {}
    for key, value in d.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, prefix + (key,)))
        else:
            out[prefix + (key,)] = value
    return out


def _differences(a, b):
    """Dotted keys whose values differ between two configs (a key missing on one side included)."""
    la, lb = _leaves(a), _leaves(b)
    return sorted(".".join(map(str, k)) for k in set(la) | set(lb) if la.get(k, KeyError) != lb.get(k, KeyError))


def _config_of(*files):
    """config/config.yaml with ``files`` laid over it, merged the way Snakemake merges --configfile."""
    out = {}
    for name in ("config/config.yaml",) + tuple(files):
        update_config(out, load_configfile(str(Path(workflow.basedir) / name)))
    return out


def run_scale(cfg):
    """(scale name, sentence) of a config: which of SCALES its scale keys — every key the
    quick overlays set — match, or 'custom' with the keys that differ from the paper scale."""
    keys = set()
    for _, _, files in SCALES:
        for name in files:
            keys |= set(_leaves(load_configfile(str(Path(workflow.basedir) / name))))
    mine = _leaves(cfg)
    for name, label, files in SCALES:
        ref = _leaves(_config_of(*files))
        if all(mine.get(k, KeyError) == ref.get(k, KeyError) for k in keys):
            over = " and ".join(files)
            return name, f"{label} ({over + ' over ' if over else ''}config/config.yaml{'' if over else ' as it is'})"
    paper = _leaves(_config_of())
    off = sorted(".".join(map(str, k)) for k in keys if mine.get(k, KeyError) != paper.get(k, KeyError))
    shown = ", ".join(off[:12]) + (f" and {len(off) - 12} more keys" if len(off) > 12 else "")
    return "custom", f"custom scale (differs from the paper scale of config/config.yaml at {shown})"


def _recorded_run():
    """(config files, differences from this config) of the recorded run, or (None, [])."""
    if not Path(RUN_CONFIG).exists():
        return None, []
    text = Path(RUN_CONFIG).read_text()
    try:
        recorded = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise WorkflowError(f"{RUN_CONFIG} (the record of the last run) is not valid YAML; "
                            f"delete it, the next run writes it again ({err})")
    files = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("# config files:")), "")
    return files, _differences(recorded, _run_config())


def _run_config():
    """The configuration as the run uses it (without the report's own computed key)."""
    return {k: v for k, v in config.items() if k != "report_run"}


def _config_files():
    """The config files of this run in merge order: the Snakefile's, then those given with
    --configfile (paths relative to the working directory when inside it)."""
    given = [os.path.relpath(f) if not os.path.relpath(f).startswith("..") else str(f)
             for f in map(str, workflow.overwrite_configfiles)]
    own = [str(f) for f in workflow.configfiles if os.path.relpath(str(f)) not in given and str(f) not in given]
    return " + ".join(own + given)


_scale, _scale_text = run_scale(_run_config())
_recorded_files, _recorded_diff = _recorded_run()
config["report_run"] = dict(scale=_scale, scale_text=_scale_text, record=RUN_CONFIG,
                            recorded_files=_recorded_files, recorded_differences=_recorded_diff)


onstart:
    # Record this run's merged configuration (what `make report` reports on).
    Path(RUN_CONFIG).parent.mkdir(parents=True, exist_ok=True)
    _tmp = f"{RUN_CONFIG}.tmp"
    with open(_tmp, "w") as fh:
        fh.write("# The merged configuration of the last run that executed jobs, written by\n"
                 "# rules/report.smk (onstart). `make report` passes it back with --configfile.\n"
                 f"# config files: {_config_files()}\n"
                 f"# written: {datetime.now().isoformat(timespec='seconds')}\n")
        # (a JSON round trip turns a JSON config's OrderedDicts into plain dicts for YAML)
        yaml.safe_dump(json.loads(json.dumps(_run_config())), fh, sort_keys=False, allow_unicode=True)
    os.replace(_tmp, RUN_CONFIG)


REPORT = config.get("report", {})
for _ref in REPORT.get("explorer", {}).get("rotary_references", []):
    if not (Path(workflow.basedir) / "config" / "models" / f"{_ref}.json").exists():
        raise WorkflowError(f"report.explorer.rotary_references: {_ref!r} has no reference config "
                            f"config/models/{_ref}.json")


def report_producible(path):
    """Does some rule of this workflow write ``path``?"""
    return any(r.is_producer(path) for r in workflow.rules)


EXPLORER_ABLATION = {name: f"ablation/{name}.parquet" for name in
                     ("topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary")}
EXPLORER_SWEEP = {"sweep_summary": f"{RESULTS}/sweep/summary.parquet",
                  "sweep_contrast": f"{RESULTS}/sweep/contrast.parquet"}


def explorer_inputs(wildcards):
    m = wildcards.model
    inputs = dict(model=prepared(m),
                  maps=f"{RESULTS}/{m}/attention/maps.parquet",
                  tokens=f"{RESULTS}/{m}/attention/tokens.parquet",
                  predictions=f"{RESULTS}/{m}/predictions.parquet",
                  scores=f"{RESULTS}/{m}/scores.parquet",
                  references=[f"config/models/{r}.json" for r in REPORT["explorer"]["rotary_references"]])
    for key, rel in EXPLORER_ABLATION.items():
        if report_producible(f"{RESULTS}/{m}/{rel}"):
            inputs[key] = f"{RESULTS}/{m}/{rel}"
    for key, path in EXPLORER_SWEEP.items():
        if report_producible(path):
            inputs[key] = path
    return inputs


rule report_explorer:
    input:
        unpack(explorer_inputs),
    output:
        report(f"{RESULTS}/{{model}}/explorer.html", caption="../report/explorer.rst", category="explorer",
               subcategory="{model}"),
    params:
        quantum=config["attention"]["quantum"],
        dtype=lambda w: get_dtype(w.model),
        rotary_distance=REPORT["explorer"]["rotary_distance"],
    log:
        f"{RESULTS}/logs/report_explorer/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_explorer/{{model}}.tsv"
    script:
        "../scripts/report_explorer.py"


# Key tables as HTML pages (Snakemake's report shows HTML, not Parquet):
# results/{scope}/{name}.parquet -> results/tables/{scope}/{name}.html.
rule report_table:
    input:
        f"{RESULTS}/{{scope}}/{{name}}.parquet",
    output:
        report(f"{RESULTS}/tables/{{scope}}/{{name}}.html", caption="../report/table.rst", category="tables",
               subcategory="{scope}"),
    wildcard_constraints:
        scope=r"[A-Za-z0-9_.\-]+",
        name=r"[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*",
    log:
        f"{RESULTS}/logs/report_table/{{scope}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_table/{{scope}}/{{name}}.tsv"
    script:
        "../scripts/report_table.py"


def report_table_targets():
    """The config's key tables that this workflow produces, and every planned study's
    summary (the studies are data, so they are not listed in the config), as HTML pages."""
    tables = REPORT.get("tables", {})
    paths = [f"{RESULTS}/{m}/{t}.parquet" for t in tables.get("per_model", []) for m in studied_models()]
    paths += [f"{RESULTS}/{t}.parquet" for t in tables.get("shared", [])]
    paths += [f"{RESULTS}/sweep/studies/{study}.parquet" for study in sweep_studies()]
    return [f"{RESULTS}/tables/{p[len(RESULTS) + 1:-len('.parquet')]}.html" for p in paths
            if report_producible(p)]


def report_targets():
    return expand_models(f"{RESULTS}/{{model}}/explorer.html") + report_table_targets()
