"""Path patching between heads (protocol §5e).

**Path patching** (Wang et al. 2022; Goldowsky-Dill et al. 2023). An *edge* is a sender head
S, a receiver head R of a later layer and one of R's inputs: ``q`` (R's slice of the query
projection's output), ``k`` or ``v`` (R's key/value group's slice of the key / value
projection's output: on a model that shares keys and values between heads, grouped-query
attention, the key or value input of R is its group's, which every head of the group reads;
the table names the group). Its value is the patching metric of :mod:`headwatch.patching`
(the logit difference at the last position, its score normalized by the clean and corrupted
runs) when S's output reaches R's input clean and everything else stays corrupted. Two
forward passes per batch of senders (:class:`PathPatcher`):

* **pass A**: the corrupted run with S's ``z`` from the clean run and every other head's
  ``z`` and every block's ``mlp_out``, from S's layer up, frozen at the corrupted run's
  values (``replace``): the residual stream above S then differs from the corrupted run by
  S's own output only — the direct path. Each receiver's input is captured;
* **pass B**: the corrupted run with only that receiver input replaced by pass A's; the
  metric read at the last position.

Rows of a forward pass are (sender, prompt) pairs, sorted by the sender's layer and cut as the
Patcher cuts them (:func:`headwatch.ablation.cut.plan_chunks`): the blocks below a chunk's first sender
(pass A) or below the receiver (pass B) are not run; the corrupted run's input of that block
stands in for them (``skip``).

**Guards** (:mod:`headwatch.patching.guards`): the path into *every* component downstream of S at once
— nothing frozen, the receiver the logits' input — equals activation patching of S (the head
sweep's :meth:`headwatch.patching.patcher.Patcher.run`; :func:`headwatch.patching.guards.path_into_everything`):
a freeze that leaks into the unfrozen run, a sender put in the wrong slot or pass B reading
the wrong rows moves it; batched = one path per forward pass (:meth:`PathPatcher.loop`) within
the bound of float32 rounding (:class:`headwatch.guards.Rounding`, its factor ``patching.rounding_factor``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import pandas as pd
import torch

from ..guards import GuardRecords, batched_vs_loop, rounding
from ..patching import guards, separation
from ..model.arch import head_label
from ..ablation.cut import heads_one_per_layer, plan_chunks
from ..model.device import exact_numerics
from ..model.interventions import capture, intervene, replace, skip
from ..names import top_heads
from ..patching.pairs import one_length
from ..patching.batch import PromptBatch
from ..patching.patcher import Patcher
from ..settings.circuits import INPUTS, CircuitsError, CircuitsSettings
from ..settings.patching import PatchingSettings
from ..jobs import phases, progress

log = logging.getLogger("headwatch.circuits.path_patching")

END = ("resid", -1, None)
"""The receiver "every downstream component": the last block's output, the logits' input."""

PATHS_NOTE = dict(
    edge="sender head S -> receiver head R (a later layer) through R's input q (its query slice), k or v "
         "(its key/value group's slice: a group's key and value are read by every head of the group)",
    pass_a="the corrupted run with S's z from the clean run and every other head's z and every block's "
           "mlp_out from S's layer up frozen at the corrupted run: only S's direct path changes the residual "
           "stream; R's input captured",
    pass_b="the corrupted run with only R's input replaced by pass A's; the metric at the last position",
    metric="logit difference logit(IO) - logit(S) at the last position, mean over the prompts",
    score="(patched - corrupted) / (clean - corrupted): 0 = corrupted run, 1 = clean run")


@dataclass(frozen=True)
class Edge:
    """Sender head (``sender_layer``, ``sender_head``) → receiver head's ``input`` (q, k or v)."""
    sender_layer: int
    sender_head: int
    receiver_layer: int
    receiver_head: int
    input: str


