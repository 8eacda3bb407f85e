"""Interventions: read or edit named sites of a forward pass, in one context manager.

Every hook headwatch puts on a model is registered here. The sites are the
adapter's (:data:`headwatch.model.arch.SITES`; :func:`headwatch.model.arch.sites_table`
says which module each one is, per family):

* ``z`` — a head's ``head_dim`` slice of the output projection's input;
* ``q`` — a head's slice of the query projection output;
* ``k`` / ``v`` — a key/value group's slice of the key / value projection output;
* ``pattern`` — a head's attention weights ``[batch, T, T]``;
* ``mlp_out`` — what a block's feed-forward network adds to the residual stream ``[batch, T, width]``;
* ``resid`` / ``resid_in`` — a block's output / input ``[batch, T, width]``;
* ``resid_mid`` — the stream the feed-forward network's norm reads; ``mlp_in`` — the network's input
  after that norm ``[batch, T, width]``.

An :class:`Edit` names a site, a layer, a unit (a head for ``z``, ``q`` and
``pattern``, a group for ``k`` and ``v``; ``None`` = the whole site) and an op,
made with :func:`zero`, :func:`scale`, :func:`replace`, :func:`capture`,
:func:`skip`, :func:`stop_grad` or :func:`call`. It applies to every row of the batch or, with ``rows`` (bool
``[batch]``), to those rows only; a replacement may carry its own values per
row (a leading batch dimension). Edits of one site apply in the order listed;
a capture sees the edits listed before it. A capture is detached, except one
made with ``grad=True``: it keeps the site's whole tensor (every unit, every
row) as the forward pass goes on with it, so that
``torch.autograd.grad(metric, captured)`` is the gradient of a metric with
respect to the site (``z``, ``resid`` and ``resid_in``: :data:`GRAD_SITES`;
attribution patching, :mod:`headwatch.patching`; ``q``, ``k`` and ``v`` too, where
the tensor kept is the projection's whole output — the fused QKV output in
GPT-NeoX, GPT-2 and Phi-3 —, whose site slices are ``Adapter.site_slice``'s:
:mod:`headwatch.patching.attribution`). :func:`intervene` applies any list
of edits in every forward pass run inside it::

    with intervene(adapter, [zero("z", 3, unit=1), capture("pattern", 5)]) as cap:
        adapter.logits(ids)
    maps = cap.one(("pattern", 5, None))          # [batch, heads, T, T]

How each site is reached:

* ``z``: a forward pre-hook on the output projection (its input).
* ``q``, ``k``, ``v``: a forward hook on the query / key / value projection
  (the fused QKV module for GPT-NeoX, GPT-2 and Phi-3), before any rotary
  embedding; OLMo 2's queries and keys after its query / key norm, which spans
  every head / group (``Family.site_paths``). An edit of ``q`` moves the
  recomputed pattern too: the stashed query is the edited one.
* ``pattern``: read by a forward hook on the attention module (the weights
  transformers' eager attention returns) or recomputed from the q/k outputs by
  the family's rules (:mod:`headwatch.model.recompute`; families whose kernel returns
  none, ``Family.pattern == "recompute"``).
  Edits act through ``z``, since a head's output is linear in its weights,
  ``z_h = P_h · V_g(h)``: zero → ``z_h = 0``; scale c → ``c · z_h``; replace by
  ``P'`` → ``z_h = P' · V_g(h)`` with ``V`` the value projection's output of the
  same forward pass. A capture of ``pattern`` reads the weights the model
  computed, with the pattern edits listed before it applied.
* ``mlp_out``: a forward hook on the feed-forward network, or on the norm after
  it where the family has one (Gemma 2/3, OLMo 2).
* ``resid``: a forward hook on the block; ``resid_in``: a forward pre-hook.
* ``resid_mid``: a forward pre-hook on the norm in front of the feed-forward network (on the
  network itself where there is none); ``mlp_in``: a forward pre-hook on the network.
* ``call`` (any site but ``pattern``, the whole site): a function of the site's tensor, run in
  every forward pass; what it returns replaces the tensor (None keeps it). For computations that
  read one site to rewrite another in the same pass — the edge graph's rewiring
  (:mod:`headwatch.circuits.edges`) — without registering hooks of their own.
* ``skip`` (``resid`` only): block ``layer`` outputs the given value and
  blocks ``0 .. layer`` are not run — their forward is stood in for while
  inside; nothing may edit or read those layers.
* ``stop_grad`` (``resid`` only): block ``layer``'s output keeps its value, bit for bit,
  but a backward pass reaches the block's input along the residual stream only — what
  the block adds (its attention and feed-forward outputs, every head in it) passes no
  gradient back: the gradient into the block's input is the gradient at its output,
  and every site inside the block gets a gradient of 0. A forward hook on the block with
  its input kept by a pre-hook (after any ``resid_in`` edit). AtP*'s GradDrop
  (:mod:`headwatch.patching.attribution`) drops one layer at a time this way.

:func:`intervene` checks every edit (site, op, address, value) before it
registers anything, and removes every hook and stand-in on exit, also when
the body raises. An edit never modifies a weight.

What the guards (:mod:`headwatch.guards`) compare an edit with is here too, for
every site: :func:`full_logits`, the weight-level references :func:`zeroed_weights`
(a zeroed unit of ``z``, ``pattern``, ``q``, ``k``, ``v`` is the same model as its weight
entries zeroed) and :func:`replaced_by_bias` (``z_h`` replaced by a constant ``m`` is
the same model as Wo's columns of ``h`` zeroed and ``Wo[:, h] · m`` added to the
projection's bias — equal in exact arithmetic, within float rounding in float32).
"""
from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

