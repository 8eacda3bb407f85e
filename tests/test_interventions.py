"""The intervention API (headwatch/model/interventions.py): every site of every family, and its guards —
hook vs zeroed weights, the model restored (also when the body raises), batched vs loop (headwatch/guards.py)."""
from pathlib import Path

import pytest
import torch

from headwatch.model.arch import (SITES, WHOLE_SITES, Adapter, HeadAddressError, all_families, families_markdown, sites_markdown,
                                  sites_table)
from headwatch.ablation.cut import BatchedCuts, cut_heads, head_means, loop_cuts
from headwatch.ablation.guards import hook_vs_mean_bias, hook_vs_reference, restore
from headwatch.guards import GuardError, Rounding, batched_vs_loop
from headwatch.model.interventions import (Edit, InterventionError, attention_maps, call, capture, full_logits, hooks_on,
                                           intervene, maps_and_logits, replace, replaced_by_bias, scale, skip,
                                           stop_grad, zero, zeroed_weights)
from tiny import ALL_FAMILIES, CHARLM_VARIANTS, CONFIGS, FAMILIES, random_ids, rounding_of, tiny_model

ROOT = Path(__file__).resolve().parents[1]
WEIGHTED = ("z", "pattern", "q", "k", "v")   # sites with weights that produce them alone
# What a block's feed-forward part adds to the residual stream, by hand from each family's
# modeling code: the MLP's output, or the norm after it (Gemma 2/3, OLMo 2).
MLP_OUT = dict(gpt_neox="mlp", llama="mlp", qwen2="mlp", gpt2="mlp", gemma2="post_feedforward_layernorm",
               gemma3_text="post_feedforward_layernorm", qwen3="mlp", olmo2="post_feedforward_layernorm",
               phi3="mlp", mistral="mlp", gptj="mlp", gpt_neo="mlp", charlm="ffn")


@pytest.fixture(scope="module", params=ALL_FAMILIES + tuple(CHARLM_VARIANTS))
def tiny(request):
    model = tiny_model(request.param)
    return model, Adapter(model)


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(model, snap):
    return model.state_dict().keys() == snap.keys() and all(
        torch.equal(v, snap[k]) for k, v in model.state_dict().items())


def _unit(a, site, i=1):
    return None if a.site_units(site) == 0 else i % a.site_units(site)


def _value(a, site, rows, T, gen):
    """A replacement for one unit of a site (per-row values, a leading batch dimension)."""
    if site == "pattern":
        p = torch.rand(rows, T, T, generator=gen).tril()
        return p / p.sum(-1, keepdim=True)
    width = a.width if site in WHOLE_SITES else a.head_dim
    return torch.randn(rows, T, width, generator=gen)


def _every_op(a, site, layer, T, gen):
    u = _unit(a, site)
    return [zero(site, layer, u), scale(site, layer, 0.5, u),
            replace(site, layer, _value(a, site, 1, T, gen)[0], u), capture(site, layer, u)]


# ------------------------------------------------------------------ the sites
def test_every_family_names_a_module_for_every_site(tiny):
    model, a = tiny
    modules = {id(m) for m in model.modules()}
    for layer in range(a.n_layers):
        for site in SITES:
            assert id(a.site_module(site, layer)) in modules
    rows = [r for r in sites_table() if r["family"] == a.family.name]
    assert {r["site"] for r in rows} == set(SITES)
    for r in rows:                                   # the table's paths are the adapter's
        if r["module"] != "(block)":
            assert r["module"] == a.site_path(r["site"])
    assert set(CONFIGS) == set(FAMILIES) and set(all_families()) == set(FAMILIES) | {"charlm"}


def test_the_docs_tables_and_family_list_are_the_adapters():
    """docs/architecture.md holds the tables `python -m headwatch.model.arch` prints; the README names
    every family by its model_type."""
    docs = (ROOT / "docs" / "architecture.md").read_text()
    assert sites_markdown() in docs and families_markdown() in docs
    readme = (ROOT / "README.md").read_text()
    assert [f for f in FAMILIES if f"`{f}`" not in readme] == []


