"""Tables in and out (Parquet, JSON records), guarded: a bad number never reaches a table.

Every table the workflow publishes goes through :func:`write_parquet`, which
refuses NaN and inf and names the column that holds them (the float16-on-CPU
trap of protocol §1 produces plausible-looking maps next to NaN logits). It
writes atomically (a temporary file renamed into place), with page checksums
and an integrity record (row count, column names and types) in the file's
metadata.

Every table the workflow reads goes through :func:`read_parquet`, which
verifies the footer, the checksums, the row count and the schema against that
record; a corrupt file stops the rule with a message that names the file, the
rule that makes it and the command that remakes it (protocol §9). Files that are
not tables (the corpus's ids, a trained model) are verified against the SHA-256
recorded when they were written (:func:`verify_sha256`), with the same message.

The guard records (``results/{model}/patching/guards.json``, ``ablation/guards.json`` and
``ablation/guards/*.json``) are written by :func:`write_record` (atomically, with the
SHA-256 of their content inside) and read by :func:`read_record` only, which refuses one that
is not a regular file, not JSON (cut short, overwritten), whose content differs from its
SHA-256 or that does not say its guards passed, with the same message; every run checks the
records of the studied models before any job (:func:`broken_records`, rules/common.smk).

pandas and pyarrow are imported where a table is written or read, not at the top: the Snakefile reads
the records at every parse (`snakemake -n` too), which imports neither (tests/test_workflow.py).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from . import paths
if TYPE_CHECKING:      # the annotations only: pandas is imported where a table is read or written
    import pandas as pd


class NonFiniteError(RuntimeError):
    """A tensor or table meant for output holds NaN or inf."""


def assert_finite(value, what: str):
    """Raise :class:`NonFiniteError` naming ``what`` if ``value`` has NaN/inf; return it."""
    # A tensor can exist only where torch is imported already: the table-only jobs (figures,
    # pages, summaries) never import it (~2 s of CPU each).
    torch, pd = sys.modules.get("torch"), sys.modules.get("pandas")
    if torch is not None and isinstance(value, torch.Tensor):
        bad = (~torch.isfinite(value.detach())).sum().item() if value.is_floating_point() else 0
        total = value.numel()
    elif pd is not None and isinstance(value, pd.DataFrame):
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


INTEGRITY_KEY = b"headwatch.integrity"


class CorruptTableError(RuntimeError):
    """A Parquet file that cannot be trusted: unreadable footer or pages, or a row count or
    schema that disagrees with the file's own integrity record."""


def _columns(schema) -> list[list[str]]:
    """Column names and types; a list's inner field name (``item`` when written, ``element``
    in Parquet's own schema) is not part of the type."""
    return [[f.name, re.sub(r"<(item|element): ", "<", str(f.type))] for f in schema]


def write_parquet(df: pd.DataFrame, path, what: str | None = None, note: dict | None = None) -> None:
    """Write ``df`` to Parquet after checking every numeric column is finite.

    ``note`` is stored as file-level metadata (key ``headwatch``), for facts a
    reader must know about the numbers, such as quantization. The file gets an
    integrity record and page checksums (read back by :func:`read_parquet`) and
    appears under its name only once complete.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert_finite(df, what or str(path))
    df = df.copy(deep=False)
    df.attrs = {}           # the API's companions (note, guards, tables) are written by the caller, not here
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    if note:
        meta[b"headwatch"] = json.dumps(note).encode()
    meta[INTEGRITY_KEY] = json.dumps(dict(rows=table.num_rows, columns=_columns(table.schema))).encode()
    table = table.replace_schema_metadata(meta)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with paths.written(path) as tmp:
        pq.write_table(table, tmp, write_page_checksum=True)


def producing_rule(path, workdir=".") -> str | None:
    """The rule that wrote ``path``, from Snakemake's own record of it (``.snakemake/metadata``)."""
    meta = Path(workdir) / ".snakemake" / "metadata"
    if not meta.is_dir():
        return None
    names = {str(path), os.path.relpath(Path(path).resolve(), Path(workdir).resolve())}
    for name in names:
        b64 = base64.urlsafe_b64encode(name.encode()).decode()
        size = max(os.pathconf(meta, "PC_NAME_MAX") if os.name == "posix" else 255, 2) - 1
        parts = [b64[i:i + size] for i in range(0, len(b64), size)]
        record = meta.joinpath(*["@" + p for p in parts[:-1]], parts[-1])
        try:
            return json.loads(record.read_text()).get("rule")
        except (OSError, ValueError):
            continue
    return None


