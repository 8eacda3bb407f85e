"""Time one command the way the project's budgets are stated (``make quick``, ``.ci/run``, ``make
test``): its wall time, the CPU time of everything it ran, the load before and after, on which
machine and at which commit — and, with ``--record``, add that row to
``benchmarks/records/targets.json`` (``benchmarks/page.py`` writes it into docs/benchmarks.md).

Run it alone: nothing else may compute while it times. The commit must be clean (a figure of a
tree nobody can check out is refused).

    .venv/bin/python benchmarks/timed.py --what "make quick" [--record] -- make quick
    python3 benchmarks/timed.py --what "make test (fresh clone, make venv included)" -- .ci/run

It needs nothing but the standard library, so it can time ``.ci/run`` in a clone with no ``.venv``.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]
from page import add_row  # noqa: E402  (the records' one writer)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (the platform's name where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def clean_commit(root: Path) -> str:
    """The short commit of ``root``'s checkout; refuses a tree with uncommitted changes to tracked files
    (but the records and the page written from them, which a benchmark run the moment before may have
    just written)."""
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!benchmarks/records", ":!docs/benchmarks.md"],
                           cwd=root,
                           capture_output=True, text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"the checkout has uncommitted changes; commit them first:\n{dirty}")
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", required=True, help="the row's name, e.g. 'make quick'")
    ap.add_argument("--record", action="store_true", help="add the row to benchmarks/records/targets.json")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to time")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to time after --")
    commit = clean_commit(Path.cwd())
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(command)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()[0]
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = use.ru_utime + use.ru_stime
    status = "" if done.returncode == 0 else f"; it FAILED (exit {done.returncode})"
    figures = (f"{minutes(wall)} wall, {cpu / 60:.1f} CPU min ({use.ru_utime:.0f} s user + {use.ru_stime:.0f} s "
               f"system){status}")
    print(f"{args.what}: {figures}")
    if args.record:
        if done.returncode != 0:
            raise SystemExit("a failed run is not recorded")
        row = dict(what=args.what, figures=figures, machine=f"{len(os.sched_getaffinity(0))} {cpu_model()} cores",
                   load=f"load average {load_before:.2f} before, {load_after:.2f} after",
                   command=f"benchmarks/timed.py --what '{args.what}' --record -- {' '.join(command)}",
                   commit=commit, date=date.today().isoformat())
        print(f"added to {add_row('targets', row).relative_to(ROOT)}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
