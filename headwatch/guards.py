"""Guards: the comparisons that say a measurement is what it claims, every one in this module.

A *guard* compares two computations that must agree — exactly, or within a stated
tolerance — on the quantity a rule reports or on the full logits behind it. Every guard
here follows one pattern and writes one shape of record:

* it computes both sides itself, from the model and the inputs it is handed, or is handed
  both sides (the batched result a table holds and its plain loop);
* it reports through :func:`compare`, whose **record** is a plain dict that goes into the
  rule's guards JSON as it is: ``guard`` (its name, the name of its function here),
  ``compared`` (what, in words), ``n_cases``, ``max_abs_diff``, ``identical`` (every element
  equal), ``tolerance``, ``passed``, the guard's own facts, and ``cases``: one small dict per
  case, naming it, with its ``shape``, ``max_abs_diff`` and ``identical``;
* when it fails it raises :class:`GuardError`, which stops the rule before any table is
  written. A tolerance of 0 means identical, not merely a max |Δ| of 0.

:class:`GuardRecords` collects a rule's records into its JSON (``passed``, dtype, device,
numerics, each record under its name); :func:`headwatch.tableio.guard_records` lists them.

The guards of cutting heads (protocol §5, :mod:`headwatch.cut`, :mod:`headwatch.ablation`):

* :func:`hook_vs_reference` — the form of guard 1: the FULL logits under an edit against those
  under its weight-level equivalent, each run from the edit's layer up (the blocks below are the
  intact model under both, and their outputs, captured once, stand in for them);
* :func:`hook_vs_weights` — zero cuts: the FULL logits under the hook cut against those with the
  head's output-projection columns zeroed (exactly equal in float32);
* :func:`hook_vs_mean_bias` — mean cuts, for which "zeroed weights" does not exist: the hook
  against Wo's columns zeroed plus ``Wo[:, h] · m`` added as a bias, compared with the model in
  float64 within :data:`MEAN_BIAS_RTOL` × the largest |logit|;
* :func:`restore` — the model back intact (identical logits) after every hook is removed;
* :func:`random_control` — 5a's control: every draw cuts k heads, none of the targeted set;
* :func:`batched_vs_loop` — the batched path against one edit per forward pass (also §5d);
* :class:`AblationGuards` — these for one ablation rule, its guards JSON; :func:`merge_guards` —
  every ablation rule's, refused if one failed.

The guards of activation patching (protocol §5d, :mod:`headwatch.patching`):

* :func:`nothing_patched` — the patch path with nothing patched (the corrupted run's own
  states stood in for the blocks below each layer, as the batched sweep does) gives the
  corrupted run's full logits exactly;
* :func:`everything_patched` — the clean run's output of the last block, every position,
  patched into the corrupted run gives the clean run's full logits exactly;
* :func:`clean_to_clean` — a head's ``z`` from the clean run patched into the same clean run
  changes no logit;
* :func:`batched_vs_loop` — the batched sweep against one patch per forward pass, within a
  tolerance (different batch shapes round differently); also the per-position head sweep run
  through the corrupted run's key/value cache (:mod:`headwatch.patching_cache`);
* :func:`padded_vs_alone` — prompts of different lengths (a pairs file) in one left-padded
  batch give each prompt's logits as when run alone, within a tolerance;
* :func:`qkv_is_z` — a layer's queries, keys and values patched at every position give the
  logits of every head's ``z`` of that layer patched, identically (attention reads nothing else);
* :func:`kv_ungrouped` — a key (value) group patched equals the keys (values) of every query
  head of the group patched in the model's ungrouped twin (:mod:`headwatch.patching_kv`).

The guard of path patching (protocol §5e, :mod:`headwatch.circuits`):

* :func:`path_into_everything` — the path from a sender into every downstream component at
  once (nothing frozen) equals activation patching of the sender; with
  :func:`batched_vs_loop` (one edge per pair of forward passes).

The anatomy's weight check and key-group cuts (protocol §6) report through :func:`compare` too.

:class:`GuardError` is an :class:`~headwatch.interventions.InterventionError`, so that code
catching an edit that does not fit also catches a failed guard.
"""
from __future__ import annotations

