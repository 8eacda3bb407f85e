"""The guards of activation patching (protocol §5d) and of path patching (§5e), each reporting
through :func:`headwatch.guards.compare`:

* :func:`nothing_patched` — the patch path with nothing patched (the corrupted run's own
  states stood in for the blocks below each layer, as the batched sweep does) gives the
  corrupted run's full logits exactly;
* :func:`everything_patched` — the clean run's output of the last block, every position,
  patched into the corrupted run gives the clean run's full logits exactly;
* :func:`clean_to_clean` — a head's ``z`` from the clean run patched into the same clean run
  changes no logit;
* :func:`headwatch.guards.batched_vs_loop` — the batched sweep against one patch per forward
  pass, within the bound of float32 rounding (:class:`headwatch.guards.Rounding`: different batch
  shapes round differently); also the per-position head sweep run through the corrupted run's
  key/value cache (:mod:`headwatch.patching.positions`);
* :func:`padded_vs_alone` — prompts of different lengths (a pairs file) in one left-padded
  batch give each prompt's logits as when run alone, within the bound of rounding;
* :func:`qkv_is_z` — a layer's queries, keys and values patched at every position give the
  logits of every head's ``z`` of that layer patched, identically (attention reads nothing else);
* :func:`kv_ungrouped` — a key (value) group patched equals the keys (values) of every query
  head of the group patched in the model's ungrouped twin (:mod:`headwatch.patching.kv`);
* :func:`path_into_everything` — the path from a sender into every downstream component at
  once (nothing frozen) equals activation patching of the sender
  (:mod:`headwatch.circuits.path_patching`).

A guard takes the :class:`~headwatch.patching.patcher.Patcher` (or path patcher) whose runs it
checks, so that it reads the same prompts, mask and captured states as the sweep.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..guards import GuardError, Rounding, compare, rounding
from ..model.arch import Adapter
from ..model.interventions import at_least_float32, capture, intervene, replace, skip
from .batch import PromptBatch
from .patcher import Patch


# ------------------------------------------------------------------ activation patching (§5d)
def _rows(patcher, prompts: Sequence[int]) -> PromptBatch:
    """The patcher's prompts ``prompts`` (indices into them), on its device."""
    return patcher.prompts.rows(torch.as_tensor(list(prompts), dtype=torch.long, device=patcher.device))


@torch.no_grad()
def padded_vs_alone(patcher, prompts: Sequence[int], rounding_factor: float) -> dict:
    """Each of ``prompts`` (indices into the patcher's prompts), clean and corrupted, in the
    left-padded batch the sweep runs (attention mask and position ids, :func:`headwatch.arch.padded_inputs`)
    against the same prompt run alone, without padding: the full logits of its own tokens within
    the bound of rounding (:func:`headwatch.guards.rounding`, its magnitude the largest |logit| of the
    prompts run alone). The batch shapes differ, so the kernels sum in other orders: float32 rounding,
    which grows with the logits' scale — on SmolLM2-135M (30 layers, logits up to ~30) one pad token
    moved a logit by 1.1e-4, 0.05 × the bound. Padding
    without the position ids it needs shifts every token of a shorter prompt by the padding's
    length: on GPT-2 (absolute positions) one pad token moved the next-token distribution by 0.9 in
    total variation, orders of magnitude past the bound."""
    if patcher.prompts.mask is None:
        raise GuardError("guard padded_vs_alone: the prompts have one length; nothing is padded")
    a = patcher.adapter
    chosen = _rows(patcher, prompts)
    mask = chosen.mask
    cases = []
    for run in ("clean", "corrupted"):
        ids = getattr(chosen, run)
        batch = at_least_float32(a.logits(ids, mask=mask))
        for r, i in enumerate(prompts):
            own = mask[r].bool()
            alone = at_least_float32(a.logits(ids[r, own].unsqueeze(0)))[0]
            cases.append((dict(run=run, prompt=int(i), tokens=int(own.sum()), padding=int((~own).sum())),
                          batch[r, own], alone))
    scale = max(float(alone.abs().max()) for _, _, alone in cases)
    return compare("padded_vs_alone", cases, rounding(a, rounding_factor, scale),
                   "full logits of each prompt's own tokens in the left-padded batch vs the prompt run alone",
                   prompts=len(prompts), width=patcher.length)


