"""The errors of a model's source and files, each naming the config key, or the model and the file.

:class:`ConfigError` is every pre-job check's error (:mod:`headwatch.config` raises it too); it is
defined here, in the lowest room that raises it (a GGUF file name that leaves its package)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


class ModelNotFoundError(FileNotFoundError):
    """A configured model whose weights are not on this machine."""


class ModelFileError(ConfigError):
    """A file read to learn a model's facts (``config.json``, ``tokenizer.json``, a GGUF header,
    …) that is not what it should be: not a regular file, too large, not JSON, a malformed
    header, a shape the family cannot have. The message names the model key (where the file
    belongs to one), the file and the cause."""
