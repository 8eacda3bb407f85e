"""Tiny models built from configs, one per architecture family (no download).

Shapes are chosen so that every family's special case is exercised:
GPT-NeoX with partial rotary (25 %) and biases, Llama with grouped key/value
heads (4 query heads sharing 2 kv heads), Qwen2 with grouped kv and q/k/v
biases, GPT-2 with fused Conv1D projections and no rotary; and the sweep's
character model (``charlm``: separate q/k/v/o without biases, grouped kv heads,
attention by a fused kernel that returns no weights).
"""
from __future__ import annotations

import torch
from transformers import (AutoModelForCausalLM, GPT2Config, GPTNeoXConfig, LlamaConfig,
                          Qwen2Config)

VOCAB = 512
FAMILIES = ("gpt_neox", "llama", "qwen2", "gpt2")        # transformers models
ALL_FAMILIES = FAMILIES + ("charlm",)                      # every family of headwatch.arch


def tiny_config(family: str, vocab: int = VOCAB, layers: int = 3, heads: int = 4, kv_heads: int = 2,
                width: int = 64):
    if family == "gpt_neox":
        return GPTNeoXConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                             num_attention_heads=heads, intermediate_size=4 * width,
                             rotary_pct=0.25, max_position_embeddings=256, bos_token_id=0,
                             eos_token_id=0)
    if family == "llama":
        return LlamaConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv_heads,
                           intermediate_size=2 * width, max_position_embeddings=256,
                           bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family == "qwen2":
        return Qwen2Config(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=kv_heads,
                           intermediate_size=2 * width, max_position_embeddings=256,
                           bos_token_id=0, eos_token_id=0)
    if family == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=heads,
                          n_positions=256, bos_token_id=0, eos_token_id=0,
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    raise ValueError(family)


def tiny_model(family: str, seed: int = 0, **kw):
    """A randomly initialised float32 model in eval mode, eager attention."""
    torch.manual_seed(seed)
    if family == "charlm":
        from headwatch.charlm.model import CharLM

        shape = dict(dict(vocab=VOCAB, layers=3, heads=4, kv_heads=2, width=64), **kw)
        model = CharLM(shape["vocab"], shape["width"], shape["heads"], layers=shape["layers"],
                       context=256, kv_heads=shape["kv_heads"])
    else:
        model = AutoModelForCausalLM.from_config(tiny_config(family, **kw), attn_implementation="eager")
    # Random init leaves attention nearly uniform; larger q/k weights give the
    # maps structure, so that equal-vs-different comparisons mean something.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(s in name for s in ("q_proj", "k_proj", "query_key_value", "c_attn", "attn.q.", "attn.k.")):
                p.mul_(8.0)
    return model.float().eval()


def random_ids(batch: int, length: int, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, length), generator=g)
