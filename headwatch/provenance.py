"""Which commit a published result comes from: a results page names the commit it was computed at
and the command that reproduces it, and is written only from a clean tree (nothing the results
depend on changed or untracked), so that the commit alone reproduces it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path


class DirtyTreeError(RuntimeError):
    """The working tree differs from its commit where results depend on it."""


RESULT_INPUTS = ("Snakefile", "headwatch", "rules", "scripts", "config")
"""The paths a result depends on (the workflow, its library, its scripts and its configuration)."""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise DirtyTreeError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def require_clean_tree(root: Path, paths=RESULT_INPUTS) -> str:
    """The full commit hash of HEAD in ``root``; raises :class:`DirtyTreeError` naming every file
    under ``paths`` that is changed (staged or not) or untracked (ignored files do not count)."""
    head = _git(root, "rev-parse", "HEAD").strip()
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", *paths)
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    if changed:
        raise DirtyTreeError(f"{len(changed)} file(s) under {', '.join(paths)} differ from commit {head[:12]} "
                             f"(commit or remove them first): {', '.join(changed)}")
    return head


def page_header(commit: str, command: str) -> str:
    """Markdown lines for a results page: the commit (short hash), that the tree was clean, and the
    command that reproduces the page (shown as code, whatever it holds)."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", command)), default=0) + 1)
    pad = " " if command.startswith("`") or command.endswith("`") else ""
    return (f"Computed at commit `{commit[:7]}` from a clean tree (no change to "
            f"{', '.join(RESULT_INPUTS)}).\n\n"
            f"Reproduce it: {fence}{pad}{command}{pad}{fence}\n")