def corrupt_table(path, why: str) -> CorruptTableError:
    """The error for a table that cannot be trusted: what is wrong, who makes it, how to remake it."""
    rule = producing_rule(path)
    made = (f"It is made by rule {rule}: remake it with `snakemake --forcerun {rule}` (that rule and "
            f"everything downstream) or `snakemake --forcerun {path}` (this file's job only)"
            if rule else f"Remake it with `snakemake --forcerun {path}` (the job that writes it and "
                         "everything downstream)")
    return CorruptTableError(f"{path} is corrupt: {why}. {made}, with your usual options; or delete "
                             "the file and run snakemake again.")


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path, expected: str | None, record: str) -> None:
    """Refuse ``path`` unless its SHA-256 is ``expected``, the hash ``record`` (a file, a field)
    holds for it since it was written: a file changed in place, even at the same size, is not
    the file the workflow wrote."""
    if not expected:
        raise corrupt_table(path, f"{record} records no SHA-256 for it (written before hashes were "
                                  "recorded, or the record was edited)")
    found = file_sha256(path)
    if found != expected:
        raise corrupt_table(path, f"its SHA-256 {found[:16]}… differs from {expected[:16]}… recorded in "
                                  f"{record} when it was written: it was changed since")


def read_parquet(path, columns: list[str] | None = None) -> pd.DataFrame:
    """Read a table written by :func:`write_parquet`, verified first: the footer must parse,
    the page checksums must match, and the row count and schema must equal the integrity
    record in the file's own metadata. Raises :class:`CorruptTableError` otherwise."""
    import pandas as pd
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        md = pf.metadata
        schema = pf.schema_arrow
    except Exception as err:    # any parse failure means a corrupt file: re-raised as ours
        if isinstance(err, FileNotFoundError):
            raise
        raise corrupt_table(path, f"its Parquet footer cannot be read ({type(err).__name__}: {err})") from err
    in_groups = sum(md.row_group(i).num_rows for i in range(md.num_row_groups))
    if in_groups != md.num_rows:
        raise corrupt_table(path, f"its row groups hold {in_groups} rows, its footer says {md.num_rows}")
    raw = (schema.metadata or {}).get(INTEGRITY_KEY)
    record = json.loads(raw) if raw else None
    if record:
        if md.num_rows != record["rows"]:
            raise corrupt_table(path, f"it holds {md.num_rows} rows, its integrity record says {record['rows']}")
        if _columns(schema) != record["columns"]:
            raise corrupt_table(path, f"its schema {_columns(schema)} differs from its integrity record "
                                      f"{record['columns']}")
    try:
        df = pd.read_parquet(path, columns=columns, page_checksum_verification=True)
    except Exception as err:
        raise corrupt_table(path, f"its data pages cannot be read ({type(err).__name__}: {err})") from err
    if len(df) != md.num_rows:
        raise corrupt_table(path, f"{len(df)} rows were read, its footer says {md.num_rows}")
    return df


