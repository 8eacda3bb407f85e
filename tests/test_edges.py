"""Edge circuits (protocol §5g): the graph counted by hand, pruning and the benchmark's areas on
hand-made cases, and on tiny models of every family with an edge graph, in float64: every edge
kept is the clean run and none the corrupted run, every out-edge of a head patched is that head's
z patched and every in-edge of a receiver patched is its q, k or v patched (both by the
interventions, which share no code with the edge run), and an edge's EAP score is the first-order
term of patching that one edge, computed by brute force."""
import numpy as np
import pytest
import torch

from headwatch.circuits import edges as E
from headwatch.circuits.graph import (EdgeGraph, GraphError, areas, faithfulness, induced, node_circuit, prune,
                                      random_circuit, sizes, top_circuit)
from headwatch.model.arch import Adapter
from headwatch.model.interventions import capture, in_float64, intervene, replace
from tiny import ALL_FAMILIES, patching_prompts, tiny_model

EDGE_FAMILIES = [f for f in ALL_FAMILIES if f not in ("gemma2", "gemma3_text", "olmo2")]


# ------------------------------------------------------------------ the graph, by hand
def test_edge_counts_by_hand():
    """Two layers of two heads in one key/value group: senders input, L0H0, L0H1, L0 MLP, L1H0,
    L1H1, L1 MLP; receivers per layer q0, q1, k, v, MLP, then the logits. Layer 0's q/k/v read the
    input (4 edges), its MLP the input and both heads (3); layer 1's q/k/v read input, L0 heads and
    L0 MLP (4 x 4), its MLP those and L1's heads (6); the logits every sender (7): 36. In parallel
    (the MLP reads the block's input) each MLP reads two fewer: 32."""
    g = EdgeGraph(layers=2, heads=2, groups=1, parallel=False)
    assert list(g.senders["name"]) == ["input", "L0H0", "L0H1", "L0 MLP", "L1H0", "L1H1", "L1 MLP"]
    assert list(g.receivers["name"]) == ["L0H0 q", "L0H1 q", "L0G0 k", "L0G0 v", "L0 MLP", "L1H0 q", "L1H1 q",
                                         "L1G0 k", "L1G0 v", "L1 MLP", "logits"]
    assert g.n_edges == 4 + 3 + 16 + 6 + 7 == 36
    assert EdgeGraph(layers=2, heads=2, groups=1, parallel=True).n_edges == 32
    assert g.edge_index("L0H1", "L0 MLP") >= 0
    with pytest.raises(GraphError, match="no edge L1H0 -> L0H0 q"):
        g.edge_index("L1H0", "L0H0 q")


def test_the_studied_and_known_models_edge_counts():
    """SmolLM2-135M (30 layers, 9 heads in 3 key/value groups): each layer's 9 queries, 3 keys and 3
    values read 1 + 10 l senders, its MLP 9 more, the logits all 301: 70,651 edges. The known
    circuit's model (2 layers, 2 heads, no sharing): 46."""
    smol = EdgeGraph(layers=30, heads=9, groups=3, parallel=False)
    assert smol.n_edges == sum(15 * (1 + 10 * l) + (1 + 10 * l + 9) for l in range(30)) + 301 == 70651
    assert EdgeGraph(layers=2, heads=2, groups=2, parallel=False).n_edges == 46
    assert sizes(smol) == [70, 141, 353, 706, 1413, 3532, 7065, 14130, 35325, 70651]


def test_a_family_with_post_norms_has_no_graph():
    """The graph refuses such a model (a GraphError, one of hw.TableError); the public functions refuse it
    first, before any pass, as the model argument's ConfigError."""
    import headwatch as hw

    for family in ("gemma2", "gemma3_text", "olmo2"):
        model = tiny_model(family)
        with pytest.raises(GraphError, match="post-norms"):
            EdgeGraph.of(Adapter(model))
        assert issubclass(GraphError, hw.TableError)
        loaded = hw.load_model(model)
        for call in (lambda m: hw.edge_scores(m, None), lambda m: hw.edge_faithfulness(m, None, None)):
            with pytest.raises(hw.ConfigError, match=rf"^hw.edge_\w+: m: a {family} model has no edge graph \(a norm"):
                call(loaded)


# ------------------------------------------------------------------ pruning, circuits, areas
def _keep(g, pairs):
    keep = np.zeros(g.n_edges, dtype=bool)
    for s, r in pairs:
        keep[g.edge_index(s, r)] = True
    return keep


