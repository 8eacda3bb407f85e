"""The sweep's character-level transformer (protocol §7), in the spirit of nanoGPT.

Decoder-only; ``layers`` blocks of pre-LayerNorm (with bias) attention and a
GELU feed-forward network of ``ffn_mult × width`` (with bias); learned position
embeddings for ``context`` tokens; a final LayerNorm; an untied output head
without bias. Attention has separate q/k/v/o projections, each width × width
without bias, so splitting a width into more heads changes no weight count.
No dropout by default: training is then deterministic on CPU.

Every module is built from one :class:`~headwatch.charlm.spec.ModelSpec`
(``CharLM(spec)``, nanoGPT's config object), which lists the options once with
their defaults. Options, all off by default — the default model is unchanged,
weight for weight, for the same seed:

* ``head_size``: the size of each head when it is not width ÷ heads; the
  attention's inner width is then heads × head_size (q, k, v: width → inner;
  o: inner → width). Used by the depth sweep to keep heads of 64 at widths
  that 64 does not divide into the wanted head count.
* ``kv_heads``: grouped-query attention. k and v project to kv_heads × head
  size; query head h reads key/value group ``h // (heads // kv_heads)``.
  kv_heads = heads is plain attention (same modules, same shapes, same init).
* ``experts`` (E > 0): the FFN becomes E GELU experts of ``expert_width``
  (default ffn_mult × width ÷ top_k, so the FFN neurons a token traverses equal
  the dense model's) and a router (width → E, no bias) that sends each token to
  its ``top_k`` most probable experts. The expert outputs are weighted by the
  router's softmax probabilities (not renormalized over the top k, so the
  router also learns when k = 1). Each forward stores the Switch load-balancing
  loss E · Σ_i f_i · P_i of every expert layer in ``model.balance_losses``,
  where f_i is the share of the N·k token→expert assignments that go to expert
  i and P_i the mean router probability of expert i; it is 1 at a uniform load
  (f_i = P_i = 1/E) and grows towards E as the load concentrates. The token
  counts per expert are in ``model.expert_counts`` (one row per layer).
* ``rotary``: rotary position embeddings instead of the learned ones (the model has
  no ``pos`` module): after the q and k projections (the ``q`` and ``k`` sites are
  read before it, as in every rotary family), each head's query and key are turned
  by :func:`headwatch.model.recompute.apply_rotary`, the function the recomputed attention
  weights apply too (rotate-half pairs over the whole head, base
  :data:`~headwatch.charlm.spec.ROTARY_BASE`). A head then reads of position only the
  offset between query and key.
* ``dropout`` (p > 0): where nanoGPT's model (``model.py`` of karpathy/nanoGPT) puts it, all four of
  its places — the sum of the token and position embeddings (its ``transformer.drop``), the
  attention weights (``attn_dropout``, here ``scaled_dot_product_attention``'s ``dropout_p``), and
  the outputs of attention and of the FFN before each is added to the residual stream
  (``resid_dropout``, the MLP's ``dropout``) — in training mode only (``model.eval()``: none). At 0
  none of them is called: the model computes what it computes without the option.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..model.params import block_counts
from ..model.recompute import apply_rotary
from .spec import ROTARY_BASE, ModelSpec


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        width = spec.width
        self.heads, self.head_dim, self.kv_heads = spec.heads, spec.head_dim, spec.kv_groups
        self.rotary_dims, self.dropout = spec.rotary_dims, spec.dropout
        inner, kv_inner = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.q = nn.Linear(width, inner, bias=False)
        self.k = nn.Linear(width, kv_inner, bias=False)   # rows g*d:(g+1)*d are key/value group g
        self.v = nn.Linear(width, kv_inner, bias=False)
        self.o = nn.Linear(inner, width, bias=False)   # input columns h*d:(h+1)*d are head h

    def forward(self, x):
        B, T, C = x.shape
        split = lambda t, n: t.view(B, T, n, self.head_dim).transpose(1, 2)
        q = split(self.q(x), self.heads)
        k, v = split(self.k(x), self.kv_heads), split(self.v(x), self.kv_heads)
        if self.rotary_dims:      # positions 0 … T−1, as headwatch.model.recompute turns them
            q, k = (apply_rotary(t, self.rotary_dims, ROTARY_BASE) for t in (q, k))
        if self.kv_heads != self.heads:    # query head h reads group h // (heads // kv_heads)
            group = self.heads // self.kv_heads
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return dropped(self.o(y.transpose(1, 2).reshape(B, T, self.heads * self.head_dim)), self.dropout, self.training)


def dropped(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``x`` through dropout of rate ``p`` in training mode; ``x`` itself at 0 or in eval mode (no call)."""
    return F.dropout(x, p, True) if p and training else x


