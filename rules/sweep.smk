# Stage "sweep": not yet built (see its issue). Defines the targets function the Snakefile reads.


def sweep_targets():
    return []
