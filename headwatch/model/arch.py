"""One adapter per architecture family: the only code that knows module names and the
rules of each family's attention.

Everything else in headwatch addresses a head as ``(layer, head)`` (0-based,
layer first) and asks the adapter where that head lives. A family is one
:class:`Family` entry — in :data:`FAMILIES` by transformers ``model_type``, or
in :data:`CLASS_FAMILIES` by class name for a model without a transformers
config (the sweep's character model; named, never imported here): dotted
module paths inside a block, the norm (kind, offset), the fused QKV layout, how
attention weights are read, the attention's rules (scale, logit soft-capping,
QK-norm, rotary or learned positions and the rotary pair layout, sliding
window) as values or as the config keys that hold them, and for a class family
the attributes that hold its shape.

**Sites** (:data:`SITES`) are the named places of each layer where
:mod:`headwatch.model.interventions` reads or edits a forward pass:

* ``z`` — the input of the attention output projection; one unit per head
  (its ``head_dim`` slice, :meth:`Adapter.out_columns`). A head's "voice".
* ``q`` — the query projection output; one unit per head
  (:meth:`Adapter.query_slice`; inside the fused QKV output for GPT-NeoX, GPT-2
  and Phi-3). Before any rotary embedding and any per-head QK-norm (OLMo 2's
  queries: after its query norm, which spans every head).
* ``k`` / ``v`` — the key / value projection outputs; one unit per key/value
  group (:meth:`Adapter.key_slice`, :meth:`Adapter.value_slice`; inside the
  fused QKV output for GPT-NeoX, GPT-2 and Phi-3). Before any rotary embedding
  (OLMo 2's keys: after its key norm, which spans every group).
* ``pattern`` — the attention weights ``[batch, heads, T, T]``; one unit per head.
* ``mlp_out`` — what a block's feed-forward network adds to the residual stream
  ``[batch, T, width]``: its output, after the post-feed-forward norm where the
  family has one (Gemma 2/3, OLMo 2: ``Family.site_paths``).
* ``resid`` — a block's output ``[batch, T, width]``; ``resid_in`` — its input.
* ``resid_mid`` — the stream the feed-forward network's norm reads ``[batch, T, width]``: the
  stream after attention, or the block's input where the feed-forward network runs beside attention
  (GPT-J, GPT-NeoX's parallel blocks); the network's own input where it has no norm (OLMo 2).
* ``mlp_in`` — the feed-forward network's input ``[batch, T, width]``, after its norm.

:func:`sites_table` lists the module each site hooks, per family
(:func:`sites_markdown` and :func:`families_markdown` are the tables of
``docs/architecture.md``; ``python -m headwatch.model.arch`` prints them).

The rest of what the code must know about a family lives here too: the shape
from a config (:func:`shape_of`), the context length (:func:`context_length`),
the rotary settings (:func:`rope_parameters`, :meth:`Adapter.rope`), the norms
(:meth:`Adapter.input_norm_params`, :meth:`Adapter.qk_norm_params`), the
attention scale, soft-cap and window (:meth:`Adapter.attention_scale`,
:meth:`Adapter.softcap`, :meth:`Adapter.window`), a family's config rebuilt
without key sharing (:func:`ungrouped_config`) and how a model is called
(:meth:`Adapter.logits`, :meth:`Adapter.run_body`). :mod:`headwatch.model.recompute`
applies the rules.

A key/value group is ``kv_group = head // (heads // kv_heads)``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

# torch and transformers are imported inside the functions that have a model at hand, never at the
# top: the pre-job checks read shapes from config.json through this module (headwatch.model.sources), and
# a cached verdict imports neither (tests/test_config.py; importing torch takes 3.2 s).
if TYPE_CHECKING:      # for the annotations only
    import torch
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
    """What the code must know about one architecture, as data: module paths, the norm, the
    fused layout, and the attention's rules (scale, soft-capping, QK-norm, position encoding,
    sliding window) as values or as the config keys that hold them. Every module that needs
    one of these reads it here (the weight check, the recomputed pattern, the key-group
    cuts, the anatomy tables); none tests a family's name."""
    name: str
    layers: str            # dotted path from the top-level model to the ModuleList of blocks
    attention: str         # the attention module inside a block
    out_proj: str          # dotted path inside a block
    qkv: tuple[str, ...]   # (q, k, v) paths inside a block, or one fused path
    input_norm: str        # the norm in front of attention; "" = attention reads the block input
    norm: str              # class of the family's norms: "LayerNorm" or "RMSNorm" (its by-hand formula)
    norm_offset: float = 0.0   # RMSNorm multiplies by (offset + w): Gemma's (1 + w) has 1.0
    # The fused QKV output, in head_dim units: "per_head" = [q_h k_h v_h] for each head h
    # (GPT-NeoX, no key sharing); "qkv" = [Q heads·d | K kv·d | V kv·d] (GPT-2; Phi-3 with grouped keys).
    fused_layout: str = ""
    conv1d: bool = False   # GPT-2's Conv1D stores weight as (in, out)
    block_tuple: bool = False  # a block returns (hidden, attention weights), not the hidden state alone
    mlp: str = "mlp"       # the feed-forward network inside a block (anatomy: parameters by block)
    # How the pattern site is read: "weights" = the attention module returns its weights
    # (transformers' eager attention); "recompute" = headwatch.model.recompute from the q/k
    # projection outputs (a model that calls a fused kernel).
    pattern: str = "weights"
    # The attention logits: q·k × n^(-1/2), n = the head size ("head_dim") or the number a
    # config key holds (Gemma 2/3: "query_pre_attn_scalar"); "" = not scaled (GPT-Neo).
    scale_by: str = "head_dim"
    # GPT-2's config switches: (scaling on/off, divide by layer + 1); "" = no such switch.
    scale_switches: tuple[str, str] = ("", "")
    softcap: str = ""      # config key of the logit soft-cap c: s → c·tanh(s / c) (Gemma 2); unset = none
    # Queries and keys normalised (RMSNorm) before rotary: "head" = over each head's head_dim
    # (Qwen3, Gemma 3), "projection" = over the whole projection output (OLMo 2); "" = none.
    qk_norm: str = ""
    qk_norm_paths: tuple[str, str] = ("", "")
    # Position: "rotary" or "absolute" (learned positions added to the embeddings).
    position: str = "rotary"
    # Rotary pairs: "half" = dims (i, i + r/2) (transformers' rotate_half), "interleaved" =
    # dims (2i, 2i + 1) (GPT-J).
    rotary_layout: str = "half"
    rotary_dims_key: str = ""  # config key holding the rotary dims as a count (GPT-J: "rotary_dim")
    rotary_base: float = 0.0   # the base when the config names none (GPT-J's fixed 10 000)
    # Sliding window: the config key of its length ("" = none), and the layers it applies to
    # as (config key listing each layer's kind, the windowed kind); ("", "") = every layer
    # (Mistral, Phi-3). A query at i sees keys j with i - window < j <= i.
    window: str = ""
    window_layers: tuple[str, str] = ("", "")
    # Sites hooked on another module than their default (e.g. the queries and keys after a
    # QK-norm that spans every head / key/value group, so that a unit's slice is its own: OLMo 2's
    # "q" and "k"; the feed-forward output after a post-feed-forward norm: "mlp_out").
    site_paths: dict = field(default_factory=dict)
    # A model without a transformers config: its class by dotted name, the attributes that
    # hold its shape, and its embedding modules.
    model_class: str = ""
    shape_attrs: dict = field(default_factory=dict)
    embeddings: tuple[str, str] = ("", "")   # (input, output) module paths; "" = ask transformers
    # GGUF's name of the architecture (a header's ``general.architecture``, the prefix of its
    # keys), where it is not transformers' model_type (GPT-NeoX: "gptneox", Gemma 3: "gemma3").
    gguf: str = ""
    # The heads must divide the width even where the config gives head_dim (transformers'
    # config of the family refuses another shape); without head_dim every family needs it.
    heads_divide_width: bool = False
    # The edge graph (headwatch.circuits.edges): the norm in front of the feed-forward network (a
    # path inside a block), the final norm (a path from the top-level model), and whether the
    # feed-forward network reads the block's input beside attention ("" = after it, as most do;
    # "always" = GPT-J; else the config key that says so: GPT-NeoX's use_parallel_residual).
    mlp_norm: str = "post_attention_layernorm"
    final_norm: str = "model.norm"
    parallel: str = ""
    # Why the edge graph cannot be built ("" = it can): a norm between a block's attention or
    # feed-forward output and the residual stream makes a head's output no term of the sum a later
    # receiver reads.
    no_edges: str = ""
    # The direct effects (headwatch.lens): the norm between attention's output and the residual stream
    # (a path inside a block; "" = none: Gemma 2/3's and OLMo 2's post-attention norms), and the config
    # key of the final logits' soft-cap c·tanh(logit / c) (Gemma 2/3: "final_logit_softcapping"; "" = none).
    attn_out_norm: str = ""
    logit_softcap: str = ""

    @property
    def gguf_arch(self) -> str:
        return self.gguf or self.name

    @property
    def has_config(self) -> bool:
        return not self.model_class

    @property
    def qkv_paths(self) -> tuple[str, str, str]:
        """The (q, k, v) projection paths; the fused module's three times when fused."""
        return self.qkv if len(self.qkv) == 3 else self.qkv * 3

    def fused_units(self, heads: int, kv_heads: int) -> int:
        """Outputs of the fused QKV projection in head_dim units (1 per head of q, k and v)."""
        return 3 * heads if self.fused_layout == "per_head" else heads + 2 * kv_heads


