"""The prompts every patching, circuit and edge computation runs on, named once (protocol §5d).

A :class:`PromptBatch` holds the clean and corrupted prompts' token ids ``[N, T]``, their attention
mask (None when every prompt has one length: nothing padded), and each prompt's answer and distractor
token ``[N]``. :meth:`PromptBatch.of` builds it from a prompts table (``prompts.parquet``, a pairs
file's, :func:`headwatch.prompt_pairs`'); prompts of different lengths (a pairs file) are padded on the
left to the longest with :data:`PAD_ID`, which the mask hides. :func:`logit_diff` is the metric every
one of them reads: the answer's logit minus the distractor's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..model.interventions import at_least_float32
from ..settings.patching import PatchingError

PAD_ID = 0
"""The id on the padding of a left-padded batch; the attention mask hides it (the guard
:func:`headwatch.guards.padded_vs_alone` shows each prompt's logits as when run alone)."""


def logit_diff(logits: torch.Tensor, answer: torch.Tensor, distractor: torch.Tensor,
               exact: bool = False) -> torch.Tensor:
    """``logits[i, answer[i]] − logits[i, distractor[i]]`` for ``logits`` ``[B, vocab]``: in float32
    (float64 for a model in float64: :func:`headwatch.model.interventions.in_float64`); ``exact``: the
    two logits as they are, their difference taken in float64 (no rounding of the difference)."""
    rows = torch.arange(len(logits), device=logits.device)
    answer, distractor = answer.to(logits.device), distractor.to(logits.device)
    if exact:
        return logits[rows, answer].double() - logits[rows, distractor].double()
    x = at_least_float32(logits)
    return x[rows, answer] - x[rows, distractor]


@dataclass(frozen=True)
class PromptBatch:
    """Clean and corrupted prompts (``clean``, ``corrupted`` ``[N, T]``, left-padded), their attention
    ``mask`` ``[N, T]`` (1 = a token, 0 = padding; None: one length, the batch runs without a mask) and
    each prompt's ``answer`` and ``distractor`` token id ``[N]``. See the module doc."""
    clean: torch.Tensor
    corrupted: torch.Tensor
    answer: torch.Tensor
    distractor: torch.Tensor
    mask: torch.Tensor | None = None

    def __post_init__(self):
        if self.clean.shape != self.corrupted.shape:
            raise PatchingError(f"clean {tuple(self.clean.shape)} and corrupted {tuple(self.corrupted.shape)} "
                                "prompts differ in shape")
        if self.mask is not None and self.mask.shape != self.clean.shape:
            raise PatchingError(f"the mask {tuple(self.mask.shape)} is not the prompts' shape "
                                f"{tuple(self.clean.shape)}")
        if not len(self.answer) == len(self.distractor) == len(self.clean):
            raise PatchingError(f"{len(self.clean)} prompts with {len(self.answer)} answers and "
                                f"{len(self.distractor)} distractors")

    @classmethod
    def of(cls, prompts) -> "PromptBatch":
        """The batch of a prompts table (``clean_ids``, ``corrupted_ids``, ``answer_id``,
        ``distractor_id``): prompts of different lengths padded on the left to the longest."""
        lengths = prompts["clean_ids"].map(len).to_numpy()
        T = int(lengths.max())
        if len(set(lengths.tolist())) == 1:
            stack = lambda col: torch.tensor(np.stack(prompts[col].to_numpy()), dtype=torch.long)
            mask = None
        else:
            stack = lambda col: torch.tensor(np.stack([np.concatenate([np.full(T - len(x), PAD_ID), x])
                                                       for x in prompts[col]]), dtype=torch.long)
            n = torch.tensor(lengths)
            mask = (torch.arange(T).unsqueeze(0) >= (T - n).unsqueeze(1)).long()
        return cls(stack("clean_ids"), stack("corrupted_ids"), torch.tensor(prompts["answer_id"].to_numpy()),
                   torch.tensor(prompts["distractor_id"].to_numpy()), mask)

    def __len__(self) -> int:
        return len(self.clean)

    @property
    def length(self) -> int:
        """T, the positions of every prompt (padding included)."""
        return self.clean.shape[1]

    def to(self, device) -> "PromptBatch":
        """The batch on ``device``."""
        return PromptBatch(*(None if x is None else x.to(device)
                             for x in (self.clean, self.corrupted, self.answer, self.distractor, self.mask)))

    def rows(self, rows) -> "PromptBatch":
        """The prompts ``rows`` (a slice, or indices: a list or a tensor on the batch's device)."""
        return PromptBatch(*(None if x is None else x[rows]
                             for x in (self.clean, self.corrupted, self.answer, self.distractor, self.mask)))

    def mask_of(self, rows) -> torch.Tensor | None:
        """The attention mask of the prompts ``rows`` (None: nothing is padded)."""
        return None if self.mask is None else self.mask[rows]

    def logit_diff(self, logits: torch.Tensor, rows=None, exact: bool = False) -> torch.Tensor:
        """:func:`logit_diff` of ``logits`` ``[B, vocab]``, one row per prompt of ``rows`` (None: every
        prompt) in order."""
        if rows is None:
            return logit_diff(logits, self.answer, self.distractor, exact)
        return logit_diff(logits, self.answer[rows], self.distractor[rows], exact)
