# Helpers shared by every stage: paths, config slices, targets.
import json
from pathlib import Path

from headwatch.config import check_config as _check_config

RESULTS = "results"
FIGURES = "figures"

wildcard_constraints:
    model=r"[A-Za-z0-9_.\-]+",
    set=r"induction|eval|circuit|prose|phrases",


def check_config(config):
    """Semantic checks that a JSON schema cannot express (headwatch/config.py)."""
    _check_config(config, workdir=Path(workflow.basedir))


def studied_models():
    return list(config["models_studied"])


def get_model_cfg(model):
    return config["models"][model]


def get_dtype(model):
    return config["models"][model].get("dtype", "float32")


def prepared(model):
    """The record file written last by models_prepare; its folder is the model."""
    return f"{RESULTS}/models/{model}/prepared.json"


def model_dir(model):
    return f"{RESULTS}/models/{model}"


def expand_models(pattern, **kw):
    return expand(pattern, model=studied_models(), **kw)
