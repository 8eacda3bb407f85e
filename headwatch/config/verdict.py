"""The verdict of the pre-job checks and its cache: :func:`check_config` runs every check once
per config × the files it was drawn from × this package's code, and caches a passing verdict
under ``.snakemake/headwatch/checks/`` (a cached verdict costs milliseconds)."""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

from ..model.sources import CACHE_DIR, ConfigError, Located, fingerprint, locate, offline, source_errors
from .checks import model_errors, run_checks
from .devices import cuda_available, cuda_probe, needs_device
from .keys import ROOT, check_keys, load_schema
from .memory import memory_errors, read_meminfo
from .. import paths

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
        with paths.written(folder / f"{key}.json") as tmp:
            tmp.write_text(json.dumps(record))
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


# ------------------------------------------------------------------ one config, read and checked


def load(*overlays, base=None) -> dict:
    """The workflow's configuration: ``config/config.yaml`` (or ``base``) with ``overlays`` merged over
    it key by key, as ``snakemake --configfile`` merges them, its keys, numbers and bounds checked
    (:func:`headwatch.config.keys.check_keys`) and completed by ``config/schema.yaml``'s defaults —
    what every rule reads. An overlay that is the base itself is read once."""
    import copy

    import yaml
    from snakemake.utils import update_config, validate

    from .keys import check_yaml

    from ..model.sources import ModelFileError
    from ..model.sources.files import read_text

    base = Path(base) if base is not None else ROOT / "config" / "config.yaml"
    files = [base] + [f for f in (Path(o) if Path(o).is_absolute() or _exists(Path(o)) else ROOT / o
                                  for o in overlays) if f.resolve() != base.resolve()]
    for f in files:
        if not _exists(f):
            raise ConfigError(f"{f} does not exist (the protocol's settings are config/config.yaml of a headwatch "
                              "checkout; an overlay is a file of its own)")
        try:                      # a regular file within its size, before YAML reads it (never /dev/zero, a FIFO)
            read_text(f, "config file")
        except ModelFileError as err:
            raise ConfigError(f"{str(f)[:200]}: not a config file: {err}") from None
    schema = base.parent / "schema.yaml"
    key = tuple((str(f.resolve()), f.stat().st_mtime_ns, f.stat().st_size) for f in [*files, schema])
    if key not in _LOADED:
        config: dict = {}
        for f in files:
            check_yaml(str(f))
            given = yaml.load(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
            if not isinstance(given, dict):
                raise ConfigError(f"{f} holds a YAML {type(given).__name__}, not a mapping of config keys (a config "
                                  "file is `key: value` lines, as config/config.yaml)")
            update_config(config, given)
        check_keys(config, schema)
        errors = schema_messages(config, load_schema(schema))
        if errors:
            raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
        validate(config, str(schema))            # the schema's defaults filled in, as the Snakefile does
        _LOADED.clear()                          # the newest only: a checkout's config, read once per version
        _LOADED[key] = config
    return copy.deepcopy(_LOADED[key])


def _exists(path: Path) -> bool:
    """Whether ``path`` names something (False for a name no file system takes: too long, a NUL in it)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


_LOADED: dict = {}

"""The config :func:`load` read last, by its files' paths, sizes and times (a public function reads the
protocol's settings on every call: parsed and checked once per version of the files, a copy handed out)."""


def schema_messages(config: dict, schema: dict) -> list[str]:
    """Every error of the JSON schema's own validation, each as ``key: what is wrong`` (Snakemake's
    message names the first only, and not its key)."""
    from jsonschema import Draft202012Validator

    out = []
    for err in sorted(Draft202012Validator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path))):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
        hint = ""
        if err.validator == "type" and "array" in (err.validator_value if isinstance(err.validator_value, list)
                                                  else [err.validator_value]) and not isinstance(err.instance, list):
            hint = f"; give a list, e.g. [{err.instance!r}]"          # k=3 where k=[3] is meant
        out.append(f"{where or 'top level'}: {err.message}{hint}")
    return out


def main(argv=None) -> int:
    """``python -m headwatch.config [FILE...]``: the config that ``snakemake --configfile FILE...``
    would run, read and checked as the workflow checks it before any job (config/config.yaml with
    each file merged over it; YAML errors with file, line and column, unknown keys, numbers, bounds,
    the schema, every stage's checks, the models' files, memory): the errors on stderr and exit status
    1, or the warnings and 0."""
    files = sys.argv[1:] if argv is None else argv
    try:
        config = load(*files)
        check_config(config, workdir=ROOT)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return 1
    print(f"headwatch: the config of {' + '.join(['config/config.yaml', *files])} passes every check before a job")
    return 0


