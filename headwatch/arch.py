"""One adapter per architecture family: the only code that knows module names.

Everything else in headwatch addresses a head as ``(layer, head)`` (0-based,
layer first) and asks the adapter where that head lives. A family is one
:class:`Family` entry — in :data:`FAMILIES` by transformers ``model_type``, or
in :data:`CLASS_FAMILIES` by class name for a model without a transformers
config (the sweep's character model; named, never imported here): dotted
module paths inside a block, the norm class in front of attention, how
attention weights are read, and for a class family the attributes that hold
its shape.

**Sites** (:data:`SITES`) are the named places of each layer where
:mod:`headwatch.interventions` reads or edits a forward pass:

* ``z`` — the input of the attention output projection; one unit per head
  (its ``head_dim`` slice, :meth:`Adapter.out_columns`). A head's "voice".
* ``k`` / ``v`` — the key / value projection outputs; one unit per key/value
  group (:meth:`Adapter.key_slice`, :meth:`Adapter.value_slice`; inside the
  fused QKV output for GPT-NeoX and GPT-2). Before any rotary embedding.
* ``pattern`` — the attention weights ``[batch, heads, T, T]``; one unit per head.
* ``resid`` — a block's output ``[batch, T, width]``; ``resid_in`` — its input.

:func:`sites_table` lists the module each site hooks, per family.

The rest of what the code must know about a family lives here too: the shape
from a config (:func:`shape_of`), the context length (:func:`context_length`),
the rotary type (:func:`rope_type`), the norm in front of attention
(:meth:`Adapter.input_norm_params`), the attention scale
(:meth:`Adapter.attention_scale`), a family's config rebuilt without key
sharing (:func:`ungrouped_config`) and how a model is called
(:meth:`Adapter.logits`, :meth:`Adapter.run_body`).

A key/value group is ``kv_group = head // (heads // kv_heads)``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:      # torch is imported where a model is at hand: the config checks read
    import torch       # shapes from config.json through this module without importing it
    from torch import nn


class HeadAddressError(IndexError):
    """A (layer, head) — or a (layer, kv group), or a site — that does not exist in the model."""


Head = tuple[int, int]


def head_label(layer: int, head: int) -> str:
    """A head's name in every table and figure: ``L{layer}H{head}``."""
    return f"L{layer}H{head}"


def heads_label(heads: Sequence[Head]) -> str:
    """Heads as ``"L0H1 L2H3"``; ``"none"`` for no head."""
    return " ".join(head_label(l, h) for l, h in heads) if heads else "none"


@dataclass(frozen=True)
class Family:
    name: str
    layers: str            # dotted path from the top-level model to the ModuleList of blocks
    attention: str         # the attention module inside a block
    out_proj: str          # dotted path inside a block
    qkv: tuple[str, ...]   # (q, k, v) paths inside a block, or one fused path
    input_norm: str
    norm: str              # class of the input norm: "LayerNorm" or "RMSNorm" (its by-hand formula)
    fused_layout: str = "" # "per_head" (GPT-NeoX: [q_h k_h v_h] per head) or "qkv" (GPT-2: [Q K V])
    conv1d: bool = False   # GPT-2's Conv1D stores weight as (in, out)
    mlp: str = "mlp"       # the feed-forward network inside a block (anatomy: parameters by block)
    # How the pattern site is read: "weights" = the attention module returns its weights
    # (transformers' eager attention); "recompute" = softmax(q·kᵀ/√d) under the causal mask
    # from the q/k projection outputs (a model that calls a fused kernel, with no rotary).
    pattern: str = "weights"
    # A model without a transformers config: its class by dotted name, the attributes that
    # hold its shape, and its embedding modules.
    model_class: str = ""
    shape_attrs: dict = field(default_factory=dict)
    embeddings: tuple[str, str] = ("", "")   # (input, output) module paths; "" = ask transformers

    @property
    def has_config(self) -> bool:
        return not self.model_class

    @property
    def qkv_paths(self) -> tuple[str, str, str]:
        """The (q, k, v) projection paths; the fused module's three times when fused."""
        return self.qkv if len(self.qkv) == 3 else self.qkv * 3


FAMILIES = {
    "gpt_neox": Family("gpt_neox", "gpt_neox.layers", "attention", "attention.dense",
                       ("attention.query_key_value",), "input_layernorm", "LayerNorm",
                       fused_layout="per_head"),
    "llama": Family("llama", "model.layers", "self_attn", "self_attn.o_proj",
                    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "input_layernorm",
                    "RMSNorm"),
    "qwen2": Family("qwen2", "model.layers", "self_attn", "self_attn.o_proj",
                    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "input_layernorm",
                    "RMSNorm"),
    "gpt2": Family("gpt2", "transformer.h", "attn", "attn.c_proj", ("attn.c_attn",), "ln_1", "LayerNorm",
                   fused_layout="qkv", conv1d=True),
}
"""The transformers families, by ``config.model_type``."""

