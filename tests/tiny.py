"""Tiny models built from configs, one per architecture family of headwatch.model.arch (no download).

:data:`FAMILIES` (the transformers families) and :data:`ALL_FAMILIES` (with the sweep's
character model) are read from ``headwatch.model.arch``: a family added there is built here
from its entry in :data:`CONFIGS` and tested by every parametrized test; one without an
entry fails them loudly. Each config is transformers' own config class, tiny (width 64,
3 layers, 4 heads of 16 unless a test asks otherwise), with every special case of its
family switched on:

* gpt_neox — fused per-head QKV with biases, partial rotary (25 %);
* llama — grouped key/value heads (4 query heads share 2);
* qwen2 — grouped kv heads, q/k/v biases;
* gpt2 — fused Conv1D [Q K V], learned positions, scaled by 1/(layer + 1) too;
* gemma2 — Gemma's (1 + w) RMSNorm, query_pre_attn_scalar ≠ head_dim, logit
  soft-capping, a window of :data:`WINDOW` on alternate layers;
* gemma3_text — as gemma2 plus per-head QK-norm and a rotary base per layer kind
  (linear scaling on the full-attention layers); its config sets a soft-cap that
  Gemma 3's attention ignores (transformers never passes it), and so must we;
* qwen3 — per-head QK-norm, grouped kv, a window from layer 1 on;
* olmo2 — no norm in front of attention, QK-norm over the whole projection, grouped kv;
* phi3 — fused [Q K V] with grouped keys, partial rotary (50 %), a window on every layer;
* mistral — grouped kv, a window on every layer;
* gptj — interleaved (rotate-every-two) partial rotary (8 of 16 dims), fixed base;
* gpt_neo — learned positions, no scaling, a local (windowed) middle layer;
* charlm — separate q/k/v/o without biases, grouped kv heads, attention by a fused
  kernel that returns no weights (pattern recomputed); :data:`CHARLM_VARIANTS` are its
  options that change the attention (``charlm-rotary``: rotary positions instead of the
  learned ones), built by :func:`tiny_model` by name for the exactness tests of the sites.

Windows are shorter than every test sequence (6–17 tokens), so that they bite.
"""
from __future__ import annotations

import torch
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, GPT2Config, GPTJConfig,
                          GPTNeoConfig, GPTNeoXConfig, LlamaConfig, MistralConfig, Olmo2Config, Phi3Config,
                          Qwen2Config, Qwen3Config)

from headwatch.model import arch

VOCAB = 512
WINDOW = 4
FAMILIES = tuple(arch.FAMILIES)                          # transformers models
ALL_FAMILIES = tuple(arch.all_families())                # every family of headwatch.model.arch
CHARLM_VARIANTS = {"charlm-rotary": dict(rotary=True)}
"""The character model's options that change how attention is computed, by a name of their own."""


def _rope(theta=10000.0, **kw):
    return dict(rope_type="default", rope_theta=theta, **kw)


