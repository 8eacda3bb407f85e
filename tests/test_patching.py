"""Activation patching (headwatch/patching/heads.py) and its guards (headwatch/patching/guards.py) on tiny models."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from conftest import ROOT
from headwatch.guards import batched_vs_loop, rounding
from headwatch.patching import guards
from headwatch.model.arch import Adapter
from headwatch.model.interventions import InterventionError, capture, intervene
from headwatch.patching.patcher import Patch, Patcher, head_patches, position_patches, resid_patches
from headwatch.patching.attribution import attribution_patching
from headwatch.patching.prompts import position_labels, prompt_set
from headwatch.settings.patching import PatchingSettings, patching_errors
from tiny import patching_prompts, random_ids, tiny_model

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
PARAMS = dict(CONFIG["patching"], n=8, top_k=2, batch=16, guard_prompts=2)
SETTINGS = PatchingSettings.from_config(PARAMS)


def _patcher(model, batch=16):
    """Clean and corrupted prompts that differ at three positions (like names), random answers."""
    return Patcher(model, Adapter(model), patching_prompts(4, 10), batch)


# ------------------------------------------------------------------ guards, every family
def test_every_guard_passes_on_every_family(model):
    p = _patcher(model)
    a = p.adapter
    sample = [0, 1, 2]
    for rec in (guards.nothing_patched(p, sample), guards.everything_patched(p, sample),
                guards.clean_to_clean(p, sample, [(l, l % a.n_heads) for l in range(a.n_layers)])):
        assert rec["passed"] and rec["identical"] and rec["max_abs_diff"] == 0.0, rec
        assert {tuple(c["shape"]) for c in rec["cases"]} == {(3, 10, a.model.config.vocab_size)}
    patches = head_patches(a)[::5] + resid_patches(a, 10)[::11] + position_patches([(1, 2)], 10)[::3]
    batched = p.run(patches)
    rec = batched_vs_loop(p.against_loop(patches, batched[:, sample], sample), rounding(a, 1.0, p.largest_logit),
                          "logit difference")
    assert rec["passed"] and rec["n_cases"] == len(patches) and rec["max_abs_diff"] <= rec["bound"]


def test_each_guard_fails_when_what_it_guards_is_broken(monkeypatch):
    model = tiny_model("llama")
    p = _patcher(model)
    sample = [0, 1]
    real_skip, real_replace = guards.skip, guards.replace
    monkeypatch.setattr(guards, "skip", lambda layer, value: real_skip(layer, value + 1e-3))
    with pytest.raises(guards.GuardError, match="nothing_patched: .* not identical"):
        guards.nothing_patched(p, sample)
    monkeypatch.setattr(guards, "replace", lambda site, layer, value, unit=None: real_replace(
        site, layer, value.roll(1, dims=0), unit))             # another prompt's activation
    with pytest.raises(guards.GuardError, match="everything_patched"):
        guards.everything_patched(p, sample)
    monkeypatch.undo()
    monkeypatch.setattr(guards, "replace", lambda site, layer, value, unit=None: real_replace(
        site, layer, value, (unit + 1) % p.adapter.n_heads))  # the head's z into the next head's slot
    with pytest.raises(guards.GuardError, match="clean_to_clean"):
        guards.clean_to_clean(p, sample, [(1, 0)])
    monkeypatch.undo()
    patches = head_patches(p.adapter)[:2]
    off = p.run(patches)[:, sample] + 1e-4
    with pytest.raises(guards.GuardError, match="batched_vs_loop: .* past its bound") as failed:
        batched_vs_loop(p.against_loop(patches, off, sample), rounding(p.adapter, 1.0, p.largest_logit),
                        "logit difference")
    assert failed.value.record["ratio"] > 10 and not failed.value.record["passed"]
    assert isinstance(guards.GuardError("x"), InterventionError)


# ------------------------------------------------------------------ the score, by hand
def test_one_head_score_equals_two_runs_written_out(model):
    """Patching head (1, 2): the clean run's input of layer 1's output projection, that head's
    columns, put into the corrupted run by a plain forward pre-hook; the logit difference at the
    last position, normalized by the clean and corrupted runs'."""
    p = _patcher(model)
    a = p.adapter
    layer, head = 1, 2
    cols = slice(head * a.head_dim, (head + 1) * a.head_dim)
    proj = a.out_proj(layer)
    rows = torch.arange(4)
    seen = {}
    with torch.no_grad():
        h = proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("z", args[0].clone()))
        clean = model(p.prompts.clean).logits[:, -1]
        h.remove()

        def put(m, args):
            z = args[0].clone()
            z[..., cols] = seen["z"][..., cols]
            return (z,)
        corrupted = model(p.prompts.corrupted).logits[:, -1]
        h = proj.register_forward_pre_hook(put)
        patched = model(p.prompts.corrupted).logits[:, -1]
        h.remove()
    ld = [float((x[rows, p.prompts.answer] - x[rows, p.prompts.distractor]).double().mean())
          for x in (clean, corrupted, patched)]
    by_hand = (ld[2] - ld[1]) / (ld[0] - ld[1])
    got = p.score(p.run([Patch("z", layer, head)]).double().mean(dim=1).numpy())[0]
    assert abs(p.clean_mean - ld[0]) < 1e-5 and abs(p.corrupted_mean - ld[1]) < 1e-5
    assert abs(got - by_hand) < 1e-4 * max(1.0, abs(by_hand)), (got, by_hand)


