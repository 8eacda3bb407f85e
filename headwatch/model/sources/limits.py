"""The bound in force of a number, and the message of one above it.

A model file's shape numbers are bounded by :data:`headwatch.model.arch.FIELD_BOUNDS` (named
``model_file.<field>``), a config's counts and sizes by the schema (:mod:`headwatch.config.bounds`);
either bound is raised on purpose, and only that one, by the top-level config key
``raise_bounds: {<name>: <new bound>}``. Both read the bound in force and word a refusal here.
"""
from __future__ import annotations

import json

from ..arch import FIELD_BOUNDS

RAISE = "raise_bounds"
MODEL_FILE = "model_file"


def limit(name: str, table: dict, config: dict) -> int:
    """The bound ``name`` in force: its ``raise_bounds`` entry, else the table's."""
    raised = config.get(RAISE)
    value = raised.get(name) if isinstance(raised, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else table[name]["max"]


def model_file_bounds() -> dict[str, dict]:
    """``{model_file.<field>: {"max": N, "why": ...}}``: the bound of every shape number a model
    file says (:data:`headwatch.model.arch.FIELD_BOUNDS`)."""
    return {f"{MODEL_FILE}.{field}": dict(max=bound, why=why) for field, (bound, why) in FIELD_BOUNDS.items()}


def field_limit(field: str, config: dict) -> tuple[int, str]:
    """(bound in force, why) of a model file's shape number ``field`` (``model_file.<field>``)."""
    bound, why = FIELD_BOUNDS[field]
    return limit(f"{MODEL_FILE}.{field}", {f"{MODEL_FILE}.{field}": dict(max=bound)}, config), why


def refusal(where: str, said: str, bound: int, name: str, why: str) -> str:
    """The message of a value above its bound: the key, the bound, why, and how to raise it."""
    return (f"{where}: {said} above its bound {bound:,} ({why}); if you mean it, raise the bound "
            f"on purpose: {RAISE}: {{{json.dumps(name)}: <new bound>}} (docs/security.md)")
