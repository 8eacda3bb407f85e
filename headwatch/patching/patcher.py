"""Patches of a clean run into a corrupted run, many per forward pass (protocol §5d).

:class:`Patch` names what one patch replaces; :class:`Patcher` runs the clean and corrupted
prompts once, captures every site it patches, and runs many (patch, prompt) pairs per forward
pass (:meth:`Patcher.run`), with the plain loop beside it (:meth:`Patcher.loop`), which its
guard compares with (:func:`headwatch.guards.batched_vs_loop`). The prompts are a
:class:`~headwatch.patching.batch.PromptBatch` (left-padded where their lengths differ, with its mask).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import torch

from ..ablation.cut import plan_chunks
from ..model.arch import padded_inputs
from ..model.interventions import capture, intervene, replace, skip
from ..settings.patching import PatchingError
from ..jobs import progress
from .batch import PromptBatch


# ------------------------------------------------------------------ patches
@dataclass(frozen=True)
class Patch:
    """What one patch replaces: ``site`` (``z`` or ``resid_in``; ``q``, ``k``, ``v`` where the
    :class:`Patcher` captures them) of ``layer``, ``unit`` (a head for ``z`` and ``q``, a key/value
    group for ``k`` and ``v``; None = the whole site) at ``position`` (None = every position)."""
    site: str
    layer: int
    unit: int | None = None
    position: int | None = None


def head_patches(adapter) -> list[Patch]:
    """Every head's z over every position, layer-major."""
    return [Patch("z", l, h) for l, h in adapter.heads()]


def resid_patches(adapter, length: int) -> list[Patch]:
    """Every block's input at one position at a time, layer-major."""
    return [Patch("resid_in", l, None, p) for l in range(adapter.n_layers) for p in range(length)]


def position_patches(heads: Sequence[tuple[int, int]], length: int) -> list[Patch]:
    """The z of each of ``heads`` at one position at a time."""
    return [Patch("z", l, h, p) for l, h in heads for p in range(length)]


