"""What every part of the explorer's data is made of: a table's cells as JSON values (:func:`plain`), a
table as ``{columns, rows}`` (:func:`records`), and the error a table the page cannot show raises."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..settings.tables import TableError


class ExplorerDataError(TableError):
    """A table the page is built from is incomplete or inconsistent: a :class:`~headwatch.settings.tables.TableError`
    (``except hw.TableError`` catches it), raised by the page's own checks."""


def plain(value):
    """A JSON-able Python value from a pandas/numpy cell (lists joined by the page)."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return [plain(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        if not math.isfinite(f):
            return None
        return f
    return str(value)


def records(df: pd.DataFrame) -> dict:
    """A table as {columns, rows} (rows as lists), JSON-able, column order kept."""
    cols = [str(c) for c in df.columns]
    rows = [[plain(v) for v in row] for row in df.itertuples(index=False, name=None)]
    return dict(columns=cols, rows=rows)
