"""The edge graph of a model and the circuits drawn on it (protocol §5g). Shapes and numpy only:
no model is run here (:mod:`headwatch.circuits.edges` runs them).

**Nodes.** Senders: the embeddings (``input``: the first block's input, learned positions
included), every head's output (its share of the output projection, bias aside: the bias is
the same in every run) and every feed-forward network's output. Receivers: every head's query
input, each key/value group's key input and value input (one receiver per group, read by
every head of the group: a grouped model computes a group's key once, so no input can differ
between the heads that share it), every feed-forward network's input, and the logits (the
final norm's input).

**Edges.** Every sender into every receiver that reads it: the residual stream a receiver
reads is the sum of the outputs of every sender before it (and biases, equal in every run), so
an edge is one term of one receiver's input. The time of a sender is where its output joins
the stream (the embeddings 0; the heads of layer ``l`` 2l + 1; its feed-forward network
2l + 2, or 2l + 1 where it reads the block's input beside attention, GPT-J and GPT-NeoX);
a receiver reads every sender up to its own time (queries, keys and values of layer ``l``:
2l; its feed-forward network: 2l + 1, or 2l in parallel; the logits: all). Senders are
numbered in time order, so that those a receiver reads are a prefix.

**Circuits** (:func:`top_circuit`, :func:`random_circuit`, :func:`node_circuit`): a set of edges;
every edge outside it is patched. Pruned (:func:`prune`) so that every kept edge lies on a path
from the embeddings to the logits through kept edges — MIB's convention.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..settings.edges import MIB_FRACTIONS
from ..settings.tables import TableError


class GraphError(TableError):
    """A circuit or an edges table that does not fit the model's edge graph, or a model whose graph cannot be
    built: a :class:`~headwatch.settings.tables.TableError` (``except hw.TableError`` catches it; the public
    functions refuse a model without a graph first, as a :class:`~headwatch.model.sources.ConfigError`)."""


def node_name(kind: str, layer: int = -1, unit: int = 0) -> str:
    """A node's name in the graph's tables (``sender``, ``receiver``, ``name``): ``input``; ``L{l}H{h}`` (a
    head's output); ``L{l} MLP``; ``L{l}H{h} q`` (a head's query input); ``L{l}G{g} k``, ``L{l}G{g} v`` (a
    key/value group's inputs); ``logits``. ``kind`` is a sender's or a receiver's (``head``, ``mlp``,
    ``q``, …); the layer and unit of ``input`` and ``logits`` (and the unit of ``mlp``) are not read."""
    if kind == "input":
        return "input"
    if kind == "logits":
        return "logits"
    if kind == "head":
        return f"L{layer}H{unit}"
    if kind == "mlp":
        return f"L{layer} MLP"
    if kind == "q":
        return f"L{layer}H{unit} q"
    return f"L{layer}G{unit} {kind}"                 # k, v: a key/value group's


@dataclass(frozen=True)
class EdgeGraph:
    """The graph of a model of ``layers`` blocks of ``heads`` heads in ``groups`` key/value groups
    (module doc). ``senders`` / ``receivers``: one row each (``name, kind, layer, unit`` and
    ``time`` / ``reads``); ``sender`` / ``receiver``: each edge's two ends (indices), receiver-major."""
    layers: int
    heads: int
    groups: int
    parallel: bool

    @classmethod
    def of(cls, adapter) -> "EdgeGraph":
        """The graph of a loaded model (:class:`headwatch.model.arch.Adapter`); :class:`GraphError`
        for a family whose outputs are not terms of the stream (:attr:`Family.no_edges`)."""
        f = adapter.family
        if f.no_edges:
            raise GraphError(f"{f.name}: no edge graph: {f.no_edges}")
        return cls(adapter.n_layers, adapter.n_heads, adapter.n_kv_heads, adapter.parallel)

    @property
    def group_size(self) -> int:
        return self.heads // self.groups

    @cached_property
    def senders(self) -> pd.DataFrame:
        rows = [dict(kind="input", layer=-1, unit=0, time=0)]
        for l in range(self.layers):
            rows += [dict(kind="head", layer=l, unit=h, time=2 * l + 1) for h in range(self.heads)]
            rows.append(dict(kind="mlp", layer=l, unit=0, time=2 * l + 1 if self.parallel else 2 * l + 2))
        out = pd.DataFrame(rows)
        out.insert(0, "name", [node_name(r.kind, r.layer, r.unit) for r in out.itertuples()])
        return out

    @cached_property
    def receivers(self) -> pd.DataFrame:
        rows = []
        for l in range(self.layers):
            rows += [dict(kind="q", layer=l, unit=h, reads=2 * l) for h in range(self.heads)]
            for kind in ("k", "v"):
                rows += [dict(kind=kind, layer=l, unit=g, reads=2 * l) for g in range(self.groups)]
            rows.append(dict(kind="mlp", layer=l, unit=0, reads=2 * l if self.parallel else 2 * l + 1))
        rows.append(dict(kind="logits", layer=self.layers, unit=0, reads=2 * self.layers + 1))
        out = pd.DataFrame(rows)
        out.insert(0, "name", [node_name(r.kind, r.layer, r.unit) for r in out.itertuples()])
        return out

    @cached_property
    def _ends(self) -> tuple[np.ndarray, np.ndarray]:
        time = self.senders["time"].to_numpy()
        reads = self.receivers["reads"].to_numpy()
        prefix = np.searchsorted(time, reads, side="right")        # senders a receiver reads: a prefix
        receiver = np.repeat(np.arange(len(reads)), prefix)
        sender = np.concatenate([np.arange(n) for n in prefix])
        return sender, receiver

    @property
    def sender(self) -> np.ndarray:
        return self._ends[0]

    @property
    def receiver(self) -> np.ndarray:
        return self._ends[1]

    @property
    def n_edges(self) -> int:
        return len(self.sender)

    @cached_property
    def prefix(self) -> np.ndarray:
        """For each receiver, how many senders it reads (senders ``0 … prefix − 1``)."""
        return np.searchsorted(self.senders["time"].to_numpy(), self.receivers["reads"].to_numpy(), side="right")

    def edges(self) -> pd.DataFrame:
        """One row per edge: ``edge`` (index), ``sender``, ``receiver`` (names) and both ends'
        kind, layer and unit."""
        s, r = self.senders.iloc[self.sender], self.receivers.iloc[self.receiver]
        return pd.DataFrame({"edge": np.arange(self.n_edges), "sender": s["name"].to_numpy(),
                             "receiver": r["name"].to_numpy(), "sender_kind": s["kind"].to_numpy(),
                             "sender_layer": s["layer"].to_numpy(), "sender_unit": s["unit"].to_numpy(),
                             "receiver_kind": r["kind"].to_numpy(), "receiver_layer": r["layer"].to_numpy(),
                             "receiver_unit": r["unit"].to_numpy()})

    def edge_index(self, sender: str, receiver: str) -> int:
        """The index of the edge ``sender`` → ``receiver`` (names as :attr:`senders` and :attr:`receivers`)."""
        s = np.flatnonzero(self.senders["name"].to_numpy() == sender)
        r = np.flatnonzero(self.receivers["name"].to_numpy() == receiver)
        hit = np.flatnonzero((self.sender == (s[0] if len(s) else -1)) & (self.receiver == (r[0] if len(r) else -1)))
        if not len(hit):
            raise GraphError(f"no edge {sender} -> {receiver} in the graph")
        return int(hit[0])

    # ---- nodes: who reads a receiver, and which receivers a node reads ----------------------
    @cached_property
    def readers(self) -> list[np.ndarray]:
        """For each receiver, the nodes that read it: sender indices (a head for its query, every
        head of the group for a key or value, the feed-forward network for its input), or the
        logits node (index ``len(senders)``)."""
        index = {(r.kind, r.layer, r.unit): i for i, r in enumerate(self.senders.itertuples())}
        out = []
        for r in self.receivers.itertuples():
            if r.kind == "q":
                out.append(np.array([index[("head", r.layer, r.unit)]]))
            elif r.kind in ("k", "v"):
                g = self.group_size
                out.append(np.array([index[("head", r.layer, h)] for h in range(r.unit * g, (r.unit + 1) * g)]))
            elif r.kind == "mlp":
                out.append(np.array([index[("mlp", r.layer, 0)]]))
            else:
                out.append(np.array([len(self.senders)]))
        return out

    @cached_property
    def _reader_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(receiver, node) for every node that reads a receiver."""
        r = np.concatenate([np.full(len(n), i) for i, n in enumerate(self.readers)])
        return r, np.concatenate(self.readers)


def on_graph(graph: EdgeGraph, table: pd.DataFrame, keys: tuple = ("sender", "receiver")) -> pd.DataFrame:
    """``table`` read by its keys in the graph's order: one row per edge (``keys`` ``sender, receiver``, named as
    :meth:`EdgeGraph.edges` names them) or per sender node (``keys`` ``name``), row ``i`` the graph's edge (or
    sender) ``i``, index 0, 1, … (``attrs`` kept). :class:`GraphError` names the edges (nodes) the table lacks,
    those the graph has not, and a key given twice: scores are never read by their rows' position."""
    want = graph.edges()[list(keys)] if len(keys) == 2 else graph.senders[list(keys)]
    noun = "edges" if len(keys) == 2 else "sender nodes"
    have = pd.MultiIndex.from_frame(table[list(keys)].astype(str))
    wanted = pd.MultiIndex.from_frame(want.astype(str))
    said = lambda index: ", ".join(" -> ".join(k) for k in list(index[:3])) + (", …" if len(index) > 3 else "")
    if have.has_duplicates:
        raise GraphError(f"holds {said(have[have.duplicated()])} twice")
    missing, foreign = wanted.difference(have, sort=False), have.difference(wanted, sort=False)
    if len(missing) or len(foreign):
        parts = ([f"lacks {len(missing):,} of the model's {len(wanted):,} {noun} ({said(missing)})"] if len(missing)
                 else []) + ([f"holds {len(foreign):,} {noun} the model's graph has not ({said(foreign)})"]
                             if len(foreign) else [])
        raise GraphError(" and ".join(parts))
    out = table.iloc[have.get_indexer(wanted)].reset_index(drop=True)
    out.attrs = dict(table.attrs)
    return out


