"""Edge circuits: every edge scored, circuits of the benchmark's sizes, and how faithful each is
(protocol §5g; rules edges_scores, edges_faithfulness, edges_circuit, edges_known).

* :func:`run_scores` — EAP and EAP-IG scores of every edge of the graph
  (:mod:`headwatch.circuits.graph`) on activation patching's prompts and metric (§5d), and each
  node's attribution (AtP over nodes: the sum of its out-edges' EAP scores);
* :func:`run_faithfulness` — for each method, circuits of MIB's sizes (fractions of every edge)
  from the signed ranking and from the absolute one, AtP's node circuits, and random circuits
  of the same sizes (``random_draws`` draws each), each run with every edge outside it patched
  to the corrupted run (:func:`headwatch.circuits.edges.patched_metric`): the curve
  ``f = (m(circuit) − m(empty)) / (m(full) − m(empty))`` (means over the prompts), its CPR (the
  area under the signed ranking's curve) and CMD (the area under |1 − f| of the absolute
  ranking's), over the sizes on a linear axis from the smallest to 1 — the benchmark's
  conventions; guarded as §5d's patching: every edge kept is the clean run, none kept the
  corrupted one, every out-edge of a head patched is that head's ``z`` patched;
* :func:`best_circuit`, :func:`agreement` — the smallest faithful circuit with its heads' roles
  where §5d–§5e name them, and the head → head edges against §5e's exact path patching;
* :func:`run_known` — the same on the circuit known before looking (§5f) and its control.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch

from ..guards import GuardRecords, batched_vs_loop, compare, rounding
from ..jobs import phases
from ..model.device import exact_numerics
from ..model.interventions import capture, intervene, replace
from ..patching.batch import PromptBatch
from ..settings.edges import EdgesSettings
from .edges import edge_attribution, last_logits, patched_metric
from .graph import (EdgeGraph, areas, faithfulness, node_circuit, node_name, on_graph, random_circuit, sizes,
                    top_circuit)

log = logging.getLogger("headwatch.circuits.faithfulness")

NODE_METHOD = "atp-nodes"
RANDOM = "random"
RANKINGS = {"signed": False, "absolute": True}
"""A ranking by the score itself (its CPR) or by its size (its CMD), MIB's pair."""

SCORES_NOTE = dict(
    score="(clean - corrupted output of the sender) . (gradient of the mean logit difference at the receiver's "
          "input), summed over positions: the first-order estimate of how much the metric falls when that one "
          "edge is patched to the corrupted run (positive: the edge carries the answer)",
    eap="the gradient at the clean run (Syed et al. 2023)",
    eap_ig="the gradient averaged over the runs whose embeddings go from the corrupted prompts' to the clean "
           "ones' in steps k / steps, k = 0 .. steps - 1 (Hanna et al. 2024; MIB's EAP-IG-inputs)",
    atp="a node's attribution: the sum of its out-edges' EAP scores (its output's difference times the gradient "
        "at it: attribution patching of the node)")


def _prompts(prompts: pd.DataFrame, n: int | None) -> PromptBatch:
    """The batch of the first ``n`` prompts (None: every prompt)."""
    return PromptBatch.of(prompts if n is None else prompts.head(n))


def _column(method: str) -> str:
    return method.replace("-", "_")