def test_estimate_equals_exact_on_a_linear_model():
    """Norms replaced by the identity, queries and keys zero (a fixed uniform causal pattern),
    MLPs silent: the logit difference is affine in every head's z, so attribution patching's
    first-order estimate is the patched logit difference itself."""
    model = tiny_model("llama")
    with torch.no_grad():
        for block in model.model.layers:
            block.input_layernorm = nn.Identity()
            block.post_attention_layernorm = nn.Identity()
            block.self_attn.q_proj.weight.zero_()
            block.self_attn.k_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
            block.self_attn.v_proj.weight.mul_(10.0)       # without norms the stream is small: scale it up
            block.self_attn.o_proj.weight.mul_(10.0)
        model.model.norm = nn.Identity()
        model.model.embed_tokens.weight.mul_(10.0)
    p = _patcher(model)
    exact = p.run(head_patches(p.adapter)).double().mean(dim=1).numpy() - p.corrupted_mean
    estimate = attribution_patching(model, p.adapter, p.prompts, batch=3).numpy().ravel()
    assert np.abs(exact).max() > 1e-3                      # the heads do move the answer
    np.testing.assert_allclose(estimate, exact, rtol=1e-4, atol=1e-6)


def test_a_capture_with_grad_is_the_sites_own_tensor():
    model = tiny_model("gpt2")
    a = Adapter(model)
    ids = random_ids(2, 6)
    with intervene(a, [capture("z", 1, grad=True), capture("resid_in", 2, grad=True)]) as cap:
        out = a.logits(ids)[:, -1, 3].sum()
        z, r = cap.one(("z", 1, None)), cap.one(("resid_in", 2, None))
        gz, gr = torch.autograd.grad(out, [z, r])
    assert z.requires_grad and gz.shape == z.shape and gr.shape == r.shape and gz.abs().max() > 0
    for bad in (dict(unit=0), dict(rows=torch.ones(2, dtype=torch.bool))):
        with pytest.raises(InterventionError, match="can keep its gradient"):
            with intervene(a, [capture("z", 1, grad=True, **bad)]):
                pass
    with pytest.raises(InterventionError, match="can keep its gradient"):      # not in GRAD_SITES
        with intervene(a, [capture("mlp_out", 1, grad=True)]):
            pass


# ------------------------------------------------------------------ prompts and the config check
def test_prompts_are_abba_and_baba_with_a_corrupted_abc_twin(smollm2_tokenizer):
    tok = smollm2_tokenizer
    table, note = prompt_set(tok, SETTINGS)
    assert len(table) == 8 and list(table.order) == ["ABBA", "BABA"] * 4
    assert list(table.template) == [0, 0, 1, 1, 2, 2, 3, 3]
    for r in table.itertuples():
        a, b, c = r.clean_names
        assert (a, b, c) == ((r.io, r.s, r.s) if r.order == "ABBA" else (r.s, r.io, r.s))
        assert len(set(r.corrupted_names)) == 3 and not {r.io, r.s} & set(r.corrupted_names)
        assert len(r.clean_ids) == len(r.corrupted_ids) == note["length"]
        assert [r.answer_id] == tok(" " + r.io, add_special_tokens=False).input_ids
        at = note["slot_positions"]
        assert [r.clean_ids[at[k]] for k in "ABC"] == [r.answer_id, r.distractor_id, r.distractor_id] if r.order == "ABBA" else \
            [r.distractor_id, r.answer_id, r.distractor_id]
        assert tok.decode(list(r.clean_ids)) == r.clean_text
    labels = position_labels(table)
    assert [labels[note["slot_positions"][k]] for k in "ABC"] == ["{A}", "{B}", "{C}"]
    assert labels[-1] == "␣to" and "/" in labels[0]            # When/After/While/As
    again, _ = prompt_set(tok, SETTINGS)
    assert again.equals(table)                                 # seeded