# ------------------------------------------------------------------ pruning

def prune(graph: EdgeGraph, keep: np.ndarray) -> np.ndarray:
    """``keep`` (bool ``[edges]``) less every edge not on a path from the embeddings to the logits
    through kept edges: a node is *reached* when a kept edge from a reached sender enters one of
    the receivers it reads (the embeddings always are), *alive* when reached and, through a kept
    edge into a receiver an alive node reads, it feeds the logits. An edge is kept when its sender
    is alive and one of its receiver's readers is."""
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != (graph.n_edges,):
        raise GraphError(f"a circuit is one flag per edge ({graph.n_edges}); got shape {keep.shape}")
    S, R = len(graph.senders), len(graph.receivers)
    time = np.append(graph.senders["time"].to_numpy(), 2 * graph.layers + 2)        # the logits node last
    pair_r, pair_n = graph._reader_pairs
    reached = np.zeros(S + 1, dtype=bool)
    reached[0] = True
    for t in np.unique(time)[1:]:                                    # forward, one time at a time
        fed = np.zeros(R, dtype=bool)
        e = keep & reached[graph.sender]
        fed[graph.receiver[e]] = True
        level = time[pair_n] == t
        reached[pair_n[level & fed[pair_r]]] = True
    alive = np.zeros(S + 1, dtype=bool)
    alive[S] = reached[S]
    for t in np.unique(time)[::-1][1:]:                              # backward
        read_alive = np.zeros(R, dtype=bool)
        np.logical_or.at(read_alive, pair_r, alive[pair_n])
        e = keep & read_alive[graph.receiver]
        feeds = np.zeros(S + 1, dtype=bool)
        feeds[graph.sender[e]] = True
        level = (time == t) & reached & feeds
        alive[level] = True
    read_alive = np.zeros(R, dtype=bool)
    np.logical_or.at(read_alive, pair_r, alive[pair_n])
    return keep & alive[graph.sender] & read_alive[graph.receiver]