_CHARLM = Family("charlm", "blocks", "attn", "attn.o", ("attn.q", "attn.k", "attn.v"), "ln1", "LayerNorm",
                 mlp="ffn", pattern="recompute", model_class="headwatch.charlm.model.CharLM",
                 shape_attrs=dict(layers="layers", heads="heads", kv_heads="kv_heads", width="width",
                                  head_dim="head_dim"),
                 embeddings=("tok", "head"))
CLASS_FAMILIES = {_CHARLM.model_class: _CHARLM}
"""Models without a transformers config, by class (dotted name; never imported here): the
sweep's character model, whose scaled_dot_product_attention returns no weights, so its
pattern is recomputed (no rotary, scale 1/√head_dim)."""


def all_families() -> dict[str, Family]:
    """Every family by name: the transformers ones, then those known by class."""
    return {**FAMILIES, **{f.name: f for f in CLASS_FAMILIES.values()}}

SITES = {
    "z": "input of the attention output projection (per head)",
    "k": "key projection output (per key/value group)",
    "v": "value projection output (per key/value group)",
    "pattern": "attention weights [batch, heads, T, T] (per head)",
    "resid": "a block's output [batch, T, width]",
    "resid_in": "a block's input [batch, T, width]",
}


def _get(module: nn.Module, dotted: str) -> nn.Module:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def _class_name(model) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def family_of(config) -> Family:
    """The family of a transformers config (``model_type``)."""
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        raise ValueError(
            f"model_type {kind!r} has no adapter; headwatch knows {sorted(FAMILIES)} "
            "(add one to headwatch/arch.py: FAMILIES)")
    return FAMILIES[kind]


def family_of_model(model: nn.Module) -> Family:
    """The family of a loaded model: by class name for models without a config, else its config."""
    name = _class_name(model)
    if name in CLASS_FAMILIES:
        return CLASS_FAMILIES[name]
    if getattr(model, "config", None) is None:
        raise ValueError(f"{name} has no transformers config and no entry in headwatch/arch.py: "
                         "CLASS_FAMILIES")
    return family_of(model.config)


# Config keys of each number, in the order they are tried (GPT-2 and GPT-NeoX spell them
# their own way); a config is a transformers config object or a config.json dict.
CONFIG_KEYS = dict(
    width=("hidden_size", "n_embd"),
    heads=("num_attention_heads", "n_head"),
    layers=("num_hidden_layers", "n_layer", "num_layers"),
    kv_heads=("num_key_value_heads",),
    head_dim=("head_dim",),
    context=("max_position_embeddings", "n_positions", "n_ctx", "seq_length"),
    vocab=("vocab_size",),
    ffn=("intermediate_size", "n_inner"),
)


def config_value(config, what: str):
    """The first of :data:`CONFIG_KEYS` ``[what]`` that ``config`` sets (None if none)."""
    for key in CONFIG_KEYS[what]:
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if value is not None:
            return value
    return None


def _attr(config, key: str, default=None):
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


def shape_of(config) -> dict:
    """Layers, heads, kv heads, width, head size and rotary settings from a config alone
    (a transformers config or a ``config.json`` dict; a number the config lacks is None)."""
    c = config
    width, heads, layers = config_value(c, "width"), config_value(c, "heads"), config_value(c, "layers")
    kv_heads = config_value(c, "kv_heads") or heads
    head_dim = config_value(c, "head_dim") or (width // heads if width and heads and width % heads == 0
                                               else None)
    rope = _attr(c, "rope_parameters", {})
    model_type = _attr(c, "model_type")
    if model_type == "gpt2":
        rotary_dims, base = 0, None
    else:
        base = rope.get("rope_theta", _attr(c, "rope_theta"))
        frac = rope.get("partial_rotary_factor", _attr(c, "rotary_pct", 1.0))
        rotary_dims = int(head_dim * frac) if head_dim else None
    return dict(family=model_type, layers=layers, heads=heads, kv_heads=kv_heads, width=width,
                head_dim=head_dim, rotary_dims=rotary_dims, rotary_base=base)


def model_shape(model: nn.Module) -> dict:
    """:func:`shape_of` for any model with an adapter (a config, or the attributes its family names)."""
    fam = family_of_model(model)
    if fam.has_config:
        return shape_of(model.config)
    s = {key: int(getattr(model, attr)) for key, attr in fam.shape_attrs.items()}
    return dict(family=fam.name, **s, rotary_dims=0, rotary_base=None)


