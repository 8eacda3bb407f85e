"""The induction sweep's tasks (protocol §7c): seeded generators of sequences on which predicting
from the context is the only way to lower the loss, their controls, and the references each
loss is read against. numpy only.

Every generator returns rows of ``context + 1`` token ids (a row is one training or evaluation
sequence: position ``t`` predicts token ``t + 1``) and, per row and position, whether that
prediction is *predictable* — the part of the sequence the task's loss is read on.

* ``repeat`` (:func:`repeat_rows`): each row is segments ``a + a`` back to back, ``a`` of
  ``len`` distinct random tokens, its length drawn per segment from ``half`` (inclusive): a token
  of a second copy is predictable from the context only (the token after its earlier copy), and
  since lengths vary no one offset copies (protocol §5f). Predictable: every token of a second
  copy but its first (whose predecessor ends the first copy: nothing says the copy starts).
* ``repeat_control``: the same rows with a fresh segment ``b`` in place of each second copy: nothing
  to read from the context (the same positions are read, and should stay near ``ln V``).
* ``markov`` (:func:`markov_rows`): in-context Markov chains (Edelman et al. 2024): each row is a
  chain over ``states`` states whose transition matrix is drawn for that row alone, every row of
  it from Dirichlet(``alpha``); the first state is uniform. The best predictor is the in-context
  bigram estimate: its exact loss per position is :func:`bayes_losses`; the in-context unigram
  estimate (:func:`unigram_losses`) reads the tokens without their order. Predictable: the tail,
  positions ``t ≥ context // 2``.
* ``markov_control``: every row from one fixed matrix (drawn once from the same prior): the
  bigram is learnt in the weights, nothing needs the context; its reference is the chain's own
  conditional entropy (:func:`chain_losses`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TASKS = ("repeat", "markov")
"""The tasks that need the context."""
CONTROLS = {"repeat": "repeat_control", "markov": "markov_control"}
"""Each task's control: the same models on sequences with nothing to read from the context."""
ALL_TASKS = TASKS + tuple(CONTROLS.values())


@dataclass(frozen=True)
class Batch:
    """Rows of a task: ``ids`` ``[n, context + 1]`` (int64), ``predictable`` ``[n, context]`` (bool:
    position t's prediction of token t + 1 is read), and two references ``[n, context]`` (nats):
    ``reference``, the loss of the task's best predictor at each position (0 in a repeated copy, the
    Bayes-optimal in-context bigram's for a Markov chain, the known chain's for its control), and
    ``unigram``, the loss of the best predictor that reads which tokens the context holds but not
    their order (below)."""
    ids: np.ndarray
    predictable: np.ndarray
    reference: np.ndarray
    unigram: np.ndarray


def repeat_rows(n: int, context: int, vocab: int, half: tuple[int, int], seed, repeat: bool = True) -> Batch:
    """``n`` rows of the ``repeat`` task (``repeat=False``: its control); ``seed``: numpy's seed (an int
    or a sequence of ints). Each row is segments back to back, a segment ``len`` distinct tokens
    (the first ``len`` of a random permutation of the vocabulary) and then the same again (or, in the
    control, ``len`` other distinct tokens), ``len`` drawn from ``half``; ``half[1] <= vocab``.

    The references of each target: in a fresh segment the j-th token is uniform over the
    ``vocab − j`` tokens the segment has not used, ``ln(vocab − j)``, for both. In a second copy the
    best loss is 0 (the earlier copy's token), and the best without the order is uniform over the
    ``len − j`` tokens of the first copy that the second has not repeated yet, ``ln(len − j)`` (knowing
    where the copy starts: a bound no predictor without the order can beat)."""
    if not 1 <= half[0] <= half[1] <= vocab:
        raise ValueError(f"segment lengths {list(half)} must lie within 1 .. vocab = {vocab} (distinct tokens)")
    rng = np.random.default_rng(seed)
    length = context + 1
    segments = length // (2 * half[0]) + 1                      # enough to fill a row at the shortest length
    lens = rng.integers(half[0], half[1] + 1, size=(n, segments))
    first = rng.random((n, segments, vocab)).argsort(axis=2)
    second = first if repeat else rng.random((n, segments, vocab)).argsort(axis=2)
    ends = np.cumsum(2 * lens, axis=1)                           # [n, segments]: where each segment pair ends
    pos = np.arange(length)
    seg = (ends[:, :, None] <= pos[None, None, :]).sum(axis=1)   # [n, length]: the segment of each position
    rows = np.arange(n)[:, None]
    start = np.where(seg > 0, ends[rows, np.maximum(seg - 1, 0)], 0)
    size = lens[rows, seg]
    off = pos[None, :] - start                                   # within the segment pair
    in_second = off >= size
    j = np.where(in_second, off - size, off)                     # within its copy
    ids = np.where(in_second, second[rows, seg, j], first[rows, seg, j]).astype(np.int64)
    fresh = np.log(vocab - j)
    best = np.where(in_second & repeat, 0.0, fresh)
    unordered = np.where(in_second & repeat, np.log(np.maximum(size - j, 1)), fresh)
    targets = in_second & (j >= 1)                               # copy 2 but its first token
    return Batch(ids, targets[:, 1:], best[:, 1:], unordered[:, 1:])   # position t predicts token t + 1