def assignment_counts(chosen: torch.Tensor, experts: int) -> torch.Tensor:
    """(…, E) int64 token→expert assignments in ``chosen`` (…, N, k), without a host synchronisation
    (``torch.bincount`` reads its maximum on the host on a GPU)."""
    flat = chosen.flatten(-2)
    counts = torch.zeros(*flat.shape[:-1], experts, dtype=torch.long, device=chosen.device)
    return counts.scatter_add_(-1, flat, torch.ones_like(flat))


def balance_loss(probs: torch.Tensor, chosen: torch.Tensor, experts: int,
                 counts: torch.Tensor | None = None) -> torch.Tensor:
    """Switch load-balancing loss E · Σ_i f_i · P_i.

    ``probs``: (…, N, E) router probabilities; ``chosen``: (…, N, k) expert ids per token;
    ``counts``: the (…, E) assignments per expert when already known (else counted from ``chosen``).
    f_i = (assignments to i) / (N·k), P_i = mean of probs[…, :, i]. Uniform load: 1. Leading axes
    (a stack's models) are kept: one loss each.
    """
    if counts is None:
        counts = assignment_counts(chosen, experts)
    f = counts.to(probs.dtype) / (chosen.shape[-2] * chosen.shape[-1])
    return experts * torch.sum(f * probs.mean(-2), dim=-1)


