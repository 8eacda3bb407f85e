"""Model facts read without loading a model: the shape from ``config.json`` or a GGUF's
header, the tokenizer from ``tokenizer.json``."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from .errors import ConfigError, ModelNotFoundError
from .sources import PREPARED_RECORD, Located, locate
from .tokenizer import FileTokenizer, convert_tokenizer


# ------------------------------------------------------------------ shapes without transformers
# The header is read by hand, not with the gguf package's GGUFReader: on SmolLM2-135M's GGUF
# (98 MB, 36 fields, 49 152 tokens, 272 tensors) gguf_header took 0.04-0.1 s and GGUFReader
# 2.7-6.4 s, 60-90 times longer (plus 0.2-0.35 s to import it; best of 5, 2 shared CPU cores),
# as it builds a numpy view of every token, merge and tensor description:
#     .venv/bin/python benchmarks/gguf_header.py
# The header is read whenever an unprepared GGUF model's verdict is not cached.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
                 11: "<q", 12: "<d"}


def gguf_header(path) -> dict:
    """The scalar key/values of a GGUF file's header (arrays are skipped; their length kept
    as ``<key>#len``), read in milliseconds without loading the tensors."""
    out = {}
    with open(path, "rb") as fh:
        def read(fmt):
            size = struct.calcsize(fmt)
            return struct.unpack(fmt, fh.read(size))[0]

        def string():
            return fh.read(read("<Q")).decode("utf-8", "replace")

        def skip(kind):
            if kind == 8:
                fh.seek(read("<Q"), 1)
            elif kind in _GGUF_SCALARS:
                fh.seek(struct.calcsize(_GGUF_SCALARS[kind]), 1)
            else:
                raise ValueError(f"{path}: unknown GGUF value type {kind}")

        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic)")
        version = read("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        read("<Q")                      # tensor count
        for _ in range(read("<Q")):     # key/value count
            key, kind = string(), read("<I")
            if kind == 8:
                out[key] = string()
            elif kind == 9:
                item, n = read("<I"), read("<Q")
                out[f"{key}#len"] = n
                if item in _GGUF_SCALARS and item != 8:
                    fh.seek(n * struct.calcsize(_GGUF_SCALARS[item]), 1)
                else:
                    for _ in range(n):
                        skip(item)
            else:
                out[key] = read(_GGUF_SCALARS[kind])
    return out


def shape_from_config(raw: dict) -> dict:
    """Layers, heads, kv heads, context and vocabulary from a ``config.json`` (any family; the
    keys each family uses are :mod:`headwatch.arch`'s to know, read without transformers)."""
    from ..arch import context_length, shape_of, vocab_size

    s = shape_of(raw)
    return dict(model_type=s["family"], layers=s["layers"], heads=s["heads"], kv_heads=s["kv_heads"],
                context=context_length(raw), vocab=vocab_size(raw))


def shape_from_gguf(header: dict) -> dict:
    """:func:`shape_from_config` from a GGUF header (:func:`gguf_header`); its architecture and
    key names are :mod:`headwatch.arch`'s to know (``GGUF_KEYS``, each ``Family.gguf``)."""
    from ..arch import GGUF_TOKENS, gguf_model_type, gguf_value

    heads = gguf_value(header, "heads")
    return dict(model_type=gguf_model_type(header), layers=gguf_value(header, "layers"), heads=heads,
                kv_heads=gguf_value(header, "kv_heads") or heads, context=gguf_value(header, "context"),
                vocab=gguf_value(header, "vocab") or header.get(f"{GGUF_TOKENS}#len"))


# ------------------------------------------------------------------ the facts of one model
@dataclass
class ModelFacts:
    key: str
    origin: str
    tokenizer: object
    shape: dict
    where: str


def model_facts(loc: Located, model_cfg: dict) -> ModelFacts:
    """Tokenizer and shape of one studied model, from files (transformers only to convert a
    tokenizer once, or to fetch a hub model when online)."""
    if loc.origin == "hub" and loc.folder is None:     # online and not cached: fetch it
        from transformers import AutoConfig

        src, kw = loc.convert
        AutoConfig.from_pretrained(src, **kw)
        fetched = locate(loc.key, model_cfg, loc.workdir)
        if fetched.folder is None:
            raise ModelNotFoundError(f"models.{loc.key}.source: {src!r} could not be fetched")
        loc.__dict__.update(fetched.__dict__)
    if not (loc.tokenizer / "tokenizer.json").exists():
        try:
            convert_tokenizer(loc.tokenizer, *loc.convert)
        except (OSError, ValueError, KeyError) as err:
            raise ModelNotFoundError(f"models.{loc.key}: no tokenizer can be read from {loc.convert[0]!r} "
                                     f"({type(err).__name__}: {err})") from err
    if loc.origin == "gguf":
        shape = shape_from_gguf(gguf_header(loc.gguf))
        where = f"{loc.gguf} (GGUF header)"
    else:
        shape = shape_from_config(json.loads((loc.folder / "config.json").read_text()))
        where = str(loc.folder / "config.json")
    tok = FileTokenizer(loc.tokenizer)
    if loc.origin == "prepared":   # transformers' own verdict on BOS, recorded at preparation
        record = json.loads((loc.folder / PREPARED_RECORD).read_text())
        mine = tok.bos_token_id is not None and tok("a").input_ids[:1] == [tok.bos_token_id]
        if "tokenizer_adds_bos" in record and record["tokenizer_adds_bos"] != mine:
            raise ConfigError(f"models.{loc.key}: {loc.folder}/tokenizer.json read without transformers "
                              f"{'adds' if mine else 'does not add'} a BOS token, but transformers "
                              f"{'did' if record['tokenizer_adds_bos'] else 'did not'} at preparation; "
                              "remake it: snakemake --forcerun models_prepare")
    return ModelFacts(loc.key, loc.origin, tok, shape, where)
