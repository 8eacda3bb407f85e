"""Guards: the comparisons that say a measurement is what it claims, every one in this module.

A *guard* compares two computations that must agree — exactly, or within a stated
tolerance — on the quantity a rule reports or on the full logits behind it. Every guard
here follows one pattern:

* it computes both sides itself, from the model and the inputs it is handed (never from
  the result it guards, unless that result is the side under test);
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

The guards of cutting heads (protocol §5, :mod:`headwatch.cut`, :mod:`headwatch.ablation`),
older than the pattern above (their records have their own keys, which the guards JSON of the
ablation rules and the GPU check read):

* :func:`guard_against_reference` — the FULL logits under a set of edits against those under a
  weight-level equivalent (:func:`~headwatch.interventions.zeroed_weights`,
  :func:`~headwatch.interventions.replaced_by_bias`); :func:`guard_hook_vs_weights` (zero cuts:
  hook vs zeroed Wo columns, exactly 0.0 in float32) and :func:`guard_hook_vs_mean_bias` (mean
  cuts, for which a "zeroed weights" reference does not exist: hook vs Wo's columns zeroed plus
  ``Wo[:, h] · m`` added as a bias, compared in float64, :data:`MEAN_BIAS_RTOL`);
* :func:`guard_restore` — the model back intact (identical logits) after every hook is removed;
* :func:`guard_batched` — edits batched per row against the one-at-a-time loop;
* :class:`AblationGuards` — the three for one ablation rule, its guards JSON;
  :func:`merge_guards` — every ablation rule's, refused if one failed.

:class:`GuardError` is an :class:`~headwatch.interventions.InterventionError`, so that code
catching an edit that does not fit also catches a failed guard.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, Sequence

import torch

from .arch import Adapter, Head
from .cut import cut_edits, heads_one_per_layer, normalize_heads, zeroed_columns
from .device import exact_numerics, numerics
from .interventions import (InterventionError, capture, full_logits, in_float64, intervene, replace, replaced_by_bias,
                            skip)

log = logging.getLogger("headwatch.guards")

__all__ = ["GuardError", "compare", "GuardRecords", "nothing_patched", "everything_patched",
           "clean_to_clean", "batched_vs_loop", "MEAN_BIAS_RTOL", "guard_against_reference", "guard_restore",
           "guard_batched", "guard_hook_vs_weights", "guard_hook_vs_mean_bias", "AblationGuards", "merge_guards"]


class GuardError(InterventionError):
    """A guard failed: the measurement is not what it claims to be; the rule stops."""


#: Tolerance of the mean-cut guard, relative to the largest |logit| of the intact model on the guard
#: sequences: max |Δlogit| between the hook and the bias form ≤ MEAN_BIAS_RTOL × max |logit|. The
#: two are equal in exact arithmetic and add the same terms in another order, so the guard compares
#: them with the model in float64 (interventions.in_float64), where that rounding is ~1e-16
#: relative. In float32 it was not a bound that holds on every CPU: SmolLM2-135M's difference was
#: 2.3e-4 = 6.1e-6 × max |logit| 37.5 on one AMD EPYC, 7.4e-4 on an Intel Xeon and 1.44e-3 on
#: another AMD EPYC (over a float32 bound of 3e-5 × 37.5 = 1.1e-3), while a mean off by 1 % moves
#: the logits by 7e-3 … 0.69. In float64: 0 on SmolLM2 (the same cut moves the logits by 0.70
#: when its mean is off by 1 %), ≤ 9e-16 relative on the tiny test models of every family.
MEAN_BIAS_RTOL = 1e-9


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


# ------------------------------------------------------------------ cutting heads (§5)
def _max_diff(a, b) -> float:
    if isinstance(a, list):
        return max(_max_diff(x, y) for x, y in zip(a, b))
    return float((a - b).abs().max())


def _equal(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(torch.equal(a, b))


def _figures(a, b) -> torch.Tensor:
    """[max |a - b|, 1.0 if a equals b else 0.0] (float64, on a's device: nothing is read)."""
    if isinstance(a, list):
        parts = torch.stack([_figures(x, y) for x, y in zip(a, b)])
        return torch.stack([parts[:, 0].max(), parts[:, 1].min()])
    return torch.stack([(a - b).abs().max().double(), (a == b).all().double()])


def _shape(a) -> list:
    return [list(x.shape) for x in a] if isinstance(a, list) else list(a.shape)


@torch.no_grad()
def guard_against_reference(model, adapter: Adapter, ids, cases: Sequence[tuple[dict, list, Callable]],
                            tolerance: float, batch: int = 64, what: str = "hook vs reference") -> dict:
    """Guard 1 (protocol §5): for each case ``(label, edits, reference)``, the FULL logits (every
    sequence of ``ids``, every position and vocabulary entry) under :func:`intervene` ``(edits)``
    against those under the context ``reference()`` (a weight-level equivalent). ``label`` names
    the case (it holds ``layer``). Raises GuardError if any max |Δ| > ``tolerance``."""
    figures, hooked = [], None
    for label, edits, reference in cases:      # the logits stay on the device; one read after the loop
        with intervene(adapter, edits):
            hooked = full_logits(model, ids, batch, adapter, on_device=True)
        with reference():
            ref = full_logits(model, ids, batch, adapter, on_device=True)
        figures.append(_figures(hooked, ref))
    read = torch.stack(figures).cpu().tolist() if figures else []
    per = [dict(**label, max_abs_diff=d, identical=e == 1.0) for (label, _, _), (d, e) in zip(cases, read)]
    if not per:
        raise GuardError(f"{what}: no case to compare")
    worst = max(p["max_abs_diff"] for p in per)
    record = dict(compared="full logits: every sequence, position and vocabulary entry",
                  logits_shape=_shape(hooked), n_cuts=len(per),
                  layers_covered=sorted({p["layer"] for p in per}),
                  max_abs_diff=worst, all_identical=all(p["identical"] for p in per),
                  tolerance=tolerance, passed=bool(worst <= tolerance), per_head=per)
    if not record["passed"]:
        raise GuardError(f"{what}: max |Δlogit| = {worst:g} > {tolerance:g} "
                         f"({[p for p in per if p['max_abs_diff'] > tolerance]})")
    return record


@torch.no_grad()
def guard_restore(model, ids, intact, batch: int = 64, adapter: Adapter | None = None) -> dict:
    """Guard 2: the logits now (all hooks removed) are identical (torch.equal) to ``intact``."""
    now = full_logits(model, ids, batch, adapter)
    identical = _equal(now, intact)
    diff = _max_diff(now, intact)
    record = dict(compared="full logits before any cut vs after every hook was removed",
                  logits_shape=_shape(now), identical=identical, max_abs_diff=diff,
                  passed=identical)
    if not identical:
        raise GuardError(f"the model did not come back intact after the cuts: max |Δlogit| = {diff:g}")
    return record


def guard_batched(batched: torch.Tensor, looped: torch.Tensor, tolerance: float, what: str) -> dict:
    """Guard 3: edits batched per row equal the one-at-a-time loop to ``tolerance`` (max |Δ|)."""
    if batched.shape != looped.shape:
        raise GuardError(f"{what}: batched shape {tuple(batched.shape)} vs loop {tuple(looped.shape)}")
    diff = float((batched.double() - looped.double()).abs().max()) if batched.numel() else 0.0
    record = dict(compared=what, n_values=int(batched.numel()), max_abs_diff=diff,
                  tolerance=tolerance, passed=bool(diff <= tolerance))
    if not record["passed"]:
        raise GuardError(f"{what}: batched cuts differ from one-at-a-time by {diff:g} > {tolerance:g}")
    return record


@torch.no_grad()
@exact_numerics()
def guard_hook_vs_weights(model, adapter: Adapter, ids: torch.Tensor,
                          heads: Iterable[Sequence[int]], tolerance: float = 0.0,
                          batch: int = 64) -> dict:
    """Guard 1 for zero cuts (protocol §5): for each head, the FULL logits tensor (every position,
    every vocabulary entry, every sequence of ``ids``) with the hook cut vs with the head's
    output-projection weight entries zeroed. Raises GuardError if any max |Δ| > tolerance.
    """
    cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)]),
              lambda l=l, h=h: zeroed_columns(adapter, [(l, h)]))
             for l, h in normalize_heads(adapter, heads)]
    return guard_against_reference(model, adapter, ids, cases, tolerance, batch,
                                   "hook cut differs from zeroed weight columns")