def rope_type(config) -> str:
    """The rotary embedding's type (``"default"`` for plain RoPE), ``""`` without rotary."""
    if not shape_of(config)["rotary_dims"]:
        return ""
    return _attr(config, "rope_parameters", {}).get("rope_type", "default")


def context_length(config) -> int | None:
    """The longest sequence the model's position encoding is configured for."""
    n = config_value(config, "context")
    return int(n) if n else None


def vocab_size(config) -> int | None:
    n = config_value(config, "vocab")
    return int(n) if n else None


def ffn_width(config) -> int | None:
    """The feed-forward network's hidden width (GPT-2: ``n_inner`` None means 4 × width)."""
    n = config_value(config, "ffn")
    if n is None and config_value(config, "width"):
        return 4 * int(config_value(config, "width"))
    return int(n) if n else None


def tied_embeddings(config) -> bool:
    """Whether the output head shares the input embedding matrix."""
    return bool(_attr(config, "tie_word_embeddings", False))


def ungrouped_config(config, layers: int):
    """The same family and sizes with ``kv heads = heads`` and ``layers`` blocks (a fresh config)."""
    from transformers import AutoConfig

    d = copy.deepcopy(config.to_dict())
    for key in ("num_hidden_layers", "n_layer"):
        if key in d:
            d[key] = layers
    heads = d.get("num_attention_heads", d.get("n_head"))
    if "num_key_value_heads" in d:
        d["num_key_value_heads"] = heads
    for key in ("layer_types", "max_window_layers", "quantization_config", "architectures"):
        d.pop(key, None)
    model_type = d.pop("model_type")
    return AutoConfig.for_model(model_type, **d)


