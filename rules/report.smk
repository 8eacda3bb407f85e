# Stage "report" (protocol §8): the explorer page of each studied model
# (results/{model}/explorer.html) and the key tables rendered as HTML pages for
# Snakemake's own report (`make report` = snakemake --report results/report.html;
# every figure output is declared with report(...) in the rules files, with a
# caption under report/).
#
# The explorer needs the spine tables (maps, tokens, predictions, scores); the
# ablation, activation-patching, path-patching and sweep tables are inputs whenever
# a rule of this workflow produces them (so the page has those sections in the full
# DAG, and a workflow without those stages still builds a page). Rule names are not
# consulted: a table is required exactly when some rule's output matches its path.
# The path-patching panel's threshold is circuits.edge_threshold as stored in the
# edge table's note (a param of circuits_paths: a new threshold remakes the table).
#
# The run a report describes (headwatch/workflow/run_record.py): every run that executes jobs
# records its merged configuration in results/run_config.yaml (onstart below, after
# refusing a CUDA device this machine lacks: check_devices in rules/common.smk; dry
# runs and --report record nothing), and `make report` hands that file back with
# --configfile. The captions name the scale of the configuration they are rendered
# with (config["report_run"]) and the workflow page says when it differs from the
# recorded run.
from headwatch.workflow import run_record

report: "../report/workflow.rst"

config[run_record.COMPUTED_KEY] = run_record.describe(config, workflow.basedir, paths.run_config())


onstart:
    check_devices()
    run_record.write_record(paths.run_config(), config,
                            run_record.config_files(workflow.configfiles, workflow.overwrite_configfiles))


rule report_explorer:
    input:
        unpack(explorer_inputs),
    output:
        report(paths.explorer("{model}"), caption="../report/explorer.rst", category="explorer",
               subcategory="{model}"),
    params:
        quantum=config["attention"]["quantum"],
        dtype=lambda w: get_dtype(w.model),
        rotary_distance=config["report"]["explorer"]["rotary_distance"],
    log:
        paths.log("report_explorer", "{model}"),
    benchmark:
        paths.benchmark("report_explorer", "{model}")
    conda:
        "../environment.yml"
    script:
        "../scripts/report_explorer.py"


# Key tables as HTML pages (Snakemake's report shows HTML, not Parquet):
# results/{scope}/{name}.parquet -> results/tables/{scope}/{name}.html.
rule report_table:
    input:
        paths.table("{scope}", "{name}"),
    output:
        report(paths.table_page("{scope}", "{name}"), caption="../report/table.rst", category="tables",
               subcategory="{scope}"),
    wildcard_constraints:
        scope=r"[A-Za-z0-9_.\-]+",
        name=r"[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*",
    log:
        paths.log("report_table", "{scope}", "{name}"),
    benchmark:
        paths.benchmark("report_table", "{scope}", "{name}")
    conda:
        "../environment.yml"
    script:
        "../scripts/report_table.py"