def receiver_site(adapter, edge: Edge) -> tuple[str, int, int]:
    """(site, layer, unit) that carries the edge's receiver input: its head for ``q``, its
    key/value group for ``k`` and ``v``."""
    unit = edge.receiver_head if edge.input == "q" else adapter.kv_group(edge.receiver_head)
    return edge.input, edge.receiver_layer, unit


def edges_into(adapter, receivers: Sequence[tuple[int, int]], inputs: Sequence[str] = INPUTS,
               senders: Sequence[tuple[int, int]] | None = None, sender_layers: int | None = None) -> list[Edge]:
    """Every edge into each receiver, each input: from ``senders`` (each must be in an earlier
    layer, :func:`require_edges`) or, when None or empty, from every head of every earlier layer
    (of the ``sender_layers`` layers right below the receiver, when given)."""
    if senders:
        edges = [Edge(l, h, rl, rh, i) for rl, rh in receivers for i in inputs for l, h in senders]
        require_edges(adapter, edges)
        return edges
    lowest = (lambda rl: 0) if sender_layers is None else (lambda rl: rl - sender_layers)
    return [Edge(l, h, rl, rh, i) for rl, rh in receivers for i in inputs
            for l, h in adapter.heads() if lowest(rl) <= l < rl]


def require_edges(adapter, edges: Sequence[Edge]) -> None:
    """CircuitsError/HeadAddressError unless each edge joins two heads of the model, the
    sender in an earlier layer than the receiver, through q, k or v."""
    for e in edges:
        adapter.require_head(e.sender_layer, e.sender_head)
        adapter.require_head(e.receiver_layer, e.receiver_head)
        if e.input not in INPUTS:
            raise CircuitsError(f"{e}: a receiver's input is one of {list(INPUTS)}")
        if e.sender_layer >= e.receiver_layer:
            raise CircuitsError(f"{e}: the sender {head_label(e.sender_layer, e.sender_head)} is not in an "
                                f"earlier layer than the receiver {head_label(e.receiver_layer, e.receiver_head)}")


PATH_SITES = ("mlp_out",)
"""What a :class:`~headwatch.patching.patcher.Patcher` for path patching captures beside ``z`` and
``resid_in`` (its ``extra_sites``): every block's ``mlp_out``, which pass A freezes."""