import logging
import math
from typing import Callable, Iterable, Sequence

import torch

from .arch import Adapter, Head
from .cut import cut_edits, heads_one_per_layer, intact_states, normalize_heads, zeroed_columns
from .device import exact_numerics, numerics
from .interventions import (InterventionError, at_least_float32, capture, full_logits, in_float64, intervene, replace,
                            replaced_by_bias, skip)
from .tableio import guard_records

log = logging.getLogger("headwatch.guards")

__all__ = ["GuardError", "MEAN_BIAS_RTOL", "compare", "GuardRecords", "batched_vs_loop",
           "hook_vs_reference", "hook_vs_weights", "hook_vs_mean_bias", "restore", "random_control", "AblationGuards",
           "merge_guards",
           "nothing_patched", "everything_patched", "clean_to_clean", "padded_vs_alone", "qkv_is_z",
           "kv_ungrouped", "path_into_everything"]


class GuardError(InterventionError):
    """A guard failed: the measurement is not what it claims to be; the rule stops."""


#: Tolerance of the mean-cut guard, relative to the largest |logit| of the intact model on the guard
#: sequences: max |Δlogit| between the hook and the bias form ≤ MEAN_BIAS_RTOL × max |logit|. The
#: two are equal in exact arithmetic and add the same terms in another order, so the guard compares
#: them with the model in float64 (interventions.in_float64), where that rounding is ~1e-16
#: relative. In float32 it was not a bound that holds on every CPU: SmolLM2-135M's difference was
#: 2.3e-4 = 6.1e-6 × max |logit| 37.5 on one AMD EPYC, 7.4e-4 on an Intel Xeon and 1.44e-3 on
#: another AMD EPYC (over a float32 bound of 3e-5 × 37.5 = 1.1e-3), while a mean off by 1 % moves
#: the logits by 7e-3 … 0.69. In float64 (RMSNorms and softmax included: before they were, one
#: flipped float32 rounding inside a norm moved SmolLM2's logits by 1.2e-5 for one head of 38):
#: ≤ 1.8e-13 on SmolLM2 (the same cut moves the logits by 0.70 when its mean is off by 1 %),
#: ≤ 9e-16 relative on the tiny test models of every family.
MEAN_BIAS_RTOL = 1e-9

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


# ------------------------------------------------------------------ cutting heads (§5)
def _largest(logits: Compared) -> float:
    return max(float(x.abs().max()) for x in (logits if isinstance(logits, (list, tuple)) else [logits]))


def _states(adapter: Adapter, ids: Compared, batch: int) -> tuple:
    """:func:`headwatch.cut.intact_states` of ``ids`` with every logit: (logits, block outputs), or
    for a list of inputs (a list of logits, a list of block outputs)."""
    if isinstance(ids, (list, tuple)):
        both = [_states(adapter, x, batch) for x in ids]
        return [at_least_float32(b[0]) for b in both], [b[1] for b in both]
    logits, hidden = intact_states(adapter, ids, batch, keep=0)
    return at_least_float32(logits), hidden


def _logits_from(adapter: Adapter, ids: Compared, hidden, layer: int, batch: int, edits=()) -> Compared:
    """The full logits of ``ids`` under ``edits`` with blocks ``0 .. layer-1`` not run: their
    intact outputs (``hidden``, :func:`_states`) stand in for them (a ``skip`` edit)."""
    if isinstance(ids, (list, tuple)):
        return [_logits_from(adapter, x, h, layer, batch, edits) for x, h in zip(ids, hidden)]
    ids = ids.to(hidden[0].device)
    out = []
    for i in range(0, len(ids), batch):
        below = [skip(layer - 1, hidden[layer - 1][i:i + batch])] if layer > 0 else []
        with intervene(adapter, list(edits) + below):
            out.append(at_least_float32(adapter.logits(ids[i:i + batch])))
    return torch.cat(out)


