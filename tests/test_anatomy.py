"""Model anatomy (protocol §6): formulas against hand-computed cases, parameter blocks against
real instantiated models, the by-hand weight check and the key-group cuts on tiny models."""
import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoConfig

from headwatch.anatomy import (BlockCountError, Entry, HeadShapeError, KVGroupError, WeightCheckError,
                               attention_cells, kv_cache_bytes, kv_cache_table, kv_group_cuts, kv_similarity,
                               pair_periods, pairs_not_wrapped, params_by_block, params_table, reach,
                               reference_entry, rotary_pairs, rotary_table, studied_entry, survey_table,
                               sweep_entries, ungrouped_control, weight_check)
from headwatch.anatomy.context import angle_at
from headwatch.anatomy.weights import head_slices
from headwatch.model.arch import Adapter
from headwatch.guards import GuardError
from headwatch.model.interventions import hooks_on
from headwatch.model.recompute import apply_rotary, rotate_half, rotate_pairs
from headwatch.charlm.model import CharLM, count_params
from headwatch.charlm.spec import ModelSpec
from tiny import ALL_FAMILIES, CHARLM_VARIANTS, EXPECT, random_ids, tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[1]
REFS = ROOT / "config" / "models"
TWO_PI = 2 * math.pi


# ------------------------------------------------------------------ formulas
def test_rotary_pairs_periods_reach_by_hand():
    # Pythia: 64-dim heads, 25 % rotary = 16 dims = 8 pairs, base 10 000.
    assert rotary_pairs(16) == 8
    with pytest.raises(ValueError):
        rotary_pairs(15)
    periods = pair_periods(10000, 8)
    # pair n turns once every 2π·10000^((n−1)/8) tokens: 10000^(k/8) = 10^(k/2)
    hand = [TWO_PI * 10 ** (k / 2) for k in range(8)]
    np.testing.assert_allclose(periods, hand, rtol=1e-12)
    assert periods[0] == pytest.approx(6.283185307)           # the fastest pair: 2π tokens
    assert periods[4] == pytest.approx(628.3185307)            # 2π·100
    assert reach(10000, 8) == pytest.approx(19869.1765, rel=1e-8)   # 2π·10^3.5
    # periods 1986.9, 6283.2, 19869.2 are > 1000 tokens; 628.3 is not
    assert pairs_not_wrapped(periods, 1000) == 3
    assert pairs_not_wrapped(periods, 628.3185307179586) == 3  # exactly one period = wrapped
    # SmolLM2: 32 pairs, base 1e5: period > 1000 ⇔ 10^(5k/32) > 1000/2π ⇔ k ≥ 15 → 17 pairs
    assert pairs_not_wrapped(pair_periods(1e5, 32), 1000) == 17
    assert reach(1e5, 32) == pytest.approx(TWO_PI * 10 ** (5 * 31 / 32))
    # a pair of period 4 has turned 5/4 of a circle after 5 tokens: a quarter turn
    assert angle_at([4.0], 5)[0] == pytest.approx(math.pi / 2)


def test_kv_cache_and_attention_cells_by_hand():
    # SmolLM2: 2 (k and v) × 30 layers × 3 kv heads × 64 × 2 bytes
    assert kv_cache_bytes(30, 3, 64, 2) == 23040
    assert kv_cache_bytes(30, 9, 64, 2) == 69120               # without sharing
    assert kv_cache_bytes(12, 12, 64, 4) == 73728              # Pythia, float32
    # Pythia: 2048² × 12 heads × 12 layers
    assert attention_cells(2048, 12, 12) == 4_194_304 * 144 == 603_979_776


def test_one_table_of_bytes_per_number_matches_torch_and_the_schema():
    """headwatch.names.BYTES_PER_NUMBER is the one dtype → bytes table: torch's sizes, the
    config's dtype choices, the dtypes a model loads in."""
    import yaml

    from headwatch.model.load import DTYPES
    from headwatch.names import BYTES_PER_NUMBER
    from workflow import ROOT

    assert {name: getattr(torch, name).itemsize for name in BYTES_PER_NUMBER} == BYTES_PER_NUMBER
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    dtype = schema["properties"]["models"]["additionalProperties"]["properties"]["dtype"]
    assert sorted(dtype["enum"]) == sorted(BYTES_PER_NUMBER) == sorted(DTYPES)