def section_errors(config: dict, section: str) -> list[str]:
    """Every check of one section of a whole config that needs no model: its keys, numbers and
    bounds (:func:`headwatch.config.keys.check_keys`'s), the schema's, and the stage's own
    (:func:`headwatch.settings.edges.edges_errors`, the induction sweep's, the relations). What a
    public function's settings pass through before any model pass (:func:`checked_section`)."""
    from ..settings.edges import edges_errors
    from ..settings.induction import induction_errors
    from .bounds import bound_errors
    from .keys import schema_errors, unknown_keys
    from .values import finite_errors, relation_errors

    schema = load_schema(ROOT / "config" / "schema.yaml")
    mine = lambda errors: [e for e in errors if e.split(":", 1)[0].split(".")[0].split("[")[0] == section]
    errors = mine(unknown_keys(config, schema)) or mine(finite_errors(config))
    if errors:
        return errors
    errors = mine(schema_errors(config, schema) + bound_errors(config, schema) + relation_errors(config)
                  + schema_messages(config, schema))
    if errors:
        return errors
    stage = {"edges": edges_errors, "induction": induction_errors}.get(section)
    return mine(stage(config)) if stage else []


def checked_section(section: str, given: dict | None, overrides: dict, function: str,
                    config: dict | None = None, facts=None, names: dict | None = None,
                    as_given: dict | None = None, given_as: str = "settings") -> dict:
    """A public function's settings of ``section``: the protocol's (``config``, default
    :func:`load`), ``given`` (a mapping: a rule's slice, or the caller's) over them, each override
    over those, every check of :func:`section_errors` run on the result, and, with ``facts`` (the
    model in hand: :func:`headwatch.config.calls.loaded_facts`), the section's checks against it
    (:func:`headwatch.config.checks.call_errors`). An error names the argument as the caller gave it
    (``hw.edge_scores: score_batch=-1 (edges.score_batch): …``; ``names``: an argument's own name
    where it is not the key's, ``{"top_predictions": "top"}``) with the value as given (``as_given``: the
    overrides as the caller wrote them, where they were put in the config's form), or, for a key of
    ``given``, the argument that handed it over (``given_as``); returns the section's mapping with ``given``
    and the overrides in it (what the settings object is built from)."""
    import copy

    from ..jobs import job_config
    from .checks import call_errors

    config = copy.deepcopy(config if config is not None else job_config() or load())
    given = dict(given or {})
    mapping = isinstance(config.get(section), dict)         # a list section (prose) is given whole
    section_cfg = {**(config.get(section) or {}), **given, **overrides} if mapping else overrides[section]
    config[section] = section_cfg
    errors = section_errors(config, section)
    if not errors and facts is not None:
        errors = call_errors(section, config, facts, function)
    if errors:
        said = in_callers_words(errors, section, overrides, names, as_given, given_as if given else None)
        raise ConfigError(f"{function}: " + "; ".join(said))
    if not mapping:
        return section_cfg
    return {**given, **overrides} if given else section_cfg


def in_callers_words(errors: list[str], section: str, overrides: dict, names: dict | None = None,
                     as_given: dict | None = None, given_as: str | None = None) -> list[str]:
    """``errors`` of a section (``key…: why``) said in a public function's words: an error of a key that a
    keyword override set names the keyword and its value as given (``top_k=0 (patching.top_k): …``;
    ``names``: a keyword's own name where it is not the key's; ``as_given``: the values as the caller wrote
    them), one of another key of the section the argument that handed the section over (``given_as``)."""
    import re

    from ..settings.tables import shown

    names, mapping, said = names or {}, not isinstance(overrides.get(section), list), []
    for e in errors:
        key = re.match(r"[\w.\[\]*-]*", e).group(0)
        head, colon, rest = e.partition(": ")
        if not colon:                       # "patching.names[0] (…) = ' Ann' is split …": the key alone
            head, rest = key, e[len(key):].lstrip()
        arg = next((k for k in overrides
                    if key == (f"{section}.{k}" if mapping else section)
                    or key.startswith((f"{section}.{k}.", f"{section}.{k}[") if mapping else f"{section}[")), None)
        if arg is not None:                 # the caller's own words: the argument as given
            e = f"{names.get(arg, arg)}={shown((as_given or overrides).get(arg, overrides[arg]))} ({head.strip()}): {rest}"
        elif given_as and key.startswith(section):
            e = f"{given_as} ({head.strip()}): {rest}"
        said.append(e)
    return said
