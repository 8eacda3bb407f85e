"""Glue between Snakemake scripts and the library: logging to the rule's log."""
from __future__ import annotations

import contextlib
import logging
import sys
import traceback


@contextlib.contextmanager
def log_to(path, threads: int | None = None):
    """Send stderr and ``logging`` (progress) to a rule's log file.

    ``threads`` (the rule's ``threads``) caps torch's intra-op threads, so that
    jobs Snakemake runs side by side do not oversubscribe the cores.
    An exception is written to the log with its traceback, then re-raised so the
    rule fails.
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    with open(path, "a", buffering=1) as fh:
        old = sys.stderr
        sys.stderr = fh
        logging.basicConfig(stream=fh, level=logging.INFO, force=True,
                            format="%(asctime)s %(name)s %(message)s")
        try:
            yield logging.getLogger("headwatch")
        except BaseException:
            traceback.print_exc(file=fh)
            raise
        finally:
            sys.stderr = old
