"""The heads a sweep model grows (protocol §7b): the §4 scores of a character model, its
in-context score, and when its best induction head forms.

* **The probe** (:func:`make_probe`), built once per job from the validation split and the
  ``sweep.heads`` settings, seeded and fixed, so every evaluation step of a run (and every run)
  reads the same characters:

  - ``windows``: ``windows`` windows of ``context + 1`` characters spaced evenly over the
    validation split (the inputs are the first ``context``; the last character is the target
    of the in-context score);
  - ``random``: ``sequences`` sequences of ``T = context // 2`` ids drawn uniformly from the
    model's vocabulary with ``numpy.random.default_rng([seed, 0])``, each repeated once
    (``2T`` ≤ context);
  - ``text``: ``sequences`` validation passages of ``T`` characters (starts spaced evenly over
    the split), each seen twice.

* **Scores** (:func:`probe_scores`): the §4 functions of :mod:`headwatch.scores` on the charlm
  family's ``pattern`` site — ``sink``, ``prev``, ``self`` on the windows' inputs (rows r ≥ 1),
  ``induction`` on the repeated random sequences and ``induction_text`` on the repeated
  passages (``A[r, r-T+1]``, rows T … 2T-2). No second implementation: this module only
  chooses the sequences.
* **In-context score** (:func:`in_context_score`): on the same windows, the mean loss at the
  late positions (the last ``late``) minus the mean loss at the early positions
  (``1 … early``), nats per character; negative when later characters are predicted better
  than early ones, i.e. when the model uses its context.
* **Formation step** (:func:`formation_step`): the first recorded step at which the best head's
  induction score reaches ``threshold``; None when it never does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from ..arch import Adapter
from .checks import positions_error
from ..scores import induction_scores, prose_scores

PROBE_KEYS = ("windows", "sequences", "seed", "early", "late")
"""The ``sweep.heads`` settings a training job depends on (``threshold`` is read by the study)."""
HEAD_SCORES = ("sink", "prev", "self", "induction", "induction_text")
"""The columns of ``heads.parquet`` beside ``step, layer, head``: the §4 scores, induction on
both probes."""
HEADS_COLUMNS = ("step", "layer", "head", *HEAD_SCORES)


def heads_settings(cfg: dict) -> dict:
    """The probe's part of the ``sweep.heads`` slice, checked: every key present."""
    missing = [k for k in PROBE_KEYS if k not in cfg]
    if missing:
        raise KeyError(f"sweep.heads lacks {missing}")
    return {k: cfg[k] for k in PROBE_KEYS}


@dataclass(frozen=True)
class Probe:
    """The fixed sequences one job scores its heads on (on the model's device)."""

    windows: torch.Tensor     # [windows, context + 1] validation characters
    random: torch.Tensor      # [sequences, 2T] random ids, repeated
    text: torch.Tensor        # [sequences, 2T] validation passages, repeated
    half_length: int          # T
    early: int
    late: int

    def to(self, device) -> "Probe":
        return Probe(self.windows.to(device), self.random.to(device), self.text.to(device),
                     self.half_length, self.early, self.late)


def make_probe(val_ids, vocab_size: int, context: int, cfg: dict) -> Probe:
    """The probe of one job (see the module doc): depends on the validation ids, the vocabulary
    size, the context and ``sweep.heads`` only."""
    from .train import eval_offsets

    cfg = heads_settings(cfg)
    val = torch.as_tensor(np.asarray(val_ids, dtype=np.int64))
    T = context // 2
    if T < 2:
        raise ValueError(f"context {context} is too short for a repeated sequence")
    if (err := positions_error(context, cfg["early"], cfg["late"])):
        raise ValueError(err)
    starts = torch.as_tensor(eval_offsets(len(val), cfg["windows"], context))
    windows = val[starts.unsqueeze(1) + torch.arange(context + 1)]
    random = repeated_random(vocab_size, cfg["sequences"], T, cfg["seed"], PROBE_STREAM)
    passages = torch.as_tensor(eval_offsets(len(val), cfg["sequences"], T))
    text = val[passages.unsqueeze(1) + torch.arange(T)]
    return Probe(windows, random, text.repeat(1, 2), T, int(cfg["early"]), int(cfg["late"]))


