"""Files from outside are data: every file read to learn a model's facts, a researcher's pairs file
(:func:`headwatch.settings.pairs.read_pairs`) and a corpus of their own (``sweep.corpus.source``), is
opened as a regular file of bounded size and parsed with an error that names it
(:class:`ModelFileError`); a file a config names is found inside the project unless the config
allows it outside (:func:`project_file`, the one place that decides).

A path that is a FIFO, a device, a socket or a symlink to one is refused before a byte is read
(a FIFO ``tokenizer.json`` once hung ``snakemake -n``; a ``config.json`` linked to
``/dev/zero`` filled the memory); a file larger than its cap (:data:`CAPS`, with the reason)
is refused after reading one byte past the cap. The file is opened without blocking and
checked again on its descriptor, so that a path swapped for a FIFO between the check and
the open cannot hang the read either.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .errors import ModelFileError

MiB = 1 << 20

CAPS = {
    "JSON file": (16 * MiB, "a model's JSON file", "the largest published config.json and "
                  "tokenizer_config.json (chat templates, added tokens) are under 1 MB"),
    "tokenizer.json": (256 * MiB, "a model's tokenizer.json", "the largest published tokenizer.json "
                       "files are tens of MB (Gemma 3's 262 144 tokens: 33 MB)"),
    "pairs file": (64 * MiB, "a pairs file", "its 4,096 rows (patching.pairs' bound) of prompts of a few "
                   "thousand characters each fit with a wide margin"),
    "corpus": (512 * MiB, "a corpus file", "the corpus is cut at sweep.corpus.target_chars, at most 100 M "
               "characters (its bound), and its ids are held in memory"),
    "config file": (32 * MiB, "a config file", "the protocol's config.yaml is tens of KB; a config's largest "
                    "list, prose, holds at most 256 texts of 100,000 characters (their bounds): 26 MB"),
}

"""The most bytes a file of each kind may hold, what it is called in an error and the reason (a
GGUF is not capped: it holds the weights; its header is read within the file's size,
:func:`.facts.gguf_header`)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def project_file(value: str, key: str, workdir, outside: bool = False, outside_key: str | None = None,
                 suffixes: tuple[str, ...] | None = None) -> Path:
    """The file a config's ``key`` names (``value``: relative to the project directory ``workdir``, or
    absolute), resolved — symlinks followed — and refused, naming ``key``: outside the project
    directory unless ``value`` is absolute and ``outside`` (the config's ``outside_key``) allows it;
    with a name whose suffix is not one of ``suffixes``; missing, or not a regular file (a FIFO, a
    device, a folder). The suffix is the name's as given (a link named ``.csv`` is judged by where
    it leads, not by its name's suffix alone)."""
    root = Path(workdir).resolve()
    given = Path(value)
    path = (given if given.is_absolute() else root / given).resolve()
    if not path.is_relative_to(root) and not (given.is_absolute() and outside):
        allow = (f"give its absolute path and set {outside_key}: true" if outside_key else "it must lie inside")
        raise ModelFileError(f"{key} = {value!r} leads to {path}, outside the project directory {root}: copy the "
                             f"file into the project, or {allow}")
    if suffixes is not None and given.suffix.lower() not in suffixes:
        raise ModelFileError(f"{key} = {value!r}: the file's name must end in one of {sorted(suffixes)}")
    _require_regular(path, f"{key} = {value!r}: ")
    return path


def _require_regular(path: Path, said: str = "") -> None:
    """ModelFileError (``said`` first) unless ``path`` (a symlink followed) is a regular file."""
    try:
        st = os.stat(path)
    except OSError as err:
        raise ModelFileError(f"{said}{path} cannot be read ({err.strerror or err})") from err
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{said}{path} is {_kind(st.st_mode)}, not a regular file; it is read as data, never "
                             "from a pipe, a device or a folder")


def open_regular(path) -> int:
    """A descriptor of ``path`` opened for reading, refused unless it is a regular file (a
    symlink is followed: the Hugging Face cache links to its blobs)."""
    path = Path(path)
    _require_regular(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise ModelFileError(f"{path} cannot be read ({err.strerror or err})") from err
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ModelFileError(f"{path} is {_kind(mode)}, not a regular file (it changed while being opened)")
    return fd


def read_bytes(path, kind: str = "JSON file") -> bytes:
    """The bytes of a regular file of at most ``CAPS[kind]`` bytes."""
    cap, noun, why = CAPS[kind]
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise ModelFileError(f"{path} holds more than {cap // MiB} MiB, the most {noun} may hold ({why})")
    return data


def read_text(path, kind: str = "JSON file") -> str:
    data = read_bytes(path, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ModelFileError(f"{path} is not UTF-8 text ({err})") from err


def read_json(path, kind: str = "JSON file"):
    """A JSON file read through :func:`read_bytes`; empty, not JSON, or not an object: named."""
    text = read_text(path, kind)
    if not text.strip():
        raise ModelFileError(f"{path} is empty; it should hold a JSON object")
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ModelFileError(f"{path} is not JSON ({err})") from err
    except RecursionError:
        raise ModelFileError(f"{path} is nested deeper than any model's JSON file (Python's recursion limit)") from None
    if not isinstance(value, dict):
        raise ModelFileError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def custom_code(raw: dict, path) -> None:
    """Refuse a model's ``config.json`` or ``tokenizer_config.json`` (``raw``, read from ``path``) that names
    code of its own — ``auto_map``: Python files of the folder (or of a hub repository) that transformers would
    run —, before anything is loaded: headwatch never runs code from a model folder (every transformers call
    passes ``trust_remote_code=False``; docs/security.md)."""
    if "auto_map" in raw:
        named = raw["auto_map"]
        said = ", ".join(f"{k}: {v}" for k, v in named.items())[:200] if isinstance(named, dict) else repr(named)[:200]
        raise ModelFileError(f"{path} names code of its own (auto_map: {said}); headwatch never runs code from a model "
                             "folder: use a model whose family transformers has (model_type), without auto_map")



def one_line(err: BaseException) -> str:
    """An exception as ``Type: message`` on one line (a library's multi-line message folded)."""
    text = " ".join(str(err).split()) or repr(err)
    return f"{type(err).__name__}: {text}"
