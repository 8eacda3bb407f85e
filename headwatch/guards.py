"""Guards: the comparisons that say a measurement is what it claims, and the one shape of record.

A *guard* compares two computations that must agree — exactly, or within a bound derived from
float32 rounding (:class:`Rounding`) — on the quantity a rule reports or on the full logits behind
it. Every guard follows one pattern and writes one shape of record:

* it computes both sides itself, from the model and the inputs it is handed, or is handed
  both sides (the batched result a table holds and its plain loop);
* it reports through :func:`compare`, whose **record** is a plain dict that goes into the
  rule's guards JSON as it is: ``guard`` (its name, the name of its function),
  ``compared`` (what, in words), ``n_cases``, ``max_abs_diff``, ``identical`` (every element
  equal), ``bound`` (0: identical), ``ratio`` (max |Δ| / bound), ``rounding`` (how the bound was
  derived: factor, dtype, unit roundoff, magnitude, depth, terms), ``passed``, the guard's own
  facts, and ``cases``: one small dict per case, naming it, with its ``shape``, ``max_abs_diff``
  and ``identical``;
* when it fails it raises :class:`GuardError`, its record on ``err.record``. A bound of 0 means
  identical, not merely a max |Δ| of 0.

**The bound** of a guard whose two sides are equal in real arithmetic but sum in other orders
(other batch shapes, a cache, the ungrouped twin's wider matrices) follows from the arithmetic:

    bound = factor × u × magnitude × depth × √terms

``u`` is the unit roundoff of the dtype computed in (2^-24 in float32; 2^-53 in float64 under
:func:`headwatch.model.interventions.in_float64`; 2^-8 in bfloat16: :func:`computed_in`),
``magnitude`` the largest |number| the compared quantity is computed from (the largest |logit|; for
an attention map, the largest |attention score|), ``depth`` the matrix products chained one after
another (a model's blocks and its unembedding: layers + 1) and ``terms`` the longest sum in one of
them (the widest input of a block's matrices, :func:`longest_sum`). A sum of K terms of size m
rounded in another order moves by about √K · u · m (the probabilistic rounding bound, Higham and
Mary 2019); each block adds its result to the residual stream, so the differences of the chained
products add up. ``factor`` (1 in the config: ``patching.rounding_factor``, ``ablation.``…,
``edges.``…, ``anatomy.weight_check_rounding_factor``) is the only number a user sets; a wrong
patch, cut or cache moves the compared numbers by hundreds of times the bound
(tests/test_guard_bounds.py).

:class:`GuardRecords` collects a rule's records into its JSON (``passed``, dtype, device,
numerics, each record under its name), each guard a named phase of the call's progress
(:func:`headwatch.jobs.phases`); a failed guard's error waits until the tables are made and then
carries them (:attr:`GuardError.table`). :func:`headwatch.tableio.guard_records` lists the
records. :func:`batched_vs_loop` — a batched path against one edit per forward pass — is every
stage's.

Each stage keeps its own guards beside its code, all reporting through :func:`compare`:

* cutting heads (protocol §5): :mod:`headwatch.ablation.guards` (the hook against the weights,
  mean cuts against a bias, the model restored, the random control; :func:`merge_guards
  <headwatch.ablation.guards.merge_guards>`);
* activation and path patching (§5d, §5e): :mod:`headwatch.patching.guards` (nothing patched,
  everything patched, clean to clean, padded against alone, q/k/v against z, a key/value group
  against its ungrouped twin, a path into everything against activation patching);
* edge circuits (§5g): :mod:`headwatch.circuits.faithfulness`;
* the anatomy's weight check and key-group cuts (§6): :mod:`headwatch.anatomy`.

:class:`GuardError` is an :class:`~headwatch.model.interventions.InterventionError`, so that code
catching an edit that does not fit also catches a failed guard.
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import torch

from .jobs import progress
from .model.device import numerics
from .model.interventions import InterventionError, computed_in
from .tableio import with_attrs

log = logging.getLogger("headwatch.guards")

__all__ = ["GuardError", "Compared", "Rounding", "rounding", "unit_roundoff", "longest_sum", "compare",
           "GuardRecords", "batched_vs_loop"]

FLOAT64_HINT = ("to tell rounding from a wrong computation, run the call again with the model in float64: "
                "`from headwatch.model.interventions import in_float64`, then `with in_float64(m.adapter): ...` "
                "(every step in float64, the bound with it about 1e9 times smaller; or load it so, "
                "hw.load_model(..., dtype='float64'), its norms and softmax still in float32): a rounding difference "
                "shrinks as much, a wrong computation stays as large")
"""What a failed guard's message says to do (:class:`GuardError`)."""


