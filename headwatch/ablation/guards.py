"""The guards of cutting heads (protocol §5, :mod:`headwatch.ablation.cut`,
:mod:`headwatch.ablation.experiments`), each reporting through :func:`headwatch.guards.compare`:

* :func:`hook_vs_reference` — the form of guard 1: the FULL logits under an edit against those
  under its weight-level equivalent, each run from the edit's layer up (the blocks below are the
  intact model under both, and their outputs, captured once, stand in for them);
* :func:`hook_vs_weights` — zero cuts: the FULL logits under the hook cut against those with the
  head's output-projection columns zeroed (exactly equal in float32);
* :func:`hook_vs_mean_bias` — mean cuts, for which "zeroed weights" does not exist: the hook
  against Wo's columns zeroed plus ``Wo[:, h] · m`` added as a bias, compared with the model in
  float64 within the bound of float64 rounding (:class:`headwatch.guards.Rounding`, u = 2^-53);
* :func:`restore` — the model back intact (identical logits) after every hook is removed;
* :func:`random_control` — 5a's control: every draw cuts k heads, none of the targeted set;
* :func:`headwatch.guards.batched_vs_loop` — the batched path against one edit per forward pass,
  within the bound of float32 rounding of each quantity's numbers (the logits for losses and
  probabilities; the attention scores, :func:`score_size`, for induction scores);
* :class:`AblationGuards` — these for one ablation rule, its guards JSON; :func:`merge_guards` —
  every ablation rule's, refused if one failed.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..guards import Compared, GuardError, GuardRecords, Rounding, batched_vs_loop, compare, rounding
from ..model.arch import Adapter, Head
from ..model.device import exact_numerics
from ..model.interventions import (at_least_float32, capture, full_logits, in_float64, intervene, replaced_by_bias,
                                   skip)
from ..model.recompute import score_size as head_score_size
from ..tableio import guard_records
from .cut import cut_edits, heads_one_per_layer, intact_states, normalize_heads, zeroed_columns


#: The mean-cut guard compares the hook with its bias form with the model in float64
#: (interventions.in_float64): the two are equal in exact arithmetic and add the same terms in another
#: order, and float64 rounding (u = 2^-53) of numbers this size is far below what a wrong mean moves. In
#: float32 no bound held on every CPU: SmolLM2-135M's difference was 2.3e-4 = 6.1e-6 × max |logit| 37.5
#: on one AMD EPYC, 7.4e-4 on an Intel Xeon and 1.44e-3 on another AMD EPYC, since transformers' RMSNorms
#: and eager softmax round to float32 inside (one flipped float32 rounding in a norm moved SmolLM2's
#: logits by 1.2e-5 for one head of 38), while a mean off by 1 % moves the logits by 7e-3 … 0.69. In
#: float64: ≤ 1.8e-13 on SmolLM2 (the same cut moves the logits by 0.70 when its mean is off by 1 %),
#: ≤ 9e-16 relative on the tiny test models of every family.


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
                      bound: float | Rounding, compared: str, batch: int = 64, hidden=None, **facts) -> dict:
    """Guard 1's form (protocol §5): for each case ``(label, edits, reference)``, the FULL logits
    (every sequence of ``ids``, every position and vocabulary entry) under :func:`intervene`
    ``(edits)`` against those under the context ``reference()``, a weight-level equivalent, within
    ``bound`` (0: identical). ``label`` holds the edit's ``layer``: both sides run from that layer up
    on the intact model's outputs of the blocks below (``hidden``, :func:`headwatch.cut.intact_states`;
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

    return compare(guard, pairs(), bound, compared + "; each edit run from its layer up on the intact "
                   "model's outputs of the blocks below", layers_covered=sorted({c[0]["layer"] for c in cases}),
                   **facts)


@torch.no_grad()
@exact_numerics()
def hook_vs_weights(model, adapter: Adapter, ids: Compared, heads: Iterable[Sequence[int]], tolerance: float = 0.0,
                    batch: int = 64, hidden=None) -> dict:
    """Guard 1 for zero cuts (protocol §5): for each head, the FULL logits (every position, every
    vocabulary entry, every sequence of ``ids``) with the hook cut vs with the head's
    output-projection weight entries zeroed (:func:`hook_vs_reference`; ``hidden``: the intact
    model's block outputs on ``ids``, when at hand): identical (``tolerance`` 0, ``ablation.hook_tolerance``:
    every product involved is 0 on both sides, so no rounding differs)."""
    cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)]), lambda l=l, h=h: zeroed_columns(adapter, [(l, h)]))
             for l, h in normalize_heads(adapter, heads)]
    return hook_vs_reference("hook_vs_weights", adapter, ids, cases, tolerance, "full logits: hook cut vs zeroed "
                             "Wo columns, every sequence, position and vocabulary entry", batch, hidden)


