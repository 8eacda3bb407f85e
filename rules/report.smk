# Stage "report": the explorer page of each studied model (results/{model}/explorer.html)
# and the key tables rendered as HTML pages for Snakemake's own report
# (`make report` = snakemake --report results/report.html; every figure output is
# declared with report(...) in the rules files, with a caption under report/).
#
# The explorer needs the spine tables (maps, tokens, predictions, scores); the
# ablation and sweep tables are inputs whenever a rule of this workflow produces
# them (so the page has those sections in the full DAG, and a workflow without
# those stages still builds a page). Rule names are not consulted: a table is
# required exactly when some rule's output matches its path.
from snakemake.exceptions import WorkflowError

report: "../report/workflow.rst"

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
    """The config's key tables that this workflow produces, as their HTML pages."""
    tables = REPORT.get("tables", {})
    paths = [f"{RESULTS}/{m}/{t}.parquet" for t in tables.get("per_model", []) for m in studied_models()]
    paths += [f"{RESULTS}/{t}.parquet" for t in tables.get("shared", [])]
    return [f"{RESULTS}/tables/{p[len(RESULTS) + 1:-len('.parquet')]}.html" for p in paths
            if report_producible(p)]


def report_targets():
    return expand_models(f"{RESULTS}/{{model}}/explorer.html") + report_table_targets()