import torch
from torch import nn

from .arch import Adapter, require_site
from .recompute import pattern as recomputed_pattern
from .recompute import split_heads

__all__ = ["Edit", "Captures", "InterventionError", "OPS", "GRAD_SITES", "zero", "scale", "replace", "capture",
           "skip", "stop_grad", "call", "intervene", "attention_maps", "maps_and_logits", "full_logits", "at_least_float32",
           "zeroed_weights", "replaced_by_bias", "hooks_on", "computed_in"]

_SIDE = {"z": "in", "q": "out", "k": "out", "v": "out", "mlp_out": "out", "resid_mid": "in_kw", "mlp_in": "in_kw"}
"""Which side of its module each site is (a pre-hook on the input, a hook on the output)."""
OPS = ("zero", "scale", "replace", "capture", "skip", "stop_grad", "call")
GRAD_SITES = ("z", "resid", "resid_in", "q", "k", "v")
"""Sites whose module's whole input or output tensor a capture can keep with its gradient (for
``q``, ``k`` and ``v`` the projection's whole output, fused with the others in some families: the
site's units are its ``Adapter.site_slice`` slices)."""


class InterventionError(RuntimeError):
    """An edit that does not fit the forward pass: the intervention is not what it claims to be
    (a failed guard raises its subclass :class:`headwatch.guards.GuardError`)."""


@dataclass(frozen=True, eq=False)
class Edit:
    site: str
    layer: int
    op: str
    unit: int | None = None
    value: Any = None                     # scale: the factor; replace / skip: the new values; call: the function
    rows: torch.Tensor | None = None      # bool [batch]: the rows it applies to (None = all)
    key: Hashable = None                  # capture: where its tensors go
    grad: bool = False                    # capture: keep the tensor in the autograd graph

    @property
    def name(self) -> Hashable:
        return self.key if self.key is not None else (self.site, self.layer, self.unit)

    def where(self) -> str:
        unit = "" if self.unit is None else f", unit {self.unit}"
        return f"{self.op} at {self.site} (layer {self.layer}{unit})"


def zero(site: str, layer: int, unit: int | None = None, rows: torch.Tensor | None = None) -> Edit:
    return Edit(site, int(layer), "zero", unit, None, rows)


def scale(site: str, layer: int, factor, unit: int | None = None, rows: torch.Tensor | None = None) -> Edit:
    return Edit(site, int(layer), "scale", unit, factor, rows)


def replace(site: str, layer: int, value, unit: int | None = None, rows: torch.Tensor | None = None) -> Edit:
    return Edit(site, int(layer), "replace", unit, value, rows)


def capture(site: str, layer: int, unit: int | None = None, rows: torch.Tensor | None = None,
            key: Hashable = None, grad: bool = False) -> Edit:
    """Record the site's tensor in every forward pass (detached), or with ``grad=True`` the
    whole site's tensor itself, still in the autograd graph (``unit`` and ``rows`` None): the
    tensor the forward pass goes on with, so that a gradient can be taken with respect to it."""
    return Edit(site, int(layer), "capture", unit, None, rows, key, grad)


def skip(layer: int, value: torch.Tensor) -> Edit:
    """Block ``layer`` outputs ``value`` ``[batch, T, width]``; blocks 0..layer are not run."""
    return Edit("resid", int(layer), "skip", None, value)


def stop_grad(layer: int) -> Edit:
    """Block ``layer``'s output unchanged, its gradient passed to the block's input along the
    residual stream only: nothing the block adds to the stream passes a gradient back."""
    return Edit("resid", int(layer), "stop_grad")


