"""Every head at every position, through the corrupted run's key/value cache (protocol §5d).

The exact per-position head sweep: head h of layer l has its ``z`` patched clean → corrupted
at ONE position p (TransformerLens's ``get_act_patch_attn_head_out_by_pos``), for every head and
every position, each (patch, prompt) its own row. A patch at position p cannot change anything
at positions before p (attention is causal): there the patched run is the corrupted run, in
every layer. So a row computes only positions p..T−1, and only from layer l up:

* the blocks below the lowest patched layer of a chunk are stood in for by the corrupted run's
  input to it at positions p..T−1 (``skip``, as :class:`~headwatch.patching.patcher.Patcher` does);
* every layer's keys and values at positions 0..p−1 are the corrupted run's, read from a
  transformers ``DynamicCache`` (``past_key_values``) filled with them: the corrupted run's
  keys and values as its attention stores them (after the rotary embedding and any QK-norm),
  kept by the Patcher's own corrupted run, made through an empty ``DynamicCache()``
  (``Patcher(..., kv_cache=True)``; one full layer per model layer, no window cropping: a
  windowed layer's mask still applies the window, from the cache positions transformers
  derives from the cache's length p);
* the logits at the last position only, and not in the pass that runs the blocks: the last
  block's output there is kept (a capture at ``resid``) and the model's own final norm and
  vocabulary projection run on many rows at once (``batch`` prompts' worth of tokens, every
  block stood in for by a ``skip``), since projecting a chunk's few rows alone streams the
  whole vocabulary matrix for little arithmetic.

Rows are grouped by position (one cache length per forward pass), sorted by layer within a
position and cut into chunks by the tokens they compute (:func:`position_chunks`: the
Patcher's :func:`headwatch.ablation.cut.plan_chunks` with a budget of ``batch`` prompts' worth of
tokens, so that late positions, a few tokens a row, run many rows per pass). The value
put in is the corrupted run's ``z`` of the head with position p from the clean run (the
Patcher's one-position values): at positions after p, head h's output in layer l is the
corrupted run's anyway (its inputs there are).

Multiply-adds (the weight matrices): the loop runs every block and the vocabulary projection
at every position for every (head, position); a cached row runs ``T − p`` positions of the
blocks from l up and projects one position (:func:`multiply_adds`).

**Guard**: the cached sweep against one patch per forward pass (:meth:`Patcher.loop`: every
block, every position, no cache) within the bound of rounding
(:func:`headwatch.guards.batched_vs_loop`, :class:`headwatch.guards.Rounding`).
"""
from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from ..guards import GuardRecords, batched_vs_loop, rounding
from ..jobs import phases
from ..model.arch import head_label
from ..ablation.cut import heads_one_per_layer, plan_chunks
from ..model.device import exact_numerics
from ..model.interventions import capture, intervene, skip
from ..names import top_heads
from . import separation
from .pairs import one_length
from .prompts import task_note, position_labels
from .batch import PromptBatch
from .patcher import Patch, Patcher, position_patches
from ..settings.patching import PatchingError, PatchingSettings

log = logging.getLogger("headwatch.patching.positions")


