"""A new user's first own patched pair: the README's notebook block, from its first line to its
first figure, run as the README gives it in a fresh process and timed.

It times the two parts a user waits for — importing headwatch and loading the bundled SmolLM2, then
``patch_heads`` on the README's pair with its figure saved — and, with ``--setup-seconds`` (the
wall time of ``make venv`` in the same fresh clone), the whole way from a fresh clone to the
figure. ``--record`` adds the row to ``benchmarks/records/targets.json`` (``benchmarks/page.py``
writes it into docs/benchmarks.md).

    git clone <repo> fresh && cd fresh && time make venv
    .venv/bin/python benchmarks/first_pair.py --setup-seconds <make venv's wall seconds> [--record]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from page import add_row  # noqa: E402  (the records' one writer)
from timed import clean_commit  # noqa: E402  (a clean tree but the records just written)
MARK = "__first_pair_loaded__"


def readme_block(readme: Path) -> list[str]:
    """The README's notebook block (the python fence after '## From a notebook') up to and including
    its first line that draws a figure (``hw.plot_``)."""
    text = readme.read_text()
    section = text.split("## From a notebook", 1)
    if len(section) < 2:
        raise SystemExit(f"{readme}: no '## From a notebook' section")
    fence = re.search(r"```python\n(.*?)```", section[1], re.S)
    if fence is None:
        raise SystemExit(f"{readme}: the notebook section has no python block")
    lines = fence.group(1).splitlines()
    last = next((i for i, line in enumerate(lines) if "hw.plot_" in line), None)
    if last is None:
        raise SystemExit(f"{readme}: the notebook block draws no figure (hw.plot_…)")
    return lines[:last + 1]


def program(lines: list[str]) -> str:
    """The block with a timestamp printed after the model has loaded (the line with ``load_model``)."""
    out = ["import time as _t; _t0 = _t.time()"]
    for line in lines:
        out.append(line)
        if "load_model(" in line:
            out.append(f"print('{MARK}', _t.time() - _t0, flush=True)")
    out.append("print('__first_pair_done__', _t.time() - _t0, flush=True)")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup-seconds", type=float, help="make venv's wall time in the same fresh clone")
    ap.add_argument("--record", action="store_true", help="add the row to benchmarks/records/targets.json")
    args = ap.parse_args(argv)
    from headwatch.workflow.run_record import machine

    commit = clean_commit(ROOT) if args.record else None     # refused before the minute it takes, not after
    lines = readme_block(ROOT / "README.md")
    with tempfile.TemporaryDirectory() as cwd:                    # the figure lands there, not in the checkout
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", program(lines)], cwd=cwd, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"the README's block failed:\n{done.stderr[-3000:]}")
        figures = sorted(p.name for p in Path(cwd).iterdir())
    marks = dict(line.split()[:2] for line in done.stdout.splitlines() if line.startswith("__first_pair_"))
    loaded, finished = float(marks[MARK]), float(marks["__first_pair_done__"])
    figures_text = (f"the README's block to its first figure ({', '.join(figures)}): {wall:.1f} s wall — import and "
                    f"model {loaded:.1f} s, patch_heads and the figure {finished - loaded:.1f} s")
    if args.setup_seconds is not None:
        total = args.setup_seconds + wall
        figures_text += f"; with make venv's {args.setup_seconds / 60:.1f} min: {total / 60:.1f} min from a fresh clone"
    print(figures_text)
    if args.record:
        m = machine()
        row = dict(what="a new user's first own patched pair with its figure (README)", figures=figures_text,
                   machine=f"{m['usable_cores']} {m['cpu_model']} cores", load=f"load average {load_before:.2f} before",
                   command="time make venv; .venv/bin/python benchmarks/first_pair.py --setup-seconds S --record",
                   commit=commit, date=date.today().isoformat())
        path = add_row("targets", row)
        print(f"added to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
