"""The verdict of the pre-job checks and its cache: :func:`check_config` runs every check once
per config × the files it was drawn from × this package's code, and caches a passing verdict
under ``.snakemake/headwatch/checks/`` (a cached verdict costs milliseconds)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from ..model.sources import CACHE_DIR, ConfigError, Located, fingerprint, locate, offline, source_errors
from .checks import model_errors, run_checks
from .devices import cuda_available, cuda_probe, needs_device
from .keys import check_keys
from .memory import memory_errors, read_meminfo

CACHE_KEEP = 32              # verdicts kept (one per config × files × code)
WARNING_PREFIX = "headwatch: warning:"
NOTE_PREFIX = "headwatch: note:"


# ------------------------------------------------------------------ the verdict and its cache
def _code_hash() -> str:
    pkg = Path(__file__).resolve().parents[1]     # all of headwatch/
    h = hashlib.sha256()
    for path in sorted(pkg.rglob("*.py")):
        h.update(str(path.relative_to(pkg)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def verdict_key(config: dict, located: list[Located], workdir: Path) -> str:
    refs = workdir / "config" / "models"
    parts = dict(
        config=config,
        files={str(p): fingerprint(Path(p)) for loc in located for p in loc.files},
        gguf={str(loc.gguf): fingerprint(loc.gguf) for loc in located if loc.gguf},
        origins={loc.key: [loc.origin, str(loc.folder)] for loc in located},
        references=sorted(p.name for p in refs.glob("*.json")) if refs.is_dir() else [],
        schema=fingerprint(workdir / "config" / "schema.yaml"),     # a cached verdict passed check_keys too
        pairs=fingerprint(workdir / config["patching"]["pairs"])     # the prompt pairs' rows are checked
        if config.get("patching", {}).get("pairs") else None,
        code=_code_hash(),
        env=dict(offline=offline(), cuda=cuda_probe() if needs_device(config) else None),
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


def check_config(config: dict, workdir: str | Path = ".", cache: bool = True,
                 cuda=cuda_available, stream=None, meminfo=read_meminfo) -> list[str]:
    """Every check that can be done before any job; raise :class:`ConfigError` listing them all.

    Returns the warnings (also printed to ``stream``) as a :class:`Verdict`, with each studied model's
    ``model_type``. A passing verdict is cached in
    ``<workdir>/.snakemake/headwatch/checks/`` (``cache=False``: always run) with the memory
    its jobs need (:mod:`.memory`), compared on every call with ``meminfo()`` (this machine's
    ``/proc/meminfo``; None: not compared, said in a note; ``meminfo=None``: not compared, for
    jobs that run on other machines, a cluster's nodes).
    """
    workdir, stream = Path(workdir), stream or sys.stderr
    schema = workdir / "config" / "schema.yaml"

    def refuse(errors):
        """The keys' errors first (a misspelled key explains much), then these."""
        if schema.exists():
            check_keys(config, schema)
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))

    errors = model_errors(config)
    if not errors:
        for key in config["models_studied"]:
            errors += source_errors(key, config["models"][key])
    if errors:
        refuse(errors)
    located = []
    for key in config["models_studied"]:
        try:
            located.append(locate(key, config["models"][key], workdir))
        except ConfigError as err:
            errors.append(str(err))
    if errors:
        refuse(errors)
    folder = workdir / CACHE_DIR / "checks"
    key = verdict_key(config, located, workdir) if cache else None
    record = _cache_read(folder / f"{key}.json") if cache else None
    if record is None:
        # A cached verdict passed these too, for this config, schema and code: the keys are checked
        # only here (the Snakefile checks them itself before the schema fills its defaults).
        if schema.exists():
            check_keys(config, schema)
        t0 = time.perf_counter()
        errors, warnings, estimates, families = run_checks(config, located, workdir, cuda)
        if errors:
            for w in warnings:
                print(f"{WARNING_PREFIX} {w}", file=stream)
            raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
        record = dict(warnings=warnings, estimates=estimates, families=families,
                      seconds=round(time.perf_counter() - t0, 3))
        if cache:
            # keyed again: a tokenizer converted just now is one of the files
            _cache_write(folder, verdict_key(config, located, workdir), record)
    warnings = list(record["warnings"])
    memory = meminfo() if meminfo is not None else None
    if memory is None and meminfo is not None:
        print(f"{NOTE_PREFIX} the memory the jobs need is not compared with this machine's: it has no "
              "/proc/meminfo", file=stream)
    elif memory is not None:
        errors, over = memory_errors(record["estimates"], memory)
        if errors:
            raise ConfigError("invalid config (it cannot fit in this machine's memory):\n  " + "\n  ".join(errors))
        warnings += over
    for w in warnings:
        print(f"{WARNING_PREFIX} {w}", file=stream)
    return Verdict(warnings, record.get("families", {}))


class Verdict(list):
    """The warnings of a passing verdict, and ``families``: each studied model's ``model_type`` (the
    targets leave edge circuits out for a family without an edge graph)."""

    def __init__(self, warnings, families: dict):
        super().__init__(warnings)
        self.families = dict(families)
