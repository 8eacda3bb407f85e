"""A failed rerun loses nothing: a job's previous outputs stay until its new ones are complete.

Snakemake removes a job's outputs before it runs it again (its params changed, an input was
remade): a rerun that then fails — a value no check refused that fails only inside the job —
would leave nothing where a finished result was. :func:`keep_previous_outputs` marks every output
of every rule with Snakemake's own ``update`` flag: before the job runs, Snakemake copies each
existing output to ``.snakemake/backups/`` instead of removing it; when the job fails it puts the
copy back ("Restored previous version of …" in its output), and when the job succeeds it drops
the copy. Snakemake leaves the outputs in place meanwhile; every script removes them as it starts
(:func:`headwatch.jobs.clear_outputs`, in ``log_to``), so that an output the job fails to write is
missing — Snakemake names it, fails the job and puts the copy back — never the previous run's file
standing as this run's (what kept the flag out of use before).

Called by the Snakefile once every rule is read (tests/test_keep_outputs.py: a finished induction
run rerun with settings that fail inside the job is still there afterwards).
"""
from __future__ import annotations

import shutil
from pathlib import Path


def keep_previous_outputs(workflow) -> int:
    """Flag every output of every rule of ``workflow`` ``update`` (module doc); returns how many."""
    from snakemake.io import AnnotatedString

    n = 0
    for rule in workflow.rules:
        for out in rule.output:
            if not hasattr(out._file, "flags"):       # a plain path: give it Snakemake's flags
                out._file = AnnotatedString(out._file)
            out._file.flags["update"] = True
            n += 1
    return n


def fresh_folder(path: str | Path) -> Path:
    """``path`` as an empty folder: a folder output's previous contents (kept aside by Snakemake
    while the job runs, :func:`keep_previous_outputs`) removed before the job writes it anew."""
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path