class CachedPositions:
    """One-position ``z`` patches of a :class:`Patcher`'s prompts, run from the corrupted run's
    key/value cache (see the module doc). ``run`` has the Patcher's shape: ``[len(patches), n]``."""

    def __init__(self, patcher: Patcher):
        if patcher.corrupted_caches is None:
            raise PatchingError("the Patcher kept no key/value cache of its corrupted run: make it with "
                                "kv_cache=True")
        from transformers import DynamicCache     # not at the top: the settings modules import this one's callers

        if patcher.prompts.mask is not None:
            raise PatchingError("the cached sweep patches prompts of one length: a cached position is a "
                                "position of every prompt, and these are padded")
        a = patcher.adapter
        self.patcher, self.adapter, self.cache_class = patcher, a, DynamicCache
        layers = [c.layers for c in patcher.corrupted_caches]
        wrong = [len(x) for x in layers if len(x) != a.n_layers]
        if wrong:
            raise PatchingError(f"the corrupted run's cache holds {wrong[0]} layers; expected {a.n_layers}")
        self.keys = [torch.cat([x[l].keys for x in layers]) for l in range(a.n_layers)]   # [n, kv heads, T, d]
        self.values = [torch.cat([x[l].values for x in layers]) for l in range(a.n_layers)]
        if self.keys[0].shape[2] != patcher.length:
            raise PatchingError(f"the corrupted run's cache holds {self.keys[0].shape[2]} positions; expected "
                                f"{patcher.length}")

    def _cache(self, prompts: torch.Tensor, p: int):
        """A fresh cache of the corrupted run's keys and values at positions 0..p−1 of ``prompts``
        (one full layer per model layer; an empty cache for p = 0)."""
        if p == 0:
            return self.cache_class()
        return self.cache_class([(k[prompts, :, :p], v[prompts, :, :p]) for k, v in zip(self.keys, self.values)])

    def run(self, patches: Sequence[Patch], prompts: Sequence[int] | None = None) -> torch.Tensor:
        """The patched logit difference of every (patch, prompt) ``[len(patches), n]`` (float32,
        CPU); every patch a head's ``z`` at one position."""
        P = self.patcher
        P._require_patches(patches)
        bad = [p for p in patches if p.site != "z" or p.unit is None or p.position is None]
        if bad:
            raise PatchingError(f"{bad[0]}: the cached sweep patches one head's z at one position")
        prompts = torch.arange(P.n) if prompts is None else torch.as_tensor(list(prompts), dtype=torch.long)
        k = len(prompts)
        patch_of = torch.arange(len(patches)).repeat_interleave(k)
        prompt_of = prompts.repeat(len(patches))
        layer = torch.tensor([p.layer for p in patches]).repeat_interleave(k)
        pos = torch.tensor([p.position for p in patches]).repeat_interleave(k)
        order = torch.from_numpy(np.lexsort((layer.numpy(), pos.numpy())))      # by position, then layer
        out = torch.empty(len(order), dtype=P.clean_ld.dtype, device=P.device)
        bounds = torch.searchsorted(pos[order], torch.arange(P.length + 1)).tolist()
        waiting, last = [], []            # rows run, and their last block's output at the last position
        with torch.no_grad():
            for p in range(P.length):
                group = order[bounds[p]:bounds[p + 1]]
                for i, j in position_chunks(layer[group].tolist(), self.adapter.n_layers, P.batch, P.overhead,
                                            P.length, p):
                    waiting.append(group[i:j])
                    last.append(self._chunk(patches, group[i:j], patch_of, prompt_of, layer, p))
                if sum(map(len, waiting)) >= P.batch * P.length or p == P.length - 1:
                    self._head(torch.cat(waiting), torch.cat(last), prompt_of, out)
                    waiting, last = [], []
        return out.reshape(len(patches), k).cpu()

    def _chunk(self, patches, rows, patch_of, prompt_of, layer, p: int) -> torch.Tensor:
        """Positions p.. of ``rows``, all at position p: the last block's output at the last
        position ``[rows, width]``."""
        P, a = self.patcher, self.adapter
        which, sidx = patch_of[rows], prompt_of[rows].to(P.device)
        edits = P._edits(patches, which, sidx, start=p)      # every row's patch is at position p
        start = int(layer[rows].min())
        if start > 0:
            edits.append(skip(start - 1, P.acts["corrupted"]["resid_in"][start][sidx, p:]))
        edits.append(capture("resid", a.n_layers - 1))
        with intervene(a, edits) as cap:
            a.model.base_model(input_ids=P.prompts.corrupted[sidx, p:], past_key_values=self._cache(sidx, p),
                               use_cache=True)
        return cap.one(("resid", a.n_layers - 1, None))[:, -1]

    def _head(self, rows, last, prompt_of, out) -> None:
        """The logit difference of ``rows`` from their last block's output at the last position
        ``last``, by the model's own final norm and vocabulary projection: every block stood in for
        (``skip``), ``batch`` prompts' worth of tokens a pass."""
        P, a = self.patcher, self.adapter
        step = P.batch * P.length
        for i in range(0, len(rows), step):
            sidx = prompt_of[rows[i:i + step]].to(P.device)
            with intervene(a, [skip(a.n_layers - 1, last[i:i + step, None])]):
                logits = a.logits(P.prompts.corrupted[sidx, -1:], keep=1)[:, -1]
            out[rows[i:i + step].to(P.device)] = P.prompts.logit_diff(logits, sidx)


