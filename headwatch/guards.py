"""Guards: the checks that say a measurement is what it claims, in one place.

A *guard* compares two computations that must agree — exactly, or within a stated
tolerance — on the quantity a rule reports or on the full logits behind it. Every guard
here follows one pattern:

* it computes both sides itself, from the model and the inputs it is handed (never from
  the result it checks, unless that result is the side under test);
* it returns a **record**, a plain dict that goes into the rule's guards JSON as it is:
  ``guard`` (its name), ``compared`` (what, in words), ``shape`` of what was compared,
  ``max_abs_diff``, ``identical`` (``torch.equal``), ``tolerance``, ``passed`` and, where a
  guard covers several cases, ``cases`` (one small dict each);
* when it fails it raises :class:`GuardError`, which stops the rule before any table is
  written. A tolerance of 0 means identical (``torch.equal``), not merely a max |Δ| of 0.

:func:`compare` is the one comparison every guard reports through; :class:`GuardRecords`
collects a rule's records into its JSON (``passed``, dtype, device, numerics, each record).

The guards of activation patching (protocol §5d, :mod:`headwatch.patching`):

* :func:`nothing_patched` — the patch path with nothing patched (the corrupted run's own
  states stood in for the blocks below each layer, as the batched sweep does) gives the
  corrupted run's full logits exactly;
* :func:`everything_patched` — the clean run's output of the last block, every position,
  patched into the corrupted run gives the clean run's full logits exactly;
* :func:`clean_to_clean` — a head's ``z`` from the clean run patched into the same clean run
  changes no logit;
* :func:`batched_vs_loop` — the batched sweep against one patch per forward pass, within a
  tolerance (different batch shapes round differently).

The guards of cutting heads (protocol §5) are older than this module and still sit beside the
cuts (``interventions.check_against_reference``, ``check_restore``, ``compare_batched``;
``cut.check_hook_vs_weights``, ``check_hook_vs_mean_bias``; ``ablation.AblationGuards``); they
belong here, and :class:`GuardError` is an :class:`~headwatch.interventions.InterventionError`
so that code catching theirs catches these too.
"""
from __future__ import annotations

import logging
from typing import Iterable, Sequence

import torch

from .device import numerics
from .interventions import InterventionError, capture, intervene, replace, skip

log = logging.getLogger("headwatch.guards")

__all__ = ["GuardError", "compare", "GuardRecords", "nothing_patched", "everything_patched",
           "clean_to_clean", "batched_vs_loop"]


class GuardError(InterventionError):
    """A guard failed: the measurement is not what it claims to be; the rule stops."""


def compare(guard: str, pairs: Iterable[tuple[dict, torch.Tensor, torch.Tensor]], tolerance: float,
            compared: str, **facts) -> dict:
    """The record of ``guard``: every ``(case, got, want)`` of ``pairs`` (``case`` a small dict
    naming it) compared, one pair at a time (nothing is kept but the figures). Passed when every
    max |got − want| ≤ ``tolerance``, and with ``tolerance`` 0 only when every pair is identical
    (``torch.equal``). Raises :class:`GuardError` otherwise, or when a pair's shapes differ or
    there is no pair at all."""
    cases, shape = [], None
    for case, got, want in pairs:
        if got.shape != want.shape:
            raise GuardError(f"guard {guard}: {compared}: shapes {tuple(got.shape)} vs {tuple(want.shape)} "
                             f"({case})")
        diff = float((got.double() - want.double()).abs().max()) if got.numel() else 0.0
        cases.append(dict(case, max_abs_diff=diff, identical=bool(torch.equal(got, want))))
        shape = list(got.shape)
    if not cases:
        raise GuardError(f"guard {guard}: {compared}: nothing to compare")
    worst = max(c["max_abs_diff"] for c in cases)
    identical = all(c["identical"] for c in cases)
    passed = identical if tolerance == 0 else worst <= tolerance
    record = dict(guard=guard, compared=compared, shape=shape, n_cases=len(cases), max_abs_diff=worst,
                  identical=identical, tolerance=tolerance, passed=passed, **facts)
    if len(cases) > 1:
        record["cases"] = cases
    if not passed:
        bad = [c for c in cases if not (c["identical"] if tolerance == 0 else c["max_abs_diff"] <= tolerance)]
        raise GuardError(f"guard {guard}: {compared}: max |Δ| = {worst:g} "
                         f"{'is not identical' if tolerance == 0 else f'> {tolerance:g}'} in {len(bad)} of "
                         f"{len(cases)} cases (first: {bad[0]})")
    log.info("guard %s: %d cases, max |Δ| = %g (%s)", guard, len(cases), worst,
             "identical" if identical else f"tolerance {tolerance:g}")
    return record