class GuardError(InterventionError):
    """What a failed guard raises: two ways of computing one result disagreed by more than rounding of
    numbers that size can explain (the message says by how much, relative to the bound and to the
    numbers' size, and how to tell rounding from a wrong computation), so the result is not what it
    claims to be. A workflow rule stops; the tables the call computed are not lost: ``err.table`` is
    the table the call would have returned (``attrs`` as on a returned one: its note, its guard record
    with the failed guard's, its companion tables; None when a guard failed before any table), and
    ``err.record`` the failed guard's record (its ``bound``, ``ratio``, ``rounding`` and ``cases``). A
    workflow job keeps them beside the failed attempt's log.

    >>> try:
    ...     heads = hw.patch_heads(m, prompts)
    ... except hw.GuardError as err:
    ...     print(err)
    ...     heads, failed = err.table, err.record
    """

    def __init__(self, message: str, record: dict | None = None, guards: dict | None = None,
                 tables: dict | None = None, note: dict | None = None):
        super().__init__(message)
        self.record, self.guards, self.tables, self.note = record, guards, tables, note

    @property
    def table(self):
        """The first of the computed tables, with the note, the guard record and the others on its
        ``attrs`` (:func:`headwatch.tableio.with_attrs`); None when no table was made."""
        if not self.tables:
            return None
        (name, first), *rest = [(k, v) for k, v in self.tables.items() if v is not None]
        return with_attrs(first, self.note, self.guards, **dict(rest))


Compared = torch.Tensor | Sequence[torch.Tensor]
"""One side of a case: a tensor, or a list of tensors (inputs of different lengths, e.g. phrases)."""


# ------------------------------------------------------------------ the bound
def unit_roundoff(dtype: torch.dtype) -> float:
    """u of ``dtype``: half the gap between 1 and the next number (2^-24 for float32)."""
    return float(torch.finfo(dtype).eps) / 2


def longest_sum(adapter) -> int:
    """The most terms one matrix product of a block sums: the widest input of its linear maps (the
    feed-forward's down projection in most families), at least the model's width (the unembedding)."""
    block = adapter.block(0)
    widths = [m.in_features for m in block.modules() if isinstance(m, torch.nn.Linear)]
    widths += [m.weight.shape[0] for m in block.modules() if type(m).__name__ == "Conv1D"]  # GPT-2's [in, out]
    return max(widths + [adapter.width])


@dataclass(frozen=True)
class Rounding:
    """A guard's bound derived from rounding (module doc): ``factor × u × magnitude × depth ×
    √terms``, with ``of`` naming the magnitude (``largest |logit|``)."""
    factor: float
    dtype: str
    magnitude: float
    depth: int
    terms: int
    of: str = "largest |logit|"

    @property
    def unit_roundoff(self) -> float:
        return unit_roundoff(getattr(torch, self.dtype))

    @property
    def growth(self) -> float:
        return self.depth * math.sqrt(self.terms)

    @property
    def bound(self) -> float:
        return self.factor * self.unit_roundoff * self.magnitude * self.growth

    def facts(self) -> dict:
        """The record's ``rounding``: every number of the bound, and the bound in words."""
        return dict(asdict(self), unit_roundoff=self.unit_roundoff, growth=self.growth, formula=self.formula())

    def formula(self) -> str:
        return (f"factor {self.factor:g} × u {self.unit_roundoff:.3g} ({self.dtype}) × {self.of} "
                f"{self.magnitude:.3g} × depth {self.depth} × √{self.terms} terms")


