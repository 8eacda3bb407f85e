"""The two errors of the pre-job checks (each message names the config key)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


class ModelNotFoundError(FileNotFoundError):
    """A configured model whose weights are not on this machine."""