@torch.no_grad()
@exact_numerics()
def guard_hook_vs_mean_bias(model, adapter: Adapter, ids, heads: Iterable[Sequence[int]],
                            means: torch.Tensor, rtol: float = MEAN_BIAS_RTOL, batch: int = 64) -> dict:
    """Guard 1 for mean cuts: "hook vs zeroed weights" is defined only for zero cuts. A mean cut
    replaces ``z_h`` by ``m``; its weight-level form is Wo's columns of ``h`` zeroed and
    ``Wo[:, h] · m`` added as a bias (:func:`headwatch.interventions.replaced_by_bias`). The FULL
    logits of both, per head; raises GuardError if any max |Δ| > ``rtol`` × the largest |logit|
    of the intact model on ``ids`` (the record holds both)."""
    intact = full_logits(model, ids, batch, adapter)
    scale = max(float(x.abs().max()) for x in (intact if isinstance(intact, list) else [intact]))
    means = means.to(torch.float64)
    with in_float64(model):
        cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)], means),
                  lambda l=l, h=h: replaced_by_bias(adapter, [(l, h, means[l, h])]))
                 for l, h in normalize_heads(adapter, heads)]
        rec = guard_against_reference(model, adapter, ids, cases, rtol * scale, batch,
                                      "mean cut by hook differs from its bias form")
    rec.update(compared=rec["compared"] + "; mean cut by hook vs Wo's columns zeroed plus Wo[:, h] · mean "
               "as a bias, both with the model in float64", rtol=rtol, max_abs_logit=scale)
    return rec