@torch.no_grad()
def nothing_patched(patcher, prompts: Sequence[int]) -> dict:
    """The corrupted run's full logits (every position and vocabulary entry) with nothing
    patched, through the patch path: for every layer e ≥ 1 the corrupted run's own input to
    block e stood in for blocks 0..e−1 (the ``skip`` the batched sweep uses for the layers below
    its first patch), against a plain forward pass. Identical, or :class:`GuardError`.

    Both sides are computed here, on ``prompts`` (indices into the patcher's prompts), in one
    batch shape, so that the same kernels see the same numbers."""
    a = patcher.adapter
    chosen = _rows(patcher, prompts)
    ids, mask = chosen.corrupted, chosen.mask
    with intervene(a, [capture("resid_in", l) for l in range(1, a.n_layers)]) as cap:
        want = a.logits(ids, mask=mask)

    def pairs():
        for e in range(1, a.n_layers):
            with intervene(a, [skip(e - 1, cap.one(("resid_in", e, None)))]):
                yield dict(first_layer_run=e), a.logits(ids, mask=mask), want

    return compare("nothing_patched", pairs(), 0.0,
                   "full logits of the corrupted prompts: nothing patched, blocks 0..e-1 stood in for by "
                   "their own output (every e >= 1) vs a plain forward pass", prompts=len(prompts))


@torch.no_grad()
def everything_patched(patcher, prompts: Sequence[int]) -> dict:
    """The clean run's output of the last block, every position, patched into the corrupted
    run (``replace`` at ``resid`` of the last layer): the full logits must be the clean run's,
    identically. The record also holds the normalized score of that patch on these prompts
    (1 by construction)."""
    a = patcher.adapter
    last = a.n_layers - 1
    chosen = _rows(patcher, prompts)
    clean, corrupted, mask = chosen.clean, chosen.corrupted, chosen.mask
    with intervene(a, [capture("resid", last)]) as cap:
        want = a.logits(clean, mask=mask)
    plain = a.logits(corrupted, mask=mask)
    with intervene(a, [replace("resid", last, cap.one(("resid", last, None)))]):
        got = a.logits(corrupted, mask=mask)
    ld = [float(chosen.logit_diff(x[:, -1]).double().mean()) for x in (got, want, plain)]
    score = (ld[0] - ld[2]) / (ld[1] - ld[2]) if ld[1] != ld[2] else None
    return compare("everything_patched", [(dict(layer=last), got, want)], 0.0,
                   f"full logits of the corrupted prompts with the clean run's resid of layer {last} (every "
                   "position) patched in vs the clean run's", prompts=len(prompts), score=score)


@torch.no_grad()
def clean_to_clean(patcher, prompts: Sequence[int], heads: Sequence[tuple[int, int]]) -> dict:
    """Each head's ``z`` from the clean run patched into the same clean run (``replace`` at
    ``z``, every position): every logit must stay as it is, identically — a patch that takes
    the wrong slice, head or prompt would move them. A patch at layer ``l`` leaves the blocks
    below it as they are: the patched run starts at block ``l``, on the clean run's output of
    block ``l-1`` (captured with the unpatched logits), as the batched sweep does."""
    a = patcher.adapter
    chosen = _rows(patcher, prompts)
    clean, mask = chosen.clean, chosen.mask
    layers = sorted({l for l, _ in heads})
    below = sorted({l - 1 for l in layers if l > 0})
    with intervene(a, [capture("z", l) for l in layers] + [capture("resid", l) for l in below]) as cap:
        want = a.logits(clean, mask=mask)

    def pairs():
        for l, h in heads:
            z = cap.one(("z", l, None))[..., a.out_columns(h)]
            start = [skip(l - 1, cap.one(("resid", l - 1, None)))] if l > 0 else []
            with intervene(a, [replace("z", l, z, unit=h)] + start):
                yield dict(layer=l, head=h), a.logits(clean, mask=mask), want

    return compare("clean_to_clean", pairs(), 0.0,
                   "full logits of the clean prompts with a head's z patched from the clean run itself, run "
                   "from the head's layer up, vs unpatched", prompts=len(prompts))


def _below(patcher, layer: int, prompts: Sequence[int]) -> list:
    """The corrupted run's input to block ``layer`` stood in for the blocks below it (none for layer 0)."""
    if layer == 0:
        return []
    return [skip(layer - 1, patcher.acts["corrupted"]["resid_in"][layer][list(prompts)])]