@pytest.mark.parametrize("site", list(SITES))
def test_capture_changes_nothing_and_has_the_site_shape(tiny, site):
    model, a = tiny
    ids = random_ids(2, 9)
    intact = full_logits(model, ids, adapter=a)
    with intervene(a, [capture(site, l) for l in range(a.n_layers)]) as cap:
        logits = full_logits(model, ids, adapter=a)
    assert torch.equal(logits, intact)
    want = {"z": a.n_heads * a.head_dim, "q": a.n_heads * a.head_dim, "k": a.n_kv_heads * a.head_dim,
            "v": a.n_kv_heads * a.head_dim, **{w: a.width for w in WHOLE_SITES}}
    got = cap.one((site, 1, None))
    assert got.shape == ((2, a.n_heads, 9, 9) if site == "pattern" else (2, 9, want[site]))
    assert hooks_on(model) == 0


@pytest.mark.parametrize("site", list(SITES))
def test_every_edit_is_removed_even_when_the_body_raises(tiny, site):
    model, a = tiny
    ids = random_ids(2, 8)
    intact = full_logits(model, ids, adapter=a)
    snap = _snapshot(model)
    gen = torch.Generator().manual_seed(0)
    edits = [e for l in range(a.n_layers) for e in _every_op(a, site, l, 8, gen)]
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(a, edits):
            moved = full_logits(model, ids, adapter=a)
            assert hooks_on(model) > 0
            raise RuntimeError("boom")
    assert (moved - intact).abs().max() > 1e-4          # the edits did something ...
    assert hooks_on(model) == 0                          # ... and left nothing behind
    assert _same(model, snap)
    assert restore(model, ids, intact, adapter=a)["identical"]


@pytest.mark.parametrize("site", WEIGHTED)
def test_zero_hook_equals_zeroed_weights_exactly(tiny, site):
    """A zeroed unit of z, pattern, q, k or v is the model with that unit's weight entries zeroed:
    every logit identical (float32), one unit per layer."""
    model, a = tiny
    ids = random_ids(2, 10)
    intact = full_logits(model, ids, adapter=a)
    snap = _snapshot(model)
    cases = [(dict(site=site, layer=l, unit=_unit(a, site, l)), [zero(site, l, _unit(a, site, l))],
              lambda l=l: zeroed_weights(a, [(site, l, _unit(a, site, l))])) for l in range(a.n_layers)]
    rec = hook_vs_reference("hook_vs_weights", a, ids, cases, 0.0, f"{site} hook vs zeroed weights")
    assert rec["max_abs_diff"] == 0.0 and rec["identical"]
    assert rec["layers_covered"] == list(range(a.n_layers))
    with intervene(a, [zero(site, 0, _unit(a, site, 0))]):
        assert (full_logits(model, ids, adapter=a) - intact).abs().max() > 1e-4   # the cut moves
    assert _same(model, snap) and hooks_on(model) == 0
    # The guard can fail: a reference that is not the same model is refused.
    wrong = [(dict(layer=0), [zero(site, 0, _unit(a, site, 0))], lambda: zeroed_weights(a, []))]
    with pytest.raises(GuardError, match="max"):
        hook_vs_reference("hook_vs_weights", a, ids, wrong, 0.0, "a reference that is another model")


def test_whole_block_sites_have_no_weight_reference(tiny):
    model, a = tiny
    for site in WHOLE_SITES:
        with pytest.raises((InterventionError, HeadAddressError)):
            with zeroed_weights(a, [(site, 0, 0)]):
                pass
    assert hooks_on(model) == 0