class PathPatcher:
    """Path patching on a :class:`~headwatch.patching.patcher.Patcher`'s prompts and runs (see the
    module doc); the Patcher captures :data:`PATH_SITES` too, so pass A's freeze reads the
    corrupted run's ``mlp_out`` from the run the Patcher already made."""

    def __init__(self, patcher: Patcher):
        if not set(PATH_SITES) <= set(patcher.sites):
            raise CircuitsError(f"path patching freezes every block's mlp_out at the corrupted run: the Patcher "
                                f"captures {list(patcher.sites)}; build it with extra_sites={PATH_SITES}")
        if patcher.prompts.mask is not None:       # its passes run without a mask: a padded prompt's logits are not its own
            raise CircuitsError("path patching runs prompts of one length (headwatch.patching.pairs.one_length); "
                                "this Patcher's prompts are padded to several lengths")
        self.patcher, self.adapter, self.device = patcher, patcher.adapter, patcher.device
        self.mlp_out = patcher.acts["corrupted"]["mlp_out"]

    # ---- the two passes
    def frozen(self, start: int, prompts, freeze: bool) -> list:
        """Every head's ``z`` and every block's ``mlp_out`` of layers ``start..`` at the corrupted
        run's values for ``prompts`` (none when ``freeze`` is False: the path into everything)."""
        if not freeze:
            return []
        acts = self.patcher.acts["corrupted"]["z"]
        return ([replace("z", l, acts[l][prompts]) for l in range(start, self.adapter.n_layers)]
                + [replace("mlp_out", l, self.mlp_out[l][prompts]) for l in range(start, self.adapter.n_layers)])

    def _senders(self, senders: Sequence[tuple[int, int]], which, prompts) -> list:
        """Each sender's z from the clean run, in its rows (listed after the freeze: it wins)."""
        edits = []
        for k in sorted(set(which.tolist())):
            l, h = senders[k]
            rows = (which == k).to(self.device)
            value = self.patcher.acts["clean"]["z"][l][prompts][..., self.adapter.out_columns(h)]
            edits.append(replace("z", l, value, unit=h, rows=None if bool(rows.all()) else rows))
        return edits

    def pass_a(self, senders, which, prompts, receivers, freeze: bool = True, below: bool = True) -> dict:
        """Pass A over rows (``senders[which[r]]``, prompt ``prompts[r]``): each receiver site
        ``(site, layer, unit)`` of ``receivers`` captured, ``[rows, T, features]``."""
        start = min(senders[k][0] for k in set(which.tolist()))
        L = self.adapter.n_layers
        edits = self.frozen(start, prompts, freeze) + self._senders(senders, which, prompts)
        edits += [capture(site, layer % L, unit, key=(site, layer % L, unit)) for site, layer, unit in receivers]
        if below and start > 0:
            edits.append(skip(start - 1, self.patcher.acts["corrupted"]["resid_in"][start][prompts]))
        with torch.no_grad(), intervene(self.adapter, edits) as cap:
            self.adapter.run_body(self.patcher.prompts.corrupted[prompts])
        return {r: cap.one((r[0], r[1] % L, r[2])) for r in receivers}

    def pass_b(self, receiver, value, prompts, below: bool = True) -> torch.Tensor:
        """Pass B: the logit difference of the corrupted ``prompts`` with the receiver site
        replaced by ``value`` ``[rows, T, features]``, float32 ``[rows]``."""
        site, layer, unit = receiver
        layer %= self.adapter.n_layers
        edits = [replace(site, layer, value, unit)]
        if below and layer > 0:
            edits.append(skip(layer - 1, self.patcher.acts["corrupted"]["resid_in"][layer][prompts]))
        batch = self.patcher.prompts
        with torch.no_grad(), intervene(self.adapter, edits):
            logits = self.adapter.logits(batch.corrupted[prompts], keep=1)[:, -1]
        return batch.logit_diff(logits, prompts)

    # ---- batched and looped
    def run(self, edges: Sequence[Edge], prompts: Sequence[int] | None = None) -> torch.Tensor:
        """The path-patched logit difference of every (edge, prompt), ``[len(edges), n]`` (float32,
        CPU): pass A once per chunk of (sender, prompt) rows, pass B once per chunk and receiver
        input (see the module doc)."""
        require_edges(self.adapter, edges)
        p = self.patcher
        prompts = torch.arange(p.n) if prompts is None else torch.as_tensor(list(prompts), dtype=torch.long)
        k = len(prompts)
        senders = list(dict.fromkeys((e.sender_layer, e.sender_head) for e in edges))
        into: dict[tuple, list[tuple[int, int]]] = {}        # receiver site -> [(edge index, sender index)]
        for i, e in enumerate(edges):
            into.setdefault(receiver_site(self.adapter, e), []).append(
                (i, senders.index((e.sender_layer, e.sender_head))))
        sender_of = torch.arange(len(senders)).repeat_interleave(k)
        prompt_of = prompts.repeat(len(senders))
        layer = torch.tensor([s[0] for s in senders]).repeat_interleave(k)
        order = torch.argsort(layer, stable=True)
        out = torch.full((len(edges), k), float("nan"), dtype=p.clean_ld.dtype)
        column = {int(x): j for j, x in enumerate(prompts)}
        for i, j in progress(plan_chunks(layer[order].tolist(), self.adapter.n_layers, p.batch, p.overhead),
                             desc=f"{len(edges)} paths", unit="pass"):
            rows = order[i:j]
            which, sidx = sender_of[rows], prompt_of[rows].to(self.device)
            wanted = [r for r, pairs in into.items() if set(s for _, s in pairs) & set(which.tolist())]
            got = self.pass_a(senders, which, sidx, wanted)
            for r in wanted:
                for e, s in into[r]:
                    mine = (which == s).nonzero()[:, 0]
                    if not len(mine):
                        continue
                    ld = self.pass_b(r, got[r][mine.to(self.device)], sidx[mine.to(self.device)]).cpu()
                    out[e, [column[int(x)] for x in prompt_of[rows][mine]]] = ld
        return out

    def loop(self, edges: Sequence[Edge], prompts: Sequence[int]) -> torch.Tensor:
        """The plain reference of :meth:`run`: one edge per pair of passes over the prompts, every
        block run."""
        require_edges(self.adapter, edges)
        sidx = torch.as_tensor(list(prompts), dtype=torch.long, device=self.device)
        out = []
        for e in edges:
            r = receiver_site(self.adapter, e)
            which = torch.zeros(len(sidx), dtype=torch.long)
            got = self.pass_a([(e.sender_layer, e.sender_head)], which, sidx, [r], below=False)
            out.append(self.pass_b(r, got[r], sidx, below=False).cpu())
        return torch.stack(out)

    def into_everything(self, senders: Sequence[tuple[int, int]], prompts: Sequence[int]) -> torch.Tensor:
        """The path from each sender into every downstream component at once: nothing frozen
        (pass A = the sender patched alone), the receiver the last block's output (pass B),
        ``[len(senders), len(prompts)]``: activation patching of the sender, by the path code."""
        sidx = torch.as_tensor(list(prompts), dtype=torch.long, device=self.device)
        out = []
        for k in range(len(senders)):
            which = torch.full((len(sidx),), k, dtype=torch.long)
            got = self.pass_a(senders, which, sidx, [END], freeze=False)
            out.append(self.pass_b(END, got[END], sidx).cpu())
        return torch.stack(out)


