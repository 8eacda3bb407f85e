"""headwatch: open up the attention heads of a causal language model.

A head is addressed as ``(layer, head)``, 0-based, layer first, everywhere.
The modules, in the order data flows through them:

    models     load a model by config key, hub id or folder; dtype/NaN guards
    arch       one adapter per family: the only code that knows module names
    sequences  the seeded token sets, prose and phrases
    attention  attention maps and next-token predictions for phrases
    scores     sink / prev / self / induction, reduced inside the forward pass
    interventions  every edit and capture of a forward pass, at named sites (the one hook module)
    cut        cutting heads (zero or mean) through interventions — see ablation
    anatomy    configs, parameters by block, rotary, KV cache, weight checks
    params     parameters by block, counted from a model's modules (the one count)
    charlm     the sweep's character-level model (ModelSpec, CharLM), corpus, tokenizers
    sweep      the sweep: plan, config checks, training, summary, studies
    figures    one figure style and the plots
"""
__version__ = "0.1.0"