def _llama_like(name: str, **kw) -> Family:
    """Llama's module names (model.layers, self_attn, q/k/v/o_proj, input_layernorm, RMSNorm)."""
    paths = dict(layers="model.layers", attention="self_attn", out_proj="self_attn.o_proj",
                 qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                 input_norm="input_layernorm", norm="RMSNorm")
    return Family(name, **{**paths, **kw})


_QK_NORMS = ("self_attn.q_norm", "self_attn.k_norm")
_LAYER_TYPES = ("layer_types", "sliding_attention")
_POST_FFN = {"mlp_out": "post_feedforward_layernorm"}   # the norm between the MLP and the residual
_POST_NORMS = ("a norm after attention and after the feed-forward network, before the residual stream "
               "(post-norms): a head's output is not a term of the sum a later receiver reads")
_GEMMA = dict(norm_offset=1.0, scale_by="query_pre_attn_scalar", softcap="attn_logit_softcapping",
              window="sliding_window", window_layers=_LAYER_TYPES, heads_divide_width=True, site_paths=_POST_FFN,
              mlp_norm="pre_feedforward_layernorm", no_edges=_POST_NORMS, attn_out_norm="post_attention_layernorm",
              logit_softcap="final_logit_softcapping")

FAMILIES = {f.name: f for f in (
    Family("gpt_neox", "gpt_neox.layers", "attention", "attention.dense", ("attention.query_key_value",),
           "input_layernorm", "LayerNorm", fused_layout="per_head", gguf="gptneox",
           heads_divide_width=True, final_norm="gpt_neox.final_layer_norm", parallel="use_parallel_residual"),
    _llama_like("llama", heads_divide_width=True),
    _llama_like("qwen2", window="sliding_window", window_layers=_LAYER_TYPES),
    Family("gpt2", "transformer.h", "attn", "attn.c_proj", ("attn.c_attn",), "ln_1", "LayerNorm",
           fused_layout="qkv", conv1d=True, position="absolute",
           scale_switches=("scale_attn_weights", "scale_attn_by_inverse_layer_idx"), mlp_norm="ln_2",
           final_norm="transformer.ln_f"),
    _llama_like("gemma2", **_GEMMA),
    _llama_like("gemma3_text", **{**_GEMMA, "softcap": ""}, qk_norm="head", qk_norm_paths=_QK_NORMS,
                gguf="gemma3"),
    _llama_like("qwen3", qk_norm="head", qk_norm_paths=_QK_NORMS, window="sliding_window",
                window_layers=_LAYER_TYPES),
    _llama_like("olmo2", input_norm="", qk_norm="projection", qk_norm_paths=_QK_NORMS,
                site_paths={"q": "self_attn.q_norm", "k": "self_attn.k_norm", **_POST_FFN}, mlp_norm="",
                no_edges=_POST_NORMS, attn_out_norm="post_attention_layernorm"),
    _llama_like("phi3", qkv=("self_attn.qkv_proj",), fused_layout="qkv", window="sliding_window"),
    _llama_like("mistral", window="sliding_window"),
    Family("gptj", "transformer.h", "attn", "attn.out_proj", ("attn.q_proj", "attn.k_proj", "attn.v_proj"),
           "ln_1", "LayerNorm", block_tuple=True, rotary_layout="interleaved", rotary_dims_key="rotary_dim",
           rotary_base=10000.0, mlp_norm="ln_1", final_norm="transformer.ln_f", parallel="always"),
    Family("gpt_neo", "transformer.h", "attn.attention", "attn.attention.out_proj",
           ("attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj"), "ln_1",
           "LayerNorm", block_tuple=True, position="absolute", scale_by="", window="window_size",
           window_layers=("attention_layers", "local"), mlp_norm="ln_2", final_norm="transformer.ln_f"),
)}
"""The transformers families, by ``config.model_type``."""