@pytest.mark.parametrize("site", list(SITES))
def test_per_row_edits_equal_each_edit_alone(tiny, site):
    """Row i of one batch with its own edits (masks, per-row values) == those edits alone (1e-5)."""
    model, a = tiny
    gen = torch.Generator().manual_seed(1)
    ids = random_ids(1, 11, seed=4).repeat(4, 1)
    T = ids.shape[1]
    last = a.n_layers - 1
    row_edits = [[],
                 [zero(site, 1, _unit(a, site, 0))],
                 [scale(site, last, 3.0, _unit(a, site, 1)), zero(site, 0, _unit(a, site, 1))],
                 [replace(site, last, _value(a, site, 1, T, gen)[0], _unit(a, site, 2))]]
    batched_edits = []
    for i, edits in enumerate(row_edits):
        rows = torch.zeros(4, dtype=torch.bool)
        rows[i] = True
        batched_edits += [type(e)(e.site, e.layer, e.op, e.unit, e.value, rows) for e in edits]
    with torch.no_grad(), intervene(a, batched_edits):
        batched = a.logits(ids)
    for i, edits in enumerate(row_edits):
        with torch.no_grad(), intervene(a, edits):
            alone = a.logits(ids[:1])[0]
        assert batched_vs_loop([({}, batched[i], alone)], rounding_of(a, alone), f"{site} row {i}")["passed"]
    assert (batched[1] - batched[0]).abs().max() > 1e-4       # rows really differ
    # Per-row values: each row its own replacement.
    values = _value(a, site, 4, T, gen)
    with torch.no_grad(), intervene(a, [replace(site, last, values, _unit(a, site))]):
        per_row = a.logits(ids)
    for i in (0, 3):
        with torch.no_grad(), intervene(a, [replace(site, last, values[i], _unit(a, site))]):
            alone = a.logits(ids[:1])[0]
            assert batched_vs_loop([({}, per_row[i], alone)], rounding_of(a, alone), "per-row values")["passed"]
    with pytest.raises(InterventionError, match="masks for 4 rows"):
        with torch.no_grad(), intervene(a, batched_edits):
            a.logits(ids[:2])
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ the pattern
def test_pattern_capture_is_the_models_own_attention(tiny):
    """The captured pattern is the model's: transformers' weights bit for bit, and for every
    family z_h = pattern_h · v_g(h) (so the recomputed pattern of the char model is the one its
    kernel used, and the group of each head is the adapter's)."""
    model, a = tiny
    ids = random_ids(2, 12, seed=2)
    L = a.n_layers
    edits = [capture(s, l) for l in range(L) for s in ("pattern", "z", "v")]
    with torch.no_grad(), intervene(a, edits) as cap:
        a.logits(ids)
    if a.family.pattern == "weights":
        with torch.no_grad():
            ref = model(ids, output_attentions=True, use_cache=False).attentions
        assert all(torch.equal(cap.one(("pattern", l, None)), ref[l]) for l in range(L))
    maps = attention_maps(model, ids, a)
    assert torch.equal(maps, torch.stack([cap.one(("pattern", l, None)) for l in range(L)], 1).float())
    assert torch.equal(maps_and_logits(model, ids, a)[0], maps)
    worst = 0.0
    for l in range(L):
        p, z, v = (cap.one((s, l, None)) for s in ("pattern", "z", "v"))
        for h in range(a.n_heads):
            g = a.kv_group(h)
            zh = z[..., h * a.head_dim:(h + 1) * a.head_dim]
            worst = max(worst, float((p[:, h] @ v[..., g * a.head_dim:(g + 1) * a.head_dim] - zh).abs().max()))
    assert worst < 1e-5
    causal = torch.ones(12, 12, dtype=torch.bool).triu(1)
    assert maps[..., causal].abs().max() == 0 and torch.allclose(maps.sum(-1), torch.ones(()), atol=1e-5)


