"""Attention maps and next-token predictions for the phrases (protocol §3).

Maps are stored long-format, one row per cell on or below the diagonal
(``phrase, layer, head, row, col, weight``); cells above the diagonal are 0 by
the causal mask and are not stored. Weights are quantized to 1/quantum, so a
stored row sums to 1 only within quantum/2 per cell.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..jobs import phases, progress
from ..tableio import assert_finite
from ..model.interventions import maps_and_logits


def assert_maps(maps: torch.Tensor, what: str, atol: float = 1e-4) -> None:
    """Maps must be finite, causal (0 above the diagonal) and rows must sum to 1."""
    assert_finite(maps, what)
    T = maps.shape[-1]
    upper = torch.triu(torch.ones(T, T, dtype=torch.bool, device=maps.device), diagonal=1)
    if upper.any() and maps[..., upper].abs().max().item() != 0:
        raise ValueError(f"{what}: attention above the diagonal is not 0 (not causal)")
    err = (maps.sum(-1) - 1).abs().max().item()
    if err > atol:
        raise ValueError(f"{what}: attention rows sum to 1 ± {err:.2e}, more than {atol}")


def maps_table(phrase: str, maps: torch.Tensor, quantum: int) -> pd.DataFrame:
    """Long table of one phrase's maps [layers, heads, T, T], lower triangle, quantized."""
    L, H, T, _ = maps.shape
    rows, cols = np.tril_indices(T)
    w = maps[:, :, rows, cols].cpu().numpy()                   # [L, H, cells]
    q = np.round(w * quantum) / quantum
    layer = np.repeat(np.arange(L), H * len(rows))
    head = np.tile(np.repeat(np.arange(H), len(rows)), L)
    return pd.DataFrame(dict(phrase=phrase, layer=layer.astype(np.int16), head=head.astype(np.int16),
                             row=np.tile(rows, L * H).astype(np.int16),
                             col=np.tile(cols, L * H).astype(np.int16),
                             weight=q.reshape(-1).astype(np.float32)))


def own_phrases(texts: pd.DataFrame) -> pd.DataFrame:
    """Your own text (a table of :func:`headwatch.api.sequences`: ``seq, token_ids, tokens``) as phrases:
    each named ``text {seq}``, with no expected next token (its predictions are the model's top alone)."""
    return pd.DataFrame(dict(phrase=[f"text {s}" for s in texts["seq"]], token_ids=list(texts["token_ids"]),
                             tokens=list(texts["tokens"]), expected=None, expected_id=None, also=None,
                             also_id=None))


def tokens_table(phrases: pd.DataFrame) -> pd.DataFrame:
    """``phrase, pos, token_id, token`` for every phrase."""
    return pd.DataFrame([dict(phrase=r.phrase, pos=i, token_id=int(t), token=s)
                         for r in phrases.itertuples()
                         for i, (t, s) in enumerate(zip(r.token_ids, r.tokens))])


@torch.no_grad()
def predictions_table(model, tokenizer, phrase_row, logits_last: torch.Tensor, top: int) -> pd.DataFrame:
    """Top-``top`` next tokens with probabilities, plus the expected (and `also`) token's
    probability and rank (1 = the model's first choice)."""
    probs = torch.softmax(logits_last.float(), dim=-1).cpu()
    assert_finite(probs, f"phrase {phrase_row.phrase}: next-token probabilities")
    order = torch.argsort(probs, descending=True)
    rank_of = torch.empty_like(order)
    rank_of[order] = torch.arange(1, len(order) + 1)

    def about(token_id):
        if token_id is None or pd.isna(token_id):
            return None, None
        return float(probs[int(token_id)]), int(rank_of[int(token_id)])

    also = getattr(phrase_row, "also", None)                  # a phrase may name no second token
    p_exp, r_exp = about(phrase_row.expected_id)
    p_also, r_also = about(getattr(phrase_row, "also_id", None))
    return pd.DataFrame([dict(phrase=phrase_row.phrase, rank=k + 1, token_id=int(i),
                              token=tokenizer.decode([int(i)]), prob=float(probs[i]),
                              expected=phrase_row.expected, expected_prob=p_exp, expected_rank=r_exp,
                              also=also, also_prob=p_also, also_rank=r_also)
                         for k, i in enumerate(order[:top].tolist())]).astype(
        {"expected_rank": "Int64", "also_prob": "Float64", "also_rank": "Int64"})


@torch.no_grad()
def phrase_outputs(model, tokenizer, phrases: pd.DataFrame, quantum: int, top: int, adapter=None):
    """(maps, tokens, predictions) tables for every phrase: one forward each, the maps by a
    capture at the ``pattern`` site; two named phases of the call's progress (the maps and
    predictions, then the tables)."""
    maps_parts, pred_parts = [], []
    with phases("attention_maps", 2) as step:
        step(f"every head's map and the next tokens on {len(phrases)} phrases")
        for row in progress(list(phrases.itertuples()), desc="phrases", unit="phrase"):
            maps, logits = maps_and_logits(model, torch.tensor([list(row.token_ids)]), adapter)
            maps = maps[0]                                         # [L, H, T, T]
            assert_maps(maps, f"phrase {row.phrase}: attention maps")
            maps_parts.append(maps_table(row.phrase, maps, quantum))
            pred_parts.append(predictions_table(model, tokenizer, row, logits[0, -1], top))
        step("the tables of maps, tokens and predictions")
        return (pd.concat(maps_parts, ignore_index=True), tokens_table(phrases),
                pd.concat(pred_parts, ignore_index=True))
