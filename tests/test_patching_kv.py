"""Key and value groups patched clean → corrupted (headwatch/patching/kv.py) and their guards, on
tiny models of every family with grouped key/value heads (and one without)."""
import pandas as pd
import pytest
import torch

from headwatch.guards import rounding
from headwatch.patching import guards
from headwatch.model.arch import Adapter
from headwatch.model.interventions import intervene, replace
from headwatch.patching.patcher import Patch, Patcher
from headwatch.patching.kv import QKV, group_heads, kv_patches, run_kv_patching, ungrouped_twin
from headwatch.settings.patching import PatchingSettings
from tiny import EXPECT, FAMILIES, patching_prompts, tiny_model

GQA = tuple(f for f in FAMILIES if EXPECT[f]["kv_heads"] < 4)      # the tiny default: 4 heads


def _patcher(model, batch=16):
    return Patcher(model, Adapter(model), patching_prompts(), batch, extra_sites=QKV)


def test_every_gqa_family_is_tested():
    assert set(GQA) == {"llama", "qwen2", "gemma2", "gemma3_text", "qwen3", "olmo2", "phi3", "mistral"}


@pytest.mark.parametrize("family", GQA)
def test_kv_guards_pass_on_every_gqa_family(family):
    model = tiny_model(family)
    p = _patcher(model)
    a = p.adapter
    assert a.n_kv_heads == 2 and a.group_size == 2
    sample = [0, 1]
    patches = kv_patches(a)
    assert len(patches) == a.n_layers * a.n_kv_heads * 2
    ld = p.run(patches)
    twin_model, twin = ungrouped_twin(model, a)
    assert twin.n_kv_heads == twin.n_heads == a.n_heads
    with torch.no_grad():       # the twin is the same function: same logits with nothing patched
        ids = p.prompts.corrupted[:2]
        assert torch.allclose(twin.logits(ids), a.logits(ids), atol=1e-5)
    rec = guards.kv_ungrouped(p, twin, sample, [(q, ld[i, sample]) for i, q in enumerate(patches)], group_heads,
                              rounding(a, 1.0, p.largest_logit))
    assert rec["passed"] and rec["n_cases"] == len(patches) and rec["max_abs_diff"] <= rec["bound"]
    assert {tuple(c["heads"]) for c in rec["cases"]} == {(0, 1), (2, 3)}
    rec = guards.qkv_is_z(p, sample, range(a.n_layers))
    assert rec["passed"] and rec["identical"] and rec["n_cases"] == a.n_layers
    # a group's patch moves the metric (the guards compare something that changes)
    assert (ld - p.corrupted_ld).abs().max() > 1e-4


def test_a_key_group_patch_is_the_group_slice_of_the_key_projection_replaced_by_hand():
    """Group 1 of layer 1 of the tiny Llama (heads 2 and 3 read it): the clean run's key
    projection output, that group's features, put into the corrupted run by a plain forward hook."""
    model = tiny_model("llama")
    p = _patcher(model)
    a = p.adapter
    proj, cols = a.key_proj(1), slice(a.head_dim, 2 * a.head_dim)
    kept = []
    h = proj.register_forward_hook(lambda m, i, o: kept.append(o.detach().clone()))
    with torch.no_grad():
        a.logits(p.prompts.clean)
    h.remove()

    def put(m, i, o):
        o = o.clone()
        o[..., cols] = kept[0][..., cols]
        return o

    h = proj.register_forward_hook(put)
    with torch.no_grad():
        want = p.prompts.logit_diff(a.logits(p.prompts.corrupted)[:, -1])
    h.remove()
    got = p.run([Patch("k", 1, 1)])[0]
    assert torch.allclose(got, want, atol=1e-5)
    assert group_heads(a, 1) == [2, 3]


def test_a_model_without_key_sharing_has_a_row_per_heads_keys_and_values():
    model = tiny_model("gpt2")
    p = _patcher(model)
    a = p.adapter
    patches = kv_patches(a)
    assert len(patches) == a.n_layers * a.n_heads * 2 and all(group_heads(a, q.unit) == [q.unit] for q in patches)
    ld = p.run(patches)
    _, twin = ungrouped_twin(model, a)
    rec = guards.kv_ungrouped(p, twin, [0], [(q, ld[i, [0]]) for i, q in enumerate(patches[:6])], group_heads,
                              rounding(a, 1.0, p.largest_logit))
    assert rec["passed"]


def test_each_kv_guard_fires_when_what_it_guards_is_broken():
    model = tiny_model("qwen2")
    p = _patcher(model)
    a = p.adapter
    sample = [0, 1]
    # attention reads its values too: q and k alone are not every head's z
    with pytest.raises(guards.GuardError, match="qkv_is_z: .* not identical"):
        guards.qkv_is_z(p, sample, [1], sites=("q", "k"))
    patches = [Patch("k", 1, 0), Patch("v", 2, 1)]
    ld = p.run(patches)
    cases = [(q, ld[i, sample]) for i, q in enumerate(patches)]
    _, twin = ungrouped_twin(model, a)
    bound = rounding(a, 1.0, p.largest_logit)
    # one head of the group is not the group
    with pytest.raises(guards.GuardError, match="kv_ungrouped: .* past its bound") as failed:
        guards.kv_ungrouped(p, twin, sample, cases, lambda ad, g: group_heads(ad, g)[:1], bound)
    assert failed.value.record["ratio"] > 100
    # a twin whose key rows are not its groups' (the heads of a group swapped with the other's)
    with torch.no_grad():
        w = twin.key_proj(1).weight
        w.copy_(w.roll(2 * a.head_dim, dims=0))
    with pytest.raises(guards.GuardError, match="kv_ungrouped"):
        guards.kv_ungrouped(p, twin, sample, cases[:1], group_heads, bound)