# ------------------------------------------------------------------ scores
def run_scores(model, adapter, prompts: pd.DataFrame, edges: EdgesSettings, progress=log.info):
    """Rule edges_scores: (one row per edge — its ends, kinds, layers, units and each method's
    score —, one row per node with its attribution, the note)."""
    edges.need("methods", "ig_steps", "score_batch")
    graph = EdgeGraph.of(adapter)
    prompt_batch = _prompts(prompts, edges.prompts)
    table = graph.edges()
    nodes = graph.senders[["name", "kind", "layer", "unit"]].copy()
    note = dict(SCORES_NOTE, graph=dict(layers=graph.layers, heads=graph.heads, groups=graph.groups,
                                        parallel=graph.parallel),
                edges=graph.n_edges, senders=len(graph.senders), receivers=len(graph.receivers),
                prompts=len(prompt_batch), methods=list(edges.methods), ig_steps=edges.ig_steps, seconds={})
    with exact_numerics(), phases("edge_scores", len(edges.methods)) as step:
        for method in edges.methods:
            step(f"{method}: score every edge")
            t0 = time.perf_counter()
            got = edge_attribution(adapter, graph, prompt_batch, method, edges.ig_steps, edges.score_batch, progress)
            table[_column(method)] = got["scores"]
            nodes[_column(method)] = got["nodes"]
            note["seconds"][method] = dict(total=round(time.perf_counter() - t0, 2),
                                           **{k: round(v, 2) for k, v in got["seconds"].items()},
                                           gradient_passes=got["steps"] * -(-len(prompt_batch) // edges.score_batch))
            progress(f"{method}: {graph.n_edges} edges scored in {note['seconds'][method]['total']} s")
    nodes = nodes.rename(columns={"eap": "atp"}) if "eap" in nodes else nodes
    return table, nodes, note


# ------------------------------------------------------------------ circuits and their faithfulness
def circuits_of(graph: EdgeGraph, scores: pd.DataFrame, nodes: pd.DataFrame, edges: EdgesSettings) -> pd.DataFrame:
    """Every circuit the curves need, one row each (``method, ranking, draw, fraction, edges, kept``
    and ``circuit``, its bool mask): each method's top edges by each ranking, AtP's node circuits,
    ``random_draws`` random circuits of every size."""
    rows = []
    counts = sizes(graph, edges.fractions)
    for method in edges.methods:
        for ranking, absolute in RANKINGS.items():
            for f, n in zip(edges.fractions, counts):
                rows.append(dict(method=method, ranking=ranking, draw=-1, fraction=f, edges=n,
                                 circuit=top_circuit(graph, scores[_column(method)].to_numpy(), n, absolute)))
    if "atp" in nodes:
        for ranking, absolute in RANKINGS.items():
            for f, n in zip(edges.fractions, counts):
                rows.append(dict(method=NODE_METHOD, ranking=ranking, draw=-1, fraction=f, edges=n,
                                 circuit=node_circuit(graph, nodes["atp"].to_numpy(), n, absolute)))
    rng = np.random.default_rng(edges.seed)
    for d in range(edges.random_draws):
        for f, n in zip(edges.fractions, counts):
            rows.append(dict(method=RANDOM, ranking="none", draw=d, fraction=f, edges=n,
                             circuit=random_circuit(graph, n, rng)))
    out = pd.DataFrame(rows)
    out["kept"] = [int(c.sum()) for c in out["circuit"]]
    return out


def _unique(circuits: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct circuits ``[u, edges]``, each circuit's index among them)."""
    packed = np.stack([np.packbits(c) for c in circuits])
    _, first, inverse = np.unique(packed, axis=0, return_index=True, return_inverse=True)
    return np.stack([circuits[i] for i in first]), inverse.ravel()


@torch.no_grad()
def _plain_metric(adapter, prompts: PromptBatch, run: str, batch: int) -> tuple[torch.Tensor, float]:
    """(each prompt's logit difference on its ``run`` — clean or corrupted —, the largest |logit| at the
    last position)."""
    out, largest = [], 0.0
    for i in range(0, len(prompts), batch):
        part = prompts.rows(slice(i, i + batch))
        logits = last_logits(adapter, getattr(part, run), part.mask)
        out.append(part.logit_diff(logits))
        largest = max(largest, float(logits.abs().max()))
    return torch.cat(out).double().cpu(), largest


@torch.no_grad()
def _z_patched(adapter, prompts: PromptBatch, layer: int, head: int) -> torch.Tensor:
    """The clean run with one head's ``z`` replaced by the corrupted run's (§5d's noising patch)."""
    m = {} if prompts.mask is None else dict(mask=prompts.mask)
    with intervene(adapter, [capture("z", layer, unit=head)]) as cap:
        adapter.logits(prompts.corrupted, keep=1, **m)
    with intervene(adapter, [replace("z", layer, cap.one(("z", layer, head)), unit=head)]):
        return prompts.logit_diff(last_logits(adapter, prompts.clean, prompts.mask)).double().cpu()


def faithfulness_guards(adapter, graph: EdgeGraph, prompts: PromptBatch, per_prompt: torch.Tensor, unique: np.ndarray,
                        full: int, empty: int, senders: list[int], edges: EdgesSettings,
                        records: GuardRecords) -> None:
    """The guards of the faithfulness runs (module doc); ``per_prompt`` ``[circuits, prompts]`` the
    batched runs' metric, ``full`` / ``empty`` the rows of the full and empty circuits. Each compares
    every prompt's logit difference within the bound of float32 rounding
    (:func:`headwatch.guards.rounding`, its magnitude the largest |logit| of the clean and corrupted
    runs, its factor ``edges.rounding_factor``)."""
    with records.guard("full_circuit_is_clean"):
        plain_clean, top_clean = _plain_metric(adapter, prompts, "clean", edges.batch)
        plain_corrupted, top_corrupted = _plain_metric(adapter, prompts, "corrupted", edges.batch)
        tol = rounding(adapter, edges.rounding_factor, max(top_clean, top_corrupted))
        records.add(compare("full_circuit_is_clean", [(dict(circuit="every edge kept"), per_prompt[full], plain_clean)],
                            tol, "logit difference of every prompt: every edge kept (each receiver fed from its own "
                                 "copy of the stream) vs the clean run", prompts=len(prompts)))
    with records.guard("empty_circuit_is_corrupted"):
        records.add(compare("empty_circuit_is_corrupted", [(dict(circuit="no edge kept"), per_prompt[empty],
                                                            plain_corrupted)],
                            tol, "logit difference of every prompt: every edge patched (every receiver fed the "
                                 "corrupted run's senders) vs the corrupted run", prompts=len(prompts)))
    heads = [int(x) for x in senders]
    circuits = []
    for h in heads:
        keep = graph.sender != h
        circuits.append(keep)
    if circuits:
        with records.guard("out_edges_are_z_patch"):
            got = patched_metric(adapter, graph, prompts, np.stack(circuits), edges.batch)
            pairs = []
            for i, h in enumerate(heads):
                row = graph.senders.iloc[h]
                want = _z_patched(adapter, prompts, int(row.layer), int(row.unit))
                pairs.append((dict(head=row["name"]), got[i], want))
            records.add(compare("out_edges_are_z_patch", pairs, tol,
                                "logit difference of every prompt: every edge out of a head patched vs that head's z "
                                "replaced by the corrupted run's in the clean run (§5d's patch, run by the "
                                "interventions)", prompts=len(prompts)))
    sample = [0, 1] if len(unique) > 1 else [0]
    with records.guard("batched_vs_loop"):
        alone = [patched_metric(adapter, graph, prompts, unique[i:i + 1], 1)[0] for i in sample]
        records.add(batched_vs_loop([(dict(circuit=int(i), kept=int(unique[i].sum())), per_prompt[i], a)
                                     for i, a in zip(sample, alone)], tol,
                                    "logit difference of every prompt: circuits x prompts batched vs one circuit and "
                                    "one prompt per forward pass", prompts=len(prompts)))


@torch.no_grad()
def require_a_gap(adapter, prompts: PromptBatch) -> float:
    """The gap m(clean) − m(corrupted) of the mean metric, which faithfulness divides by; a gap of
    zero (prompts that do not move the metric) is refused before any circuit is run: every circuit's
    faithfulness, and the areas, would be NaN."""
    with exact_numerics():
        clean_m, corrupted_m = (float(prompts.logit_diff(last_logits(adapter, ids, prompts.mask)).double().mean())
                                for ids in (prompts.clean, prompts.corrupted))
    if clean_m == corrupted_m:
        raise ValueError(f"edge faithfulness: the mean logit difference is {clean_m:g} on the clean prompts and on "
                         "the corrupted ones alike; faithfulness divides by their gap, so no circuit can be measured "
                         "against it — use prompt pairs whose corrupted prompt changes the answer")
    return clean_m - corrupted_m


def run_faithfulness(model, adapter, prompts: pd.DataFrame, scores: pd.DataFrame, nodes: pd.DataFrame,
                     edges: EdgesSettings, progress=log.info):
    """Rule edges_faithfulness: (the curves — one row per circuit: ``method, ranking, draw,
    fraction, edges, kept, metric, faithfulness`` —, the areas — one row per method and ranking
    (and random draw): ``cpr`` and ``cmd`` where the ranking gives them —, the note, the guard
    record). Each step is a named phase of the call's progress; a failed guard raises once the tables
    are made, carrying them."""
    edges.need("methods", "fractions", "random_draws", "seed", "batch", "rounding_factor", "guard_senders")
    with phases("edge_faithfulness", 5 + (edges.guard_senders > 0)) as step:
        return _run_faithfulness(model, adapter, prompts, scores, nodes, edges, progress, step)


def _run_faithfulness(model, adapter, prompts, scores, nodes, edges: EdgesSettings, progress, step):
    graph = EdgeGraph.of(adapter)
    scores, nodes = on_graph(graph, scores), on_graph(graph, nodes, ("name",))    # by their names, never by position
    prompt_batch = _prompts(prompts, edges.prompts)
    step("the clean and corrupted prompts' gap")
    require_a_gap(adapter, prompt_batch)
    table = circuits_of(graph, scores, nodes, edges)
    everything, nothing = np.ones(graph.n_edges, dtype=bool), np.zeros(graph.n_edges, dtype=bool)
    unique, index = _unique(list(table["circuit"]) + [everything, nothing])
    full, empty = index[-2], index[-1]
    records = GuardRecords(step)
    t0 = time.perf_counter()
    with exact_numerics():
        step(f"run {len(unique)} circuits × {len(prompt_batch)} prompts")
        progress(f"faithfulness: {len(unique)} distinct circuits x {len(prompt_batch)} prompts")
        per_prompt = patched_metric(adapter, graph, prompt_batch, unique, edges.batch, progress=progress)
        seconds = time.perf_counter() - t0
        top_nodes = nodes[nodes["kind"] == "head"].reindex(
            nodes[nodes["kind"] == "head"]["atp"].abs().sort_values(ascending=False).index).head(edges.guard_senders) \
            if "atp" in nodes else nodes[nodes["kind"] == "head"].head(edges.guard_senders)
        faithfulness_guards(adapter, graph, prompt_batch, per_prompt, unique, full, empty, list(top_nodes.index), edges,
                            records)
    means = per_prompt.mean(dim=1).numpy()
    m_full, m_empty = float(means[full]), float(means[empty])
    table["metric"] = means[index[:-2]]
    table["faithfulness"] = faithfulness(table["metric"].to_numpy(), m_full, m_empty)
    curves = table.drop(columns="circuit")
    note = dict(metric="logit difference logit(IO) - logit(S) at the last position, mean over the prompts",
                faithfulness="(m(circuit) - m(empty)) / (m(full) - m(empty)), each m a mean over the prompts",
                full=m_full, empty=m_empty, edges=graph.n_edges, prompts=len(prompt_batch), distinct_circuits=len(unique),
                fractions=list(edges.fractions), seconds=round(seconds, 2),
                rows_per_second=round(len(unique) * len(prompt_batch) / seconds, 2) if seconds else None,
                cpr="the area under the faithfulness of the signed ranking's circuits over the sizes (fractions of "
                    "every edge, a linear axis): higher is better",
                cmd="the area under |1 - faithfulness| of the absolute ranking's circuits: lower is better",
                random="random circuits of the same sizes, drawn uniformly from every edge and pruned: the control")
    areas = area_table(curves)
    return curves, areas, note, records.record(model, dict(faithfulness=curves, areas=areas), note, prompts=len(prompt_batch))


def area_table(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per method (and random draw): CPR from its signed curve, CMD from its absolute one
    (a random draw gives both from its one curve), and its faithfulness at the smallest size."""
    rows = []
    for (method, draw), g in curves.groupby(["method", "draw"], sort=False):
        row = dict(method=method, draw=int(draw))
        for ranking in ("signed", "absolute", "none"):
            c = g[g["ranking"] == ranking].sort_values("fraction")
            if c.empty:
                continue
            under, from_1 = areas(c["fraction"], c["faithfulness"])
            if ranking in ("signed", "none"):
                row["cpr"] = under
            if ranking in ("absolute", "none"):
                row["cmd"] = from_1
        rows.append(row)
    out = pd.DataFrame(rows, columns=["method", "draw", "cpr", "cmd"])
    rand = out[out["method"] == RANDOM]
    if len(rand):
        summary = [dict(method=f"{RANDOM} (mean)", draw=-1, cpr=rand["cpr"].mean(), cmd=rand["cmd"].mean()),
                   dict(method=f"{RANDOM} (min)", draw=-1, cpr=rand["cpr"].min(), cmd=rand["cmd"].min()),
                   dict(method=f"{RANDOM} (max)", draw=-1, cpr=rand["cpr"].max(), cmd=rand["cmd"].max())]
        out = pd.concat([out, pd.DataFrame(summary)], ignore_index=True)
    return out


# ------------------------------------------------------------------ the best small circuit, agreement with §5e
def smallest_faithful(curves: pd.DataFrame, method: str, threshold: float) -> pd.Series | None:
    """The signed ranking's smallest circuit of ``method`` whose faithfulness is at least
    ``threshold`` (None if none is)."""
    c = curves[(curves["method"] == method) & (curves["ranking"] == "signed")].sort_values("fraction")
    hit = c[c["faithfulness"] >= threshold]
    return None if hit.empty else hit.iloc[0]


def head_roles(heads: pd.DataFrame | None, paths: pd.DataFrame | None, top_k: int, edge_threshold: float) -> dict:
    """What §5d and §5e already say of each head, by label: its rank in the head sweep (when in the
    top ``top_k`` by score), and its part in path patching (a receiver; a sender of an edge with
    |score| ≥ ``edge_threshold``, with the receiver and input)."""
    roles: dict[str, list[str]] = {}
    if heads is not None:
        for r in heads[heads["score_rank"] <= top_k].itertuples():
            roles.setdefault(r.label, []).append(f"§5d: patching rank {int(r.score_rank)} (score {r.score:.3f})")
    if paths is not None:
        for label in paths["receiver"].unique():
            roles.setdefault(label, []).append("§5e: path-patching receiver")
        strong = paths[paths["score"].abs() >= edge_threshold]
        for r in strong.itertuples():
            roles.setdefault(r.sender, []).append(f"§5e: into {r.receiver} ({r.input}, score {r.score:.3f})")
    return {k: "; ".join(v) for k, v in roles.items()}


def best_circuit(scores: pd.DataFrame, curves: pd.DataFrame, edges: EdgesSettings, graph: EdgeGraph, roles: dict,
                 method: str | None = None) -> tuple[pd.DataFrame, dict]:
    """The smallest faithful circuit (``edges.faithful``) of ``method`` (default: EAP-IG when scored,
    else the first method) by its signed ranking: one row per edge (its ends, score, and the roles
    of its heads); an empty table when no size is faithful (the note says so)."""
    method = method or ("eap-ig" if "eap-ig" in (edges.methods or ()) else edges.methods[0])
    hit = smallest_faithful(curves, method, edges.faithful)
    note = dict(method=method, ranking="signed", threshold=edges.faithful)
    columns = ["edge", "sender", "receiver", "sender_kind", "sender_layer", "sender_unit", "receiver_kind",
               "receiver_layer", "receiver_unit", "score", "sender_role", "receiver_role"]
    if hit is None:
        note.update(found=False, best=float(curves[(curves["method"] == method)
                                                   & (curves["ranking"] == "signed")]["faithfulness"].max()))
        return pd.DataFrame(columns=columns), note
    scores = on_graph(graph, scores)
    keep = top_circuit(graph, scores[_column(method)].to_numpy(), int(hit["edges"]), False)
    rows = scores[keep].copy()
    rows["score"] = rows[_column(method)]
    head_of = lambda name: name.split(" ")[0]
    rows["sender_role"] = [roles.get(head_of(x), "") for x in rows["sender"]]
    rows["receiver_role"] = [roles.get(head_of(x), "") for x in rows["receiver"]]
    note.update(found=True, fraction=float(hit["fraction"]), edges=int(hit["edges"]), kept=int(keep.sum()),
                faithfulness=float(hit["faithfulness"]))
    return rows.sort_values("score", ascending=False)[columns].reset_index(drop=True), note


def agreement(scores: pd.DataFrame, paths: pd.DataFrame, methods, top_k: int) -> pd.DataFrame:
    """Each method's head → head edges against §5e's exact path patching, over the edges path
    patching measured (a sender head into a receiver head's query, or its group's key or value):
    the rank correlation (Spearman) of the scores and how many of the top ``top_k`` by |score|
    the two share, per input and for all."""
    key = lambda r: (r.sender, node_name(r.input, int(r.receiver_layer),
                                         int(r.receiver_head) if r.input == "q" else int(r.group)))
    index = {(a, b): i for i, (a, b) in enumerate(zip(scores["sender"], scores["receiver"]))}
    rows = []
    matched = [index.get(key(r)) for r in paths.itertuples()]
    if any(m is None for m in matched):
        raise ValueError("a path-patching edge has no edge in the graph: the tables are not of one model")
    for method in methods:
        est = scores[_column(method)].to_numpy()[matched]
        for part in ["all", *sorted(paths["input"].unique())]:
            sel = np.ones(len(paths), bool) if part == "all" else (paths["input"] == part).to_numpy()
            exact, guess = paths["score"].to_numpy()[sel], est[sel]
            k = min(top_k, int(sel.sum()))
            rho = float(pd.Series(exact).rank().corr(pd.Series(guess).rank())) if sel.sum() > 2 else float("nan")
            top_exact = set(np.argsort(-np.abs(exact), kind="stable")[:k])
            top_guess = set(np.argsort(-np.abs(guess), kind="stable")[:k])
            rows.append(dict(method=method, input=part, edges=int(sel.sum()), spearman=rho, top_k=k,
                             shared=len(top_exact & top_guess)))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ the known circuit (§5f)
EXACT = "exact"
"""The known circuit's reference ranking: each edge's exact effect, the metric's fall when that one edge
alone is patched (one run per edge: a small graph's, never a studied model's)."""
KNOWN_COLUMNS = ["model", "method", "edges", "gap", "smallest_faithful", "faithfulness", "prev_to_key",
                 "edges_named", "recovered", "claim"]


def known_edges(model, adapter, prompts: PromptBatch, edges: EdgesSettings, min_effect: float, prev_heads: list,
                induction_heads: list) -> tuple[list[dict], pd.DataFrame]:
    """One known-circuit model read by each method and by the exact single-edge effects (:data:`EXACT`):
    its faithfulness curve over every circuit size (0 … every edge: the graph is small), the smallest
    faithful circuit (faithfulness at least
    ``edges.faithful`` and the clean − corrupted gap at least ``min_effect`` logits) and whether it
    holds an edge from a previous-token head into the key of an induction head's group."""
    graph = EdgeGraph.of(adapter)
    table = graph.edges()
    counts = list(range(0, graph.n_edges + 1))
    prev_names = {node_name("head", l, h) for l, h in prev_heads}
    key_names = {node_name("k", l, adapter.kv_group(h)) for l, h in induction_heads}
    wanted = [i for i, (a, b) in enumerate(zip(table["sender"], table["receiver"])) if a in prev_names and b in key_names]
    rows, curves = [], []
    everything = np.ones(graph.n_edges, dtype=bool)
    # every edge alone patched (the exact counterpart of the attribution scores), then all and none kept
    alone = np.stack([everything & (np.arange(graph.n_edges) != e) for e in range(graph.n_edges)]
                     + [everything, ~everything])
    runs = patched_metric(adapter, graph, prompts, alone, edges.batch).mean(dim=1).numpy()
    m_full, m_empty = float(runs[-2]), float(runs[-1])
    gap = m_full - m_empty
    ranked_by = {EXACT: m_full - runs[:-2]}
    for method in edges.methods:
        ranked_by[method] = edge_attribution(adapter, graph, prompts, method, edges.ig_steps,
                                             edges.score_batch)["scores"]
    for method, scores in ranked_by.items():
        circuits = np.stack([top_circuit(graph, scores, n, False) for n in counts])
        f = faithfulness(patched_metric(adapter, graph, prompts, circuits, edges.batch).mean(dim=1).numpy(),
                         m_full, m_empty)
        curves.append(pd.DataFrame(dict(method=method, edges=counts, kept=circuits.sum(axis=1), faithfulness=f)))
        ok = [i for i, x in enumerate(f) if gap >= min_effect and x >= edges.faithful]
        first = ok[0] if ok else None
        holds = bool(first is not None and circuits[first][wanted].any()) if wanted else False
        named = " ".join(f"{table['sender'][i]} -> {table['receiver'][i]}" for i in wanted
                         if first is not None and circuits[first][i])
        rows.append(dict(method=method, edges=graph.n_edges, gap=gap,
                         smallest_faithful=None if first is None else int(circuits[first].sum()),
                         faithfulness=None if first is None else float(f[first]), prev_to_key=holds,
                         edges_named=named or "none", recovered=holds))
    return rows, pd.concat(curves, ignore_index=True)


def run_known_edges(models: dict, known: dict, edges: EdgesSettings, progress=log.info):
    """Rule edges_known: the circuit known before looking (§5f) and its control, each read by every
    method (:func:`known_edges`): (one row per model and method — the claim —, the curves, the
    note). The repeated model's claim holds when its smallest faithful circuit holds a previous-token
    head → induction key edge; the control's when it has no faithful circuit at all."""
    from .known import induction_prompts, known_attention

    edges.need("methods", "ig_steps", "faithful", "batch", "score_batch")
    prompts = induction_prompts(known["vocab"], known["prompts"], known["half"][1], known["seed"] + 1)
    rows, curves, note = [], [], dict(threshold=edges.faithful, min_effect=known["min_effect"],
                                      min_attention=known["min_attention"])
    with exact_numerics():
        for name, (model, adapter) in models.items():
            attn = known_attention(model, adapter, prompts.clean, (prompts.length + 1) // 2)
            prev = [(int(r.layer), int(r.head)) for r in attn.itertuples()
                    if r.layer == 0 and r.prev >= known["min_attention"]]
            induction = [(int(r.layer), int(r.head)) for r in attn.itertuples()
                         if r.layer == 1 and r.induction >= known["min_attention"]]
            got, curve = known_edges(model, adapter, prompts, edges, known["min_effect"], prev, induction)
            control = name != "repeated"
            for r in got:
                r.update(model=name)
                if control:
                    r["recovered"] = r["smallest_faithful"] is None
                    r["claim"] = ("no faithful circuit (faithfulness >= threshold with a clean - corrupted gap >= "
                                  "min_effect): the control has no circuit to find")
                else:
                    r["claim"] = ("the smallest faithful circuit (faithfulness >= threshold, gap >= min_effect) holds "
                                  "an edge from a previous-token head into the key of an induction head's group")
            rows += got
            curves.append(curve.assign(model=name))
            note[name] = dict(previous_token_heads=[f"L{l}H{h}" for l, h in prev],
                              induction_heads=[f"L{l}H{h}" for l, h in induction])
            progress(f"known circuit, {name}: read by {', '.join(edges.methods)}")
    curves = pd.concat(curves, ignore_index=True)
    table = pd.DataFrame(rows)[KNOWN_COLUMNS]
    table["smallest_faithful"] = table["smallest_faithful"].astype("Int64")     # none: missing, not NaN
    table["faithfulness"] = pd.to_numeric(table["faithfulness"]).astype("Float64")
    return table, curves[["model", *[c for c in curves.columns if c != "model"]]], note
