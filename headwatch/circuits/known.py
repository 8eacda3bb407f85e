"""A circuit known before looking (protocol §5f; rule circuits_known).

**The known circuit** (:func:`known_circuit`): a two-layer character model with rotary
positions (:data:`KNOWN_MODEL`) trained on random tokens, each sequence repeated once, grows
a previous-token head in layer 0 and an induction head in layer 1 that reads it through its
key (Olsson et al. 2022); its attention names them (:func:`known_attention`). The same
metric machinery (a :class:`~headwatch.patching.patcher.Patcher` whose answer is the correct next
token and whose distractor another token) asks whether each method recovers them, and a control trained
on sequences that never repeat asks whether a method claims a circuit that is not there.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from ..model.arch import head_label
from ..model.device import exact_numerics
from ..model.interventions import attention_maps
from ..names import top_heads
from ..patching.attribution import attribution_patching, qk_estimates
from ..patching.batch import PromptBatch
from ..patching.patcher import Patch, Patcher
from ..scores.heads import induction_cells, prev_cells
from ..settings.circuits import CircuitsError
from .path_patching import PATH_SITES, PathPatcher, edges_into

log = logging.getLogger("headwatch.circuits.known")


# ------------------------------------------------------------------ the known circuit (§5f)
def induction_prompts(vocab: int, n: int, half: int, seed: int) -> PromptBatch:
    """``n`` clean prompts ``a + a[:-1]`` (random tokens ``a`` of length ``half``, repeated; the
    last position's next token is ``a[-1]``) and their corrupted twins ``b + a[:-1]`` (another
    first half ``b`` with ``b[-1] ≠ a[-1]`` and ``b[-2] ≠ a[-2]``): clean, corrupted ``[n, 2·half−1]``,
    the answer ``a[-1]`` (the correct next token) and the distractor ``b[-1]`` ``[n]``."""
    g = torch.Generator().manual_seed(int(seed))
    a = torch.randint(0, vocab, (n, half), generator=g)
    b = torch.randint(0, vocab, (n, half), generator=g)
    for col in (-1, -2):                  # the corrupted first half must not hold the answer's cue
        same = b[:, col] == a[:, col]
        b[same, col] = (a[same, col] + 1) % vocab
    clean = torch.cat([a, a[:, :-1]], dim=1)
    corrupted = torch.cat([b, a[:, :-1]], dim=1)
    return PromptBatch(clean, corrupted, a[:, -1].clone(), b[:, -1].clone())


KNOWN_COLUMNS = ["model", "method", "names", "value", "unit", "recovered", "claim"]
"""The known circuit's table: one row per model and claim."""


def known_attention(model, adapter, clean: torch.Tensor, half: int) -> pd.DataFrame:
    """Every head's attention on the clean prompts ``a + a[:-1]``, read by protocol §4's cells:
    ``prev``, the mean weight on the previous position (every row from 1 on), and ``induction``,
    the mean weight from each token of the second copy on the position after its earlier copy
    (rows ``half … 2·half−2``). One row per head (``layer, head, prev, induction``)."""
    maps = attention_maps(model, clean, adapter)                  # [n, layers, heads, T, T]
    prev = prev_cells(maps).double().mean(dim=(0, -1))
    ind = induction_cells(maps, half).double().mean(dim=(0, -1))
    return pd.DataFrame([dict(layer=l, head=h, prev=float(prev[l, h]), induction=float(ind[l, h]))
                         for l, h in adapter.heads()])


def _ranked(values: np.ndarray, n: int) -> list[int]:
    """The flat indices of the ``n`` largest |values| (ties: the lower index first)."""
    return [int(i) for i in np.argsort(-np.abs(values.ravel()), kind="stable")[:n]]


def _labels(heads) -> str:
    return " ".join(head_label(*h) for h in heads) or "none"


