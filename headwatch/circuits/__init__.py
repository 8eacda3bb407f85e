"""Circuits (protocol §5e–§5f; rules circuits_paths, circuits_known).

    path_patching  head → head paths through a receiver's query, key or value input
    known          a circuit known before looking: a two-layer model grown to hold an induction
                   circuit, and a control that holds none, read by every method
"""
