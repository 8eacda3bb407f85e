"""Run by every Python whose PYTHONPATH starts with this folder (``site``): a Snakemake script is
handed over to the warm-start server named by ``HEADWATCH_WARMSTART`` (tests/warmstart.py);
any other Python, or one without that variable, goes on as usual. A Snakemake script that runs
here (cold) with ``HEADWATCH_ELSEWHERE=1`` runs on the device tests/elsewhere.py emulates."""
import os
import sys

if os.environ.get("HEADWATCH_WARMSTART"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/, for warmstart
    from warmstart import maybe_hand_over

    maybe_hand_over()

if os.environ.get("HEADWATCH_ELSEWHERE") == "1":
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/
    from warmstart import is_snakemake_script

    if is_snakemake_script(sys.argv):
        import elsewhere

        elsewhere.install()
