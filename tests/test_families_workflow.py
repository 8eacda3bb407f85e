"""The workflow on local folders of two more families than the spine's Llama (tests/test_workflow.py),
in a module of its own so that it runs beside the spine under pytest-xdist (tests/conftest.py)."""
import json

import pandas as pd

from headwatch import paths
from tiny import WINDOW
from workflow import make_workdir, snakemake, tiny_config, write_config

STUDIED_FAMILIES = ("gemma2", "qwen3")
"""Families the workflow runs end to end besides Llama: soft-capping, Gemma's norm, a window,
query_pre_attn_scalar; QK-norm and a window from layer 1 on."""


def test_gemma2_and_qwen3_folders_run_scores_cuts_weight_check_and_key_groups(tmp_path, tiny_model_dir,
                                                                                tiny_family_dir):
    """Local folders of two more families through the pre-job checks and the model rules, their
    targets only (the spine, tests/test_workflow.py, covers the rest on tiny-llama): 18 jobs, ~3 s of CPU each."""
    workdir = make_workdir(tmp_path)
    models = {f"tiny-{f}": {"source": str(tiny_family_dir(f)), "dtype": "float32"} for f in STUDIED_FAMILIES}
    config = dict(tiny_config(tiny_model_dir), models=models, models_studied=list(models))
    configfile = write_config(workdir, config, "families.yaml")
    targets = [p for m in models for p in (paths.scores(m), paths.ablation_table(m, "topk"),
                                           paths.model_anatomy(m, "weight_check.json"),
                                           paths.model_anatomy(m, "kv_groups.parquet"))]
    result = snakemake(workdir, *targets, "--configfile", str(configfile))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for m, family in zip(models, STUDIED_FAMILIES):
        res = workdir / "results" / m
        assert len(pd.read_parquet(res / "scores.parquet")) == 3 * 4
        assert len(pd.read_parquet(res / "ablation" / "topk.parquet")) > 0
        check = json.loads((res / "anatomy" / "weight_check.json").read_text())
        assert check["family"] == family and check["passed"] and check["max_abs_delta"] < 1e-5
        cuts = pd.read_parquet(res / "anatomy" / "kv_groups.parquet")
        mine = cuts[cuts.role == "model"]
        assert (mine.groupby(["layer", "kv_group"])["heads_moved"].first() == 2).all()
        assert (mine[~mine.in_group]["max_delta"] == 0).all()
    gemma = json.loads((workdir / "results" / "tiny-gemma2" / "anatomy" / "weight_check.json").read_text())
    assert (gemma["softcap"], gemma["window"], gemma["norm_offset"]) == (10.0, WINDOW, 1.0)   # layer 0
