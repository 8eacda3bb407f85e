"""The model core: what every stage reads a model through.

    arch           one adapter per architecture family: the only code that knows module names,
                   config keys, norms and each family's attention rules (``Adapter``, ``FAMILIES``)
    interventions  every edit and capture of a forward pass, at named sites (the one hook module)
    recompute      attention weights recomputed from queries and keys by a family's rules
    load           prepare a studied model once, load a prepared folder, a local folder, a hub id
                   or the bundled SmolLM2, with the dtype and NaN guards (``load_model``)
    device         where a job runs, and the exact-numerics switches its guards need
    params         parameters by block, counted from a model's modules (the one count)
    sources        where a model comes from and what its files say, read without loading it
                   (standard library only: the pre-job checks read it)

Nothing is imported here, so that ``headwatch.model.sources`` stays importable without torch.
"""
