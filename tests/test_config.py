"""A bad config stops before any job runs, with a message that names the key."""
import json

import pytest

from headwatch.config import ConfigError, check_config, model_errors, sweep_errors
from workflow import make_workdir, snakemake, tiny_config, write_config


def base():
    import yaml
    from workflow import ROOT
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_unknown_model_key_is_named():
    config = base()
    config["models_studied"] = ["smollm2-135m", "gpt-17"]
    assert model_errors(config) == [
        f"models_studied[1]: unknown model 'gpt-17'; known models (config key `models`): {sorted(config['models'])}"]
    with pytest.raises(ConfigError, match=r"models_studied\[1\]: unknown model 'gpt-17'"):
        check_config(config)


def test_heads_that_do_not_divide_the_width_are_named():
    config = base()
    config["sweep"]["sweeps"]["heads_split"]["grid"][2] = {"width": 256, "heads": 3}
    errors = sweep_errors(config)
    assert errors == ["sweep.sweeps.heads_split.grid[2]: heads 3 do not divide width 256"]


@pytest.mark.parametrize("section", ["models_studied", "ablation", "anatomy", "sweep", "report"])
def test_a_missing_section_is_named_by_the_schema(section):
    """Every section the rules read is required: leaving one out stops the workflow with its name,
    never a bare KeyError inside a rule file."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate
    from workflow import ROOT

    config = base()
    del config[section]
    with pytest.raises(WorkflowError) as err:
        validate(config, str(ROOT / "config" / "schema.yaml"))
    assert f"'{section}' is a required property" in " ".join(map(str, err.value.args))


def test_keys_that_may_be_left_out_get_their_default():
    from snakemake.utils import validate
    from workflow import ROOT

    config = base()
    del config["report"]["tables"], config["sweep"]["threads"], config["sweep"]["skip"], config["sweep"]["studies"]
    del config["models"]["smollm2-135m"]["dtype"], config["ablation"]["method"]
    validate(config, str(ROOT / "config" / "schema.yaml"))
    assert config["report"]["tables"] == {"per_model": [], "shared": []}
    assert (config["sweep"]["threads"], config["sweep"]["skip"], config["sweep"]["studies"]) == (1, [], True)
    assert config["models"]["smollm2-135m"]["dtype"] == "float32" and config["ablation"]["method"] == "zero"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return make_workdir(tmp_path_factory.mktemp("badconfig"))


@pytest.mark.parametrize("change, message", [
    (lambda c: c["sweep"]["sweeps"]["heads_split"]["grid"].append({"width": 256, "heads": 3}),
     "sweep.sweeps.heads_split.grid"),
    (lambda c: c.update(models_studied=["no-such-model"]), "models_studied[0]: unknown model 'no-such-model'"),
    (lambda c: c["phrases"]["names"].update(expected=" Maryland-upon-Thames"),
     "phrases.names.expected = ' Maryland-upon-Thames' is split by the tokenizer"),
    (lambda c: c["attention"].update(quantum="fine"), "quantum"),
    (lambda c: c["edges"].update(fractions=[0.1, 0.05, 1.0]), "edges.fractions: [0.1, 0.05, 1.0] is not strictly "
                                                             "increasing"),
    (lambda c: c["edges"].update(random_draws=3), "random_draws"),
    (lambda c: c["edges"].update(methods=["eap", "acdc"]), "acdc"),
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


# ---------------------------------------------------------------- pre-job checks, unit by unit
def test_unknown_keys_are_named_with_their_path_and_the_nearest_valid_key():
    from headwatch.config import load_schema, unknown_keys
    from workflow import ROOT

    schema = load_schema(ROOT / "config" / "schema.yaml")
    assert unknown_keys(base(), schema) == []
    config = base()
    config["ablaton"] = {"top_n": 2}
    config["sweep"]["sweeps"]["heads_split"]["grid"][1]["haeds"] = 2
    config["models"]["smollm2-135m"]["gguf"]["fiel"] = "x.gguf"
    config["phrases"]["names"]["zzz"] = 1
    assert unknown_keys(config, schema) == [
        "models.smollm2-135m.gguf.fiel: unknown key 'fiel' under `models.smollm2-135m.gguf`; did you mean `file`?",
        "phrases.names.zzz: unknown key 'zzz' under `phrases.names`; valid keys here: "
        "['also', 'expected', 'random', 'seed', 'text']",
        "sweep.sweeps.heads_split.grid[1].haeds: unknown key 'haeds' under `sweep.sweeps.heads_split.grid[1]`; "
        "did you mean `heads`?",
        "ablaton: unknown key 'ablaton' at the top level; did you mean `ablation`?",
    ]
    with pytest.raises(ConfigError, match="a misspelled key would be silently ignored"):
        check_config(config)


@pytest.mark.parametrize("device, cuda, refused", [("cpu", True, True), ("auto", False, True),
                                                   ("auto", True, False), ("cuda", False, False)])
def test_float16_is_refused_where_the_jobs_would_run_on_a_cpu(device, cuda, refused):
    from headwatch.config import dtype_errors

    config = base()
    config["device"] = device
    config["models"]["smollm2-135m"]["dtype"] = "float16"
    errors = dtype_errors(config, cuda=lambda: cuda)
    assert bool(errors) == refused
    if refused:
        assert errors[0].startswith("models.smollm2-135m.dtype: float16 on the CPU")
        assert "use dtype: float32" in errors[0]
    config["models"]["smollm2-135m"]["dtype"] = "float32"
    assert dtype_errors(config, cuda=lambda: False) == []


def test_a_passing_verdict_is_cached_and_keyed_by_config_and_files(tmp_path, tiny_model_dir, monkeypatch):
    import shutil

    import headwatch.config.verdict as hc
    from workflow import ROOT, deep_merge, tiny_config

    shutil.copytree(ROOT / "config", tmp_path / "config")
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = deep_merge(base(), tiny_config(model))
    assert check_config(config, tmp_path) == []
    assert len(list((tmp_path / ".snakemake/headwatch/checks").glob("*.json"))) == 1
    calls, keys = [], []
    real, real_keys = hc.run_checks, hc.check_keys
    monkeypatch.setattr(hc, "run_checks", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(hc, "check_keys", lambda *a: keys.append(1) or real_keys(*a))
    check_config(config, tmp_path)
    assert calls == keys == []                             # cached: the keys were checked with it
    schema = tmp_path / "config" / "schema.yaml"
    schema.write_text(schema.read_text() + "\n# another schema\n")
    check_config(config, tmp_path)
    assert calls == keys == [1]                            # another schema: checked again, keys too
    calls.clear()
    config["attention"]["batch"] = 3
    check_config(config, tmp_path)
    assert calls == [1]                                    # another config: checked again
    (model / "config.json").write_text((model / "config.json").read_text().replace(
        '"max_position_embeddings": 256', '"max_position_embeddings": 40'))
    with pytest.raises(ConfigError, match=r"sequences.half_length = 25 \(× 2\): 50 tokens, longer than the "
                                          r"context of model tiny-llama \(40 positions"):
        check_config(config, tmp_path)                     # a changed file: checked again, and refused
    assert calls == [1, 1]
    with pytest.raises(ConfigError):
        check_config(config, tmp_path)                     # a refusal is never cached
    assert calls == [1, 1, 1]


def test_a_cached_verdict_imports_neither_torch_nor_transformers(tmp_path, tiny_model_dir):
    """What makes `snakemake -n` cheap: once cached, the checks read a few files and hash them."""
    import shutil
    import subprocess
    import sys

    from workflow import ROOT, deep_merge, tiny_config

    shutil.copytree(ROOT / "config", tmp_path / "config")
    config = deep_merge(base(), tiny_config(tiny_model_dir))
    check_config(config, tmp_path)
    code = ("import json, sys; from headwatch.config import check_config; "
            f"check_config(json.loads(sys.argv[1]), {str(tmp_path)!r}); "
            "print(sorted(m for m in ('torch', 'transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(config)], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_gguf_source_is_checked_from_its_header_and_a_converted_tokenizer(tmp_path, smollm2_tokenizer):
    """Before the default model is prepared, its shape comes from the GGUF's header and its
    tokenizer from a tokenizer.json that transformers writes once (then the checks are cheap)."""
    import shutil

    from headwatch.model.sources import locate, model_facts
    from workflow import ROOT

    shutil.copytree(ROOT / "config", tmp_path / "config")
    config = base()
    loc = locate("smollm2-135m", config["models"]["smollm2-135m"], tmp_path)
    assert loc.origin == "gguf" and not (loc.tokenizer / "tokenizer.json").exists()
    facts = model_facts(loc, config["models"]["smollm2-135m"])
    assert (loc.tokenizer / "tokenizer.json").exists()
    assert (facts.shape["layers"], facts.shape["heads"], facts.shape["context"]) == (30, 9, 8192)
    for text in ("The cat sat on the mat. The cat sat on the", " Mary", " tap"):
        assert facts.tokenizer(text).input_ids == smollm2_tokenizer(text).input_ids
    assert check_config(config, tmp_path) == []



def test_a_rotary_reference_without_its_config_is_named(tmp_path):
    """The explorer's clock compares bases with reference configs: a missing one is a config error
    (checked with the others before any job, not while the rules are read)."""
    import shutil

    from headwatch.config import report_errors
    from workflow import ROOT

    config = base()
    assert report_errors(config, ROOT) == []
    config["report"]["explorer"]["rotary_references"] = ["qwen2.5-0.5b", "gpt-17"]
    shutil.copytree(ROOT / "config", tmp_path / "config")
    assert report_errors(config, tmp_path) == [
        "report.explorer.rotary_references[1]: 'gpt-17' has no reference config config/models/gpt-17.json"]


def test_edge_circuit_settings_a_schema_cannot_check_are_named():
    from headwatch.settings.edges import edges_errors

    config = base()
    assert edges_errors(config) == []
    bad = dict(config, edges=dict(config["edges"], fractions=[0.01, 0.5], methods=["eap", "eap"], prompts=65))
    errors = edges_errors(bad)
    assert "edges.fractions: the last size must be 1 (every edge: the full model); got 0.5" in errors
    assert "edges.methods: ['eap', 'eap'] names a method twice" in errors
    assert "edges.prompts: 65 is more than the 64 prompts activation patching makes (patching.n)" in errors
