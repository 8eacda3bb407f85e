"""Model facts read without loading a model: the shape from ``config.json`` or a GGUF's
header, the tokenizer from ``tokenizer.json``."""
from __future__ import annotations

import json
import math
import os
import struct

from dataclasses import dataclass

from ..arch import (CONFIG_KEYS, FAMILIES, GGUF_KEYS, GGUF_TOKENS, context_length, gguf_model_type, gguf_value,
                    shape_of, vocab_size)
from .errors import ConfigError, ModelFileError, ModelNotFoundError
from .files import custom_code, one_line, open_regular, read_json

from .limits import MODEL_FILE, field_limit, refusal
from .resolve import PREPARED_RECORD, Located
from .tokenizer import FileTokenizer, convert_tokenizer


# ------------------------------------------------------------------ a GGUF's header, by hand
# The header is read by hand, not with the gguf package's GGUFReader: on SmolLM2-135M's GGUF
# (98 MB, 36 fields, 49 152 tokens, 272 tensors) gguf_header took 0.04-0.1 s and GGUFReader
# 2.7-6.4 s, 60-90 times longer (plus 0.2-0.35 s to import it; best of 5, 2 shared CPU cores),
# as it builds a numpy view of every token, merge and tensor description:
#     .venv/bin/python benchmarks/gguf_header.py
# The header is read whenever an unprepared GGUF model's verdict is not cached. A GGUF is data
# from outside: every length and count is checked against what the rest of the file can hold
# before it is used, so that a malformed header fails at once with ModelFileError naming the
# file, never with a MemoryError, a struct.error or a read of gigabytes.
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
                 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_GGUF_VERSIONS = (2, 3)            # version 1 had 32-bit lengths; later versions are unknown here
_GGUF_MIN_ENTRY = 8 + 4 + 1        # a key/value: key length, value type, at least one byte of value
_GGUF_MIN_TENSOR = 8 + 4 + 4 + 8   # a tensor's description: name length, dimensions, type, offset
_GGUF_MAX_KEY = 65535              # the GGUF specification's longest key
_GGUF_MAX_VALUE = 16 << 20         # a string value kept (chat templates are tens of KB; arrays are skipped)
_GGUF_MAX_NESTING = 4              # arrays of arrays