def _survey_row(**kw):
    row = dict(name="m", source="reference", layers=30, heads=9, kv_heads=3, head_dim=64, context=8192,
               rotary_dims=64, rotary_base=1e5, error="")
    row.update(kw)
    return row


def test_tables_apply_the_formulas():
    survey = pd.DataFrame([_survey_row(), _survey_row(name="p", layers=12, heads=12, kv_heads=12,
                                                      context=2048, rotary_dims=16, rotary_base=1e4),
                           _survey_row(name="q", rotary_base=1e6, rotary_dims=64),
                           _survey_row(name="bad", error="width 100 is not divisible by 3 heads")])
    kv = kv_cache_table(survey).set_index(["name", "dtype"])
    assert kv.loc[("m", "bfloat16"), "per_token"] == 23040
    assert kv.loc[("m", "float32"), "full_context"] == 46080 * 8192
    assert kv.loc[("m", "float16"), "per_token_no_sharing"] == 69120
    assert kv.loc[("m", "float16"), "sharing_saves"] == 3
    assert "bad" not in kv.index.get_level_values(0)           # errored rows are left out
    rot = rotary_table(survey, 1000, {"p": "q"})
    own = rot[(rot.name == "p") & (rot.variant == "own base")]
    assert len(own) == 8 and own.pair.tolist() == list(range(1, 9))
    assert own.margin.iloc[0] == pytest.approx(TWO_PI * 10 ** 3.5 / 2048)
    assert own.pairs_not_wrapped_at_distance.iloc[0] == 3
    swapped = rot[(rot.name == "p") & (rot.variant == "base of q")]
    assert swapped.base.iloc[0] == 1e6 and swapped.reach.iloc[0] == pytest.approx(TWO_PI * 10 ** 5.25)
    # with base 1e6 the 8 pairs have periods 2π·10^(0.75 k): > 1000 for k ≥ 3 → 5 pairs
    assert swapped.pairs_not_wrapped_at_distance.iloc[0] == 5
    with pytest.raises(KeyError, match="swap_base"):
        rotary_table(survey, 1000, {"p": "nowhere"})


# ---------------------------------------------------------- parameter blocks
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_blocks_sum_to_the_instantiated_model(family):
    model = tiny_model(family)
    a = Adapter(model)
    table = params_by_block(model).set_index("block")
    total = sum(p.numel() for p in model.parameters())
    assert table.loc["total", "params"] == total
    assert table.drop("total")["params"].sum() == total
    assert table.loc["other", "params"] == 0
    assert table.loc["input_embeddings", "params"] == 512 * 64
    # a tiny model has 3 layers, width 64, 4 heads of 16 over its kv heads: q, k, v, o and biases
    H, KV, d, W = 4, a.n_kv_heads, 16, 64
    biases = 0 if family == "charlm" else EXPECT[family]["attn_biases"]
    assert table.loc["attention", "params"] == 3 * (W * (H + 2 * KV) * d + H * d * W + biases)
    inp, out = a.embeddings()
    tied = inp.weight is out.weight
    assert (table.loc["output_embeddings", "params"] == 0) == tied
    assert ("tied" in table.loc["output_embeddings", "counted"]) == tied
    if a.family.has_config:   # the same counts from the config alone, on the meta device
        with torch.device("meta"):
            from transformers import AutoModelForCausalLM
            meta = AutoModelForCausalLM.from_config(model.config)
        assert params_by_block(meta)["params"].tolist() == table["params"].tolist()


