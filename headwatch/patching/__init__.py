"""Activation patching (protocol §5d): which head carries what decides the answer.

The task is the protocol's ``names`` phrase, "When Mary and John went to the shop, John gave a
drink to" → " Mary": the indirect object (IO, the answer) and the subject (S, named twice).
Cutting a head (§5) asks what breaks without it; patching asks which head *carries* the
information that decides the answer: run a corrupted prompt, put one activation from the
clean run back in, and see how much of the clean answer returns.

**Prompts** (:func:`.prompts.prompt_set`; the settings :class:`headwatch.settings.patching.PatchingSettings`).
``n`` prompts from the ``templates``, whose slots ``{A}``, ``{B}``, ``{C}`` take three names, each
used with the space before it (" Mary"), one token in every studied model
(:func:`headwatch.settings.patching.patching_errors`, run before any job). Prompt ``i`` uses
template ``(i // 2) mod len(templates)`` and order ``ABBA`` for even ``i``, ``BABA`` for odd ``i``:

* ``ABBA``: A = IO, B = C = S ("When Mary and John …, John gave a drink to");
* ``BABA``: A = C = S, B = IO ("When John and Mary …, John gave a drink to").

IO and S are two distinct names drawn with ``numpy.random.default_rng(seed)``; the corrupted
prompt puts three more distinct names, none of them IO or S, in A, B and C (``ABC``): the same
template, so the same length in tokens, and nothing in it points at IO. Every template must
give the same number of tokens with the names at the same positions, so that positions line up
across prompts (the residual sweep's columns).

**Metric.** The logit difference ``logit(IO) − logit(S)`` at the last position, averaged over
the prompts: ``clean`` on the clean prompts, ``corrupted`` on the corrupted ones, ``patched``
on the corrupted prompts with one activation taken from the clean run of the same prompt. The
score is ``(patched − corrupted) / (clean − corrupted)``: 0 = the corrupted run, 1 = the clean.

**What is patched** (:class:`.patcher.Patch`, always with ``replace`` at a site of
:mod:`headwatch.model.interventions`):

* every head's ``z`` over every position (:func:`.patcher.head_patches`);
* the residual stream, the input of each block (``resid_in``), at one position at a time
  (:func:`.patcher.resid_patches`);
* the ``z`` of the top ``top_k`` heads of the head sweep at one position at a time
  (:func:`.patcher.position_patches`).

A one-position patch replaces the whole site by the corrupted run's activation with that
position taken from the clean run: equal to patching the position alone, since in a run with
one patch the site holds the corrupted run's activation everywhere else.

**Batched** (:class:`.patcher.Patcher`): the clean and corrupted activations of every site are
captured once; each row of a forward pass is one (patch, prompt) pair with its own values
(``replace`` with per-row ``rows`` masks); rows are sorted by the patch's layer and cut into
chunks (:func:`headwatch.ablation.cut.plan_chunks`), and the blocks below a chunk's first patched layer
are not run — the corrupted run's input to that block stands in for them (``skip``); the
logits are taken at the last position only. :meth:`.patcher.Patcher.loop` is the plain reference: one
patch per forward pass.

**Attribution patching** (:func:`.attribution.attribution_patching`; AtP and AtP* at the
q and k sites in the same module): the first-order estimate of every
head's patched logit difference from one forward and one backward pass over the corrupted
prompts: ``corrupted + Σ ∂metric/∂z · (z_clean − z_corrupted)``, summed over prompts' positions
and the head's slice (the gradient through a ``capture`` with ``grad=True``).

**A researcher's own prompts** (``patching.pairs``, :mod:`.pairs`): rows of a file
instead of the templates, of different lengths: :meth:`.batch.PromptBatch.of` pads them on the left
(the batch's ``mask``; every forward pass here passes it with its position ids), the residual and
top-head sweeps count positions from the end.

**Guards** (:mod:`.guards`): nothing patched gives the corrupted logits exactly; the
last block's output patched at every position gives the clean logits exactly; a head patched
clean → clean changes nothing; the batched sweep equals one patch per forward pass within
the bound of float32 rounding (:class:`headwatch.guards.Rounding`, its factor
``patching.rounding_factor``). A failed guard raises once the tables are made, carrying them
(``err.table``); the workflow writes no table.

The modules, one rule each where a rule reads them:

    prompts      the two-names prompt set (rule patching_prompts)
    pairs        a researcher's prompt pairs file instead (rule patching_prompts)
    batch        PromptBatch: the prompts every patching, circuit and edge computation runs on
    patcher      Patch, Patcher: many patches per forward pass, and the plain loop
    heads        rule patching_sweep: every head, the residual stream, the top heads by position
    kv           rule patching_kv: each layer's key and value groups at every position
    positions    rule patching_positions_all: heads at every position through the KV cache
    attribution  attribution patching (AtP) at z, q and k, AtP*'s fixes, their blind spots
    guards       every guard of §5d and §5e

Nothing is imported here: import the module you need, or the public functions from
:mod:`headwatch` itself (``hw.patch_heads``, ``hw.patch_kv_groups``, ``hw.patch_positions``,
``hw.attribution``).
"""
