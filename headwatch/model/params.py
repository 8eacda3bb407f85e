"""Parameters by block, counted from a model's own modules: the one parameter count.

Every count of a built model comes from here: the anatomy's parameters by block of
every studied model, reference config and sweep shape (protocol §6), and
:func:`headwatch.charlm.model.count_params`, which builds the character model on the
``meta`` device and calls :func:`block_counts`; the sweep's own counts are arithmetic on
the shape (:meth:`headwatch.charlm.spec.ModelSpec.param_counts`, which the checks read for
any shape without building it), held equal to ``count_params`` by a test. A
parameter belongs to the block of the module that owns it
(:func:`headwatch.model.arch.model_parts` says which modules those are); a tied
input/output matrix is counted once, as input embeddings.
"""
from __future__ import annotations

import pandas as pd
from torch import nn

from .arch import model_parts


class BlockCountError(RuntimeError):
    """Parameter blocks that do not add up to the model's parameter count."""


BLOCKS = ["input_embeddings", "position_embeddings", "attention", "ffn", "norms",
          "output_embeddings", "other"]

COUNTED = {
    "input_embeddings": "token embedding matrix (vocab × width){tied}",
    "position_embeddings": "learned position embeddings (context × width); 0 for rotary models",
    "attention": "q, k, v (or fused QKV) and output projections of every layer, their biases included",
    "ffn": "every layer's feed-forward network, its biases included",
    "norms": "every LayerNorm/RMSNorm (before attention, before the FFN, final, any q/k norm), "
             "weights and biases",
    "output_embeddings": "output head (vocab × width){tied}",
    "other": "parameters in none of the blocks above (expected 0)",
    "total": "sum of the blocks = sum(p.numel()) over the model's parameters (a tied matrix once)",
}


def classify_parameters(model: nn.Module) -> pd.DataFrame:
    """One row per parameter tensor: name, block, numel, is_bias (tied tensors once)."""
    return pd.DataFrame(_parameter_rows(model), columns=["name", "block", "numel", "is_bias"])


def _parameter_rows(model: nn.Module) -> list[dict]:
    parts = model_parts(model)
    attention = {id(m) for m in parts["attention"]}
    norms = {id(m) for m in parts["norms"]}
    # embeddings by tensor, not by module: a tied output head shares the input's tensor
    inputs = {id(p) for m in parts["input_embeddings"] for p in m.parameters()}
    outputs = {id(p) for m in parts["output_embeddings"] for p in m.parameters()} - inputs
    ffn = {id(m) for f in parts["ffn"] for m in f.modules()}
    rows, seen = [], set()
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if id(p) in inputs:
                block = "input_embeddings"
            elif id(p) in outputs:
                block = "output_embeddings"
            elif id(module) in norms:
                block = "norms"
            elif id(module) in attention:
                block = "attention"
            elif id(module) in ffn:
                block = "ffn"
            elif isinstance(module, nn.Embedding):
                block = "position_embeddings"
            else:
                block = "other"
            rows.append(dict(name=f"{mname}.{pname}" if mname else pname, block=block,
                             numel=p.numel(), is_bias=pname == "bias"))
    return rows


def params_by_block(model: nn.Module, name: str = "", source: str = "") -> pd.DataFrame:
    """Rows ``block, params, share, biases, counted`` for every block and the total.

    Raises :class:`BlockCountError` when the blocks do not add up to
    ``sum(p.numel())`` (a parameter counted twice or missed).
    """
    per = classify_parameters(model)
    total = sum(p.numel() for p in model.parameters())
    parts = model_parts(model)
    tied = bool({id(p) for m in parts["input_embeddings"] for p in m.parameters()}
                & {id(p) for m in parts["output_embeddings"] for p in m.parameters()})
    rows = []
    for block in BLOCKS:
        sel = per[per["block"] == block]
        n = int(sel["numel"].sum())
        rows.append(dict(name=name, source=source, block=block, params=n, share=n / total,
                         biases=int(sel.loc[sel["is_bias"], "numel"].sum()),
                         counted=COUNTED[block].format(
                             tied=" — also the output head (tied)" if tied and block == "input_embeddings"
                             else " — 0: tied to the input embeddings" if tied else ""),
                         error=""))
    blocks_sum = sum(r["params"] for r in rows)
    if blocks_sum != total:
        raise BlockCountError(f"{name}: parameter blocks sum to {blocks_sum}, the model has {total}")
    rows.append(dict(name=name, source=source, block="total", params=total, share=1.0,
                     biases=int(per.loc[per["is_bias"], "numel"].sum()), counted=COUNTED["total"],
                     error=""))
    return pd.DataFrame(rows)


def block_counts(model: nn.Module) -> dict[str, int]:
    """``{block: parameters}`` for every block of :data:`BLOCKS` and ``total``: the sums of
    :func:`params_by_block`, without a table (the sweep's config checks count many shapes)."""
    counts = dict.fromkeys(BLOCKS, 0)
    for row in _parameter_rows(model):
        counts[row["block"]] += row["numel"]
    total = sum(p.numel() for p in model.parameters())
    if sum(counts.values()) != total:
        raise BlockCountError(f"parameter blocks sum to {sum(counts.values())}, the model has {total}")
    return dict(counts, total=total)