def test_biases_are_said_where_they_are_counted():
    table = params_by_block(tiny_model("qwen2")).set_index("block")
    assert table.loc["attention", "biases"] == 3 * (64 + 32 + 32)   # q, k, v biases; o has none
    assert "biases included" in table.loc["attention", "counted"]
    neox = params_by_block(tiny_model("gpt_neox")).set_index("block")
    assert neox.loc["norms", "biases"] == (3 * 2 + 1) * 64          # LayerNorm biases stay in norms


def test_charlm_blocks_match_its_formula_and_heads_change_nothing():
    counts = []
    for heads in (1, 4, 32):
        t = params_by_block(CharLM(65, 256, heads)).set_index("block")["params"]
        ref = count_params(ModelSpec(65, 256, heads))
        assert (t["input_embeddings"], t["position_embeddings"], t["attention"], t["ffn"], t["norms"],
                t["output_embeddings"], t["total"]) == (ref["embeddings"], ref["positions"], ref["attention"],
                                                        ref["ffn"], ref["norms"], ref["head"], ref["total"])
        counts.append(t["total"])
    assert len(set(counts)) == 1


def test_block_count_guard(monkeypatch):
    import headwatch.model.params as counting

    model = tiny_model("llama")
    real = counting.classify_parameters
    monkeypatch.setattr(counting, "classify_parameters", lambda m: real(m).iloc[1:])   # lose a tensor
    with pytest.raises(BlockCountError):
        counting.params_by_block(model)


# -------------------------------------------------------------------- survey
def test_reference_configs_load_and_carry_the_public_numbers():
    survey = survey_table([reference_entry(p.stem, REFS) for p in sorted(REFS.glob("*.json"))]).set_index("name")
    want = {  # layers, heads, kv heads, width, head size, ffn, vocab, context, rotary dims, base, tied
        "pythia-160m-deduped": (12, 12, 12, 768, 64, 3072, 50304, 2048, 16, 1e4, False),
        "qwen2.5-0.5b": (24, 14, 2, 896, 64, 4864, 151936, 32768, 64, 1e6, True),
        "qwen2.5-1.5b": (28, 12, 2, 1536, 128, 8960, 151936, 131072, 128, 1e6, True),
        "smollm2-135m": (30, 9, 3, 576, 64, 1536, 49152, 8192, 64, 1e5, True),
    }
    cols = ["layers", "heads", "kv_heads", "width", "head_dim", "ffn", "vocab", "context", "rotary_dims",
            "rotary_base", "tied_embeddings"]
    for name, values in want.items():
        assert tuple(survey.loc[name, cols]) == values, name
        assert AutoConfig.from_pretrained(REFS / f"{name}.json").model_type == survey.loc[name, "architecture"]
    assert (survey["error"] == "").all() and (survey["tensors_from"] == "meta").all()
    totals = params_table([reference_entry(n, REFS) for n in ("pythia-160m-deduped", "smollm2-135m")])
    totals = totals[totals.block == "total"].set_index("name")["params"]
    assert totals["pythia-160m-deduped"] == 162_322_944 and totals["smollm2-135m"] == 134_515_008


def test_every_family_is_surveyed_from_its_config_on_the_meta_device(family, tmp_path):
    tiny_config(family).to_json_file(tmp_path / f"tiny-{family}.json")
    row = survey_table([reference_entry(f"tiny-{family}", tmp_path)]).iloc[0]
    want = EXPECT[family]
    assert row.error == "" and row.architecture == family
    assert (row.layers, row.heads, row.kv_heads, row.head_dim, row.head_dim_tensors, row.rotary_dims) == \
        (3, 4, want["kv_heads"], 16, 16.0, want["rotary_dims"])
    assert row.position == ("rotary" if want["rotary_dims"] else "learned")