CONFIGS = {
    "gpt_neox": lambda v, L, H, KV, W: GPTNeoXConfig(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, intermediate_size=4 * W,
        rotary_pct=0.25, max_position_embeddings=256, bos_token_id=0, eos_token_id=0),
    "llama": lambda v, L, H, KV, W: LlamaConfig(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        intermediate_size=2 * W, max_position_embeddings=256, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "qwen2": lambda v, L, H, KV, W: Qwen2Config(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        intermediate_size=2 * W, max_position_embeddings=256, bos_token_id=0, eos_token_id=0),
    "gpt2": lambda v, L, H, KV, W: GPT2Config(
        vocab_size=v, n_embd=W, n_layer=L, n_head=H, n_positions=256, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, scale_attn_by_inverse_layer_idx=True),
    "gemma2": lambda v, L, H, KV, W: Gemma2Config(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        head_dim=W // H, intermediate_size=2 * W, max_position_embeddings=256, query_pre_attn_scalar=24,
        attn_logit_softcapping=10.0, sliding_window=WINDOW, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "gemma3_text": lambda v, L, H, KV, W: Gemma3TextConfig(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        head_dim=W // H, intermediate_size=2 * W, max_position_embeddings=256, query_pre_attn_scalar=20,
        attn_logit_softcapping=5.0, sliding_window=WINDOW + 1, sliding_window_pattern=2,
        rope_parameters={"sliding_attention": _rope(),
                         "full_attention": dict(rope_type="linear", rope_theta=1e6, factor=4.0)},
        bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "qwen3": lambda v, L, H, KV, W: Qwen3Config(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        head_dim=W // H, intermediate_size=2 * W, max_position_embeddings=256, use_sliding_window=True,
        sliding_window=WINDOW, max_window_layers=1, bos_token_id=0, eos_token_id=0),
    "olmo2": lambda v, L, H, KV, W: Olmo2Config(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        intermediate_size=2 * W, max_position_embeddings=256, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "phi3": lambda v, L, H, KV, W: Phi3Config(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        intermediate_size=2 * W, max_position_embeddings=256, original_max_position_embeddings=256,
        rope_parameters=_rope(partial_rotary_factor=0.5), sliding_window=WINDOW + 2,
        bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "mistral": lambda v, L, H, KV, W: MistralConfig(
        vocab_size=v, hidden_size=W, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
        head_dim=W // H, intermediate_size=2 * W, max_position_embeddings=256, sliding_window=WINDOW,
        bos_token_id=0, eos_token_id=0),
    "gptj": lambda v, L, H, KV, W: GPTJConfig(
        vocab_size=v, n_embd=W, n_layer=L, n_head=H, rotary_dim=(W // H) // 2, n_positions=256,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0),
    "gpt_neo": lambda v, L, H, KV, W: GPTNeoConfig(
        vocab_size=v, hidden_size=W, num_layers=L, num_heads=H, max_position_embeddings=256,
        attention_types=[[["global", "local"], L // 2], [["global"], L % 2]], window_size=WINDOW,
        resid_dropout=0.0, embed_dropout=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=0),
}
"""One tiny config per transformers family: ``(vocab, layers, heads, kv heads, width) → config``
(families without key sharing ignore kv heads)."""


EXPECT = {  # by hand, for the default tiny shape: kv heads, rotary dims, each layer's window,
    # attention biases per layer
    "gpt_neox": dict(kv_heads=4, rotary_dims=4, windows=(None,) * 3, attn_biases=3 * 64 + 64),
    "llama": dict(kv_heads=2, rotary_dims=16, windows=(None,) * 3, attn_biases=0),
    "qwen2": dict(kv_heads=2, rotary_dims=16, windows=(None,) * 3, attn_biases=64 + 2 * 32),
    "gpt2": dict(kv_heads=4, rotary_dims=0, windows=(None,) * 3, attn_biases=3 * 64 + 64),
    "gemma2": dict(kv_heads=2, rotary_dims=16, windows=(WINDOW, None, WINDOW), attn_biases=0),
    "gemma3_text": dict(kv_heads=2, rotary_dims=16, windows=(WINDOW + 1, None, WINDOW + 1), attn_biases=0),
    "qwen3": dict(kv_heads=2, rotary_dims=16, windows=(None, WINDOW, WINDOW), attn_biases=0),
    "olmo2": dict(kv_heads=2, rotary_dims=16, windows=(None,) * 3, attn_biases=0),
    "phi3": dict(kv_heads=2, rotary_dims=8, windows=(WINDOW + 2,) * 3, attn_biases=0),
    "mistral": dict(kv_heads=2, rotary_dims=16, windows=(WINDOW,) * 3, attn_biases=0),
    "gptj": dict(kv_heads=4, rotary_dims=8, windows=(None,) * 3, attn_biases=0),
    "gpt_neo": dict(kv_heads=4, rotary_dims=0, windows=(None, WINDOW, None), attn_biases=64),
}


def tiny_config(family: str, vocab: int = VOCAB, layers: int = 3, heads: int = 4, kv_heads: int = 2,
                width: int = 64):
    if family not in CONFIGS:
        raise ValueError(f"no tiny config for family {family!r}: add one to tests/tiny.py CONFIGS")
    return CONFIGS[family](vocab, layers, heads, kv_heads, width)


def tiny_model(family: str, seed: int = 0, **kw):
    """A randomly initialised float32 model in eval mode, eager attention."""
    torch.manual_seed(seed)
    if family == "charlm" or family in CHARLM_VARIANTS:
        from headwatch.charlm.model import CharLM

        shape = dict(dict(vocab=VOCAB, layers=3, heads=4, kv_heads=2, width=64), **kw)
        model = CharLM(shape["vocab"], shape["width"], shape["heads"], layers=shape["layers"],
                       context=256, kv_heads=shape["kv_heads"], **CHARLM_VARIANTS.get(family, {}))
    else:
        model = AutoModelForCausalLM.from_config(tiny_config(family, **kw), attn_implementation="eager")
    # Random init leaves attention nearly uniform; larger q/k weights (or QK-norm scales, where
    # a norm undoes the weights' size) give the maps structure, so that equal-vs-different
    # comparisons mean something. Every norm's weight is moved off its initial value, so that
    # a by-hand norm with the wrong weight or offset is caught.
    a = arch.Adapter(model)
    qk = {id(p) for l in range(a.n_layers) for m in (a.query_proj(l), a.key_proj(l)) for p in m.parameters()}
    qk_norms = {id(n["weight"]) for l in range(a.n_layers) for n in a.qk_norm_params(l) or ()}
    with torch.no_grad():
        for p in model.parameters():
            if id(p) in qk:
                p.mul_(8.0)
        for m in model.modules():
            if arch.is_norm(m) and getattr(m, "weight", None) is not None:
                w = m.weight
                if id(w) in qk_norms:     # a scale of 2 ± 0.3, whatever the family's offset
                    w.copy_(2.0 - a.family.norm_offset + 0.3 * torch.randn_like(w))
                else:
                    w.add_(0.2 * torch.randn_like(w))
    return model.float().eval()


def rounding_of(adapter, *numbers: torch.Tensor):
    """The guards' bound (:func:`headwatch.guards.rounding`, factor 1) for outputs of ``adapter`` the size of
    ``numbers`` (their largest |value| the magnitude)."""
    from headwatch.guards import rounding

    return rounding(adapter, 1.0, max(float(x.detach().abs().max()) for x in numbers))


def random_ids(batch: int, length: int, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, length), generator=g)


def patching_prompts(n: int = 4, length: int = 10):
    """A :class:`~headwatch.patching.batch.PromptBatch` for patching tests (clean, corrupted ``[n, length]``,
    answer, distractor ``[n]``): random prompts whose corrupted twins differ at three positions (like the
    names of protocol §5d), random answers and distractors."""
    from headwatch.patching.batch import PromptBatch

    clean = random_ids(n, length, seed=1)
    corrupted = clean.clone()
    corrupted[:, [2, 4, 7]] = random_ids(n, 3, seed=2)
    return PromptBatch(clean, corrupted, random_ids(1, n, seed=3)[0], random_ids(1, n, seed=4)[0])