def test_pattern_edits_act_through_z(tiny):
    model, a = tiny
    ids = random_ids(2, 10, seed=3)
    intact = full_logits(model, ids, adapter=a)
    for op in ("zero", "scale"):
        p_edit = zero("pattern", 1, 2) if op == "zero" else scale("pattern", 1, 0.25, 2)
        z_edit = zero("z", 1, 2) if op == "zero" else scale("z", 1, 0.25, 2)
        with intervene(a, [p_edit]):
            by_pattern = full_logits(model, ids, adapter=a)
        with intervene(a, [z_edit]):
            assert torch.equal(by_pattern, full_logits(model, ids, adapter=a))
        assert (by_pattern - intact).abs().max() > 1e-4
    # Replacing a pattern by itself changes nothing; a capture after an edit sees the edit.
    with torch.no_grad(), intervene(a, [capture("pattern", 2)]) as cap:
        a.logits(ids)
    own = cap.one(("pattern", 2, None))
    with intervene(a, [replace("pattern", 2, own)]):
        assert batched_vs_loop([({}, full_logits(model, ids, adapter=a), intact)], rounding_of(a, intact),
                               "own pattern")["passed"]
    uniform = torch.tril(torch.ones(10, 10)) / torch.arange(1, 11)[:, None]
    with torch.no_grad(), intervene(a, [capture("pattern", 2, 1, key="before"),
                                        replace("pattern", 2, uniform, 1), capture("pattern", 2, 1)]) as cap:
        moved = a.logits(ids)
    assert torch.equal(cap.one("before"), own[:, 1])
    assert torch.allclose(cap.one(("pattern", 2, 1)), uniform.expand(2, 10, 10))
    assert (moved.float() - intact).abs().max() > 1e-4
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ q and mlp_out
@pytest.mark.parametrize("site", ["q", "mlp_out"])
def test_replacing_a_site_by_its_own_capture_changes_nothing(tiny, site):
    """q (the whole site, or each head by its own slice) and mlp_out replaced by what a capture
    read there in the same pass: every logit identical; another layer's values move them."""
    model, a = tiny
    ids = random_ids(2, 9, seed=8)
    intact = full_logits(model, ids, adapter=a)
    L = a.n_layers
    units = [None] + list(range(a.site_units(site)))
    with torch.no_grad(), intervene(a, [capture(site, l, u) for l in range(L) for u in units]) as cap:
        a.logits(ids)
    for u in units:
        with intervene(a, [replace(site, l, cap.one((site, l, u)), u) for l in range(L)]):
            assert torch.equal(full_logits(model, ids, adapter=a), intact), f"{site} unit {u}"
    with intervene(a, [replace(site, L - 1, cap.one((site, 0, None)))]):
        assert (full_logits(model, ids, adapter=a) - intact).abs().max() > 1e-4
    assert hooks_on(model) == 0


def test_a_query_edit_moves_its_own_heads_pattern_only(tiny):
    """A new query for head h of layer 1: that head's pattern moves; every other head's pattern
    of that layer (its key/value group's too) and every pattern of layer 0 stays bit for bit."""
    model, a = tiny
    ids = random_ids(2, 10, seed=9)
    L, layer = a.n_layers, 1
    gen = torch.Generator().manual_seed(3)
    maps = [capture("pattern", l) for l in range(L)]
    with torch.no_grad(), intervene(a, maps) as cap:
        a.logits(ids)
    intact = [cap.one(("pattern", l, None)) for l in range(L)]
    for h in range(a.n_heads):
        query = 3.0 * torch.randn(2, 10, a.head_dim, generator=gen)
        with torch.no_grad(), intervene(a, [replace("q", layer, query, h)] + maps) as cap:
            a.logits(ids)
        got = [cap.one(("pattern", l, None)) for l in range(L)]
        assert torch.equal(got[0], intact[0])
        others = [g for g in range(a.n_heads) if g != h]
        assert torch.equal(got[layer][:, others], intact[layer][:, others]), f"head {h}"
        assert (got[layer][:, h] - intact[layer][:, h]).abs().max() > 1e-3, f"head {h}"
    assert hooks_on(model) == 0


