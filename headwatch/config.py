"""Checks of the config that a JSON schema cannot express.

Run by the Snakefile after schema validation and before any job: a bad value
stops the workflow with a message that names the key.
"""
from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


def model_errors(config: dict) -> list[str]:
    known = sorted(config["models"])
    return [f"study[{i}]: unknown model {key!r}; known models (config key `models`): {known}"
            for i, key in enumerate(config["study"]) if key not in config["models"]]


def sweep_errors(config: dict) -> list[str]:
    """The sweep's own checks (heads that do not divide the width, warm-up past the steps, …)."""
    if "sweep" not in config:
        return []
    from .charlm import check_sweeps

    return check_sweeps(config["sweep"])


def token_errors(config: dict, workdir: Path) -> list[str]:
    """Every studied model's tokenizer must keep each expected token whole."""
    from .models import load_tokenizer
    from .sequences import candidate_ids, single_token

    errors = []
    for key in config["study"]:
        tok = load_tokenizer(config["models"][key], workdir / "results" / "models" / key)
        for name, spec in config["phrases"].items():
            for field in ("expected", "also"):
                if field in spec:
                    try:
                        single_token(tok, spec[field], f"phrases.{name}.{field}")
                    except ValueError as err:
                        errors.append(f"{err} (model {key})")
        try:
            candidate_ids(tok, config["sequences"]["vocab_low"], config["sequences"]["vocab_high"])
        except ValueError as err:
            errors.append(f"{err} (model {key})")
    return errors


def check_config(config: dict, workdir: str | Path = ".") -> None:
    from .anatomy.configs import config_errors as anatomy_errors

    errors = model_errors(config) + sweep_errors(config) + anatomy_errors(config, workdir)
    if not errors:  # tokenizers only for known models
        errors = token_errors(config, Path(workdir))
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
