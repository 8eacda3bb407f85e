"""Guards: the comparisons that say a measurement is what it claims, and the one shape of record.

A *guard* compares two computations that must agree — exactly, or within a stated
tolerance — on the quantity a rule reports or on the full logits behind it. Every guard
follows one pattern and writes one shape of record:

* it computes both sides itself, from the model and the inputs it is handed, or is handed
  both sides (the batched result a table holds and its plain loop);
* it reports through :func:`compare`, whose **record** is a plain dict that goes into the
  rule's guards JSON as it is: ``guard`` (its name, the name of its function),
  ``compared`` (what, in words), ``n_cases``, ``max_abs_diff``, ``identical`` (every element
  equal), ``tolerance``, ``passed``, the guard's own facts, and ``cases``: one small dict per
  case, naming it, with its ``shape``, ``max_abs_diff`` and ``identical``;
* when it fails it raises :class:`GuardError`, which stops the rule before any table is
  written. A tolerance of 0 means identical, not merely a max |Δ| of 0.

:class:`GuardRecords` collects a rule's records into its JSON (``passed``, dtype, device,
numerics, each record under its name); :func:`headwatch.tableio.guard_records` lists them.
:func:`batched_vs_loop` — a batched path against one edit per forward pass — is every stage's.

Each stage keeps its own guards beside its code, all reporting through :func:`compare`:

* cutting heads (protocol §5): :mod:`headwatch.ablation.guards` (the hook against the weights,
  mean cuts against a bias, the model restored, the random control; :func:`merge_guards
  <headwatch.ablation.guards.merge_guards>`);
* activation and path patching (§5d, §5e): :mod:`headwatch.patching.guards` (nothing patched,
  everything patched, clean to clean, padded against alone, q/k/v against z, a key/value group
  against its ungrouped twin, a path into everything against activation patching);
* the anatomy's weight check and key-group cuts (§6): :mod:`headwatch.anatomy`.

:class:`GuardError` is an :class:`~headwatch.model.interventions.InterventionError`, so that code
catching an edit that does not fit also catches a failed guard.
"""
from __future__ import annotations

import logging
import math
from typing import Iterable, Sequence

import torch

from .model.device import numerics
from .model.interventions import InterventionError

log = logging.getLogger("headwatch.guards")

__all__ = ["GuardError", "Compared", "compare", "GuardRecords", "batched_vs_loop"]


class GuardError(InterventionError):
    """What a failed guard raises: two ways of computing one result disagreed, so the result is not
    what it claims to be, and no table is returned (a workflow rule stops).

    >>> try:
    ...     heads = hw.patch_heads(m, prompts)
    ... except hw.GuardError as err:
    ...     print(err)
    """


Compared = torch.Tensor | Sequence[torch.Tensor]
"""One side of a case: a tensor, or a list of tensors (inputs of different lengths, e.g. phrases)."""


# ------------------------------------------------------------------ the one comparison
def _shape(x: Compared) -> list:
    return [list(t.shape) for t in x] if isinstance(x, (list, tuple)) else list(x.shape)


def _figures(got: Compared, want: Compared) -> torch.Tensor:
    """``[max |got − want|, 1.0 if every element is equal else 0.0]`` (float64, on got's device:
    nothing is read from the device here)."""
    if isinstance(got, (list, tuple)):
        parts = torch.stack([_figures(a, b) for a, b in zip(got, want)])
        return torch.stack([parts[:, 0].max(), parts[:, 1].min()])
    if got.numel() == 0:
        return torch.tensor([0.0, 1.0], dtype=torch.float64, device=got.device)
    want = want.to(got.device)
    return torch.stack([(got - want).abs().max().double(), (got == want).all().double()])


def compare(guard: str, pairs: Iterable[tuple[dict, Compared, Compared]], tolerance: float,
            compared: str, **facts) -> dict:
    """The record of ``guard``: every ``(case, got, want)`` of ``pairs`` (``case`` a small dict
    naming it) compared, one pair at a time (nothing is kept but the figures, read from the device
    once at the end). Passed when every max |got − want| ≤ ``tolerance``, and with ``tolerance`` 0
    only when every pair is identical. Raises :class:`GuardError` otherwise, or when a pair's
    shapes differ or there is no pair at all."""
    cases, figures = [], []
    for case, got, want in pairs:
        if _shape(got) != _shape(want):
            raise GuardError(f"guard {guard}: {compared}: shapes {_shape(got)} vs {_shape(want)} ({case})")
        cases.append(dict(case, shape=_shape(got)))
        figures.append(_figures(got, want))
    if not cases:
        raise GuardError(f"guard {guard}: {compared}: nothing to compare")
    read = torch.stack([f.to(figures[0].device) for f in figures]).cpu().tolist()
    for c, (diff, equal) in zip(cases, read):
        c.update(max_abs_diff=diff, identical=equal == 1.0)
    diffs = [c["max_abs_diff"] for c in cases]
    worst = math.nan if any(math.isnan(d) for d in diffs) else max(diffs)
    identical = all(c["identical"] for c in cases)
    ok = [c["identical"] if tolerance == 0 else c["max_abs_diff"] <= tolerance for c in cases]
    record = dict(guard=guard, compared=compared, n_cases=len(cases), max_abs_diff=worst, identical=identical,
                  tolerance=tolerance, passed=all(ok), **facts, cases=cases)
    if not record["passed"]:
        bad = [c for c, good in zip(cases, ok) if not good]
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

    def record(self, model, **facts) -> dict:
        """Every record, with the dtype, device and numerics the guards ran under and ``facts``."""
        if not self.guards:
            raise GuardError("no guard was run")
        p = next(model.parameters())
        return dict(passed=all(r["passed"] for r in self.guards.values()),
                    dtype=str(p.dtype).replace("torch.", ""), device=p.device.type, numerics=numerics(),
                    **facts, **self.guards)


def batched_vs_loop(pairs: Iterable[tuple[dict, Compared, Compared]], tolerance: float, compared: str,
                    **facts) -> dict:
    """The batched path against the plain loop, one edit (a cut set, a patch) per forward pass:
    each ``(case, batched, looped)`` of ``pairs`` — the values a table holds and the same values
    computed one at a time — within ``tolerance`` (max |Δ|; batch shapes round differently)."""
    return compare("batched_vs_loop", pairs, tolerance, compared, **facts)
