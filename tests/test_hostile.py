"""Hostile input (protocol §9): no config value may plan a path outside results/ and figures/,
put markup into a page, or cost finished work; a config file that cannot be read is named
with its line and column; files the workflow loads are the files it wrote.

Where Snakemake decides (the paths every rule plans, the report it renders, what a failed job
costs), the real Snakefile runs; where the library decides (escaping, checks, hash records), it
is called directly. The workflow's DAG is read with Snakemake's API in a subprocess (this file
run as a script, as tests/test_standalone.py does), so rules added later are walked too.
"""
from __future__ import annotations

import copy
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from workflow import SCORES_TARGET, make_workdir, planned_jobs, snakemake, tiny_config, write_config  # noqa: E402

# A name that climbs out of the project (the phrase key that once wrote figures, logs and
# benchmark records under /tmp), and names the schema must refuse.
CLIMB = "../../../../../../../../../tmp/headwatch-hostile"
HOSTILE_NAMES = [CLIMB, "..", ".", ".hidden", "/etc/passwd", "a/../../b", "-rf", "", "a b", "x\ny"]
# Safe names that are markup elsewhere: an RST reference to the report's own javascript: link
# (Workflow_), a reference to a missing target (x_), an enumerated-list marker (1.).
ODD_NAMES = ["Workflow_", "x_", "_", "a..b", "1.", "qwen2.5-0.5b"]
# Phrase text holding reStructuredText, HTML, a javascript: link and Markdown on one line; the
# expected token opens bold text in both RST and Markdown, the `also` token closes an HTML tag.
TEXT = ("See `this <javascript:alert(1)>`_ or Statistics_ :raw-html:`<b>x</b>` "
        "<img src=x onerror=alert(2)> [md](javascript:alert(3)) **bold** |sub| $x^2$ and the")
EXPECTED, ALSO = " **", "</"
# Phrase text that turns the rest of a line around (a right-to-left override) and hides words
# (zero-width space, joiner, an isolate): accepted as text, shown as escapes on every page.
BIDI = "The cat sat on the \u202emat. \u2066The\u2069 cat\u200b sat\u200d on the"
BIDI_CHARS = "\u202e\u2066\u2069\u200b\u200d"
# The longest a name may be (config/schema.yaml: definitions.name_length).
LONGEST_NAME = 100


def config_yaml() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def hostile_config(tiny_model_dir) -> dict:
    """The tiny config with a model key and phrases that are markup, all of them safe names."""
    config = tiny_config(tiny_model_dir)
    config["models"]["Workflow_"] = config["models"].pop("tiny-llama")
    config["models_studied"] = ["Workflow_"]
    config["phrases"] = {"x_": {"text": TEXT, "expected": EXPECTED, "also": ALSO},
                         "a..b": {"text": "The cat sat on the mat. The cat sat on the", "expected": " mat"},
                         "1.": {"random": 4, "seed": 1},
                         "rlo": {"text": BIDI, "expected": " mat"},
                         "names": {"text": "When Mary and John went to the shop, John gave a drink to",
                                   "expected": " Mary"}}
    return config