def test_width_not_divisible_by_heads_is_reported_not_crashed():
    bad = [Entry("neox-bad", "reference", "hf", dict(model_type="gpt_neox", hidden_size=100, num_attention_heads=3)),
           Entry("llama-bad", "reference", "hf", dict(model_type="llama", hidden_size=100, num_attention_heads=3)),
           Entry("char-bad", "sweep", "charlm", dict(vocab_size=65, width=100, heads=3, layers=4, context=128,
                                                      ffn_mult=4))]
    ok = reference_entry("smollm2-135m", REFS)
    survey = survey_table(bad + [ok]).set_index("name")
    for e in bad:
        assert "not divisible by 3 heads" in survey.loc[e.name, "error"]
        assert survey.loc[e.name, "head_dim"] == 0
    assert survey.loc["smollm2-135m", "error"] == ""
    params = params_table(bad + [ok])
    assert params[params.block == "error"]["name"].tolist() == [e.name for e in bad]
    assert params[params.name == "smollm2-135m"]["block"].iloc[-1] == "total"


def test_sweep_shapes_are_surveyed_once_each():
    sweep = dict(model=dict(layers=4, context=128, ffn_mult=4),
                 sweeps=dict(a=dict(grid=[dict(width=256, heads=1), dict(width=256, heads=4)]),
                             b=dict(grid=[dict(width=128, heads=2), dict(width=256, heads=4)])))
    entries = sweep_entries(sweep, 65)
    assert [e.name for e in entries] == ["sweep w256-h1", "sweep w256-h4", "sweep w128-h2"]
    assert "a, b" in entries[1].note
    s = survey_table(entries).set_index("name")
    assert s.loc["sweep w256-h4", "head_dim"] == 64 and s.loc["sweep w256-h1", "position"] == "learned"


def test_studied_model_is_cross_checked_against_its_tensors(tmp_path):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path / "good")
    row = survey_table([studied_entry("tiny", tmp_path / "good")]).iloc[0]
    assert (row.tensors_from, row.head_dim, row.head_dim_tensors, row.group_size) == ("weights", 16, 16.0, 2)
    assert params_table([studied_entry("tiny", tmp_path / "good")]).iloc[-1]["params"] == \
        sum(p.numel() for p in model.parameters())
    # a config that lies about the heads: 8 heads of 8 over 2 kv heads; the tensors say 16
    model.save_pretrained(tmp_path / "lying")
    cfg = json.loads((tmp_path / "lying" / "config.json").read_text())
    cfg.update(num_attention_heads=8, head_dim=8)
    (tmp_path / "lying" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HeadShapeError, match="head size 8"):
        survey_table([studied_entry("liar", tmp_path / "lying")])


# ----------------------------------------------------------- one head's weights
def test_head_slices_by_hand():
    neox = tiny_model("gpt_neox")
    a = Adapter(neox)
    s = head_slices(neox, a, 1, 3)
    # fused [q_h k_h v_h] per head, 16 dims each: head 3's query rows start at 3·48
    assert (s["query"]["rows"], s["key"]["rows"], s["value"]["rows"]) == ([144, 160], [160, 176], [176, 192])
    assert s["output"]["columns"] == [48, 64] and s["output"]["axis"] == 1
    assert s["query"]["params"] == 16 * 64 + 16                    # weights + bias
    assert s["params"]["total"] == 3 * (16 * 64 + 16) + 64 * 16
    assert s["params"]["share"] == pytest.approx(s["params"]["total"] / sum(p.numel() for p in neox.parameters()))
    wq = neox.gpt_neox.layers[1].attention.query_key_value.weight[144:160]
    assert s["wq_stats"]["max"] == pytest.approx(wq.max().item()) and s["wq_stats"]["std"] == pytest.approx(wq.std().item())
    llama = tiny_model("llama")
    g = head_slices(llama, Adapter(llama), 0, 3)                   # head 3 → kv group 1 of 2
    assert g["kv_group"] == 1 and g["key"]["rows"] == [16, 32] and g["key"]["shared_by_heads"] == [2, 3]
    assert g["params"]["own"] == 2 * 16 * 64 and g["params"]["key_value"] == 2 * 16 * 64
    # Phi-3: one fused [Q (4 heads) | K (2 groups) | V (2 groups)] of 16-dim rows
    phi = tiny_model("phi3")
    f = head_slices(phi, Adapter(phi), 0, 3)
    assert (f["query"]["rows"], f["key"]["rows"], f["value"]["rows"]) == ([48, 64], [80, 96], [112, 128])
    assert f["query"]["fused"] and f["query"]["shape"] == [128, 64]