class Patcher:
    """Patches of a clean run into a corrupted run, many per forward pass (see the module doc).

    Created with the prompts (a :class:`~headwatch.patching.batch.PromptBatch`, kept on the model's device
    as ``prompts``): runs the clean and corrupted prompts once, capturing every layer's ``z`` and
    ``resid_in`` (and the ``extra_sites``, e.g. ``q``, ``k``, ``v``: :mod:`headwatch.patching.kv`) and each
    prompt's logit difference (``clean_ld``, ``corrupted_ld``; their means ``clean_mean``, ``corrupted_mean``;
    the largest |logit| of both runs at the last position, ``largest_logit``: the magnitude of the guards'
    bounds). With ``kv_cache``, the corrupted run goes through an empty transformers ``DynamicCache`` per
    batch of prompts, kept in ``corrupted_caches`` (every layer's keys and values as attention stores
    them): the cached per-position sweep reads them (:mod:`headwatch.patching.positions`) instead of
    running the corrupted prompts a second time.
    """

    SITES = ("z", "resid_in")

    def __init__(self, model, adapter, prompts: PromptBatch, batch: int = 64, extra_sites: Sequence[str] = (),
                 kv_cache: bool = False):
        self.model, self.adapter, self.batch = model, adapter, int(batch)
        self.sites = self.SITES + tuple(x for x in extra_sites if x not in self.SITES)   # captured, patchable
        self.device = next(model.parameters()).device
        self.prompts = prompts.to(self.device)
        self.n, self.length = len(self.prompts), self.prompts.length
        self.overhead = 1 if self.device.type == "cpu" else self.batch     # as cut.BatchedCuts
        if kv_cache and not adapter.family.has_config:
            raise PatchingError(f"family {adapter.family.name}: its model takes no transformers key/value cache")
        self.corrupted_caches = [] if kv_cache else None
        with torch.no_grad():
            self.acts = {}
            lds, largest = {}, []
            for run in ("clean", "corrupted"):
                self.acts[run], lds[run], top = self._capture(getattr(self.prompts, run),
                                                              self.corrupted_caches if run == "corrupted" else None)
                largest.append(top)
        self.clean_ld, self.corrupted_ld = lds["clean"], lds["corrupted"]
        self.largest_logit = float(torch.stack(largest).max())
        self.clean_mean = float(self.clean_ld.double().mean())
        self.corrupted_mean = float(self.corrupted_ld.double().mean())
        if self.clean_mean == self.corrupted_mean:
            raise PatchingError(f"the clean and corrupted logit differences are equal ({self.clean_mean:g}): "
                                "the normalized score (patched - corrupted) / (clean - corrupted) is undefined")

    def _capture(self, ids, caches: list | None = None):
        """Run ``ids``, capturing every site; ``caches``: a list that gets each batch's filled
        ``DynamicCache`` (one full layer per model layer, none cropped to a window). Returns the
        captures, the logit differences and the largest |logit| at the last position."""
        L = self.adapter.n_layers
        edits = [capture(site, l) for site in self.sites for l in range(L)]
        parts, lds, top = {(site, l): [] for site in self.sites for l in range(L)}, [], []
        for i in range(0, len(ids), self.batch):
            rows = slice(i, i + self.batch)
            with intervene(self.adapter, edits) as cap:
                if caches is None:
                    logits = self.adapter.logits(ids[rows], keep=1, mask=self.prompts.mask_of(rows))[:, -1]
                else:
                    from transformers import DynamicCache     # only where a cache is asked for, as in headwatch.arch
                    caches.append(DynamicCache())
                    logits = self.model(input_ids=ids[rows], past_key_values=caches[-1], use_cache=True,
                                        logits_to_keep=1, **padded_inputs(self.prompts.mask_of(rows))).logits[:, -1]
            lds.append(self.prompts.logit_diff(logits, rows))
            top.append(logits.detach().abs().max().double())
            for key in parts:
                parts[key].append(cap.one((*key, None)))
        acts = {site: [torch.cat(parts[(site, l)]) for l in range(L)] for site in self.sites}
        return acts, torch.cat(lds), torch.stack(top).max().cpu()

    # ---- the values a patch puts in
    def _slice(self, site: str, unit: int | None):
        d = self.adapter.head_dim     # a captured site holds its units one after another, head_dim each
        return slice(unit * d, (unit + 1) * d) if unit is not None else slice(None)

    def values(self, site: str, layer: int, unit: int | None, positions, prompts):
        """The replacement ``[rows, T, features]`` of (site, layer, unit) for the prompts
        ``prompts`` ``[rows]``: the clean run's activation where ``positions[r]`` is −1 (every
        position), else the corrupted run's with position ``positions[r]`` from the clean run."""
        sl = self._slice(site, unit)
        clean = self.acts["clean"][site][layer][prompts][..., sl]
        one = positions >= 0
        if not bool(one.any()):
            return clean
        out = torch.where(one.view(-1, 1, 1), self.acts["corrupted"][site][layer][prompts][..., sl], clean)
        r = one.nonzero()[:, 0]
        out[r, positions[r]] = clean[r, positions[r]]
        return out

    def _edits(self, patches: Sequence[Patch], which, prompts, start: int = 0):
        """One ``replace`` per (site, layer, unit) among ``patches[which]``, its rows masked; the
        values from position ``start`` on (a run over positions ``start..``: the cached sweep)."""
        groups: dict[tuple, list[int]] = {}
        for r, k in enumerate(which.tolist()):
            p = patches[k]
            groups.setdefault((p.site, p.layer, p.unit), []).append(r)
        pos = torch.tensor([-1 if patches[k].position is None else patches[k].position for k in which.tolist()],
                           device=self.device)
        edits = []
        for (site, layer, unit), rows in groups.items():
            mask = torch.zeros(len(which), dtype=torch.bool, device=self.device)
            mask[rows] = True
            full = len(rows) == len(which)
            edits.append(replace(site, layer, self.values(site, layer, unit, pos, prompts)[:, start:], unit,
                                 None if full else mask))
        return edits

    # ---- batched and looped
    def run(self, patches: Sequence[Patch], prompts: Sequence[int] | None = None):
        """The patched logit difference of every (patch, prompt): ``[len(patches), n]`` (float32, on
        the CPU), in rows of ``batch`` per forward pass (see the module doc)."""
        self._require_patches(patches)
        prompts = torch.arange(self.n) if prompts is None else torch.as_tensor(list(prompts), dtype=torch.long)
        k = len(prompts)
        patch_of = torch.arange(len(patches)).repeat_interleave(k)          # row = (patch, prompt)
        prompt_of = prompts.repeat(len(patches))
        layer = torch.tensor([p.layer for p in patches]).repeat_interleave(k)
        order = torch.argsort(layer, stable=True)
        out = torch.empty(len(order), dtype=self.clean_ld.dtype, device=self.device)
        with torch.no_grad():
            for i, j in progress(plan_chunks(layer[order].tolist(), self.adapter.n_layers, self.batch, self.overhead),
                                 desc=f"{len(patches)} patches × {k} prompts", unit="pass"):
                rows = order[i:j]
                which, sidx = patch_of[rows], prompt_of[rows].to(self.device)
                edits = self._edits(patches, which, sidx)
                start = int(layer[rows].min())
                if start > 0:     # blocks below the first patched layer: the corrupted run's input to it
                    edits.append(skip(start - 1, self.acts["corrupted"]["resid_in"][start][sidx]))
                with intervene(self.adapter, edits):
                    logits = self.adapter.logits(self.prompts.corrupted[sidx], keep=1,
                                                 mask=self.prompts.mask_of(sidx))[:, -1]
                out[rows.to(self.device)] = self.prompts.logit_diff(logits, sidx)
        return out.reshape(len(patches), k).cpu()

    def loop(self, patches: Sequence[Patch], prompts: Sequence[int] | None = None):
        """The plain reference of :meth:`run`: one patch per forward pass over the prompts (in
        batches of ``batch``), every block run, the full logits computed."""
        self._require_patches(patches)
        prompts = torch.arange(self.n) if prompts is None else torch.as_tensor(list(prompts), dtype=torch.long)
        out = []
        with torch.no_grad():
            for p in patches:
                parts = []
                for i in range(0, len(prompts), self.batch):
                    sidx = prompts[i:i + self.batch].to(self.device)
                    with intervene(self.adapter, self._edits([p], torch.zeros(len(sidx), dtype=torch.long), sidx)):
                        logits = self.adapter.logits(self.prompts.corrupted[sidx], mask=self.prompts.mask_of(sidx))[:, -1]
                    parts.append(self.prompts.logit_diff(logits, sidx))
                out.append(torch.cat(parts))
        return torch.stack(out).cpu()

    def against_loop(self, patches: Sequence[Patch], batched, prompts: Sequence[int]) -> list[tuple]:
        """``(patch, batched, looped)`` of each patch, for :func:`headwatch.guards.batched_vs_loop`:
        ``batched`` ``[len(patches), len(prompts)]`` (the sweep's values of these prompts) beside
        :meth:`loop`'s, one patch per forward pass; the patch as a dict names the case."""
        looped = self.loop(patches, prompts)
        return [(asdict(p), b, x) for p, b, x in zip(patches, batched.cpu(), looped)]

    def _require_patches(self, patches: Sequence[Patch]) -> None:
        """PatchingError/HeadAddressError unless every patch is a site, unit and position of these prompts."""
        for p in patches:
            if p.site not in self.sites:
                raise PatchingError(f"{p}: the sites patched are {list(self.sites)}")
            self.adapter.require_unit(p.site, p.layer, p.unit)
            if p.position is not None and not 0 <= p.position < self.length:
                raise PatchingError(f"{p}: the prompts have positions 0..{self.length - 1}")

    def score(self, patched_mean: np.ndarray) -> np.ndarray:
        """The normalized score of mean patched logit differences."""
        return (patched_mean - self.corrupted_mean) / (self.clean_mean - self.corrupted_mean)