def call(site: str, layer: int, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> Edit:
    """``fn(x)`` on the whole site's tensor ``x`` in every forward pass (the projection's whole output
    for ``q``, ``k`` and ``v``, fused or not): a tensor it returns replaces ``x`` (same shape; ``x``
    itself is not to be changed in place), None keeps it. Not at ``pattern``."""
    return Edit(site, int(layer), "call", None, fn)


class _ResidualOnly(torch.autograd.Function):
    """``forward(out, inp)`` = a copy of ``out`` (the same numbers); ``backward``: the gradient
    goes to ``inp`` whole and to ``out`` not at all."""

    @staticmethod
    def forward(ctx, out, inp):
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        return None, grad


class Captures(dict):
    """``key`` → the captured tensors, one per forward pass run inside :func:`intervene` (detached,
    but for a capture with ``grad=True``)."""

    def one(self, key: Hashable) -> torch.Tensor:
        got = self[key]
        if len(got) != 1:
            raise InterventionError(f"capture {key!r}: {len(got)} forward passes recorded, expected 1")
        return got[0]

    def cat(self, key: Hashable, dim: int = 0) -> torch.Tensor:
        if not self[key]:
            raise InterventionError(f"capture {key!r}: no forward pass was run")
        return torch.cat(self[key], dim=dim)


# ------------------------------------------------------------------ preconditions
def _require_edit(adapter: Adapter, e: Edit) -> None:
    """TypeError/InterventionError/HeadAddressError unless ``e`` is an edit this model can apply."""
    if not isinstance(e, Edit):
        raise TypeError(f"an intervention is a list of Edit; got {e!r}")
    require_site(e.site)
    if e.op not in OPS:
        raise InterventionError(f"unknown op {e.op!r} ({e.where()}); the ops are {list(OPS)}")
    adapter.require_unit(e.site, e.layer, e.unit)
    if e.rows is not None and (not isinstance(e.rows, torch.Tensor) or e.rows.dtype != torch.bool
                               or e.rows.ndim != 1):
        raise InterventionError(f"{e.where()}: rows must be a 1-D bool tensor (one entry per batch row)")
    if e.op == "scale" and not isinstance(e.value, (int, float, torch.Tensor)):
        raise InterventionError(f"{e.where()}: the scale factor must be a number or a tensor")
    if e.op in ("replace", "skip") and not isinstance(e.value, (int, float, torch.Tensor)):
        raise InterventionError(f"{e.where()}: the replacement must be a number or a tensor")
    if e.op == "call" and (e.site == "pattern" or e.unit is not None or e.rows is not None or not callable(e.value)):
        raise InterventionError(f"{e.where()}: call takes a function of a whole site's tensor (no unit, every "
                                "row; not the pattern)")
    if e.op in ("zero", "capture", "stop_grad") and e.value is not None:
        raise InterventionError(f"{e.where()} takes no value")
    if e.op == "stop_grad" and (e.site != "resid" or e.unit is not None or e.rows is not None):
        raise InterventionError(f"{e.where()}: stop_grad is a resid edit of the whole batch (a block's output)")
    if e.op == "skip" and (e.site != "resid" or e.rows is not None or not isinstance(e.value, torch.Tensor)):
        raise InterventionError(f"{e.where()}: skip is a resid edit of the whole batch with a tensor value")
    if e.grad and (e.op != "capture" or e.site not in GRAD_SITES or e.unit is not None or e.rows is not None):
        raise InterventionError(f"{e.where()}: only a capture of a whole {', '.join(GRAD_SITES)} site (no "
                                "unit, every row) can keep its gradient: a slice of a tensor is not on the "
                                "forward pass's path")


def _on(t, ref: torch.Tensor, cache: dict | None = None, tag: str = ""):
    """``t`` (a tensor or number) on ``ref``'s device and in its dtype (bool masks keep theirs);
    cached under ``tag`` when ``t`` is an edit's own tensor (its value or rows), which lives as
    long as the edit."""
    if not isinstance(t, torch.Tensor):
        return t
    k = (tag, ref.device, ref.dtype if t.dtype != torch.bool else torch.bool)
    got = None if cache is None else cache.get(k)
    if got is None:
        got = t.to(device=ref.device, dtype=k[2])
        if cache is not None:
            cache[k] = got
    return got


def _rows(e: Edit, x: torch.Tensor, cache: dict) -> torch.Tensor | None:
    if e.rows is None:
        return None
    if x.shape[0] != e.rows.shape[0]:
        raise InterventionError(f"{e.where()}: the edit has masks for {e.rows.shape[0]} rows but the "
                                f"forward pass has {x.shape[0]} rows ({tuple(x.shape)})")
    return _on(e.rows, x, cache, "rows")


def _set(x: torch.Tensor, index, new: torch.Tensor, rows: torch.Tensor | None) -> None:
    """``x[index] = new`` (broadcast) in place, only in ``rows`` when given."""
    part = x[index]
    new = torch.broadcast_to(new, part.shape) if isinstance(new, torch.Tensor) else torch.full_like(part, new)
    if rows is not None:
        new = torch.where(rows.view(-1, *([1] * (part.ndim - 1))), new, part)
    x[index] = new


def _edited(x: torch.Tensor, index, e: Edit, cache: dict, value=None) -> None:
    """Apply a zero / scale / replace edit to ``x[index]`` in place (``value`` overrides e.value)."""
    rows = _rows(e, x, cache)
    part = x[index]
    if e.op == "zero":
        _set(x, index, torch.zeros((), dtype=x.dtype, device=x.device), rows)
    elif e.op == "scale":
        _set(x, index, part * _on(e.value, x, cache, "value"), rows)
    else:
        v = _on(e.value, x, cache, "value") if value is None else _on(value, x)
        if isinstance(v, torch.Tensor) and v.ndim >= part.ndim and v.shape[0] not in (1, part.shape[0]):
            raise InterventionError(f"{e.where()}: values for {v.shape[0]} rows but the forward pass "
                                    f"has {part.shape[0]} rows")
        _set(x, index, v, rows)


# ------------------------------------------------------------------ the plan
# An edit becomes one step of one hook: a small typed object that says which tensor it works on (its
# hook: a module's input or output) and how it applies (``apply``: the tensor in, the tensor out).
# A hook runs its steps in the order the edits were listed; the runner is a loop over them.
class _Step:
    """One edit's work inside a hook. ``in_place``: it writes into the hook's tensor, which is cloned
    once before the first such step; a step that returns a new tensor needs no clone."""
    in_place = False

    def apply(self, plan: "_Plan", x: torch.Tensor, output) -> torch.Tensor:
        raise NotImplementedError


@dataclass(eq=False)
class _Constants(_Step):
    """Consecutive zeros / constant replacements of distinct units of ``z``, ``q``, ``k`` or ``v``: one
    ``where(mask, fill, x)``, its mask and fill built once per device, dtype and batch size."""
    site: str
    edits: list
    built: dict = field(default_factory=dict)

    def takes(self, e: Edit) -> bool:
        return e.site == self.site and e.unit not in {x.unit for x in self.edits}

    def apply(self, plan, x, output):
        key = (x.device, x.dtype, x.shape[0])
        if key not in self.built:
            per_row = any(e.rows is not None for e in self.edits)
            mask = torch.zeros(x.shape[0] if per_row else 1, 1, x.shape[-1], dtype=torch.bool, device=x.device)
            fill = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
            for e in self.edits:
                sl = plan.a.site_slice(self.site, e.unit)
                rows = _rows(e, x, plan.cache(e))
                mask[:, 0, sl] = True if rows is None else rows[:, None]
                if e.op == "replace":
                    fill[sl] = _on(e.value, x)
            self.built[key] = (mask, fill)
        mask, fill = self.built[key]
        return torch.where(mask, fill, x)


@dataclass(eq=False)
class _Features(_Step):
    """A zero / scale / replace / capture of units of ``z``, ``q``, ``k`` or ``v`` on [batch, T, features]."""
    site: str
    e: Edit

    def __post_init__(self):
        self.in_place = self.e.op != "capture"

    def apply(self, plan, x, output):
        e = self.e
        if x.ndim != 3:
            raise InterventionError(f"{e.where()}: expected [batch, T, features], got {tuple(x.shape)}")
        cache, units = plan.cache(e), plan.units(e)
        if e.op == "capture" and e.grad:
            plan.captures[e.name].append(x)
        elif e.op == "capture":
            rows = _rows(e, x, cache)
            got = torch.cat([x[..., plan.a.site_slice(self.site, u)] for u in units], dim=-1)
            plan.captures[e.name].append((got if rows is None else got[rows]).detach())
        else:
            d = plan.a.head_dim
            for i, u in enumerate(units):
                value = None
                if e.op == "replace" and e.unit is None and isinstance(e.value, torch.Tensor) \
                        and e.value.ndim and e.value.shape[-1] == len(units) * d:
                    value = e.value[..., i * d:(i + 1) * d]        # whole-site values, this unit's slice
                _edited(x, (Ellipsis, plan.a.site_slice(self.site, u)), e, cache, value)
        return x


@dataclass(eq=False)
class _PatternViaZ(_Step):
    """A pattern edit of head(s) ``e.unit`` carried out on z, the output projection's input (module doc)."""
    layer: int
    e: Edit
    in_place = True

    def apply(self, plan, z, output):
        e, a = self.e, plan.a
        cache = plan.cache(e)
        for h in plan.units(e):
            cols = (Ellipsis, a.out_columns(h))
            if e.op != "replace":
                _edited(z, cols, e, cache)
                continue
            v = plan.stash[self.layer]["v"][..., a.value_slice(a.kv_group(h))]     # [B, T, d]
            p = _on(e.value, v, cache, "value")
            if isinstance(p, torch.Tensor) and e.unit is None and p.ndim == 4:
                p = p[:, h]                                                      # [B, H, T, T] given
            if not isinstance(p, torch.Tensor) or p.shape[-2:] != (v.shape[1], v.shape[1]):
                raise InterventionError(f"{e.where()}: a pattern is [..., T, T] with T = {v.shape[1]}")
            _edited(z, cols, e, cache, torch.matmul(p, v))
        return z


@dataclass(eq=False)
class _PatternCapture(_Step):
    """The weights the attention of ``layer`` computed, with the pattern edits listed ``before`` it applied."""
    layer: int
    e: Edit
    before: list

    def apply(self, plan, x, output):
        p = self._pattern(plan, output)
        if self.before:
            p = p.clone()
            for b in self.before:
                for h in plan.units(b):
                    value = b.value[:, h] if (b.op == "replace" and b.unit is None and
                                              isinstance(b.value, torch.Tensor) and b.value.ndim == 4) else None
                    _edited(p, (slice(None), h), b, plan.cache(b), value)
        rows = _rows(self.e, p, plan.cache(self.e))
        got = p if self.e.unit is None else p[:, self.e.unit]
        plan.captures[self.e.name].append((got if rows is None else got[rows]).detach())
        return x

    def _pattern(self, plan, output) -> torch.Tensor:
        """The weights the model computed [batch, heads, T, T]: returned by the attention module, or
        recomputed from the stashed q and k by the family's rules."""
        a = plan.a
        if a.family.pattern == "weights":
            p = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if p is None:
                raise InterventionError(
                    f"layer {self.layer}: the attention module returned no weights; load the model with "
                    "attn_implementation='eager'")
            return p
        s = plan.stash[self.layer]
        q, k = split_heads(a, s["q"], s["k"])
        return recomputed_pattern(a, self.layer, q.float(), k.float()).to(s["q"].dtype)


@dataclass(eq=False)
class _Whole(_Step):
    """A zero / scale / replace / capture of a whole site's tensor (``mlp_out``, ``resid``, ``resid_in``,
    ``resid_mid``, ``mlp_in``)."""
    e: Edit

    def __post_init__(self):
        self.in_place = self.e.op != "capture"

    def apply(self, plan, x, output):
        e = self.e
        if e.op == "capture":
            rows = _rows(e, x, plan.cache(e))
            plan.captures[e.name].append(x if e.grad else (x if rows is None else x[rows]).detach())
        else:
            _edited(x, (Ellipsis,), e, plan.cache(e))
        return x


@dataclass(eq=False)
class _Call(_Step):
    """A function of the whole site's tensor; what it returns replaces the tensor (None keeps it)."""
    e: Edit

    def apply(self, plan, x, output):
        y = self.e.value(x)
        if y is None:
            return x
        if y.shape != x.shape:
            raise InterventionError(f"{self.e.where()}: the function returned {tuple(y.shape)} for the "
                                    f"site's {tuple(x.shape)}")
        return y


@dataclass(eq=False)
class _StopGrad(_Step):
    """Block ``layer``'s output, the same numbers, its gradient passed to the block's input only."""
    layer: int

    def apply(self, plan, x, output):
        return _ResidualOnly.apply(x, plan.stash[self.layer]["resid_in"])


@dataclass(eq=False)
class _Hook:
    """The steps run on one module's input (``side`` ``in``: positional, ``in_kw``: ``hidden_states``
    too) or output (``out``), in order; then the tensors a later hook reads are stashed
    (``stashes``: (layer, which), after this hook's edits)."""
    module: nn.Module
    side: str
    steps: list = field(default_factory=list)
    stashes: list = field(default_factory=list)

    def run(self, plan: "_Plan", x: torch.Tensor, output=None) -> torch.Tensor:
        cloned = False
        for step in self.steps:
            if step.in_place and not cloned:
                x, cloned = x.clone(), True
            y = step.apply(plan, x, output)
            if y is not x:
                x, cloned = y, True          # a new tensor: this hook's own
        for layer, which in self.stashes:
            plan.stash.setdefault(layer, {})[which] = x
        return x

    def register(self, plan: "_Plan"):
        """The hook on its module; returns its handle."""
        if self.side == "in":
            def pre(mod, args):
                return (self.run(plan, args[0]),) + tuple(args[1:])
            return self.module.register_forward_pre_hook(pre)
        if self.side == "in_kw":
            def pre_kw(mod, args, kwargs):
                if args:
                    return (self.run(plan, args[0]),) + tuple(args[1:]), kwargs
                return args, dict(kwargs, hidden_states=self.run(plan, kwargs["hidden_states"]))
            return self.module.register_forward_pre_hook(pre_kw, with_kwargs=True)

        def post(mod, args, output):
            if isinstance(output, tuple):
                return (self.run(plan, output[0], output),) + tuple(output[1:])
            return self.run(plan, output, output)
        return self.module.register_forward_hook(post)


class _Plan:
    """Every edit checked and placed as a step of one hook per (module, side); nothing registered yet.
    What the steps share while the passes run: the captures, the tensors stashed for later hooks, each
    edit's tensors on the device (:meth:`cache`)."""

    def __init__(self, adapter: Adapter, edits: Sequence[Edit]):
        self.a = adapter
        for e in edits:
            _require_edit(adapter, e)
        skips = [e for e in edits if e.op == "skip"]
        if len(skips) > 1:
            raise InterventionError("at most one skip per intervention")
        self.skip = skips[0] if skips else None
        if self.skip is not None:
            dead = [e for e in edits if e is not self.skip and e.layer <= self.skip.layer]
            if dead:
                raise InterventionError(f"{dead[0].where()} is at or below the skip at layer "
                                        f"{self.skip.layer}: those blocks do not run")
        names = [e.name for e in edits if e.op == "capture"]
        if len(set(names)) != len(names):
            twice = sorted({repr(n) for n in names if names.count(n) > 1})
            raise InterventionError(f"two captures named {', '.join(twice)}: give each its own key")
        self.captures = Captures({n: [] for n in names})
        self.stash: dict[int, dict[str, torch.Tensor]] = {}
        self.hooks: dict[tuple[int, str], _Hook] = {}
        self._caches: dict[int, dict] = {}
        self.pattern_edits: dict[int, list[Edit]] = {}     # per layer, in order: a capture sees those before it
        for e in edits:
            if e is not self.skip:
                self._place(e)

    def cache(self, e: Edit) -> dict:
        """The edit's own tensors (value, rows) moved to a pass's device and dtype, kept while it lives."""
        return self._caches.setdefault(id(e), {})

    def units(self, e: Edit) -> list[int]:
        return list(range(self.a.site_units(e.site))) if e.unit is None else [e.unit]

    def _hook(self, module: nn.Module, side: str) -> _Hook:
        return self.hooks.setdefault((id(module), side), _Hook(module, side))

    def _keep(self, layer: int, which: str) -> None:
        """Stash ``which`` of each forward pass for a later hook: the q, k or v projection's output (after
        any k/v edits), or ``resid_in``, the block's input (after any resid_in edits)."""
        if which == "resid_in":
            hook = self._hook(self.a.block(layer), "in_kw")
        else:
            hook = self._hook({"q": self.a.query_proj, "k": self.a.key_proj, "v": self.a.value_proj}[which](layer),
                              "out")
        if (layer, which) not in hook.stashes:
            hook.stashes.append((layer, which))

    def _place(self, e: Edit) -> None:
        """The edit as a step of the hook on the tensor it touches."""
        a, L = self.a, e.layer
        if e.op == "call":
            module, side = (a.block(L), "out") if e.site == "resid" else (a.block(L), "in_kw") \
                if e.site == "resid_in" else (a.site_module(e.site, L), _SIDE[e.site])
            self._hook(module, side).steps.append(_Call(e))
        elif e.site in ("q", "k", "v", "z"):
            steps = self._hook(a.site_module(e.site, L), "in" if e.site == "z" else "out").steps
            if not _constant(e):
                steps.append(_Features(e.site, e))
            elif steps and isinstance(steps[-1], _Constants) and steps[-1].takes(e):
                steps[-1].edits.append(e)
            else:
                steps.append(_Constants(e.site, [e]))
        elif e.site == "pattern" and e.op == "capture":
            if a.family.pattern == "recompute":
                self._keep(L, "q")
                self._keep(L, "k")
            before = list(self.pattern_edits.get(L, []))
            self._hook(a.attention(L), "out").steps.append(_PatternCapture(L, e, before))
        elif e.site == "pattern":
            if e.op == "replace":
                self._keep(L, "v")
            self.pattern_edits.setdefault(L, []).append(e)
            self._hook(a.out_proj(L), "in").steps.append(_PatternViaZ(L, e))
        elif e.op == "stop_grad":
            self._keep(L, "resid_in")
            self._hook(a.block(L), "out").steps.append(_StopGrad(L))
        elif e.site in ("mlp_out", "resid_mid", "mlp_in"):
            self._hook(a.site_module(e.site, L), _SIDE[e.site]).steps.append(_Whole(e))
        else:                                   # resid: the block's output; resid_in: its input
            self._hook(a.block(L), "out" if e.site == "resid" else "in_kw").steps.append(_Whole(e))

    def register(self) -> list:
        """Register every hook; returns [(module, handle)]."""
        return [(hook.module, hook.register(self)) for hook in self.hooks.values()]


def _constant(e: Edit) -> bool:
    """A zero, or a replace by one vector of the unit's size (or a number), of one unit."""
    return e.unit is not None and (e.op == "zero" or (
        e.op == "replace" and (not isinstance(e.value, torch.Tensor) or e.value.ndim <= 1)))


@contextlib.contextmanager
def intervene(adapter: Adapter, edits: Iterable[Edit]):
    """Apply ``edits`` in every forward pass run inside the block; yields the :class:`Captures`.

    Every edit is checked before any hook is registered; hooks and stand-ins are removed on
    exit, also when the body raises.
    """
    plan = _Plan(adapter, list(edits))
    handles, stood_in = [], []
    try:
        handles += plan.register()
        _ACTIVE.update(h.id for _, h in handles)
        if plan.skip is not None:
            value = plan.skip.value
            if adapter.family.block_tuple:          # what the block returns: (hidden, weights)
                value = (value, None)
            for layer in range(plan.skip.layer + 1):
                block = adapter.block(layer)
                block.forward = lambda *args, _v=value, **kwargs: _v
                stood_in.append(block)
        yield plan.captures
    finally:
        for _, h in handles:
            h.remove()
        for block in stood_in:
            block.__dict__.pop("forward", None)
        left = [m for m, h in handles if h.id in m._forward_hooks or h.id in m._forward_pre_hooks]
        _ACTIVE.difference_update(h.id for _, h in handles)
        if left or any("forward" in b.__dict__ for b in stood_in):
            raise InterventionError(f"hooks left on {len(left)} modules after the intervention")


_ACTIVE: set[int] = set()     # ids of the hooks of the interventions in place now


def hooks_on(model: nn.Module) -> int:
    """Hooks of interventions in place now on ``model``'s modules, plus blocks stood in for
    (0 once every :func:`intervene` block has exited: nothing is left behind)."""
    return sum(1 for m in model.modules() for d in (m._forward_hooks, m._forward_pre_hooks)
               for k in d if k in _ACTIVE) + sum("forward" in m.__dict__ for m in model.modules())


# ------------------------------------------------------------------ attention maps
def _device(model) -> torch.device:
    return next(model.parameters()).device


def _maps(adapter: Adapter, run: Callable[[], Any]) -> tuple[torch.Tensor, Any]:
    L = adapter.n_layers
    with intervene(adapter, [capture("pattern", l, key=("maps", l)) for l in range(L)]) as cap:
        out = run()
    return torch.stack([cap.one(("maps", l)) for l in range(L)], dim=1).float(), out


@torch.no_grad()
def attention_maps(model, ids: torch.Tensor, adapter: Adapter | None = None) -> torch.Tensor:
    """Every head's attention for a batch: [batch, layers, heads, T, T] (float32), by a capture
    at the ``pattern`` site of every layer."""
    adapter = adapter or Adapter(model)
    ids = ids.to(_device(model))
    return _maps(adapter, lambda: adapter.run_body(ids))[0]


@torch.no_grad()
def maps_and_logits(model, ids: torch.Tensor, adapter: Adapter | None = None):
    """(maps [batch, layers, heads, T, T] float32, logits [batch, T, vocab]) from one forward pass."""
    adapter = adapter or Adapter(model)
    ids = ids.to(_device(model))
    return _maps(adapter, lambda: adapter.logits(ids))


# ------------------------------------------------------------------ guards
@torch.no_grad()
def full_logits(model, ids, batch: int = 64, adapter: Adapter | None = None, on_device: bool = False):
    """Every logit (every position, every vocabulary entry), float32 on the CPU (on the model's
    device with ``on_device``); float64 when the model computes in float64 (a guard's exact form:
    :func:`in_float64`).

    ``ids`` is a LongTensor ``[N, T]`` (→ one tensor ``[N, T, vocab]``) or a list of
    such tensors of different lengths (→ a list of logits tensors).
    """
    adapter = adapter or Adapter(model)
    if isinstance(ids, (list, tuple)):
        return [full_logits(model, x, batch, adapter, on_device) for x in ids]
    dev = _device(model)
    ids = ids.to(dev)
    out = torch.cat([at_least_float32(adapter.logits(ids[i:i + batch])) for i in range(0, len(ids), batch)])
    return out if on_device else out.cpu()


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32, or in float64 when it is (logits of a guard's exact form: :func:`in_float64`)."""
    return x if x.dtype == torch.float64 else x.float()


#: The float32 steps :func:`in_float64` runs in float64: the largest difference, relative to the
#: largest |output|, allowed between a norm module's own output (its float32 arithmetic) and the
#: float64 formula that replaces it (:func:`headwatch.model.recompute.norm`). float32 rounding is ~6e-8
#: relative; a wrong formula (an RMSNorm's offset, its eps) is off by far more.
NORM_FORMULA_RTOL = 1e-5


_IN_FLOAT64: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()
"""The models inside :func:`in_float64` now."""


def computed_in(model: nn.Module) -> torch.dtype:
    """The dtype whose rounding the model's outputs carry: float64 inside :func:`in_float64` (every
    step in float64); else the coarser of its parameters' dtype and float32, since transformers' RMSNorms
    and eager attention's softmax compute in float32 whatever the model's dtype (a float64 model
    outside :func:`in_float64` still rounds there to float32), and bfloat16 or float16 weights round
    their products coarser still."""
    if model in _IN_FLOAT64:
        return torch.float64
    dtype = next(model.parameters()).dtype
    return dtype if dtype.is_floating_point and torch.finfo(dtype).eps > torch.finfo(torch.float32).eps \
        else torch.float32


@contextlib.contextmanager
def in_float64(adapter: Adapter):
    """The model's floating-point parameters and buffers in float64 while inside, each back in its
    own dtype on exit (exact: every float32, bfloat16 and float16 number is a float64 number).
    For guards whose two sides are equal in real arithmetic but add terms in another order:
    in float64 their rounding (~1e-16 relative) is far below any difference a wrong edit makes,
    on every CPU and GPU, where float32's (~6e-8, carried up through the layers) is not.

    Two steps of transformers' models compute in float32 whatever the model's dtype: their
    RMSNorms (they cast the input to float32) and eager attention's softmax (``dtype=torch.float32``).
    There a float64 difference of 1e-16 between two sides can flip one float32 rounding, and one
    flipped bit carried up through the layers moved SmolLM2-135M's logits by 1.2e-5 (one head of
    38 on an AMD EPYC; the others: 0). Inside, both run in float64 too: each module of the
    family's RMSNorm class returns :func:`headwatch.model.recompute.norm` of its input in float64 (its
    own output checked against it within :data:`NORM_FORMULA_RTOL`: a formula that is not the
    module's raises), and ``torch.nn.functional.softmax`` keeps a float64 input in float64."""
    from .recompute import norm as norm_formula

    model = adapter.model
    tensors = [(model.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2], t.dtype)
               for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_floating_point()]
    norms = [m for m in model.modules()
             if adapter.family.norm == "RMSNorm" and type(m).__name__.endswith("RMSNorm")]

    def exact_norm(module, args, out):
        x = args[0]
        if x.dtype != torch.float64:
            return out
        exact = norm_formula(x, adapter.norm_params(module))
        worst = float((exact - out).detach().abs().max()) if out.numel() else 0.0
        if worst > NORM_FORMULA_RTOL * max(float(exact.detach().abs().max()), 1.0):
            raise InterventionError(f"{type(module).__name__}: its output and the float64 formula of the "
                                    f"family's {adapter.family.norm} differ by {worst:g}; the formula is not "
                                    "this module's")
        return exact

    softmax = nn.functional.softmax

    def softmax_keeping_float64(x, *args, dtype=None, **kwargs):
        if dtype is not None and x.dtype == torch.float64:
            dtype = torch.float64
        return softmax(x, *args, dtype=dtype, **kwargs)

    model.to(torch.float64)
    handles = [m.register_forward_hook(exact_norm) for m in norms]
    nn.functional.softmax = softmax_keeping_float64
    _IN_FLOAT64.add(model)
    try:
        yield model
    finally:
        _IN_FLOAT64.discard(model)
        nn.functional.softmax = softmax
        for h in handles:
            h.remove()
        with torch.no_grad():
            for module, attr, dtype in tensors:
                t = getattr(module, attr)
                if isinstance(t, nn.Parameter):
                    t.data = t.data.to(dtype)
                else:
                    setattr(module, attr, t.to(dtype))


def _weight_views(adapter: Adapter, site: str, layer: int, unit: int) -> list[torch.Tensor]:
    adapter.require_unit(site, layer, unit)
    if site in ("z", "pattern"):
        return [adapter.out_weight_for_head(layer, unit)]
    if site in ("q", "k", "v"):
        return adapter.projection_rows(adapter.site_module(site, layer), adapter.site_slice(site, unit))
    raise InterventionError(f"site {site!r} has no weights that produce it alone: no weight-level "
                            "reference (zeroed_weights covers z, pattern, q, k and v)")


@contextlib.contextmanager
def _restoring(saved: list, what: Callable[[int], str]):
    """Write every (view, original) back on exit, also when the body raises; verify bit for bit."""
    try:
        yield
    finally:
        with torch.no_grad():
            for view, orig in reversed(saved):
                view.copy_(orig)
        for i, (view, orig) in enumerate(saved):
            if not torch.equal(view, orig):
                raise InterventionError(f"weights of {what(i)} were not restored exactly")


@contextlib.contextmanager
def zeroed_weights(adapter: Adapter, targets: Iterable[tuple[str, int, int]]):
    """Zero the weight (and bias) entries that produce each ``(site, layer, unit)``; restore on exit.

    ``z`` / ``pattern`` unit h: the output projection's entries that read head h (a zeroed
    head's voice and a zeroed pattern both give ``z_h = 0``); ``q`` unit h / ``k`` / ``v`` unit
    g: the query / key / value projection's rows (and bias entries) that produce head h / group
    g (OLMo 2's ``q`` and ``k``: the query / key norm's scale entries). This *does* modify
    weights (in place, under ``no_grad``): it exists only as the reference the guards compare
    the hooks with. Restored on exit, also when the body raises, verified bit for bit.
    """
    targets = [(s, int(l), int(u)) for s, l, u in targets]
    views = [(t, v) for t in targets for v in _weight_views(adapter, *t)]   # all checked first
    saved = []
    with _restoring(saved, lambda i: f"{views[i][0]}"):
        with torch.no_grad():
            for _, view in views:
                saved.append((view, view.detach().clone()))
                view.zero_()
        yield targets


@contextlib.contextmanager
def replaced_by_bias(adapter: Adapter, values: Iterable[tuple[int, int, torch.Tensor]]):
    """The weight-level form of replacing ``z_h`` by a constant vector ``m`` (``(layer, head, m)``):
    Wo's entries that read head h zeroed and ``Wo[:, h-slice] · m`` (computed in float64, rounded
    once) added to the output projection's bias — a zero bias is attached while inside when the
    projection has none. ``o_proj(z with z_h = m) = o_proj(z with z_h = 0) + Wo[:, h] · m`` exactly
    in real arithmetic; in float32 the two differ by rounding. Restored on exit, verified."""
    values = [(int(l), int(h), m) for l, h, m in values]
    for l, h, m in values:
        adapter.require_head(l, h)
        if tuple(m.shape) != (adapter.head_dim,):
            raise InterventionError(f"head ({l}, {h}): the value must be [head_dim = {adapter.head_dim}]")
    attached, saved = [], []
    try:
        with _restoring(saved, lambda i: "a projection with a mean bias"):
            with torch.no_grad():
                for l, h, m in values:
                    proj = adapter.out_proj(l)
                    if getattr(proj, "bias", None) is None:
                        w = proj.weight
                        proj.bias = nn.Parameter(torch.zeros(w.shape[1] if adapter.family.conv1d else w.shape[0],
                                                             dtype=w.dtype, device=w.device))
                        attached.append(proj)
                    cols = adapter.out_weight_for_head(l, h)
                    shift = (m.double().to(cols.device) @ cols.double() if adapter.family.conv1d
                             else cols.double() @ m.double().to(cols.device))
                    saved.append((proj.bias, proj.bias.detach().clone()))
                    saved.append((cols, cols.detach().clone()))
                    proj.bias += shift.to(proj.bias.dtype)
                    cols.zero_()
            yield values
    finally:
        for proj in attached:
            proj.bias = None