def rounding(adapter, factor: float, magnitude: float, depth: int | None = None, terms: int | None = None,
             of: str = "largest |logit|") -> Rounding:
    """The :class:`Rounding` of a comparison of ``adapter``'s outputs: the dtype it computes in
    (:func:`headwatch.model.interventions.computed_in`), ``depth`` (default: every block and the
    unembedding, layers + 1) and ``terms`` (default: :func:`longest_sum`)."""
    return Rounding(float(factor), str(computed_in(adapter.model)).replace("torch.", ""), float(magnitude),
                    adapter.n_layers + 1 if depth is None else int(depth),
                    longest_sum(adapter) if terms is None else int(terms), of)


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


def _failure(record: dict, nearest: dict, bad: list[dict]) -> str:
    """A failed record in words: how far past the bound, relative to the bound and to the numbers'
    size, and what to do (``nearest``: the case furthest past its bound)."""
    head = f"guard {record['guard']}: {record['compared']}:"
    where = f"in {len(bad)} of {record['n_cases']} cases"
    r = record["rounding"]
    if r is None:
        return (f"{head} max |Δ| = {record['max_abs_diff']:.4g}, not identical {where} (first: {bad[0]}); the two "
                "sides are the same arithmetic on the same numbers, so any difference is a wrong computation")
    size = nearest["max_abs_diff"] / r["magnitude"] if r["magnitude"] else math.inf
    return (f"{head} |Δ| past its bound {where}: |Δ| = {nearest['max_abs_diff']:.4g} > bound {record['bound']:.3g} "
            f"(case {nearest}), {record['ratio']:.3g} × the bound and {size:.2g} × the numbers' size ({r['of']} "
            f"{r['magnitude']:.4g}); the bound, {r['formula']}, is what rounding of numbers this size can do in "
            f"{r['dtype']}; {FLOAT64_HINT}")


def compare(guard: str, pairs: Iterable[tuple[dict, Compared, Compared]], bound, compared: str, **facts) -> dict:
    """The record of ``guard``: every ``(case, got, want)`` of ``pairs`` (``case`` a small dict
    naming it) compared, one pair at a time (nothing is kept but the figures, read from the device
    once at the end). ``bound``: 0 (the two sides must be identical), a :class:`Rounding`, or a function
    of a case giving its :class:`Rounding` (cases whose numbers differ in kind and size; each case
    then records its ``bound``, and the record the bound and rounding of the case nearest its own).
    Passed when every max |got − want| ≤ its bound. Raises :class:`GuardError` (the record on
    ``err.record``) otherwise, or when a pair's shapes differ or there is no pair at all."""
    if not (isinstance(bound, Rounding) or callable(bound) or bound == 0):
        raise ValueError(f"guard {guard}: a bound is 0 (identical) or derived from rounding (a Rounding), "
                         f"not {bound!r}")
    cases, figures, roundings = [], [], []
    for case, got, want in progress(pairs, desc=f"guard {guard}", unit="case"):
        if _shape(got) != _shape(want):
            raise GuardError(f"guard {guard}: {compared}: shapes {_shape(got)} vs {_shape(want)} ({case})")
        roundings.append(bound if isinstance(bound, Rounding) or not callable(bound) else bound(case))
        cases.append(dict(case, shape=_shape(got)))
        figures.append(_figures(got, want))
    if not cases:
        raise GuardError(f"guard {guard}: {compared}: nothing to compare")
    read = torch.stack([f.to(figures[0].device) for f in figures]).cpu().tolist()
    limits = [r.bound if isinstance(r, Rounding) else 0.0 for r in roundings]
    for c, (diff, equal), limit in zip(cases, read, limits):
        c.update(max_abs_diff=diff, identical=equal == 1.0, **(dict(bound=limit) if callable(bound) else {}))
    diffs = [c["max_abs_diff"] for c in cases]
    worst = math.nan if any(math.isnan(d) for d in diffs) else max(diffs)
    identical = all(c["identical"] for c in cases)
    ok = [c["identical"] if limit == 0 else c["max_abs_diff"] <= limit for c, limit in zip(cases, limits)]
    ratios = [math.inf if math.isnan(d) or (limit == 0 and not c["identical"]) else d / limit if limit else 0.0
              for c, d, limit in zip(cases, diffs, limits)]
    nearest = max(range(len(cases)), key=lambda i: (ratios[i], limits[i]))    # the case nearest its bound
    r = roundings[nearest]
    record = dict(guard=guard, compared=compared, n_cases=len(cases), max_abs_diff=worst, identical=identical,
                  bound=limits[nearest], ratio=ratios[nearest] if isinstance(r, Rounding) else None,
                  rounding=r.facts() if isinstance(r, Rounding) else None, passed=all(ok), **facts, cases=cases)
    if not record["passed"]:
        bad = [c for c, good in zip(cases, ok) if not good]
        raise GuardError(_failure(record, cases[nearest], bad), record)
    log.info("guard %s: %d cases, max |Δ| = %g (%s)", guard, len(cases), worst,
             "identical" if record["rounding"] is None else f"{record['ratio']:.3g} × its bound {record['bound']:.3g}")
    return record


