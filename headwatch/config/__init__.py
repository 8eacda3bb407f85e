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
  words (:func:`schema_errors`), model keys that are folders of results/;
* counts and sizes above their bounds, in the config and in each studied model's files
  (:mod:`.bounds`; ``raise_bounds`` raises one on purpose), and jobs whose estimated memory
  exceeds this machine's (:mod:`.memory`);
* unknown model keys, model sources that do not exist (a local folder without
  ``config.json``, a GGUF missing from its wheel, a hub id not in the cache);
* model files that are not what they should be, each named with the model: not a regular
  file or too large, not JSON, a malformed GGUF header, shape numbers that are not positive
  integers or do not fit together (:mod:`headwatch.model.sources`);
* ``dtype: float16`` on a CPU;
* phrases, prose and token sequences longer than a studied model's context;
* head addresses and head counts that a studied model does not have;
* expected tokens that the tokenizer splits (and, as a warning, an expected
  token without its leading space after a phrase that ends in a word);
* each stage's own checks, which its settings module holds (:mod:`headwatch.settings`: the
  sweep's, the anatomy's, activation patching's; the ablation's counts), and the report's;
* when a local run starts (not here: a cluster's login node need not have the
  GPUs its jobs get), a CUDA device this machine lacks (:func:`check_devices`).

They are cheap: tokenizers are read from ``tokenizer.json`` with the
``tokenizers`` library and shapes from ``config.json`` (or a GGUF's header),
never through transformers (:mod:`headwatch.model.sources`), and a passing verdict is
cached under ``.snakemake/headwatch/`` keyed by the config, the files it was drawn
from and this package's code. Snakemake parses the Snakefile for every command (and
on a cluster inside every job), so a cached verdict costs milliseconds.

The package imports the settings modules (:mod:`headwatch.settings`), the model sources
(:mod:`headwatch.model.sources`) and, for the one-token check of an expected token,
:func:`headwatch.scores.sequences.single_token`; none of them imports torch, transformers or pandas,
so that the checks never do when the verdict is cached. One job a module:

* :mod:`.keys` — config keys (unknown, unsafe), config files (YAML errors), ``python -m
  headwatch.config FILE…`` (:mod:`.__main__`);
* :mod:`.bounds` — the bounds of every count and size (``x-bound`` in the schema, the
  model files' in :data:`headwatch.model.arch.FIELD_BOUNDS`) and ``raise_bounds``;
* :mod:`.memory` — the memory the jobs need, estimated, against this machine's;
* :mod:`.devices` — CUDA devices and float16 on a CPU;
* :mod:`.checks` — the checks that read the config and each studied model's facts, and each
  stage's own;
* :mod:`.verdict` — :func:`check_config` and its cached verdict; :func:`checked_section`, a public
  function's settings checked by the same checks;
* :mod:`.calls` — the same checks on a public function's call: the loaded model's shape and facts, its
  source and device before loading, a config handed over, the memory a call needs.

Every public name is importable from ``headwatch.config``; :class:`ConfigError`, the error of
every check, is :mod:`headwatch.model.sources`'s (the lowest room that raises it).
"""
from ..model.sources import ConfigError  # noqa: F401
from .bounds import bound_errors, bound_table, bounds_markdown  # noqa: F401
from .checks import (ablation_errors, head_errors, length_errors, model_errors, report_errors,  # noqa: F401
                     run_checks, sweep_errors, token_errors)
from .devices import (DEVICE_KEYS, check_devices, cuda_available, cuda_devices, cuda_probe,  # noqa: F401
                      device_errors, dtype_errors)
from .keys import (check_keys, check_yaml, load_schema, model_entry, schema_errors, unknown_keys,  # noqa: F401
                   yaml_errors)
from .memory import memory_errors, read_meminfo  # noqa: F401
from .verdict import WARNING_PREFIX, check_config, checked_section, load, section_errors, verdict_key  # noqa: F401