PROBE_STREAM, CUT_STREAM = 0, 1
"""The random streams of the probe's sequences and of the cut's (never the same sequences)."""


def repeated_random(vocab_size: int, n: int, half_length: int, seed: int, stream: int) -> torch.Tensor:
    """``n`` sequences of ``half_length`` ids uniform over the vocabulary, each repeated once:
    ``numpy.random.default_rng([seed, stream])``. [n, 2 × half_length]"""
    rng = np.random.default_rng([int(seed), int(stream)])
    return torch.as_tensor(rng.integers(0, vocab_size, size=(n, half_length)), dtype=torch.long).repeat(1, 2)


@torch.no_grad()
def probe_scores(model, probe: Probe, adapter: Adapter | None = None) -> dict[str, torch.Tensor]:
    """The five scores of every head on the probe: {name: [layers, heads]} (the model's mode is
    kept)."""
    adapter = adapter or Adapter(model)
    was = model.training
    model.eval()
    x = probe.windows[:, :-1]
    scores = prose_scores(model, adapter, [x])
    scores["induction"] = induction_scores(model, adapter, probe.random, probe.half_length, batch=len(probe.random))
    scores["induction_text"] = induction_scores(model, adapter, probe.text, probe.half_length,
                                                batch=len(probe.text))
    model.train(was)
    return scores


def position_losses(model, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-character loss at each position of ``windows`` [N, context + 1]: [context]."""
    x, y = windows[:, :-1], windows[:, 1:]
    logits = model(x).float()
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").double().mean(0)


def in_context_from_losses(losses, early: int, late: int) -> float:
    """Mean of the last ``late`` positions' losses minus the mean at positions ``1 … early``
    (0-based: position t predicts character t + 1 from characters 0 … t)."""
    losses = torch.as_tensor(losses, dtype=torch.float64)
    if early < 1 or late < 1 or (err := positions_error(len(losses), early, late)):
        raise ValueError(err or f"early ({early}) and late ({late}) must be at least 1")
    return float(losses[-late:].mean() - losses[1:early + 1].mean())


@torch.no_grad()
def in_context_score(model, probe: Probe) -> float:
    """The in-context score of ``model`` on the probe's windows (nats per character)."""
    was = model.training
    model.eval()
    score = in_context_from_losses(position_losses(model, probe.windows), probe.early, probe.late)
    model.train(was)
    return score


def cut_table(model, scores: dict[str, torch.Tensor], cfg: dict, ablation: dict):
    """§5a on a sweep model: its top induction head (by ``scores``, the random probe's) cut, zero
    and mean, against one head drawn at random from the others (``ablation.random_draws`` draws,
    ``ablation.seed``); loss per character on copy 1 and copy 2 of ``cfg["cut_sequences"]`` repeated
    random sequences (T = context // 2; stream :data:`CUT_STREAM`, so not the probe's). The §5a
    code itself (:func:`headwatch.ablation.run_topk`, its guards included) with top_n = k = 1.
    Returns (table, note, guard record)."""
    from ..ablation import run_topk
    from ..scores import scores_table

    adapter = Adapter(model)
    T = model.spec.context // 2
    ids = repeated_random(model.spec.vocab_size, int(cfg["cut_sequences"]), T, cfg["seed"], CUT_STREAM)
    eval_df = pd.DataFrame(dict(token_ids=list(ids.numpy()), half_length=T, offset=0))
    return run_topk(model, adapter, eval_df, scores_table(adapter, scores), dict(ablation, top_n=1, k=[1]))


def records(step: int, scores: dict[str, torch.Tensor]) -> list[dict]:
    """One plain row per head (layer-major): ``step, layer, head`` and the five scores."""
    L, H = scores["induction"].shape
    return [dict(step=int(step), layer=l, head=h, **{k: float(scores[k][l, h]) for k in HEAD_SCORES})
            for l in range(L) for h in range(H)]


def heads_frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(HEADS_COLUMNS))


def formation_step(heads: pd.DataFrame, threshold: float, score: str = "induction") -> int | None:
    """The first step at which the best head's ``score`` reaches ``threshold``; None if never."""
    best = heads.groupby("step")[score].max().sort_index()
    formed = best[best >= threshold]
    return None if formed.empty else int(formed.index[0])