class GuardRecords:
    """One rule's guard records, by name; :meth:`record` is the rule's guards JSON. ``step``: the
    call's progress (:func:`headwatch.jobs.phases`), in which each guard run by :meth:`guard` is a
    named phase."""

    def __init__(self, step=None):
        self.guards: dict[str, dict] = {}
        self.failed: list[GuardError] = []
        self.step = step if step is not None else (lambda name: None)

    def add(self, record: dict) -> dict:
        if record["guard"] in self.guards:
            raise GuardError(f"guard {record['guard']} recorded twice")
        self.guards[record["guard"]] = record
        return record

    @contextlib.contextmanager
    def guard(self, name: str):
        """The body runs guard ``name`` (a phase of the call's progress) and adds its record. When it
        fails, its record is added all the same and its error kept: :meth:`record` raises it once the
        call has made its tables, so that the error carries them."""
        self.step(f"guard {name}")
        try:
            yield
        except GuardError as err:
            if err.record is None or err.record["guard"] != name:
                raise
            self.add(err.record)
            self.failed.append(err)

    def check(self, guard, *args, **kwargs) -> dict | None:
        """``guard(*args, **kwargs)`` run as :meth:`guard` of its name; its record (None if it failed)."""
        with self.guard(guard.__name__):
            return self.add(guard(*args, **kwargs))
        return None

    def record(self, model, tables: dict | None = None, note: dict | None = None, **facts) -> dict:
        """Every record, with the dtype, device and numerics the guards ran under and ``facts``. If a
        guard failed: :class:`GuardError` (the first failure's message, the record and ``tables`` — the
        call's tables by name, the one it returns first — with ``note`` on it)."""
        if not self.guards:
            raise GuardError("no guard was run")
        p = next(model.parameters())
        rec = dict(passed=all(r["passed"] for r in self.guards.values()),
                   dtype=str(p.dtype).replace("torch.", ""), device=p.device.type, numerics=numerics(),
                   **facts, **self.guards)
        if self.failed:
            first = self.failed[0]
            more = f" ({len(self.failed) - 1} more guards failed: " \
                   f"{', '.join(e.record['guard'] for e in self.failed[1:])})" if len(self.failed) > 1 else ""
            kept = "; the tables computed are on err.table" if tables else ""
            raise GuardError(f"{first}{more}{kept}", first.record, rec, tables, note)
        return rec


def batched_vs_loop(pairs: Iterable[tuple[dict, Compared, Compared]], bound: float | Rounding, compared: str,
                    **facts) -> dict:
    """The batched path against the plain loop, one edit (a cut set, a patch) per forward pass:
    each ``(case, batched, looped)`` of ``pairs`` — the values a table holds and the same values
    computed one at a time — within ``bound`` (a :class:`Rounding`: batch shapes round differently)."""
    return compare("batched_vs_loop", pairs, bound, compared, **facts)