def test_an_unwritten_twin_entry_is_refused(monkeypatch):
    from headwatch.patching import kv as patching_kv
    from headwatch.settings.patching import PatchingError

    model = tiny_model("mistral")
    a = Adapter(model)
    monkeypatch.setattr(patching_kv, "QKV", ("q", "k"))      # the value rows left out
    with pytest.raises(PatchingError, match="v_proj.*not written"):
        ungrouped_twin(model, a)
    with pytest.raises(PatchingError, match="no transformers config"):
        ungrouped_twin(tiny_model("charlm"), Adapter(tiny_model("charlm")))


def test_the_rule_writes_one_row_per_layer_group_and_site():
    model = tiny_model("olmo2")
    six = patching_prompts(n=6)
    prompts = pd.DataFrame(dict(clean_ids=list(six.clean.numpy()), corrupted_ids=list(six.corrupted.numpy()),
                                answer_id=six.answer.numpy(), distractor_id=six.distractor.numpy()))
    settings = PatchingSettings(batch=16, rounding_factor=1.0, guard_prompts=2, kv_prompts=4)
    table, note, record = run_kv_patching(model, Adapter(model), prompts, settings)
    assert len(table) == 3 * 2 * 2 and note["prompts"] == 4 and note["group_size"] == 2
    assert list(table[["layer", "group", "site"]].itertuples(index=False, name=None))[:4] == [
        (0, 0, "k"), (0, 0, "v"), (0, 1, "k"), (0, 1, "v")]
    assert table["label"].iloc[3] == "L0V1" and table["heads"].iloc[3] == "L0H2 L0H3"
    assert record["passed"] and {"nothing_patched", "qkv_is_z", "kv_ungrouped"} <= set(record)
    # the table's scores are the Patcher's, normalized by the first kv_prompts prompts' runs
    p = Patcher(model, Adapter(model), six.rows(slice(None, 4)), 16, extra_sites=QKV)
    ld = p.run([Patch("v", 2, 1)]).double().mean()
    row = table[(table.layer == 2) & (table.group == 1) & (table.site == "v")].iloc[0]
    assert row.logit_diff == pytest.approx(float(ld)) and row.score == pytest.approx(float(p.score(ld.numpy())))
    from headwatch.figures.patching_groups import kv_groups_map

    fig = kv_groups_map(table, note)
    best = table.sort_values(["score", "layer", "group"], ascending=[False, True, True]).iloc[0]
    assert f"highest: {best.label} (heads {best.heads}), score {best.score:.3f}" in fig._suptitle.get_text()
    assert "4 query heads over 2 key/value groups" in fig._suptitle.get_text()


def test_a_replace_at_k_of_the_whole_site_splits_the_values_by_group():
    """The twin guard's clean values come from a whole-site capture: group g is features g·d..(g+1)·d
    of it, in every layout (here Phi-3's fused [Q K V] projection)."""
    model = tiny_model("phi3")
    p = _patcher(model)
    a = p.adapter
    d = a.head_dim
    whole = p.acts["clean"]["k"][1]
    with torch.no_grad(), intervene(a, [replace("k", 1, whole[..., d:2 * d], unit=1)]):
        by_unit = p.prompts.logit_diff(a.logits(p.prompts.corrupted)[:, -1])
    assert torch.allclose(p.run([Patch("k", 1, 1)])[0], by_unit, atol=1e-6)


@pytest.mark.parametrize("key", ["kv_prompts", "positions_all_heads"])
@pytest.mark.parametrize("value", [0, -1, "x", 1.5, True, 10**9])
def test_a_hostile_value_of_the_new_keys_is_refused_before_any_job_naming_the_key(key, value):
    """What the Snakefile runs before any job: check_keys (bounds, in words), then the schema."""
    import copy

    import yaml
    from snakemake.utils import validate

    from conftest import ROOT
    from headwatch.config import check_keys

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert config["patching"][key] is None                    # paper scale: every prompt / every head
    bad = copy.deepcopy(config)
    bad["patching"][key] = value
    with pytest.raises(Exception) as err:
        check_keys(bad, ROOT / "config" / "schema.yaml")
        validate(bad, str(ROOT / "config" / "schema.yaml"))
    assert f"patching.{key}" in str(err.value) or f"['patching']['properties']['{key}']" in str(err.value)
    check_keys(config, ROOT / "config" / "schema.yaml")


def test_the_new_keys_are_checked_against_the_prompts_and_the_model_before_any_job(smollm2_tokenizer):
    from types import SimpleNamespace

    import yaml

    from conftest import ROOT
    from headwatch.settings.patching import patching_errors

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    facts = SimpleNamespace(tokenizer=smollm2_tokenizer, key="m1", shape=dict(layers=2, heads=2, context=512))
    bad = dict(config, models_studied=["m1"], patching=dict(config["patching"], kv_prompts=65, positions_all_heads=5))
    text = "\n".join(patching_errors(bad, facts))
    assert "patching.kv_prompts = 65: more than the patching.n = 64 prompts" in text
    assert "patching.positions_all_heads = 5: model m1 has 4 heads" in text
    ok = dict(bad, patching=dict(config["patching"], top_k=4, kv_prompts=64, positions_all_heads=4))
    assert patching_errors(ok, facts) == []