def test_pruning_keeps_only_paths_from_the_embeddings_to_the_logits():
    g = EdgeGraph(layers=2, heads=2, groups=1, parallel=False)
    path = [("input", "L0H0 q"), ("L0H0", "L1G0 k"), ("L1H1", "logits")]
    dangling = [("L0H1", "L1H0 q"), ("input", "L0 MLP")]          # L0H1 is never reached; L0 MLP feeds nothing
    got = prune(g, _keep(g, path + dangling))
    assert set(np.flatnonzero(got)) == set(np.flatnonzero(_keep(g, path)))
    # the key edge reaches both heads of the group; only L1H1 feeds the logits, and it is enough
    assert prune(g, _keep(g, path)).sum() == 3
    assert prune(g, _keep(g, path[:2])).sum() == 0                 # nothing reaches the logits
    assert prune(g, np.ones(g.n_edges, bool)).all()


def test_circuits_from_scores_random_and_nodes():
    g = EdgeGraph(layers=2, heads=2, groups=1, parallel=False)
    scores = np.zeros(g.n_edges)
    for rank, (s, r) in enumerate([("input", "L0H0 q"), ("L0H0", "L1G0 k"), ("L1H1", "logits")]):
        scores[g.edge_index(s, r)] = 3 - rank
    scores[g.edge_index("L0H1", "logits")] = -5.0
    assert top_circuit(g, scores, 3, absolute=False).sum() == 3     # the three positive, connected
    absolute = top_circuit(g, scores, 3, absolute=True)             # -5 first: L0H1 is never reached
    assert absolute.sum() == 0
    rng = np.random.default_rng(0)
    r = random_circuit(g, 10, rng)
    assert r.sum() <= 10 and (prune(g, r) == r).all()
    nodes = np.zeros(len(g.senders))
    nodes[[1, 5]] = [2.0, 1.0]                                       # L0H0, then L1H1
    chosen = induced(g, np.isin(np.arange(len(g.senders)), [1, 5]))
    assert node_circuit(g, nodes, int(chosen.sum()), absolute=False).sum() == prune(g, chosen).sum() > 0


def test_areas_and_faithfulness_by_hand():
    """Trapezoids on a linear axis: f = 0, 0.5, 1 at 0.1, 0.5, 1 → (0.4·0.25 + 0.5·0.75) = 0.475
    under f, (0.4·0.75 + 0.5·0.25) = 0.425 under |1 − f|; f is a ratio of means."""
    assert areas([0.1, 0.5, 1.0], [0.0, 0.5, 1.0]) == pytest.approx((0.475, 0.425))
    assert faithfulness([2.0, 3.0], m_full=4.0, m_empty=2.0).tolist() == [0.0, 0.5]
    assert np.isnan(faithfulness([1.0], 2.0, 2.0)).all()
    with pytest.raises(GraphError):
        areas([0.5, 0.1], [1.0, 1.0])


# ------------------------------------------------------------------ exactness on tiny models
@pytest.fixture(params=EDGE_FAMILIES)
def run64(request):
    model = tiny_model(request.param)
    a = Adapter(model)
    return a, EdgeGraph.of(a)


def _metric(a, prompts, ids):
    return prompts.logit_diff(E.last_logits(a, ids, None)).double()


def test_every_edge_kept_is_clean_and_none_the_corrupted_run(run64):
    a, g = run64
    prompts = patching_prompts()
    with torch.no_grad(), in_float64(a):
        got = E.patched_metric(a, g, prompts, np.stack([np.ones(g.n_edges, bool), np.zeros(g.n_edges, bool)]), batch=8)
        assert torch.allclose(got[0], _metric(a, prompts, prompts.clean), atol=1e-10, rtol=0)
        assert torch.allclose(got[1], _metric(a, prompts, prompts.corrupted), atol=1e-10, rtol=0)


def test_a_heads_out_edges_are_its_z_and_a_receivers_in_edges_its_input(run64):
    """Every edge out of L1H1 patched = its z from the corrupted run; every edge into L1H0's query =
    its query from the corrupted run; into key/value group 0 of layer 1 = that group's key (value):
    the interventions' replace, which shares no code with the edge run."""
    a, g = run64
    prompts = patching_prompts()
    names = g.edges()
    cases = {("z", 1, 1): names["sender"] == "L1H1", ("q", 1, 0): names["receiver"] == "L1H0 q",
             ("k", 1, 0): names["receiver"] == "L1G0 k", ("v", 1, 0): names["receiver"] == "L1G0 v"}
    with torch.no_grad(), in_float64(a):
        got = E.patched_metric(a, g, prompts, np.stack([~m.to_numpy() for m in cases.values()]), batch=16)
        for i, (site, layer, unit) in enumerate(cases):
            with intervene(a, [capture(site, layer, unit=unit)]) as cap:
                a.logits(prompts.corrupted)
            with intervene(a, [replace(site, layer, cap.one((site, layer, unit)), unit=unit)]):
                want = _metric(a, prompts, prompts.clean)
            assert torch.allclose(got[i], want, atol=1e-10, rtol=0), (site, layer, unit)


