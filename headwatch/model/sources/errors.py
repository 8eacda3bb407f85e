"""The errors of a model's source and files, each naming the config key, or the model and the file.

:class:`ConfigError` is every pre-job check's error (:mod:`headwatch.config` raises it too); it is
defined here, in the lowest room that raises it (a GGUF file name that leaves its package)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work — a key of the config, or a public function's keyword, setting or
    argument; the message names the key (or the function and the argument as given).

    >>> try:
    ...     hw.patch_heads(m, prompts, top_k=0)
    ... except hw.ConfigError as err:
    ...     print(err)        # hw.patch_heads: top_k=0 (patching.top_k): 0 is less than the minimum of 1
    """


class ModelNotFoundError(FileNotFoundError):
    """A configured model whose weights are not on this machine (or a name that is no model's).

    >>> hw.load_model("smollm")   # ModelNotFoundError: … is not a model key …; did you mean 'smollm2-135m'?
    """


class ModelFileError(ConfigError):
    """A file read to learn a model's facts (``config.json``, ``tokenizer.json``, a GGUF header,
    …) that is not what it should be: not a regular file, too large, not JSON, a malformed
    header, a shape the family cannot have. The message names the model key (where the file
    belongs to one), the file and the cause.

    >>> hw.load_model("my-model/")   # a config.json with 0 heads: ModelFileError naming the file and the key
    """
