"""Path patching (headwatch/circuits/path_patching.py) and its guards on tiny models of every family, the
pre-job checks of ``circuits:``, and the circuit known before looking (protocol §5e, §5f)."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT
from headwatch.guards import batched_vs_loop, rounding
from headwatch.patching import guards
from headwatch.model.arch import Adapter
from headwatch.circuits.path_patching import PATH_SITES, Edge, PathPatcher, edges_into, require_edges
from headwatch.model.interventions import capture, intervene
from headwatch.patching.batch import PromptBatch
from headwatch.patching.patcher import Patcher
from headwatch.settings.circuits import CircuitsError, CircuitsSettings, circuits_errors
from tiny import patching_prompts, random_ids, tiny_model

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def _paths(model, batch=16):
    """Clean and corrupted prompts that differ at three positions, random answers (as test_patching)."""
    return PathPatcher(Patcher(model, Adapter(model), patching_prompts(4, 10), batch, extra_sites=PATH_SITES))


# ------------------------------------------------------------------ guards, every family
def test_path_guards_pass_on_every_family(model):
    pp = _paths(model)
    a = pp.adapter
    sample = [0, 1, 2]
    bound = rounding(a, 1.0, pp.patcher.largest_logit)
    rec = guards.path_into_everything(pp, [(0, 0), (1, 3), (a.n_layers - 1, 1)], sample, bound)
    assert rec["passed"] and rec["n_cases"] == 3 and rec["max_abs_diff"] <= rec["bound"], rec
    edges = edges_into(a, [(a.n_layers - 1, 2), (1, 0)])
    assert len(edges) == 3 * a.n_heads * (a.n_layers - 1 + 1)
    batched = pp.run(edges)
    assert not batched.isnan().any()
    picked = edges[::7]
    looped = pp.loop(picked, sample)
    rec = batched_vs_loop([(dict(edge=str(e)), batched[edges.index(e), sample], x)
                                  for e, x in zip(picked, looped)], bound, "path-patched logit difference")
    assert rec["passed"] and rec["max_abs_diff"] <= rec["bound"]


def test_the_path_into_everything_guard_fails_when_freezing_leaks(monkeypatch):
    """Freezing that ignores "nothing frozen" (every other head and MLP held at the corrupted run
    also when the receiver is everything downstream) leaves only the sender's direct path:
    no longer activation patching, and the guard says so."""
    pp = _paths(tiny_model("llama"))
    real = PathPatcher.frozen
    bound = rounding(pp.adapter, 1.0, pp.patcher.largest_logit)
    assert guards.path_into_everything(pp, [(0, 1)], [0, 1], bound)["passed"]
    monkeypatch.setattr(PathPatcher, "frozen", lambda self, start, prompts, freeze: real(self, start, prompts, True))
    with pytest.raises(guards.GuardError, match="path_into_everything: .* past its bound") as failed:
        guards.path_into_everything(pp, [(0, 1)], [0, 1], bound)
    assert failed.value.record["ratio"] > 100


def test_pass_a_changes_the_residual_stream_by_the_senders_output_alone():
    """With every other head and MLP frozen, the input of a later block differs from the corrupted
    run's by Wo · (z_clean − z_corrupted) of the sender's columns, nothing else (Llama: no norm
    after the attention output); an unfrozen MLP would add its own change."""
    pp = _paths(tiny_model("llama"))
    a, p = pp.adapter, pp.patcher
    sidx = torch.arange(4)
    which = torch.zeros(4, dtype=torch.long)
    got = pp.pass_a([(0, 1)], which, sidx, [("resid_in", 2, None)])[("resid_in", 2, None)]
    cols = a.out_columns(1)
    dz = p.acts["clean"]["z"][0][..., cols] - p.acts["corrupted"]["z"][0][..., cols]
    want = p.acts["corrupted"]["resid_in"][2] + dz @ a.out_proj(0).weight[:, cols].T
    assert (got - want).abs().max() < 1e-5
    unfrozen = pp.pass_a([(0, 1)], which, sidx, [("resid_in", 2, None)], freeze=False)[("resid_in", 2, None)]
    assert (unfrozen - want).abs().max() > 1e-3


def test_an_edge_into_an_earlier_or_the_same_layer_is_refused():
    a = Adapter(tiny_model("llama"))
    with pytest.raises(CircuitsError, match="L1H0 is not in an earlier layer than the receiver L1H2"):
        require_edges(a, [Edge(1, 0, 1, 2, "k")])
    with pytest.raises(CircuitsError, match="one of"):
        require_edges(a, [Edge(0, 0, 1, 2, "z")])
    with pytest.raises(CircuitsError, match="L2H0 is not in an earlier layer than the receiver L1H1"):
        edges_into(a, [(1, 1)], senders=[(2, 0)])


def test_the_table_and_its_figure_read_the_edges():
    """The table ranks the edges into each receiver by |score|; the figure draws one arrow per edge
    at or above the note's threshold and says the threshold in its title."""
    from matplotlib.patches import FancyArrowPatch

    from headwatch.circuits.path_patching import path_table
    from headwatch.figures.circuits import edge_graph
    pp = _paths(tiny_model("qwen2"))
    edges = edges_into(pp.adapter, [(2, 1), (1, 3)])
    table = path_table(pp.adapter, pp, edges, pp.run(edges))
    assert (table.groupby("receiver")["rank_into_receiver"].min() == 1).all()
    assert table["group"].isna().tolist() == [e.input == "q" for e in edges]
    threshold = float(table["score"].abs().median())
    note = dict(edge_threshold=threshold, receivers="L1H3 L2H1", prompts=4, clean_logit_diff=pp.patcher.clean_mean,
                corrupted_logit_diff=pp.patcher.corrupted_mean)
    fig = edge_graph(table, note)
    arrows = [p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == int((table["score"].abs() >= threshold).sum()) > 0
    assert f"|score| ≥ {threshold:g}" in fig.axes[0].get_title()


# ------------------------------------------------------------------ pre-job checks
FACTS = SimpleNamespace(key="m1", shape=dict(layers=4, heads=3))


def _errors(**circuits):
    return "\n".join(circuits_errors(dict(CONFIG, models_studied=["m1"], circuits=dict(CONFIG["circuits"],
                                                                                         **circuits)), FACTS))


def test_every_hostile_circuits_value_is_refused_before_any_job():
    assert _errors() == ""
    assert ("circuits.receivers[0] (layer 2, head 1) is in an earlier layer than circuits.senders[0] "
            "(layer 3, head 0)") in _errors(receivers=[{"layer": 2, "head": 1}], senders=[{"layer": 3, "head": 0}])
    assert "is in the same layer than circuits.senders[1] (layer 2, head 2)" in _errors(
        receivers=[{"layer": 2, "head": 1}], senders=[{"layer": 0, "head": 0}, {"layer": 2, "head": 2}])
    assert "circuits.receivers[0] = layer 0, head 1: a receiver in layer 0" in _errors(receivers=[{"layer": 0, "head": 1}])
    assert "circuits.senders[0] = layer 9, head 0: model m1 has 4 layers of 3 heads" in _errors(
        senders=[{"layer": 9, "head": 0}])
    assert "circuits.receivers[0] = layer 1, head 3: model m1" in _errors(receivers=[{"layer": 1, "head": 3}])
    assert "circuits.receivers_top_k = 13: model m1 has 12 heads" in _errors(receivers_top_k=13)
    assert "circuits.known.half = [12, 8]" in _errors(known=dict(CONFIG["circuits"]["known"], half=[12, 8]))


@pytest.mark.parametrize("key, value, message", [
    ("receivers_top_k", 0, "less than the minimum"),
    ("receivers_top_k", 100000, "circuits.receivers_top_k"),
    ("inputs", ["q", "z"], "is not one of"),
    ("inputs", [], "should be non-empty"),
    ("edge_threshold", -0.1, "less than the minimum"),
    ("receivers", [{"layer": 1}], "'head' is a required property"),
    ("receivers", [{"layer": 1, "head": 0, "x": 1}], "Additional properties"),
    ("senders", [{"layer": -1, "head": 0}], "less than the minimum"),
    ("guard_senders", 10 ** 6, "circuits.guard_senders"),
    ("known", {"vocab": 32}, "is a required property"),
    ("known", dict(CONFIG["circuits"]["known"], min_attention=1.5), "is greater than the maximum of 1"),
    ("known", dict(CONFIG["circuits"]["known"], min_attention=0), "less than or equal to the minimum of 0"),
    ("known", dict(CONFIG["circuits"]["known"], half=[4, 17]), "is greater than the maximum of 16"),
])
def test_a_schema_value_of_circuits_is_refused_naming_the_key(key, value, message):
    from headwatch.config.bounds import bound_errors
    from headwatch.config.keys import schema_errors
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    config = dict(CONFIG, circuits=dict(CONFIG["circuits"], **{key: value}))
    found = [e.message for e in Draft202012Validator(schema).iter_errors(config)]
    found += schema_errors(config, schema) + bound_errors(config, schema)
    assert any(message in m for m in found), found


def test_settings_are_typed():
    s = CircuitsSettings.from_config(dict(CONFIG["circuits"], receivers=[{"layer": 2, "head": 1}]))
    assert s.receivers == ((2, 1),) and s.inputs == ("q", "k", "v") and isinstance(s.edge_threshold, float)
    with pytest.raises(ValueError, match="unknown key"):
        CircuitsSettings.from_config(dict(CONFIG["circuits"], recievers=[]))


def test_named_receivers_are_the_receivers_and_settings_survive_a_replace():
    """Receivers named in the config are the rule's receivers (they were read as mappings after the
    settings had made them pairs: a named receiver stopped the rule), layer 0 left out; a setting
    replaced on settings that name heads keeps them (the API's keyword overrides)."""
    import dataclasses

    import pandas as pd

    from headwatch.circuits.path_patching import receivers_of

    heads = pd.DataFrame(dict(layer=[0, 1, 2], head=[0, 1, 2], score=[0.9, 0.5, 0.1]))
    named = CircuitsSettings.from_config(dict(CONFIG["circuits"], receivers=[{"layer": 2, "head": 1},
                                                                           {"layer": 0, "head": 3}]))
    assert receivers_of(heads, named) == [(2, 1)]
    top = CircuitsSettings.from_config(dict(CONFIG["circuits"], receivers=[], receivers_top_k=2))
    assert receivers_of(heads, top) == [(1, 1)]              # the top 2 by score, layer 0 left out
    replaced = dataclasses.replace(named, sender_layers=1)
    assert replaced.receivers == ((2, 1), (0, 3)) and replaced.sender_layers == 1
    assert dataclasses.replace(named, receivers=[(1, 0)]).receivers == ((1, 0),)


# ------------------------------------------------------------------ attribution at q and k, AtP*
def _linear_after_pattern(family="llama"):
    """One layer, norms the identity, the MLP silent: the logit difference is affine in z = P·V, so
    linear in each head's pattern P — and not in its query or key (the softmax between)."""
    from torch import nn
    model = tiny_model(family, layers=1)
    with torch.no_grad():
        block = model.model.layers[0]
        block.input_layernorm = nn.Identity()
        block.post_attention_layernorm = nn.Identity()
        block.mlp.down_proj.weight.zero_()
        block.self_attn.q_proj.weight.mul_(10.0)            # sharp patterns: far from the softmax's linear region
        block.self_attn.k_proj.weight.mul_(10.0)
        block.self_attn.v_proj.weight.mul_(10.0)            # without norms the stream is small: scale it up
        block.self_attn.o_proj.weight.mul_(10.0)
        model.model.norm = nn.Identity()
        model.model.embed_tokens.weight.mul_(10.0)
    return model


def test_atp_star_is_exact_where_only_the_softmax_is_not_linear_and_plain_is_not():
    from headwatch.patching.attribution import exact_effects, qk_estimates, site_patcher
    model = _linear_after_pattern()
    clean = random_ids(4, 10, seed=1)
    corrupted = clean.clone()
    corrupted[:, [2, 4, 7, 9]] = random_ids(4, 4, seed=2)          # the last position too: its query differs
    prompts = PromptBatch(clean, corrupted, random_ids(1, 4, seed=3)[0], random_ids(1, 4, seed=4)[0])
    sp = site_patcher(model, Adapter(model), prompts, 16)
    est = qk_estimates(model, sp.adapter, prompts, batch=3)
    for site in ("q", "k"):
        exact = exact_effects(sp, site)
        assert np.abs(exact).max() > 1e-2, site                        # the patches do move the answer
        np.testing.assert_allclose(est[site]["atp*"].numpy(), exact, rtol=1e-4, atol=1e-5)
        assert np.abs(est[site]["plain"].numpy() - exact).max() > 1e-2 * np.abs(exact).max(), site


def test_exact_q_and_k_patches_take_the_units_slice_on_every_family(model):
    """The exact reference's q (a head) and k (a group) patches against a plain replace of the
    unit's own capture (``capture(site, layer, unit)``: its slice in the family's layout, fused
    or not), each prompt's logit difference."""
    from headwatch.patching.attribution import site_patcher
    from headwatch.model.interventions import replace
    from headwatch.patching.patcher import Patch
    a = Adapter(model)
    p = _paths(model).patcher
    sp = site_patcher(model, a, p.prompts, 16)
    for site in ("q", "k"):
        patches = [Patch(site, l, u) for l in range(a.n_layers) for u in range(a.site_units(site))][::3]
        got = sp.run(patches)
        for patch, row in zip(patches, got):
            with torch.no_grad(), intervene(a, [capture(site, patch.layer, patch.unit)]) as cap:
                a.run_body(p.prompts.clean)
            with torch.no_grad(), intervene(a, [replace(site, patch.layer, cap.one((site, patch.layer, patch.unit)),
                                                        patch.unit)]):
                want = p.prompts.logit_diff(a.logits(p.prompts.corrupted)[:, -1])
            assert (row - want.cpu()).abs().max() < 1e-5, (patch, row, want)
        assert (got - p.corrupted_ld.cpu()).abs().max() > 1e-4, site      # the patches do something


# ------------------------------------------------------------------ the known circuit (§5f)
def test_the_induction_prompts_differ_only_in_the_first_half_and_not_at_the_cue():
    from headwatch.circuits.known import induction_prompts
    prompts = induction_prompts(8, 64, 10, seed=3)
    clean, corrupted, answer, distractor = prompts.clean, prompts.corrupted, prompts.answer, prompts.distractor
    assert clean.shape == corrupted.shape == (64, 19) and prompts.mask is None
    assert torch.equal(clean[:, :10], torch.cat([clean[:, 10:], answer[:, None]], dim=1))    # a + a[:-1]
    assert torch.equal(clean[:, 10:], corrupted[:, 10:])                                   # the same second half
    assert (corrupted[:, 9] == distractor).all() and (distractor != answer).all()
    assert (corrupted[:, 8] != clean[:, 8]).all()                                          # no cue in b


KNOWN = CONFIG["circuits"]["known"]
KNOWN_METHODS = ["attention: previous-token heads", "attention: induction heads", "exact head patching (z)",
                 "estimate at z: plain (= AtP*)", "estimate at k: plain", "estimate at k: atp*", "path patching"]


def test_an_untrained_model_recovers_nothing():
    """The claims need an effect of min_effect logits and an attention of min_attention: a model
    that has learned nothing ranks its heads by noise, and no method is said to recover a circuit."""
    from headwatch.charlm.model import CharLM
    from headwatch.charlm.spec import ModelSpec
    from headwatch.circuits.known import KNOWN_MODEL, induction_prompts, known_circuit
    torch.manual_seed(0)
    model = CharLM(ModelSpec(vocab_size=16, **KNOWN_MODEL)).eval()
    table, note = known_circuit(model, Adapter(model), induction_prompts(16, 8, 10, seed=1), KNOWN["min_effect"],
                                KNOWN["min_attention"])
    assert list(table["method"]) == KNOWN_METHODS
    assert not table["recovered"].any(), table
    assert note["previous_token_heads"] == note["induction_heads"] == "none"
    assert len(note["edges"]) == KNOWN_MODEL["heads"] * 3       # every layer-0 head into q, k, v of the receiver


@pytest.fixture(scope="module")
def known():
    """The rule's table (circuits_known) at the configured circuits.known: the two models trained
    once for the module (about 40 s each on one core)."""
    from headwatch.circuits.known import run_known
    return run_known(KNOWN, batch=64)


def test_the_known_circuit_ranks_first_by_the_weights(known):
    """The two-layer model trained on repeated random tokens (config's circuits.known; the module's, trained
    once): the previous-token head its attention names in layer 0 → the induction head's key is the first of
    every edge between the two layers by composition score, far above its null; the induction heads copy
    (positive copying scores, above their null)."""
    from headwatch.circuits.known import induction_prompts, known_attention
    from headwatch.lens import composition
    from headwatch.lens.prediction import known_ranking
    from headwatch.settings.lens import LensSettings

    model = known[2]["repeated"]
    a = Adapter(model)
    clean = induction_prompts(KNOWN["vocab"], KNOWN["prompts"], KNOWN["half"][1], KNOWN["seed"] + 1).clean
    attn = known_attention(model, a, clean, KNOWN["half"][1])
    previous = [f"L0H{h}" for h in attn[(attn.layer == 0) & (attn.prev >= KNOWN["min_attention"])]["head"]]
    ind = attn[attn.layer == 1].sort_values("induction").iloc[-1]
    assert previous and ind["induction"] >= KNOWN["min_attention"]
    settings = LensSettings(batch=3, rounding_factor=1.0, qk_offset=0, null_draws=200, bootstrap=300, confidence=0.95,
                            seed=0)
    heads, comp, _, _ = composition.weight_circuits(a, settings)
    got = known_ranking(comp, previous, f"L1H{int(ind['head'])}")
    assert got["recovered"] and got["known_rank"] == 1 and got["edges"] == 12, got
    assert got["known_z"] > 5, got
    induction = heads[heads["layer"] == 1]
    assert (induction["ov_copying"] > 0).all() and (induction["ov_copying_z"] > 2).all(), induction


def test_the_known_circuit_forms_and_every_method_recovers_it(known):
    """Trained on repeated random tokens, the model grows a previous-token head in layer 0 and
    induction heads in layer 1 (their attention says so); the head whose exact patch restores the
    most is an induction head, each estimate has one in its top 2, and path patching finds
    previous-token head -> that induction head's key above every other edge into it."""
    table, note, _ = known
    mine = table[table["model"] == "repeated"].set_index("method")
    assert list(mine.index) == KNOWN_METHODS
    assert mine["recovered"].all(), mine
    n = note["repeated"]
    prev, induction = n["previous_token_heads"].split(), n["induction_heads"].split()
    assert prev and induction and all(h.startswith("L0") for h in prev) and all(h.startswith("L1") for h in induction)
    assert mine.loc["exact head patching (z)", "names"] == n["induction_head"] and n["induction_head"] in induction
    sender, edge = mine.loc["path patching", "names"].split(" -> ")
    assert sender in prev and edge == f"{n['induction_head']} (k)"
    # with a margin, every one: twice min_effect, half as much again as min_attention
    assert (mine.loc[mine["unit"] == "logits", "value"].abs() >= 2 * KNOWN["min_effect"]).all(), mine
    assert (mine.loc[mine["unit"] == "attention weight", "value"] >= 1.5 * KNOWN["min_attention"]).all(), mine


def test_on_the_control_no_claim_holds(known):
    """Trained on sequences that never repeat, the same model has nothing to copy: no head
    attends as the circuit would, no effect reaches min_effect, and no claim holds."""
    table, note, _ = known
    control = table[table["model"] == "control: never repeated"].set_index("method")
    assert list(control.index) == KNOWN_METHODS
    assert not control["recovered"].any(), control
    logits = control[control["unit"] == "logits"]["value"].abs()
    attention = control[control["unit"] == "attention weight"]["value"]
    assert (logits < KNOWN["min_effect"]).all() and (attention < KNOWN["min_attention"]).all(), control


def test_path_patching_needs_the_patchers_own_mlp_out():
    """Pass A freezes every block's mlp_out at the corrupted run: read from the Patcher's own run
    (its extra site), so a Patcher that did not capture it is refused, not run a third time."""
    from headwatch.settings.circuits import CircuitsError
    model = tiny_model("llama")
    p = _paths(model).patcher
    assert PathPatcher(p).mlp_out is p.acts["corrupted"]["mlp_out"]
    with pytest.raises(CircuitsError, match="extra_sites"):
        PathPatcher(Patcher(model, p.adapter, p.prompts, 16))


def test_the_known_circuit_read_edge_by_edge(known):
    """The same two models read edge by edge (§5g): on the repeated model the smallest faithful
    circuit of the exact single-edge ranking holds a previous-token head -> induction key edge and is
    under half the graph; EAP's and EAP-IG's hold it too (however large); the control has no
    faithful circuit at all (its clean - corrupted gap is below min_effect)."""
    from headwatch.circuits.faithfulness import EXACT, run_known_edges
    from headwatch.circuits.known import KNOWN_NAMES
    from headwatch.settings.edges import EdgesSettings

    _, _, models = known
    edges = EdgesSettings.from_config(CONFIG["edges"])
    claims, curves, note = run_known_edges({KNOWN_NAMES[k]: (m, Adapter(m)) for k, m in models.items()}, KNOWN,
                                           edges)
    mine = claims[claims["model"] == "repeated"].set_index("method")
    assert list(mine.index) == [EXACT, *edges.methods]
    assert mine["recovered"].all() and mine["prev_to_key"].all(), mine
    assert mine.loc[EXACT, "smallest_faithful"] < mine.loc[EXACT, "edges"] / 2
    assert mine.loc[EXACT, "faithfulness"] >= edges.faithful and mine.loc[EXACT, "gap"] >= KNOWN["min_effect"]
    control = claims[claims["model"] != "repeated"]
    assert control["recovered"].all() and control["smallest_faithful"].isna().all(), control
    assert set(curves["model"]) == set(KNOWN_NAMES.values())
    assert note["repeated"]["previous_token_heads"] and not note["control: never repeated"]["induction_heads"]


def test_named_receivers_need_no_head_sweep_and_the_estimate_counts_the_paths_patched(tiny_model_dir, caplog):
    """hw.path_patching with ``receivers`` named: no heads table needed, the same paths as with one; the
    estimate said before the first pass counts the paths ``sender_layers`` keeps, not every earlier head."""
    import logging

    import headwatch as hw

    m = hw.load_model(tiny_model_dir)
    hw.set_progress(False)
    prompts = hw.prompt_pairs(m, pd.DataFrame(dict(
        clean=["When Mary and John went to the shop, John gave a drink to"],
        corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"], answer=[" Mary"], distractor=[" John"])))
    heads = hw.patch_heads(m, prompts, resid=False)
    named = dict(receivers=[(2, 1)], sender_layers=1)
    alone, beside = hw.path_patching(m, prompts, **named), hw.path_patching(m, prompts, heads, **named)
    pd.testing.assert_frame_equal(alone, beside)
    assert len(alone) == 4 * 3 and set(alone["sender_layer"]) == {1}          # 4 heads of layer 1 into q, k, v
    with caplog.at_level(logging.INFO, logger="headwatch"):
        hw.path_patching(m, prompts, **named)
    said = [r.getMessage() for r in caplog.records if "senders patched" in r.getMessage()]
    assert said and "about 14 forward passes" in said[0], said        # the two runs and 12 paths