class GuardRecords:
    """One rule's guard records, by name; :meth:`record` is the rule's guards JSON."""

    def __init__(self):
        self.guards: dict[str, dict] = {}

    def add(self, record: dict) -> dict:
        if record["guard"] in self.guards:
            raise GuardError(f"guard {record['guard']} recorded twice")
        self.guards[record["guard"]] = record
        return record

    def record(self, model) -> dict:
        """Every record, with the dtype, device and numerics the guards ran under."""
        if not self.guards:
            raise GuardError("no guard was run")
        p = next(model.parameters())
        return dict(passed=all(r["passed"] for r in self.guards.values()),
                    dtype=str(p.dtype).replace("torch.", ""), device=p.device.type, numerics=numerics(),
                    **self.guards)


# ------------------------------------------------------------------ activation patching (§5d)
def _rows(ids: torch.Tensor, prompts: Sequence[int]) -> torch.Tensor:
    return ids[torch.as_tensor(list(prompts), dtype=torch.long, device=ids.device)]


@torch.no_grad()
def nothing_patched(patcher, prompts: Sequence[int]) -> dict:
    """The corrupted run's full logits (every position and vocabulary entry) with nothing
    patched, through the patch path: for every layer e ≥ 1 the corrupted run's own input to
    block e stood in for blocks 0..e−1 (the ``skip`` the batched sweep uses for the layers below
    its first patch), against a plain forward pass. Identical, or :class:`GuardError`.

    Both sides are computed here, on ``prompts`` (indices into the patcher's prompts), in one
    batch shape, so that the same kernels see the same numbers."""
    a = patcher.adapter
    ids = _rows(patcher.corrupted, prompts)
    with intervene(a, [capture("resid_in", l) for l in range(1, a.n_layers)]) as cap:
        want = a.logits(ids)

    def pairs():
        for e in range(1, a.n_layers):
            with intervene(a, [skip(e - 1, cap.one(("resid_in", e, None)))]):
                yield dict(first_layer_run=e), a.logits(ids), want

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
    clean, corrupted = _rows(patcher.clean, prompts), _rows(patcher.corrupted, prompts)
    with intervene(a, [capture("resid", last)]) as cap:
        want = a.logits(clean)
    plain = a.logits(corrupted)
    with intervene(a, [replace("resid", last, cap.one(("resid", last, None)))]):
        got = a.logits(corrupted)
    io, s = patcher.io[list(prompts)], patcher.s[list(prompts)]
    ld = [float(patcher.logit_diff(x[:, -1], io, s).double().mean()) for x in (got, want, plain)]
    score = (ld[0] - ld[2]) / (ld[1] - ld[2]) if ld[1] != ld[2] else None
    return compare("everything_patched", [(dict(layer=last), got, want)], 0.0,
                   f"full logits of the corrupted prompts with the clean run's resid of layer {last} (every "
                   "position) patched in vs the clean run's", prompts=len(prompts), score=score)


@torch.no_grad()
def clean_to_clean(patcher, prompts: Sequence[int], heads: Sequence[tuple[int, int]]) -> dict:
    """Each head's ``z`` from the clean run patched into the same clean run (``replace`` at
    ``z``, every position): every logit must stay as it is, identically — a patch that takes
    the wrong slice, head or prompt would move them."""
    a = patcher.adapter
    clean = _rows(patcher.clean, prompts)
    layers = sorted({l for l, _ in heads})
    with intervene(a, [capture("z", l) for l in layers]) as cap:
        want = a.logits(clean)

    def pairs():
        for l, h in heads:
            z = cap.one(("z", l, None))[..., a.out_columns(h)]
            with intervene(a, [replace("z", l, z, unit=h)]):
                yield dict(layer=l, head=h), a.logits(clean), want

    return compare("clean_to_clean", pairs(), 0.0,
                   "full logits of the clean prompts with a head's z patched from the clean run itself vs "
                   "unpatched", prompts=len(prompts))


def batched_vs_loop(patcher, patches: Sequence, batched: torch.Tensor, prompts: Sequence[int],
                    tolerance: float) -> dict:
    """The batched sweep's logit differences (``batched`` ``[len(patches), len(prompts)]``: the
    sweep's values for these patches and prompts) against one patch per forward pass over the
    same prompts (``patcher.loop``): max |Δ| per prompt ≤ ``tolerance``."""
    looped = patcher.loop(patches, prompts)
    pairs = [(dict(site=p.site, layer=p.layer, unit=p.unit, position=p.position), b, x)
             for p, b, x in zip(patches, batched.cpu(), looped.cpu())]
    return compare("batched_vs_loop", pairs, tolerance,
                   "logit difference IO - S of every prompt: the batched sweep vs one patch per forward pass",
                   prompts=len(prompts))
