"""Upper bounds on every count and size a config or a model file sets, and the one way to raise one.

The pre-job checks compare numbers with each other (heads that divide the width, k within
top_n); these bound them, so that an absurd value (``patching.n: 1000000000``, a model file
with ``num_hidden_layers: 100000``) is refused before any job, naming the key (or the model
and the field), the bound and its reason, instead of filling the machine's memory. Each bound
fits the machine class the workflow is written for (2–16 cores, 24–128 GiB) with a wide
margin over the protocol's own sizes.

* **Config keys**: a bound is stated in ``config/schema.yaml`` next to its key, as
  ``x-bound: {max: N, why: ...}`` (a keyword the JSON schema's validation ignores; its
  ``maximum`` could not be raised). For a number it bounds the value, for a string its
  length, for a list or a mapping its number of entries. A bound's name is the key's path,
  ``*`` standing for any mapping key and ``[]`` for any list item
  (``sweep.sweeps.*.train.batch``).
* **Model files**: :data:`headwatch.model.arch.FIELD_BOUNDS`, the family facts, bounds each shape
  number read from a ``config.json`` or a GGUF header, named ``model_file.<field>``.

A user who means a larger value raises that bound on purpose, and only that one, with the
top-level config key ``raise_bounds: {<name>: <new bound>}`` (a name of :func:`bound_table`;
``raise_bounds`` is checked like every key). Nothing else raises a bound. The table is
printed by ``python -m headwatch.config --bounds`` (docs/security.md holds it).

Memory is bounded separately, by estimate (:mod:`.memory`); it cannot be raised.
"""
from __future__ import annotations

from ..names import did_you_mean
from ..model.sources.limits import RAISE, limit, model_file_bounds, refusal

BOUND = "x-bound"


def resolve_ref(schema: dict, root: dict) -> dict:
    """A schema node with its ``$ref`` followed (within ``root``)."""
    while isinstance(schema, dict) and "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema if isinstance(schema, dict) else {}


def _children(schema: dict, root: dict):
    """(name suffix, child schema, how to reach the child in a config node) of a schema node."""
    for key, sub in (schema.get("properties") or {}).items():
        yield f".{key}", sub, ("key", key)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield ".*", extra, ("values", None)
    if isinstance(schema.get("items"), dict):
        yield "[]", schema["items"], ("items", None)


_TABLES: dict = {}


def bound_table(schema: dict) -> dict[str, dict]:
    """Every bound of the schema: ``{name: {"max": N, "why": ...}}``, with the model files'
    bounds (:data:`headwatch.model.arch.FIELD_BOUNDS`) as ``model_file.<field>`` (once per schema
    object: :func:`headwatch.config.load_schema` parses each schema file once)."""
    key = id(schema)
    if key not in _TABLES or _TABLES[key][0] is not schema:
        _TABLES[key] = (schema, _bound_table(schema))
    return _TABLES[key][1]


def _bound_table(schema: dict) -> dict[str, dict]:
    out = {}

    def walk(node, name, depth):
        node = resolve_ref(node, schema)
        if BOUND in node:
            out[name.lstrip(".")] = dict(node[BOUND])
        if depth < 12:
            for suffix, child, _ in _children(node, schema):
                walk(child, name + suffix, depth + 1)

    walk(schema, "", 0)
    return {**out, **model_file_bounds()}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def raise_errors(config: dict, table: dict) -> list[str]:
    """``raise_bounds`` names bounds that exist and gives each a positive integer."""
    raised = config.get(RAISE)
    if raised is None:
        return []
    if not isinstance(raised, dict):
        return [f"{RAISE}: {raised!r} is not a mapping of bound names to new bounds"]
    out = []
    for name, value in raised.items():
        if name not in table:
            hint = did_you_mean(name, table) or "the bounds are listed in docs/security.md"
            out.append(f"{RAISE}: {name!r} is not the name of a bound; {hint}")
        elif not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            out.append(f"{RAISE}.{name}: {value!r} is not a bound (a positive integer)")
    return out


def _size(value) -> tuple[float, str] | None:
    """(what the bound compares, how it is said) of a config value; None if not bounded here."""
    if _is_number(value):
        return value, f"{value:,} is" if isinstance(value, int) else f"{value!r} is"
    if isinstance(value, str):
        return len(value), f"{len(value):,} characters long, which is"
    if isinstance(value, (list, dict)):
        return len(value), f"holds {len(value):,} entries, which is"
    return None


def bound_errors(config: dict, schema: dict) -> list[str]:
    """Every config value above its bound, naming the key, the bound, why, and how to raise it;
    and a ``raise_bounds`` that names no bound. Types are the schema's to check."""
    table = bound_table(schema)
    out = raise_errors(config, table)

    def walk(node, value, name, where, depth):
        node = resolve_ref(node, schema)
        if BOUND in node:
            size = _size(value)
            bound = limit(name.lstrip("."), table, config)
            if size is not None and size[0] > bound:
                out.append(refusal(where.lstrip(".") or "top level", size[1], bound, name.lstrip("."),
                                   node[BOUND]["why"]))
        if depth >= 12:
            return
        for suffix, child, (how, key) in _children(node, schema):
            if how == "key" and isinstance(value, dict) and key in value:
                walk(child, value[key], name + suffix, f"{where}.{key}", depth + 1)
            elif how == "values" and isinstance(value, dict):
                for k, v in value.items():
                    if k not in (node.get("properties") or {}):
                        walk(child, v, name + suffix, f"{where}.{k}", depth + 1)
            elif how == "items" and isinstance(value, list):
                for i, v in enumerate(value):
                    walk(child, v, name + suffix, f"{where}[{i}]", depth + 1)

    walk(schema, config, "", "", 0)
    return out


def bounds_markdown(schema: dict) -> str:
    """docs/security.md's table of bounds (``python -m headwatch.config --bounds``)."""
    rows = ["| bound (`raise_bounds` name) | at most | why |", "|---|---|---|"]
    for name, b in bound_table(schema).items():
        rows.append(f"| `{name}` | {b['max']:,} | {' '.join(b['why'].split())} |")
    return "\n".join(rows)