@torch.no_grad()
def hook_vs_reference(guard: str, adapter: Adapter, ids: Compared, cases: Sequence[tuple[dict, list, Callable]],
                      tolerance: float, compared: str, batch: int = 64, hidden=None, **facts) -> dict:
    """Guard 1's form (protocol §5): for each case ``(label, edits, reference)``, the FULL logits
    (every sequence of ``ids``, every position and vocabulary entry) under :func:`intervene`
    ``(edits)`` against those under the context ``reference()``, a weight-level equivalent.
    ``label`` holds the edit's ``layer``: both sides run from that layer up on the intact
    model's outputs of the blocks below (``hidden``, :func:`headwatch.cut.intact_states`;
    computed here when None), which neither form changes — the blocks below are not run twice
    per case."""
    if hidden is None:
        hidden = _states(adapter, ids, batch)[1]

    def pairs():
        for label, edits, reference in cases:
            hooked = _logits_from(adapter, ids, hidden, label["layer"], batch, edits)
            with reference():
                ref = _logits_from(adapter, ids, hidden, label["layer"], batch)
            yield label, hooked, ref

    return compare(guard, pairs(), tolerance, compared + "; each edit run from its layer up on the intact "
                   "model's outputs of the blocks below", layers_covered=sorted({c[0]["layer"] for c in cases}),
                   **facts)


@torch.no_grad()
@exact_numerics()
def hook_vs_weights(model, adapter: Adapter, ids: Compared, heads: Iterable[Sequence[int]], tolerance: float = 0.0,
                    batch: int = 64, hidden=None) -> dict:
    """Guard 1 for zero cuts (protocol §5): for each head, the FULL logits (every position, every
    vocabulary entry, every sequence of ``ids``) with the hook cut vs with the head's
    output-projection weight entries zeroed (:func:`hook_vs_reference`; ``hidden``: the intact
    model's block outputs on ``ids``, when at hand)."""
    cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)]), lambda l=l, h=h: zeroed_columns(adapter, [(l, h)]))
             for l, h in normalize_heads(adapter, heads)]
    return hook_vs_reference("hook_vs_weights", adapter, ids, cases, tolerance, "full logits: hook cut vs zeroed "
                             "Wo columns, every sequence, position and vocabulary entry", batch, hidden)


@torch.no_grad()
@exact_numerics()
def hook_vs_mean_bias(model, adapter: Adapter, ids: Compared, heads: Iterable[Sequence[int]], means: torch.Tensor,
                      rtol: float = MEAN_BIAS_RTOL, batch: int = 64, scale: float | None = None) -> dict:
    """Guard 1 for mean cuts: "hook vs zeroed weights" is defined only for zero cuts. A mean cut
    replaces ``z_h`` by ``m``; its weight-level form is Wo's columns of ``h`` zeroed and
    ``Wo[:, h] · m`` added as a bias (:func:`headwatch.interventions.replaced_by_bias`). The FULL
    logits of both, per head, with the model in float64 (:func:`hook_vs_reference`); passed within
    ``rtol`` × the largest |logit| of the intact model on ``ids`` (``scale``, computed here when
    None; the record holds both)."""
    if scale is None:
        scale = _largest(full_logits(model, ids, batch, adapter))
    means = means.to(torch.float64)
    heads = normalize_heads(adapter, heads)
    with in_float64(adapter):
        cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)], means),
                  lambda l=l, h=h: replaced_by_bias(adapter, [(l, h, means[l, h])]))
                 for l, h in heads]
        return hook_vs_reference("hook_vs_mean_bias", adapter, ids, cases, rtol * scale,
                                 "full logits: mean cut by hook vs Wo's columns zeroed plus Wo[:, h] · mean as a "
                                 "bias, both with the model in float64", batch, rtol=rtol, max_abs_logit=scale)


