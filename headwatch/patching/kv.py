"""Key and value groups patched clean → corrupted (protocol §5d, key and value groups).

On a model with grouped key/value heads (SmolLM2-135M: 9 query heads over 3 key/value groups
a layer) a head has no keys or values of its own: the key and value projections produce one
``head_dim`` slice per group, read by every query head of the group. So the key and value
sweep patches groups: each layer's key group and value group, clean → corrupted at every
position (a ``replace`` at the ``k`` / ``v`` site of :mod:`headwatch.model.interventions`, unit = the
group), one row per layer × group × ``k|v`` (:func:`kv_patches`), batched through the
:class:`~headwatch.patching.patcher.Patcher` exactly as the head sweep (same prompts, metric and
normalization). On a model without key sharing (kv heads = heads) every group is one head: the
table still has one row per head's keys and one per its values (groups of one).

The sites are the projection outputs before any rotary embedding (OLMo 2's keys: after its
key norm, which spans every group; :mod:`headwatch.model.arch`): a patched key is rotated at its own
position as the model rotates every key.

**Guards** (:mod:`headwatch.guards`; a failure raises and no table is written):

* :func:`headwatch.patching.guards.nothing_patched` — nothing patched gives the corrupted run exactly;
* :func:`headwatch.patching.guards.kv_ungrouped` — patching group g's keys (values) in the model equals
  patching the keys (values) of every query head of group g in its ungrouped twin
  (:func:`ungrouped_twin`: kv heads = heads, every other weight the model's, each head's key
  and value rows the rows of its group), within the bound of rounding (:class:`headwatch.guards.Rounding`);
* :func:`headwatch.patching.guards.qkv_is_z` — a layer's queries, keys and values all patched at every
  position give exactly the logits of every head's ``z`` of that layer patched (attention reads
  nothing else).
"""
from __future__ import annotations

import logging
import time

import pandas as pd
import torch
from torch import nn

from ..guards import GuardRecords, rounding
from ..jobs import phases
from . import guards, separation
from ..model.arch import Adapter, head_label, ungrouped_config
from ..model.device import exact_numerics
from .pairs import one_length
from .prompts import task_note
from .batch import PromptBatch
from .patcher import Patch, Patcher
from ..settings.patching import PatchingError, PatchingSettings

log = logging.getLogger("headwatch.patching.kv")

KV_SITES = ("k", "v")
QKV = ("q", "k", "v")


def kv_patches(adapter) -> list[Patch]:
    """Every layer's key group and value group over every position: layer, then group, then k, v."""
    return [Patch(site, l, g) for l in range(adapter.n_layers) for g in range(adapter.n_kv_heads)
            for site in KV_SITES]


def group_heads(adapter, group: int) -> list[int]:
    """The query heads that read key/value group ``group``."""
    return [h for h in range(adapter.n_heads) if adapter.kv_group(h) == group]


@torch.no_grad()
def ungrouped_twin(model: nn.Module, adapter: Adapter) -> tuple[nn.Module, Adapter]:
    """The model rebuilt with kv heads = heads (:func:`headwatch.model.arch.ungrouped_config`, the same
    layers), every weight the model's, but each query head h's key and value rows (and bias
    entries; OLMo 2's key norm's scale entries; a fused QKV projection's query rows as they are)
    copied from the rows of its group ``kv_group(h)``: the same function computed with the keys
    and values repeated per head instead of shared. Raises :class:`PatchingError` for a family
    without a transformers config (nothing to rebuild) or when an entry is left unwritten."""
    if adapter.config is None or not adapter.family.has_config:
        raise PatchingError(f"family {adapter.family.name}: no transformers config to rebuild without key sharing")
    from transformers import AutoModelForCausalLM     # as headwatch.anatomy.kvgroups

    p = next(model.parameters())
    twin = AutoModelForCausalLM.from_config(ungrouped_config(adapter.config, adapter.n_layers),
                                            attn_implementation="eager").to(device=p.device, dtype=p.dtype).eval()
    tw = Adapter(twin)
    mine = dict(model.named_parameters())
    unwritten = {}
    for name, t in twin.named_parameters():
        if mine[name].shape == t.shape:
            t.copy_(mine[name])
        else:
            t.fill_(float("nan"))       # each entry must be written below
            unwritten[name] = t
    proj = {"q": "query_proj", "k": "key_proj", "v": "value_proj"}
    rows = {"q": "query_slice", "k": "key_slice", "v": "value_slice"}
    for l in range(adapter.n_layers):
        modules = {}      # the modules of q, k and v whose shape differs, with the sites each produces
        for site in QKV:
            for a_mod, t_mod in ((getattr(adapter, proj[site])(l), getattr(tw, proj[site])(l)),
                                 (adapter.site_module(site, l), tw.site_module(site, l))):
                if a_mod.weight.shape != t_mod.weight.shape:
                    entry = modules.setdefault(id(a_mod), (a_mod, t_mod, set()))
                    entry[2].add(site)
        for a_mod, t_mod, sites in modules.values():
            for site in sites:
                for h in range(adapter.n_heads):
                    src = h if site == "q" else adapter.kv_group(h)
                    for dst, got in zip(tw.projection_rows(t_mod, getattr(tw, rows[site])(h)),
                                        adapter.projection_rows(a_mod, getattr(adapter, rows[site])(src))):
                        dst.copy_(got)
    left = [name for name, t in unwritten.items() if torch.isnan(t).any()]
    if left:
        raise PatchingError(f"ungrouped twin of {adapter.family.name}: entries of {left} were not written")
    return twin, tw