def position_chunks(layers: Sequence[int], n_layers: int, batch: int, overhead: float, length: int,
                    position: int) -> list[tuple[int, int]]:
    """The chunks of one position's rows (sorted by layer) by the tokens they compute: a row
    computes ``length − position`` tokens, so a chunk holds ``batch`` prompts' worth of tokens
    (``batch · length``), and the fixed cost of a forward pass, ``overhead`` rows of ``length``
    tokens per layer (the Patcher's), counts in such rows: :func:`headwatch.ablation.cut.plan_chunks`
    with both scaled by ``length / (length − position)``."""
    tokens = length - position
    return plan_chunks(layers, n_layers, batch * length // tokens, overhead * length / tokens)


def multiply_adds(adapter, patches: Sequence[Patch], n: int, length: int) -> tuple[float, float]:
    """Multiply-adds of the weight matrices (attention's T × T products and the norms left out) of
    (one patch per forward pass, the cached sweep) over one-position ``patches`` and ``n``
    prompts of ``length`` tokens: the loop runs every block and the vocabulary projection at
    every position for every patch; a cached row runs positions p..T−1 of blocks l.. and
    projects the last position."""
    per_block = [sum(m.weight.numel() for m in adapter.block(l).modules() if isinstance(m, torch.nn.Linear)
                     or type(m).__name__ == "Conv1D") for l in range(adapter.n_layers)]
    vocab = adapter.embeddings()[1].weight.numel()
    loop = len(patches) * n * length * (sum(per_block) + vocab)
    cached = sum(n * ((length - q.position) * sum(per_block[q.layer:]) + vocab) for q in patches)
    return float(loop), float(cached)


def run_positions_all(model, adapter, prompts, heads_table, settings: PatchingSettings):
    """Rule patching_positions_all: (positions_all table, its note, the guard record).
    ``settings``: of the ``patching`` slice, it reads batch, rounding_factor, guard_prompts and
    positions_all_heads (the top heads of ``heads_table`` by score; None = every head). Each step is
    a named phase of the call's progress; a failed guard raises once the table is made, carrying it."""
    with exact_numerics(), phases("patch_positions", 3) as step:
        return _run_positions_all(model, adapter, prompts, heads_table, settings, step)


def _run_positions_all(model, adapter, prompts, heads_table, settings: PatchingSettings, step):
    settings.need("batch", "rounding_factor", "guard_prompts")
    prompts, subset = one_length(prompts)        # a pairs file of several lengths: its first row's length
    prompt_batch = PromptBatch.of(prompts)
    sample = list(range(min(settings.guard_prompts, len(prompts))))
    k = len(heads_table) if settings.positions_all_heads is None else min(settings.positions_all_heads,
                                                                           len(heads_table))
    heads = sorted(top_heads(heads_table, "score", k))            # layer-major
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts (the corrupted run's key/value cache kept)")
    patcher = Patcher(model, adapter, prompt_batch, settings.batch, kv_cache=True)
    cached = CachedPositions(patcher)
    patches = position_patches(heads, patcher.length)
    step(f"patch {len(heads)} heads at each position through the cache")
    ld = cached.run(patches)
    seconds = time.perf_counter() - t0
    loop_macs, cached_macs = multiply_adds(adapter, patches, patcher.n, patcher.length)
    log.info("%d heads × %d positions patched through the key/value cache in %.1f s (multiply-adds %.3g, "
             "%.2f× fewer than one patch per forward pass)", len(heads), patcher.length, seconds, cached_macs,
             loop_macs / cached_macs)
    # The cached sweep vs one patch per forward pass: the top head at every position, and one
    # chosen head per layer at a name's position and the last position.
    top = top_heads(heads_table, "score", 1)[0]                  # the first of the chosen heads
    slot = int((prompt_batch.clean != prompt_batch.corrupted).any(dim=0).nonzero()[0, 0])
    per_layer = [h for h in heads_one_per_layer(adapter) if h in heads] or heads[:1]
    probe = list(dict.fromkeys([Patch("z", *top, q) for q in range(patcher.length)]
                               + [Patch("z", l, h, q) for l, h in per_layer for q in sorted({slot, patcher.length - 1})]))
    index = {p: i for i, p in enumerate(patches)}
    records = GuardRecords(step)
    with records.guard("batched_vs_loop"):
        records.add(batched_vs_loop(
            patcher.against_loop(probe, torch.stack([ld[index[p], sample] for p in probe]), sample),
            rounding(adapter, settings.rounding_factor, patcher.largest_logit),
            "logit difference answer − distractor of every guard prompt: a head's z patched at one position "
            "through the corrupted run's key/value cache vs one patch per forward pass (every block, no cache)",
            prompts=len(sample)))

    labels = position_labels(prompts)
    mean = ld.double().mean(dim=1).numpy()
    rank = {(int(r.layer), int(r.head)): int(r.score_rank) for r in heads_table.itertuples()}
    table = pd.DataFrame(dict(layer=[p.layer for p in patches], head=[p.unit for p in patches],
                              label=[head_label(p.layer, p.unit) for p in patches],
                              head_rank=[rank[(p.layer, p.unit)] for p in patches],
                              position=[p.position for p in patches], token=[labels[p.position] for p in patches],
                              logit_diff=mean, score=patcher.score(mean)))
    note = dict(task_note(prompts), **subset, prompts=patcher.n, length=patcher.length, position_labels=labels,
                clean_logit_diff=patcher.clean_mean, corrupted_logit_diff=patcher.corrupted_mean,
                **separation.of_patcher(patcher, settings.rounding_factor),
                heads_patched=len(heads), heads_total=len(heads_table),
                heads_chosen="every head" if k == len(heads_table) else f"the top {k} heads of the head sweep by score",
                cached="a head's z patched at one position p: positions p.. of the layers from the head's up "
                       "computed, the corrupted run's keys and values at positions < p read from a key/value "
                       "cache, the blocks below stood in for by the corrupted run's input to the layer",
                sweep_seconds=round(seconds, 3), multiply_adds_cached=cached_macs, multiply_adds_loop=loop_macs,
                multiply_adds_note="weight matrices only (attention's T x T products and the norms left out): "
                                   "one patch per forward pass runs every block and the vocabulary projection at "
                                   "every position")
    return table, note, records.record(model, dict(positions_all=table), note)