class AblationGuards:
    """The guards of protocol §5 for one rule; :meth:`record` is its guards JSON.

    Created before any cut: holds the intact full logits of ``guard_ids`` (a LongTensor
    ``[N, T]`` or a list of them, e.g. phrases of different lengths).
    """

    def __init__(self, model, adapter: Adapter, guard_ids: torch.Tensor, batch: int = 64):
        self.model, self.adapter, self.ids, self.batch = model, adapter, guard_ids, batch
        self.intact = full_logits(model, guard_ids, batch, adapter)
        self.records: dict = {}
        self.batched: list[dict] = []

    def hook_vs_weights(self, extra_heads: Sequence[Head] = (), tolerance: float = 0.0) -> dict:
        """Guard 1 for zero cuts on one head per layer plus ``extra_heads`` (those the experiment cuts)."""
        heads = list(dict.fromkeys(heads_one_per_layer(self.adapter) + list(extra_heads)))
        rec = guard_hook_vs_weights(self.model, self.adapter, self.ids, heads, tolerance, self.batch)
        log.info("guard hook vs zeroed weights: %d cuts, max |Δlogit| = %g over %s logits",
                 rec["n_cuts"], rec["max_abs_diff"], rec["logits_shape"])
        self.records["hook_vs_weights"] = rec
        return rec

    def hook_vs_mean_bias(self, means: torch.Tensor, extra_heads: Sequence[Head] = ()) -> dict:
        """Guard 1 for mean cuts ("zeroed weights" is a zero-cut guard): the hook against Wo's
        columns zeroed plus the mean's projection as a bias, within MEAN_BIAS_RTOL × max |logit|."""
        heads = list(dict.fromkeys(heads_one_per_layer(self.adapter) + list(extra_heads)))
        rec = guard_hook_vs_mean_bias(self.model, self.adapter, self.ids, heads, means,
                                      MEAN_BIAS_RTOL, self.batch)
        log.info("guard mean cut by hook vs its bias form: %d cuts, max |Δlogit| = %g (tolerance %g = "
                 "%g × max |logit| %g)", rec["n_cuts"], rec["max_abs_diff"], rec["tolerance"],
                 MEAN_BIAS_RTOL, rec["max_abs_logit"])
        self.records["hook_vs_mean_bias"] = rec
        return rec

    def hook(self, means: torch.Tensor | None, extra_heads: Sequence[Head], tolerance: float) -> dict:
        """Guard 1 for the cuts an experiment makes: zero cuts (``means`` None) or mean cuts."""
        if means is None:
            return self.hook_vs_weights(extra_heads, tolerance)
        return self.hook_vs_mean_bias(means, extra_heads)

    def batched_vs_loop(self, batched: torch.Tensor, looped: torch.Tensor, tolerance: float, what: str) -> dict:
        """Guard 3: the batched cuts against the one-at-a-time loop (every comparison kept)."""
        rec = guard_batched(batched.cpu(), looped.cpu(), tolerance, what)
        log.info("guard batched vs loop (%s): max |Δ| = %g", what, rec["max_abs_diff"])
        self.batched.append(rec)
        return rec

    def finish(self) -> dict:
        """Guard 2 (model back intact), then the whole record."""
        rec = guard_restore(self.model, self.ids, self.intact, self.batch, self.adapter)
        log.info("guard restore: identical = %s (max |Δlogit| = %g)", rec["identical"], rec["max_abs_diff"])
        self.records["restore"] = rec
        if not self.batched:
            raise GuardError("no batched-vs-loop comparison was run")
        self.records["batched_vs_loop"] = dict(
            max_abs_diff=max(r["max_abs_diff"] for r in self.batched),
            passed=all(r["passed"] for r in self.batched), comparisons=self.batched)
        p = next(self.model.parameters())
        return dict(dtype=str(p.dtype).replace("torch.", ""), device=p.device.type, numerics=numerics(),
                    guard_input_ids_shapes=[list(x.shape) for x in self.ids]
                    if isinstance(self.ids, (list, tuple)) else [list(self.ids.shape)],
                    passed=all(r["passed"] for r in self.records.values()), **self.records)


def merge_guards(records: dict[str, dict]) -> dict:
    """guards.json: every ablation rule's guard record; raises if any of them did not pass."""
    failed = [name for name, rec in records.items() if not rec.get("passed")]
    if failed:
        raise GuardError(f"ablation guards failed in: {failed}")
    summary = {f"{guard}_max_abs_diff": max(r[guard]["max_abs_diff"] for r in records.values() if guard in r)
               for guard in ("hook_vs_weights", "hook_vs_mean_bias") if any(guard in r for r in records.values())}
    summary.update(
        restore_identical=all(r["restore"]["identical"] for r in records.values()),
        batched_vs_loop_max_abs_diff=max(r["batched_vs_loop"]["max_abs_diff"] for r in records.values()))
    return dict(passed=True, **summary, rules=records)


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
