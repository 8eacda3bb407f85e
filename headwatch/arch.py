"""One adapter per architecture family: the only code that knows module names.

Everything else in headwatch addresses a head as ``(layer, head)`` (0-based,
layer first) and asks the adapter where that head lives:

* ``out_proj(layer)`` — the attention output projection. A head's "voice" is
  its ``head_dim`` slice of this module's *input*; every cut goes through it.
* ``out_columns(layer, head)`` — that slice, as a ``slice`` of input features.
* ``key_proj(layer)`` / ``key_slice(kv_group)`` — where a key/value group's
  keys are in the key projection's *output* (fused QKV for GPT-NeoX and GPT-2).
* ``query_slice(head)`` / ``value_slice(kv_group)`` — the same for queries and values.
* ``input_norm(layer)`` — the norm in front of attention.
* ``rotary_dims`` / ``rotary_base`` — what rotary embedding the family uses.

A key/value group is ``kv_group = head // (heads // kv_heads)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class HeadAddressError(IndexError):
    """A (layer, head) that does not exist in the model."""


@dataclass(frozen=True)
class Family:
    name: str
    layers: str            # dotted path from the top-level model to the ModuleList of blocks
    out_proj: str          # dotted path inside a block
    qkv: tuple[str, ...]   # (q, k, v) paths inside a block, or one fused path
    input_norm: str
    fused_layout: str = "" # "per_head" (GPT-NeoX: [q_h k_h v_h] per head) or "qkv" (GPT-2: [Q K V])
    conv1d: bool = False   # GPT-2's Conv1D stores weight as (in, out)
    mlp: str = "mlp"       # the feed-forward network inside a block (anatomy: parameters by block)


FAMILIES = {
    "gpt_neox": Family("gpt_neox", "gpt_neox.layers", "attention.dense",
                       ("attention.query_key_value",), "input_layernorm", fused_layout="per_head"),
    "llama": Family("llama", "model.layers", "self_attn.o_proj",
                    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "input_layernorm"),
    "qwen2": Family("qwen2", "model.layers", "self_attn.o_proj",
                    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "input_layernorm"),
    "gpt2": Family("gpt2", "transformer.h", "attn.c_proj", ("attn.c_attn",), "ln_1",
                   fused_layout="qkv", conv1d=True),
}


def _get(module: nn.Module, dotted: str) -> nn.Module:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def family_of(config) -> Family:
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        raise ValueError(
            f"model_type {kind!r} has no adapter; headwatch knows {sorted(FAMILIES)} "
            "(add one to headwatch/arch.py: FAMILIES)")
    return FAMILIES[kind]


def shape_of(config) -> dict:
    """Layers, heads, kv heads, width, head size and rotary settings from a config alone."""
    c = config
    width = getattr(c, "hidden_size", None) or getattr(c, "n_embd")
    heads = getattr(c, "num_attention_heads", None) or getattr(c, "n_head")
    layers = getattr(c, "num_hidden_layers", None) or getattr(c, "n_layer")
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or (width // heads if width % heads == 0 else None)
    rope = getattr(c, "rope_parameters", None) or {}
    if c.model_type == "gpt2":
        rotary_dims, base = 0, None
    else:
        base = rope.get("rope_theta", getattr(c, "rope_theta", None))
        frac = rope.get("partial_rotary_factor", getattr(c, "rotary_pct", 1.0))
        rotary_dims = int(head_dim * frac) if head_dim else None
    return dict(family=c.model_type, layers=layers, heads=heads, kv_heads=kv_heads, width=width,
                head_dim=head_dim, rotary_dims=rotary_dims, rotary_base=base)


class Adapter:
    """Where the heads of one loaded model live."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.family = family_of(model.config)
        s = shape_of(model.config)
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

    # ---- modules -----------------------------------------------------------
    def block(self, layer: int) -> nn.Module:
        return self.blocks[layer]

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
        paths = self.family.qkv
        return _get(self.blocks[layer], paths[which] if len(paths) == 3 else paths[0])

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


def model_parts(model: nn.Module) -> dict:
    """The modules each parameter block is made of (headwatch.anatomy counts them).

    Keys: ``input_embeddings``, ``output_embeddings`` (modules; when tied they share
    one weight tensor), ``blocks``, ``attention`` (every projection of every layer) and
    ``ffn`` (every layer's feed-forward network). Works for the Hugging Face
    families above and for the sweep's ``CharLM`` (headwatch.charlm.model).
    """
    from .charlm.model import CharLM

    if isinstance(model, CharLM):
        blocks = list(model.blocks)
        return dict(input_embeddings=[model.tok], output_embeddings=[model.head], blocks=blocks,
                    attention=[m for b in blocks for m in (b.attn.q, b.attn.k, b.attn.v, b.attn.o)],
                    ffn=[b.ffn for b in blocks])
    a = Adapter(model)
    return dict(input_embeddings=[model.get_input_embeddings()],
                output_embeddings=[model.get_output_embeddings()], blocks=list(a.blocks),
                attention=[m for l in range(a.n_layers) for m in a.attention_projections(l)],
                ffn=[a.mlp(l) for l in range(a.n_layers)])