_CHARLM = Family("charlm", "blocks", "attn", "attn.o", ("attn.q", "attn.k", "attn.v"), "ln1", "LayerNorm",
                 mlp="ffn", pattern="recompute", position="absolute", mlp_norm="ln2", final_norm="ln_f",
                 model_class="headwatch.charlm.model.CharLM",
                 shape_attrs=dict(layers="layers", heads="heads", kv_heads="kv_heads", width="width",
                                  head_dim="head_dim", rotary_dims="rotary_dims", rotary_base="rotary_base"),
                 embeddings=("tok", "head"))
CLASS_FAMILIES = {_CHARLM.model_class: _CHARLM}
"""Models without a transformers config, by class (dotted name; never imported here): the
sweep's character model, whose scaled_dot_product_attention returns no weights, so its
pattern is recomputed (learned positions, scale 1/√head_dim; with its ``rotary`` option,
rotary positions over the whole head, rotate-half pairs, the base its ``rotary_base`` says,
and no learned ones)."""


def all_families() -> dict[str, Family]:
    """Every family by name: the transformers ones, then those known by class."""
    return {**FAMILIES, **{f.name: f for f in CLASS_FAMILIES.values()}}

SITES = {
    "z": "input of the attention output projection (per head)",
    "q": "query projection output (per head)",
    "k": "key projection output (per key/value group)",
    "v": "value projection output (per key/value group)",
    "pattern": "attention weights [batch, heads, T, T] (per head)",
    "mlp_out": "the feed-forward network's output [batch, T, width], after any post-feed-forward norm",
    "resid": "a block's output [batch, T, width]",
    "resid_in": "a block's input [batch, T, width]",
    "resid_mid": "the stream the feed-forward network's norm reads [batch, T, width]",
    "mlp_in": "the feed-forward network's input [batch, T, width], after its norm",
}
WHOLE_SITES = ("mlp_out", "resid", "resid_in", "resid_mid", "mlp_in")
"""Sites that are one ``[batch, T, width]`` tensor, without units."""


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
            "(add one to headwatch/model/arch.py: FAMILIES)")
    return FAMILIES[kind]