# ------------------------------------------------------------------ circuits
def sizes(graph: EdgeGraph, fractions=MIB_FRACTIONS) -> list[int]:
    """The edge counts of the circuit sizes, ``int(fraction × edges)`` as MIB counts them."""
    return [int(f * graph.n_edges) for f in fractions]


def ranked(scores: np.ndarray, absolute: bool) -> np.ndarray:
    """Edge (or node) indices, the highest score first (``absolute``: the highest |score|); ties in
    index order."""
    scores = np.asarray(scores, dtype=float)
    if not np.isfinite(scores).all():
        raise GraphError("a score is not finite: no circuit can be ranked from it")
    return np.argsort(-(np.abs(scores) if absolute else scores), kind="stable")


def top_circuit(graph: EdgeGraph, scores: np.ndarray, n: int, absolute: bool) -> np.ndarray:
    """The ``n`` top-scoring edges, pruned (:func:`prune`)."""
    keep = np.zeros(graph.n_edges, dtype=bool)
    keep[ranked(scores, absolute)[:n]] = True
    return prune(graph, keep)


def random_circuit(graph: EdgeGraph, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` edges drawn uniformly without replacement, pruned: the control of the same size."""
    keep = np.zeros(graph.n_edges, dtype=bool)
    keep[rng.choice(graph.n_edges, size=n, replace=False)] = True
    return prune(graph, keep)


def induced(graph: EdgeGraph, nodes: np.ndarray) -> np.ndarray:
    """Every edge between the chosen sender nodes (bool ``[senders]``; the embeddings and the logits
    always in): its sender chosen and one of its receiver's readers chosen."""
    chosen = np.append(np.asarray(nodes, dtype=bool), True)
    chosen[0] = True
    pair_r, pair_n = graph._reader_pairs
    read = np.zeros(len(graph.receivers), dtype=bool)
    np.logical_or.at(read, pair_r, chosen[pair_n])
    return chosen[graph.sender] & read[graph.receiver]


def node_circuit(graph: EdgeGraph, node_scores: np.ndarray, n: int, absolute: bool) -> np.ndarray:
    """A node method's circuit of at most ``n`` edges: the top-scoring heads and feed-forward
    networks (``node_scores`` per sender; the embeddings' is not ranked), as many as keep the
    edges between them (:func:`induced`) within ``n``, pruned."""
    order = [int(i) for i in ranked(node_scores, absolute) if i != 0]
    lo, hi = 0, len(order)                                        # the most nodes whose edges fit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        nodes = np.zeros(len(graph.senders), dtype=bool)
        nodes[order[:mid]] = True
        if induced(graph, nodes).sum() <= n:
            lo = mid
        else:
            hi = mid - 1
    nodes = np.zeros(len(graph.senders), dtype=bool)
    nodes[order[:lo]] = True
    keep = induced(graph, nodes) if lo else np.zeros(graph.n_edges, dtype=bool)
    return prune(graph, keep)


# ------------------------------------------------------------------ the benchmark's areas
def areas(fractions, faithfulness) -> tuple[float, float]:
    """(the area under the faithfulness curve, the area under |1 − faithfulness|): the trapezoid
    rule over the circuit sizes as fractions of every edge, on a linear axis — MIB's CPR (from the
    signed ranking's curve, higher is better) and CMD (from the absolute ranking's, lower is
    better) when given those curves."""
    x = np.asarray(fractions, dtype=float)
    f = np.asarray(faithfulness, dtype=float)
    if x.shape != f.shape or len(x) < 2 or np.any(np.diff(x) <= 0):
        raise GraphError("areas need two or more increasing circuit sizes, one faithfulness each")
    w = np.diff(x)
    return float(np.sum(w * (f[:-1] + f[1:]) / 2)), float(np.sum(w * (np.abs(1 - f[:-1]) + np.abs(1 - f[1:])) / 2))


def faithfulness(m_circuit, m_full: float, m_empty: float):
    """``(m(circuit) − m(empty)) / (m(full) − m(empty))``, each ``m`` a mean over the prompts (MIB's
    ratio of means); NaN where the full and empty runs do not differ."""
    gap = m_full - m_empty
    return (np.asarray(m_circuit, dtype=float) - m_empty) / gap if gap != 0 else np.full(np.shape(m_circuit), np.nan)