FLOAT32_ATTENTION = {"gptj", "gpt_neo"}
"""Families whose attention casts queries and keys to float32 whatever the model's dtype
(transformers' GPT-J and GPT-Neo): their metric carries float32 rounding (~1e-7) even in float64."""


def test_an_edges_eap_score_is_the_first_order_term_of_patching_it(run64):
    """The EAP score of an edge = −d/dt of the mean metric when the receiver reads t of the sender's
    clean − corrupted difference less, at t = 0: by central differences (t = ±1e-4, float64) through
    the patching run, for the three edges of the largest |score| and the last edge into the logits:
    within 1e-6 relative (measured: 1e-8 on Llama and GPT-2). Where attention rounds through float32
    (:data:`FLOAT32_ATTENTION`) t = ±1e-3 and 5e-4 (the rounding over t; measured 1.1e-4)."""
    a, g = run64
    prompts = patching_prompts()
    rounded = a.family.name in FLOAT32_ATTENTION
    with in_float64(a):
        scores = E.edge_attribution(a, g, prompts, "eap", batch=4)["scores"]
        picked = list(np.argsort(-np.abs(scores))[:3]) + [g.n_edges - 1]
        eps = 1e-3 if rounded else 1e-4
        w = torch.zeros(2 * len(picked), len(g.senders), len(g.receivers), dtype=torch.float64)
        for i, e in enumerate(picked):
            w[2 * i, g.sender[e], g.receiver[e]] = eps
            w[2 * i + 1, g.sender[e], g.receiver[e]] = -eps
        m = E.patched_metric(a, g, prompts, None, weights=w, batch=16).mean(dim=1)
    brute = [(float(m[2 * i + 1]) - float(m[2 * i])) / (2 * eps) for i in range(len(picked))]
    assert np.allclose(scores[picked], brute, rtol=5e-4 if rounded else 1e-6, atol=1e-9), (scores[picked], brute)
    assert abs(scores[picked[0]]) > 1e-3                                  # a real effect, not 0 = 0


def test_eap_ig_with_one_step_is_eap_at_the_corrupted_run():
    """EAP-IG's first step (k = 0) reads the gradient at the corrupted embeddings: with one step it is
    the clean − corrupted difference times the gradient of the corrupted run's receivers."""
    model = tiny_model("llama")
    a = Adapter(model)
    g = EdgeGraph.of(a)
    prompts = patching_prompts()
    clean, corrupted = prompts.clean, prompts.corrupted
    with in_float64(a):
        ig = E.edge_attribution(a, g, prompts, "eap-ig", steps=1, batch=4)["scores"]
        # EAP on the corrupted prompts whose "clean" side is the clean one: the same differences, the
        # gradient at the corrupted run (every receiver's input there is the corrupted run's)
        with intervene(a, [capture("resid_in", 0)]) as cap:
            a.logits(corrupted)
        with torch.enable_grad(), intervene(a, [replace("resid_in", 0, cap.one(("resid_in", 0, None)))]), \
                E.EdgeRun(a, g, probe=True) as run:
            metric = prompts.logit_diff(E.last_logits(a, clean, None)).sum()
            grad = torch.cat(torch.autograd.grad(metric, run.probes))
        out_c, _ = E.sender_outputs(a, g, clean)
        out_k, _ = E.sender_outputs(a, g, corrupted)
        dense = ((out_c - out_k).flatten(1) @ grad.flatten(1).t()) / len(clean)
    assert np.allclose(ig, dense[torch.as_tensor(g.sender), torch.as_tensor(g.receiver)].numpy(), atol=1e-10)


def test_unknown_method_and_bad_steps_are_refused():
    a = Adapter(tiny_model("llama"))
    g = EdgeGraph.of(a)
    prompts = patching_prompts()
    with pytest.raises(ValueError, match="unknown edge attribution method 'eap-x'"):
        E.edge_attribution(a, g, prompts, "eap-x")
    with pytest.raises(ValueError, match="at least 1 interpolation step"):
        E.edge_attribution(a, g, prompts, "eap-ig", steps=0)