def family_of_model(model: nn.Module) -> Family:
    """The family of a loaded model: by class name for models without a config, else its config."""
    name = _class_name(model)
    if name in CLASS_FAMILIES:
        return CLASS_FAMILIES[name]
    if getattr(model, "config", None) is None:
        raise ValueError(f"{name} has no transformers config and no entry in headwatch/model/arch.py: "
                         "CLASS_FAMILIES")
    return family_of(model.config)


# Config keys of each number, in the order they are tried (GPT-2, GPT-NeoX and GPT-Neo spell
# them their own way); a config is a transformers config object or a config.json dict.
CONFIG_KEYS = dict(
    width=("hidden_size", "n_embd"),
    heads=("num_attention_heads", "n_head", "num_heads"),
    layers=("num_hidden_layers", "n_layer", "num_layers"),
    kv_heads=("num_key_value_heads",),
    head_dim=("head_dim",),
    context=("max_position_embeddings", "n_positions", "n_ctx", "seq_length"),
    vocab=("vocab_size",),
    ffn=("intermediate_size", "n_inner"),
)


# The most each shape number of a model file may say (config.json or a GGUF header), checked
# before any job (headwatch.model.sources.facts), with the reason: each is at least 4 times the
# largest public model's (Llama 3.1 405B: 126 layers, 128 heads, width 16 384, FFN 53 248;
# Gemma 3: 262 144 tokens, head size 256; Llama 4 Scout: a 10 M-token context), so that only
# a damaged or hostile file reaches one. raise_bounds: {model_file.<field>: N} raises one
# (headwatch/sources/limits.py); a model's memory is bounded by estimate besides.
FIELD_BOUNDS = dict(
    layers=(512, "a model is built block by block: 100 000 layers of any width take minutes and "
                 "gigabytes before a number is computed; 4 × Llama 3.1 405B's 126"),
    heads=(1024, "query heads a layer; 8 × Llama 3.1 405B's 128"),
    kv_heads=(1024, "key/value heads a layer (at most the query heads)"),
    width=(65536, "the residual stream's width; 4 × Llama 3.1 405B's 16 384"),
    head_dim=(4096, "each head's size; 16 × Gemma's 256"),
    ffn=(262144, "the feed-forward network's hidden width; 4 × Llama 3.1 405B's 53 248"),
    vocab=(1 << 20, "tokens; 4 × Gemma 3's 262 144 (the embedding and the logits scale with it)"),
    context=(1 << 24, "positions; 1.6 × Llama 4 Scout's 10 M (compared with phrase and sequence "
                      "lengths, and learned position tables scale with it)"),
)


def config_value(config, what: str):
    """The first of :data:`CONFIG_KEYS` ``[what]`` that ``config`` sets (None if none)."""
    for key in CONFIG_KEYS[what]:
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if value is not None:
            return value
    return None


# GGUF header keys of each number, after the architecture's prefix (``llama.block_count``).
GGUF_KEYS = dict(
    width="embedding_length",
    heads="attention.head_count",
    layers="block_count",
    kv_heads="attention.head_count_kv",
    context="context_length",
    vocab="vocab_size",
    ffn="feed_forward_length",
    head_dim="attention.key_length",
    rotary_base="rope.freq_base",
)
GGUF_TOKENS = "tokenizer.ggml.tokens"   # the token list (its length: the vocabulary when unset)


def gguf_model_type(header: dict) -> str:
    """transformers' model_type of a GGUF header's architecture (``llama`` when it names none;
    an architecture no family knows is returned as it is)."""
    arch = header.get("general.architecture", "llama")
    return next((f.name for f in FAMILIES.values() if f.gguf_arch == arch), arch)


