"""Guards that stop a rule instead of letting a bad number reach a table.

Every table the workflow publishes goes through :func:`write_parquet`, which
refuses NaN and inf and names the column that holds them (the float16-on-CPU
trap of protocol §1 produces plausible-looking maps next to NaN logits).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch


class NonFiniteError(RuntimeError):
    """A tensor or table meant for output holds NaN or inf."""


def assert_finite(value, what: str):
    """Raise :class:`NonFiniteError` naming ``what`` if ``value`` has NaN/inf; return it."""
    if isinstance(value, torch.Tensor):
        bad = (~torch.isfinite(value.detach())).sum().item() if value.is_floating_point() else 0
        total = value.numel()
    elif isinstance(value, pd.DataFrame):
        for col in value.columns:
            series = value[col]
            if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
                continue
            if isinstance(series.dtype, pd.api.extensions.ExtensionDtype):
                series = series.dropna()  # nullable Int64/Float64: <NA> marks "not applicable"
            assert_finite(series.to_numpy(dtype=float), f"{what}: column {col!r}")
        return value
    elif isinstance(value, (float, int, np.floating, np.integer)):
        bad, total = int(not np.isfinite(value)), 1
    else:
        arr = np.asarray(value, dtype=float)
        bad, total = int((~np.isfinite(arr)).sum()), arr.size
    if bad:
        raise NonFiniteError(f"{what}: {bad} of {total} values are NaN or inf; refusing to write it "
                             "(float16 on CPU overflows — compute in float32)")
    return value


def write_parquet(df: pd.DataFrame, path, what: str | None = None, note: dict | None = None) -> None:
    """Write ``df`` to Parquet after checking every numeric column is finite.

    ``note`` is stored as file-level metadata (key ``headwatch``), for facts a
    reader must know about the numbers, such as quantization.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert_finite(df, what or str(path))
    table = pa.Table.from_pandas(df, preserve_index=False)
    if note:
        meta = dict(table.schema.metadata or {})
        meta[b"headwatch"] = json.dumps(note).encode()
        table = table.replace_schema_metadata(meta)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_note(path) -> dict:
    """The ``note`` stored by :func:`write_parquet`, or {}."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(b"headwatch", b"{}"))


def write_json(obj, path) -> None:
    """Small check records; floats are checked like tables."""
    def walk(x, where):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{where}.{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{where}[{i}]")
        elif isinstance(x, float):
            assert_finite(x, where)
    walk(obj, Path(path).name)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2, default=float) + "\n")