def known_circuit(model, adapter, prompts: PromptBatch, min_effect: float, min_attention: float,
                  batch: int = 64) -> tuple[pd.DataFrame, dict]:
    """What each method recovers of a two-layer model's induction circuit (see the module doc).

    The circuit is named by attention first (:func:`known_attention`): the *previous-token
    heads* are the layer-0 heads with a ``prev`` weight of at least ``min_attention``, the
    *induction heads* the layer-1 heads with an ``induction`` weight of at least that. Then each
    method must find them, with an effect of at least ``min_effect`` logits (patched − corrupted
    mean logit difference, answer − distractor: the correct next token − the other):

    * exact head patching (every head's ``z``): the head whose clean output restores the most
      (the highest effect) is an induction head — *the* induction head of the claims below;
    * each estimate — attribution patching at ``z`` (plain, which is AtP* there) and at ``k``
      (:func:`headwatch.attribution.qk_estimates`: plain, and AtP* with its softmax recomputed) —
      has an induction head (its key/value group at ``k``) among its top 2 by |estimate|;
    * path patching, every edge from a layer-0 head into the induction head's q, k and v: the
      strongest by |effect| is a previous-token head → its key, above every other.

    Returns (one row per claim — ``method, names, value, unit, recovered, claim`` —, the note:
    every head's attention, effect and estimates, every edge's effect)."""
    if adapter.n_layers != 2:
        raise CircuitsError(f"the known circuit is a two-layer model's; this one has {adapter.n_layers} layers")
    got = _read(model, adapter, prompts, batch)
    attn, H = got.heads, adapter.n_heads
    ranked = lambda column, layer: [h for h in top_heads(attn[attn["layer"] == layer], column, H)
                                    if attn.set_index(["layer", "head"]).loc[h, column] >= min_attention]
    prev_heads, induction_heads = ranked("prev", 0), ranked("induction", 1)
    strongest = lambda column, layer: float(attn.loc[attn["layer"] == layer, column].max())
    exact, top = attn["exact"].to_numpy(), got.top
    rows = [
        dict(method="attention: previous-token heads", names=_labels(prev_heads), value=strongest("prev", 0),
             unit="attention weight", recovered=bool(prev_heads),
             claim="a layer-0 head puts at least min_attention on the previous position (value: the most any does)"),
        dict(method="attention: induction heads", names=_labels(induction_heads), value=strongest("induction", 1),
             unit="attention weight", recovered=bool(induction_heads),
             claim="a layer-1 head puts at least min_attention on the position after the earlier copy of the "
                   "current token (value: the most any does)"),
        dict(method="exact head patching (z)", names=head_label(*top), value=float(exact[top[0] * H + top[1]]),
             unit="logits", recovered=bool(top in induction_heads and exact[top[0] * H + top[1]] >= min_effect),
             claim="the head that restores the most is an induction head, effect >= min_effect"),
        *(_estimate_claim(adapter, site, name, est, induction_heads, min_effect)
          for (site, name), est in got.estimates.items()),
        _path_claim(got, prev_heads, induction_heads, min_effect)]
    groups = [adapter.kv_group(h) for h in range(H)]          # the k estimates, read per head
    note = dict(clean_logit_diff=got.clean_mean, corrupted_logit_diff=got.corrupted_mean,
                min_effect=min_effect, min_attention=min_attention,
                effect="patched - corrupted mean logit difference (correct - other)",
                previous_token_heads=_labels(prev_heads), induction_heads=_labels(induction_heads),
                induction_head=head_label(*got.induction),
                heads=attn.assign(**{f"estimate_{site}_{m}": (v if site == "z" else v[:, groups]).ravel()
                                     for (site, m), v in got.estimates.items()}).to_dict("records"),
                edges=[dict(asdict(x), effect=float(v)) for x, v in zip(got.edges, got.effects)])
    return pd.DataFrame(rows), note


@dataclass(frozen=True)
class _Reading:
    """Every method's reading of a known-circuit model: each head's attention and exact effect
    (``heads``: :func:`known_attention`'s table with ``exact``), the estimates ``{(site, method): [layers,
    units]}``, the head that restores the most (``top``) and the layer-1 one (``induction``: the edges'
    receiver), every edge into it and its effect, the clean and corrupted mean logit differences."""
    heads: pd.DataFrame
    estimates: dict
    top: tuple[int, int]
    induction: tuple[int, int]
    edges: list
    effects: np.ndarray
    clean_mean: float
    corrupted_mean: float