def _grouped_mm_fits(a: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether ``torch.nn.functional.grouped_mm`` takes these operands: this torch has it, they
    are float32, bfloat16 or float16 (not float64), and every row of ``a`` and of each ``w[e]``
    starts on a 16-byte boundary."""
    size = a.element_size()
    return (hasattr(F, "grouped_mm") and a.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and a.is_contiguous() and w.is_contiguous()
            and all(d * size % 16 == 0 for d in w.shape[1:]))


def grouped_matmul(a: torch.Tensor, w: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Rows ``ends[e-1]:ends[e]`` of ``a`` (M, K) times ``w[e]`` (K, N), for every e, as one (M, N).

    ``ends``: (E,) cumulative row counts (int32, ending at M). One grouped GEMM
    (``F.grouped_mm``: one kernel for every expert; on a CUDA GPU of compute
    capability 9.x/10.x in bfloat16 without reading ``ends`` on the host, otherwise
    torch loops over the groups in C++ after one read). Shapes it cannot take (a row
    not a multiple of 16 bytes) or a torch without it fall back to one matmul per group of a
    view of ``w`` (``unbind``: the gradient of ``w`` is one (E, K, N) tensor, not one
    per expert); that path reads ``ends`` on the host.
    """
    if _grouped_mm_fits(a, w):
        return F.grouped_mm(a, w, offs=ends)
    sizes = torch.diff(ends, prepend=ends.new_zeros(1)).tolist()
    return torch.cat([part @ we for part, we in zip(torch.split(a, sizes), w.unbind(0))])


class Experts(nn.Module):
    """E GELU experts (width → expert width → width, with biases) behind a top-k router."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if not spec.experts:
            raise ValueError(f"Experts needs experts > 0 (spec {spec.to_dict()})")
        width, experts, top_k, expert_width = spec.width, spec.experts, spec.routed, spec.expert_hidden
        self.experts, self.top_k, self.expert_width = experts, top_k, expert_width
        self.router = nn.Linear(width, experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(experts, width, expert_width))
        self.b1 = nn.Parameter(torch.zeros(experts, expert_width))
        self.w2 = nn.Parameter(torch.empty(experts, expert_width, width))
        self.b2 = nn.Parameter(torch.zeros(experts, width))
        self.last_balance = None
        self.last_counts = None

    def route(self, x2: torch.Tensor):
        """(probs (N, E) float32, top-k expert ids (N, k), their weights (N, k))."""
        return _route(x2, self.router.weight, self.top_k)

    def forward(self, x):
        """Tokens sorted by expert, one grouped matmul per weight (:func:`route_experts`, a stack of
        one model)."""
        one = lambda t: t.unsqueeze(0)
        out, balance, counts = route_experts(one(x), one(self.router.weight), one(self.w1), one(self.b1),
                                             one(self.w2), one(self.b2), self.top_k)
        self.last_balance, self.last_counts = balance[0], counts[0].detach()
        return out[0]


def _route(x: torch.Tensor, router: torch.Tensor, top_k: int):
    """Router probabilities of tokens ``x`` (…, N, W) under ``router`` (…, E, W) (nn.Linear's weight,
    one per leading index) in float32, each token's ``top_k`` expert ids and their probabilities."""
    probs = F.softmax(torch.matmul(x, router.transpose(-1, -2)).float(), dim=-1)
    weight, chosen = probs.topk(top_k, dim=-1)
    return probs, chosen, weight


class _Rows(torch.autograd.Function):
    """``x.index_select(0, index)`` where every row of ``x`` is taken ``k`` times, as rows
    ``inverse.view(-1, k)`` of the result: the gradient is a gather by ``inverse`` and a sum over
    each row's ``k`` copies — parallel and in a fixed order. (Indexing's own gradient sums by
    ``index_put``, whose GPU kernel adds up a row's copies one after another in a single warp,
    and ``index_select``'s by atomics, in no fixed order.) ``k = 1``: a permutation."""

    @staticmethod
    def forward(ctx, x, index, inverse, k):
        ctx.save_for_backward(inverse)
        ctx.k = k
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx, grad):
        (inverse,) = ctx.saved_tensors
        rows = grad.index_select(0, inverse)
        return rows.view(-1, ctx.k, *grad.shape[1:]).sum(1), None, None, None


class _SortedRows(torch.autograd.Function):
    """``b.index_select(0, group)`` for ascending ``group`` ids (each group's bias on each of its
    rows, thousands of times over), where ``b`` holds ``models`` blocks of ``E`` groups and each
    model's rows are one contiguous block of equal length (a stack's (model, expert) groups, each
    model's tokens after the last model's): the gradient is one batched matmul, one-hot(expert)ᵀ ·
    grad per model, so each group's rows are summed by a GEMM (in a fixed order; on a GPU in
    parallel, where indexing's gradient sums thousands of copies of one row one after another), and
    its size grows with the models, not with their square."""

    @staticmethod
    def forward(ctx, b, group, models):
        ctx.save_for_backward(group)
        ctx.models, ctx.experts = models, b.shape[0] // models
        return b.index_select(0, group)

    @staticmethod
    def backward(ctx, grad):
        (group,) = ctx.saved_tensors
        M, E = ctx.models, ctx.experts
        expert = group.view(M, -1) - E * torch.arange(M, device=group.device).unsqueeze(1)
        # the one-hot by comparison (F.one_hot reads its ids' range on the host off a GPU)
        one_hot = expert.unsqueeze(1) == torch.arange(E, device=group.device).view(1, E, 1)
        return torch.bmm(one_hot.to(grad.dtype), grad.view(M, -1, grad.shape[-1])).view(M * E, -1), None, None


