"""Activation patching on the two-names task (protocol §5d).

The task is the protocol's ``names`` phrase, "When Mary and John went to the shop, John gave a
drink to" → " Mary": the indirect object (IO, the answer) and the subject (S, named twice).
Cutting a head (§5) asks what breaks without it; patching asks which head *carries* the
information that decides the answer: run a corrupted prompt, put one activation from the
clean run back in, and see how much of the clean answer returns.

**Prompts** (:func:`prompt_set`; the settings :class:`headwatch.settings.patching.PatchingSettings`).
``n`` prompts from the ``templates``, whose slots ``{A}``, ``{B}``, ``{C}`` take three names, each
used with the space before it (" Mary"), one token in every studied model
(:func:`headwatch.settings.patching.patching_errors`, run before any job). Prompt ``i`` uses
template ``(i // 2) mod len(templates)`` and order ``ABBA`` for even ``i``, ``BABA`` for odd ``i``:

* ``ABBA``: A = IO, B = C = S ("When Mary and John …, John gave a drink to");
* ``BABA``: A = C = S, B = IO ("When John and Mary …, John gave a drink to").

IO and S are two distinct names drawn with ``numpy.random.default_rng(seed)``; the corrupted
prompt puts three more distinct names, none of them IO or S, in A, B and C (``ABC``): the same
template, so the same length in tokens, and nothing in it points at IO. Every template must
give the same number of tokens with the names at the same positions, so that positions line up
across prompts (the residual sweep's columns).

**Metric.** The logit difference ``logit(IO) − logit(S)`` at the last position, averaged over
the prompts: ``clean`` on the clean prompts, ``corrupted`` on the corrupted ones, ``patched``
on the corrupted prompts with one activation taken from the clean run of the same prompt. The
score is ``(patched − corrupted) / (clean − corrupted)``: 0 = the corrupted run, 1 = the clean.

**What is patched** (:class:`Patch`, always with ``replace`` at a site of
:mod:`headwatch.interventions`):

* every head's ``z`` over every position (:func:`head_patches`);
* the residual stream, the input of each block (``resid_in``), at one position at a time
  (:func:`resid_patches`);
* the ``z`` of the top ``top_k`` heads of the head sweep at one position at a time
  (:func:`position_patches`).

A one-position patch replaces the whole site by the corrupted run's activation with that
position taken from the clean run: equal to patching the position alone, since in a run with
one patch the site holds the corrupted run's activation everywhere else.

**Batched** (:class:`Patcher`): the clean and corrupted activations of every site are
captured once; each row of a forward pass is one (patch, prompt) pair with its own values
(``replace`` with per-row ``rows`` masks); rows are sorted by the patch's layer and cut into
chunks (:func:`headwatch.cut.plan_chunks`), and the blocks below a chunk's first patched layer
are not run — the corrupted run's input to that block stands in for them (``skip``); the
logits are taken at the last position only. :meth:`Patcher.loop` is the plain reference: one
patch per forward pass.

**Attribution patching** (:func:`attribution_patching`): the first-order estimate of every
head's patched logit difference from one forward and one backward pass over the corrupted
prompts: ``corrupted + Σ ∂metric/∂z · (z_clean − z_corrupted)``, summed over prompts' positions
and the head's slice (the gradient through a ``capture`` with ``grad=True``).

**A researcher's own prompts** (``patching.pairs``, :mod:`headwatch.pairs`): rows of a file
instead of the templates, of different lengths: :func:`prompt_tensors` pads them on the left
(:func:`prompt_mask`, the :class:`Patcher`'s ``mask``; every forward pass here passes it with
its position ids), the residual and top-head sweeps count positions from the end.

**Guards** (:mod:`headwatch.guards`): nothing patched gives the corrupted logits exactly; the
last block's output patched at every position gives the clean logits exactly; a head patched
clean → clean changes nothing; the batched sweep equals one patch per forward pass within
``patching.tolerance``. A failed guard raises and no table is written.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from . import guards, pairs
from .arch import head_label, padded_inputs
from .cut import heads_one_per_layer, plan_chunks
from .device import exact_numerics
from .interventions import capture, intervene, replace, skip
from .markup import display_token
from .names import top_heads
from .sequences import single_token, token_strings
from .settings.patching import SLOTS, PatchingError, PatchingSettings, fill, layout

log = logging.getLogger("headwatch.patching")

ORDERS = ("ABBA", "BABA")
ROLES = {"ABBA": ("IO", "S", "S"), "BABA": ("S", "IO", "S")}
"""Who fills slots A, B, C in each order of the clean prompts."""
MIN_NAMES = 5
"""IO and S, and three other names for the corrupted prompt."""

TASK_NOTE = dict(
    task="two names (indirect object): clean prompts name IO and S, S again as the giver; the answer "
         "is IO. ABBA: A = IO, B = C = S; BABA: A = C = S, B = IO. Corrupted: three other names (ABC)",
    metric="logit difference logit(IO) - logit(S) at the last position, mean over the prompts",
    score="(patched - corrupted) / (clean - corrupted) of the metric: 0 = corrupted run, 1 = clean run",
    patched="the clean run's activation of the same prompt put into the corrupted run (replace at a "
            "site: z = a head's slice of the attention output projection's input; resid_in = a block's "
            "input); a one-position patch keeps the corrupted run's activation at every other position")


# ------------------------------------------------------------------ the prompt set
def draw_prompts(settings: PatchingSettings) -> list[dict]:
    """The prompts' names and templates, without a tokenizer (see the module doc)."""
    settings.need("n", "seed", "templates", "names")
    names, templates = list(settings.names), list(settings.templates)
    if len(names) < MIN_NAMES:
        raise PatchingError(f"patching.names: {len(names)} names; at least {MIN_NAMES} are needed")
    rng = np.random.default_rng(settings.seed)
    rows = []
    for i in range(settings.n):
        order = ORDERS[i % 2]
        t = (i // 2) % len(templates)
        io, s = (names[j] for j in rng.choice(len(names), size=2, replace=False))
        others = [x for x in names if x not in (io, s)]
        corrupted = [others[j] for j in rng.choice(len(others), size=3, replace=False)]
        clean = tuple(io if role == "IO" else s for role in ROLES[order])
        rows.append(dict(prompt=i, template=t, order=order, io=io, s=s, clean_names=list(clean),
                         corrupted_names=corrupted, clean_text=fill(templates[t], clean),
                         corrupted_text=fill(templates[t], corrupted)))
    return rows


def prompt_set(tokenizer, settings: PatchingSettings):
    """``prompts.parquet``: one row per prompt — ``prompt, template, order, io, s, io_id, s_id,
    clean_names, corrupted_names, clean_text, corrupted_text, clean_ids, corrupted_ids, tokens``
    (the clean prompt's tokens) — and its note (slot positions, the templates). Raises
    :class:`PatchingError` if a prompt's length or slots differ from the first's."""
    rows = draw_prompts(settings)
    templates = list(settings.templates)
    shape = None
    for r in rows:
        t = templates[r["template"]]
        clean_ids, slots = layout(tokenizer, t, r["clean_names"])
        corrupted_ids, slots_c = layout(tokenizer, t, r["corrupted_names"])
        if shape is None:
            shape = (len(clean_ids), slots)
        for what, ids, sl in (("clean", clean_ids, slots), ("corrupted", corrupted_ids, slots_c)):
            if (len(ids), sl) != shape:
                raise PatchingError(f"prompt {r['prompt']} ({what}, template {r['template']}): {len(ids)} tokens "
                                    f"with names at {sl}; the first prompt has {shape[0]} with names at "
                                    f"{shape[1]}")
        r.update(io_id=single_token(tokenizer, " " + r["io"], "IO"), s_id=single_token(tokenizer, " " + r["s"], "S"),
                 clean_ids=clean_ids, corrupted_ids=corrupted_ids, tokens=token_strings(tokenizer, clean_ids))
    columns = ["prompt", "template", "order", "io", "s", "io_id", "s_id", "clean_names", "corrupted_names",
               "clean_text", "corrupted_text", "clean_ids", "corrupted_ids", "tokens"]
    note = dict(TASK_NOTE, length=shape[0], slot_positions=dict(zip(SLOTS, shape[1])), templates=templates,
                draw=f"prompt i: template (i // 2) mod {len(templates)}, ABBA for even i and BABA "
                     f"for odd i; IO, S and the three corrupted names drawn without replacement by numpy "
                     f"default_rng({settings.seed})")
    return pd.DataFrame(rows)[columns], note


def position_labels(prompts) -> list[str]:
    """A label for each position of the prompts: the token when every clean prompt has the same
    one there, the slot (``{A}``, ``{B}``, ``{C}``) at a name's position, else the distinct
    tokens joined by ``/``."""
    tokens = np.array([list(t) for t in prompts["tokens"]], dtype=object)
    ids = np.array([list(x) for x in prompts["clean_ids"]])
    corrupted = np.array([list(x) for x in prompts["corrupted_ids"]])
    names = {int(x) for col in ("io_id", "s_id") for x in prompts[col]}
    out = []
    for p in range(tokens.shape[1]):
        seen = list(dict.fromkeys(tokens[:, p]))
        if (ids[:, p] != corrupted[:, p]).any() and set(ids[:, p].tolist()) <= names:
            slot = SLOTS[[c for c in range(ids.shape[1]) if (ids[:, c] != corrupted[:, c]).any()].index(p)]
            out.append("{" + slot + "}")
        elif len(seen) == 1:
            out.append(display_token(str(seen[0])))
        else:
            out.append("/".join(display_token(str(t)) for t in seen[:3]) + ("/…" if len(seen) > 3 else ""))
    return out


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


def logit_diff(logits, io, s):
    """``logits[i, io[i]] − logits[i, s[i]]`` for ``logits`` ``[B, vocab]`` (float32)."""
    rows = torch.arange(len(logits), device=logits.device)
    x = logits.float()
    return x[rows, io.to(logits.device)] - x[rows, s.to(logits.device)]


def prompt_tensors(prompts):
    """(clean ids, corrupted ids ``[N, T]``, IO ids, S ids ``[N]``) of ``prompts.parquet``; prompts
    of different lengths (a pairs file) padded on the left to the longest (:func:`prompt_mask`)."""
    lengths = prompts["clean_ids"].map(len).to_numpy()
    if len(set(lengths.tolist())) == 1:
        stack = lambda col: torch.tensor(np.stack(prompts[col].to_numpy()), dtype=torch.long)
    else:
        T = int(lengths.max())
        stack = lambda col: torch.tensor(np.stack([np.concatenate([np.full(T - len(x), PAD_ID), x])
                                                   for x in prompts[col]]), dtype=torch.long)
    return (stack("clean_ids"), stack("corrupted_ids"), torch.tensor(prompts["io_id"].to_numpy()),
            torch.tensor(prompts["s_id"].to_numpy()))


PAD_ID = 0
"""The id on the padding of a left-padded batch; the attention mask hides it (the guard
:func:`headwatch.guards.padded_vs_alone` shows each prompt's logits as when run alone)."""


def prompt_mask(prompts):
    """The attention mask ``[N, T]`` of :func:`prompt_tensors` (1 = a token, 0 = left padding), or
    None when every prompt has the same length (nothing padded: the batch runs without a mask)."""
    lengths = torch.tensor(prompts["clean_ids"].map(len).to_numpy())
    T = int(lengths.max())
    if bool((lengths == T).all()):
        return None
    return (torch.arange(T).unsqueeze(0) >= (T - lengths).unsqueeze(1)).long()


class Patcher:
    """Patches of a clean run into a corrupted run, many per forward pass (see the module doc).

    Created with the prompts (``clean``, ``corrupted`` ``[N, T]``, ``io``, ``s`` ``[N]``): runs
    both once, capturing every layer's ``z`` and ``resid_in`` (and the ``extra_sites``, e.g.
    ``q``, ``k``, ``v``: :mod:`headwatch.patching_kv`) and each prompt's logit difference
    (``clean_ld``, ``corrupted_ld``; their means ``clean_mean``, ``corrupted_mean``). With
    ``kv_cache``, the corrupted run goes through an empty transformers ``DynamicCache`` per batch
    of prompts, kept in ``corrupted_caches`` (every layer's keys and values as attention stores
    them): the cached per-position sweep reads them (:mod:`headwatch.patching_cache`) instead of
    running the corrupted prompts a second time.
    """

    SITES = ("z", "resid_in")

    def __init__(self, model, adapter, clean, corrupted, io, s, batch: int = 64, mask=None,
                 extra_sites: Sequence[str] = (), kv_cache: bool = False):
        self.model, self.adapter, self.batch = model, adapter, int(batch)
        self.sites = self.SITES + tuple(x for x in extra_sites if x not in self.SITES)   # captured, patchable
        self.device = next(model.parameters()).device
        self.clean, self.corrupted = clean.to(self.device), corrupted.to(self.device)
        if self.clean.shape != self.corrupted.shape:
            raise PatchingError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} prompts "
                                "differ in shape")
        self.mask = None if mask is None else mask.to(self.device)
        if self.mask is not None and self.mask.shape != self.clean.shape:
            raise PatchingError(f"the mask {tuple(mask.shape)} is not the prompts' shape {tuple(clean.shape)}")
        self.io, self.s = io.to(self.device), s.to(self.device)
        self.n, self.length = self.clean.shape
        self.overhead = 1 if self.device.type == "cpu" else self.batch     # as cut.BatchedCuts
        if kv_cache and not adapter.family.has_config:
            raise PatchingError(f"family {adapter.family.name}: its model takes no transformers key/value cache")
        self.corrupted_caches = [] if kv_cache else None
        with torch.no_grad():
            self.acts = {}
            lds = {}
            for run, ids in (("clean", self.clean), ("corrupted", self.corrupted)):
                self.acts[run], lds[run] = self._capture(ids, self.corrupted_caches if run == "corrupted" else None)
        self.clean_ld, self.corrupted_ld = lds["clean"], lds["corrupted"]
        self.clean_mean = float(self.clean_ld.double().mean())
        self.corrupted_mean = float(self.corrupted_ld.double().mean())
        if self.clean_mean == self.corrupted_mean:
            raise PatchingError(f"the clean and corrupted logit differences are equal ({self.clean_mean:g}): "
                                "the normalized score (patched - corrupted) / (clean - corrupted) is undefined")

    logit_diff = staticmethod(logit_diff)

    def _capture(self, ids, caches: list | None = None):
        """Run ``ids``, capturing every site; ``caches``: a list that gets each batch's filled
        ``DynamicCache`` (one full layer per model layer, none cropped to a window)."""
        L = self.adapter.n_layers
        edits = [capture(site, l) for site in self.sites for l in range(L)]
        parts, lds = {(site, l): [] for site in self.sites for l in range(L)}, []
        for i in range(0, len(ids), self.batch):
            rows = slice(i, i + self.batch)
            with intervene(self.adapter, edits) as cap:
                if caches is None:
                    logits = self.adapter.logits(ids[rows], keep=1, mask=self.mask_of(rows))[:, -1]
                else:
                    from transformers import DynamicCache     # only where a cache is asked for, as in headwatch.arch
                    caches.append(DynamicCache())
                    logits = self.model(input_ids=ids[rows], past_key_values=caches[-1], use_cache=True,
                                        logits_to_keep=1, **padded_inputs(self.mask_of(rows))).logits[:, -1]
            lds.append(logit_diff(logits, self.io[i:i + self.batch], self.s[i:i + self.batch]))
            for key in parts:
                parts[key].append(cap.one((*key, None)))
        acts = {site: [torch.cat(parts[(site, l)]) for l in range(L)] for site in self.sites}
        return acts, torch.cat(lds)

    def mask_of(self, rows):
        """The attention mask of the prompts ``rows`` (None: nothing is padded)."""
        return None if self.mask is None else self.mask[rows]

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
        out = torch.empty(len(order), dtype=torch.float32, device=self.device)
        with torch.no_grad():
            for i, j in plan_chunks(layer[order].tolist(), self.adapter.n_layers, self.batch, self.overhead):
                rows = order[i:j]
                which, sidx = patch_of[rows], prompt_of[rows].to(self.device)
                edits = self._edits(patches, which, sidx)
                start = int(layer[rows].min())
                if start > 0:     # blocks below the first patched layer: the corrupted run's input to it
                    edits.append(skip(start - 1, self.acts["corrupted"]["resid_in"][start][sidx]))
                with intervene(self.adapter, edits):
                    logits = self.adapter.logits(self.corrupted[sidx], keep=1, mask=self.mask_of(sidx))[:, -1]
                out[rows.to(self.device)] = logit_diff(logits, self.io[sidx], self.s[sidx])
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
                        logits = self.adapter.logits(self.corrupted[sidx], mask=self.mask_of(sidx))[:, -1]
                    parts.append(logit_diff(logits, self.io[sidx], self.s[sidx]))
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


