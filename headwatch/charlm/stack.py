"""Many character models in one: their weights stacked on a leading model axis, trained in one step.

A sweep trains dozens of small models; one at a time, each step of each is a few small matrix
products, and the per-step overhead (Python, kernel launches) dominates — on 2 CPU cores and, far
more, on a GPU. :class:`StackedCharLM` holds M models of :class:`~headwatch.charlm.model.CharLM`
whose parameters have the same shapes (:func:`stack_key`: width, layers, context, the feed-forward
and attention inner widths, experts, vocabulary) — the seeds of a shape, or the head counts of one
width, whose q/k/v/o matrices are the same size whatever the split — as one module: each of
CharLM's parameters becomes one tensor ``[M, *shape]`` under the same name, every weight product
one batched product over the models. Input ``[M, batch, T]``, logits ``[M, batch, T, vocab]``.

Per model it computes what CharLM computes, operation for operation (the products batched; a
LayerNorm's scale and shift applied per model): a model trained in a stack takes the steps it
takes alone, equal to float rounding (``tests/test_stack.py``: float64, the same seeds, every
loss within 1e-9 of training each model alone with CharLM). Where the models differ —

* the number of heads (or key/value heads, or rotary positions): attention runs once per such
  group of models, each with its own split of the same q/k/v products;
* experts: the expert layers of every model run in one routing
  (:func:`~headwatch.charlm.model.route_experts`): every model's tokens sorted by (model, expert)
  and multiplied by one grouped matmul per weight, a (model, expert) pair one group — so a step's
  operators do not grow with the number of models —, each model's balancing loss and counts kept
  (:attr:`balance_losses`, :attr:`expert_counts`); models with different top-k, one routing each;

Gradients stay per model: the loss of a stack is the sum of its models' losses, so each model's
parameters get exactly their own model's gradient (the others' terms do not depend on them).

The parameters are held as two **rows** per model, ``matrices`` ``[M, N_m]`` (CharLM's tensors of two
or more dimensions: weight decay applies to them) and ``vectors`` ``[M, N_v]`` (biases and
LayerNorms), each model's tensors one after another in CharLM's order. A forward pass cuts each row
once into CharLM's tensors (:meth:`tensors`: views, contiguous ``[M, *shape]`` per name, as separate
parameters would be) and its backward joins their gradients into one tensor per row, so that what
follows a backward pass works on two tensors whatever the number of CharLM's parameters: a model's
gradient norm is its rows' norm (:func:`clip_per_model`), AdamW updates two tensors, and a subset of
members is a selection of rows.

Dropout (``ModelSpec.dropout``, where nanoGPT puts it: :mod:`headwatch.charlm.model`) draws one mask a
site for the whole stack, in training mode only: member i reads its own slice of it, so the members'
masks are independent draws, and member i computes what CharLM computes under that slice
(``tests/test_stack.py`` replays it). The members of a stack share their dropout rate (:func:`stack_key`).

:meth:`member` gives model ``i`` as a CharLM whose parameters are views of the stack's (no copy:
it reads the weights as they are now, for evaluations through the intervention layer's hooks);
:meth:`copy_of` gives an independent CharLM (to save).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .model import CharLM, dropped, route_experts
from .spec import ROTARY_BASE, ModelSpec

ROWS = ("matrices", "vectors")
"""A stack's parameters (:class:`StackedCharLM`): CharLM's tensors of two or more dimensions (weight
decay applies to them), then its biases and LayerNorms, each a row ``[M, N]`` per model."""


def stack_key(spec: ModelSpec) -> tuple:
    """What must be equal for two models to share a stack: every parameter's shape (and the
    positions' kind), and the dropout rate (one mask a site for the stack). The number of heads,
    key/value heads and top-k may differ."""
    return (spec.vocab_size, spec.width, spec.layers, spec.context, spec.ffn_mult, spec.heads * spec.head_dim,
            spec.kv_groups * spec.head_dim, spec.experts, spec.expert_hidden, spec.rotary, spec.dropout)


def _turns(T: int, dims: int, device, dtype) -> torch.Tensor:
    """``e^{i·position·frequency}`` ``[T, dims/2]`` (complex) of :func:`headwatch.model.recompute.apply_rotary`
    (rotate-half pairs over ``dims``, base :data:`ROTARY_BASE`), its angles made in float64 as it
    makes them, on ``device``."""
    inv = 1.0 / (ROTARY_BASE ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    real = torch.complex64 if dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.complex128
    return torch.polar(torch.ones_like(ang), ang).to(device=device, dtype=real)


def _rotated(x: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    """``x`` ``[…, T, d]`` turned as apply_rotary turns it — pair (j, j + d/2) by its angle: the
    complex number ``x_j + i·x_{j+d/2}`` times its turn — returned with each pair's two numbers
    side by side (``[…, T, d]`` in the order j, j + d/2, j + 1, …). Queries and keys both so
    reordered give the same dot products: attention reads them in that order."""
    h = x.shape[-1] // 2
    pairs = x.unflatten(-1, (2, h)).transpose(-1, -2).float() if x.dtype != torch.float64 \
        else x.unflatten(-1, (2, h)).transpose(-1, -2)
    turned = torch.view_as_real(torch.view_as_complex(pairs.contiguous()) * turns)
    return turned.flatten(-2).to(x.dtype)


def _routings(specs: list[ModelSpec]) -> list[tuple[int, list[int]]]:
    """The models of a stack routed together: [(top_k, [model index…])…] (one entry when every model
    routes its tokens to the same number of experts; none without experts)."""
    out: dict[int, list[int]] = {}
    for i, s in enumerate(specs):
        if s.experts:
            out.setdefault(s.routed, []).append(i)
    return list(out.items())


class StackedCharLM(nn.Module):
    """M character models with their parameters stacked (module doc). ``StackedCharLM(models)``
    stacks built CharLMs (their weights copied: a model initialised alone with its seed starts the
    stack where it would start alone)."""

    def __init__(self, models: list[CharLM]):
        super().__init__()
        if not models:
            raise ValueError("a stack needs at least one model")
        keys = {stack_key(m.spec) for m in models}
        if len(keys) > 1:
            raise ValueError(f"models whose parameters differ in shape (or whose dropout differs) cannot share a "
                             f"stack: {sorted(keys)}")
        first = dict(models[0].named_parameters())
        self.names = list(first)
        self.shapes = {n: tuple(p.shape) for n, p in first.items()}
        self.rows = {row: [n for n in self.names if (len(self.shapes[n]) >= 2) == (row == "matrices")]
                     for row in ROWS}
        with torch.no_grad():
            for row, names in self.rows.items():
                setattr(self, row, nn.Parameter(torch.stack([
                    torch.cat([dict(m.named_parameters())[n].detach().reshape(-1) for n in names])
                    for m in models])))
        self._take([m.spec for m in models])

    def _take(self, specs: list[ModelSpec]) -> None:
        """The members' settings, and what the forward pass reads of them."""
        self.specs = list(specs)
        spec = self.specs[0]
        self.M, self.V, self.D, self.L, self.T = len(specs), spec.vocab_size, spec.width, spec.layers, spec.context
        self.experts, self.dropout = spec.experts, spec.dropout
        # models with the same attention split, computed together: {(heads, kv_heads, head_dim, rotary): [i…]}
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(self.specs):
            groups.setdefault((s.heads, s.kv_groups, s.head_dim, s.rotary_dims), []).append(i)
        self.groups = list(groups.items())
        self.routings = _routings(self.specs)
        self.balance_losses: list[torch.Tensor] = []      # per expert layer: [M] of the last forward
        self.expert_counts: torch.Tensor | None = None     # [M, layers, experts] of the last forward
        self._tables: dict = getattr(self, "_tables", {})
        self._w: dict[str, torch.Tensor] | None = None     # CharLM's tensors, during a forward pass

    def tensors(self, grad: bool = False) -> dict[str, torch.Tensor]:
        """CharLM's parameters by name, each ``[M, *shape]``: views of the rows, each row cut once (the
        backward of a forward pass joins their gradients in one tensor per row); with ``grad``, the
        same views of the rows' gradients."""
        out = {}
        for row, names in self.rows.items():
            whole = getattr(self, row)
            whole = whole.grad if grad else whole
            parts = whole.split([math.prod(self.shapes[n]) for n in names], dim=1)
            out.update((n, part.view(self.M, *self.shapes[n])) for n, part in zip(names, parts))
        return out

    def p(self, name: str) -> torch.Tensor:
        """The stacked parameter of CharLM's ``name`` (``[M, *shape]``; in a forward pass, its view of
        that pass)."""
        return (self._w if self._w is not None else self.tensors())[name]

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        """nanoGPT's dropout on ``x`` ``[M, …]``: one mask for every member, in training mode only."""
        return dropped(x, self.dropout, self.training)

    # ---- the forward pass
    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        w, b = self.p(f"{name}.weight"), self.p(f"{name}.bias")
        return torch.addcmul(b[:, None, None], F.layer_norm(x, (self.D,)), w[:, None, None])

    def _linear(self, x: torch.Tensor, name: str, bias: bool = False) -> torch.Tensor:
        """``x`` ``[M, B, T, in]`` times each model's ``name`` weight (nn.Linear's ``[out, in]``)."""
        M, B, T, _ = x.shape
        y = torch.matmul(x.reshape(M, B * T, -1), self.p(f"{name}.weight").transpose(1, 2))
        if bias:
            y = y + self.p(f"{name}.bias")[:, None]
        return y.view(M, B, T, -1)

    def _attention(self, h: torch.Tensor, l: int) -> torch.Tensor:
        M, B, T, _ = h.shape
        pre = f"blocks.{l}.attn"
        q, k, v = (self._linear(h, f"{pre}.{x}") for x in ("q", "k", "v"))
        parts = []
        for (heads, kv, d, rot), members in self.groups:
            sel = (lambda t: t) if len(members) == M else (lambda t, i=members: t[i])
            n = len(members)
            split = lambda t, h_: sel(t).reshape(n * B, T, h_, d).transpose(1, 2)
            qg, kg, vg = split(q, heads), split(k, kv), split(v, kv)
            if rot:
                if rot != d:
                    raise NotImplementedError("rotary positions on part of a head")
                key = (T, rot, qg.device, qg.dtype)
                if key not in self._tables:
                    self._tables[key] = _turns(T, rot, qg.device, qg.dtype)
                qg, kg = _rotated(qg, self._tables[key]), _rotated(kg, self._tables[key])
            if kv != heads:
                kg, vg = kg.repeat_interleave(heads // kv, dim=1), vg.repeat_interleave(heads // kv, dim=1)
            y = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
            parts.append((members, y.transpose(1, 2).reshape(n, B, T, heads * d)))
        if len(parts) == 1:
            y = parts[0][1]
        else:
            order = torch.tensor([i for members, _ in parts for i in members], device=h.device)
            y = torch.cat([p for _, p in parts]).index_select(0, torch.argsort(order))
        return self._drop(self._linear(y, f"{pre}.o"))

    def _ffn(self, h: torch.Tensor, l: int) -> torch.Tensor:
        pre = f"blocks.{l}.ffn"
        if not self.experts:
            return self._linear(F.gelu(self._linear(h, f"{pre}.0", bias=True)), f"{pre}.2", bias=True)
        weights = [self.p(f"{pre}.{w}") for w in ("router.weight", "w1", "b1", "w2", "b2")]
        parts = []
        for top_k, members in self.routings:     # every model of a top-k in one routing
            sel = (lambda t: t) if len(members) == self.M else (lambda t, i=members: t[i])
            parts.append((members, route_experts(sel(h), *map(sel, weights), top_k)))
        if len(parts) == 1:
            out, balance, counts = parts[0][1]
        else:
            back = torch.argsort(torch.tensor([i for members, _ in parts for i in members], device=h.device))
            out, balance, counts = (torch.cat([p[j] for _, p in parts]).index_select(0, back) for j in range(3))
        self.balance_losses.append(balance)
        self._counts.append(counts)
        return out

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[M, B, T, vocab]`` of every model for its own rows ``idx`` ``[M, B, T]``."""
        M, B, T = idx.shape
        if M != self.M:
            raise ValueError(f"the stack holds {self.M} models; the input has {M} (a leading model axis)")
        if T > self.T:
            raise ValueError(f"sequence of {T} tokens is longer than the context {self.T}")
        self.balance_losses, self._counts = [], []
        self._w = self.tensors()
        try:
            tok = self.p("tok.weight")
            offset = (torch.arange(M, device=idx.device) * self.V).view(M, 1, 1)
            x = F.embedding(idx + offset, tok.reshape(M * self.V, self.D))            # each model's own rows
            if "pos.weight" in self.names:
                x = x + self.p("pos.weight")[:, None, :T]
            x = self._drop(x)
            for l in range(self.L):
                x = x + self._attention(self._norm(x, f"blocks.{l}.ln1"), l)
                x = x + self._drop(self._ffn(self._norm(x, f"blocks.{l}.ln2"), l))
            if self.experts:
                self.expert_counts = torch.stack(self._counts, dim=1).detach()
            return self._linear(self._norm(x, "ln_f"), "head")
        finally:
            self._w = None

    # ---- the models one by one
    def member(self, i: int) -> CharLM:
        """Model ``i`` as a CharLM whose parameters are views of the stack's (the weights as they are
        now, for evaluations; no gradient reaches the stack through it)."""
        with torch.device("meta"):
            model = CharLM(self.specs[i])
        for name, w in self.tensors().items():
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner) if owner else model
            module._parameters[leaf] = nn.Parameter(w.detach()[i], requires_grad=False)
        return model.eval()

    def copy_of(self, i: int) -> CharLM:
        """Model ``i`` as an independent CharLM (its weights copied), in eval mode."""
        with torch.device("meta"):
            model = CharLM(self.specs[i])
        model = model.to_empty(device=self.matrices.device)
        model.load_state_dict({n: w.detach()[i].clone() for n, w in self.tensors().items()})
        return model.eval()

    def subset(self, keep: list[int], opt: torch.optim.Optimizer | None = None):
        """The stack of the members ``keep`` (indices, in that order), their weights as they are now; with
        ``opt`` (an optimizer over this stack's parameters, whose per-parameter state holds tensors with
        the model axis first, as AdamW's moments), also a copy of it over the new stack's parameters,
        each member's state carried over: ``(stack, optimizer)``. A member trained on in the smaller
        stack takes the steps it would take in the larger one (or alone): its parameters, gradients
        and optimizer state never mix with another's. The training of a sweep whose runs stop at
        different steps drops the finished ones this way."""
        keep = [int(i) for i in keep]
        if not keep or not all(0 <= i < self.M for i in keep):
            raise ValueError(f"subset: members {keep} of a stack of {self.M}")
        index = torch.tensor(keep, device=self.matrices.device)
        new = StackedCharLM.__new__(StackedCharLM)
        nn.Module.__init__(new)
        new.names, new.shapes, new.rows, new._tables = list(self.names), dict(self.shapes), dict(self.rows), dict(self._tables)
        for row in ROWS:
            v = getattr(self, row)
            setattr(new, row, nn.Parameter(v.detach().index_select(0, index).clone(), requires_grad=v.requires_grad))
        new._take([self.specs[i] for i in keep])
        new.train(self.training)
        if opt is None:
            return new, None
        old_of = {id(getattr(self, row)): row for row in ROWS}
        new_of = {row: getattr(new, row) for row in ROWS}
        groups_new = []
        for g in opt.param_groups:
            groups_new.append(dict({k: v for k, v in g.items() if k != "params"},
                                   params=[new_of[old_of[id(p)]] for p in g["params"]]))
        opt_new = type(opt)(groups_new)     # every group carries its own settings (lr, betas, fused …)
        for g_old, g_new in zip(opt.param_groups, opt_new.param_groups):
            for p_old, p_new in zip(g_old["params"], g_new["params"]):
                state = opt.state.get(p_old)
                if state:
                    opt_new.state[p_new] = {k: (v.index_select(0, index).clone()
                                                if torch.is_tensor(v) and v.dim() and v.shape[0] == self.M else
                                                v.clone() if torch.is_tensor(v) else v)
                                            for k, v in state.items()}
        return new, opt_new

    def decay_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(parameters weight decay applies to, the others): the rows of CharLM's matrices and
        embeddings (2-d per model), and of its biases and LayerNorms."""
        return [self.matrices], [self.vectors]


def clip_per_model(params, max_norm: float) -> torch.Tensor:
    """Each model's gradients scaled as ``torch.nn.utils.clip_grad_norm_`` scales one model's (its
    global norm over every parameter, the factor ``max_norm / (norm + 1e-6)`` capped at 1), for
    stacked parameters ``[M, …]`` (a stack's two rows: a few operations whatever the model); returns
    the norms ``[M]``. Nothing is read on the host."""
    grads = [p.grad for p in params if p.grad is not None]
    each = [torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads]
    norms = each[0] if len(each) == 1 else torch.linalg.vector_norm(torch.stack(each), dim=0)
    coef = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
    for g in grads:
        g.mul_((coef if coef.dtype == g.dtype else coef.to(g.dtype)).view(-1, *([1] * (g.dim() - 1))))
    return norms
