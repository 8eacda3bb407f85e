"""A bad config stops before any job runs, with a message that names the key."""
import pytest

from headwatch.config import ConfigError, check_config, model_errors, sweep_errors
from workflow import make_workdir, snakemake, tiny_config, write_config


def base():
    import yaml
    from workflow import ROOT
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_unknown_model_key_is_named():
    config = base()
    config["study"] = ["smollm2-135m", "gpt-17"]
    assert model_errors(config) == [
        f"study[1]: unknown model 'gpt-17'; known models (config key `models`): {sorted(config['models'])}"]
    with pytest.raises(ConfigError, match=r"study\[1\]: unknown model 'gpt-17'"):
        check_config(config)


def test_heads_that_do_not_divide_the_width_are_named():
    config = base()
    config["sweep"]["sweeps"]["heads_split"]["grid"][2] = {"width": 256, "heads": 3}
    errors = sweep_errors(config)
    assert errors == ["sweep.sweeps.heads_split.grid[2]: heads 3 do not divide width 256"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("badconfig"))


@pytest.mark.parametrize("change, message", [
    (lambda c: c["sweep"]["sweeps"]["heads_split"]["grid"].append({"width": 256, "heads": 3}),
     "sweep.sweeps.heads_split.grid"),
    (lambda c: c.update(study=["no-such-model"]), "study[0]: unknown model 'no-such-model'"),
    (lambda c: c["phrases"]["names"].update(expected=" Maryland-upon-Thames"),
     "phrases.names.expected = ' Maryland-upon-Thames' is split by the tokenizer"),
    (lambda c: c["attention"].update(quantum="fine"), "quantum"),
])
def test_snakemake_stops_before_any_job(workdir, tiny_model_dir, change, message):
    import copy

    import yaml
    from workflow import ROOT
    config = copy.deepcopy(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    config = {**config, **tiny_config(tiny_model_dir), "sweep": config["sweep"], "phrases": config["phrases"],
              "attention": config["attention"]}
    change(config)
    result = snakemake(workdir, "--configfile", str(write_config(workdir, config, "bad.yaml")))
    assert result.returncode != 0
    assert message in result.stdout + result.stderr, (result.stdout + result.stderr)[-2000:]
    assert not (workdir / "results").exists(), "a job ran before the config was checked"
