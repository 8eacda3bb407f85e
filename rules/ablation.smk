# Stage "ablation": not yet built (see its issue). Defines the targets function the Snakefile reads.


def ablation_targets():
    return []
