"""Glue between Snakemake scripts and the library: logging to the rule's log."""
from __future__ import annotations

import contextlib
import logging
import sys
import traceback


@contextlib.contextmanager
def log_to(path):
    """Send stderr and ``logging`` (progress) to a rule's log file.

    An exception is written to the log with its traceback, then re-raised so the
    rule fails.
    """
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
