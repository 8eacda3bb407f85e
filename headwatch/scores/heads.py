"""Head scores (protocol §4): sink, prev, self, induction — each in [0, 1].

A map ``A`` has rows = the token that looks and columns = the token looked at.
Each score is the plain mean of the cells it reads, pooled over sequences:

* ``sink``:  ``A[r, 0]``      rows r ≥ 1, over the prose sentences
* ``prev``:  ``A[r, r-1]``    rows r ≥ 1, prose
* ``self``:  ``A[r, r]``      rows r ≥ 1, prose (row 0 can only look at itself)
* ``induction``: ``A[r, r-T+1]`` for rows r = T … 2T-2 (shifted by the BOS
  offset when there is one) on the repeated random sequences: the token that
  followed the earlier occurrence of the current token. 24 rows × 40 sequences.

The ``*_cells`` functions return exactly the cells a score reads, for any
leading dimensions ``[..., T, T]``; scoring a model reduces them inside the
forward pass, one batch at a time, so no full set of maps is ever held. The maps
are a capture at the ``pattern`` site (:func:`headwatch.model.interventions.attention_maps`).
"""
from __future__ import annotations

import logging

import pandas as pd
import torch

from ..model.interventions import attention_maps  # the maps every score reads (also importable from here)
from ..names import SCORES  # the four scores, in the order of every table and figure
from ..jobs import phases, progress

log = logging.getLogger("headwatch.scores")

PROSE_SCORES = SCORES[:3]       # read on the prose sentences; induction on the repeated sequences


def sink_cells(A: torch.Tensor) -> torch.Tensor:
    return A[..., 1:, 0]


def prev_cells(A: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(A, offset=-1, dim1=-2, dim2=-1)  # A[r, r-1], r = 1 … T-1


def self_cells(A: torch.Tensor) -> torch.Tensor:
    return torch.diagonal(A, dim1=-2, dim2=-1)[..., 1:]


def induction_cells(A: torch.Tensor, half_length: int, offset: int = 0) -> torch.Tensor:
    """``A[r, r-T+1]`` for r = offset+T … offset+2T-2 (T-1 cells per sequence)."""
    T = half_length
    diag = torch.diagonal(A, offset=-(T - 1), dim1=-2, dim2=-1)  # element j is A[j+T-1, j]
    return diag[..., offset + 1: offset + T]


class _Mean:
    """Running sum and count of cells per head."""

    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, cells: torch.Tensor) -> None:  # cells [batch, layers, heads, n]
        self.total = self.total + cells.sum(dim=(0, -1)).double()    # on the cells' device
        self.count += cells.shape[0] * cells.shape[-1]

    def mean(self) -> torch.Tensor:
        return (self.total / self.count).float().cpu()


def _batches(ids: torch.Tensor, batch: int):
    for start in progress(range(0, len(ids), batch), desc="scores", unit="batch"):
        yield ids[start:start + batch]


def induction_scores(model, adapter, ids: torch.Tensor, half_length: int, offset: int = 0,
                     batch: int = 8) -> torch.Tensor:
    """Induction score of every head: [layers, heads]."""
    ids = ids.to(next(model.parameters()).device)      # once, not per batch
    acc = _Mean()
    for chunk in _batches(ids, batch):
        acc.add(induction_cells(attention_maps(model, chunk, adapter=adapter), half_length, offset))
    return acc.mean()


def prose_scores(model, adapter, sentences: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """sink, prev and self of every head over the prose sentences: {name: [layers, heads]}.

    Sentences have different lengths, so each runs alone (no padding to mask); a 2-D tensor
    among them is a batch of sentences of one length, run together (the same pooled means).
    """
    accs = {name: _Mean() for name in PROSE_SCORES}
    cells = {"sink": sink_cells, "prev": prev_cells, "self": self_cells}
    for ids in sentences:
        maps = attention_maps(model, ids if ids.dim() == 2 else ids.reshape(1, -1), adapter=adapter)
        for name, acc in accs.items():
            acc.add(cells[name](maps))
    return {name: acc.mean() for name, acc in accs.items()}


def scores_table(adapter, scores: dict[str, torch.Tensor]) -> pd.DataFrame:
    """One row per head (layer-major) with the four scores and their ranks (1 = highest)."""
    rows = [dict(layer=l, head=h, kv_group=adapter.kv_group(h),
                 **{name: float(scores[name][l, h]) for name in SCORES})
            for l, h in adapter.heads()]
    df = pd.DataFrame(rows)
    for name in SCORES:
        df[f"{name}_rank"] = df[name].rank(ascending=False, method="min").astype(int)
    return df


def four_scores(model, adapter, sentences: list[torch.Tensor], induction_ids: torch.Tensor,
                half_length: int, offset: int = 0, batch: int = 8) -> pd.DataFrame:
    """The scores table of protocol §4 for every head of ``model`` (two named phases of the call's
    progress: the prose scores, the induction score)."""
    log.info("scoring %d heads: %d prose sentences, %d induction sequences",
             adapter.n_layers * adapter.n_heads, len(sentences), len(induction_ids))
    with phases("head_scores", 2) as step:
        step(f"sink, prev and self on {len(sentences)} prose sentences")
        scores = prose_scores(model, adapter, progress(sentences, desc="prose", unit="sentence"))
        step(f"induction on {len(induction_ids)} repeated sequences")
        scores["induction"] = induction_scores(model, adapter, induction_ids, half_length, offset, batch)
    return scores_table(adapter, scores)
