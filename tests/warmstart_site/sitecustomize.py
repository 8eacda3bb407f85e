"""Run by every Python whose PYTHONPATH starts with this folder (``site``): a Snakemake script is
handed over to the warm-start server named by ``HEADWATCH_WARMSTART`` (tests/warmstart.py);
any other Python, or one without that variable, goes on as usual."""
import os
import sys

if os.environ.get("HEADWATCH_WARMSTART"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/, for warmstart
    from warmstart import maybe_hand_over

    maybe_hand_over()