# ------------------------------------------------------------------ pages, parsed
class Elements(html.parser.HTMLParser):
    """Every element and attribute of an HTML fragment, and its text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.data = [], [], []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.data.append(data)

    @property
    def text(self) -> str:
        return "".join(self.data)


LIVE = {"a", "script", "img", "iframe", "object", "embed", "svg", "form", "input", "link", "style", "base",
        "meta", "video", "audio", "math"}


def markup_left(fragment: str, allowed: set[str] = frozenset()) -> list[str]:
    """Live elements and attributes in an HTML fragment: links, scripts, images, event handlers,
    javascript: URLs (``allowed``: tags a page of this kind holds by construction)."""
    parsed = Elements(fragment)
    bad = [f"<{t}>" for t in parsed.tags if t in LIVE - set(allowed)]
    bad += [f"{k}={v!r}" for k, v in parsed.attrs if k.startswith("on") or "javascript:" in (v or "").lower()]
    return bad


# ------------------------------------------------------------------ 1. names that are paths
def test_the_safe_name_is_one_pattern_in_the_schema_and_the_library():
    from headwatch.config import load_schema
    from headwatch.names import SAFE_NAME

    schema = load_schema(ROOT / "config" / "schema.yaml")
    assert schema["definitions"]["safe_name"]["pattern"] == f"^{SAFE_NAME}$"
    assert schema["definitions"]["shared_table"]["pattern"].startswith(f"^{SAFE_NAME}/")
    config = config_yaml()
    shipped = list(config["models"]) + list(config["phrases"]) + list(config["sweep"]["sweeps"])
    for name in shipped + ODD_NAMES:
        assert re.fullmatch(SAFE_NAME, name), name
    for name in HOSTILE_NAMES:
        assert not re.fullmatch(SAFE_NAME, name), name


def _put(path: list, value):
    def change(config):
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return change


NAME_CASES = {
    "phrase key that climbs out": (_put(["phrases", CLIMB], {"text": "a cat", "expected": " cat"}),
                                   f"phrases: the key {CLIMB!r} is not a safe name"),
    "model key ..": (_put(["models", ".."], {"source": "x"}), "models: the key '..' is not a safe name"),
    "model key of a hidden folder": (_put(["models", ".cache"], {"source": "x"}),
                                     "models: the key '.cache' is not a safe name"),
    "model key of another stage's folder": (_put(["models", "sweep"], {"source": "x"}),
                                            "models: the key 'sweep' is the name of a folder of results/"),
    "studied model": (_put(["models_studied"], ["../m"]), "models_studied[0]: the value '../m' is not a safe name"),
    "sweep key": (_put(["sweep", "sweeps", "a/b"], {"grid": [{"width": 8, "heads": 1}], "seeds": [0, 1],
                                                     "train": {}}),
                  "sweep.sweeps: the key 'a/b' is not a safe name"),
    "sweep key with a dot": (_put(["sweep", "sweeps", "a.b"], {"grid": [{"width": 8, "heads": 1}], "seeds": [0, 1],
                                                               "train": {}}),
                             "sweep.sweeps: the key 'a.b' is not a sweep name"),
    "skipped sweep": (_put(["sweep", "skip"], [".."]), "sweep.skip[0]: the value '..' is not a safe name"),
    "phrase a rule reads by name": (_put(["anatomy", "kv_phrase"], "../x"),
                                    "anatomy.kv_phrase: the value '../x' is not a safe name"),
    "reference config": (_put(["anatomy", "references"], ["../../etc/passwd"]),
                         "anatomy.references[0]: the value '../../etc/passwd' is not a safe name"),
    "borrowed base": (_put(["anatomy", "swap_base"], {"../m": "qwen2.5-0.5b"}),
                      "anatomy.swap_base: the key '../m' is not a safe name"),
    "shared table": (_put(["report", "tables", "shared"], ["../x/y"]),
                     "report.tables.shared[0]: the value '../x/y' is not <scope>/<table>"),
    "newline in phrase text": (_put(["phrases", "names", "text"], "When Mary\n\n.. raw:: html\n\n   <b>x</b>"),
                               "phrases.names.text: the value 'When Mary\\n\\n.. raw:: html\\n\\n   <b>x</b>' "
                               "holds a control character"),
    "tab in phrase text": (_put(["phrases", "names", "text"], "When\tMary"),
                           "phrases.names.text: the value 'When\\tMary' holds a control character"),    "patching template over two lines": (_put(["patching", "templates"], ["When {A}\n\n.. raw:: html"]),
                                          "patching.templates[0]: the value 'When {A}\\n\\n.. raw:: html' "
                                          "holds a control character"),
    "patching name with a space": (_put(["patching", "names"], ["Mary", "John", "Tom", "Ann", "A B"]),
                                   "patching.names[4]: the value 'A B' is not a name: one word"),
    "patching phrase that climbs out": (_put(["patching", "phrase"], "../x"),
                                        "patching.phrase: the value '../x' is not a safe name"),
}


@pytest.mark.parametrize("case", list(NAME_CASES))
def test_a_name_or_text_that_is_not_safe_is_refused_naming_the_key(case):
    """What the Snakefile runs first (headwatch.config.check_keys), before the schema's own
    validation and before any job."""
    from headwatch.config import ConfigError, check_keys

    change, words = NAME_CASES[case]
    config = config_yaml()
    change(config)
    with pytest.raises(ConfigError) as err:
        check_keys(config, ROOT / "config" / "schema.yaml")
    assert words in str(err.value), str(err.value)


def test_the_phrase_that_climbed_out_of_the_project_stops_before_any_job(scores_tree, tmp_path):
    """The real run that once wrote a figure, its log and its benchmark record outside the
    project (here: into this test's own folder)."""
    workdir, config = scores_tree
    climb = "../" * 30 + str(tmp_path).strip("/") + "/escaped"
    config = copy.deepcopy(config)
    config.setdefault("phrases", {})[climb] = {"text": "The cat sat on the mat. The cat sat on the",
                                               "expected": " mat"}
    result = snakemake(workdir, f"figures/tiny-llama/grid_{climb}.pdf", "--configfile",
                       str(write_config(workdir, config, "climb.yaml")))
    out = result.stdout + result.stderr
    assert result.returncode != 0 and f"phrases: the key {climb!r} is not a safe name" in out, out[-3000:]
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())


