"""What a JSON schema does not say about a config's numbers: every number finite, and the relations
between keys.

A schema's ``minimum`` and ``maximum`` let NaN and infinity through (every comparison with NaN is
false; ``.inf`` is a number): ``edges.rounding_factor: .inf`` made every guard pass, ``.nan`` made every
guard fail after the whole run, ``induction.tasks.markov.alpha: .nan`` made every sequence one
repeated state. :func:`finite_errors` refuses a non-finite number under any key; the bounds
(:mod:`.bounds`) and the schema then compare finite numbers only. :func:`relation_errors` checks
what holds between keys (a learning rate's floor below the rate, warm-up within the run).

Both are part of :func:`headwatch.config.keys.check_keys`, which the workflow's start, the checker
(``python -m headwatch.config``) and every public function's settings pass through.
"""
from __future__ import annotations

import math


def _dotted(path: list) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def finite_errors(config, path: list | None = None) -> list[str]:
    """Every number of ``config`` (at any depth) that is NaN or infinite, named by its key."""
    path = path or []
    if isinstance(config, float) and not math.isfinite(config):
        return [f"{_dotted(path)}: {config!r} is not a finite number"]
    if isinstance(config, dict):
        return [e for k, v in config.items() for e in finite_errors(v, path + [k])]
    if isinstance(config, (list, tuple)):
        return [e for i, v in enumerate(config) for e in finite_errors(v, path + [i])]
    return []


def _schedule_errors(where: str, t: dict) -> list[str]:
    """A training schedule's relations: the cosine's floor ``min_lr`` at most ``lr``; ``warmup``
    within ``steps``."""
    out = []
    lr, floor = t.get("lr"), t.get("min_lr")
    if _number(lr) and _number(floor) and floor > lr:
        out.append(f"{where}.min_lr = {floor!r} is above {where}.lr = {lr!r}: the learning rate decays to "
                   "min_lr, so min_lr <= lr")
    steps, warmup = t.get("steps"), t.get("warmup")
    if _number(steps) and _number(warmup) and warmup > steps:
        out.append(f"{where}.warmup = {warmup!r} is longer than {where}.steps = {steps!r}: the run would end "
                   "before its learning rate reaches lr")
    return out


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def relation_errors(config: dict) -> list[str]:
    """The relations between keys that every stage's settings assume (each named by its keys)."""
    out = []
    sweep = config.get("sweep") or {}
    base = sweep.get("train") or {}
    if isinstance(base, dict):
        out += _schedule_errors("sweep.train", base)
    for name, sw in (sweep.get("sweeps") or {}).items():
        own = (sw or {}).get("train") if isinstance(sw, dict) else None
        if isinstance(own, dict) and own:
            merged = {**(base if isinstance(base, dict) else {}), **own}
            out += [e.replace("sweep.train", f"sweep.sweeps.{name}.train", 1)
                    for e in _schedule_errors("sweep.train", merged)
                    if any(k in own for k in ("lr", "min_lr", "steps", "warmup"))]
    induction = config.get("induction")
    if isinstance(induction, dict):
        out += _schedule_errors("induction", induction)
    return out