def _read(model, adapter, prompts: PromptBatch, batch: int) -> _Reading:
    """The known circuit read by attention, exact head patching, the estimates and path patching."""
    with exact_numerics():
        attn = known_attention(model, adapter, prompts.clean, (prompts.length + 1) // 2)
        patcher = Patcher(model, adapter, prompts, batch, extra_sites=PATH_SITES)
        attn["exact"] = (patcher.run([Patch("z", l, h) for l, h in adapter.heads()]).double().mean(dim=1).numpy()
                         - patcher.corrupted_mean)
        qk = qk_estimates(model, adapter, prompts, batch)
        estimates = {("z", "plain (= AtP*)"): attribution_patching(model, adapter, prompts, batch).numpy(),
                     **{("k", m): qk["k"][m].numpy() for m in ("plain", "atp*")}}
        induction = top_heads(attn[attn["layer"] == 1], "exact", 1)[0]    # the receiver of the edges
        edges = edges_into(adapter, [induction])
        effects = PathPatcher(patcher).run(edges).double().mean(dim=1).numpy() - patcher.corrupted_mean
    return _Reading(attn, estimates, top_heads(attn, "exact", 1)[0], induction, edges, effects,
                    patcher.clean_mean, patcher.corrupted_mean)


def _estimate_claim(adapter, site: str, name: str, est: np.ndarray, induction_heads, min_effect: float) -> dict:
    """The claim of one estimate: an induction head (its key/value group at ``k``) among its top 2."""
    U = est.shape[1]
    unit = (lambda l, h: h) if site == "z" else (lambda l, h: adapter.kv_group(h))
    known = {l * U + unit(l, h) for l, h in induction_heads}
    two = _ranked(est, 2)
    hits = [i for i in two if i in known and abs(est.ravel()[i]) >= min_effect]
    return dict(method=f"estimate at {site}: {name}",
                names=" ".join(head_label(i // U, i % U) if site == "z" else f"L{i // U}G{i % U}" for i in two),
                value=float(est.ravel()[hits[0] if hits else two[0]]), unit="logits", recovered=bool(hits),
                claim="an induction head" + ("" if site == "z" else "'s key/value group")
                      + " among the top 2 by |estimate|, |estimate| >= min_effect (value: the first such, "
                        "else the top one)")


def _path_claim(got: _Reading, prev_heads, induction_heads, min_effect: float) -> dict:
    """The claim of path patching: the strongest edge into the induction head is a previous-token head
    into its key, above every other."""
    eff = got.effects
    best = _ranked(eff, 2)
    e = got.edges[best[0]]
    return dict(method="path patching", names=f"{head_label(e.sender_layer, e.sender_head)} -> "
                                              f"{head_label(e.receiver_layer, e.receiver_head)} ({e.input})",
                value=float(eff[best[0]]), unit="logits",
                recovered=bool(got.induction in induction_heads and (e.sender_layer, e.sender_head) in prev_heads
                               and e.input == "k" and abs(eff[best[0]]) >= min_effect
                               and abs(eff[best[0]]) > abs(eff[best[1]])),
                claim="the strongest edge into the induction head is a previous-token head -> its key, above "
                      "every other, |effect| >= min_effect")


KNOWN_MODEL = dict(width=32, heads=2, layers=2, context=32, rotary=True)
"""The known circuit's model: two layers of two heads with rotary positions, so that a head can
look back by an offset but never to a place (protocol §5f says why each choice)."""


KNOWN_TRAIN = dict(batch=128, lr=3e-3, min_lr=3e-4, warmup=50, weight_decay=0.0, eval_batches=1,
                   checkpoint_every=10 ** 9)
"""Its training (:func:`headwatch.sweep.train.train`; ``steps`` from ``circuits.known``, one
evaluation, at the end; no checkpoint)."""


KNOWN_SEQUENCES = 20000
"""Sequences in a training stream (about 320,000 tokens): the model cannot memorise them, it must copy."""


def repeated_tokens(vocab: int, half: Sequence[int], repeat: bool, n: int, seed: int):
    """A training stream of ``n`` sequences of random tokens, each of a length drawn from
    ``half`` (inclusive) and followed by itself (``repeat``) or by fresh tokens of that length:
    lengths that vary, so that only the content of the first copy, not a fixed distance, says
    what comes next. (ids ``uint8``/``int64``, the meta :func:`headwatch.sweep.train.train` reads)."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n):
        a = rng.integers(0, vocab, int(rng.integers(half[0], half[1] + 1)))
        parts += [a, a if repeat else rng.integers(0, vocab, len(a))]
    ids = np.concatenate(parts).astype(np.uint8 if vocab <= 256 else np.int64)
    meta = dict(vocab=[f"t{i}" for i in range(vocab)], vocab_size=vocab, n_train=int(len(ids) * 0.9),
                sha256=f"repeated-{repeat}-{seed}")
    return ids, meta


def train_known(known: dict, repeat: bool, model: dict = KNOWN_MODEL, training: dict = KNOWN_TRAIN):
    """The known circuit's model (``repeat``) or its control, trained on the CPU."""
    from ..sweep.train import RunOptions, train
    ids, meta = repeated_tokens(known["vocab"], known["half"], repeat, KNOWN_SEQUENCES, known["seed"])
    steps = known["steps"]
    trained, *_ = train(ids, meta, model, known["seed"], dict(training, steps=steps, eval_every=steps),
                        run=RunOptions(full_eval=False))
    return trained.eval()


KNOWN_NAMES = {"repeated": "repeated", "control": "control: never repeated"}
"""The two models by file name (:data:`headwatch.paths.KNOWN_MODELS`) and by the name the tables give them."""


def run_known(known: dict, batch: int):
    """Rule circuits_known: (one row per model and claim — what it names, its value, whether it
    holds —, the note, the two trained models by file name: :data:`KNOWN_NAMES`)."""
    from ..model.arch import Adapter
    models = {}
    rows, note = [], dict(model=KNOWN_MODEL, train=dict(KNOWN_TRAIN, steps=known["steps"]), known=dict(known),
                          sequences=KNOWN_SEQUENCES)
    prompts = induction_prompts(known["vocab"], known["prompts"], known["half"][1], known["seed"] + 1)
    for repeat, (file, name) in zip((True, False), KNOWN_NAMES.items()):
        t0 = time.perf_counter()
        model = train_known(known, repeat)
        models[file] = model
        seconds = time.perf_counter() - t0
        table, n = known_circuit(model, Adapter(model), prompts, known["min_effect"], known["min_attention"], batch)
        rows.append(table.assign(model=name))
        note[name] = dict(n, training_seconds=round(seconds, 1))
    return pd.concat(rows, ignore_index=True)[KNOWN_COLUMNS], note, models