class Adapter:
    """Where the heads of one loaded model live."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.family = family_of_model(model)
        s = model_shape(model)
        self.n_layers: int = s["layers"]
        self.n_heads: int = s["heads"]
        self.n_kv_heads: int = s["kv_heads"]
        self.width: int = s["width"]
        self.head_dim: int = s["head_dim"]
        self.rotary_dims = s["rotary_dims"]
        self.rotary_base = s["rotary_base"]
        if self.head_dim is None or self.n_heads % self.n_kv_heads:
            raise ValueError(f"inconsistent head shape in config: {s}")
        self.blocks = _get(model, self.family.layers)
        if len(self.blocks) != self.n_layers:
            raise ValueError(f"config says {self.n_layers} layers, model has {len(self.blocks)}")
        # Cross-check the config's head size against the real tensor shape.
        w = self.out_proj(0).weight
        n_in = w.shape[0] if self.family.conv1d else w.shape[1]
        if n_in != self.n_heads * self.head_dim:
            raise ValueError(f"output projection takes {n_in} inputs, expected heads × head size = "
                             f"{self.n_heads} × {self.head_dim}")

    @property
    def config(self):
        return getattr(self.model, "config", None)

    # ---- addresses ---------------------------------------------------------
    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    def kv_group(self, head: int) -> int:
        return head // self.group_size

    def heads(self) -> list[tuple[int, int]]:
        """Every (layer, head), layer-major: the order of every per-head table."""
        return [(l, h) for l in range(self.n_layers) for h in range(self.n_heads)]

    def check_head(self, layer: int, head: int) -> None:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise HeadAddressError(
                f"head (layer={layer}, head={head}) does not exist: the model has "
                f"{self.n_layers} layers × {self.n_heads} heads (0-based)")

    def check_group(self, layer: int, group: int) -> None:
        if not (0 <= layer < self.n_layers and 0 <= group < self.n_kv_heads):
            raise HeadAddressError(
                f"key/value group (layer={layer}, group={group}) does not exist: the model has "
                f"{self.n_layers} layers × {self.n_kv_heads} key/value groups (0-based)")

    # ---- modules -----------------------------------------------------------
    def block(self, layer: int) -> nn.Module:
        return self.blocks[layer]

    def attention(self, layer: int) -> nn.Module:
        return _get(self.blocks[layer], self.family.attention)

    def out_proj(self, layer: int) -> nn.Module:
        return _get(self.blocks[layer], self.family.out_proj)

    def input_norm(self, layer: int) -> nn.Module:
        return _get(self.blocks[layer], self.family.input_norm)

    def out_columns(self, head: int) -> slice:
        """Input features of the output projection that carry ``head``."""
        return slice(head * self.head_dim, (head + 1) * self.head_dim)

    def out_weight_for_head(self, layer: int, head: int) -> torch.Tensor:
        """A view of Wo's entries that read ``head`` (columns; rows for Conv1D)."""
        self.check_head(layer, head)
        w = self.out_proj(layer).weight
        cols = self.out_columns(head)
        return w[cols, :] if self.family.conv1d else w[:, cols]

    def _qkv_module(self, layer: int, which: int) -> nn.Module:
        return _get(self.blocks[layer], self.family.qkv_paths[which])

    def query_proj(self, layer: int) -> nn.Module:
        return self._qkv_module(layer, 0)

    def key_proj(self, layer: int) -> nn.Module:
        return self._qkv_module(layer, 1)

    def value_proj(self, layer: int) -> nn.Module:
        return self._qkv_module(layer, 2)

    def _fused_slice(self, which: int, index: int) -> slice:
        d = self.head_dim
        if self.family.fused_layout == "per_head":      # [q_h k_h v_h] for each head h
            start = index * 3 * d + which * d
        elif self.family.fused_layout == "qkv":         # [Q | K | V], each width wide
            start = which * self.n_heads * d + index * d
        else:                                           # separate q/k/v projections
            start = index * d
        return slice(start, start + d)

    def query_slice(self, head: int) -> slice:
        """Output features of ``query_proj`` that hold ``head``'s query."""
        return self._fused_slice(0, head)

    def key_slice(self, kv_group: int) -> slice:
        """Output features of ``key_proj`` that hold ``kv_group``'s key."""
        return self._fused_slice(1, kv_group)

    def value_slice(self, kv_group: int) -> slice:
        """Output features of ``value_proj`` that hold ``kv_group``'s value."""
        return self._fused_slice(2, kv_group)

    def projection_rows(self, module: nn.Module, features: slice) -> list[torch.Tensor]:
        """Views of the weight (and bias) entries that produce output ``features`` of a projection."""
        w = module.weight
        out = [w[:, features] if self.family.conv1d else w[features, :]]
        if getattr(module, "bias", None) is not None:
            out.append(module.bias[features])
        return out

    def describe(self) -> dict:
        return dict(family=self.family.name, layers=self.n_layers, heads=self.n_heads,
                    kv_heads=self.n_kv_heads, width=self.width, head_dim=self.head_dim,
                    rotary_dims=self.rotary_dims, rotary_base=self.rotary_base)

    def mlp(self, layer: int) -> nn.Module:
        """The feed-forward network of a block."""
        return _get(self.blocks[layer], self.family.mlp)

    def attention_projections(self, layer: int) -> list[nn.Module]:
        """The distinct q/k/v (or fused QKV) and output projection modules of a layer."""
        mods = [self.query_proj(layer), self.key_proj(layer), self.value_proj(layer), self.out_proj(layer)]
        return list({id(m): m for m in mods}.values())

    def embeddings(self) -> tuple[nn.Module, nn.Module]:
        """(input embeddings, output head) modules; they share one weight tensor when tied."""
        inp, out = self.family.embeddings
        if inp:
            return _get(self.model, inp), _get(self.model, out)
        return self.model.get_input_embeddings(), self.model.get_output_embeddings()

    # ---- sites ---------------------------------------------------------------
    def site_units(self, site: str) -> int:
        """How many units a site has in one layer: heads, key/value groups, or 0 (a whole tensor)."""
        return {"z": self.n_heads, "pattern": self.n_heads, "k": self.n_kv_heads, "v": self.n_kv_heads,
                "resid": 0, "resid_in": 0}[check_site(site)]

    def check_unit(self, site: str, layer: int, unit: int | None) -> None:
        """HeadAddressError unless ``unit`` of ``site`` exists in ``layer`` (None = the whole site)."""
        if site in ("z", "pattern"):
            if unit is None:
                self.check_head(layer, 0)
            else:
                self.check_head(layer, unit)
        elif site in ("k", "v"):
            self.check_group(layer, 0 if unit is None else unit)
        else:
            self.check_head(layer, 0)
            if unit is not None:
                raise HeadAddressError(f"site {site!r} has no units (it is a whole block's tensor); "
                                       f"got unit {unit}")

    def site_module(self, site: str, layer: int) -> nn.Module:
        """The module whose input (z, resid_in) or output (k, v, pattern, resid) is the site."""
        return {"z": self.out_proj, "k": self.key_proj, "v": self.value_proj, "pattern": self.attention,
                "resid": self.block, "resid_in": self.block}[check_site(site)](layer)

    def site_slice(self, site: str, unit: int) -> slice:
        """The features of the site's tensor (last dimension) that hold ``unit``."""
        if site == "z":
            return self.out_columns(unit)
        if site == "k":
            return self.key_slice(unit)
        if site == "v":
            return self.value_slice(unit)
        raise HeadAddressError(f"site {site!r} is not addressed by feature slices")

    def site_path(self, site: str) -> str:
        """The dotted path of the site's module inside a block (``""`` = the block itself)."""
        f = self.family
        return {"z": f.out_proj, "k": f.qkv_paths[1], "v": f.qkv_paths[2], "pattern": f.attention,
                "resid": "", "resid_in": ""}[check_site(site)]

    # ---- what the by-hand formulas need --------------------------------------
    def input_norm_params(self, layer: int) -> dict:
        """The norm in front of attention: kind ("LayerNorm" / "RMSNorm"), weight, bias, eps."""
        from torch import nn

        norm = self.input_norm(layer)
        if not (type(norm).__name__.endswith(self.family.norm)
                or (self.family.norm == "LayerNorm" and isinstance(norm, nn.LayerNorm))):
            raise NotImplementedError(f"{self.family.name}: the input norm is {type(norm).__name__}, "
                                      f"not the {self.family.norm} this family declares")
        eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None)
        if eps is None and self.config is not None:
            eps = getattr(self.config, "rms_norm_eps", None)
        return dict(kind=self.family.norm, weight=norm.weight, bias=getattr(norm, "bias", None),
                    eps=float(eps))

    @property
    def rope_type(self) -> str:
        return rope_type(self.config) if self.config is not None else ""

    def attention_scale(self, layer: int) -> float:
        """1/sqrt(head size), with GPT-2's optional switches."""
        cfg = self.config
        scale = self.head_dim ** -0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            scale /= float(layer + 1)
        return scale

    # ---- calling the model -----------------------------------------------------
    def logits(self, ids: torch.Tensor, keep: int | torch.Tensor = 0) -> torch.Tensor:
        """The model's logits for ``ids`` ``[B, T]``; ``keep`` as transformers' ``logits_to_keep``
        (0 = every position, n = the last n, a 1-D tensor = those positions)."""
        if self.family.has_config:
            return self.model(input_ids=ids, use_cache=False, logits_to_keep=keep).logits
        import torch

        out = self.model(ids)
        if isinstance(keep, torch.Tensor):
            return out[:, keep]
        return out[:, -keep:] if keep else out

    def run_body(self, ids: torch.Tensor) -> None:
        """Run the blocks on ``ids`` (without the vocabulary projection where the family allows)."""
        if self.family.has_config:
            self.model.base_model(input_ids=ids, use_cache=False)
        else:
            self.model(ids)


