"""The user's cache of prepared models: a model that must be converted to load (a GGUF, de-quantized by
transformers: half a minute and more) is converted once, saved as a float32 safetensors folder, as the
workflow's ``models_prepare`` saves it, and read from there by every later process in seconds.

* **Where.** ``$HEADWATCH_CACHE`` when set, else ``$XDG_CACHE_HOME/headwatch``, else
  ``~/.cache/headwatch`` (:func:`cache_root`; the Hugging Face cache's own rule, under its own name);
  one folder per entry under ``models/``.
* **Keyed by content.** An entry's name is the SHA-256 of the bytes of the files the conversion reads
  (the GGUF), of the versions of the code that converts them (transformers, gguf) and of this
  layout's :data:`FORMAT` (:func:`source_key`): a file changed in place, even to the same size and
  time, is another entry; a file touched is the same. Hashing the bundled 98 MB GGUF costs about
  0.1 s (SHA-256 at about 0.8 GB/s on one core).
* **Verified on read.** The entry's record (:data:`RECORD`, written last, inside the folder) holds the
  key and the size and SHA-256 of every other file; an entry whose record is missing, unreadable, of
  another key, or whose files differ from it (:func:`damage`) is never used: it is moved aside and
  made again. Checking the float32 weights of SmolLM2-135M (540 MB) costs about 0.7 s.
* **Written atomically.** The loader (:func:`headwatch.model.load.cached_prepared`) fills an entry under
  a name no other writer can have (:func:`headwatch.paths.written`) and renames it into place; two
  processes filling one entry at once each make their own and the second finds the first's in place,
  verifies it and uses it.

Standard library only, as the rest of :mod:`headwatch.model.sources`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from importlib import metadata
from pathlib import Path

ENV = "HEADWATCH_CACHE"
"""The environment variable that puts the cache elsewhere (a folder)."""
FORMAT = 1
"""The layout of an entry: a new one makes every earlier entry another key."""
RECORD = "headwatch_cache.json"
"""An entry's record: its key, and each other file's size and SHA-256; written last."""
RECORD_MAX_BYTES = 1 << 20
"""A record is a few hundred bytes a file: a larger one (or one that is not a regular file: a FIFO, a link to a
device) is not read, and the entry is made again."""
STALE_S = 24 * 3600
"""A temporary entry (``.<name>.<host>-<pid>-<hex>.tmp``) older than this is a fill that was killed: removed by
the next fill (a conversion takes a minute at most)."""
CONVERTERS = ("transformers", "gguf")
"""The packages whose code converts a source into the entry: their versions are part of its key."""


def cache_root() -> Path:
    """The cache folder: ``$HEADWATCH_CACHE``, else ``$XDG_CACHE_HOME/headwatch``, else ``~/.cache/headwatch``."""
    given = os.environ.get(ENV)
    if given:
        return Path(given).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache").absolute() / "headwatch"


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes (read in blocks)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def source_key(files, options: dict | None = None) -> str:
    """The key of an entry made from ``files`` (the source's files the conversion reads, by path) with
    ``options`` (the loader's keyword arguments): the SHA-256 of their names' last parts and contents, the
    converters' versions (:data:`CONVERTERS`) and :data:`FORMAT`."""
    what = dict(format=FORMAT, options={k: str(v) for k, v in sorted((options or {}).items())},
                versions={p: _version(p) for p in CONVERTERS},
                files=sorted((Path(f).name, file_sha256(f)) for f in files))
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def entry_path(key: str, label: str = "") -> Path:
    """The folder of the entry ``key`` (``label``, the source's file name, read by people only, cut to a
    safe 48 characters)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:48].strip("._")
    return cache_root() / "models" / (f"{safe}-{key[:32]}" if safe else key[:32])


def seal(folder: Path, key: str, source: str) -> dict:
    """Write the record of a filled entry (:data:`RECORD`): ``key``, ``source`` and every file's size and
    SHA-256. The last file written into the entry."""
    files = {p.name: dict(bytes=p.stat().st_size, sha256=file_sha256(p))
             for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name != RECORD}
    record = dict(key=key, source=source, format=FORMAT, files=files)
    (Path(folder) / RECORD).write_text(json.dumps(record, indent=1))
    return record


def damage(folder: Path, key: str) -> str | None:
    """What is wrong with the entry ``folder`` for ``key`` (None: every file as its record says, the record
    of this key): missing, no record (a partial entry), a record that is not JSON or of another key, a
    file missing, extra, of another size or other bytes."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        return "missing" if not folder.is_symlink() else "a link, not a folder"
    path = folder / RECORD
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > RECORD_MAX_BYTES:
            return f"{RECORD} is not a regular file of at most {RECORD_MAX_BYTES} bytes"
        record = json.loads(path.read_text())
        files = dict(record["files"])
    except FileNotFoundError:
        return f"no {RECORD} (a partial entry)"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{RECORD} unreadable ({type(err).__name__}: {err})"
    if record.get("key") != key or record.get("format") != FORMAT:
        return f"{RECORD} is of another key"
    present = {p.name for p in folder.iterdir() if p.name != RECORD}
    if present != set(files):
        return f"its files {sorted(present)} are not its record's {sorted(files)}"
    for name, want in files.items():
        path = folder / name
        if not path.is_file() or path.is_symlink() or path.stat().st_size != want.get("bytes"):
            return f"{name} is not the size its record gives"
        if file_sha256(path) != want.get("sha256"):
            return f"{name} does not hash to its record's SHA-256"
    return None


def readable_by_all(folder: Path) -> None:
    """Every file of a filled entry readable by every user (its folder too): safetensors writes its files
    0600, and a cache shared by a group's users would be one user's only."""
    folder = Path(folder)
    for p in folder.iterdir():
        if p.is_file() and not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    folder.chmod(folder.stat().st_mode | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def remove_stale(models: Path, now: float | None = None) -> list[str]:
    """Remove the temporary entries of fills killed before their rename (older than :data:`STALE_S`) and
    links left beside ``models``' entries; returns their names. A fill still running is younger."""
    now = time.time() if now is None else now
    gone = []
    for p in Path(models).glob(".*.tmp"):
        try:
            if now - p.lstat().st_mtime < STALE_S:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            gone.append(p.name)
        except OSError:
            continue
    return gone


def source_files(model_cfg: dict) -> list[Path] | None:
    """The files of the model ``model_cfg`` (a model's entry of the config) whose conversion the cache
    keeps: a GGUF's file (de-quantized at every load otherwise); None for a folder or a hub id, whose
    safetensors load as fast as an entry would (a copy would double the disk for no time)."""
    from .resolve import source_of

    if "gguf" not in model_cfg:
        return None
    src, kw = source_of(model_cfg)
    return [Path(src) / kw["gguf_file"]]
