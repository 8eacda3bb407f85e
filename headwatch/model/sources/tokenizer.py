"""A studied model's tokenizer read from ``tokenizer.json`` without transformers (and the one
conversion transformers makes for a source that has no such file)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from tokenizers import Tokenizer

from .errors import ModelFileError, ModelNotFoundError
from .files import custom_code, one_line, read_json, read_text

from ... import paths


class _Encoding:
    def __init__(self, ids):
        self.input_ids = ids


def _token_content(value):
    return value.get("content") if isinstance(value, dict) else value


class FileTokenizer:
    """A tokenizer read from ``tokenizer.json`` with the ``tokenizers`` library.

    It offers the part of a transformers tokenizer the checks and sequences use
    (``tok(text).input_ids``, ``decode``, ``len``, ``bos_token_id``,
    ``all_special_ids``), in a fraction of the time (no transformers import).
    Like transformers (5.x) it takes the pipeline, BOS/EOS template included,
    from ``tokenizer.json`` alone; ``tokenizer_config.json`` only names the
    special tokens. A folder whose tokenizer class builds its own pipeline is
    converted by transformers first (:func:`generic_tokenizer`).
    """

    def __init__(self, folder):
        folder = Path(folder)
        self.folder = folder
        path = folder / "tokenizer.json"
        text = read_text(path, "tokenizer.json")        # a regular file of bounded size
        if not text.strip():
            raise ModelFileError(f"{path} is empty; it should hold a tokenizer (JSON)")
        try:
            self._tok = Tokenizer.from_str(text)
        except Exception as err:    # the tokenizers library's own errors: re-raised as ours
            raise ModelFileError(f"{path} is not a tokenizer the tokenizers library can read "
                                 f"({one_line(err)})") from err
        cfg = _tokenizer_config(folder)
        self.bos_token = _token_content(cfg.get("bos_token"))
        self.bos_token_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        # transformers' all_special_ids: the named special tokens and the extra ones
        names = [_token_content(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "sep_token",
                                                      "pad_token", "cls_token", "mask_token")]
        names += [_token_content(t) for k in ("extra_special_tokens", "additional_special_tokens")
                  for t in (cfg.get(k) or [])]
        ids = {self._tok.token_to_id(t) for t in names if isinstance(t, str)}
        self.all_special_ids = sorted(i for i in ids if i is not None)

    def __call__(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        return _Encoding(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


# Tokenizer classes that load tokenizer.json as it is; other classes (LlamaTokenizer, …)
# rebuild their own pipeline in transformers 5, so their folders are converted once.
GENERIC_TOKENIZERS = (None, "TokenizersBackend", "PreTrainedTokenizerFast")


def generic_tokenizer(folder: Path) -> bool:
    """Does ``folder`` hold a tokenizer.json that transformers would use unchanged?"""
    if not (folder / "tokenizer.json").exists():
        return False
    return _tokenizer_config(folder).get("tokenizer_class") in GENERIC_TOKENIZERS


def folder_tokenizer(folder):
    """The tokenizer of a model folder (a prepared one: ``results/models/{model}/``) as the jobs
    that need only a tokenizer read it: with :class:`FileTokenizer` where transformers would use
    ``tokenizer.json`` unchanged (:func:`generic_tokenizer`: the same ids, tests/test_models.py),
    else transformers' own. A sequences job spent 6 of its 9 s of CPU importing transformers."""
    folder = Path(folder)
    if generic_tokenizer(folder):
        return FileTokenizer(folder)
    from transformers import AutoTokenizer      # a class that builds its own pipeline

    return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)


def _tokenizer_config(folder: Path) -> dict:
    """``tokenizer_config.json`` of ``folder`` ({} when there is none), read as data."""
    path = folder / "tokenizer_config.json"
    raw = read_json(path) if path.exists() else {}
    custom_code(raw, path)                    # a tokenizer class of the folder's own code: refused, never run
    return raw


def convert_tokenizer(folder: Path, src: str, kw: dict) -> None:
    """Save the tokenizer transformers reads from ``src`` (a GGUF, slow tokenizer files) as
    ``folder``/tokenizer.json, once; later checks read that file with the tokenizers library."""
    # Here, not at the top: a cached verdict never imports transformers (tests/test_config.py), and
    # importing it takes 2.3 s; a tokenizer is converted once per source.
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(src, **kw, trust_remote_code=False)
    except OSError as err:
        raise ModelNotFoundError(f"cannot read the tokenizer of {src!r}: {err}") from err
    except Exception as err:    # transformers refuses a file (its config, a shape) in many ways: re-raised as ours
        raise ModelFileError(f"transformers cannot read the tokenizer of {src!r}{_files(kw)}: "
                             f"{one_line(err)}") from err
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = paths.temporary(folder)
    try:
        tok.save_pretrained(tmp)
        if not (tmp / "tokenizer.json").exists():
            raise ModelNotFoundError(f"the tokenizer of {src!r} has no fast form (tokenizer.json)")
        try:
            os.replace(tmp, folder)
        except OSError:      # made by a concurrent check meanwhile: theirs is kept
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _files(kw: dict) -> str:
    return f" (file {kw['gguf_file']})" if kw.get("gguf_file") else " (its config.json and tokenizer files)"