def check_site(site: str) -> str:
    if site not in SITES:
        raise HeadAddressError(f"unknown site {site!r}; the sites are {list(SITES)}")
    return site


def sites_table(families: Iterable[str] = ()) -> list[dict]:
    """Per family and site: the module path inside a block and whether it is hooked on its input
    or output (the table of ``docs`` and of the tests)."""
    rows, known = [], all_families()
    for name in families or known:
        f = known[name]
        qkv = f.qkv_paths
        where = {"z": (f.out_proj, "input"), "k": (qkv[1], "output"), "v": (qkv[2], "output"),
                 "pattern": (f.attention, "output: its weights" if f.pattern == "weights"
                             else f"recomputed from {qkv[0]} and {qkv[1]}"),
                 "resid": ("(block)", "output"), "resid_in": ("(block)", "input")}
        for site, (path, side) in where.items():
            rows.append(dict(family=name, site=site, blocks=f.layers, module=path, hooked=side))
    return rows


def model_parts(model: nn.Module) -> dict:
    """The modules each parameter block is made of (headwatch.anatomy counts them).

    Keys: ``input_embeddings``, ``output_embeddings`` (modules; when tied they share
    one weight tensor), ``blocks``, ``attention`` (every projection of every layer),
    ``ffn`` (every layer's feed-forward network) and ``norms`` (every norm module). Works for every family of
    :data:`FAMILIES`, the sweep's character model included.
    """
    a = Adapter(model)
    inp, out = a.embeddings()
    return dict(input_embeddings=[inp], output_embeddings=[out], blocks=list(a.blocks),
                attention=[m for l in range(a.n_layers) for m in a.attention_projections(l)],
                ffn=[a.mlp(l) for l in range(a.n_layers)],
                norms=[m for m in model.modules() if is_norm(m)])


NORM_CLASSES = ("LayerNorm", "RMSNorm")
"""The norms of every family, by class name (transformers names its RMSNorm per family)."""


def is_norm(module) -> bool:
    """A LayerNorm or RMSNorm of any family."""
    from torch import nn

    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(NORM_CLASSES)