def test_rotate_half_interleaved_and_rotary_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    assert rotate_half(x).tolist() == [[-3.0, -4.0, 1.0, 2.0]]
    assert rotate_pairs(x).tolist() == [[-2.0, 1.0, -4.0, 3.0]]
    # position 1, 4 rotary dims, base 100: pair 0 turns 1 rad, pair 1 turns 100^(-1/2) = 0.1 rad
    v = torch.tensor([[0.0, 0.0, 0.0, 0.0, 9.0], [1.0, 0.0, 0.0, 0.0, 9.0]], dtype=torch.float64)
    out = apply_rotary(v, 4, 100.0)                                  # pairs (0, 2) and (1, 3)
    assert out[1].tolist() == pytest.approx([math.cos(1), 0.0, math.sin(1), 0.0, 9.0])
    assert out[1, 4] == 9.0                                           # past the rotary dims: untouched
    w = torch.tensor([[0.0] * 5, [1.0, 0.0, 1.0, 0.0, 9.0]], dtype=torch.float64)
    pairs = apply_rotary(w, 4, 100.0, layout="interleaved")           # pairs (0, 1) and (2, 3)
    assert pairs[1].tolist() == pytest.approx([math.cos(1), math.sin(1), math.cos(0.1), math.sin(0.1), 9.0])
    slow = apply_rotary(v, 4, 100.0, factor=2.0)                      # linear scaling: half the angle
    assert slow[1].tolist() == pytest.approx([math.cos(0.5), 0.0, math.sin(0.5), 0.0, 9.0])


# ---------------------------------------------------------------- weight check
def _worst(model, a, ids, rounding_factor=1e12):
    """The largest |Δ| of every head's check (a factor so large that none fails: the figure itself)."""
    return max(weight_check(model, a, ids, layer, head, rounding_factor=rounding_factor)["max_abs_delta"]
               for layer in range(a.n_layers) for head in range(a.n_heads))


@pytest.mark.parametrize("family", ALL_FAMILIES + tuple(CHARLM_VARIANTS))
def test_weight_check_recomputes_every_head(family):
    """The map recomputed by hand in float64 is the model's eager attention: within the bound of
    float32 rounding (factor 1) and 1e-5; within 1e-6 of the model run in float64 (transformers keeps
    some steps in float32)."""
    model = tiny_model(family, layers=2)
    a = Adapter(model)
    ids = random_ids(1, 12, seed=3)
    assert _worst(model, a, ids, 1.0) < 1e-5
    assert _worst(model.double(), a, ids, 1.0) < 1e-6


def test_each_rule_of_a_family_changes_its_maps(family):
    """Every special case of a family's attention is exercised by its tiny model: the weight
    check fails when any one rule of its entry is dropped or turned around. (Transformers
    families: a recomputed pattern follows the same rules on both sides; its check is
    z = pattern · v, tests/test_interventions.py.)"""
    model = tiny_model(family, layers=2).double()
    a = Adapter(model)
    ids = random_ids(1, 12, seed=3)
    f = a.family
    wrong = {"scale": dict(scale_by="" if f.scale_by == "head_dim" else "head_dim", scale_switches=("", ""))}
    if "RMSNorm" in (a.input_norm_params(0)["kind"], f.norm if f.qk_norm else ""):
        wrong["norm offset"] = dict(norm_offset=1.0 - f.norm_offset)
    if a.rotary_dims:
        wrong["rotary pairs"] = dict(rotary_layout="interleaved" if f.rotary_layout == "half" else "half")
    if any(a.window(l) for l in range(a.n_layers)):
        wrong["window"] = dict(window="")
    if a.softcap(0):
        wrong["soft-cap"] = dict(softcap="")
    if f.qk_norm:
        wrong["QK-norm"] = dict(qk_norm="")
    for rule, change in wrong.items():
        a.family = dataclasses.replace(f, **change)
        assert _worst(model, a, ids) > 1e-3, rule
    a.family = f
    assert _worst(model, a, ids) < 1e-6


