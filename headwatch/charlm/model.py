"""The sweep's character-level transformer (SPEC §7), in the spirit of nanoGPT.

Decoder-only; ``layers`` blocks of pre-LayerNorm (with bias) attention and a
GELU feed-forward network of ``ffn_mult × width`` (with bias); learned position
embeddings for ``context`` tokens; a final LayerNorm; an untied output head
without bias. Attention has separate q/k/v/o projections, each width × width
without bias, so splitting a width into more heads changes no weight count.
No dropout: training is deterministic on CPU.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def check_shape(width: int, heads: int) -> int:
    """The head size width ÷ heads; ValueError when the heads do not divide the width."""
    if heads < 1 or width < 1:
        raise ValueError(f"width ({width}) and heads ({heads}) must be positive")
    if width % heads:
        raise ValueError(f"heads {heads} do not divide width {width}: the head size would be "
                         f"{width / heads:g}; pick heads among the divisors of {width}")
    return width // heads


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, check_shape(width, heads)
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width, bias=False)
        self.o = nn.Linear(width, width, bias=False)   # input columns h*d:(h+1)*d are head h

    def forward(self, x):
        B, T, C = x.shape
        split = lambda t: t.view(B, T, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                           is_causal=True)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, ffn_mult: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, ffn_mult * width), nn.GELU(),
                                 nn.Linear(ffn_mult * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class CharLM(nn.Module):
    def __init__(self, vocab_size: int, width: int, heads: int, layers: int = 4,
                 context: int = 128, ffn_mult: int = 4):
        super().__init__()
        check_shape(width, heads)
        self.vocab_size, self.width, self.heads = vocab_size, width, heads
        self.layers, self.context, self.ffn_mult = layers, context, ffn_mult
        self.tok = nn.Embedding(vocab_size, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, ffn_mult) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab_size, bias=False)
        self.apply(self._init)
        for name, p in self.named_parameters():   # GPT-2: scale the residual projections
            if name.endswith("attn.o.weight") or name.endswith("ffn.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.context:
            raise ValueError(f"sequence of {T} tokens is longer than the context {self.context}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def spec(self) -> dict:
        """The constructor arguments (saved with the weights)."""
        return dict(vocab_size=self.vocab_size, width=self.width, heads=self.heads,
                    layers=self.layers, context=self.context, ffn_mult=self.ffn_mult)


def count_params(vocab_size: int, width: int, layers: int = 4, context: int = 128,
                 ffn_mult: int = 4) -> dict:
    """Parameters by block from the architecture formula (no model built).

    Per block: attention 4·W² (q, k, v, o; no bias); two LayerNorms 2·2W; FFN
    W·fW + fW (up, bias) + fW·W + W (down, bias). Plus token embeddings V·W,
    positions C·W, final LayerNorm 2W and the untied head W·V. The heads do
    not appear: splitting a width changes no parameter count.
    """
    V, W, L, C, f = vocab_size, width, layers, context, ffn_mult
    parts = dict(embeddings=V * W, positions=C * W, attention=L * 4 * W * W,
                 norms=L * 2 * 2 * W + 2 * W, ffn=L * (2 * f * W * W + f * W + W), head=W * V)
    parts["total"] = sum(parts.values())
    return parts
