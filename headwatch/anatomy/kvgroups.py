"""Key/value groups seen by cutting (protocol §6, last item).

For every layer and key/value group, that group's ``head_dim`` slice of the key
projection's *output* is zeroed (a ``zero`` edit at the ``k`` site of
:mod:`headwatch.model.interventions`, always removed) and the model runs once; the
maps are read by a capture at the ``pattern`` site. Exactly the query heads of that group must
change (max |Δattention| > 0); every other head of the layer must change by
exactly 0; the layers before the cut must change by exactly 0; after the hook
is removed the maps must be identical to the intact ones. Any failure raises
:class:`KVGroupError`.

The control is the same test on a model without key sharing, where each key
slice must move exactly one head: by default the studied model's own
architecture rebuilt from its config with ``kv heads = heads`` and a few
layers, randomly initialised (:func:`ungrouped_control`).

Then the attention maps of heads that share keys are compared with those of
heads that do not: mean Pearson correlation within vs across groups.
"""
from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pandas as pd
import torch
from torch import nn
from transformers import AutoModelForCausalLM

from ..model.arch import Adapter, ungrouped_config
from ..tableio import assert_finite
from ..model.device import exact_numerics
from ..guards import GuardError
from ..model.interventions import attention_maps, intervene, zero


class KVGroupError(GuardError):
    """A key-slice cut that moved the wrong heads, leaked backwards, or did not come back (a guard:
    it stops the rule)."""


@contextlib.contextmanager
def zero_key_slice(adapter: Adapter, layer: int, group: int):
    """Zero ``group``'s slice of ``layer``'s key projection output while inside the block
    (a ``zero`` edit at the ``k`` site)."""
    with intervene(adapter, [zero("k", layer, group)]):
        yield


@torch.no_grad()
def all_maps(model: nn.Module, ids: torch.Tensor, adapter: Adapter | None = None) -> torch.Tensor:
    """[layers, heads, T, T] attention maps of one sequence (batch of 1), by a capture at the
    ``pattern`` site (the blocks only: the logits are not needed here)."""
    return attention_maps(model, ids, adapter)[0]


@torch.no_grad()
@exact_numerics()
def kv_group_cuts(model: nn.Module, adapter: Adapter, ids, label: str = "", role: str = "model") -> pd.DataFrame:
    """One row per (cut layer, cut group, head of that layer); raises on any inexact result."""
    device = next(model.parameters()).device
    ids = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1).to(device)
    intact = all_maps(model, ids, adapter)
    assert_finite(intact, f"{label}: intact attention maps")
    cuts = [(layer, group) for layer in range(adapter.n_layers) for group in range(adapter.n_kv_heads)]
    figures = []    # per cut, on the device: [its layer's per-head max |Δ|, earlier layers' max, restore max]
    for layer, group in cuts:
        with zero_key_slice(adapter, layer, group):
            cut = all_maps(model, ids, adapter)
        restored = all_maps(model, ids, adapter)
        delta = (cut - intact).abs().amax(dim=(-1, -2))                  # [layers, heads] (NaN stays NaN)
        before = delta[:layer].amax() if layer else delta.new_zeros(())
        figures.append(torch.cat([delta[layer], before.reshape(1), (restored - intact).abs().amax().reshape(1)]))
    figures = torch.stack(figures).cpu() if figures else torch.zeros(0, adapter.n_heads + 2)
    rows = []
    for (layer, group), fig in zip(cuts, figures):
        assert_finite(fig, f"{label}: maps with key slice (layer={layer}, group={group}) zeroed")
        in_group = [adapter.kv_group(h) == group for h in range(adapter.n_heads)]
        here = fig[:adapter.n_heads]
        others = [float(here[h]) for h in range(adapter.n_heads) if not in_group[h]]
        summary = dict(
            heads_moved=int((here > 0).sum()), group_heads=int(sum(in_group)),
            others_max_delta=max(others, default=0.0),
            before_max_delta=float(fig[-2]), restore_max_delta=float(fig[-1]))
        problems = []
        if any(in_group[h] and not here[h] > 0 for h in range(adapter.n_heads)):
            problems.append("a head of the group did not move")
        if summary["others_max_delta"] != 0:
            problems.append(f"heads outside the group moved by {summary['others_max_delta']:.3e}")
        if summary["before_max_delta"] != 0:
            problems.append(f"layers before the cut moved by {summary['before_max_delta']:.3e}")
        if summary["restore_max_delta"] != 0:
            problems.append(f"after the hook was removed the maps differ by "
                            f"{summary['restore_max_delta']:.3e}")
        if problems:
            raise KVGroupError(f"{label}: zeroing the keys of (layer={layer}, group={group}): "
                               + "; ".join(problems) + f" (per-head max |Δ| {here.tolist()})")
        for h in range(adapter.n_heads):
            rows.append(dict(model=label, role=role, layer=layer, kv_group=group, head=h,
                             head_group=adapter.kv_group(h), in_group=in_group[h],
                             max_delta=float(here[h]), moved=bool(here[h] > 0), **summary))
    return pd.DataFrame(rows)


def ungrouped_control(config, layers: int = 2, seed: int = 0) -> nn.Module:
    """The same architecture without key sharing (kv heads = heads), ``layers`` deep, random init."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(ungrouped_config(config, layers), attn_implementation="eager")
    return model.float().eval()


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


@torch.no_grad()
def kv_similarity(maps: torch.Tensor, adapter: Adapter, label: str = "") -> pd.DataFrame:
    """Mean correlation of attention maps between heads of the same vs different groups.

    A map is flattened to its cells on or below the diagonal, row 0 left out
    (token 0 can only look at itself). One row per layer (``scope`` =
    "layer") and one for all layers pooled (``scope`` = "all layers", layer −1).
    Without sharing there are no within-group pairs: ``within_pairs`` = 0 and
    ``within_mean`` is 0 — read ``within_pairs`` first.
    """
    L, H, T, _ = maps.shape
    rows_idx, cols_idx = np.tril_indices(T)
    keep = rows_idx > 0
    flat = maps[:, :, rows_idx[keep], cols_idx[keep]].double().cpu().numpy()   # [L, H, cells]
    out, pooled = [], {True: [], False: []}
    for layer in range(L):
        by = {True: [], False: []}
        for i, j in itertools.combinations(range(H), 2):
            same = adapter.kv_group(i) == adapter.kv_group(j)
            by[same].append(_corr(flat[layer, i], flat[layer, j]))
        for k in by:
            pooled[k] += by[k]
        out.append(_sim_row(label, "layer", layer, by))
    out.append(_sim_row(label, "all layers", -1, pooled))
    return pd.DataFrame(out)


def _sim_row(label, scope, layer, by) -> dict:
    w, a = by[True], by[False]
    return dict(model=label, scope=scope, layer=layer, within_pairs=len(w),
                within_mean=float(np.mean(w)) if w else 0.0, across_pairs=len(a),
                across_mean=float(np.mean(a)) if a else 0.0,
                difference=(float(np.mean(w)) - float(np.mean(a))) if w and a else 0.0)