def test_weight_check_names_a_cell_and_fails_loudly():
    model = tiny_model("gpt_neox", layers=1)
    a = Adapter(model)
    ids = random_ids(1, 10, seed=1)
    rec = weight_check(model, a, ids, 0, 2, tokens=[f"t{i}" for i in range(10)], rounding_factor=1.0)
    r = rec["rounding"]
    assert rec["max_abs_delta"] <= rec["bound"] == pytest.approx(2 ** -24 * r["magnitude"] * 2 * 64 ** 0.5)
    assert (r["depth"], r["terms"], r["of"]) == (2, 64, "largest |q|·|k|·scale") and r["magnitude"] > 0
    cell = rec["cell_last_row_strongest"]
    assert cell["row"] == 9 and cell["row_token"] == "t9"
    assert cell["by_hand"] == pytest.approx(cell["model"], abs=1e-5) and cell["model"] > 0.1
    rope = a.rope
    a.rope = lambda layer: dict(rope(layer), base=500.0)     # a wrong base must be caught
    with pytest.raises(WeightCheckError, match="> bound .* × the bound .*in_float64") as failed:
        weight_check(model, a, ids, 0, 2, rounding_factor=1.0)
    assert isinstance(failed.value, GuardError)      # a guard: it stops the rule like every other
    assert failed.value.record["ratio"] > 100 and not failed.value.record["passed"]


# -------------------------------------------------------------- key/value groups
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_key_group_cut_moves_exactly_the_group(family):
    model = tiny_model(family, layers=2)
    a = Adapter(model)
    cuts = kv_group_cuts(model, a, random_ids(1, 10, seed=2), f"tiny-{family}")
    assert len(cuts) == 2 * a.n_kv_heads * 4                         # layers × groups × heads
    moved = cuts[cuts.moved]
    assert (moved["head_group"] == moved["kv_group"]).all()
    assert (cuts.groupby(["layer", "kv_group"])["heads_moved"].first() == a.group_size).all()
    assert (cuts[~cuts.in_group]["max_delta"] == 0).all()
    assert (cuts[["others_max_delta", "before_max_delta", "restore_max_delta"]] == 0).all().all()
    assert hooks_on(model) == 0                                      # the hook is gone
    if a.family.has_config:      # the control: the same family without key sharing, one layer
        control = ungrouped_control(model.config, layers=1, seed=0)
        ca = Adapter(control)
        assert (ca.n_kv_heads, ca.n_heads, ca.n_layers, ca.window(0)) == (4, 4, 1, a.window(0))
        c = kv_group_cuts(control, ca, random_ids(1, 10, seed=2), "control")
        assert (c.groupby(["layer", "kv_group"])["heads_moved"].first() == 1).all()


def test_a_wrong_key_slice_is_fatal(monkeypatch):
    model = tiny_model("llama", layers=1)
    a = Adapter(model)
    monkeypatch.setattr(a, "key_slice", lambda g: slice(((g + 1) % 2) * 16, ((g + 1) % 2) * 16 + 16))
    with pytest.raises(KVGroupError, match="moved") as failed:
        kv_group_cuts(model, a, random_ids(1, 8, seed=2), "wrong slice")
    assert isinstance(failed.value, GuardError)