def run_kv_patching(model, adapter, prompts, settings: PatchingSettings):
    """Rule patching_kv: (kv_groups table, its note, the guard record); see the module doc.
    ``settings``: of the ``patching`` slice, it reads batch, rounding_factor, guard_prompts, kv_prompts.
    Each step is a named phase of the call's progress; a failed guard raises once the table is made,
    carrying it."""
    with exact_numerics(), phases("patch_kv_groups", 5) as step:
        return _run_kv_patching(model, adapter, prompts, settings, step)


def _run_kv_patching(model, adapter, prompts, settings: PatchingSettings, step):
    settings.need("batch", "rounding_factor", "guard_prompts")
    prompts, subset = one_length(prompts)        # a pairs file of several lengths: its first row's length
    n = len(prompts) if settings.kv_prompts is None else min(settings.kv_prompts, len(prompts))
    sample = list(range(min(settings.guard_prompts, n)))
    records = GuardRecords(step)
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts")
    patcher = Patcher(model, adapter, PromptBatch.of(prompts).rows(slice(None, n)), settings.batch, extra_sites=QKV)
    patches = kv_patches(adapter)
    step("patch every key and value group")
    ld = patcher.run(patches)
    seconds = time.perf_counter() - t0
    log.info("%d key/value patches (layer × group × k|v) over %d prompts in %.1f s", len(patches), n, seconds)
    records.check(guards.nothing_patched, patcher, sample)
    records.check(guards.qkv_is_z, patcher, sample, range(adapter.n_layers))
    with records.guard("kv_ungrouped"):
        twin, tw = ungrouped_twin(model, adapter)
        # group layer mod kv_heads of every layer: its keys in even layers, its values in odd ones
        cases = [(p, ld[i, sample]) for i, p in enumerate(patches)
                 if p.unit == p.layer % adapter.n_kv_heads and p.site == KV_SITES[p.layer % 2]]
        records.add(guards.kv_ungrouped(patcher, tw, sample, cases, group_heads,
                                        rounding(adapter, settings.rounding_factor, patcher.largest_logit)))
        del twin, tw

    mean = ld.double().mean(dim=1).numpy()
    table = pd.DataFrame(dict(
        layer=[p.layer for p in patches], group=[p.unit for p in patches], site=[p.site for p in patches],
        label=[f"L{p.layer}{p.site.upper()}{p.unit}" for p in patches],
        heads=[" ".join(head_label(p.layer, h) for h in group_heads(adapter, p.unit)) for p in patches],
        logit_diff=mean, score=patcher.score(mean)))
    table["score_rank"] = table["score"].rank(ascending=False, method="min").astype(int)
    note = dict(task_note(prompts), **subset, prompts=n, length=patcher.length, kv_heads=adapter.n_kv_heads, heads=adapter.n_heads,
                group_size=adapter.group_size,
                clean_logit_diff=patcher.clean_mean, corrupted_logit_diff=patcher.corrupted_mean,
                **separation.of_patcher(patcher, settings.rounding_factor),
                patched_kv="a key/value group's slice of the key (k) or value (v) projection output, before any "
                           "rotary embedding, from the clean run over every position; read by every query head "
                           "of the group (heads); with kv heads = heads each group is one head",
                label="L{layer}K{group} = the keys of group {group} of layer {layer}; V = its values",
                sweep_seconds=round(seconds, 3))
    log.info("key/value groups: top %s", " ".join(table.sort_values("score_rank")["label"].head(5)))
    return table, note, records.record(model, dict(kv_groups=table), note)