def gguf_value(header: dict, what: str):
    """The number :data:`GGUF_KEYS` ``[what]`` of a GGUF header (None if unset)."""
    return header.get(f"{header.get('general.architecture', 'llama')}.{GGUF_KEYS[what]}")


def _attr(config, key: str, default=None):
    if not key or config is None:
        return default
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


def _family_or_default(config) -> Family:
    """The config's family; an unknown ``model_type`` reads as a rotary family without
    extras (the pre-job checks then refuse it by name)."""
    return FAMILIES.get(_attr(config, "model_type"), _llama_like(str(_attr(config, "model_type"))))


def window_of(config, layer: int, family: Family | None = None) -> int | None:
    """The sliding window of ``layer`` (None = the layer sees every earlier position)."""
    f = family or _family_or_default(config)
    n = _attr(config, f.window)
    if not n:
        return None
    key, kind = f.window_layers
    if key:
        kinds = _attr(config, key) or []
        if layer >= len(kinds) or kinds[layer] != kind:
            return None
    return int(n)


def _global_layer(config, family: Family) -> int:
    """The first layer without a window (0 if every layer has one): whose rotary settings
    the model-level shape reports."""
    n = config_value(config, "layers") or 0
    return next((l for l in range(n) if window_of(config, l, family) is None), 0)


def rope_parameters(config, layer: int | None = None) -> dict:
    """The rotary settings (``rope_theta``, ``rope_type``, ``factor``, ...) of ``layer``: a
    config that keys them by layer kind (Gemma 3: sliding vs full attention) gives that
    kind's; ``layer=None`` = the first layer without a window."""
    rope = _attr(config, "rope_parameters", {}) or {}
    kinds = _attr(config, "layer_types") or []
    if kinds and any(isinstance(rope.get(k), dict) for k in set(kinds)):
        if layer is None:
            layer = _global_layer(config, _family_or_default(config))
        rope = rope.get(kinds[layer]) or {}
    return rope


def shape_of(config) -> dict:
    """Layers, heads, kv heads, width, head size and rotary settings from a config alone
    (a transformers config or a ``config.json`` dict; a number the config lacks is None)."""
    c = config
    f = _family_or_default(c)
    width, heads, layers = config_value(c, "width"), config_value(c, "heads"), config_value(c, "layers")
    kv_heads = config_value(c, "kv_heads") or heads
    head_dim = config_value(c, "head_dim") or (width // heads if width and heads and width % heads == 0
                                               else None)
    if f.position != "rotary":
        rotary_dims, base = 0, None
    else:
        rope = rope_parameters(c)
        base = rope.get("rope_theta", _attr(c, "rope_theta", f.rotary_base or None))
        frac = rope.get("partial_rotary_factor", _attr(c, "rotary_pct", 1.0))
        rotary_dims = _attr(c, f.rotary_dims_key) or (int(head_dim * frac) if head_dim else None)
    return dict(family=_attr(c, "model_type"), layers=layers, heads=heads, kv_heads=kv_heads, width=width,
                head_dim=head_dim, rotary_dims=rotary_dims, rotary_base=base)


def model_shape(model: nn.Module) -> dict:
    """:func:`shape_of` for any model with an adapter (a config, or the attributes its family names)."""
    fam = family_of_model(model)
    if fam.has_config:
        return shape_of(model.config)
    s = {key: getattr(model, attr) for key, attr in fam.shape_attrs.items()}
    base = s.pop("rotary_base", None)                   # None: no rotary positions
    s = {key: int(v) for key, v in s.items()}
    s.setdefault("rotary_dims", 0)
    return dict(family=fam.name, **s, rotary_base=None if base is None else float(base))


