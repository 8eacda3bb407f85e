"""`snakemake --lint` finds nothing, at paper and at quick scale: the rules files hold rules
only (their helpers are in rules/common.smk and the library), every rule names its log,
its benchmark and its software (environment.yml). `make test` runs it with the other tests."""
import os
import subprocess
import sys

import pytest

from workflow import make_workdir


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
