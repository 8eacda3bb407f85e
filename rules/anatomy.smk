# Stage "anatomy": not yet built (see its issue). Defines the targets function the Snakefile reads.


def anatomy_targets():
    return []