def route_experts(x: torch.Tensor, router: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
                  b2: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The expert layers of M models, each on its own tokens, in one routing: (the outputs, each
    model's balancing loss (M,), each model's assignments per expert (M, E)).

    ``x`` (M, …, W): model m's tokens; the weights with the model axis first, as a stack holds them:
    ``router`` (M, E, W) (nn.Linear's), ``w1`` (M, E, W, X), ``b1`` (M, E, X), ``w2`` (M, E, X, W),
    ``b2`` (M, E, W). :class:`Experts` is a stack of one; :class:`~headwatch.charlm.stack.StackedCharLM`
    routes all its models at once, so a step's operators do not grow with their number.

    Tokens sorted by (model, expert), one grouped matmul per weight; memory linear in tokens. Each
    (model, expert) pair is one group, ``m·E + e``, of one grouped matmul over the stacked experts
    (``(M·E, …)``, as the stack's embedding offsets each model's rows). The M·N·k token→expert
    assignments (assignment j: token j // k of the M·N, its j % k-th choice) are sorted by group
    (stably: within a group in token order, so each model's rows come in the order its own routing
    would give them), the tokens gathered in that order, every group applied to its contiguous run
    by one grouped matmul (``grouped_matmul``), each output scaled by its router probability, and
    the k outputs of a token summed back in its row. Under autocast the matmul operands are cast to
    the autocast dtype, as ``@`` is.
    """
    M, E = router.shape[:2]
    shape = x.shape
    x2 = x.reshape(M, -1, shape[-1])
    probs, chosen, weight = _route(x2, router, top_k)          # (M, N, E), (M, N, k), (M, N, k)
    n, k = chosen.shape[1:]
    offset = E * torch.arange(M, device=x.device).view(M, 1, 1)
    flat = (chosen + offset).flatten()
    order = torch.argsort(flat, stable=True)
    group = flat[order]                         # (M·N·k,) ascending (model, expert) groups
    ends = torch.searchsorted(group, torch.arange(M * E, device=x.device), right=True)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    ends = ends.to(torch.int32)
    cast = (torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type)
            else None)
    mm = lambda a, w: grouped_matmul(a if cast is None else a.to(cast),
                                     (w if cast is None else w.to(cast)).flatten(0, 1), ends)
    # Every gather's gradient is a gather and a fixed-order sum (_Rows, _SortedRows): deterministic
    # on a GPU too, and without indexing's gradient kernels (a row's copies summed serially).
    rows = M * n * k
    back = torch.empty_like(order).scatter_(0, order, torch.arange(rows, device=x.device))
    h = F.gelu(mm(_Rows.apply(x2.flatten(0, 1), order // k, back, k), w1)
               + _SortedRows.apply(b1.flatten(0, 1), group, M))
    y = mm(h, w2) + _SortedRows.apply(b2.flatten(0, 1), group, M)
    y = y * _Rows.apply(weight.flatten(), order, back, 1).unsqueeze(1).to(y.dtype)
    out = _Rows.apply(y, back, order, 1).view(M * n, k, -1).sum(1)
    counts = counts.view(M, E)
    return out.to(x2.dtype).view(shape), balance_loss(probs, chosen, E, counts), counts


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        width = spec.width
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(spec)
        self.ln2 = nn.LayerNorm(width)
        if spec.experts:
            self.ffn = Experts(spec)
        else:
            self.ffn = nn.Sequential(nn.Linear(width, spec.ffn_mult * width), nn.GELU(),
                                     nn.Linear(spec.ffn_mult * width, width))
        self.dropout = spec.dropout

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + dropped(self.ffn(self.ln2(x)), self.dropout, self.training)


class CharLM(nn.Module):
    """The sweep's model, built from one :class:`ModelSpec`: ``CharLM(spec)``.

    ``CharLM(vocab_size, width, heads, layers=..., ...)`` is shorthand for
    ``CharLM(ModelSpec(vocab_size, width, heads, layers=..., ...))``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        spec = args[0] if len(args) == 1 and not kwargs and isinstance(args[0], ModelSpec) \
            else ModelSpec(*args, **kwargs)
        self.spec = spec
        width = spec.width
        self.tok = nn.Embedding(spec.vocab_size, width)
        self.pos = None if spec.rotary else nn.Embedding(spec.context, width)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, spec.vocab_size, bias=False)
        if self.head.weight.is_meta:    # shapes only (parameter counts): no values to draw
            return
        self.apply(self._init)
        for name, p in self.named_parameters():   # GPT-2: scale the residual projections
            if (name.endswith("attn.o.weight") or name.endswith("ffn.2.weight")
                    or name.endswith("ffn.w2")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * spec.layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, Experts):
            nn.init.normal_(m.w1, 0.0, 0.02)
            nn.init.normal_(m.w2, 0.0, 0.02)
            nn.init.zeros_(m.b1)
            nn.init.zeros_(m.b2)

    # The shape numbers headwatch.model.arch reads (its class family names these attributes), and the
    # vocabulary and context the corpus's readers ask for.
    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def context(self) -> int:
        return self.spec.context

    @property
    def width(self) -> int:
        return self.spec.width

    @property
    def heads(self) -> int:
        return self.spec.heads

    @property
    def layers(self) -> int:
        return self.spec.layers

    @property
    def kv_heads(self) -> int:
        return self.spec.kv_groups

    @property
    def head_dim(self) -> int:
        return self.spec.head_dim

    @property
    def rotary_dims(self) -> int:
        return self.spec.rotary_dims

    @property
    def rotary_base(self) -> float | None:
        return ROTARY_BASE if self.spec.rotary else None

    def expert_layers(self) -> list[Experts]:
        return [b.ffn for b in self.blocks if isinstance(b.ffn, Experts)]

    @property
    def balance_losses(self) -> list[torch.Tensor]:
        """Each expert layer's balancing loss of the last forward ([] for a dense model)."""
        return [m.last_balance for m in self.expert_layers()]

    @property
    def expert_counts(self) -> torch.Tensor | None:
        """(layers, experts) token→expert assignments of the last forward, or None."""
        layers = self.expert_layers()
        return torch.stack([m.last_counts for m in layers]) if layers else None

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.spec.context:
            raise ValueError(f"sequence of {T} tokens is longer than the context {self.spec.context}")
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(T, device=idx.device))
        x = dropped(x, self.spec.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def active_params(self) -> int:
        """Parameters a token uses: all but the (E − k) experts it is not routed to."""
        return self.spec.param_counts()["total_active"]


def count_params(spec: ModelSpec) -> dict:
    """Parameters by block of the model ``spec`` describes, counted from its modules (built on
    the ``meta`` device: shapes, no memory) by :func:`headwatch.model.params.block_counts` — the one
    count that the anatomy's tables use too.

    Keys: ``embeddings`` (V·W), ``positions`` (C·W; 0 with ``rotary``), ``attention``, ``norms``,
    ``ffn``, ``head`` (W·V, untied), ``total``; ``non_embedding`` = attention + norms + ffn (no
    token or position embeddings, no output head); ``ffn_active`` / ``total_active``
    count only the k experts a token is routed to; ``ffn_active_width`` is the FFN
    neurons a token traverses (fW dense, k·X with experts).

    What the modules hold, for reference (the tests check it against hand counts): per
    block, attention 2·W·A + 2·W·A_kv (q, o; k, v; no bias) with A = heads × head size and
    A_kv = kv_heads × head size — 4·W² for the plain model, so splitting a width into
    more heads changes no count; two LayerNorms 2·2W; FFN W·fW + fW + fW·W + W (with
    bias), or with experts a router W·E plus E·(2·W·X + X + W) for expert width X. Plus
    the final LayerNorm 2W.
    """
    with torch.device("meta"):
        model = CharLM(spec)
    b = block_counts(model)
    if b["other"]:
        raise RuntimeError(f"{b['other']} parameters of {spec.to_dict()} fall in no block")
    parts = dict(embeddings=b["input_embeddings"], positions=b["position_embeddings"],
                 attention=b["attention"], norms=b["norms"], ffn=b["ffn"], head=b["output_embeddings"],
                 total=b["total"])
    parts["non_embedding"] = parts["attention"] + parts["norms"] + parts["ffn"]
    idle = sum((m.experts - m.top_k) * (m.w1[0].numel() + m.b1[0].numel() + m.w2[0].numel()
                                        + m.b2[0].numel()) for m in model.expert_layers())
    parts["ffn_active"] = parts["ffn"] - idle
    parts["total_active"] = parts["total"] - idle
    parts["ffn_active_width"] = spec.ffn_active_width
    return parts