# ------------------------------------------------------------------ attribution patching
def attribution_patching(model, adapter, clean, corrupted, io, s, batch: int = 64, mask=None):
    """The first-order estimate of every head's patched mean logit difference minus the
    corrupted one, ``[n_layers, n_heads]`` (float64, CPU): one forward pass over the clean
    prompts (their z), then per batch of corrupted prompts one forward and one backward pass —
    ``∂metric/∂z`` (``capture`` with ``grad=True``) times ``z_clean − z_corrupted``, summed over
    prompts, positions and the head's ``head_dim`` slice; the metric is the mean over all
    prompts of the logit difference at the last position. ``mask``: left-padded prompts' attention
    mask (the padding's gradient is 0: no position reads it)."""
    dev = next(model.parameters()).device
    rows_mask = lambda rows: None if mask is None else mask[rows].to(dev)
    clean, corrupted, io, s = clean.to(dev), corrupted.to(dev), io.to(dev), s.to(dev)
    L, H, d = adapter.n_layers, adapter.n_heads, adapter.head_dim
    n = len(clean)
    total = torch.zeros(L, H, dtype=torch.float64, device=dev)
    for i in range(0, n, batch):
        rows = slice(i, i + batch)
        with torch.no_grad(), intervene(adapter, [capture("z", l) for l in range(L)]) as cap:
            adapter.run_body(clean[rows], mask=rows_mask(rows))
        z_clean = [cap.one(("z", l, None)) for l in range(L)]
        with torch.enable_grad(), intervene(adapter, [capture("z", l, grad=True) for l in range(L)]) as cap:
            logits = adapter.logits(corrupted[rows], keep=1, mask=rows_mask(rows))[:, -1]
            metric = logit_diff(logits, io[rows], s[rows]).sum() / n
            zs = [cap.one(("z", l, None)) for l in range(L)]
            grads = torch.autograd.grad(metric, zs)
        for l in range(L):
            delta = (grads[l] * (z_clean[l] - zs[l].detach())).double()
            total[l] += delta.reshape(*delta.shape[:-1], H, d).sum(dim=(0, 1, 3))
    return total.cpu()