@torch.no_grad()
def qkv_is_z(patcher, prompts: Sequence[int], layers: Iterable[int], sites: Sequence[str] = ("q", "k", "v")) -> dict:
    """Each layer's ``q``, ``k`` and ``v`` (``sites``) patched clean → corrupted at every position
    against every head's ``z`` of the layer patched: the full logits must be identical, since a
    layer's attention output reads nothing but its queries, keys and values (the rotary
    embedding and any QK-norm come after the sites, at the same positions). Both sides' clean
    values come from one clean run of ``prompts`` here, and both run from the layer up on the
    same stand-in, in one batch shape: the same kernels see the same numbers, so identical, not
    merely close. Leaving ``v`` out of ``sites`` breaks it (the test shows the guard firing)."""
    a = patcher.adapter
    chosen = _rows(patcher, prompts)
    clean, corrupted = chosen.clean, chosen.corrupted
    layers = list(layers)
    with intervene(a, [capture(site, l) for l in layers for site in ("z", *sites)]) as cap:
        a.run_body(clean)

    def pairs():
        for l in layers:
            with intervene(a, [replace(site, l, cap.one((site, l, None))) for site in sites] + _below(patcher, l, prompts)):
                got = a.logits(corrupted)
            with intervene(a, [replace("z", l, cap.one(("z", l, None)))] + _below(patcher, l, prompts)):
                want = a.logits(corrupted)
            yield dict(layer=l), got, want

    return compare("qkv_is_z", pairs(), 0.0,
                   f"full logits of the corrupted prompts with a layer's {', '.join(sites)} patched from the clean "
                   "run at every position vs with every head's z of that layer patched", prompts=len(prompts))


@torch.no_grad()
def kv_ungrouped(patcher, twin: Adapter, prompts: Sequence[int], cases, heads_of: Callable[[Adapter, int], list],
                 bound: Rounding) -> dict:
    """A key/value group patched in the model against the same keys (values) patched head by head
    in its ungrouped twin (``twin``: kv heads = heads, each head's key and value rows its
    group's; :func:`headwatch.patching_kv.ungrouped_twin`): ``cases`` are ``(patch, batched)``
    with ``patch`` a ``k`` or ``v`` patch of one group and ``batched`` the sweep's logit
    differences of ``prompts``; the twin's side replaces the site's slice of every query head
    ``heads_of(adapter, group)`` by the twin's clean run, one patch per forward pass from the
    layer up (the twin's corrupted input to it stood in below). Within ``bound`` (the rounding of the
    model's logits): the twin computes the same numbers with other matrix shapes (more key and value
    rows), which may round differently."""
    a, d = patcher.adapter, patcher.adapter.head_dim
    chosen = _rows(patcher, prompts)
    clean, corrupted = chosen.clean, chosen.corrupted
    sites = sorted({(p.site, p.layer) for p, _ in cases})
    with intervene(twin, [capture(site, l) for site, l in sites]) as cap:
        twin.run_body(clean)
    with intervene(twin, [capture("resid_in", l) for l in sorted({l for _, l in sites} - {0})]) as below:
        twin.run_body(corrupted)

    def pairs():
        for p, batched in cases:
            heads = heads_of(a, p.unit)
            value = cap.one((p.site, p.layer, None))
            edits = [replace(p.site, p.layer, value[..., h * d:(h + 1) * d], unit=h) for h in heads]
            if p.layer:
                edits.append(skip(p.layer - 1, below.one(("resid_in", p.layer, None))))
            with intervene(twin, edits):
                logits = twin.logits(corrupted, keep=1)[:, -1]
            yield (dict(site=p.site, layer=p.layer, group=p.unit, heads=heads), batched.to(logits.device),
                   chosen.logit_diff(logits))

    return compare("kv_ungrouped", pairs(), bound,
                   "logit difference answer − distractor of every guard prompt: a key/value group patched (the sweep) vs the "
                   "keys/values of each of its query heads patched in the ungrouped twin (kv heads = heads, "
                   "each head's key and value rows its group's)", prompts=len(prompts),
                   twin_kv_heads=twin.n_kv_heads)


# ------------------------------------------------------------------ path patching (§5e)
@torch.no_grad()
def path_into_everything(paths, senders: Sequence[tuple[int, int]], prompts: Sequence[int], bound: Rounding) -> dict:
    """The path from each sender into every component downstream of it at once — nothing frozen,
    the receiver the last block's output (:meth:`headwatch.circuits.PathPatcher.into_everything`)
    — against activation patching of the sender (the head sweep's
    :meth:`headwatch.patching.Patcher.run` of its z), each prompt's logit difference, within
    ``bound`` (the rounding of the logits): a freeze that reaches the unfrozen run, a sender patched into the wrong slot or
    a pass that reads another prompt's values moves it."""
    got = paths.into_everything(senders, prompts)
    want = paths.patcher.run([Patch("z", l, h) for l, h in senders], prompts)
    return compare("path_into_everything", [(dict(layer=l, head=h), g, w) for (l, h), g, w in zip(senders, got, want)],
                   bound, "logit difference answer − distractor of each guard prompt: the path from the sender into every "
                   "downstream component (nothing frozen) vs activation patching of the sender",
                   prompts=len(prompts))
