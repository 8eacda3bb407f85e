"""Key tables as small self-contained HTML pages, for Snakemake's report (which shows
HTML, images and PDF, but not Parquet). Numbers are printed to 4 significant digits
(integers, and floats of 10 000 or more, as whole numbers); the table's ``headwatch``
note (tableio.write_parquet) is printed above it, so that units and definitions travel
with the numbers."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..markup import html
from ..tableio import read_note, read_parquet

STYLE = """body{font:13px/1.4 "DejaVu Sans",Arial,sans-serif;margin:14px;color:#1b1b1b}
h1{font-size:16px;margin:0 0 6px}dl{font-size:12px;color:#444;margin:0 0 10px}dt{font-weight:bold}
dd{margin:0 0 4px 14px;white-space:pre-wrap}table{border-collapse:collapse;font-size:12px}
th,td{border-bottom:1px solid #ddd;padding:2px 8px;text-align:right;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0}td.txt,th.txt{text-align:left;white-space:pre}"""


def cell_text(value) -> str:
    """One cell as printed: integers in full, floats to 4 significant digits, lists joined."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return "; ".join(cell_text(v) for v in value)
    if value is None or value is pd.NA:
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "–"
        if 1e4 <= abs(value) < 1e15:
            return f"{float(value):.0f}"     # large floats (token counts, bytes): whole numbers
        return f"{float(value):.4g}"
    return str(value)


def table_page(df: pd.DataFrame, title: str, note: dict | None = None) -> str:
    """The HTML page of one table."""
    numeric = {c: pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
               for c in df.columns}
    esc = html                      # every name, value and note is text (headwatch.markup)
    head = "".join(f'<th class="{"" if numeric[c] else "txt"}">{esc(str(c))}</th>' for c in df.columns)
    body = []
    for row in df.itertuples(index=False, name=None):
        body.append("<tr>" + "".join(f'<td class="{"" if numeric[c] else "txt"}">{esc(cell_text(v))}</td>'
                                      for c, v in zip(df.columns, row)) + "</tr>")
    notes = "".join(f"<dt>{esc(str(k))}</dt><dd>{esc(str(v))}</dd>" for k, v in (note or {}).items())
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{esc(title)}</h1>"
            f"<p>{len(df)} rows × {len(df.columns)} columns</p>"
            + (f"<dl>{notes}</dl>" if notes else "")
            + f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></body></html>\n")


def write_table_page(parquet, out) -> int:
    """Render ``parquet`` (with its note) to ``out``; returns the number of rows."""
    df = read_parquet(parquet)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(table_page(df, str(parquet), read_note(parquet)), encoding="utf-8")
    return len(df)