# ------------------------------------------------------------------ the rule
def receivers_of(heads: pd.DataFrame, settings: CircuitsSettings) -> list[tuple[int, int]]:
    """The receivers: the heads named in ``circuits.receivers``, else the top
    ``circuits.receivers_top_k`` of the head sweep by score, in layer order; heads of layer 0
    (no earlier sender) left out."""
    named = list(settings.receivers or ())            # (layer, head) pairs: CircuitsSettings reads them so
    chosen = named or top_heads(heads, "score", settings.receivers_top_k)
    return sorted(h for h in chosen if h[0] > 0)


def path_table(adapter, pp: PathPatcher, edges: Sequence[Edge], ld: torch.Tensor) -> pd.DataFrame:
    """One row per edge: sender, receiver, input (and the group of a k or v input), the mean
    path-patched logit difference and its score, and the edge's rank among those into the same
    receiver by |score|."""
    mean = ld.double().mean(dim=1).numpy()
    t = pd.DataFrame(dict(
        sender=[head_label(e.sender_layer, e.sender_head) for e in edges],
        sender_layer=[e.sender_layer for e in edges], sender_head=[e.sender_head for e in edges],
        receiver=[head_label(e.receiver_layer, e.receiver_head) for e in edges],
        receiver_layer=[e.receiver_layer for e in edges], receiver_head=[e.receiver_head for e in edges],
        input=[e.input for e in edges],
        group=pd.array([None if e.input == "q" else int(adapter.kv_group(e.receiver_head)) for e in edges],
                       dtype="Int64"),
        logit_diff=mean, score=pp.patcher.score(mean)))
    t["rank_into_receiver"] = (t["score"].abs().groupby(t["receiver"]).rank(ascending=False, method="min")
                               .astype(int))
    return t


def run_paths(model, adapter, prompts, heads: pd.DataFrame, patching: PatchingSettings,
              settings: CircuitsSettings):
    """Rule circuits_paths: (the edge table, its note, the guard record); every guard runs under
    :func:`headwatch.model.device.exact_numerics`, and a failed one raises once the table is made,
    carrying it. Each step is a named phase of the call's progress."""
    with exact_numerics(), phases("path_patching", 4) as step:
        return _run_paths(model, adapter, prompts, heads, patching, settings, step)


