"""Checks of the config that run before any job (protocol §9).

The Snakefile calls :func:`check_keys` before the JSON schema and
:func:`check_config` right after it. Every mistake that can be seen from the
config, the model sources and each studied model's ``tokenizer.json`` /
``config.json`` stops the workflow here, with a message that names the key:

* a config file that YAML cannot read, with its file, line and column
  (:func:`check_yaml`; Snakemake's own message names neither);
* keys the schema does not know, at any level, with the nearest valid key;
* names that become part of paths and are not safe, phrase text that is not one
  line, devices that are none of ``auto``/``cpu``/``cuda``/``cuda:N``, said in
  words (:func:`schema_errors`, :func:`name_errors`);
* counts and sizes above their bounds, in the config and in each studied model's files
  (:mod:`.bounds`; ``raise_bounds`` raises one on purpose), and jobs whose estimated memory
  exceeds this machine's (:mod:`.memory`);
* unknown model keys, model sources that do not exist (a local folder without
  ``config.json``, a GGUF missing from its wheel, a hub id not in the cache);
* model files that are not what they should be, each named with the model: not a regular
  file or too large, not JSON, a malformed GGUF header, shape numbers that are not positive
  integers or do not fit together (:mod:`.files`, :mod:`.facts`);
* ``dtype: float16`` on a CPU;
* phrases, prose and token sequences longer than a studied model's context;
* head addresses and head counts that a studied model does not have;
* expected tokens that the tokenizer splits (and, as a warning, an expected
  token without its leading space after a phrase that ends in a word);
* the sweep's, the anatomy's and the report's own checks;
* when a local run starts (not here: a cluster's login node need not have the
  GPUs its jobs get), a CUDA device this machine lacks (:func:`check_devices`).

They are cheap: tokenizers are read from ``tokenizer.json`` with the
``tokenizers`` library and shapes from ``config.json`` (or a GGUF's header),
never through transformers, and a passing verdict is cached under
``.snakemake/headwatch/`` keyed by the config, the files it was drawn from and
this package's code. Snakemake parses the Snakefile for every command (and on a
cluster inside every job), so a cached verdict costs milliseconds.

The package, one job a module (each imports only the standard library at the top,
so that the checks never import torch or transformers when the verdict is cached):

* :mod:`.keys` — config keys (unknown, unsafe), config files (YAML errors), ``python -m
  headwatch.config FILE…`` (:mod:`.__main__`);
* :mod:`.bounds` — the bounds of every count and size (``x-bound`` in the schema, the
  model files' in :data:`headwatch.arch.FIELD_BOUNDS`) and ``raise_bounds``;
* :mod:`.sources` — where each model comes from and whether it exists here (used by
  :mod:`headwatch.models` too), where its facts are read from;
* :mod:`.files` — a model's files read as data (regular files of bounded size, parse errors
  naming the file);
* :mod:`.tokenizer` — tokenizers read from ``tokenizer.json`` without transformers;
* :mod:`.facts` — model facts read without loading a model (``config.json``, a GGUF's header),
  their shape numbers checked;
* :mod:`.memory` — the memory the jobs need, estimated, against this machine's;
* :mod:`.devices` — CUDA devices and float16 on a CPU;
* :mod:`.checks` — the checks that read the config and each studied model's facts;
* :mod:`.verdict` — :func:`check_config` and its cached verdict;
* :mod:`.errors` — :class:`ConfigError`, :class:`ModelNotFoundError`, :class:`ModelFileError`.

Every public name is importable from ``headwatch.config``.
"""
from .checks import (head_errors, length_errors, model_errors, report_errors, run_checks,  # noqa: F401
                     sweep_errors, token_errors)
from .devices import (DEVICE_KEYS, check_devices, cuda_available, cuda_devices, cuda_probe,  # noqa: F401
                      device_errors, dtype_errors)
from .bounds import bound_errors, bound_table, bounds_markdown  # noqa: F401
from .errors import ConfigError, ModelFileError, ModelNotFoundError  # noqa: F401
from .facts import ModelFacts, gguf_header, model_facts, shape_from_config, shape_from_gguf  # noqa: F401
from .files import read_json  # noqa: F401
from .memory import memory_errors, read_meminfo  # noqa: F401
from .keys import (check_keys, check_yaml, load_schema, main, model_entry, name_errors,  # noqa: F401
                   schema_errors, unknown_keys, yaml_errors)
from .sources import (CACHE_DIR, PREPARED_RECORD, WEIGHT_FILES, Located, gguf_path, hub_file,  # noqa: F401
                      locate, looks_like_path, offline, source_errors, source_of)
from .tokenizer import FileTokenizer, generic_tokenizer  # noqa: F401
from .verdict import WARNING_PREFIX, check_config, verdict_key  # noqa: F401