@torch.no_grad()
@exact_numerics()
def hook_vs_mean_bias(model, adapter: Adapter, ids: Compared, heads: Iterable[Sequence[int]], means: torch.Tensor,
                      rounding_factor: float = 1.0, batch: int = 64, scale: float | None = None) -> dict:
    """Guard 1 for mean cuts: "hook vs zeroed weights" is defined only for zero cuts. A mean cut
    replaces ``z_h`` by ``m``; its weight-level form is Wo's columns of ``h`` zeroed and
    ``Wo[:, h] · m`` added as a bias (:func:`headwatch.interventions.replaced_by_bias`). The FULL
    logits of both, per head, with the model in float64 (:func:`hook_vs_reference`); passed within
    the bound of float64 rounding (:func:`headwatch.guards.rounding`: u = 2^-53, its magnitude the largest
    |logit| of the intact model on ``ids``, ``scale``, computed here when None)."""
    if scale is None:
        scale = _largest(full_logits(model, ids, batch, adapter))
    means = means.to(torch.float64)
    heads = normalize_heads(adapter, heads)
    with in_float64(adapter):
        cases = [(dict(layer=l, head=h), cut_edits(adapter, [(l, h)], means),
                  lambda l=l, h=h: replaced_by_bias(adapter, [(l, h, means[l, h])]))
                 for l, h in heads]
        return hook_vs_reference("hook_vs_mean_bias", adapter, ids, cases, rounding(adapter, rounding_factor, scale),
                                 "full logits: mean cut by hook vs Wo's columns zeroed plus Wo[:, h] · mean as a "
                                 "bias, both with the model in float64", batch)


@torch.no_grad()
def score_size(adapter: Adapter, ids: Compared, batch: int = 64) -> float:
    """The size of the intact model's attention scores on ``ids``: the largest |q|·|k|·scale of any
    head and layer (:func:`headwatch.model.recompute.score_size`), the magnitude of a bound on
    attention weights (induction scores)."""
    if isinstance(ids, (list, tuple)):
        return max(score_size(adapter, x, batch) for x in ids)
    L, out = adapter.n_layers, 0.0
    for i in range(0, len(ids), batch):
        with intervene(adapter, [capture(site, l) for site in ("q", "k") for l in range(L)]) as cap:
            adapter.run_body(ids[i:i + batch].to(adapter.device))
        for l in range(L):       # a captured site holds its units one after another, head_dim each
            q, k = (cap.one((site, l, None)).double().unflatten(-1, (-1, adapter.head_dim)).transpose(-3, -2)
                    for site in ("q", "k"))
            out = max(out, float(head_score_size(adapter, l, q, k).max()))
    return out


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
    block's output (on which guard 1 runs each cut from its layer up). ``rounding_factor``: of the
    bounds derived from rounding (``ablation.rounding_factor``); ``step``: the call's progress
    (:func:`headwatch.jobs.phases`), each guard a phase of it.
    """

    def __init__(self, model, adapter: Adapter, guard_ids: Compared, batch: int = 64, rounding_factor: float = 1.0,
                 step=None):
        super().__init__(step)
        self.model, self.adapter, self.ids, self.batch = model, adapter, guard_ids, batch
        self.rounding_factor = rounding_factor
        with torch.no_grad():
            intact, self.hidden = _states(adapter, guard_ids, batch)
        self.intact = [x.cpu() for x in intact] if isinstance(intact, list) else intact.cpu()
        self.loops: list[tuple[dict, torch.Tensor, torch.Tensor]] = []
        self.bounds: dict[str, Rounding] = {}

    def hook(self, means: torch.Tensor | None, extra_heads: Sequence[Head], tolerance: float) -> dict | None:
        """Guard 1 on one head per layer plus ``extra_heads`` (those the experiment cuts): zero cuts
        (``means`` None, :func:`hook_vs_weights`, identical: ``tolerance`` 0) or mean cuts
        (:func:`hook_vs_mean_bias`)."""
        heads = list(dict.fromkeys(heads_one_per_layer(self.adapter) + list(extra_heads)))
        if means is None:
            return self.check(hook_vs_weights, self.model, self.adapter, self.ids, heads, tolerance, self.batch,
                              self.hidden)
        return self.check(hook_vs_mean_bias, self.model, self.adapter, self.ids, heads, means,
                          self.rounding_factor, self.batch, _largest(self.intact))

    def loop(self, batched: torch.Tensor, looped: torch.Tensor, what: str, attention: bool = False) -> None:
        """One batched-vs-loop comparison of the rule (``what``: the quantity, in words), recorded with
        the rule's others in one :func:`batched_vs_loop` record by :meth:`finish`. Its bound: rounding
        of the logits (losses, probabilities), or with ``attention`` of the attention scores
        (:func:`score_size`: induction scores)."""
        if attention:
            size, of = score_size(self.adapter, self.ids, self.batch), "largest |q|·|k|·scale"
        else:
            size, of = _largest(self.intact), "largest |logit|"
        self.bounds[what] = rounding(self.adapter, self.rounding_factor, size, of=of)
        self.loops.append((dict(quantity=what), batched.cpu(), looped.cpu()))

    def finish(self, tables: dict | None = None, note: dict | None = None) -> dict:
        """Guard 2 (the model back intact), the batched-vs-loop record, then the rule's record: a
        failed guard raises here, carrying ``tables`` (the rule's, by name) and ``note``."""
        self.check(restore, self.model, self.ids, self.intact, self.batch, self.adapter)
        if not self.loops:
            raise GuardError("no batched-vs-loop comparison was run")
        with self.guard("batched_vs_loop"):
            self.add(batched_vs_loop(self.loops, lambda case: self.bounds[case["quantity"]], "the quantity each table "
                                     "reports: the batched cuts vs one cut set per forward pass (each case names its "
                                     "quantity)"))
        shapes = [list(x.shape) for x in self.ids] if isinstance(self.ids, (list, tuple)) else [list(self.ids.shape)]
        return self.record(self.model, tables, note, guard_input_ids_shapes=shapes)


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
