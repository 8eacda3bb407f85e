"""`snakemake --lint` finds nothing, at paper and at quick scale: the rules files hold rules
only (their helpers are in rules/common.smk and the library), every rule names its log,
its benchmark and its software (environment.yml). `make test` runs it with the other tests. ruff, with
the rules of pyproject.toml, finds nothing in the code either (`make test` runs it first)."""
import os
import re
import subprocess
import sys

import pytest

from workflow import ROOT, make_workdir


def lint(workdir, *args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "snakemake", "--lint", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("lint"))


@pytest.mark.parametrize("overlay", [[], ["--configfile", "config/quick.yaml"],
                                     ["--configfile", "config/laptop.yaml", "config/laptop_long.yaml"]],
                         ids=["paper", "quick", "laptop-long"])
def test_the_workflow_has_no_lints(workdir, overlay):
    result = lint(workdir, *overlay)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "Lints for" not in out and "Congratulations, your workflow is in a good condition!" in out, out[-3000:]


def test_the_lint_would_see_a_helper_beside_rules_and_a_rule_without_software(tmp_path):
    bad = make_workdir(tmp_path / "bad")
    scores = bad / "rules" / "scores.smk"
    text = scores.read_text() + "\n\ndef scores_helper():\n    return 1\n"
    scores.write_text(text.replace('    conda:\n        "../environment.yml"\n', ""))
    out = lint(bad)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-3000:]
    assert "Mixed rules and functions in same snakefile" in text
    assert "Lints for rule scores_heads" in text and "Specify a conda environment" in text


def ruff(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_code_has_no_ruff_findings():
    """ruff with the rules of pyproject.toml ([tool.ruff]) finds nothing in the tree (`make test`
    runs it first too); a `# noqa` that no rule needs is itself a finding (RUF100)."""
    out = ruff()
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def test_ruff_would_see_an_unused_import_a_blind_except_and_a_needless_noqa(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\ntry:\n    x = 1  # noqa: F401\nexcept Exception:\n    x = 0\nprint(x, snakemake)\n")
    out = ruff("--config", str(ROOT / "pyproject.toml"), str(bad), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert {"F401", "BLE001", "RUF100"} <= set(re.findall(r"\b([A-Z]+\d{3})\b", out.stdout)), out.stdout
    assert "F821" not in out.stdout          # `snakemake`: the object Snakemake gives every script