def rope_type(config, layer: int | None = None) -> str:
    """The rotary embedding's type (``"default"`` for plain RoPE), ``""`` without rotary."""
    if not shape_of(config)["rotary_dims"]:
        return ""
    return rope_parameters(config, layer).get("rope_type", "default")


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
    """The same family and sizes with ``kv heads = heads`` and ``layers`` blocks (a fresh config;
    the per-layer kinds, e.g. which layers have a window, are those of its first ``layers``)."""
    from transformers import AutoConfig     # not at the top: see the imports

    d = copy.deepcopy(config.to_dict())
    for key in CONFIG_KEYS["layers"]:
        if key in d:
            d[key] = layers
    if "num_key_value_heads" in d:
        d["num_key_value_heads"] = config_value(d, "heads")
    for key in {family_of(config).window_layers[0], "layer_types"} - {""}:
        if d.get(key):
            d[key] = d[key][:layers]
            if "attention_types" in d:     # GPT-Neo derives its layer kinds from this run-length list
                d["attention_types"] = [[d[key], 1]]
    for key in ("max_window_layers", "quantization_config", "architectures"):
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

    def require_head(self, layer: int, head: int) -> None:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise HeadAddressError(
                f"head (layer={layer}, head={head}) does not exist: the model has "
                f"{self.n_layers} layers × {self.n_heads} heads (0-based)")

    def require_group(self, layer: int, group: int) -> None:
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
        self.require_head(layer, head)
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
        elif self.family.fused_layout == "qkv":         # [Q heads·d | K kv·d | V kv·d]
            start = (0, self.n_heads, self.n_heads + self.n_kv_heads)[which] * d + index * d
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
        """Views of the weight (and bias) entries that produce output ``features`` of a projection
        (or of a norm's scale, when a site is a norm's output: OLMo 2's keys)."""
        w = module.weight
        out = [w[features] if w.ndim == 1 else w[:, features] if self.family.conv1d else w[features, :]]
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

    def mlp_norm(self, layer: int) -> nn.Module:
        """The norm in front of a block's feed-forward network (:attr:`Family.mlp_norm`)."""
        return _get(self.blocks[layer], self.family.mlp_norm)

    def final_norm(self) -> nn.Module:
        """The norm in front of the unembedding (:attr:`Family.final_norm`)."""
        return _get(self.model, self.family.final_norm)

    def attn_out_norm(self, layer: int) -> nn.Module | None:
        """The norm between a block's attention output and the residual stream (:attr:`Family.attn_out_norm`;
        None where attention adds its output as it is)."""
        return _get(self.blocks[layer], self.family.attn_out_norm) if self.family.attn_out_norm else None

    def logit_softcap(self) -> float | None:
        """The final logits' soft-cap c (logit → c·tanh(logit / c)), None without one."""
        c = _attr(self.config, self.family.logit_softcap)
        return float(c) if c else None

    @property
    def parallel(self) -> bool:
        """Whether each feed-forward network reads its block's input beside attention (GPT-J; GPT-NeoX
        by its config) rather than the stream after attention."""
        p = self.family.parallel
        return p == "always" or (bool(p) and bool(_attr(self.config, p, False)))

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
        if require_site(site) in WHOLE_SITES:
            return 0
        return {"z": self.n_heads, "q": self.n_heads, "pattern": self.n_heads, "k": self.n_kv_heads,
                "v": self.n_kv_heads}[site]

    def require_unit(self, site: str, layer: int, unit: int | None) -> None:
        """HeadAddressError unless ``unit`` of ``site`` exists in ``layer`` (None = the whole site)."""
        if site in ("z", "q", "pattern"):
            if unit is None:
                self.require_head(layer, 0)
            else:
                self.require_head(layer, unit)
        elif site in ("k", "v"):
            self.require_group(layer, 0 if unit is None else unit)
        else:
            self.require_head(layer, 0)
            if unit is not None:
                raise HeadAddressError(f"site {site!r} has no units (it is a whole [batch, T, width] tensor); "
                                       f"got unit {unit}")

    def site_module(self, site: str, layer: int) -> nn.Module:
        """The module whose input (z, resid_in, resid_mid, mlp_in) or output (q, k, v, pattern, mlp_out,
        resid) is the site."""
        path = self.site_path(site)
        return _get(self.blocks[layer], path) if path else self.blocks[layer]

    def site_slice(self, site: str, unit: int) -> slice:
        """The features of the site's tensor (last dimension) that hold ``unit``."""
        if site == "z":
            return self.out_columns(unit)
        if site == "q":
            return self.query_slice(unit)
        if site == "k":
            return self.key_slice(unit)
        if site == "v":
            return self.value_slice(unit)
        raise HeadAddressError(f"site {site!r} is not addressed by feature slices")

    def site_path(self, site: str) -> str:
        """The dotted path of the site's module inside a block (``""`` = the block itself)."""
        return _site_paths(self.family)[require_site(site)]

    # ---- what the by-hand formulas need --------------------------------------
    def norm_params(self, norm: nn.Module, what: str = "norm") -> dict:
        """``norm`` (a module of the family's norm class) as :meth:`input_norm_params` describes it."""
        from torch import nn     # not at the top: see the imports

        kind = self.family.norm
        if not (type(norm).__name__.endswith(kind) or (kind == "LayerNorm" and isinstance(norm, nn.LayerNorm))):
            raise NotImplementedError(f"{self.family.name}: the {what} is {type(norm).__name__}, "
                                      f"not the {kind} this family declares")
        eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None)
        if eps is None and self.config is not None:
            eps = getattr(self.config, "rms_norm_eps", None)
        return dict(kind=kind, weight=norm.weight, bias=getattr(norm, "bias", None), eps=float(eps),
                    offset=self.family.norm_offset)

    def input_norm_params(self, layer: int) -> dict:
        """The norm in front of attention: kind ("LayerNorm" / "RMSNorm"; "" = none), weight,
        bias, eps and offset (an RMSNorm multiplies by offset + weight)."""
        if not self.family.input_norm:
            return dict(kind="", weight=None, bias=None, eps=0.0, offset=0.0)
        return self.norm_params(self.input_norm(layer), "input norm")

    def qk_norm_params(self, layer: int) -> tuple[dict, dict] | None:
        """(query norm, key norm) parameters as :meth:`input_norm_params`, None without QK-norm;
        over each head (``Family.qk_norm == "head"``) or the whole projection ("projection")."""
        if not self.family.qk_norm:
            return None
        block = self.blocks[layer]
        return tuple(self.norm_params(_get(block, p), f"{w} norm")
                     for p, w in zip(self.family.qk_norm_paths, ("query", "key")))

    def rope(self, layer: int) -> dict:
        """The rotary embedding of ``layer``: dims (0 = none), base, type, linear factor and
        pair layout (:attr:`Family.rotary_layout`); a config may set them per layer kind."""
        if not self.rotary_dims:
            return dict(dims=0, base=0.0, type="", factor=1.0, layout="")
        params = rope_parameters(self.config, layer) if self.config is not None else {}
        kind = params.get("rope_type", "default")
        factor = float(params.get("factor") or 1.0) if kind == "linear" else 1.0    # positions ÷ factor
        return dict(dims=int(self.rotary_dims), base=float(params.get("rope_theta") or self.rotary_base),
                    type=kind, factor=factor, layout=self.family.rotary_layout)

    def attention_scale(self, layer: int) -> float:
        """The factor of q·k: n^(-1/2) with n the head size or the config's
        (:attr:`Family.scale_by`), 1 when unscaled, and GPT-2's switches."""
        f, cfg = self.family, self.config
        n = self.head_dim if f.scale_by == "head_dim" else _attr(cfg, f.scale_by)
        scale = float(n) ** -0.5 if f.scale_by else 1.0
        on, by_layer = f.scale_switches
        if not _attr(cfg, on, True):
            scale = 1.0
        if _attr(cfg, by_layer, False):
            scale /= float(layer + 1)
        return scale

    def softcap(self, layer: int) -> float | None:
        """The attention-logit soft-cap c (s → c·tanh(s / c)), None without one."""
        c = _attr(self.config, self.family.softcap)
        return float(c) if c else None

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer`` (None = every earlier position is seen)."""
        return window_of(self.config, layer, self.family) if self.config is not None else None

    # ---- calling the model -----------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the model's parameters are: every tensor a forward pass reads is put there."""
        return next(self.model.parameters()).device

    def _placed(self, ids: torch.Tensor, mask: torch.Tensor | None) -> tuple:
        """``ids`` and ``mask`` on the model's device (a host tensor handed to a model on a GPU
        stops the job there: the one place that moves them)."""
        device = self.device
        return ids.to(device), (None if mask is None else mask.to(device))

    def logits(self, ids: torch.Tensor, keep: int | torch.Tensor = 0, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The model's logits for ``ids`` ``[B, T]``; ``keep`` as transformers' ``logits_to_keep``
        (0 = every position, n = the last n, a 1-D tensor = those positions); ``mask`` (``[B, T]``,
        1 = a token, 0 = left padding) with the position ids it implies (:func:`padded_inputs`).
        ``ids`` and ``mask`` may be anywhere: they are put on the model's device."""
        ids, mask = self._placed(ids, mask)
        if self.family.has_config:
            return self.model(input_ids=ids, use_cache=False, logits_to_keep=keep, **padded_inputs(mask)).logits
        if mask is not None:
            raise NotImplementedError(f"{self.family.name}: a padded batch needs a transformers model")
        import torch     # not at the top: see the imports

        out = self.model(ids)
        if isinstance(keep, torch.Tensor):
            return out[:, keep]
        return out[:, -keep:] if keep else out

    def run_body(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Run the blocks on ``ids`` (without the vocabulary projection where the family allows);
        ``mask`` as :meth:`logits`."""
        ids, mask = self._placed(ids, mask)
        if self.family.has_config:
            self.model.base_model(input_ids=ids, use_cache=False, **padded_inputs(mask))
        else:
            if mask is not None:
                raise NotImplementedError(f"{self.family.name}: a padded batch needs a transformers model")
            self.model(ids)


def padded_inputs(mask) -> dict:
    """The keyword arguments of a left-padded batch (``mask`` ``[B, T]``: 1 = a token, 0 = padding;
    None = no padding, no arguments): the attention mask, and the position ids every family needs
    with it — each prompt's first token at position 0 — since absolute position embeddings (GPT-2)
    and rotary ones alike would otherwise count the padding as positions."""
    if mask is None:
        return {}
    return dict(attention_mask=mask, position_ids=padded_positions(mask))


def padded_positions(mask):
    """Each token's position in its own prompt, ``[B, T]``: the count of tokens before it (0 on padding)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _site_paths(f: Family) -> dict[str, str]:
    """Each site's module path inside a block ("" = the block itself)."""
    q, k, v = f.qkv_paths
    return {**dict(z=f.out_proj, q=q, k=k, v=v, pattern=f.attention, mlp_out=f.mlp, resid="", resid_in="",
                   resid_mid=f.mlp_norm or f.mlp, mlp_in=f.mlp),
            **f.site_paths}


def require_site(site: str) -> str:
    """``site``, or HeadAddressError naming the sites."""
    if site not in SITES:
        raise HeadAddressError(f"unknown site {site!r}; the sites are {list(SITES)}")
    return site


def sites_table(families: Iterable[str] = ()) -> list[dict]:
    """Per family and site: the module path inside a block and whether it is hooked on its input
    or output (the table of ``docs/architecture.md``, :func:`sites_markdown`, and of the tests)."""
    rows, known = [], all_families()
    for name in families or known:
        f = known[name]
        paths = _site_paths(f)
        q, k, _ = f.qkv_paths
        hooked = dict(z="input", q="output", k="output", v="output", mlp_out="output", resid="output",
                      resid_in="input", resid_mid="input", mlp_in="input",
                      pattern="output: its weights" if f.pattern == "weights"
                      else f"recomputed from {q} and {k}")
        for site in SITES:
            rows.append(dict(family=name, site=site, blocks=f.layers, module=paths[site] or "(block)",
                             hooked=hooked[site]))
    return rows


def sites_markdown() -> str:
    """:func:`sites_table` as the Markdown table of ``docs/architecture.md``: one row per
    family, the module each per-head, per-group and feed-forward site hooks (``resid`` /
    ``resid_in`` are every family's block output / input)."""
    by = {}
    for r in sites_table():
        by.setdefault(r["family"], {"blocks": r["blocks"]})[r["site"]] = r
    cols = ("z", "q", "k", "v", "pattern", "resid_mid", "mlp_in", "mlp_out")

    def cell(r):
        if r["site"] == "pattern" and r["hooked"].startswith("recomputed"):
            return r["hooked"].replace("recomputed from ", "recomputed from `").replace(" and ", "`, `") + "`"
        side = "weights" if r["site"] == "pattern" else r["hooked"]
        return f"`{r['module']}` {side}"

    lines = ["| family | blocks | " + " | ".join(f"`{c}`" for c in cols) + " |",
             "|---" * (len(cols) + 2) + "|"]
    for name, row in by.items():
        lines.append(f"| {name} | `{row['blocks']}` | " + " | ".join(cell(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def families_markdown() -> str:
    """The attention rules of every family (its :class:`Family` entry), as the Markdown table
    of ``docs/architecture.md``; a value from the config is named by its key."""
    def norm(f):
        kind = f.norm + (f" (offset {f.norm_offset:g} + w)" if f.norm_offset else "")
        return kind if f.input_norm else f"none (attention reads the block input; {f.norm} after)"

    def scale(f):
        n = "1" if not f.scale_by else "1/√head_dim" if f.scale_by == "head_dim" else f"1/√`{f.scale_by}`"
        switches = [f"`{k}`" for k in f.scale_switches if k]
        return n + (f", switches {', '.join(switches)}" if switches else "")

    def position(f):
        if f.position != "rotary":
            rotary = f.shape_attrs.get("rotary_dims")       # a class family that may turn its heads
            return f.position + (f", or rotary, {f.rotary_layout} pairs where the model's `{rotary}` is above 0 "
                                 f"(base: its `{f.shape_attrs['rotary_base']}`)" if rotary else "")
        dims = f"`{f.rotary_dims_key}` dims" if f.rotary_dims_key else "rope_parameters"
        base = f", base {f.rotary_base:g}" if f.rotary_base else ""
        return f"rotary, {f.rotary_layout} pairs ({dims}{base})"

    def window(f):
        if not f.window:
            return "none"
        key, kind = f.window_layers
        return f"`{f.window}`, " + (f"layers whose `{key}` is `{kind}`" if key else "every layer")

    lines = ["| family | input norm | QK-norm | scale | soft-cap | position | sliding window | fused QKV |",
             "|---" * 8 + "|"]
    for f in all_families().values():
        qk = f"{f.qk_norm} (`{'`, `'.join(f.qk_norm_paths)}`)" if f.qk_norm else "none"
        cap = f"`{f.softcap}`" if f.softcap else "none"
        lines.append(f"| {f.name} | {norm(f)} | {qk} | {scale(f)} | {cap} | {position(f)} | {window(f)} | "
                     f"{f.fused_layout or 'no'} |")
    return "\n".join(lines) + "\n"


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
    from torch import nn     # not at the top: see the imports

    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(NORM_CLASSES)


if __name__ == "__main__":       # the tables of docs/architecture.md
    print(sites_markdown())
    print(families_markdown(), end="")