def test_mlp_out_edits_equal_a_hand_made_hook_on_the_feed_forward_output(tiny):
    """Zeroing / scaling mlp_out of a layer is a hook on the family's feed-forward output (after
    its post-feed-forward norm where it has one; by hand in MLP_OUT) doing the same: every logit
    identical, and a capture reads that output. Scaling tells the norm's two sides apart (an
    RMSNorm undoes a scale of its input)."""
    model, a = tiny
    ids = random_ids(2, 10, seed=10)
    intact = full_logits(model, ids, adapter=a)
    assert a.family.name in MLP_OUT, f"write {a.family.name}'s feed-forward output module into MLP_OUT"
    for layer in range(a.n_layers):
        module = a.block(layer).get_submodule(MLP_OUT[a.family.name])
        pairs = [(zero("mlp_out", layer), torch.zeros_like), (scale("mlp_out", layer, 0.5), lambda out: 0.5 * out)]
        for edit, by_hand in pairs:
            seen = []
            handle = module.register_forward_hook(lambda m, args, out: seen.append(out.detach()) or by_hand(out))
            try:
                want = full_logits(model, ids, adapter=a)
            finally:
                handle.remove()
            with intervene(a, [capture("mlp_out", layer, key="before"), edit]) as cap:
                got = full_logits(model, ids, adapter=a)
            assert torch.equal(got, want), f"{edit.where()}"
            assert torch.equal(cap.one("before"), seen[0])
            assert (got - intact).abs().max() > 1e-4, f"{edit.where()} moves the logits"
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ skip
def test_skip_stands_in_for_the_blocks_below(tiny):
    model, a = tiny
    ids = random_ids(3, 9, seed=5)
    intact = full_logits(model, ids, adapter=a)
    with torch.no_grad(), intervene(a, [capture("resid", 1)]) as cap:
        a.logits(ids)
    calls = []
    with torch.no_grad(), intervene(a, [skip(1, cap.one(("resid", 1, None))), capture("resid_in", 2)]) as seen:
        handle = a.block(0).register_forward_pre_hook(lambda m, args: calls.append(1))
        try:
            skipped = a.logits(ids).float()
        finally:
            handle.remove()
    assert batched_vs_loop([({}, skipped, intact)], rounding_of(a, intact), "skip")["passed"]
    assert torch.equal(seen.one(("resid_in", 2, None)), cap.one(("resid", 1, None)))
    assert calls == [1]                      # block 0 was called, its stand-in ran, not its layers
    assert hooks_on(model) == 0
    with pytest.raises(InterventionError, match="do not run"):
        with intervene(a, [skip(1, cap.one(("resid", 1, None))), zero("z", 0, 0)]):
            pass
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ stop_grad (AtP*'s GradDrop)
def _gradients(a, ids, edits, keys):
    """(the logits, {key: the gradient of a sum of last-position logits at that capture})."""
    with torch.enable_grad(), intervene(a, edits) as cap:
        logits = a.logits(ids)
        metric = logits.float()[:, -1, :5].sum()
        grads = torch.autograd.grad(metric, [cap.one(k) for k in keys], materialize_grads=True)
    return logits.detach(), dict(zip(keys, grads))


def test_stop_grad_keeps_the_values_and_passes_the_gradient_along_the_stream_only(tiny):
    """Block 1's gradient stopped: every logit identical, bit for bit; the gradient at the block's
    input is the gradient at its output (the residual stream only), unchanged above the block;
    z, q and v inside it get 0; layer 0 loses the paths through block 1. Without the edit each of
    these differs: the test can fail."""
    model, a = tiny
    ids = random_ids(2, 9, seed=4)
    keys = [("resid_in", 1), ("resid", 1), ("z", 1), ("q", 1), ("v", 1), ("z", 0)]
    grab = lambda: [capture(site, l, grad=True, key=(site, l)) for site, l in keys]
    free_logits, free = _gradients(a, ids, grab(), keys)
    logits, dropped = _gradients(a, ids, [stop_grad(1)] + grab(), keys)
    assert torch.equal(logits, free_logits)
    assert torch.equal(dropped[("resid_in", 1)], dropped[("resid", 1)])
    assert torch.equal(dropped[("resid", 1)], free[("resid", 1)])
    assert not torch.equal(free[("resid_in", 1)], free[("resid", 1)])
    for key in (("z", 1), ("q", 1), ("v", 1)):
        assert not dropped[key].any() and free[key].abs().max() > 0, key
    assert (dropped[("z", 0)] - free[("z", 0)]).abs().max() > 0
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("site", [s for s in SITES if s != "pattern"])
def test_call_reads_a_site_and_its_answer_replaces_it(tiny, site):
    """A call sees the site's whole tensor (for q, k and v the projection's output, whose units'
    slices a capture records), changes nothing when it returns None, and what it returns is the
    site's tensor from then on (as a replace of the units by the same values)."""
    model, a = tiny
    ids = random_ids(2, 9, seed=3)
    intact = full_logits(model, ids, adapter=a)
    seen = []
    with torch.no_grad(), intervene(a, [capture(site, 1), call(site, 1, lambda x: seen.append(x.clone()))]) as cap:
        logits = full_logits(model, ids, adapter=a)
    units = [a.site_slice(site, u) for u in range(a.site_units(site))] if site in ("q", "k", "v") else [slice(None)]
    own = torch.cat([seen[0][..., sl] for sl in units], dim=-1)
    assert torch.equal(logits, intact) and torch.equal(own, cap.one((site, 1, None)))
    # a change no norm undoes (nor softmax, on keys): each of the units' features scaled by its own factor
    factor = torch.ones(seen[0].shape[-1])
    for sl in units:
        factor[sl] = 1.3 + torch.sin(torch.arange(seen[0].shape[-1], dtype=torch.float32))[sl]
    with torch.no_grad(), intervene(a, [call(site, 1, lambda x: x * factor)]):
        changed = full_logits(model, ids, adapter=a)
    with torch.no_grad(), intervene(a, [replace(site, 1, own * torch.cat([factor[sl] for sl in units]))]):
        replaced = full_logits(model, ids, adapter=a)
    assert torch.equal(changed, replaced)
    assert (changed - intact).abs().max() > 1e-4
    with pytest.raises(InterventionError, match="returned"):
        with torch.no_grad(), intervene(a, [call(site, 1, lambda x: x[:, :-1])]):
            full_logits(model, ids, adapter=a)
    assert hooks_on(model) == 0


def test_a_call_takes_a_function_of_a_whole_site(tiny):
    model, a = tiny
    bad = [call("pattern", 0, lambda x: None), Edit("z", 0, "call", 1, lambda x: None),
           Edit("z", 0, "call", None, 3.0)]
    for e in bad:
        with pytest.raises(InterventionError, match="call takes a function"):
            with intervene(a, [e]):
                pass
    assert hooks_on(model) == 0


def test_bad_edits_are_refused_before_anything_is_registered(tiny):
    model, a = tiny
    bad = [([zero("attn", 0, 0)], HeadAddressError, "unknown site"),
           ([zero("z", 0, a.n_heads)], HeadAddressError, "does not exist"),
           ([zero("k", 0, a.n_kv_heads)], HeadAddressError, "key/value group"),
           ([zero("z", a.n_layers, 0)], HeadAddressError, "does not exist"),
           ([zero("resid", 0, 1)], HeadAddressError, "no units"),
           ([capture("z", 0), type(zero("z", 0))("z", 0, "erase", 0)], InterventionError, "unknown op"),
           ([zero("z", 0, 0, rows=torch.tensor([1, 0]))], InterventionError, "bool"),
           ([scale("z", 0, "x", 0)], InterventionError, "factor"),
           ([skip(0, torch.zeros(1)), skip(1, torch.zeros(1))], InterventionError, "one skip"),
           ([capture("v", 1), capture("v", 1)], InterventionError, "two captures"),
           ([type(zero("z", 0))("z", 0, "stop_grad")], InterventionError, "stop_grad is a resid edit"),
           ([type(zero("z", 0))("resid", 0, "stop_grad", rows=torch.tensor([True]))], InterventionError,
            "stop_grad is a resid edit")]
    for edits, err, match in bad:
        with pytest.raises(err, match=match):
            with intervene(a, edits):
                pass
        assert hooks_on(model) == 0
    ids = random_ids(2, 6)
    with pytest.raises(InterventionError, match="values for 3 rows"):
        with torch.no_grad(), intervene(a, [replace("z", 0, torch.zeros(3, 6, a.head_dim), 0)]):
            a.logits(ids)
    assert hooks_on(model) == 0


# ------------------------------------------------------------------ mean cuts
def test_head_means_are_the_mean_of_z_over_rows_and_positions(tiny):
    model, a = tiny
    ids = random_ids(5, 7, seed=6)
    means = head_means(model, a, ids, batch=2)
    with torch.no_grad(), intervene(a, [capture("z", l) for l in range(a.n_layers)]) as cap:
        a.logits(ids)
    for l in range(a.n_layers):
        z = cap.one(("z", l, None)).double()
        by_hand = z.reshape(5 * 7, a.n_heads, a.head_dim).mean(0)
        assert torch.allclose(means[l].double(), by_hand, atol=1e-6)


def test_mean_cut_guards(tiny):
    """Mean cuts: hook vs its bias form (within float64 rounding of the largest |logit|; "zeroed weights"
    is a zero-cut guard), batched vs loop (float32 rounding), the model restored; and a mean cut is not a
    zero cut."""
    model, a = tiny
    ids = random_ids(3, 10, seed=7)
    intact = full_logits(model, ids, adapter=a)
    snap = _snapshot(model)
    means = head_means(model, a, ids)
    heads = [(l, l % a.n_heads) for l in range(a.n_layers)] + [(0, a.n_heads - 1)]
    biased = [getattr(a.out_proj(l), "bias", None) is not None for l in range(a.n_layers)]
    rec = hook_vs_mean_bias(model, a, ids, heads, means)
    # the guard's scale is read under exact numerics (math attention), `intact` by the default kernel
    r = rec["rounding"]
    assert r["magnitude"] == pytest.approx(float(intact.abs().max()), rel=1e-5) and r["dtype"] == "float64"
    assert rec["passed"] and rec["max_abs_diff"] <= rec["bound"] == pytest.approx(
        2 ** -53 * r["magnitude"] * (a.n_layers + 1) * r["terms"] ** 0.5)
    assert rec["layers_covered"] == list(range(a.n_layers))
    # Weights restored, and a bias attached for the check is gone again.
    assert _same(model, snap)
    assert [getattr(a.out_proj(l), "bias", None) is not None for l in range(a.n_layers)] == biased
    # The bias guard can fail: the bias form of another value is not the same model.
    wrong = [(dict(layer=0), [replace("z", 0, means[0, 0], 0)],
              lambda: replaced_by_bias(a, [(0, 0, means[0, 0] + 1.0)]))]
    with pytest.raises(GuardError, match="past its bound") as failed:
        hook_vs_reference("hook_vs_mean_bias", a, ids, wrong, Rounding(**{k: r[k] for k in ("factor", "dtype",
                          "magnitude", "depth", "terms")}), "the bias form of another value")
    assert failed.value.record["ratio"] > 1e6
    positions = torch.tensor([0, 4, 9])
    variants = [[], [(1, 0)], [(0, 1), (2, 3)]]

    def reduce(logits, seq):
        return torch.log_softmax(logits.float(), dim=-1)

    looped = loop_cuts(model, a, ids, variants, reduce, positions, means=means)
    batched = BatchedCuts(model, a, ids, positions, batch=4, means=means).run_variants(variants, reduce)
    assert batched_vs_loop([({}, batched, looped)], rounding_of(a, looped), "mean cuts")["passed"]
    zero_cut = loop_cuts(model, a, ids, variants[1:2], reduce, positions)
    assert (zero_cut[0] - looped[1]).abs().max() > 1e-4
    with cut_heads(a, [(1, 0)], means):
        assert (full_logits(model, ids, adapter=a) - intact).abs().max() > 1e-5
    assert restore(model, ids, intact, adapter=a)["identical"] and hooks_on(model) == 0
    with pytest.raises(ValueError, match="means must be"):
        with cut_heads(a, [(1, 0)], means[:, :1]):
            pass


def test_arch_does_not_import_the_sweep():
    """The char model's family is described by names: importing the adapter imports no sweep code."""
    import subprocess
    import sys
    code = ("import sys, headwatch.model.arch, headwatch.model.interventions, headwatch.ablation.cut; "
            "print(sorted(m for m in sys.modules if m.startswith(('headwatch.charlm', 'headwatch.sweep'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