def test_a_report_table_no_rule_makes_stops_before_any_job(scores_tree):
    """A misspelled report.tables entry once left the report without its page, in silence: the
    Snakefile, every rule read, names the entry and the table no rule makes, before any job."""
    from test_bad_inputs import snapshot

    workdir, config = scores_tree
    before = snapshot(workdir)
    config = copy.deepcopy(config)
    config["report"] = {"tables": {"per_model": ["scores", "circuits/path"], "shared": ["circuits/known"]}}
    result = snakemake(workdir, "-n", SCORES_TARGET, "--configfile",
                       str(write_config(workdir, config, "report_tables.yaml")))
    out = result.stdout + result.stderr
    assert result.returncode != 0 and ("report.tables.per_model[1] = 'circuits/path': no rule of the workflow makes "
                                       "results/tiny-llama/circuits/path.parquet") in out, out[-3000:]
    assert "shared[0]" not in out                       # circuits/known is made (rule circuits_known)
    assert snapshot(workdir) == before


@pytest.fixture(scope="module")
def planned(tmp_path_factory, tiny_model_dir):
    """The workflow's DAG for the hostile config (Snakemake's API, in a subprocess)."""
    workdir = make_workdir(tmp_path_factory.mktemp("hostile_plan"))
    configfile = write_config(workdir, hostile_config(tiny_model_dir))
    result = subprocess.run([sys.executable, __file__, str(workdir), str(configfile)], cwd=workdir,
                            capture_output=True, text=True, timeout=900, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_no_rule_plans_a_path_outside_results_and_figures(planned):
    """Every output, log and benchmark record of every job of the DAG (rule all, forced) lies
    inside results/ or figures/; and for every rule, every wildcard given a name that climbs
    out (``..``, an absolute path, ...) either matches no rule or stays inside too."""
    assert len(planned["planned"]) > 100 and planned["rules"] >= 30, planned["rules"]
    outside = [p for p in planned["planned"] if not p[2]]
    assert not outside, outside[:20]
    assert planned["tried"] > 200, planned["tried"]          # hostile wildcard values tried
    assert not planned["escapes"], planned["escapes"][:20]


def test_a_name_of_the_longest_length_makes_file_names_a_file_system_takes(planned):
    """Every wildcard of every rule's outputs, logs and benchmark records given a name of the
    longest allowed length: the longest path segment stays within 255 bytes, and so does the
    temporary name every writer goes through (``paths.temporary``: bounded whatever the target's)."""
    from headwatch import paths

    longest, rule, segment = planned["longest_segment"]
    assert longest <= 255, (rule, segment)
    assert len(paths.temporary(Path("x" * 255)).name) <= paths.TEMPORARY_NAME_MAX <= 255
    assert longest <= LONGEST_NAME + 18, (rule, segment)          # what config/schema.yaml states


def test_asking_for_an_unknown_models_results_names_the_model(planned):
    error = planned["unknown_model"]
    assert "'nope' is not a configured model (config key `models`: ['Workflow_', " in error, error
    assert "KeyError" not in error


def test_every_caption_shows_config_text_as_text(planned):
    """Every caption of every job of the DAG, rendered as Snakemake's report does (strictly:
    a docutils warning fails), for a model key and phrases that are markup: no link, image,
    script or handler survives, and the phrase and its tokens are printed as written."""
    captions = planned["captions"]
    assert len({c["caption"] for c in captions}) >= 15, sorted({c["caption"] for c in captions})
    errors = [(c["target"], c["error"]) for c in captions if "error" in c]
    assert not errors, errors[:5]
    for c in captions:
        assert not markup_left(c["html"]), (c["target"], markup_left(c["html"]))
        if c["rule"] in ("figures_grid", "ablation_attribution") and c["wildcards"].get("phrase") == "x_":
            assert TEXT in Elements(c["html"]).text and f'"{EXPECTED}"' in Elements(c["html"]).text
        if c["rule"] in ("figures_grid", "ablation_attribution") and c["wildcards"].get("phrase") == "rlo":
            shown = "The cat sat on the \\u202emat. \\u2066The\\u2069 cat\\u200b sat\\u200d on the"
            assert shown in Elements(c["html"]).text, Elements(c["html"]).text     # each as its escape
        assert not set(BIDI_CHARS) & set(c["html"]), (c["target"], "a reordering or zero-width character")
    page = planned["workflow_page"]
    assert not markup_left(page) and "Workflow_" in Elements(page).text
    assert "kv_sharing (" not in Elements(page).text        # a skipped sweep is not listed as run


# ------------------------------------------------------------------ 2. text is data on every page
@pytest.fixture(scope="module")
def report(scores_tree, tmp_path_factory):
    """Snakemake's own report (`snakemake --report`) of the grid figure of a phrase that is
    markup, for a model key that is markup: three jobs (the phrases' table, the maps, the
    figure); the prepared tiny model is reused (copied). Table pages: tested in-process below."""
    workdir = tmp_path_factory.mktemp("hostile_report") / "tree"
    shutil.copytree(scores_tree[0], workdir, symlinks=True)
    shutil.copytree(workdir / "results/models/tiny-llama", workdir / "results/models/Workflow_")
    config = copy.deepcopy(scores_tree[1])
    config["models"] = {"Workflow_": config["models"]["tiny-llama"]}
    config["models_studied"] = ["Workflow_"]
    config["phrases"] = {"x_": {"text": TEXT, "expected": EXPECTED, "also": ALSO}}
    configfile = str(write_config(workdir, config, "hostile.yaml"))
    targets = ["figures/Workflow_/grid_x_.pdf", "figures/Workflow_/grid_x_.png"]
    made = snakemake(workdir, *targets, "--configfile", configfile)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    built = snakemake(workdir, "--report", "report.html", *targets, "--configfile", configfile)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return (workdir / "report.html").read_text()


def _script_json(page: str, name: str):
    """The value Snakemake's report assigns to ``var <name>`` in its ``<script id=...>``."""
    m = re.search(rf'<script id="[\w-]+">\s*var {name} = (.*?);\s*</script>', page, re.S)
    assert m, name
    return json.loads(m.group(1))


def test_the_report_shows_phrases_tokens_and_model_keys_as_text(report):
    results = _script_json(report, "results")
    assert {Path(p).name for p in results} == {"grid_x_.pdf", "grid_x_.png"}, list(results)
    for path, res in results.items():
        assert not markup_left(res["caption"]), (path, markup_left(res["caption"]))
        text = Elements(res["caption"]).text
        assert TEXT in text and f'"{EXPECTED}"' in text and f'"{ALSO}"' in text and "Workflow_" in text
    desc = _script_json(report, "workflow_desc")
    assert not markup_left(desc) and "Workflow_" in Elements(desc).text


@pytest.mark.parametrize("text", [TEXT, ".. raw:: html", "`x`_", "x__", "|s|", "[1]_", "*a*", "\\", "a\nb",
                                  "javascript:alert(1)", "mailto:a@b.c", "Workflow_"])
def test_each_format_escapes_config_text(text):
    """RST (rendered by docutils as Snakemake does), HTML, Markdown (CommonMark) and JSON in a
    script element: the text comes back as text, with no live element."""
    from docutils.core import publish_parts
    from markdown_it import MarkdownIt

    from headwatch import markup

    shown = markup.visible(text)
    rst_html = publish_parts(f"Phrase: {markup.rst(text)}.", writer="html",
                             settings_overrides={"halt_level": 2, "report_level": 2})["body"]
    assert not markup_left(rst_html) and set(Elements(rst_html).tags) == {"p"}, rst_html
    assert f"Phrase: {shown}." in Elements(rst_html).text
    md_html = MarkdownIt("commonmark").enable("table").render(f"| a |\n|---|\n| {markup.markdown(text)} |\n")
    assert set(Elements(md_html).tags) <= {"table", "thead", "tbody", "tr", "th", "td"}, md_html
    assert shown in Elements(md_html).text
    page = f'<p title="{markup.html(text)}">{markup.html(text)}</p>'
    assert Elements(page).tags == ["p"] and Elements(page).text == shown and Elements(page).attrs[0][1] == shown
    script = f'<script type="application/json">{markup.script_json({"t": text + "</script><!--"})}</script>'
    assert Elements(script).tags == ["script"]
    assert json.loads(Elements(script).text) == {"t": text + "</script><!--"}


def test_the_explorer_and_a_table_page_hold_config_text_as_text():
    import pandas as pd

    from headwatch.explorer.build import render
    from headwatch.explorer.tables import table_page

    name = "x</title><script>alert(1)</script>"
    page = render({"model": name, "phrases": [{"name": TEXT, "tokens": ["</script><img src=x onerror=y>"]}]})
    parsed = Elements(page)
    assert parsed.tags.count("script") == 2 and "img" not in parsed.tags and "title" in parsed.tags
    data = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["phrases"][0]["name"] == TEXT
    assert f"headwatch explorer: {name}" in parsed.text
    table = table_page(pd.DataFrame({"phrase": [TEXT], "token": [EXPECTED]}), name, {"note": "<b>x</b>"})
    assert not markup_left(table, allowed={"style", "meta"}) and TEXT in Elements(table).text


def test_a_results_page_in_markdown_holds_config_text_as_text():
    """docs/results/*.md (benchmarks/gpu/paper_tables.py): cells and headings are text."""
    import pandas as pd
    from markdown_it import MarkdownIt

    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import paper_tables

    table = paper_tables.md_table(pd.DataFrame({"phrase": [TEXT], "expected": [repr(EXPECTED)], "p": [0.5]}))
    rendered = MarkdownIt("commonmark").enable("table").render(table)
    assert set(Elements(rendered).tags) <= {"table", "thead", "tbody", "tr", "th", "td"}, rendered
    assert TEXT in Elements(rendered).text


def test_figure_text_is_drawn_as_written():
    """matplotlib would read $...$ in a phrase or a token as mathematics (and fail on a bad one): in
    the house style every figure's text is drawn as written (headwatch's drawing functions run in it),
    and a text made there stays literal when the figure is saved outside it (a user's plain savefig)."""
    import io

    from headwatch.figures.style import figure, house_style

    with house_style():
        fig, ax = figure()
        ax.set_title(f"attention on '{TEXT}' $\\notacommand{{$")
        ax.set_xticks([0], ["$x^2$"])
    fig.savefig(io.BytesIO(), format="png")
    assert ax.title.get_text().endswith("$\\notacommand{$")


def test_log_axes_print_their_numbers_with_math_text_off():
    """With math text off, matplotlib's own labels of a log axis ($\\mathdefault{10^{2}}$) would be
    drawn as that source: every log axis and log colour bar is labelled in plain text instead
    (headwatch.figures.style.plain_log_ticks, which save applies), and a linear axis is left alone."""
    from matplotlib.colors import LogNorm

    from headwatch.figures.style import PlainLogFormatter, figure, house_style, plain_log_ticks

    with house_style():
        fig, (ax, lin) = figure(ncols=2)
        ax.plot([0.01, 1000], [1, 2])
        ax.set_xscale("log")
        cbar = fig.colorbar(lin.imshow([[1e-6, 1e-3], [1, 10]], norm=LogNorm()), ax=lin)
        plain_log_ticks(fig)
        fig.canvas.draw()
    assert isinstance(ax.xaxis.get_major_formatter(), PlainLogFormatter)
    assert not isinstance(lin.xaxis.get_major_formatter(), PlainLogFormatter)
    power = re.compile("(−?[0-9.]+×)?10⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
    for axis in (ax.xaxis, cbar.ax.yaxis):
        labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
        assert len(labels) >= 2 and all(power.fullmatch(t) for t in labels), labels
    assert "10⁻²" in {t.get_text() for t in ax.xaxis.get_ticklabels()}      # the axis's first decade


# ------------------------------------------------------------------ 3. devices
@pytest.mark.parametrize("setting, gpus, error", [
    (dict(device="cuda"), 0, "device: 'cuda', but torch finds no CUDA GPU on this machine"),
    (dict(device="cuda:1"), 1, "device: 'cuda:1', but this machine has 1 CUDA GPU (cuda:0)"),
    (dict(device="cuda:1"), 2, None),
    (dict(device="auto", sweep=dict(device="cuda")), 0, "sweep.device: 'cuda', but torch finds no CUDA GPU"),
    (dict(device="cpu", sweep=dict(device="auto")), 0, None),
])
def test_a_cuda_device_this_machine_lacks_is_named(setting, gpus, error):
    from headwatch.config import device_errors

    errors = device_errors(setting, gpus=lambda: gpus)
    assert errors == ([] if error is None else [errors[0]]) and (error is None or error in errors[0]), errors


@pytest.mark.parametrize("key, value", [("device", "cdua"), ("device", "mps"), ("sweep.device", "cuda:x")])
def test_a_device_that_is_none_of_the_four_is_named(key, value):
    from headwatch.config import ConfigError, check_keys

    config = config_yaml()
    _put(key.split("."), value)(config)
    with pytest.raises(ConfigError, match=re.escape(f"{key}: the value {value!r} is not a device: use auto")):
        check_keys(config, ROOT / "config" / "schema.yaml")


def test_a_device_change_costs_nothing_and_a_failing_model_job_only_its_own_outputs(scores_tree, tmp_path):
    """`device: cuda` on this CPU machine is refused when the run starts, before any job (it
    once passed the checks, the job failed and Snakemake removed its finished outputs; 12 jobs
    reran after `auto` was set back, because the device was a param of every model rule).
    Changing the device reruns nothing; a model job that fails on setup costs nothing: its
    previous outputs are put back (headwatch/workflow/outputs.py)."""
    from test_bad_inputs import snapshot

    workdir = tmp_path / "tree"
    shutil.copytree(scores_tree[0], workdir, symlinks=True)

    def run(device, *args):
        config = dict(copy.deepcopy(scores_tree[1]), device=device)
        return snakemake(workdir, *args, "--configfile", str(write_config(workdir, config, "device.yaml")))

    before = snapshot(workdir)
    refused = run("cuda", SCORES_TARGET, "--forcerun", "scores_heads")
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "device: 'cuda', but torch finds no CUDA GPU on this machine" in out, out[-3000:]
    assert snapshot(workdir) == before
    assert planned_jobs(run("cpu", "-n", SCORES_TARGET)) == {}

    weights = workdir / "results/models/tiny-llama/model.safetensors"
    good = weights.read_bytes()
    scores = (workdir / SCORES_TARGET).read_bytes()
    weights.write_bytes(good[: len(good) // 2])                      # the model cannot be loaded
    failed = run("auto", SCORES_TARGET, "--forcerun", "scores_heads")
    assert failed.returncode != 0
    assert "Restored previous version of results/tiny-llama/scores.parquet" in failed.stdout + failed.stderr
    after = snapshot(workdir)
    lost = {k for k in before if k not in after}
    assert lost == set(), lost
    assert (workdir / SCORES_TARGET).read_bytes() == scores                 # the same table, copied back
    changed = {k for k, v in after.items() if before.get(k) != v}
    assert all(k.startswith(("results/logs/scores_heads", "results/benchmarks/scores_heads", "results/run_config"))
               or k in ("results/models/tiny-llama/model.safetensors", SCORES_TARGET) for k in changed), changed


def test_an_absurd_size_is_refused_before_any_job_and_costs_no_finished_output(scores_tree, tmp_path):
    """`sequences.sets.induction.n: 1e8` once passed the checks, and Snakemake removed the
    finished induction.parquet (its params changed) before the job failed on memory. Now the
    bound refuses it before any job, naming the key; then a size raised on purpose is still
    refused by the memory estimate (the machine's /proc/meminfo) before any job."""
    from test_bad_inputs import snapshot

    workdir = tmp_path / "tree"
    shutil.copytree(scores_tree[0], workdir, symlinks=True)
    before = snapshot(workdir)

    def run(change, *args):
        config = copy.deepcopy(scores_tree[1])
        change(config)
        return snakemake(workdir, *args, "--configfile", str(write_config(workdir, config, "absurd.yaml")))

    refused = run(lambda c: c["sequences"]["sets"]["induction"].update(n=100_000_000), SCORES_TARGET)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "sequences.sets.induction.n: 100,000,000 is above its bound 100,000" in out, \
        out[-3000:]
    assert snapshot(workdir) == before, "a job ran, or a finished output was removed"

    def raised(c):
        c["ablation"]["batch"] = 200_000                       # 200 000 × 51 × 49 152 logits: 1.9 TB
        c["raise_bounds"] = {"ablation.batch": 200_000}
    refused = run(raised, "results/tiny-llama/ablation/topk.parquet")
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "it cannot fit in this machine's memory" in out, out[-3000:]
    assert "ablation.batch: model tiny-llama's cuts (200000 rows of 51 tokens a pass) needs at least" in out
    assert snapshot(workdir) == before


def test_a_guard_record_cut_short_is_named_by_the_next_run(scores_tree, tmp_path):
    """A patching/guards.json truncated to invalid JSON was never noticed (the rerun said there was
    nothing to do): every run reads the studied models' guard records first and names one that
    cannot be trusted, with the remedy that works before any job (delete it: its job reruns)."""
    from headwatch.tableio import write_record

    workdir = tmp_path / "tree"
    shutil.copytree(scores_tree[0], workdir, symlinks=True)
    configfile = str(workdir / "tiny.yaml")
    record = workdir / "results/tiny-llama/patching/guards.json"
    write_record({"passed": True, "nothing_patched": {"max_abs_diff": 0.0, "passed": True}}, record)
    assert snakemake(workdir, "-n", SCORES_TARGET, "--configfile", configfile).returncode == 0
    record.write_bytes(record.read_bytes()[:30])
    refused = snakemake(workdir, "-n", SCORES_TARGET, "--configfile", configfile)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0 and ("a guard record cannot be trusted:\n  results/tiny-llama/patching/guards.json "
                                        "is corrupt: it is not valid JSON") in out, out[-3000:]
    assert "Delete it and run snakemake again, with your usual options: the job that writes it reruns" in out
    record.unlink()
    assert snakemake(workdir, "-n", SCORES_TARGET, "--configfile", configfile).returncode == 0


# ------------------------------------------------------------------ 4. config files
BROKEN = "models:\n  m: {source: x\nphrases:\n  a: 1\n"          # an unclosed flow mapping


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    from headwatch.config import yaml_errors
    from headwatch.config.verdict import main

    path = tmp_path / "my.yaml"
    path.write_text(BROKEN)
    assert yaml_errors(path) == [f"{path}:3:8: not valid YAML: while parsing a flow mapping; "
                                 "did not find expected ',' or '}'"]
    path.write_text("a:\n\tb: 1\n")
    assert yaml_errors(path)[0].startswith(f"{path}:2:1: not valid YAML") and "never tabs" in yaml_errors(path)[0]
    assert main([str(path)]) == 1 and main([str(ROOT / "config" / "quick.yaml")]) == 0


def test_a_yaml_error_in_the_workflows_config_names_its_line(tmp_path):
    workdir = make_workdir(tmp_path / "wf")
    text = (workdir / "config" / "config.yaml").read_text()
    (workdir / "config" / "config.yaml").write_text(text.replace("\n  vocab_low:", "\n\tvocab_low:"))
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.startswith("  vocab_low:"))
    result = snakemake(workdir, "-n")
    out = result.stdout + result.stderr
    assert result.returncode != 0 and f"config/config.yaml:{line}:1: not valid YAML" in out, out[-3000:]


def test_make_reads_its_config_files_before_snakemake_does():
    """A --configfile is read by Snakemake's command line before the Snakefile runs, so the
    workflow cannot name its line: the Makefile's targets read theirs first."""
    for target, files in (("quick", "config/quick.yaml"), ("quick-more", "config/quick.yaml config/quick_more.yaml")):
        lines = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True).stdout.splitlines()
        check = next(i for i, s in enumerate(lines) if s.endswith(f"-m headwatch.config {files}"))
        assert "snakemake" in lines[check + 1] and f"--configfile {files}" in lines[check + 1], lines


# ------------------------------------------------------------------ 5. units never mixed
@pytest.mark.parametrize("sweep, error", [
    ("heads_split", "sweep.sweeps.heads_split.grid[6].vocab: 'bpe256' in a sweep without a study"),
    ("kv_sharing", "sweep.sweeps.kv_sharing.grid[3].vocab: 'bpe256' in a kv study"),
    ("vocab", None),
])
def test_a_vocabulary_outside_the_vocab_study_is_named(sweep, error):
    from headwatch.config import sweep_errors

    config = config_yaml()
    config["sweep"]["sweeps"][sweep]["grid"].append({"width": 256, "heads": 2, "vocab": "bpe256"})
    errors = [e for e in sweep_errors(config) if ".vocab:" in e]
    assert (errors == []) if error is None else (len(errors) == 1 and errors[0].startswith(error)), errors


# ------------------------------------------------------------------ 6. files we load are the files we wrote
def _altered(path: Path):
    """The same file with one byte changed, at the same size."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_corpus_ids_altered_in_place_are_refused(tmp_path):
    from headwatch.charlm.corpus import Corpus, load_ids, save_corpus
    from headwatch.tableio import CorruptTableError

    text = "To be, or not to be, that is the question.\n" * 40
    corpus = Corpus(text=text, vocab="".join(sorted(set(text))), sources=[], n_train=1600, n_val=len(text) - 1600)
    ids, meta = tmp_path / "ids.npy", tmp_path / "meta.json"
    save_corpus(corpus, ids, meta)
    assert (load_ids(ids, meta)[0] == corpus.ids()).all()
    _altered(ids)
    with pytest.raises(CorruptTableError, match=r"ids.npy is corrupt: its SHA-256 .* differs from .* recorded in "
                                                r".*meta.json \(ids_sha256\) when it was written"):
        load_ids(ids, meta)


class Planted:
    """An object whose unpickling would run code (here: create a file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_trained_model_is_read_only_when_it_is_the_file_written(tmp_path):
    """model.pt: verified against the SHA-256 its run recorded, then read as tensors and plain
    data only: a planted file with a matching hash still cannot run code."""
    import torch

    from headwatch.charlm.model import CharLM
    from headwatch.charlm.spec import ModelSpec
    from headwatch.sweep.train import load_trained, save_trained
    from headwatch.tableio import CorruptTableError, file_sha256

    model = CharLM(ModelSpec.from_settings(10, dict(width=8, heads=2, layers=1, context=8)))
    path = tmp_path / "model.pt"
    sha = save_trained(model, path, {"vocab": "abcdefghij"}, {"params": 1, "x": torch.tensor(1.5).numpy()})
    back, saved = load_trained(path, sha256=sha)
    assert saved["info"] == {"params": 1, "x": 1.5}
    _altered(path)
    with pytest.raises(CorruptTableError, match=r"model.pt is corrupt: its SHA-256 .* differs"):
        load_trained(path, sha256=sha)
    with pytest.raises(CorruptTableError, match=r"metrics.parquet \(model_sha256\) records no SHA-256"):
        load_trained(path)                                    # no run record beside it
    marker = tmp_path / "code-ran"
    torch.save({"spec": Planted(marker)}, path)
    with pytest.raises(Exception, match="Weights only load failed"):
        load_trained(path, sha256=file_sha256(path))
    assert not marker.exists()


def test_a_checkpoint_that_is_not_the_file_written_is_moved_aside(tmp_path, caplog):
    """A checkpoint rewritten behind the run's back (a valid file, other weights, the same
    name) is not resumed from: its SHA-256 differs from the one recorded beside it."""
    import logging

    import torch

    from headwatch.charlm.corpus import Corpus
    from headwatch.sweep.train import Interrupted, RunOptions, hash_record, previous_checkpoint, train

    torch.set_num_threads(1)
    text = "".join(f"{w} " for w in ("whether tis nobler in the mind to suffer the slings " * 60).split())
    corpus = Corpus(text=text, vocab="".join(sorted(set(text))), sources=[], n_train=2500, n_val=len(text) - 2500)
    ids, meta = corpus.ids(), corpus.meta()
    shape, settings = dict(width=16, heads=2, layers=1, context=16), dict(
        steps=6, batch=4, lr=3e-3, min_lr=3e-4, warmup=1, weight_decay=0.1, eval_every=6, eval_batches=2,
        checkpoint_every=2)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):
        train(ids, meta, shape, 0, settings, run=RunOptions(checkpoint=ckpt, stop_after=4))
    assert hash_record(ckpt).exists() and hash_record(previous_checkpoint(ckpt)).exists()
    saved = torch.load(ckpt, weights_only=True)
    saved["model"] = {k: v + 1 for k, v in saved["model"].items()}
    torch.save(saved, ckpt)                                   # a valid checkpoint, not the one written
    caplog.set_level(logging.INFO, logger="headwatch.sweep")
    _, _, info, _ = train(ids, meta, shape, 0, settings, run=RunOptions(checkpoint=ckpt))
    assert info["resumed_from"] == 2 and [r["file"] for r in info["checkpoints_moved_aside"]] == [str(ckpt)]
    assert "its SHA-256" in info["checkpoints_moved_aside"][0]["error"]
    assert not ckpt.exists() and not hash_record(ckpt).exists()


# ------------------------------------------------------------------ the DAG, read by Snakemake (script)
def _inside(workdir: Path, path: str) -> bool:
    real = os.path.realpath(workdir / path)
    return any(real.startswith(os.path.realpath(workdir / top) + os.sep) for top in ("results", "figures"))


def plan(workdir: Path, configfile: Path) -> dict:
    """Snakemake's DAG of rule ``all`` (every job forced) for ``configfile``: each job's outputs,
    logs and benchmark record; for every rule and every wildcard, the paths it would write for
    hostile values of that wildcard; every caption rendered; and the error for a model that is
    not configured."""
    import logging

    from snakemake.api import SnakemakeApi
    from snakemake.io import apply_wildcards, get_flag_value, is_flagged
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    from test_standalone import _render

    logging.disable(logging.CRITICAL)
    out = dict(planned=[], escapes=[], tried=0, captions=[], longest_segment=[0, "", ""])

    def dag(api, targets=None):
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(configfiles=[configfile]),
                              snakefile=workdir / "Snakefile", workdir=workdir)
        wf_api.dag(DAGSettings(forceall=True, targets=targets or set()))
        wf = wf_api._workflow
        # what DAGApi.printfilegraph does: the DAG, built but not run
        wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        wf._build_dag()
        return wf

    with SnakemakeApi(OutputSettings()) as api:
        wf = dag(api)
        jobs = list(wf.dag.jobs)
        base = {}
        for job in jobs:
            files = [*job.output, *job.log] + ([job.benchmark] if job.benchmark else [])
            out["planned"] += [[job.rule.name, str(f), _inside(workdir, str(f))] for f in files]
            base.setdefault(job.rule.name, dict(job.wildcards.items()))
            for f in job.output:
                rep = get_flag_value(f, "report") if is_flagged(f, "report") else None
                if rep is None or not rep.caption:
                    continue
                caption = Path(rep.caption.get_path_or_uri(secret_free=True))
                record = dict(rule=job.rule.name, target=str(f), caption=caption.name,
                              wildcards=dict(job.wildcards.items()))
                try:
                    record["html"] = _render(caption, record["wildcards"], dict(job.params.items()), wf.config,
                                             job.rule.name)
                except Exception as err:            # noqa: BLE001 -- reported by the test
                    record["error"] = f"{type(err).__name__}: {err}"
                out["captions"].append(record)
        try:
            out["workflow_page"] = _render(workdir / "report" / "workflow.rst", {}, {}, wf.config, "")
        except Exception as err:                    # noqa: BLE001 -- reported by the test
            out["workflow_page"] = f"<script>{type(err).__name__}: {err}</script>"
        out["rules"] = len(wf.rules)
        for rule in wf.rules:
            for pattern in [*rule.output, *rule.log] + ([rule.benchmark] if rule.benchmark else []):
                names = re.findall(r"{(\w+)", str(pattern))
                path = apply_wildcards(str(pattern), {n: "n" * LONGEST_NAME for n in names})
                segment = max(path.split("/"), key=len)
                if len(segment) > out["longest_segment"][0]:
                    out["longest_segment"] = [len(segment), rule.name, segment]
            for pattern in rule.output:
                names = re.findall(r"{(\w+)", str(pattern))
                for name in names:
                    for value in HOSTILE_NAMES + ["x/" + CLIMB]:
                        wildcards = {n: base.get(rule.name, {}).get(n, "x") for n in names}
                        wildcards[name] = value
                        path = apply_wildcards(str(pattern), wildcards)
                        out["tried"] += 1
                        if not rule.is_producer(path):
                            continue
                        found = dict(rule.get_wildcards(path))
                        files = [apply_wildcards(str(p), found) for p in [*rule.output, *rule.log]]
                        files += [apply_wildcards(str(rule.benchmark), found)] if rule.benchmark else []
                        out["escapes"] += [[rule.name, f] for f in files if not _inside(workdir, f)]
        try:
            dag(api, {"results/nope/scores.parquet"})
            out["unknown_model"] = "no error"
        except Exception as err:                    # noqa: BLE001 -- the message is the test
            out["unknown_model"] = f"{type(err).__name__}: {err} {getattr(err, '__cause__', '')}"
    return out


if __name__ == "__main__":
    print(json.dumps(plan(Path(sys.argv[1]), Path(sys.argv[2])), default=str))
