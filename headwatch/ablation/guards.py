"""The guards of cutting heads (protocol §5, :mod:`headwatch.ablation.cut`,
:mod:`headwatch.ablation.experiments`), each reporting through :func:`headwatch.guards.compare`:

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
* :func:`headwatch.guards.batched_vs_loop` — the batched path against one edit per forward pass;
* :class:`AblationGuards` — these for one ablation rule, its guards JSON; :func:`merge_guards` —
  every ablation rule's, refused if one failed.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ..guards import Compared, GuardError, GuardRecords, batched_vs_loop, compare
from ..model.arch import Adapter, Head
from ..model.device import exact_numerics
from ..model.interventions import at_least_float32, full_logits, in_float64, intervene, replaced_by_bias, skip
from ..tableio import guard_records
from .cut import cut_edits, heads_one_per_layer, intact_states, normalize_heads, zeroed_columns


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
