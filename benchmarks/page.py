"""docs/benchmarks.md, written from the benchmark records (benchmarks/records/*.json).

Every timing and ratio headwatch states lives in a record with the machine it was measured on,
the load, the command and the commit; this page is written from them and never typed, so that a
figure cannot lose its machine on the way. A record is one JSON object: ``title``, ``method`` (how
it is measured), ``rows`` (each ``what, figures, machine, load, command, commit, date`` and where
the figure comes from, ``source``), in the order given by ``ORDER`` (others after, by name).

    .venv/bin/python benchmarks/page.py            # writes docs/benchmarks.md
    .venv/bin/python benchmarks/page.py --check    # exit 1 if the page differs from the records

The README quotes the peers' ratios only (never a time): the lines between its markers
``<!-- peers: ... -->`` and ``<!-- /peers -->`` are written here too, from the same record.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "records"
PAGE = ROOT / "docs" / "benchmarks.md"
ORDER = ("peers", "targets", "gpu", "induction", "edges", "ablation", "patching", "circuits")
COLUMNS = ("what", "figures", "machine", "load", "command", "commit", "date")


def add_row(record: str, row: dict) -> Path:
    """Put ``row`` first in ``benchmarks/records/<record>.json``, replacing a row of the same ``what``
    and ``date`` (a benchmark rerun the same day replaces its own row, never another's), and write the
    page again from the records (so that the record and the page never differ, in a clone where one
    target is timed after another)."""
    missing = [c for c in COLUMNS if not row.get(c)]
    if missing:
        raise SystemExit(f"a benchmark row needs {', '.join(missing)}")
    path = RECORDS / f"{record}.json"
    rec = json.loads(path.read_text())
    rec["rows"] = [r for r in rec["rows"] if not (r["what"] == row["what"] and r.get("date") == row["date"])]
    rec["rows"].insert(0, row)
    path.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n")
    PAGE.write_text(page())
    return path


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def records() -> list[tuple[str, dict]]:
    found = {p.stem: json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))}
    names = [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)
    return [(n, found[n]) for n in names]


def page() -> str:
    out = ["# Benchmarks", "",
           "Every timing and ratio of headwatch, each with the machine, the load and the command that measured it. "
           "Written by `benchmarks/page.py` from the records in `benchmarks/records/` — edit a record, or run the "
           "benchmark again, never this page. Times from different machines or days are not comparable: the 2-core "
           "machines these ran on differ about 2× between CPU kinds and by a third from day to day on one kind; "
           "compare ratios measured in one run.", ""]
    for name, rec in records():
        out += [f"## {rec['title']}", "", rec["method"], ""]
        if rec.get("table"):                  # a record that carries its own table (one run's rows)
            out += [rec["table"].rstrip(), ""]
        rows = rec.get("rows", [])
        if rows:
            out += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
            out += ["| " + " | ".join(cell(r.get(c, "")) if c != "command" else f"`{cell(r.get(c, ''))}`"
                                      for c in COLUMNS) + " |" for r in rows]
            out.append("")
            sources = sorted({r["source"] for r in rows if r.get("source")})
            out += [f"Source: {s}." for s in sources] + ([""] if sources else [])
        out.append(f"Record: `benchmarks/records/{name}.json`.")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


README = ROOT / "README.md"
START, END = "<!-- peers: written by benchmarks/page.py from benchmarks/records/peers.json -->", "<!-- /peers -->"


def readme_lines() -> list[str]:
    """The README's lines on the peers: per task, each peer's wall time as a multiple of headwatch's
    (medians of one run)."""
    path = RECORDS / "peers.json"
    if not path.exists():
        return ["How headwatch's speed compares with TransformerLens and nnsight: not yet measured "
                "(`benchmarks/peers.py --record`)."]
    run = json.loads(path.read_text())["run"]
    out = [f"Against its peers on SmolLM2-135M, in one run on {run['before']['cores']} CPU cores (medians of "
           f"{run['rounds']} interleaved rounds, each peer's numbers checked equal to headwatch's first; the table, "
           "machine and command: `docs/benchmarks.md`):", ""]
    names = {"transformer_lens": "TransformerLens", "nnsight": "nnsight"}
    for t in run["tasks"]:
        peers = [f"{names.get(r['peer'], r['peer'])} {r['ratio']:.1f}×" for r in t["rows"] if r["peer"] != "headwatch"]
        if peers:
            out.append(f"- {t['what']}: {', '.join(peers)} headwatch's wall time")
    return out


def readme(text: str) -> str:
    """``text`` (the README) with its peers block written from the record."""
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no block between '{START}' and '{END}'")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + "\n" + "\n".join(readme_lines()) + "\n" + END + tail


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is not what the records give")
    args = ap.parse_args(argv)
    text = page()
    quoted = readme(README.read_text())
    if args.check:
        same = PAGE.exists() and PAGE.read_text() == text
        print("docs/benchmarks.md is" + (" " if same else " NOT ") + "the records' page")
        same_readme = README.read_text() == quoted
        print("README.md's peers block is" + (" " if same_readme else " NOT ") + "the record's")
        return 0 if same and same_readme else 1
    PAGE.write_text(text)
    README.write_text(quoted)
    print(f"wrote {PAGE.relative_to(ROOT)} from {len(records())} records, and README.md's peers block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