def _run_paths(model, adapter, prompts, heads, patching: PatchingSettings, settings: CircuitsSettings, step):
    patching.need("batch", "rounding_factor", "guard_prompts")
    settings.need("receivers_top_k", "inputs", "guard_senders")
    prompts, subset = one_length(prompts)        # a pairs file of several lengths: its first row's length
    records = GuardRecords(step)
    t0 = time.perf_counter()
    step("run the clean and corrupted prompts")
    patcher = Patcher(model, adapter, PromptBatch.of(prompts), patching.batch, extra_sites=PATH_SITES)
    pp = PathPatcher(patcher)
    receivers = receivers_of(heads, settings)
    if not receivers:
        raise CircuitsError("circuits: no receiver above layer 0 (a receiver needs an earlier layer to read from)")
    edges = edges_into(adapter, receivers, settings.inputs, settings.senders, settings.sender_layers)
    step(f"patch {len(edges)} paths")
    ld = pp.run(edges)
    seconds = time.perf_counter() - t0
    log.info("%d edges into %s, %d prompts: %.1f s", len(edges), " ".join(head_label(*r) for r in receivers),
             patcher.n, seconds)
    table = path_table(adapter, pp, edges, ld)
    sample = list(range(min(patching.guard_prompts, patcher.n)))
    # the path into everything vs activation patching: one head per layer that sends, and the
    # senders of the strongest edges
    strongest = table.reindex(table["score"].abs().sort_values(ascending=False).index).head(settings.guard_senders)
    sending = {e.sender_layer for e in edges}
    probe = list(dict.fromkeys([h for h in heads_one_per_layer(adapter) if h[0] in sending]
                               + [(int(r.sender_layer), int(r.sender_head)) for r in strongest.itertuples()]))
    bound = rounding(adapter, patching.rounding_factor, patcher.largest_logit)
    records.check(guards.path_into_everything, pp, probe, sample, bound)
    checked = [edges[i] for i in strongest.index] + [e for e in edges if (e.sender_layer, e.sender_head) in probe][:4]
    checked = list(dict.fromkeys(checked))
    with records.guard("batched_vs_loop"):
        records.add(batched_vs_loop(
            [(asdict(e), ld[edges.index(e), sample], x) for e, x in zip(checked, pp.loop(checked, sample))],
            bound, "path-patched logit difference answer − distractor of every guard prompt: the batched passes "
            "vs one edge per pair of forward passes", prompts=len(sample)))
    threshold = settings.edge_threshold
    kept = table[table["score"].abs() >= threshold]
    note = dict(PATHS_NOTE, **subset, prompts=patcher.n, clean_logit_diff=patcher.clean_mean,
                corrupted_logit_diff=patcher.corrupted_mean, **separation.of_patcher(patcher, patching.rounding_factor),
                receivers=" ".join(head_label(*r) for r in receivers),
                receivers_from="circuits.receivers" if settings.receivers else
                f"the top {settings.receivers_top_k} heads of the head sweep by score (circuits.receivers_top_k)",
                inputs=list(settings.inputs), edges=len(edges),
                senders_from=("circuits.senders" if settings.senders else "every head of every earlier layer"
                              if settings.sender_layers is None else
                              f"every head of the {settings.sender_layers} layers below each receiver "
                              "(circuits.sender_layers)"), edge_threshold=threshold, edges_above=len(kept),
                grouped=adapter.group_size > 1,
                grouped_note=(f"{adapter.group_size} heads share each key/value group: a k or v edge patches the "
                              "group's input, which every head of the group reads") if adapter.group_size > 1 else
                "one key/value group per head: a k or v edge patches the receiver's own input",
                seconds=round(seconds, 3))
    return table, note, records.record(model, dict(paths=table), note)


