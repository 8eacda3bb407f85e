"""Config keys and config files: keys the schema does not know (with the nearest valid key, or the
new name of a renamed key: the schema's ``x-renamed``),
values its described definitions refuse (said in words), model keys that are folders of
results/, and config files that YAML cannot read (with file, line and column)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from ..model.sources import ConfigError, key_errors
from ..names import did_you_mean
from .bounds import bound_errors, resolve_ref
from .values import finite_errors, relation_errors

ROOT = Path(__file__).resolve().parents[2]
"""The repository (or installed tree) holding ``config/``: the schema and the protocol's config."""


# ------------------------------------------------------------------ unknown keys
def unknown_keys(config, schema: dict, root: dict | None = None, path: str = "") -> list[str]:
    """Every key of ``config`` that ``schema`` does not allow, with its dotted path and the
    nearest valid key. Walks ``properties``, ``additionalProperties`` and ``items``."""
    root = root if root is not None else schema
    schema = resolve_ref(schema, root)
    out = []
    if isinstance(config, dict) and schema.get("type", "object") == "object":
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            if key in props:
                out += unknown_keys(value, props[key], root, where)
            elif key in schema.get("x-renamed", {}):
                new = schema["x-renamed"][key]
                out.append(f"{where}: {str(key)!r} is now `{path + '.' if path else ''}{new['to']}`: {new['why']}")
            elif extra is False:
                valid = sorted(props)
                hint = did_you_mean(key, valid, code=True) or f"valid keys here: {valid}"
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
    path = Path(path)
    tag = (str(path.resolve()), path.stat().st_mtime_ns)
    if tag not in _SCHEMAS:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        _SCHEMAS[tag] = yaml.load(path.read_text(), Loader=loader)
    return _SCHEMAS[tag]


def check_keys(config: dict, schema_path) -> None:
    """Refuse keys the schema does not know, then numbers that are not finite
    (:func:`headwatch.config.values.finite_errors`), then names, text, seeds and devices that its
    described definitions refuse (:func:`schema_errors`), model keys that are folders of results/
    (:func:`headwatch.model.sources.key_errors`), counts and sizes above their bounds
    (:func:`headwatch.config.bounds.bound_errors`) and keys that do not fit together
    (:func:`headwatch.config.values.relation_errors`). Run before the schema itself, whose
    messages would not say in words which key was meant."""
    schema = load_schema(schema_path)
    errors = unknown_keys(config, schema)
    if errors:
        raise ConfigError("invalid config (a misspelled key would be silently ignored):\n  "
                          + "\n  ".join(errors))
    errors = finite_errors(config)            # before any comparison: NaN passes every one
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    errors = (schema_errors(config, schema) + key_errors(config) + bound_errors(config, schema)
              + relation_errors(config))
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))


def _dotted(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def schema_errors(config: dict, schema: dict) -> list[str]:
    """Values refused by one of the schema's described ``definitions`` (a safe name, one line of
    text, a device), each as ``key: value <the definition's description>``; a refused mapping
    key is named as such. Other schema errors are left to the schema's own validation."""
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


def definition_error(name: str, value, schema_path=None) -> str | None:
    """``value`` against the schema's described definition ``name`` (a device, a safe name, a seed):
    ``the value X <its description>``, or None where it is one (a public function's argument held to
    the config's own definition)."""
    from ..settings.tables import shown

    schema = load_schema(schema_path or ROOT / "config" / "schema.yaml")
    definition = schema["definitions"][name]
    valid = Draft202012Validator({**definition, "definitions": schema["definitions"]}).is_valid(value)
    return None if valid else f"the value {shown(value)} {' '.join(definition['description'].split())}"


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
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return [f"{path}: cannot be read ({err})"]
    try:
        json.loads(text)
        return []
    except (ValueError, RecursionError):
        pass
    try:
        yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return []
    except RecursionError:
        return [f"{path}: nested deeper than a config is (Python's recursion limit)"]

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
