"""Which commit a published number comes from: a results page is written only from a clean tree.

A page of results (``docs/results/*.md``) is cited; a number on it that no commit can reproduce is
not a result. Its writer therefore calls :func:`require_clean_tree` before it writes anything —
the checkout must be a git checkout, at its top, with no uncommitted change (staged or not, a
deleted file included) and no untracked file (git-ignored files do not count) in anything the
results depend on — and puts :func:`page_header` (the commit, that the tree was clean, the exact
command that writes the page again) at the top of each part of the page it computes.

**What the results depend on** — :data:`RESULT_INPUTS`, the one list, paths relative to the
checkout's top:

* ``Snakefile``, ``rules``, ``scripts``, ``config``: the workflow and every choice it makes;
* ``headwatch``: the library that computes every number;
* ``requirements.txt`` and ``environment.yml``: the pinned versions (another torch or transformers
  is another floating-point result) and the rules' conda environment, which reads those pins;
* ``benchmarks``: the page writers themselves (``benchmarks/gpu/paper_tables.py`` computes every
  label and derived figure on the page), the GPU check that produces the GPU page's tables
  (``benchmarks/gpu/check.py``, its ``tiny.yaml`` and shipped tokenizer) and the training-step
  timing it runs (``benchmarks/train.py``).

Left out, because they change no number: ``report/`` (captions), ``docs/`` (prose, and the pages
themselves: writing one part of a page must not block writing the next), ``tests/``, the README,
the ``Makefile`` (it only picks cores and the ``gpu`` resource) and ``pyproject.toml`` (package
metadata; the pins are in requirements.txt).
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

RESULT_INPUTS = ("Snakefile", "headwatch", "rules", "scripts", "config",
                 "requirements.txt", "environment.yml", "benchmarks")


class DirtyTreeError(RuntimeError):
    """The tree cannot vouch for the numbers: changed or untracked files under the result inputs,
    or no git checkout to name a commit from."""


class RunRecordError(ValueError):
    """A run's record cannot be used: the record of the last run (:mod:`headwatch.workflow.run_record`) is
    not valid YAML, or a timed run's record does not let its results be published — no record, a
    failed run, or an attempt made from a tree with changes or at a commit whose result inputs
    differ from this one's."""


class NotACheckoutError(DirtyTreeError):
    """No commit can be named at all: not a git checkout (or not its top folder), no commit yet, or no git."""


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise NotACheckoutError(f"{root}: git is not installed, so no commit can be named for the results "
                                "written from it") from None


def require_clean_tree(root: Path, paths=RESULT_INPUTS) -> str:
    """The full hash of HEAD of the git checkout ``root`` (its top folder), when nothing under
    ``paths`` differs from HEAD; else :class:`DirtyTreeError` naming every changed, staged, deleted
    and untracked (not ignored) file under them, and what to do. When no commit can be named at all
    (not a git checkout, not its top, no commit yet, no git) the error is a :class:`NotACheckoutError`
    (a DirtyTreeError too) that says so."""
    root = Path(root).resolve()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise NotACheckoutError(f"{root} is not a git checkout ({top.stderr.strip() or 'git rev-parse failed'}): "
                                "results written from it could not name the commit that computed them; "
                                "write them from a clone of the repository")
    if Path(top.stdout.strip()).resolve() != root:
        raise NotACheckoutError(f"{root} is not the top of its git checkout ({top.stdout.strip()}): give the "
                                "checkout's top folder, whose files git tracks")
    head = _git(root, "rev-parse", "--verify", "HEAD^{commit}")
    if head.returncode != 0:
        raise NotACheckoutError(f"{root}: the checkout has no commit yet, so none can be named")
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
    if status.returncode != 0:
        raise DirtyTreeError(f"{root}: git status failed: {status.stderr.strip()}")
    changed, untracked = [], []
    entries = iter(status.stdout.split("\0"))
    for entry in entries:
        if not entry:
            continue
        code, name = entry[:2], entry[3:]
        if code == "??":
            untracked.append(name)
        else:
            changed.append(name)
            if "R" in code or "C" in code:      # a rename or copy: the next entry is its source
                changed.append(next(entries, ""))
    if changed or untracked:
        parts = []
        if changed:
            parts.append(f"uncommitted changes to {', '.join(sorted(set(filter(None, changed))))}")
        if untracked:
            parts.append(f"untracked files {', '.join(sorted(untracked))}")
        raise DirtyTreeError(
            f"{root} has {' and '.join(parts)} (under {', '.join(paths)}: what the results depend on). "
            "A page written from it would name a commit that does not hold the code that computed it: "
            "commit (or stash, or remove) them, recompute what they change, then write the page.")
    return head.stdout.strip()


def run_attempts(root: Path, record: Path, commit: str) -> list[dict]:
    """The attempts of the timed run recorded in ``record`` (:func:`headwatch.workflow.run_record.timed`),
    when they can vouch for results published from the checkout ``root`` at ``commit``: the last
    attempt succeeded, and every attempt was made from a clean tree at a commit whose result inputs
    (:data:`RESULT_INPUTS`) are this one's. Else :class:`RunRecordError`, naming what is wrong."""
    record = Path(record)
    if not record.exists():
        raise RunRecordError(f"no {record}: the results were not computed by a timed run, which records "
                             "its commit there (run its command first)")
    attempts = json.loads(record.read_text())["attempts"]
    if attempts[-1]["exit_status"] != 0:
        raise RunRecordError(f"{record}: the run failed (exit status {attempts[-1]['exit_status']}); "
                             "finish it first")
    for a in attempts:
        if a["commit"] is None:
            raise RunRecordError(f"{record}: the attempt of {a['started']} was made from a tree with changes "
                                 f"({a['dirty']})")
        moved = _git(root, "diff", "--name-only", a["commit"], commit, "--", *RESULT_INPUTS)
        if moved.returncode != 0:
            raise RunRecordError(f"{record}: the attempt of {a['started']} names commit {a['commit'][:7]}, "
                                 f"which this checkout cannot compare with {commit[:7]}: {moved.stderr.strip()}")
        if moved.stdout.split():
            raise RunRecordError(f"{record}: the attempt of {a['started']} was made at commit {a['commit'][:7]}, "
                                 f"whose result inputs differ from this commit's ({commit[:7]}): "
                                 f"{', '.join(moved.stdout.split())}; clean the results and run it again")
    return attempts




def page_header(commit: str, command: str) -> str:
    """Markdown lines for the top of a page (or of one part of it): the commit by its short hash,
    that the tree was clean, and the exact command that writes it again, as a code block (the
    command is shown as it is, never read as markup)."""
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise ValueError(f"page_header takes the full commit hash that require_clean_tree returns; got {commit!r}")
    longest = max((len(run) for run in re.findall(r"`+", command)), default=0)
    fence = "`" * max(3, longest + 1)      # longer than any run of backticks in the command
    return "\n".join([
        f"From commit `{commit[:7]}` (`{commit}`) of headwatch, with a clean tree: no uncommitted "
        f"change and no untracked file in {', '.join(f'`{p}`' for p in RESULT_INPUTS)}. "
        "This command, run from the repository's top folder at that commit, writes it again:",
        "",
        fence + "sh",
        command,
        fence,
    ])