def dirichlet_matrices(rng: np.random.Generator, n: int, states: int, alpha: float) -> np.ndarray:
    """``n`` transition matrices ``[n, states, states]``, every row from Dirichlet(alpha)."""
    return rng.dirichlet(np.full(states, float(alpha)), size=(n, states))


def chains(rng: np.random.Generator, matrices: np.ndarray, length: int) -> np.ndarray:
    """One chain of ``length`` states per matrix, the first state uniform: ``[n, length]``."""
    n, states, _ = matrices.shape
    out = np.empty((n, length), dtype=np.int64)
    out[:, 0] = rng.integers(0, states, n)
    cumulative = matrices.cumsum(axis=2)
    for t in range(1, length):
        rows = cumulative[np.arange(n), out[:, t - 1]]                    # [n, states]
        u = rng.random(n)[:, None]
        out[:, t] = np.minimum((u > rows).sum(axis=1), states - 1)
    return out


def bayes_losses(ids: np.ndarray, states: int, alpha: float) -> np.ndarray:
    """The exact loss (nats) of the Bayes-optimal predictor of an in-context Markov chain at each
    position, ``[n, length - 1]``: with every row of the row's matrix from Dirichlet(alpha), the
    posterior predictive of token t + 1 is ``(c[x_t, j] + alpha) / (c[x_t, ·] + states · alpha)``,
    ``c`` the transitions counted in tokens 0 … t; the loss is −log of it at the token that comes."""
    ids = np.asarray(ids, dtype=np.int64)
    n, length = ids.shape
    counts = np.zeros((n, states, states))
    out = np.empty((n, length - 1))
    rows = np.arange(n)
    for t in range(length - 1):
        here, nxt = ids[:, t], ids[:, t + 1]
        c = counts[rows, here]                                                 # [n, states]
        out[:, t] = -np.log((c[rows, nxt] + alpha) / (c.sum(axis=1) + states * alpha))
        counts[rows, here, nxt] += 1
    return out


def unigram_losses(ids: np.ndarray, states: int, alpha: float = 1.0) -> np.ndarray:
    """The loss of the in-context unigram estimate at each position, ``[n, length − 1]``: token t + 1
    predicted by ``(m_j + alpha) / (t + 1 + states · alpha)``, ``m`` the counts of tokens 0 … t (the
    context's tokens without their order; ``alpha`` = 1, Laplace's rule)."""
    ids = np.asarray(ids, dtype=np.int64)
    n, length = ids.shape
    counts = np.zeros((n, states))
    out = np.empty((n, length - 1))
    rows = np.arange(n)
    for t in range(length - 1):
        counts[rows, ids[:, t]] += 1
        out[:, t] = -np.log((counts[rows, ids[:, t + 1]] + alpha) / (t + 1 + states * alpha))
    return out


def chain_losses(ids: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """The loss of the predictor that knows the chain's matrix: ``−log P[x_t, x_{t+1}]``."""
    ids = np.asarray(ids, dtype=np.int64)
    return -np.log(matrix[ids[:, :-1], ids[:, 1:]])


def markov_rows(n: int, context: int, states: int, alpha: float, seed, fixed_seed: int | None = None) -> Batch:
    """``n`` rows of the ``markov`` task; ``seed`` draws the matrices and the chains. With
    ``fixed_seed``, its control: every row from the one matrix :func:`fixed_matrix` draws for that
    seed (a run's, so that all its batches share it)."""
    rng = np.random.default_rng(seed)
    if fixed_seed is not None:
        matrix = fixed_matrix(states, alpha, fixed_seed)
        ids = chains(rng, np.broadcast_to(matrix, (n, states, states)), context + 1)
        reference = chain_losses(ids, matrix)
    else:
        ids = chains(rng, dirichlet_matrices(rng, n, states, alpha), context + 1)
        reference = bayes_losses(ids, states, alpha)
    predictable = np.zeros((n, context), dtype=bool)
    predictable[:, context // 2:] = True
    return Batch(ids, predictable, reference, unigram_losses(ids, states))


FIXED_STREAM = 1_000_003
"""The random stream of the control's matrix (never one a batch draws from)."""


def fixed_matrix(states: int, alpha: float, seed: int) -> np.ndarray:
    """The control's one matrix for a run of seed ``seed``, drawn from the task's prior:
    ``default_rng([seed, FIXED_STREAM])``."""
    return dirichlet_matrices(np.random.default_rng([int(seed), FIXED_STREAM]), 1, states, alpha)[0]
