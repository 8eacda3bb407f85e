"""Context arithmetic (protocol §6): rotary pairs and reach, KV cache, attention cells.

Every number here is a closed formula of a few config fields; each formula is
one small function so that a test can check it against a hand-computed case.

Rotary embedding rotates ``P = rotary_dims / 2`` pairs of a head's query/key
dimensions. Pair ``n`` (1-based) turns by ``base^(-(n-1)/P)`` radians per token,
so it comes back to where it started after ``2π·base^((n-1)/P)`` tokens (its
period). The slowest pair (n = P) has the longest period: the *reach*. At a
distance ``d`` a pair has *wrapped* when its period is ``<= d`` (it has turned a
full circle, so two positions ``d`` apart can look alike to it).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..names import BYTES_PER_NUMBER, kv_cache_bytes


# ---------------------------------------------------------------- formulas
def rotary_pairs(rotary_dims: int) -> int:
    """P = rotary dims ÷ 2 (the rotated dimensions come in pairs)."""
    if rotary_dims < 0 or rotary_dims % 2:
        raise ValueError(f"rotary dims must be a non-negative even number, got {rotary_dims}")
    return rotary_dims // 2


def pair_periods(base: float, pairs: int) -> np.ndarray:
    """Period in tokens of pairs n = 1..P: 2π·base^((n−1)/P)."""
    n = np.arange(1, pairs + 1, dtype=np.float64)
    return 2 * math.pi * np.power(float(base), (n - 1) / pairs)


def reach(base: float, pairs: int) -> float:
    """The slowest pair's period: 2π·base^((P−1)/P) tokens."""
    return float(2 * math.pi * float(base) ** ((pairs - 1) / pairs))


def pairs_not_wrapped(periods, distance: float) -> int:
    """Pairs whose period is longer than ``distance`` (not yet a full turn)."""
    return int((np.asarray(periods) > distance).sum())


def angle_at(periods, distance: float) -> np.ndarray:
    """Each pair's angle after ``distance`` tokens, in [0, 2π)."""
    return np.mod(2 * math.pi * distance / np.asarray(periods, dtype=np.float64), 2 * math.pi)


def attention_cells(context: int, heads: int, layers: int) -> int:
    """Attention weights of one full pass: context² × heads × layers."""
    return context * context * heads * layers


# ------------------------------------------------------------------ tables
def _usable(survey: pd.DataFrame) -> pd.DataFrame:
    """One row per model name (a studied model wins over its reference config)."""
    ok = survey[survey["error"] == ""].copy()
    ok["_rank"] = ok["source"].map({"studied": 0, "reference": 1, "sweep": 2})
    ok = ok.sort_values(["_rank"], kind="stable").drop_duplicates("name").drop(columns="_rank")
    order = {n: i for i, n in enumerate(survey["name"].drop_duplicates())}
    return ok.sort_values("name", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def rotary_table(survey: pd.DataFrame, distance: float, swap_base: dict | None = None) -> pd.DataFrame:
    """One row per (model, variant, rotated pair), with the model's summary repeated.

    ``swap_base`` maps a model to the model whose base it borrows (variant
    "base of <other>"); the other model must be in the survey.
    """
    models = _usable(survey)
    rot = models[models["rotary_dims"] > 0].set_index("name")
    variants = [(name, name) for name in rot.index]
    for name, other in (swap_base or {}).items():
        for key in (name, other):
            if key not in rot.index:
                raise KeyError(f"anatomy.swap_base: {key!r} is not a rotary model of the survey "
                               f"(have {sorted(rot.index)})")
        variants.append((name, other))
    rows = []
    for name, base_from in variants:
        m = rot.loc[name]
        base = float(rot.loc[base_from, "rotary_base"])
        P = rotary_pairs(int(m["rotary_dims"]))
        periods = pair_periods(base, P)
        r = reach(base, P)
        context = int(m["context"])
        angles = angle_at(periods, distance)
        for n in range(P):
            rows.append(dict(
                name=name, source=m["source"],
                variant="own base" if base_from == name else f"base of {base_from}",
                base_from=base_from, base=base, rotary_dims=int(m["rotary_dims"]),
                head_dim=int(m["head_dim"]), pairs=P, pair=n + 1, period=float(periods[n]),
                distance=float(distance), turns_at_distance=float(distance / periods[n]),
                angle_at_distance=float(angles[n]), wrapped_at_distance=bool(periods[n] <= distance),
                reach=r, pairs_not_wrapped_at_distance=pairs_not_wrapped(periods, distance),
                context=context, pairs_not_wrapped_at_context=pairs_not_wrapped(periods, context),
                margin=r / context))
    return pd.DataFrame(rows)


def kv_cache_table(survey: pd.DataFrame, dtypes=tuple(BYTES_PER_NUMBER)) -> pd.DataFrame:
    """Bytes of KV cache per token and at full context, with and without key sharing."""
    rows = []
    for _, m in _usable(survey).iterrows():
        L, H, KV, D, C = (int(m[k]) for k in ("layers", "heads", "kv_heads", "head_dim", "context"))
        for dt in dtypes:
            b = BYTES_PER_NUMBER[dt]
            per, per_all = kv_cache_bytes(L, KV, D, b), kv_cache_bytes(L, H, D, b)
            rows.append(dict(name=m["name"], source=m["source"], dtype=dt, bytes_per_number=b,
                             layers=L, heads=H, kv_heads=KV, head_dim=D, context=C,
                             per_token=per, full_context=per * C,
                             per_token_no_sharing=per_all, full_context_no_sharing=per_all * C,
                             sharing_saves=H / KV))
    return pd.DataFrame(rows)


def attention_cells_table(survey: pd.DataFrame) -> pd.DataFrame:
    """context² × heads × layers per model (plus the causal half actually computed)."""
    rows = []
    for _, m in _usable(survey).iterrows():
        L, H, C = int(m["layers"]), int(m["heads"]), int(m["context"])
        rows.append(dict(name=m["name"], source=m["source"], context=C, heads=H, layers=L,
                         cells=attention_cells(C, H, L),
                         cells_causal=C * (C + 1) // 2 * H * L))
    return pd.DataFrame(rows)