def gguf_header(path) -> dict:
    """The scalar key/values of a GGUF file's header (arrays are skipped; their length kept
    as ``<key>#len``), read in milliseconds without loading the tensors. The file must be a
    regular file; a malformed header (a length or count beyond what the file holds, an
    unknown value type, a truncated file) raises :class:`ModelFileError` naming it."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        return _GGUFHeader(fh, os.fstat(fh.fileno()).st_size, path).read()


class _GGUFHeader:
    def __init__(self, fh, size: int, path):
        self.fh, self.size, self.path = fh, size, path

    def bad(self, why: str) -> ModelFileError:
        return ModelFileError(f"{self.path} is not a GGUF header headwatch can read: {why} (at byte "
                              f"{self.fh.tell():,} of {self.size:,})")

    def left(self) -> int:
        return self.size - self.fh.tell()

    def take(self, n: int, what: str) -> bytes:
        if n > self.left():
            raise self.bad(f"{what} needs {n:,} bytes, past the end of the file")
        data = self.fh.read(n)
        if len(data) != n:
            raise self.bad(f"the file ends inside {what}")
        return data

    def skip(self, n: int, what: str) -> None:
        if n > self.left():
            raise self.bad(f"{what} needs {n:,} bytes, past the end of the file")
        self.fh.seek(n, 1)

    def number(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, what: str, each: int) -> int:
        n = self.number("<Q", what)
        if n * each > self.left():
            raise self.bad(f"{what} is {n:,}, more than the {self.left():,} bytes left can hold")
        return n

    def string(self, what: str, most: int) -> str:
        n = self.number("<Q", f"the length of {what}")
        if n > most:
            raise self.bad(f"{what} is {n:,} bytes long, longer than {most:,}")
        return self.take(n, what).decode("utf-8", "replace")

    def array(self, key: str, depth: int) -> int:
        """Skip an array's items; its length."""
        if depth > _GGUF_MAX_NESTING:
            raise self.bad(f"{key!r}: arrays nested more than {_GGUF_MAX_NESTING} deep")
        item = self.number("<I", f"the item type of {key!r}")
        if item in _GGUF_SCALARS:
            size = struct.calcsize(_GGUF_SCALARS[item])
            n = self.count(f"the length of {key!r}", size)
            self.skip(n * size, f"the items of {key!r}")
        elif item == _GGUF_STRING:      # the hot loop (49 152 tokens, 48 900 merges): inlined
            n = self.count(f"the length of {key!r}", 8)
            fh, unpack, size, pos = self.fh, _U64.unpack, self.size, self.fh.tell()
            for _ in range(n):
                raw = fh.read(8)
                pos += 8
                if len(raw) != 8:
                    raise self.bad(f"the file ends inside a string length of {key!r}")
                length = unpack(raw)[0]
                pos += length
                if pos > size:
                    raise self.bad(f"a string of {key!r} needs {length:,} bytes, past the end of the file")
                fh.seek(length, 1)
        elif item == _GGUF_ARRAY:
            n = self.count(f"the length of {key!r}", 12)
            for _ in range(n):
                self.array(key, depth + 1)
        else:
            raise self.bad(f"{key!r} is an array of unknown value type {item}")
        return n

    def read(self) -> dict:
        if self.fh.read(4) != b"GGUF":
            raise self.bad("no GGUF magic")
        version = self.number("<I", "the version")
        if version not in _GGUF_VERSIONS:
            raise self.bad(f"GGUF version {version} is not supported (versions {_GGUF_VERSIONS})")
        self.count("the tensor count", _GGUF_MIN_TENSOR)
        out = {}
        for i in range(self.count("the key/value count", _GGUF_MIN_ENTRY)):
            key = self.string(f"key {i}", _GGUF_MAX_KEY)
            kind = self.number("<I", f"the value type of {key!r}")
            if kind == _GGUF_STRING:
                out[key] = self.string(f"the value of {key!r}", _GGUF_MAX_VALUE)
            elif kind == _GGUF_ARRAY:
                out[f"{key}#len"] = self.array(key, 1)
            elif kind in _GGUF_SCALARS:
                out[key] = self.number(_GGUF_SCALARS[kind], f"the value of {key!r}")
            else:
                raise self.bad(f"{key!r} has unknown value type {kind}")
        return out