def test_settings_are_typed_and_name_what_is_missing_or_unknown():
    """PatchingSettings types every key under patching: of the shipped config (a key it does not
    know is refused), a rule whose slice lacks a key its job reads is told which, and the module
    (with the pre-job checks) starts without torch, numpy or pandas."""
    import subprocess
    import sys

    s = PatchingSettings.from_config(CONFIG["patching"])
    assert s.templates == tuple(CONFIG["patching"]["templates"]) and isinstance(s.rounding_factor, float)
    assert {name: getattr(s, name) for name in CONFIG["patching"]} == {
        k: tuple(v) if isinstance(v, list) else v for k, v in CONFIG["patching"].items()}
    with pytest.raises(ValueError, match=r"patching: unknown key\(s\) \['guard_prompt'\]"):
        PatchingSettings.from_config(dict(CONFIG["patching"], guard_prompt=4))
    prompts_only = PatchingSettings.from_config({k: CONFIG["patching"][k] for k in ("n", "seed", "templates", "names")})
    assert prompts_only.need("n", "names") is prompts_only and prompts_only.top_k is None
    with pytest.raises(ValueError, match="patching: top_k, batch not in this rule's settings"):
        prompts_only.need("top_k", "batch", "n")
    code = ("import sys; import headwatch.settings.patching, headwatch.settings.ablation; "
            "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_patching_errors_name_the_name_the_template_and_the_model(smollm2_tokenizer):
    facts = SimpleNamespace(tokenizer=smollm2_tokenizer, key="m1", shape=dict(layers=2, heads=2, context=512))
    config = dict(CONFIG, models_studied=["m1"], patching=dict(PARAMS, top_k=5, names=PARAMS["names"] + [
        "Maryland-upon-Thames"], templates=PARAMS["templates"] + ["Then {A} and {B} went to the school, and {C} "
                                                                  "gave a book to", "{A} met {B} and {C}"]))
    errors = patching_errors(config, facts)
    text = "\n".join(errors)
    assert ("patching.names[20] ('Maryland-upon-Thames' with its leading space) = ' Maryland-upon-Thames' "
            "is split") in text
    assert "(model m1)" in text
    assert "patching.templates[5] = '{A} met {B} and {C}': {A} must follow a space" in text
    assert "patching.top_k = 5: model m1 has 4 heads" in text
    config["patching"]["names"] = PARAMS["names"]
    text = "\n".join(patching_errors(dict(config, patching=dict(config["patching"], templates=config["patching"][
        "templates"][:5])), facts))
    assert "patching.templates[4] = 'Then {A} and {B} went to the school, and {C} gave a book to': 15 tokens" in text
    assert "(model m1)" in text and "patching.templates[0] gives 14 tokens" in text
    ok = dict(config, patching=dict(PARAMS))
    assert patching_errors(ok, facts) == []
    assert "must name a phrase" in "\n".join(patching_errors(dict(ok, patching=dict(PARAMS, phrase="french")), facts))
    second = SimpleNamespace(**dict(facts.__dict__, key="m2"))
    assert patching_errors(dict(ok, models_studied=["m1", "m2"], patching=dict(PARAMS, phrase="french")), second) == []


def test_a_split_name_stops_the_config_check_before_any_job(tiny_model_dir, tmp_path):
    from headwatch.config import ConfigError, check_config

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "schema.yaml").write_text((ROOT / "config" / "schema.yaml").read_text())
    config = dict(CONFIG, models={"tiny-llama": {"source": str(tiny_model_dir), "dtype": "float32"}},
                  models_studied=["tiny-llama"], patching=dict(PARAMS, names=PARAMS["names"] + ["Zzxqvbnmk"]),
                  anatomy=dict(CONFIG["anatomy"], references=[], clocks=[], swap_base={}),
                  report=dict(CONFIG["report"], explorer=dict(CONFIG["report"]["explorer"], rotary_references=[])))
    with pytest.raises(ConfigError, match=r"patching\.names\[20\] .*'Zzxqvbnmk'.* \(model tiny-llama\)"):
        check_config(config, tmp_path, cache=False)
