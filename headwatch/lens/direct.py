"""Direct effects and the logit lens (protocol §5h; rule lens_direct).

**Direct effects.** The logit difference ``logit(answer) − logit(distractor)`` at a prompt's last
position is a sum of the residual stream's terms read through the final norm and the unembedding:
the token embedding (and, where positions are learned, the position embedding), each head's output
(its ``z`` slice times the output projection's columns for that head, nothing else), each block's
output-projection bias, each feed-forward network's output, the biases of the norms between a
block and the stream, and the final norm's and the unembedding's biases. With the final norm's scale
**frozen** at the run's own (divided by, as TransformerLens's ``apply_ln_to_stack`` does; a LayerNorm
also subtracts each term's mean across the width) each term's share is linear, and the shares sum to
the logit difference exactly in real arithmetic — the guard :func:`sum_is_logit_diff`. A norm
between attention and the stream (Gemma 2/3's and OLMo 2's post-attention norms) is frozen at the
run's own scale the same way, its weight (``offset + w``) kept. A soft-capped output (Gemma 2's
``final_logit_softcapping``: ``c·tanh(logit / c)``) is not linear: the shares are of the logits before
the cap, and the guard applies the cap to each logit's sum before it compares.

Each share is computed on the clean run, on the corrupted run, and as the **direct part of patching
it** clean → corrupted: the component's clean value in the corrupted run, read through the corrupted
run's frozen scales (the path from the component to the logits, everything else corrupted). Beside
:func:`headwatch.patch_heads`' total effect of a head (patched − corrupted logit difference), its
direct part and the rest, the indirect effect — through later heads and networks and through the norms'
scales — and the heads that act mostly through others (:data:`THROUGH_OTHERS`).

**The logit lens.** The accumulated residual stream after each block (depth 0: the embeddings; depth
d: the output of block d − 1) read through the final norm with **its own scale** (the norm module run on
it, not frozen: each depth is normalised as if it were the last) and the unembedding (and the soft-cap
where the model has one): the logit difference, the answer's rank among the vocabulary (1 = the top)
and its probability, per depth and position, averaged over the prompts. Guard: at the last depth and
position the lens is the model's own output (:func:`lens_is_the_output`).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from ..guards import GuardRecords, Rounding, compare, rounding, unit_roundoff
from ..jobs import phases
from ..model.arch import head_label
from ..model.device import exact_numerics
from ..model.interventions import at_least_float32, capture, intervene
from ..names import top_heads
from ..patching import pairs
from ..patching.batch import PromptBatch, logit_diff
from ..patching.prompts import position_labels, task_note
from ..settings.lens import LensError, LensSettings

log = logging.getLogger("headwatch.lens.direct")

THROUGH_OTHERS = 0.5
"""A head acts *mostly through others* when more than half of its effect's size is indirect:
``|indirect| / (|direct| + |indirect|) > 1/2``, i.e. ``|indirect| > |direct|`` — "mostly" read as
"more than half", nothing fitted; asked only of the heads that matter (patching's top ``top_k``)."""

KINDS = ("embed", "position", "head", "attention bias", "attention norm bias", "mlp", "final norm bias",
         "unembedding bias")
"""The components of the logit difference, in the order of the stream."""

DIRECT_NOTE = dict(
    direct_effect="each component's term of the logit difference answer - distractor at the last position: its "
                  "output at the last position times the final norm's weight and the unembedding's answer - "
                  "distractor rows, divided by the run's own final-norm scale (frozen; a LayerNorm also subtracts "
                  "the term's mean across the width); a norm between attention and the stream frozen the same way",
    clean="the term on the clean run (mean over the prompts)",
    corrupted="the term on the corrupted run (mean over the prompts)",
    direct="the direct part of patching the component clean -> corrupted: its clean output minus its corrupted "
           "output, through the corrupted run's frozen scales (mean over the prompts)",
    direct_sem="the standard error of direct over the prompts",
    exact="the terms sum to the logit difference in real arithmetic (guard sum_is_logit_diff); a soft-capped "
          "output's terms are of the logits before the cap")


# ------------------------------------------------------------------ the model's matrices
def out_weights(adapter, layer: int) -> torch.Tensor:
    """The output projection of ``layer`` as each head writes: ``[heads, head_dim, width]`` (head h's
    ``z`` slice times it is its output)."""
    w = adapter.out_proj(layer).weight.detach()
    w = w if adapter.family.conv1d else w.T               # [heads·head_dim, width]
    return w.reshape(adapter.n_heads, adapter.head_dim, adapter.width)


def _bias(module) -> torch.Tensor | None:
    b = getattr(module, "bias", None)
    return None if b is None else b.detach()


def _scale(x: torch.Tensor, p: dict) -> torch.Tensor:
    """A norm's scale of ``x`` ``[..., width]`` (``[...]``): √(variance + eps) for a LayerNorm, √(mean square +
    eps) for an RMSNorm."""
    if p["kind"] == "LayerNorm":
        return torch.sqrt(x.var(-1, unbiased=False) + p["eps"])
    return torch.sqrt((x * x).mean(-1) + p["eps"])


def _through(d: torch.Tensor, p: dict, scale: torch.Tensor) -> torch.Tensor:
    """Directions ``d`` ``[B, 2, width]`` pulled back through a norm frozen at ``scale`` ``[B]``: what a term
    ``c`` adds is ``c · result`` (its weight, the offset of an RMSNorm, 1 / scale; a LayerNorm's mean taken
    off: ``(c − mean c) · d = c · (d − mean d)``)."""
    w = p["weight"].detach().to(d) + (p["offset"] if p["kind"] == "RMSNorm" else 0.0)
    out = d * w / scale[:, None, None]
    return out - out.mean(-1, keepdim=True) if p["kind"] == "LayerNorm" else out


# ------------------------------------------------------------------ one run's captures
@dataclass
class Captured:
    """One run of a batch of prompts: every layer's ``z`` and ``mlp_out`` at the last position, the
    embeddings, the last token and the last block's output there, every depth's stream at every position
    (for the lens: the embeddings, then each block's output) and the model's logits at the last position."""
    z: list            # [B, heads·head_dim] a layer
    mlp: list          # [B, width] a layer
    embed: torch.Tensor
    final: torch.Tensor
    ids: torch.Tensor  # [B] the last tokens
    resid: list        # [B, T, width] a depth
    logits: torch.Tensor   # [B, vocab] at the last position


@torch.no_grad()
def capture_run(adapter, ids: torch.Tensor, mask, lens: bool) -> Captured:
    """One forward pass of ``ids`` capturing what :class:`Captured` holds (``lens``: every depth's stream
    at every position too)."""
    L = adapter.n_layers
    edits = ([capture("z", l) for l in range(L)] + [capture("mlp_out", l) for l in range(L)]
             + [capture("resid_in", 0)] + [capture("resid", l) for l in range(L)])
    with intervene(adapter, edits) as cap:
        logits = adapter.logits(ids, keep=1, mask=mask)[:, -1]
    resid = [cap.one(("resid_in", 0, None))] + [cap.one(("resid", l, None)) for l in range(L)]
    return Captured(z=[cap.one(("z", l, None))[:, -1] for l in range(L)],
                    mlp=[cap.one(("mlp_out", l, None))[:, -1] for l in range(L)],
                    embed=resid[0][:, -1], final=resid[-1][:, -1], ids=ids[:, -1], resid=resid if lens else [],
                    logits=at_least_float32(logits))


# ------------------------------------------------------------------ the terms
@dataclass
class Terms:
    """Every component's term of the answer's and the distractor's logit, ``values`` ``[B, components,
    2]`` (float64), their ``labels`` (component, kind, layer, head) and the largest |product| of a
    component's entry with its direction's (``largest``: the magnitude of the guard's bound)."""
    values: torch.Tensor
    labels: list
    largest: float


class Reader:
    """What the terms of one model are read with: each layer's output projection per head, its bias and
    the norm after attention, the final norm, the unembedding rows and biases, the soft-cap."""

    def __init__(self, adapter):
        a = self.adapter = adapter
        self.final = a.norm_params(a.final_norm(), "final norm")
        emb_in, emb_out = a.embeddings()
        self.embedding = emb_in.weight.detach()
        self.unembedding = emb_out.weight.detach()          # [vocab, width]
        self.unembedding_bias = _bias(emb_out)
        self.out = [out_weights(a, l).double() for l in range(a.n_layers)]
        self.out_bias = [_bias(a.out_proj(l)) for l in range(a.n_layers)]
        post = [a.attn_out_norm(l) for l in range(a.n_layers)]
        self.post = [None if m is None else a.norm_params(m, "norm after attention") for m in post]
        self.softcap = a.logit_softcap()
        self.positions = a.family.position == "absolute" and not a.rotary_dims

    def rows(self, answer, distractor) -> torch.Tensor:
        """The unembedding's answer and distractor rows ``[B, 2, width]`` (float64)."""
        return self.unembedding[torch.stack([answer, distractor], 1).to(self.unembedding.device)].double()

    def scales(self, run: Captured, answer, distractor) -> tuple:
        """The run's frozen reading: (the answer's and the distractor's rows pulled back through the final
        norm frozen at the run's scale ``[B, 2, width]``, each layer's norm-after-attention scale ``[B]``
        — None where the family has no such norm —, the final norm's scale ``[B]``)."""
        final = _scale(run.final.double(), self.final)
        att = []
        for l, p in enumerate(self.post):
            if p is None:
                att.append(None)
                continue
            z = run.z[l].double().reshape(-1, self.adapter.n_heads, self.adapter.head_dim)
            o = torch.einsum("bhd,hdw->bw", z, self.out[l].to(z.device))      # the attention's output, rebuilt
            att.append(_scale(o if self.out_bias[l] is None else o + self.out_bias[l].double(), p))
        return _through(self.rows(answer, distractor).to(final.device), self.final, final), att, final

    def terms(self, run: Captured, answer, distractor, frozen: tuple | None = None,
              clean: Captured | None = None) -> Terms:
        """Every component's terms of ``run`` — or, with ``clean``, of each component's clean output minus
        ``run``'s (the constants' terms then 0) — read through ``frozen`` (:meth:`scales`; the run's own
        when None)."""
        a, L = self.adapter, self.adapter.n_layers
        d, att, _ = frozen if frozen is not None else self.scales(run, answer, distractor)
        values, labels, largest = [], [], [0.0]

        def add(vector, direction, label):       # vector [B, width] or [B, n, width] → terms [B, n, 2]
            many = vector.ndim == 3
            prod = vector.unsqueeze(-2) * direction.unsqueeze(1) if many else vector[:, None] * direction
            largest.append(float(prod.abs().max()) if prod.numel() else 0.0)
            values.append(prod.sum(-1) if many else prod.sum(-1)[:, None])
            labels.extend(label if many else [label])

        def part(get):                            # a component of the run, or clean − run
            return get(clean) - get(run) if clean is not None else get(run)

        def const(vector):                        # a constant: the same in both runs
            return vector if clean is None else torch.zeros_like(vector)

        B, dev = len(run.final), d.device
        embed = part(lambda r: r.embed.double().to(dev))
        if self.positions:
            token = part(lambda r: self.embedding[r.ids.to(self.embedding.device)].double().to(dev))
            add(token, d, ("embed", "embed", None, None))
            add(embed - token, d, ("position", "position", None, None))
        else:
            add(embed, d, ("embed", "embed", None, None))
        for l in range(L):
            dl = d if self.post[l] is None else _through(d, self.post[l], att[l])
            z = part(lambda r: r.z[l].double().to(dev)).reshape(B, a.n_heads, a.head_dim)
            add(torch.einsum("bhd,hdw->bhw", z, self.out[l].to(dev)), dl,
                [(head_label(l, h), "head", l, h) for h in range(a.n_heads)])
            if self.out_bias[l] is not None:
                add(const(self.out_bias[l].double().to(dev).expand(B, -1)), dl,
                    (f"L{l} attention bias", "attention bias", l, None))
            if self.post[l] is not None and self.post[l]["bias"] is not None:
                add(const(self.post[l]["bias"].detach().double().to(dev).expand(B, -1)), d,
                    (f"L{l} attention norm bias", "attention norm bias", l, None))
            add(part(lambda r: r.mlp[l].double().to(dev)), d, (f"L{l} mlp", "mlp", l, None))
        rows = self.rows(answer, distractor).to(dev)
        if self.final["bias"] is not None:
            values.append(const((rows * self.final["bias"].detach().double().to(dev)).sum(-1))[:, None])
            labels.append(("final norm bias", "final norm bias", None, None))
        if self.unembedding_bias is not None:
            b = self.unembedding_bias.double().to(dev)
            values.append(const(torch.stack([b[answer.to(dev)], b[distractor.to(dev)]], 1))[:, None])
            labels.append(("unembedding bias", "unembedding bias", None, None))
        return Terms(torch.cat(values, 1), labels, max(largest))

    def capped(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` through the model's soft-cap (as they are without one)."""
        return logits if self.softcap is None else self.softcap * torch.tanh(logits / self.softcap)


# ------------------------------------------------------------------ the guards
def sum_bound(adapter, factor: float, largest: float, components: int) -> Rounding:
    """The bound of :func:`sum_is_logit_diff`: the model sums the ``components`` terms into its stream
    and reads the sum with one product over the width; the terms are read back from its own captures in
    float64. Two steps of rounding (depth 2) of ``components × width`` products, the largest of them
    ``largest`` (a component's entry times its direction's entry), in the dtype the model computes in."""
    return rounding(adapter, factor, largest, depth=2, terms=components * adapter.width,
                    of="largest |component entry × direction entry|")


def sum_is_logit_diff(reader: Reader, cases: list, factor: float) -> dict:
    """The components' terms sum to the model's logit difference: each ``(run, terms [N, C, 2], logits
    [N, vocab], answer, distractor)`` of ``cases`` — the answer's and the distractor's sums each through the
    soft-cap where the model has one, their difference against the model's own at the last position."""
    a = reader.adapter
    pairs, largest, n = [], 0.0, 0
    for run, terms, logits, answer, distractor in cases:
        sums = reader.capped(terms.values.sum(1))
        want = logit_diff(logits, answer, distractor, exact=True).cpu()
        pairs.append((dict(run=run), (sums[:, 0] - sums[:, 1]).cpu(), want))
        largest, n = max(largest, terms.largest), terms.values.shape[1]
    cap = "" if reader.softcap is None else f", each logit's sum through the soft-cap {reader.softcap:g}·tanh(x / " \
                                            f"{reader.softcap:g})"
    return compare("sum_is_logit_diff", pairs, sum_bound(a, factor, largest, n),
                   "logit difference answer - distractor at the last position of every prompt: the sum of every "
                   f"component's direct effect (the final norm's scale frozen{cap}) vs the model's output",
                   components=n, prompts=len(pairs[0][1]))


def lens_is_the_output(adapter, cases: list, factor: float) -> dict:
    """The lens at the last depth and position is the model's output: each ``(run, lens logits [N,
    vocab], the model's [N, vocab])`` of ``cases``; the same final norm and unembedding on the same
    numbers, one product over the width in another batch shape."""
    largest = max(float(w.abs().max()) for _, _, w in cases)
    return compare("lens_is_the_output", [(dict(run=r), g, w) for r, g, w in cases],
                   rounding(adapter, factor, largest, depth=1, terms=adapter.width),
                   "every logit at the last position of every prompt: the logit lens at the last depth (the last "
                   "block's output through the final norm and the unembedding) vs the model's output")


# ------------------------------------------------------------------ the rule
def _batches(n: int, size: int):
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def direct_effects(model, adapter, prompts: pd.DataFrame, settings: LensSettings, heads: pd.DataFrame | None = None,
                   top_k: int | None = None, lens: bool = False, called: str = "direct_effects"):
    """(the components' table, the heads' table beside patching's total effect — None without ``heads`` —,
    the logit lens' table — None without ``lens`` —, the note, the guard record): see the module doc.
    ``heads``: :func:`headwatch.patch_heads`' table on the same prompts, its note (``attrs["note"]``) saying
    the clean and corrupted logit differences it was patched at (:func:`same_prompts`); ``top_k``: the heads
    that matter (patching's ``top_k``), of which those acting mostly through others are named; ``called``: the
    name of the call's progress (``logit_lens`` for :func:`headwatch.logit_lens`). Every guard runs under
    :func:`headwatch.model.device.exact_numerics`; a failed one raises once the tables are made, carrying
    them."""
    if heads is not None:
        heads_note(heads)
    with exact_numerics(), phases(called, 3 + 2 * lens) as step:
        return _direct_effects(model, adapter, prompts, settings, heads, top_k, lens, step)


def heads_note(heads: pd.DataFrame) -> dict:
    """The note of :func:`headwatch.patch_heads`' table (``heads.attrs["note"]``), refused without the clean and
    corrupted logit differences it was patched at (finite numbers) — what says its prompts are these."""
    note = heads.attrs.get("note")
    made = ("pass the table hw.patch_heads(m, prompts) returned (one read back from its file: its note is "
            "headwatch.tableio.read_note(path))")
    if not isinstance(note, dict):
        raise LensError(f"heads carries no note (attrs['note']) saying the clean and corrupted logit differences it "
                        f"was patched at: {made}")
    for key in ("clean_logit_diff", "corrupted_logit_diff"):
        value = note.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise LensError(f"heads' note (attrs['note']) has {key} = {value!r}, not a finite number: {made}")
    return note


def same_prompts(adapter, note: dict, lds: dict, largest: float, factor: float) -> None:
    """Refuse a heads table patched on other prompts (or of another model): its note's clean and corrupted logit
    differences must be this call's within the bound of rounding of the two runs (:func:`headwatch.guards.rounding`:
    the model's blocks and unembedding in another batch shape; the magnitude 2 × the largest |logit| at the
    last position, a difference of two logits; at least float32's unit roundoff, the sweep's dtype)."""
    bound = rounding(adapter, factor, 2 * largest, of="2 × largest |logit| (a difference of two logits)")
    if bound.unit_roundoff < unit_roundoff(torch.float32):
        bound = replace(bound, dtype="float32")
    theirs = {r: float(note[f"{r}_logit_diff"]) for r in ("clean", "corrupted")}
    worst = max(abs(theirs[r] - lds[r]) for r in theirs)
    if not worst <= bound.bound:
        raise LensError(f"heads were patched at clean and corrupted logit differences {theirs['clean']:.6g} and "
                        f"{theirs['corrupted']:.6g} (its note), these prompts give {lds['clean']:.6g} and "
                        f"{lds['corrupted']:.6g}: {worst:.3g} apart, more than rounding explains ({bound.bound:.3g}: "
                        f"{bound.formula()}); a head's total effect and its direct effect must be of the same prompts "
                        "and model: pass the table hw.patch_heads(m, prompts) returned for these prompts")


def _direct_effects(model, adapter, prompts, settings: LensSettings, heads, top_k, lens: bool, step):
    settings.need("batch", "rounding_factor")
    prompt_batch = PromptBatch.of(prompts)
    device = next(model.parameters()).device
    reader, records = Reader(adapter), GuardRecords(step)
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts, every component's direct effect")
    got = dict(clean=[], corrupted=[], direct=[])
    cases, lens_sums, lens_cases = [], None, []
    for sl in _batches(len(prompt_batch), settings.batch):
        part = prompt_batch.rows(sl).to(device)
        m, a, d = part.mask, part.answer, part.distractor
        runs = {name: capture_run(adapter, getattr(part, name), m, lens) for name in ("clean", "corrupted")}
        frozen = reader.scales(runs["corrupted"], a, d)
        terms = {name: reader.terms(run, a, d) for name, run in runs.items()}
        terms["direct"] = reader.terms(runs["corrupted"], a, d, frozen, clean=runs["clean"])
        for name, t in terms.items():
            got[name].append(t)
        cases += [(name, terms[name], runs[name].logits, a, d) for name in runs]
        if lens:
            lens_sums = _lens_batch(adapter, reader, runs, a, d, m, lens_sums, lens_cases)
    seconds = time.perf_counter() - t0
    labels = got["clean"][0].labels
    values = {name: torch.cat([t.values for t in ts]) for name, ts in got.items()}      # [N, C, 2]
    effect = {name: (v[..., 0] - v[..., 1]).cpu().numpy() for name, v in values.items()}   # [N, C]
    n = len(prompt_batch)
    table = pd.DataFrame(dict(component=[x[0] for x in labels], kind=[x[1] for x in labels],
                              layer=pd.array([x[2] for x in labels], dtype="Int64"),
                              head=pd.array([x[3] for x in labels], dtype="Int64"),
                              clean=effect["clean"].mean(0), corrupted=effect["corrupted"].mean(0),
                              direct=effect["direct"].mean(0),
                              direct_sem=effect["direct"].std(0, ddof=1) / math.sqrt(n) if n > 1 else 0.0))
    step("guard: the components sum to the logit difference")
    with records.guard("sum_is_logit_diff"):
        records.add(sum_is_logit_diff(reader, cases, settings.rounding_factor))
    lds = {r: float(torch.cat([logit_diff(c[2], c[3], c[4], exact=True).cpu() for c in cases if c[0] == r]).mean())
           for r in ("clean", "corrupted")}
    if heads is not None:
        same_prompts(adapter, heads.attrs["note"], lds, max(float(c[2].abs().max()) for c in cases),
                     settings.rounding_factor)
    lens_table = None
    if lens:
        step("guard: the lens at the last depth is the model's output")
        with records.guard("lens_is_the_output"):
            records.add(lens_is_the_output(adapter, lens_cases, settings.rounding_factor))
        lens_table = _lens_table(prompts, lens_sums, adapter.n_layers)
    heads_table = None if heads is None else beside_patching(table, heads, lds["corrupted"], top_k,
                                                             settings.confidence or 0.95)
    note = dict(task_note(prompts), **DIRECT_NOTE, prompts=n, clean_logit_diff=lds["clean"],
                corrupted_logit_diff=lds["corrupted"], components=len(labels),
                softcap=reader.softcap or 0.0,
                softcap_note=(f"the model soft-caps its logits (c·tanh(logit / c), c = {reader.softcap:g}): the terms "
                              "are of the logits before the cap, which is not linear" if reader.softcap else
                              "no soft-cap: the terms are of the logits themselves"),
                frozen=("the final norm" + (" and each norm between attention and the stream"
                                            if any(p is not None for p in reader.post) else "")
                        + f" ({reader.final['kind']}) at each run's own scale"),
                seconds=round(seconds, 3),
                **(dict(through_others_rule=f"|indirect| / (|direct| + |indirect|) > {THROUGH_OTHERS:g} among the "
                                            f"top {top_k} heads by patching score; resolved when the share's range "
                                            "over the direct effect's interval (share_low, share_high) is on one "
                                            f"side of {THROUGH_OTHERS:g}", top_k=top_k)
                   if heads is not None else {}),
                **(dict(LENS_NOTE, depths=adapter.n_layers + 1) if lens else {}))
    if heads_table is not None:
        named = heads_table[heads_table["through_others"]].sort_values("score_rank")
        note["through_others"] = " ".join(f"{r.label}" + ("" if r.resolved else " (not resolved)")
                                          for r in named.itertuples()) or "none"
    tables = dict(direct=table, heads=heads_table, logit_lens=lens_table)
    guarded = records.record(model, tables, note)
    log.info("direct effects of %d components on %d prompts in %.2f s; clean %.4f, corrupted %.4f", len(labels), n,
             seconds, lds["clean"], lds["corrupted"])
    return table, heads_table, lens_table, note, guarded


# ------------------------------------------------------------------ beside patching's total effect
def _share(direct, total):
    """``|total − direct| / (|direct| + |total − direct|)`` (0 where both are 0), elementwise."""
    ind = total - direct
    size = np.abs(direct) + np.abs(ind)
    return np.divide(np.abs(ind), size, out=np.zeros_like(size, dtype=float), where=size > 0)


def share_interval(direct: np.ndarray, sem: np.ndarray, total: np.ndarray, confidence: float) -> tuple:
    """The indirect share's range over the direct effect's interval ``direct ± q·sem`` (``q`` the normal
    quantile of ``confidence``; the total held at its mean): (lowest, highest) per head, the share taken at
    the interval's ends, at 0 and at the total (where it turns) when inside, and on a grid between."""
    from scipy.stats import norm

    q = float(norm.ppf(0.5 + confidence / 2))
    lo, hi = direct - q * sem, direct + q * sem
    grid = np.linspace(0, 1, 101)[:, None]
    points = [lo + grid * (hi - lo)] + [np.where((lo <= c) & (c <= hi), c, lo)[None] for c in (0 * total, total)]
    shares = _share(np.concatenate(points), np.broadcast_to(total, (len(grid) + 2, len(total))))
    return shares.min(0), shares.max(0)


def beside_patching(direct: pd.DataFrame, heads: pd.DataFrame, corrupted: float, top_k: int | None,
                    confidence: float = 0.95) -> pd.DataFrame:
    """Per head: its direct effect (the direct part of patching it clean -> corrupted), its total effect
    (:func:`headwatch.patch_heads`' patched − corrupted logit difference on the same prompts), the rest
    (indirect), the indirect share of the effect's size with its range over the direct effect's interval
    (``confidence``; the head sweep keeps no per-prompt total, so the total's own spread is not in it),
    and whether it acts mostly through others (:data:`THROUGH_OTHERS`, among the top ``top_k`` heads by
    patching score; None: every head) — ``resolved`` when the share's whole range is on one side of it."""
    mine = direct[direct["kind"] == "head"].set_index(["layer", "head"])
    theirs = heads.assign(layer=heads["layer"].astype(int), head=heads["head"].astype(int)).set_index(["layer", "head"])
    keys = [(int(l), int(h)) for l, h in mine.index]
    total = np.array([float(theirs.loc[k, "logit_diff"]) for k in keys]) - corrupted
    dir_, sem = mine["direct"].to_numpy(dtype=float), mine["direct_sem"].to_numpy(dtype=float)
    share = _share(dir_, total)
    low, high = share_interval(dir_, sem, total, confidence)
    matter = set(top_heads(theirs.reset_index(), "score", top_k)) if top_k else set(keys)
    out = pd.DataFrame(dict(layer=[k[0] for k in keys], head=[k[1] for k in keys],
                            label=[head_label(*k) for k in keys], direct=dir_, direct_sem=sem,
                            direct_clean=mine["clean"].to_numpy(dtype=float), total=total, indirect=total - dir_,
                            indirect_share=share, share_low=low, share_high=high,
                            score_rank=[int(theirs.loc[k, "score_rank"]) if "score_rank" in theirs.columns else 0
                                        for k in keys]))
    out["through_others"] = [bool(s > THROUGH_OTHERS and k in matter) for s, k in zip(share, keys)]
    out["resolved"] = (low > THROUGH_OTHERS) | (high < THROUGH_OTHERS)
    return out


# ------------------------------------------------------------------ the logit lens
LENS_NOTE = dict(
    logit_lens="the stream at each depth (0: the embeddings; d: the output of block d - 1) through the final norm "
               "with its own scale (the norm run on that depth's stream, not frozen) and the unembedding"
               " (and the soft-cap where the model has one)",
    logit_diff="logit(answer) - logit(distractor), mean over the prompts",
    rank="the answer's rank among the vocabulary, 1 = the top logit (ties counted in its favour), mean over the "
         "prompts",
    p_answer="the answer's probability (softmax over the vocabulary), mean over the prompts")


@torch.no_grad()
def _lens_batch(adapter, reader: Reader, runs: dict, a, d, mask, sums, cases: list):
    """Add one batch's lens to ``sums`` (run → [depths, T, 4]: Σ logit diff, Σ rank, Σ p, count) and its last
    depth's logits beside the model's to ``cases``."""
    norm, (_, head) = adapter.final_norm(), adapter.embeddings()
    sums = sums or {}
    for name, run in runs.items():
        depths = []
        for h in run.resid:
            logits = reader.capped(at_least_float32(head(norm(h))))           # [B, T, vocab]
            rows = torch.arange(len(a), device=logits.device)[:, None]
            pos = torch.arange(logits.shape[1], device=logits.device)[None, :]
            top = logits[rows, pos, a[:, None]]
            ld = top - logits[rows, pos, d[:, None]]
            rank = (logits > top[..., None]).sum(-1) + 1
            p = torch.softmax(logits.double(), -1)[rows, pos, a[:, None]]
            w = torch.ones_like(ld) if mask is None else mask.to(ld)
            depths.append(torch.stack([(ld * w).sum(0).double(), (rank * w).sum(0).double(), (p * w).sum(0),
                                       w.sum(0).double()], -1))
        cases.append((name, logits[:, -1].clone(), run.logits))     # a copy: a view would hold every position
        got = torch.stack(depths).cpu()
        sums[name] = got if name not in sums else sums[name] + got
    return sums


def _lens_table(prompts: pd.DataFrame, sums: dict, layers: int) -> pd.DataFrame:
    """One row per run, depth and position: the means over the prompts that have a token there."""
    from_end = pairs.from_pairs(prompts)
    labels = pairs.labels_from_end(prompts) if from_end else position_labels(prompts)
    rows = []
    for run, s in sums.items():
        T = s.shape[1]
        for depth in range(layers + 1):
            for p in range(T):
                ld, rank, prob, count = s[depth, p].tolist()
                if count:
                    rows.append(dict(run=run, depth=depth, after="embeddings" if depth == 0 else f"L{depth - 1}",
                                     position=p - T if from_end else p, token=labels[p], logit_diff=ld / count,
                                     rank=rank / count, p_answer=prob / count, prompts=int(count)))
    return pd.DataFrame(rows)