# ------------------------------------------------------------------ a safetensors file's header
_SAFETENSORS_MAX_HEADER = 100 << 20      # the safetensors library's own limit on a header
_SAFETENSORS_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def safetensors_header(path) -> dict:
    """The tensors a ``.safetensors`` file describes (``{name: {dtype, shape, data_offsets}}``), its header read
    as data: a regular file, its 8-byte length within the file, a JSON object whose every tensor lies inside
    the file with the bytes its dtype and shape need — else :class:`ModelFileError` naming the file (an empty
    or garbage file is refused before the loader reads it)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        bad = lambda why: ModelFileError(f"{path} is not a safetensors file headwatch can read: {why} ({size:,} bytes)")
        head = fh.read(8)
        if len(head) < 8:
            raise bad("it ends before its header's length")
        n = _U64.unpack(head)[0]
        if n > min(size - 8, _SAFETENSORS_MAX_HEADER):
            raise bad(f"its header's length {n:,} is past the end of the file")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (ValueError, RecursionError) as err:
            raise bad(f"its header is not JSON ({one_line(err)})") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    data = size - 8 - n
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = t["data_offsets"]
            count = math.prod(t["shape"]) * _SAFETENSORS_BYTES[t["dtype"]]
            fits = 0 <= begin <= end <= data and end - begin == count
        except (TypeError, KeyError, ValueError):
            raise bad(f"tensor {name[:80]!r}: not a description of a tensor (dtype, shape, data_offsets)") from None
        if not fits:
            raise bad(f"tensor {name[:80]!r}: its bytes {t['data_offsets']} do not lie in the file's {data:,} bytes "
                      f"of data, or are not its shape's {t['shape']}")
    return header


# ------------------------------------------------------------------ shapes without transformers
SHAPE_FIELDS = ("layers", "heads", "kv_heads", "width", "head_dim", "ffn", "vocab", "context")
"""The shape numbers a model file says (keys of :data:`headwatch.model.arch.CONFIG_KEYS` and
``GGUF_KEYS``), each a positive integer within its bound (:data:`headwatch.model.arch.FIELD_BOUNDS`)."""


def config_fields(raw: dict) -> dict[str, tuple[str, object]]:
    """``{field: (the config.json key that says it, its value)}`` for the shape numbers it sets."""
    out = {}
    for what in SHAPE_FIELDS:
        key = next((k for k in CONFIG_KEYS[what] if raw.get(k) is not None), None)
        if key is not None:
            out[what] = (key, raw[key])
    return out


def gguf_fields(header: dict) -> dict[str, tuple[str, object]]:
    """:func:`config_fields` from a GGUF header (:func:`gguf_header`)."""
    arch = header.get("general.architecture", "llama")
    out = {}
    for what in SHAPE_FIELDS:
        key = f"{arch}.{GGUF_KEYS[what]}" if what in GGUF_KEYS else None
        if key is not None and header.get(key) is not None:
            out[what] = (key, header[key])
    if "vocab" not in out and f"{GGUF_TOKENS}#len" in header:
        out["vocab"] = (f"{GGUF_TOKENS} (its length)", header[f"{GGUF_TOKENS}#len"])
    return out


def _integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def field_errors(fields: dict, model_type, config: dict) -> list[str]:
    """What is wrong with a model file's shape numbers, each naming the file's key: not a
    positive integer (a string ``"4"``, ``4.5``, 0), above its bound, heads that do not
    divide the width (as the family needs), kv heads that do not divide the heads."""
    out, ok = [], {}
    for what in SHAPE_FIELDS:
        if what not in fields:
            continue
        key, value = fields[what]
        bound, why = field_limit(what, config)
        if not _integer(value):
            out.append(f"{key} = {value!r} is not an integer ({type(value).__name__})")
        elif value < 1:
            out.append(f"{key} = {value} must be a positive integer")
        elif value > bound:
            out.append(refusal(key, f"{value:,} is", bound, f"{MODEL_FILE}.{what}", why))
        else:
            ok[what] = value
    family = FAMILIES.get(model_type)
    if "heads" in ok and "width" in ok and ("head_dim" not in ok or (family and family.heads_divide_width)):
        if ok["width"] % ok["heads"]:
            out.append(f"{fields['heads'][0]} = {ok['heads']} does not divide {fields['width'][0]} = "
                       f"{ok['width']} (the head size would be {ok['width'] / ok['heads']:g})")
    if "heads" in ok and "kv_heads" in ok and ok["heads"] % ok["kv_heads"]:
        out.append(f"{fields['kv_heads'][0]} = {ok['kv_heads']} does not divide {fields['heads'][0]} = "
                   f"{ok['heads']} (query heads per key/value group)")
    return out


def rotary_error(base, key: str) -> str | None:
    """A rotary base that is not a positive finite number (0 gave NaN attention), else None."""
    if base is None:
        return None
    if not (isinstance(base, (int, float)) and not isinstance(base, bool) and math.isfinite(base) and base > 0):
        return f"{key} = {base!r} is not a positive number (the rotary base)"
    return None


def shape_from_config(raw: dict) -> dict:
    """Layers, heads, kv heads, width, head size, FFN width, context, vocabulary and rotary base
    from a ``config.json`` (any family; the keys each family uses are :mod:`headwatch.model.arch`'s to
    know, read without transformers). The numbers are taken as they are: :func:`field_errors`
    says whether they can be a model."""
    s = shape_of(raw)
    return dict(model_type=s["family"], layers=s["layers"], heads=s["heads"], kv_heads=s["kv_heads"],
                context=context_length(raw), vocab=vocab_size(raw), width=s["width"], head_dim=s["head_dim"],
                ffn=config_fields(raw).get("ffn", (None, None))[1], rotary_base=s["rotary_base"])


def shape_from_gguf(header: dict) -> dict:
    """:func:`shape_from_config` from a GGUF header (:func:`gguf_header`); its architecture and
    key names are :mod:`headwatch.model.arch`'s to know (``GGUF_KEYS``, each ``Family.gguf``)."""
    f = {what: value for what, (_, value) in gguf_fields(header).items()}
    heads, width = f.get("heads"), f.get("width")
    head_dim = f.get("head_dim") or (width // heads if _integer(width) and _integer(heads) and heads > 0
                                     and width % heads == 0 else None)
    return dict(model_type=gguf_model_type(header), layers=f.get("layers"), heads=heads,
                kv_heads=f.get("kv_heads") or heads, context=f.get("context"), vocab=f.get("vocab"),
                width=width, head_dim=head_dim, ffn=f.get("ffn"), rotary_base=gguf_value(header, "rotary_base"))


