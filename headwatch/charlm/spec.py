"""The character model's options, in one object (nanoGPT's config object).

:class:`ModelSpec` names every option of :class:`headwatch.charlm.model.CharLM`
once, with its default, and is what every module of the model is built from
(``CharLM(spec)``, ``Block(spec)``, ``Attention(spec)``, ``Experts(spec)``), what a
saved model records (:meth:`ModelSpec.to_dict`) and what its parameters are
counted from (:meth:`ModelSpec.param_counts`: arithmetic on the shape, never a built
model, so that a config check of ``layers: 100000`` costs microseconds, not minutes and
gigabytes; ``tests/test_charlm.py`` holds it equal to counting the modules of a built model,
:func:`headwatch.charlm.model.count_params`, for every option).

It imports only the standard library (never :mod:`headwatch.charlm.model`), so that the
sweep's planning and config checks (read on every Snakemake parse) can resolve a grid
entry without torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..names import BYTES_PER_NUMBER, kv_cache_bytes


@dataclass(frozen=True)
class ModelSpec:
    """Every option of the sweep's character model. The options after ``ffn_mult`` are
    off by default: the plain model is unchanged, weight for weight, for the same seed.

    * ``head_size``: the size of each head when it is not width ÷ heads (attention's
      inner width is then heads × head_size).
    * ``kv_heads``: grouped-query attention; query head h reads key/value group
      ``h // (heads // kv_heads)`` (None = heads: plain attention).
    * ``experts`` (E > 0): the FFN becomes E experts behind a router that sends each
      token to its ``top_k`` most probable experts; ``expert_width`` defaults to
      ffn_mult × width ÷ top_k (the FFN neurons a token traverses equal the dense model's).
    * ``rotary``: rotary position embeddings (every dimension of each head's query and key
      turned by position × base^(-2i/head size), rotate-half pairs, base :data:`ROTARY_BASE`)
      instead of the learned absolute positions, which the model then does not have: what
      a head reads of position is then an offset, never a place. The known circuit's model
      (protocol §5f); a sweep's grid cannot set it (:data:`SWEEP_OPTIONS`).
    * ``dropout`` (p in [0, 1)): nanoGPT's dropout, in training only, on the embeddings' sum, the
      attention weights and the outputs of attention and of the FFN before each joins the
      residual stream (:mod:`headwatch.charlm.model`); 0, the default, is the model without it,
      operation for operation.

    Construction checks the shape and raises ValueError naming what is unsound.
    """

    vocab_size: int
    width: int
    heads: int
    layers: int = 4
    context: int = 128
    ffn_mult: int = 4
    head_size: int | None = None
    kv_heads: int | None = None
    experts: int = 0
    top_k: int = 2
    expert_width: int | None = None
    rotary: bool = False
    dropout: float = 0.0

    def __post_init__(self):
        if self.heads < 1 or self.width < 1:
            raise ValueError(f"width ({self.width}) and heads ({self.heads}) must be positive")
        if self.head_size is None and self.width % self.heads:
            raise ValueError(f"heads {self.heads} do not divide width {self.width}: the head size would be "
                             f"{self.width / self.heads:g}; pick heads among the divisors of {self.width}")
        if self.head_size is not None and self.head_size < 1:
            raise ValueError(f"head_size {self.head_size} must be positive")
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError(f"kv_heads {self.kv_heads} must divide heads {self.heads} "
                             "(query heads per key/value group)")
        if self.experts:
            if self.experts < 1 or not 1 <= self.top_k <= self.experts:
                raise ValueError(f"top_k {self.top_k} must lie in [1, experts={self.experts}]")
            if self.expert_width is None and (self.ffn_mult * self.width) % self.top_k:
                raise ValueError(f"top_k {self.top_k} does not divide the dense FFN width "
                                 f"{self.ffn_mult * self.width}; give expert_width")
            if self.expert_width is not None and self.expert_width < 1:
                raise ValueError(f"expert_width {self.expert_width} must be positive")
        elif self.expert_width is not None:
            raise ValueError("expert_width needs experts > 0")
        if self.rotary and self.head_dim % 2:
            raise ValueError(f"rotary positions turn pairs of dimensions: head size {self.head_dim} is odd")
        if not (isinstance(self.dropout, (int, float)) and not isinstance(self.dropout, bool)
                and 0 <= self.dropout < 1):
            raise ValueError(f"dropout {self.dropout!r} must be a number in [0, 1) (the share of units dropped)")

    # ---- resolved options ----------------------------------------------------
    @property
    def head_dim(self) -> int:
        """The size of each head: ``head_size``, or width ÷ heads."""
        return self.width // self.heads if self.head_size is None else self.head_size

    @property
    def kv_groups(self) -> int:
        """Key/value heads: ``kv_heads``, or heads (plain attention)."""
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def routed(self) -> int:
        """Experts a token is sent to: ``top_k`` with experts, 0 for a dense FFN."""
        return self.top_k if self.experts else 0

    @property
    def expert_hidden(self) -> int:
        """Each expert's hidden width (0 for a dense FFN)."""
        if not self.experts:
            return 0
        return self.ffn_mult * self.width // self.top_k if self.expert_width is None else self.expert_width

    @property
    def ffn_active_width(self) -> int:
        """FFN neurons a token traverses: ffn_mult × width dense, top_k × expert width with experts."""
        return self.routed * self.expert_hidden if self.experts else self.ffn_mult * self.width

    @property
    def rotary_dims(self) -> int:
        """Dimensions of each head's query and key that rotary positions turn: all of them with
        ``rotary``, else 0."""
        return self.head_dim if self.rotary else 0

    def kv_cache_bytes_per_token(self, bytes_per_number: int = BYTES_PER_NUMBER["float32"]) -> int:
        """Keys and values of every layer for one token: 2 × layers × kv heads × head size numbers."""
        return kv_cache_bytes(self.layers, self.kv_groups, self.head_dim, bytes_per_number)

    # ---- records ---------------------------------------------------------------
    def to_dict(self) -> dict:
        """The saved form: the six shape numbers, and each option only when it is set."""
        out = {k: v for k, v in asdict(self).items() if k not in OPTIONS}
        for k in OPTIONS:
            v = getattr(self, k)
            if k == "top_k" and not self.experts:
                continue
            if v not in (None, 0):
                out[k] = v
        return out

    def token_macs(self, context: int | None = None) -> float:
        """Multiply-adds of one forward pass per token, the weight products and attention's own: every
        active weight matrix once (attention's projections, the routed FFN, the unembedding; not the
        embeddings, a lookup) and, at ``context`` tokens (default: the spec's), each head's query-key
        and weight-value products over the earlier positions (context / 2 on average, causal)."""
        p = self.param_counts()
        T = self.context if context is None else context
        scores = self.layers * self.heads * self.head_dim * T         # q·k and weights·v: 2 x T / 2 positions
        return float(p["attention"] + p["ffn_active"] + p["head"] + scores)

    def step_macs(self, batch: int, context: int | None = None) -> float:
        """Multiply-adds of one training step of ``batch`` rows: the forward pass and the backward's
        two (the gradient of each product's input and of its weight), 3 x the forward's."""
        T = self.context if context is None else context
        return 3.0 * batch * T * self.token_macs(T)

    @classmethod
    def from_settings(cls, vocab_size: int, settings: dict) -> "ModelSpec":
        """The spec of a sweep job's model settings (``headwatch.settings.sweep.model_of``: width,
        heads, the sweep's model defaults, the entry's options; its training-only keys skipped)."""
        unknown = sorted(set(settings) - set(FIELDS) - set(TRAINING_OPTIONS))
        if unknown:
            raise ValueError(f"model settings {unknown} are not options of the character model "
                             f"(options: {list(FIELDS[1:])})")
        return cls(vocab_size=int(vocab_size), **{k: v for k, v in settings.items() if k in FIELDS})

    def param_counts(self) -> dict:
        """Parameters by block, from the shape's arithmetic (what the modules of
        :mod:`headwatch.charlm.model` hold; :func:`headwatch.charlm.model.count_params` counts
        the same from a model built on the ``meta`` device, and a test holds the two equal).

        Keys: ``embeddings`` (V·W), ``positions`` (C·W; 0 with ``rotary``), ``attention``, ``norms``, ``ffn``,
        ``head`` (W·V, untied), ``total``; ``non_embedding`` = attention + norms + ffn;
        ``ffn_active`` / ``total_active`` count only the ``top_k`` experts a token is routed
        to; ``ffn_active_width`` is the FFN neurons a token traverses.

        Per block: attention 2·W·A + 2·W·A_kv (q, o; k, v; no bias) with A = heads × head size
        and A_kv = kv_heads × head size; two LayerNorms 2·2W; FFN W·fW + fW + fW·W + W (with
        bias), or with experts a router W·E plus E·(2·W·X + X + W) for expert width X. Plus
        the final LayerNorm 2W.
        """
        W, L = self.width, self.layers
        inner, kv_inner = self.heads * self.head_dim, self.kv_groups * self.head_dim
        if self.experts:
            expert = 2 * W * self.expert_hidden + self.expert_hidden + W
            ffn_block, idle_block = W * self.experts + self.experts * expert, (self.experts - self.top_k) * expert
        else:
            hidden = self.ffn_mult * W
            ffn_block, idle_block = 2 * W * hidden + hidden + W, 0
        parts = dict(embeddings=self.vocab_size * W, positions=0 if self.rotary else self.context * W,
                     attention=L * (2 * W * inner + 2 * W * kv_inner), norms=L * 4 * W + 2 * W,
                     ffn=L * ffn_block, head=W * self.vocab_size)
        parts["total"] = sum(parts.values())
        parts["non_embedding"] = parts["attention"] + parts["norms"] + parts["ffn"]
        parts["ffn_active"] = parts["ffn"] - L * idle_block
        parts["total_active"] = parts["total"] - L * idle_block
        parts["ffn_active_width"] = self.ffn_active_width
        return parts


FIELDS = tuple(f.name for f in fields(ModelSpec))
"""Every option name, in the constructor's order."""
OPTIONS = FIELDS[FIELDS.index("head_size"):]
"""The options that are off by default (the plain model has none of them)."""
SWEEP_OPTIONS = tuple(k for k in OPTIONS if k != "rotary")
"""The options a sweep's grid entry may set: every one but ``rotary``, which only the known
circuit's model uses (protocol §5f) and the sweep's config, checks and slugs do not know."""
ROTARY_BASE = 10000.0
"""The base of the ``rotary`` option's frequencies (RoFormer's and Llama's)."""
DEFAULTS = {f.name: f.default for f in fields(ModelSpec) if f.name not in ("vocab_size", "width", "heads")}
"""Each option's default, read from the dataclass (typed once, above)."""
TRAINING_OPTIONS = {"balance": 0.0}
"""Keys of a grid entry that set training, not the model, with their defaults: ``balance``,
the weight of the experts' load-balancing loss (0 = none; only with experts)."""