@torch.no_grad()
def restore(model, ids: Compared, intact: Compared, batch: int = 64, adapter: Adapter | None = None) -> dict:
    """Guard 2: the full logits now (every hook removed, every block run) identical to ``intact``,
    those computed before the first cut."""
    return compare("restore", [(dict(), full_logits(model, ids, batch, adapter), intact)], 0.0,
                   "full logits before any cut vs after every hook was removed")


def random_control(targeted: Sequence[Head], draws: dict[int, Sequence[Sequence[Head]]]) -> dict:
    """§5a's control (``draws``: k → the random cut sets of that k): every draw cuts k distinct
    heads, as many as the targeted cut, and none of the ``targeted`` set."""
    targeted = set(map(tuple, targeted))

    def pairs():
        for k, sets in draws.items():
            sizes = torch.tensor([len(set(map(tuple, s))) for s in sets])
            yield dict(k=k, counted="distinct heads each draw cuts vs k"), sizes, torch.full_like(sizes, k)
            shared = torch.tensor([len(set(map(tuple, s)) & targeted) for s in sets])
            yield dict(k=k, counted="targeted heads in each draw vs none"), shared, torch.zeros_like(shared)

    return compare("random_control", pairs(), 0.0, "the random control of each k: the heads each draw cuts "
                   "(k, as the targeted cut) and the targeted heads among them (none)")


class AblationGuards(GuardRecords):
    """The guards of protocol §5 for one rule; :meth:`finish` is its guards JSON.

    Created before any cut: one forward pass of ``guard_ids`` (a LongTensor ``[N, T]`` or a list
    of them, e.g. phrases of different lengths) keeps the intact full logits (guard 2) and every
    block's output (on which guard 1 runs each cut from its layer up). ``tolerance``: of the
    batched-vs-loop comparisons (``ablation.tolerance``).
    """

    def __init__(self, model, adapter: Adapter, guard_ids: Compared, batch: int = 64, tolerance: float = 1e-5):
        super().__init__()
        self.model, self.adapter, self.ids, self.batch, self.tolerance = model, adapter, guard_ids, batch, tolerance
        with torch.no_grad():
            intact, self.hidden = _states(adapter, guard_ids, batch)
        self.intact = [x.cpu() for x in intact] if isinstance(intact, list) else intact.cpu()
        self.loops: list[tuple[dict, torch.Tensor, torch.Tensor]] = []

    def hook(self, means: torch.Tensor | None, extra_heads: Sequence[Head], tolerance: float) -> dict:
        """Guard 1 on one head per layer plus ``extra_heads`` (those the experiment cuts): zero cuts
        (``means`` None, :func:`hook_vs_weights` within ``tolerance``) or mean cuts
        (:func:`hook_vs_mean_bias`)."""
        heads = list(dict.fromkeys(heads_one_per_layer(self.adapter) + list(extra_heads)))
        if means is None:
            return self.add(hook_vs_weights(self.model, self.adapter, self.ids, heads, tolerance, self.batch,
                                            self.hidden))
        return self.add(hook_vs_mean_bias(self.model, self.adapter, self.ids, heads, means, MEAN_BIAS_RTOL,
                                          self.batch, _largest(self.intact)))

    def loop(self, batched: torch.Tensor, looped: torch.Tensor, what: str) -> None:
        """One batched-vs-loop comparison of the rule (``what``: the quantity, in words): checked at
        once (:class:`GuardError`), recorded with the rule's others in one :func:`batched_vs_loop`
        record by :meth:`finish`."""
        pair = (dict(quantity=what), batched.cpu(), looped.cpu())
        batched_vs_loop([pair], self.tolerance, what)
        self.loops.append(pair)

    def finish(self) -> dict:
        """Guard 2 (the model back intact), the batched-vs-loop record, then the rule's record."""
        self.add(restore(self.model, self.ids, self.intact, self.batch, self.adapter))
        if not self.loops:
            raise GuardError("no batched-vs-loop comparison was run")
        self.add(batched_vs_loop(self.loops, self.tolerance, "the quantity each table reports: the batched cuts "
                                 "vs one cut set per forward pass (each case names its quantity)"))
        shapes = [list(x.shape) for x in self.ids] if isinstance(self.ids, (list, tuple)) else [list(self.ids.shape)]
        return self.record(self.model, guard_input_ids_shapes=shapes)


