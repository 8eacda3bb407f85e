"""Run by every Python whose PYTHONPATH starts with this folder (``site``): a Snakemake script is
handed over to the warm-start server named by ``HEADWATCH_WARMSTART`` (headwatch/warmstart.py);
any other Python, or one without that variable, goes on as usual."""
import os

if os.environ.get("HEADWATCH_WARMSTART"):
    from headwatch.warmstart import maybe_hand_over

    maybe_hand_over()