def read_note(path) -> dict:
    """The ``note`` stored by :func:`write_parquet`, or {}."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta.get(b"headwatch", b"{}"))


def write_json(obj, path) -> None:
    """Small records (a guard record: :func:`write_record`); floats are checked like tables; the
    file appears under its name only once complete."""
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with paths.written(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=float) + "\n")


# ------------------------------------------------------------------ guard records
RECORD_INTEGRITY = "integrity"
RECORD_MAX_BYTES = 64 << 20     # a guard record is kilobytes; a larger file is not one


def _record_sha256(body: dict) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def write_record(obj: dict, path) -> None:
    """A guard record as JSON (floats checked like tables), written atomically, with the SHA-256
    of its content under ``integrity`` (:func:`read_record` verifies it)."""
    body = json.loads(json.dumps({k: v for k, v in obj.items() if k != RECORD_INTEGRITY}, default=float))
    write_json(dict(body, **{RECORD_INTEGRITY: dict(
        sha256=_record_sha256(body), of="this record without its integrity key, as JSON with sorted keys "
                                        "and no spaces")}), path)


def read_record(path) -> dict:
    """A guard record written by :func:`write_record`, verified: a regular file of at most
    :data:`RECORD_MAX_BYTES`, UTF-8 JSON holding an object whose content matches its SHA-256
    and which says its guards passed. Raises :class:`CorruptTableError` naming the file and
    the rule that remakes it otherwise (a record written before records carried a SHA-256 is
    read without one)."""
    record, why = _record(path)
    if why:
        raise corrupt_table(path, why)
    return record


class Tables(dict):
    """The tables a computation made beside its own (``attrs["tables"]``), by name. Equal only to
    itself: pandas compares the ``attrs`` of the frames it concatenates, and a DataFrame has no
    truth value (a frame derived from several keeps no ``attrs``)."""
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def with_attrs(table: pd.DataFrame, note: dict | None = None, guards: dict | None = None, **tables) -> pd.DataFrame:
    """``table`` as the public functions return it: its ``note``, its guard record and the other
    tables the same passes made on its ``attrs`` (``note``, ``guards``, ``tables``)."""
    if note is not None:
        table.attrs["note"] = note
    if guards is not None:
        table.attrs["guards"] = guards
    if tables:
        table.attrs["tables"] = Tables(tables)
    return table


def guard_records(rule_record: dict) -> list[dict]:
    """The guards' records in a rule's record (:func:`headwatch.guards.compare`'s, one shape: each
    names its ``guard``), in the order they ran."""
    return [g for g in rule_record.values() if isinstance(g, dict) and "guard" in g]


def _record(path) -> tuple[dict | None, str | None]:
    """(the record, None), or (None, what is wrong with it)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        return None, "it is not a regular file"
    if st.st_size > RECORD_MAX_BYTES:
        return None, f"it holds {st.st_size:,} bytes, more than a guard record's {RECORD_MAX_BYTES:,}"
    with open(path, "rb") as fh:
        data = fh.read(RECORD_MAX_BYTES + 1)
    try:
        record = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        return None, f"it is not UTF-8 text ({err})"
    except ValueError as err:
        return None, f"it is not valid JSON ({err}): it was cut short or overwritten"
    if not isinstance(record, dict):
        return None, f"it holds a JSON {type(record).__name__}, not a guard record"
    integrity = record.pop(RECORD_INTEGRITY, None)
    if integrity is not None:
        found = _record_sha256(record) if isinstance(integrity, dict) else None
        if found is None or found != integrity.get("sha256"):
            return None, (f"its content's SHA-256 {str(found)[:16]}… differs from the one it records "
                          f"({str(integrity)[:80]}): it was changed since it was written")
    if record.get("passed") is not True:
        return None, (f"it does not say that its guards passed (passed: {record.get('passed')!r}); a rule "
                      "whose guard fails writes no record")
    return record, None


def broken_records(paths) -> list[str]:
    """What is wrong with each record among ``paths`` that exists and :func:`read_record` would
    refuse, and how to remake it. Read before any job (rules/common.smk), when a ``--forcerun``
    is not known yet: the remedy is to delete the record, so that its job reruns."""
    out = []
    for path in paths:
        if not os.path.lexists(path):
            continue
        try:
            why = _record(path)[1]
        except OSError as err:
            why = f"it cannot be read ({err.strerror or err})"
        if why:
            rule = producing_rule(path)
            made = f"It is made by rule {rule}: delete" if rule else "Delete"
            out.append(f"{path} is corrupt: {why}. {made} it and run snakemake again, with your usual options: "
                       "the job that writes it reruns")
    return out