def merge_guards(records: dict[str, dict]) -> dict:
    """guards.json: every ablation rule's guard record (``rules``) and, per guard, its figures over
    the rules that ran it (``summary``: worst max |Δ|, all identical, cases); raises if a record
    did not pass."""
    failed = [name for name, rec in records.items() if not rec.get("passed")]
    if failed:
        raise GuardError(f"ablation guards failed in: {failed}")
    summary: dict[str, dict] = {}
    for rec in records.values():
        for g in guard_records(rec):
            s = summary.setdefault(g["guard"], dict(max_abs_diff=0.0, identical=True, n_cases=0, rules=0))
            s.update(max_abs_diff=max(s["max_abs_diff"], g["max_abs_diff"]),
                     identical=s["identical"] and g["identical"],
                     n_cases=s["n_cases"] + g["n_cases"], rules=s["rules"] + 1)
    return dict(passed=True, summary=summary, rules=records)


# ------------------------------------------------------------------ activation patching (§5d)
def _rows(ids: torch.Tensor, prompts: Sequence[int]) -> torch.Tensor:
    return ids[torch.as_tensor(list(prompts), dtype=torch.long, device=ids.device)]


def _mask(patcher, prompts: Sequence[int]) -> torch.Tensor | None:
    """The attention mask of ``prompts`` in a left-padded batch (None: nothing padded)."""
    return None if patcher.mask is None else _rows(patcher.mask, prompts)


@torch.no_grad()
def padded_vs_alone(patcher, prompts: Sequence[int], tolerance: float) -> dict:
    """Each of ``prompts`` (indices into the patcher's prompts), clean and corrupted, in the
    left-padded batch the sweep runs (attention mask and position ids, :func:`headwatch.arch.padded_inputs`)
    against the same prompt run alone, without padding: the full logits of its own tokens within
    ``tolerance`` (the batch shapes differ, so the kernels may round differently). Padding without
    the position ids it needs shifts every token of a shorter prompt by the padding's length: on
    GPT-2 (absolute positions) one pad token moved the next-token distribution by 0.9 in total
    variation."""
    if patcher.mask is None:
        raise GuardError("guard padded_vs_alone: the prompts have one length; nothing is padded")
    a = patcher.adapter
    mask = _mask(patcher, prompts)

    def pairs():
        for run in ("clean", "corrupted"):
            ids = _rows(getattr(patcher, run), prompts)
            batch = at_least_float32(a.logits(ids, mask=mask))
            for r, i in enumerate(prompts):
                own = mask[r].bool()
                alone = at_least_float32(a.logits(ids[r, own].unsqueeze(0)))[0]
                yield dict(run=run, prompt=int(i), tokens=int(own.sum()), padding=int((~own).sum())), batch[r, own], alone

    return compare("padded_vs_alone", pairs(), tolerance,
                   "full logits of each prompt's own tokens in the left-padded batch vs the prompt run alone",
                   prompts=len(prompts), width=int(patcher.mask.shape[1]))