def test_similarity_within_vs_across_groups_by_hand():
    T = 4
    base = torch.tril(torch.rand(T, T, generator=torch.Generator().manual_seed(0)))
    other = torch.tril(torch.rand(T, T, generator=torch.Generator().manual_seed(1)))
    maps = torch.stack([base, base, other, other]).unsqueeze(0)            # 1 layer, 4 heads
    sim = kv_similarity(maps, SimpleNamespace(kv_group=lambda h: h // 2), "hand")
    layer = sim[sim.scope == "layer"].iloc[0]
    assert layer.within_pairs == 2 and layer.within_mean == pytest.approx(1.0)
    r, c = np.tril_indices(T)
    keep = r > 0
    expected = np.corrcoef(base.numpy()[r[keep], c[keep]], other.numpy()[r[keep], c[keep]])[0, 1]
    assert layer.across_pairs == 4 and layer.across_mean == pytest.approx(expected)
    assert sim[sim.scope == "all layers"].iloc[0].layer == -1


# -------------------------------------------------------------------- figures
def test_figures_draw_labels_from_the_data(tmp_path):
    from headwatch.figures import anatomy as figs
    from headwatch.figures.style import save

    model = tiny_model("llama", layers=1)
    cuts = kv_group_cuts(model, Adapter(model), random_ids(1, 6, seed=2), "tiny-llama")
    fig = figs.kv_cut_matrix(cuts)
    assert "heads moved per cut: 2" in fig.axes[0].get_title()
    save(fig, tmp_path / "cut.pdf")
    survey = survey_table([reference_entry(n, REFS) for n in ("pythia-160m-deduped", "qwen2.5-0.5b")])
    fig = figs.rotary_clocks(rotary_table(survey, 1000, {"pythia-160m-deduped": "qwen2.5-0.5b"}),
                             ["pythia-160m-deduped"])
    assert sum(1 for ax in fig.axes if ax.get_title()) == 16                # 8 pairs × 2 bases
    save(fig, tmp_path / "clocks.pdf")
    save(figs.kv_cache(kv_cache_table(survey)), tmp_path / "kv.pdf")
    save(figs.params_by_block(params_table([reference_entry("pythia-160m-deduped", REFS)])), tmp_path / "p.pdf")
    assert all((tmp_path / f"{n}.{e}").stat().st_size > 0 for n in ("cut", "clocks", "kv", "p") for e in ("pdf", "png"))


# ---------------------------------------------------------------- config checks
def test_anatomy_errors_name_the_key():
    import yaml

    from headwatch.settings.anatomy import anatomy_errors

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert anatomy_errors(config, ROOT) == []
    bad = dict(config, anatomy=dict(config["anatomy"], kv_phrase="nope", references=["pythia-160m-deduped", "gpt-9"],
                                    swap_base={"pythia-160m-deduped": "qwen2.5-0.5b"}, clocks=["gpt-10"]))
    errors = "\n".join(anatomy_errors(bad, ROOT))
    assert "anatomy.kv_phrase: 'nope'" in errors
    assert "anatomy.references[1]: no reference config config/models/gpt-9.json" in errors
    assert "anatomy.swap_base: base donor 'qwen2.5-0.5b'" in errors
    assert "anatomy.clocks[0]: 'gpt-10'" in errors


def test_the_anatomy_settings_are_typed_and_refuse_unknown_keys():
    """Every key under `anatomy:` has a typed home (headwatch.settings.anatomy): the head and the
    control read as objects, an unknown key refused by name, a key outside a rule's slice None."""
    import yaml

    from headwatch.settings.anatomy import AnatomySettings, HeadAddress, KVControl

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    a = AnatomySettings.from_config(config["anatomy"])
    assert a.head == HeadAddress(layer=0, head=0) and a.kv_control == KVControl(layers=2, seed=0)
    assert a.references == tuple(config["anatomy"]["references"])
    with pytest.raises(ValueError, match=r"anatomy: unknown key\(s\) \['kv_controll'\]"):
        AnatomySettings.from_config(dict(config["anatomy"], kv_controll={"layers": 2}))
    with pytest.raises(ValueError, match=r"anatomy.head: unknown key\(s\) \['heads'\]"):
        HeadAddress.from_config(dict(layer=0, heads=1))
    rotary = AnatomySettings.from_config(dict(rotary_distance=1000, swap_base={}))
    assert rotary.need("rotary_distance").rotary_distance == 1000
    with pytest.raises(ValueError, match="anatomy: kv_control not in this rule's settings"):
        rotary.need("kv_control")
