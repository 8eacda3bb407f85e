"""What the Snakemake workflow asks the library, above every stage.

    targets     what ``rule all`` makes: the parts of ``default_target``, the report's tables
    run_record  the run a report describes, and the timed runs of the Makefile
                (``python -m headwatch.workflow.run_record timed NAME -- COMMAND``)
    provenance  the commit a results page comes from: a clean tree, the timed run's record
    gpu_shares  GPU shares: training jobs beside each other on one GPU
"""
