"""headwatch: open up the attention heads of a causal language model.

A head is addressed as ``(layer, head)``, 0-based, layer first, everywhere.
The modules, in the order data flows through them:

    settings   each stage's settings, typed (no torch): ablation, patching, sweep, anatomy
    sources    where a studied model comes from and what its files say, read without loading it
    config     the checks that run before any job
    models     prepare a studied model once; load a prepared folder, a hub id or a module
               (load_prepared, load_model); dtype/NaN guards
    arch       one adapter per family: the only code that knows module names
    sequences  the seeded token sets, prose and phrases
    attention  attention maps and next-token predictions for phrases
    scores     sink / prev / self / induction, reduced inside the forward pass
    interventions  every edit and capture of a forward pass, at named sites (the one hook module)
    cut        cutting heads (zero or mean) through interventions — see ablation
    anatomy    configs, parameters by block, rotary, KV cache, weight checks
    params     parameters by block, counted from a model's modules (the one count)
    charlm     the sweep's character-level model (ModelSpec, CharLM), corpus, tokenizers
    sweep      the sweep: plan, training, the heads it grows, summary, studies, course
    figures    one figure style and the plots
    warmstart  the tests' Snakemake jobs forked from a process that has imported torch once
"""
__version__ = "0.1.0"