def read_shape(loc: Located, config: dict) -> tuple[dict, str]:
    """(shape, where it was read) of a located model, its file read as data and its numbers
    checked (:func:`field_errors`, :func:`rotary_error`): :class:`ModelFileError` lists every
    problem, naming the file and its keys."""
    if loc.origin == "gguf":
        header = gguf_header(loc.gguf)
        where, fields, model_type = f"{loc.gguf} (GGUF header)", gguf_fields(header), gguf_model_type(header)
        base_key = f"{header.get('general.architecture', 'llama')}.{GGUF_KEYS['rotary_base']}"
        make = lambda: shape_from_gguf(header)
    else:
        raw = read_json(loc.folder / "config.json")
        custom_code(raw, loc.folder / "config.json")
        where, fields, model_type = str(loc.folder / "config.json"), config_fields(raw), raw.get("model_type")
        base_key = "rope_theta"
        make = lambda: shape_from_config(raw)
    errors = field_errors(fields, model_type, config)
    if not errors:
        try:
            shape = make()
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
            raise ModelFileError(f"{where}: its shape cannot be read ({one_line(err)})") from err
        family = FAMILIES.get(shape["model_type"])
        if family is None or family.position == "rotary":
            errors += [e for e in [rotary_error(shape["rotary_base"], base_key)] if e]
    if errors:
        raise ModelFileError(f"{where}: " + "; ".join(errors))
    return shape, where


# ------------------------------------------------------------------ the facts of one model
@dataclass
class ModelFacts:
    key: str
    origin: str
    tokenizer: object
    shape: dict
    where: str


def family_error(facts: ModelFacts) -> str | None:
    """Why no family of :data:`headwatch.model.arch.FAMILIES` describes the model, or None."""
    model_type = facts.shape.get("model_type")
    if model_type in FAMILIES:
        return None
    return (f"models.{facts.key}: model_type {model_type!r} has no adapter; headwatch knows {sorted(FAMILIES)} "
            "(add one to headwatch/model/arch.py: FAMILIES)")


def model_facts(loc: Located, model_cfg: dict, config: dict | None = None) -> ModelFacts:
    """Tokenizer and shape of one studied model, from its files read as data (transformers only
    to convert a tokenizer once). Every file that is not what it should be is named with the
    model (:class:`ModelFileError`); the shape is checked before transformers reads anything."""
    try:
        return _model_facts(loc, config or {})
    except ModelFileError as err:
        raise ModelFileError(f"models.{loc.key}: {err}") from err


def _model_facts(loc: Located, config: dict) -> ModelFacts:
    if loc.folder is None and loc.origin != "gguf":     # a hub id not in the cache (refused earlier)
        raise ModelNotFoundError(f"models.{loc.key}.source: {loc.convert[0]!r} is not in the Hugging Face cache")
    shape, where = read_shape(loc, config)
    if not (loc.tokenizer / "tokenizer.json").exists():
        try:
            convert_tokenizer(loc.tokenizer, *loc.convert)
        except ModelFileError:
            raise
        except (OSError, ValueError, KeyError) as err:
            raise ModelNotFoundError(f"models.{loc.key}: no tokenizer can be read from {loc.convert[0]!r} "
                                     f"({type(err).__name__}: {err})") from err
    tok = FileTokenizer(loc.tokenizer)
    if loc.origin == "prepared":   # transformers' own verdict on BOS, recorded at preparation
        record = read_json(loc.folder / PREPARED_RECORD)
        mine = tok.bos_token_id is not None and tok("a").input_ids[:1] == [tok.bos_token_id]
        if "tokenizer_adds_bos" in record and record["tokenizer_adds_bos"] != mine:
            raise ConfigError(f"models.{loc.key}: {loc.folder}/tokenizer.json read without transformers "
                              f"{'adds' if mine else 'does not add'} a BOS token, but transformers "
                              f"{'did' if record['tokenizer_adds_bos'] else 'did not'} at preparation; "
                              "remake it: snakemake --forcerun models_prepare")
    return ModelFacts(loc.key, loc.origin, tok, shape, where)