# ------------------------------------------------------------------ summaries
def ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (1 = smallest), ties sharing the mean of their ranks."""
    return pd.Series(np.asarray(x, dtype=float)).rank(method="average").to_numpy()


def correlations(exact: np.ndarray, estimate: np.ndarray) -> dict:
    """Pearson and Spearman (Pearson of average ranks) correlation; None where either side is
    constant (undefined), with the reason."""
    out = {}
    for name, (a, b) in (("pearson", (exact, estimate)), ("spearman", (ranks(exact), ranks(estimate)))):
        a, b = np.asarray(a, float), np.asarray(b, float)
        out[name] = None if a.std() == 0 or b.std() == 0 else float(np.corrcoef(a, b)[0, 1])
    if out["pearson"] is None:
        out["undefined"] = "one side is constant over the heads"
    return out


def phrase_probabilities(model, adapter, phrases, phrase: str) -> dict:
    """p(expected) and p(also) (softmax over the vocabulary) at the last position of ``phrase``
    in ``phrases.parquet``: the model's IO and S probabilities on the protocol's own prompt."""
    row = phrases[phrases["phrase"] == phrase]
    if len(row) != 1 or row["also_id"].isna().any():
        raise PatchingError(f"patching.phrase = {phrase!r}: phrases.parquet has no such phrase with an "
                            "expected and an also token")
    r = row.iloc[0]
    ids = torch.tensor([list(r.token_ids)], device=next(model.parameters()).device)
    with torch.no_grad():
        p = torch.softmax(adapter.logits(ids, keep=1)[0, -1].double(), -1)
    return {"phrase": phrase, "text": r.text, "io": r.expected, "s": r.also,
            "p_io": float(p[int(r.expected_id)]), "p_s": float(p[int(r.also_id)])}


# ------------------------------------------------------------------ the rule
def run_patching(model, adapter, prompts, phrases, settings: PatchingSettings):
    """Rule patching_sweep: (heads, resid, positions tables, their note, the guard record).

    ``settings``: of the ``patching`` config slice, it reads top_k, batch, tolerance, guard_prompts, phrase.
    Every guard of :mod:`headwatch.guards` runs (under :func:`headwatch.device.exact_numerics`);
    a failure raises before anything is returned.
    """
    with exact_numerics():
        return _run_patching(model, adapter, prompts, phrases, settings)


def _run_patching(model, adapter, prompts, phrases, settings: PatchingSettings):
    settings.need("top_k", "batch", "tolerance", "guard_prompts", "phrase")
    batch, k = settings.batch, settings.top_k
    clean, corrupted, io, s = prompt_tensors(prompts)
    mask = prompt_mask(prompts)                      # None unless the prompts differ in length (pairs)
    sample = list(range(min(settings.guard_prompts, len(prompts))))
    from_end = pairs.from_pairs(prompts)             # a pairs file's prompts: positions counted from the end
    labels = pairs.labels_from_end(prompts) if from_end else position_labels(prompts)
    records = guards.GuardRecords()
    t0 = time.perf_counter()
    patcher = Patcher(model, adapter, clean, corrupted, io, s, batch, mask)
    heads = head_patches(adapter)
    head_ld = patcher.run(heads)
    t_exact = time.perf_counter() - t0
    log.info("%d prompts of %d tokens: logit difference clean %.4f, corrupted %.4f; %d heads patched in %.1f s",
             patcher.n, patcher.length, patcher.clean_mean, patcher.corrupted_mean, len(heads), t_exact)
    for guard in (guards.nothing_patched, guards.everything_patched):
        records.add(guard(patcher, sample))
    if mask is not None:       # the guard prompts and the first prompt of each length
        lengths = mask.sum(dim=1).tolist()
        shortest = list(dict.fromkeys(sample + [lengths.index(n) for n in sorted(set(lengths))]))
        records.add(guards.padded_vs_alone(patcher, shortest, settings.tolerance))
    t0 = time.perf_counter()
    estimate = attribution_patching(model, adapter, clean, corrupted, io, s, batch, mask).numpy()
    t_estimate = time.perf_counter() - t0

    mean = head_ld.double().mean(dim=1).numpy()
    est_mean = patcher.corrupted_mean + np.array([estimate[p.layer, p.unit] for p in heads])
    table = pd.DataFrame(dict(layer=[p.layer for p in heads], head=[p.unit for p in heads],
                              label=[head_label(p.layer, p.unit) for p in heads],
                              logit_diff=mean, score=patcher.score(mean),
                              estimate_logit_diff=est_mean, estimate_score=patcher.score(est_mean)))
    table["score_rank"] = table["score"].rank(ascending=False, method="min").astype(int)
    table["estimate_rank"] = table["estimate_score"].rank(ascending=False, method="min").astype(int)
    top = top_heads(table, "score", k)
    records.add(guards.clean_to_clean(patcher, sample, list(dict.fromkeys(heads_one_per_layer(adapter) + top))))

    t0 = time.perf_counter()
    resid = resid_patches(adapter, patcher.length)
    resid_ld = patcher.run(resid)
    where = position_patches(top, patcher.length)
    where_ld = patcher.run(where)
    log.info("%d residual patches (layer × position) and %d top-head × position patches in %.1f s",
             len(resid), len(where), time.perf_counter() - t0)
    # The batched sweep vs one patch per forward pass: one head per layer and the top heads
    # (every position), the last position and a name's position of every block's input, the
    # top head at every position.
    probe_heads = list(dict.fromkeys(heads_one_per_layer(adapter) + top))
    slot = int((clean != corrupted).any(dim=0).nonzero()[0, 0])         # the first name's position
    probe = ([(heads, head_ld, heads.index(Patch("z", l, h))) for l, h in probe_heads]
             + [(resid, resid_ld, resid.index(Patch("resid_in", l, None, p)))
                for l in range(adapter.n_layers) for p in sorted({slot, patcher.length - 1})]
             + [(where, where_ld, i) for i in range(patcher.length)])
    patches = [ps[i] for ps, _, i in probe]
    records.add(guards.batched_vs_loop(
        patcher.against_loop(patches, torch.stack([ld[i, sample] for _, ld, i in probe]), sample),
        settings.tolerance, "logit difference IO - S of every guard prompt: the batched sweep vs one patch "
        "per forward pass", prompts=len(sample)))

    top10 = min(10, len(table))
    overlap = len(set(top_heads(table, "score", top10)) & set(top_heads(table, "estimate_score", top10)))
    rank_of = {(r.layer, r.head): int(r.score_rank) for r in table.itertuples()}
    resid_table = pd.DataFrame(dict(layer=[p.layer for p in resid], position=[p.position for p in resid],
                                    token=[labels[p.position] for p in resid]))
    where_table = pd.DataFrame(dict(layer=[p.layer for p in where], head=[p.unit for p in where],
                                    label=[head_label(p.layer, p.unit) for p in where],
                                    head_rank=[rank_of[(p.layer, p.unit)] for p in where],
                                    position=[p.position for p in where], token=[labels[p.position] for p in where]))
    for tab, ps, ld in ((resid_table, resid, resid_ld), (where_table, where, where_ld)):
        if not from_end:
            tab["logit_diff"] = ld.double().mean(dim=1).numpy()
            tab["score"] = patcher.score(tab["logit_diff"].to_numpy())
        else:                  # aligned from the end: -1 = each prompt's last token
            by_position = pairs.position_scores(ld, [p.position for p in ps],
                                                torch.ones_like(clean) if mask is None else mask,
                                                patcher.clean_ld, patcher.corrupted_ld)
            tab["position"] -= patcher.length
            for col in by_position:
                tab[col] = by_position[col].to_numpy()
    names = phrase_probabilities(model, adapter, phrases, settings.phrase)
    note = dict(TASK_NOTE, prompts=len(prompts), length=patcher.length, position_labels=labels,
                clean_logit_diff=patcher.clean_mean, corrupted_logit_diff=patcher.corrupted_mean,
                names_phrase=f"{names['phrase']}: p(IO = {names['io']!r}) = {names['p_io']:.4g}, "
                             f"p(S = {names['s']!r}) = {names['p_s']:.4g} at its last position",
                names_phrase_p_io=names["p_io"], names_phrase_p_s=names["p_s"],
                estimate="attribution patching: corrupted + sum over prompts, positions and the head's slice "
                         "of d(metric)/dz (corrupted run) x (z clean - z corrupted); one forward and one "
                         "backward pass per batch of prompts",
                **{f"estimate_{key}": v for key, v in correlations(table["score"], table["estimate_score"]).items()},
                estimate_top10_overlap=overlap, top10=top10,
                top10_note="heads in both top-10 lists (exact score and estimate, each by score descending)",
                exact_seconds=round(t_exact, 3), estimate_seconds=round(t_estimate, 3),
                seconds_note=f"wall-clock seconds in this rule on {patcher.device.type}: the exact head sweep "
                             "(both runs captured, every head patched, batched) and the estimate (one clean "
                             "forward, one corrupted forward and backward per batch)",
                top_k=k, top_heads=" ".join(head_label(*h) for h in top))
    log.info("patching: clean %.4f, corrupted %.4f; top heads %s; estimate pearson %s, top-10 overlap %d/%d; "
             "exact %.1f s, estimate %.2f s", patcher.clean_mean, patcher.corrupted_mean, note["top_heads"],
             note.get("estimate_pearson"), overlap, top10, t_exact, t_estimate)
    return table, resid_table, where_table, note, records.record(model)
