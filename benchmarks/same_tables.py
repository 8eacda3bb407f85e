"""Are two runs' tables the same? Every Parquet table under one results folder against the same
file under another: its columns and every value, exactly (NaN equal to NaN), and its note (the
Parquet metadata) key by key.

Made to show that a change moved code and nothing else (a run of `make quick` at the commit
before the change, one after):

    python benchmarks/same_tables.py BEFORE/results AFTER/results

Columns and note keys that hold a measurement of the run itself — wall-clock seconds, tokens
per second, memory — differ from run to run whatever the code; they are listed apart
(``--timing``) and do not count against identity. So does a trained model's ``model_sha256``
when the two ``model.pt`` files beside the tables hold the same weights and differ only in such
a measurement (the file records the run's peak memory). Exit status 0 when every table is
identical but for those, 1 otherwise.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headwatch.tableio import read_note  # noqa: E402

TIMING = re.compile(r"(seconds|_s$|^s$|per_s|_per_sec|tokens_per|chars_per_s|throughput|wall|cpu_time|peak|memory|"
                    r"rss|elapsed|time$|_time|started|finished|date)", re.I)
"""A column or note key that measures the run (time, speed, memory), not the result."""


def same_frame(a: pd.DataFrame, b: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(columns whose values differ, columns in one only)."""
    only = sorted(set(a.columns) ^ set(b.columns))
    differ = []
    if len(a) != len(b):
        return ["<rows: %d vs %d>" % (len(a), len(b))], only
    for c in a.columns:
        if c not in b.columns:
            continue
        x, y = a[c].reset_index(drop=True), b[c].reset_index(drop=True)
        try:
            equal = x.equals(y) or bool(((x == y) | (x.isna() & y.isna())).all())
        except (TypeError, ValueError):            # lists, arrays in cells
            equal = [repr(v) for v in x] == [repr(v) for v in y]
        if not equal:
            differ.append(c)
    return differ, only


def flat(d, prefix=""):
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out


def same_model(a: Path, b: Path) -> bool:
    """Whether two trained models hold the same weights and the same record but for measurements
    of their runs (``model.pt``: :func:`headwatch.sweep.train.save_trained`)."""
    import torch

    x, y = (torch.load(p, weights_only=True) for p in (a, b))
    if set(x) != set(y) or set(x["state_dict"]) != set(y["state_dict"]):
        return False
    if not all(torch.equal(x["state_dict"][k], y["state_dict"][k]) for k in x["state_dict"]):
        return False
    plain = lambda rec: {k: v for k, v in flat({k: v for k, v in rec.items() if k != "state_dict"}).items()
                         if not TIMING.search(k)}
    return plain(x) == plain(y)


def compare(before: Path, after: Path) -> dict:
    tables = sorted(p.relative_to(before) for p in before.rglob("*.parquet"))
    made = {p.relative_to(after) for p in after.rglob("*.parquet")}
    report = dict(identical=[], timing_only=[], different=[], missing=sorted(map(str, set(tables) - made)),
                  new=sorted(map(str, made - set(tables))))
    for rel in tables:
        if rel not in made:
            continue
        a, b = pq.read_table(before / rel).to_pandas(), pq.read_table(after / rel).to_pandas()
        differ, only = same_frame(a, b)
        na, nb = flat(read_note(before / rel)), flat(read_note(after / rel))
        notes = sorted(k for k in set(na) | set(nb) if repr(na.get(k)) != repr(nb.get(k)))
        if "model_sha256" in notes and (before / rel).with_name("model.pt").exists() and same_model(
                (before / rel).with_name("model.pt"), (after / rel).with_name("model.pt")):
            notes = [k if k != "model_sha256" else "model_sha256 (same weights; the file records the run's memory)"
                     for k in notes]
        measured = lambda k: TIMING.search(k) or k.startswith("model_sha256 (same weights")
        real = [c for c in differ if not TIMING.search(c)] + only + [f"note:{k}" for k in notes if not measured(k)]
        timing = [c for c in differ if TIMING.search(c)] + [f"note:{k}" for k in notes if measured(k)]
        entry = (str(rel), real, timing)
        (report["different"] if real else report["timing_only"] if timing else report["identical"]).append(entry)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--timing", action="store_true", help="list the measurements of the run that differ too")
    args = ap.parse_args(argv)
    r = compare(args.before, args.after)
    n = sum(len(r[k]) for k in ("identical", "timing_only", "different"))
    print(f"{n} tables in both: {len(r['identical'])} identical, {len(r['timing_only'])} identical but for "
          f"measurements of the run (time, speed, memory), {len(r['different'])} different; "
          f"{len(r['missing'])} only before, {len(r['new'])} only after")
    for rel, real, _ in r["different"]:
        print(f"  DIFFERENT {rel}: {', '.join(real)}")
    for rel, _, timing in r["timing_only"] if args.timing else []:
        print(f"  timing    {rel}: {', '.join(timing)}")
    for rel in r["missing"]:
        print(f"  only before: {rel}")
    for rel in r["new"]:
        print(f"  only after: {rel}")
    return 0 if not (r["different"] or r["missing"] or r["new"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