@torch.no_grad()
def nothing_patched(patcher, prompts: Sequence[int]) -> dict:
    """The corrupted run's full logits (every position and vocabulary entry) with nothing
    patched, through the patch path: for every layer e ≥ 1 the corrupted run's own input to
    block e stood in for blocks 0..e−1 (the ``skip`` the batched sweep uses for the layers below
    its first patch), against a plain forward pass. Identical, or :class:`GuardError`.

    Both sides are computed here, on ``prompts`` (indices into the patcher's prompts), in one
    batch shape, so that the same kernels see the same numbers."""
    a = patcher.adapter
    ids, mask = _rows(patcher.corrupted, prompts), _mask(patcher, prompts)
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
    clean, corrupted = _rows(patcher.clean, prompts), _rows(patcher.corrupted, prompts)
    mask = _mask(patcher, prompts)
    with intervene(a, [capture("resid", last)]) as cap:
        want = a.logits(clean, mask=mask)
    plain = a.logits(corrupted, mask=mask)
    with intervene(a, [replace("resid", last, cap.one(("resid", last, None)))]):
        got = a.logits(corrupted, mask=mask)
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
    the wrong slice, head or prompt would move them. A patch at layer ``l`` leaves the blocks
    below it as they are: the patched run starts at block ``l``, on the clean run's output of
    block ``l-1`` (captured with the unpatched logits), as the batched sweep does."""
    a = patcher.adapter
    clean, mask = _rows(patcher.clean, prompts), _mask(patcher, prompts)
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
    clean, corrupted = _rows(patcher.clean, prompts), _rows(patcher.corrupted, prompts)
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
                 tolerance: float) -> dict:
    """A key/value group patched in the model against the same keys (values) patched head by head
    in its ungrouped twin (``twin``: kv heads = heads, each head's key and value rows its
    group's; :func:`headwatch.patching_kv.ungrouped_twin`): ``cases`` are ``(patch, batched)``
    with ``patch`` a ``k`` or ``v`` patch of one group and ``batched`` the sweep's logit
    differences of ``prompts``; the twin's side replaces the site's slice of every query head
    ``heads_of(adapter, group)`` by the twin's clean run, one patch per forward pass from the
    layer up (the twin's corrupted input to it stood in below). Within ``tolerance``: the twin
    computes the same numbers with other matrix shapes (more key and value rows), which may
    round differently."""
    a, d = patcher.adapter, patcher.adapter.head_dim
    clean, corrupted = _rows(patcher.clean, prompts), _rows(patcher.corrupted, prompts)
    io, s = patcher.io[list(prompts)], patcher.s[list(prompts)]
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
                   patcher.logit_diff(logits, io, s))

    return compare("kv_ungrouped", pairs(), tolerance,
                   "logit difference IO - S of every guard prompt: a key/value group patched (the sweep) vs the "
                   "keys/values of each of its query heads patched in the ungrouped twin (kv heads = heads, "
                   "each head's key and value rows its group's)", prompts=len(prompts),
                   twin_kv_heads=twin.n_kv_heads)


# ------------------------------------------------------------------ path patching (§5e)
@torch.no_grad()
def path_into_everything(paths, senders: Sequence[tuple[int, int]], prompts: Sequence[int], tolerance: float) -> dict:
    """The path from each sender into every component downstream of it at once — nothing frozen,
    the receiver the last block's output (:meth:`headwatch.circuits.PathPatcher.into_everything`)
    — against activation patching of the sender (the head sweep's
    :meth:`headwatch.patching.Patcher.run` of its z), each prompt's logit difference, within
    ``tolerance``: a freeze that reaches the unfrozen run, a sender patched into the wrong slot or
    a pass that reads another prompt's values moves it."""
    from .patching import Patch
    got = paths.into_everything(senders, prompts)
    want = paths.patcher.run([Patch("z", l, h) for l, h in senders], prompts)
    return compare("path_into_everything", [(dict(layer=l, head=h), g, w) for (l, h), g, w in zip(senders, got, want)],
                   tolerance, "logit difference IO - S of each guard prompt: the path from the sender into every "
                   "downstream component (nothing frozen) vs activation patching of the sender",
                   prompts=len(prompts))
