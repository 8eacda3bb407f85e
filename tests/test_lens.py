"""The lens (protocol §5h): direct effects and their sum guard on every family, the logit lens, the
weights' circuits against their formulas on the dense matrices, the nulls, the verdicts' rules, the
known circuit ranked first by the weights, and the public functions' refusals before any model pass."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

import headwatch as hw
from conftest import ROOT
from headwatch.guards import GuardError
from headwatch.lens import composition as C
from headwatch.lens import direct as D
from headwatch.lens.prediction import (MIN_PAIRS, explorer_panel, spearman, verdict,
                                       weights_vs_activations)
from headwatch.model.arch import Adapter
from headwatch.model.interventions import capture, in_float64, intervene
from headwatch.settings.lens import LensSettings
from tiny import ALL_FAMILIES, CHARLM_VARIANTS, patching_prompts, tiny_model

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
SETTINGS = LensSettings(batch=3, rounding_factor=1.0, qk_offset=0, null_draws=30, bootstrap=300, confidence=0.95,
                        seed=0)


def _prompts(n: int = 4, length: int = 10) -> pd.DataFrame:
    p = patching_prompts(n, length)
    return pd.DataFrame(dict(clean_ids=p.clean.tolist(), corrupted_ids=p.corrupted.tolist(), answer_id=p.answer.tolist(),
                             distractor_id=p.distractor.tolist(), tokens=[[f"t{t}" for t in x] for x in p.clean.tolist()]))


# ------------------------------------------------------------------ direct effects by hand
@torch.no_grad()
def test_a_one_layer_models_terms_by_hand():
    """One Llama block (grouped keys) by hand in float64 from its weights and the attention weights it
    computed: each head's z = its pattern times its group's values, its output z · W_O's columns, read
    through the final RMSNorm's weight and scale and the answer − distractor rows; the MLP's and the
    embedding's the same; they are the table's clean terms, and their sum the logit difference."""
    model = tiny_model("llama", layers=1)
    a = Adapter(model)
    prompts = _prompts(3, 8)
    with in_float64(a):                     # every step in float64, transformers' float32 RMSNorms included
        table, _, _, note, _ = D.direct_effects(model, a, prompts, SETTINGS)
        _by_hand(model, a, prompts, table, note)


def _by_hand(model, a, prompts, table, note):
    ids = torch.tensor(prompts["clean_ids"].tolist())
    answer, distractor = torch.tensor(prompts["answer_id"].tolist()), torch.tensor(prompts["distractor_id"].tolist())
    with intervene(a, [capture("pattern", 0)]) as cap:
        logits = model(ids).logits[:, -1]
    P = cap.one(("pattern", 0, None))                                     # [B, heads, T, T]
    blk, H, d = model.model.layers[0], a.n_heads, a.head_dim
    x = model.model.embed_tokens(ids)
    rms = lambda v, n: v / torch.sqrt((v * v).mean(-1, keepdim=True) + n.variance_epsilon) * n.weight
    values = rms(x, blk.input_layernorm) @ blk.self_attn.v_proj.weight.T   # [B, T, groups·d]
    outs = []
    for h in range(H):
        g = h // a.group_size
        z = torch.einsum("bt,btd->bd", P[:, h, -1], values[..., g * d:(g + 1) * d])   # the last position's
        outs.append(z @ blk.self_attn.o_proj.weight[:, h * d:(h + 1) * d].T)
    x1 = x[:, -1] + sum(outs)
    mlp = blk.mlp(rms(x1, blk.post_attention_layernorm))
    final = x1 + mlp
    n = model.model.norm
    direction = n.weight * (model.lm_head.weight[answer] - model.lm_head.weight[distractor])
    scale = torch.sqrt((final * final).mean(-1) + n.variance_epsilon)
    by_hand = {f"L0H{h}": float(((o * direction).sum(-1) / scale).mean()) for h, o in enumerate(outs)}
    by_hand["L0 mlp"] = float(((mlp * direction).sum(-1) / scale).mean())
    by_hand["embed"] = float(((x[:, -1] * direction).sum(-1) / scale).mean())
    got = table.set_index("component")["clean"]
    assert list(got.index) == ["embed", *(f"L0H{h}" for h in range(H)), "L0 mlp"]
    for name, want in by_hand.items():
        assert got[name] == pytest.approx(want, abs=1e-12), name
    ld = logits.gather(1, answer[:, None])[:, 0] - logits.gather(1, distractor[:, None])[:, 0]
    assert got.sum() == pytest.approx(float(ld.mean()), abs=1e-12)
    assert note["clean_logit_diff"] == pytest.approx(got.sum(), abs=1e-12)


@pytest.mark.parametrize("family", [*ALL_FAMILIES, *CHARLM_VARIANTS])
def test_the_terms_sum_to_the_logit_difference_on_every_family(family):
    """Every family (grouped keys, fused projections, learned positions, LayerNorm's mean, Gemma's offset
    norms and post-norms and soft-cap, OLMo 2's post-norms, GPT-J's parallel block): the guard holds in
    float32 within its bound, and in float64 the sum is the model's logit difference to 1e-10 of its size (the
    soft-capped through the cap); the lens at the last depth is the model's output."""
    model = tiny_model(family)
    a = Adapter(model)
    prompts = _prompts()
    table, _, lens, note, guards = D.direct_effects(model, a, prompts, SETTINGS, lens=True)
    assert guards["sum_is_logit_diff"]["passed"] and guards["lens_is_the_output"]["passed"]
    assert guards["sum_is_logit_diff"]["components"] == len(table)
    kinds = set(table["kind"])
    assert ("position" in kinds) == (family in ("gpt2", "gpt_neo", "charlm"))
    assert ("attention bias" in kinds) == (family in ("gpt_neox", "gpt2", "gpt_neo"))
    assert ("unembedding bias" in kinds) == (family == "gptj")
    assert len(table[table["kind"] == "head"]) == a.n_layers * a.n_heads
    assert set(lens["depth"]) == set(range(a.n_layers + 1)) and set(lens["run"]) == {"clean", "corrupted"}
    with in_float64(a):
        *_, exact, exact_guards = D.direct_effects(model, a, prompts, SETTINGS)
    worst = exact_guards["sum_is_logit_diff"]["max_abs_diff"]
    assert worst <= 1e-10 * max(1.0, abs(exact["clean_logit_diff"])), worst
    assert exact_guards["sum_is_logit_diff"]["rounding"]["dtype"] == "float64"


@pytest.mark.parametrize("family, broken", [("llama", "scale"), ("gpt2", "mean"), ("gemma2", "softcap"),
                                            ("olmo2", "post-norm")])
def test_a_wrong_decomposition_fails_the_guard_and_the_table_rides_on_it(family, broken, monkeypatch):
    """The final norm's scale 0.1 % off, a LayerNorm's mean left in, Gemma 2's soft-cap left out, OLMo 2's
    norm after attention read as if absent: each moves the sum far past the bound, and the guard's error
    carries the table the call made."""
    model = tiny_model(family)
    a = Adapter(model)
    if broken == "scale":
        real = D._scale
        monkeypatch.setattr(D, "_scale", lambda x, p: real(x, p) * 1.001)
    elif broken == "mean":
        real_through = D._through
        monkeypatch.setattr(D, "_through", lambda d, p, s: real_through(d, dict(p, kind="RMSNorm", offset=0.0), s))
    elif broken == "softcap":
        monkeypatch.setattr(D.Reader, "capped", lambda self, x: x)
    else:
        monkeypatch.setattr(type(a), "attn_out_norm", lambda self, layer: None)
    with pytest.raises(GuardError, match="sum_is_logit_diff") as err:
        D.direct_effects(model, a, _prompts(), SETTINGS)
    assert err.value.record["ratio"] > 10, err.value.record
    assert list(err.value.table.columns[:4]) == ["component", "kind", "layer", "head"]


def test_each_head_beside_its_total_effect_by_hand():
    """direct 1, total 3: indirect 2, share 2/3, mostly through others when among the top heads; a share of
    exactly 1/2 is not "mostly"; a head outside the top k is never named."""
    direct = pd.DataFrame(dict(component=["L0H0", "L0H1", "L1H0", "L1H1"], kind="head", layer=[0, 0, 1, 1],
                               head=[0, 1, 0, 1], clean=0.0, corrupted=0.0, direct=[1.0, 1.0, 2.0, -1.0],
                               direct_sem=0.0))
    heads = pd.DataFrame(dict(layer=[0, 0, 1, 1], head=[0, 1, 0, 1], score=[0.9, 0.1, 0.5, 0.8],
                              logit_diff=[3.5, 2.5, 2.5, 3.5], score_rank=[1, 4, 3, 2]))
    t = D.beside_patching(direct, heads, corrupted=0.5, top_k=3).set_index("label")
    assert t.loc["L0H0", "total"] == 3.0 and t.loc["L0H0", "indirect"] == 2.0
    assert t.loc["L0H0", "indirect_share"] == pytest.approx(2 / 3) and t.loc["L0H0", "through_others"]
    assert t.loc["L1H0", "indirect_share"] == 0.0 and not t.loc["L1H0", "through_others"]
    assert t.loc["L1H1", "indirect_share"] == pytest.approx(4 / 5) and t.loc["L1H1", "through_others"]
    assert t.loc["L0H1", "indirect_share"] == pytest.approx(1 / 2) and not t.loc["L0H1", "through_others"]
    assert not D.beside_patching(direct, heads, 0.5, top_k=1).set_index("label").loc["L1H1", "through_others"]
    assert D.THROUGH_OTHERS == 0.5
    assert (t["share_low"] == t["indirect_share"]).all() and (t["share_high"] == t["indirect_share"]).all()
    assert list(t["resolved"]) == [True, False, True, True]      # without a spread; 1/2 itself is on no side
    # direct 1 ± 1 (q = 1 at 68.27 %), total 3: the share runs from 1/3 (direct 2) to 1 (direct 0)
    low, high = D.share_interval(np.array([1.0]), np.array([1.0]), np.array([3.0]), 0.682689492)
    assert low[0] == pytest.approx(1 / 3, abs=1e-6) and high[0] == pytest.approx(1.0)
    wide = D.beside_patching(direct.assign(direct_sem=1.0), heads, 0.5, top_k=3, confidence=0.682689492)
    assert not wide.set_index("label").loc["L0H0", "resolved"]          # 1/3 … 1 meets 1/2


PEAK = """
import resource, sys
sys.path.insert(0, {tests!r})
import pandas as pd, torch
torch.set_num_threads(1)
from headwatch.config.memory import lens_estimate
from headwatch.lens import direct as D
from headwatch.model.arch import Adapter
from headwatch.settings.lens import LensSettings
from tiny import random_ids, tiny_model
B, T, V = 4, 64, 16384
model = tiny_model("llama", vocab=V)
a = Adapter(model)
clean = random_ids(B, T, V, seed=1)
corrupted = clean.clone()
corrupted[:, [2, 4, 7]] = random_ids(B, 3, V, seed=2)
prompts = pd.DataFrame(dict(clean_ids=clean.tolist(), corrupted_ids=corrupted.tolist(),
                            answer_id=random_ids(1, B, V, seed=3)[0].tolist(),
                            distractor_id=random_ids(1, B, V, seed=4)[0].tolist(),
                            tokens=[[f"t{{t}}" for t in x] for x in clean.tolist()]))
s = LensSettings(batch=B, rounding_factor=1.0)
D.direct_effects(model, a, prompts.head(1), s, lens=True)          # every import and first call done
start = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
D.direct_effects(model, a, prompts, s, lens=True)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
shape = dict(layers=a.n_layers, heads=a.n_heads, width=a.width, head_dim=a.head_dim, vocab=V)
e = lens_estimate("the lens", B, T, shape, 0, True, B, dict(batch=("batch", ""), prompts=("prompts", "")))
print(peak - start, e["bytes"], e["parts"]["the lens's logits at a depth"])
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_the_logit_lens_memory_estimate_is_a_lower_bound_of_its_peak():
    """The estimate a logit lens call is refused by (headwatch/config/memory.py) is a lower bound of the memory
    it holds: in a fresh process, the resident peak of the lens of 4 prompts × 64 positions × 16,384 tokens above
    the call's start is at least the estimate, which counts a depth's logits in float32 beside their float64
    copy and its softmax (20 bytes a logit: 80 MiB here)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PEAK.format(tests=str(ROOT / "tests"))], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    peak, estimate, depth = (int(x) for x in out.stdout.split()[-3:])
    assert depth == 4 * 64 * 16384 * 20 and estimate <= peak, (estimate, peak)


# ------------------------------------------------------------------ the weights' circuits by hand
def _dense(model, family: str):
    """Each layer's (W_Q, W_K, W_V, W_O) per head, float64, from the module weights by hand: the input
    norm's weight on the reading matrices' rows, and for a LayerNorm family every reading matrix centred
    over the width and every writing one across it; and the processed (W_E, W_U)."""
    if family == "llama":
        blocks, heads, groups = model.model.layers, model.config.num_attention_heads, model.config.num_key_value_heads
        E, U, wf = model.model.embed_tokens.weight, model.lm_head.weight, model.model.norm.weight
        parts = lambda b: (b.self_attn.q_proj.weight, b.self_attn.k_proj.weight, b.self_attn.v_proj.weight,
                           b.self_attn.o_proj.weight, b.input_layernorm.weight)
    else:                                                     # the sweep's character model: LayerNorms
        blocks, heads, groups = model.blocks, model.heads, model.kv_heads
        E, U, wf = model.tok.weight, model.head.weight, model.ln_f.weight
        parts = lambda b: (b.attn.q.weight, b.attn.k.weight, b.attn.v.weight, b.attn.o.weight, b.ln1.weight)
    ln = family != "llama"
    centre_rows = (lambda x: x - x.mean(0, keepdim=True)) if ln else (lambda x: x)
    centre_cols = (lambda x: x - x.mean(1, keepdim=True)) if ln else (lambda x: x)
    d = blocks[0].self_attn.head_dim if family == "llama" else model.head_dim
    layers = []
    for b in blocks:
        q, k, v, o, w = (t.detach().double() for t in parts(b))
        per = lambda m, i: centre_rows(w[:, None] * m[i * d:(i + 1) * d].T)
        layers.append(([per(q, h) for h in range(heads)], [per(k, g) for g in range(groups)],
                       [per(v, g) for g in range(groups)], [centre_cols(o[:, h * d:(h + 1) * d].T) for h in range(heads)]))
    E = E.detach().double()
    E = E - E.mean(1, keepdim=True) if ln else E
    U = U.detach().double().T * wf.detach().double()[:, None]
    return layers, E, U - U.mean(1, keepdim=True), heads // groups


@pytest.mark.parametrize("family", ["llama", "charlm"])
def test_composition_and_copying_scores_are_the_formulas_on_the_dense_matrices(family):
    """Every pair's Q-, K- and V-composition score ||OV_A W_B|| / (||OV_A|| ||W_B||) from the width × width
    matrices by hand; a key or value path's the receiver's group's QK (OV) matrices side by side; each
    head's copying score from the eigenvalues of the vocabulary × vocabulary OV circuit — as the factored
    forms give them (grouped keys and values in both; RMSNorm and LayerNorm)."""
    model = tiny_model(family, layers=3)
    a = Adapter(model)
    heads, comp, _, _ = C.weight_circuits(a, SETTINGS)
    layers, E, U, n = _dense(model, family)
    fro = lambda m: float(torch.linalg.matrix_norm(m))
    got = comp.set_index(["sender_layer", "sender_head", "receiver_layer", "receiver_head", "input"])
    assert len(comp) == 3 * (a.n_heads ** 2) * 3          # 3 inputs × (L0→L1, L0→L2, L1→L2) × heads²
    for la, lb in ((0, 1), (0, 2), (1, 2)):
        Q, K, V, O = layers[lb]
        for ha in range(a.n_heads):
            A = layers[la][2][ha // n] @ layers[la][3][ha]
            for hb in range(a.n_heads):
                g = hb // n
                qk = [Q[x] @ K[g].T for x in range(g * n, (g + 1) * n)]
                ov = [V[g] @ O[x] for x in range(g * n, (g + 1) * n)]
                mine = Q[hb] @ K[g].T
                want = dict(q=fro(A @ mine) / (fro(A) * fro(mine)), k=fro(A @ mine.T) / (fro(A) * fro(mine)),
                            v=fro(A @ V[g] @ O[hb]) / (fro(A) * fro(V[g] @ O[hb])))
                group = dict(k=fro(torch.cat([A @ m.T for m in qk], 1)) / (fro(A) * fro(torch.cat(qk, 1))),
                             v=fro(torch.cat([A @ m for m in ov], 1)) / (fro(A) * fro(torch.cat(ov, 1))))
                for i in "qkv":
                    row = got.loc[(la, ha, lb, hb, i)]
                    assert row["head_score"] == pytest.approx(want[i], rel=1e-9), (la, ha, lb, hb, i)
                    assert row["score"] == pytest.approx(want[i] if i == "q" else group[i], rel=1e-9)
    for r in heads.itertuples():
        Q, K, V, O = layers[r.layer]
        lam = torch.linalg.eigvals(E @ V[r.head // n] @ O[r.head] @ U)
        assert r.ov_copying == pytest.approx(float(lam.sum().real / lam.abs().sum()), abs=1e-8)
        lam = torch.linalg.eigvals(E @ Q[r.head] @ K[r.head // n].T @ E.T)
        assert r.qk_same_token == pytest.approx(float(lam.sum().real / lam.abs().sum()), abs=1e-8)


def test_a_hand_made_matrix_shares_and_an_offsets_rotation():
    """Σλ / Σ|λ| of diag(1, −1, 2) is 2/4; the QK matrix at offset Δ turns a query Δ positions after its key
    exactly as the rotary embedding turns both: (q R_{i+Δ}) · (k R_i) = q R(Δ) kᵀ at every i."""
    from headwatch.model.recompute import apply_rotary

    assert C._shares(torch.diag(torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64))[None])[0] == pytest.approx(0.5)
    model = tiny_model("charlm-rotary")
    a = Adapter(model)
    r = a.rope(0)
    R = C.rotation(a, 0, 3)
    q, k = torch.randn(2, a.head_dim, dtype=torch.float64)
    for i in (0, 5, 11):
        turned_q = apply_rotary(q.expand(i + 4, -1), r["dims"], r["base"], r["layout"], r["factor"])[i + 3]
        turned_k = apply_rotary(k.expand(i + 1, -1), r["dims"], r["base"], r["layout"], r["factor"])[i]
        assert float(turned_q @ turned_k) == pytest.approx(float(q @ R @ k), abs=1e-10)
    assert torch.equal(C.rotation(a, 0, 0), torch.eye(a.head_dim, dtype=torch.float64))


def test_the_nulls_shape_and_seed():
    """One row per input and kind, of the draws asked for, reproducible from its seed; a receiving group of
    one head is its head; with three heads a key or value path's null is the group's own; the null's mean
    lies between its 5 % and 95 % quantiles."""
    shape = dict(width=64, head_dim=16)
    one, again = C.composition_null(shape, 1, 40, seed=3), C.composition_null(shape, 1, 40, seed=3)
    pd.testing.assert_frame_equal(one, again)
    assert not C.composition_null(shape, 1, 40, seed=4)["mean"].equals(one["mean"])
    assert sorted(zip(one["score"], one["kind"])) == sorted((f"composition {i}", k) for i in "qkv"
                                                             for k in ("head", "path"))
    assert (one["draws"] == 40).all() and (one["sd"] > 0).all() and ((one["q05"] < one["mean"]) & (one["mean"] < one["q95"])).all()
    s = one.set_index(["score", "kind"])
    for i in "qkv":
        assert s.loc[(f"composition {i}", "head"), "mean"] == s.loc[(f"composition {i}", "path"), "mean"]
    three = C.composition_null(shape, 3, 40, seed=3).set_index(["score", "kind"])
    for i in "kv":
        assert three.loc[(f"composition {i}", "path"), "mean"] != three.loc[(f"composition {i}", "head"), "mean"]
    assert three.loc[("composition q", "path"), "mean"] == three.loc[("composition q", "head"), "mean"]


def test_the_nulls_drawn_a_chunk_at_a_time_are_those_drawn_at_once():
    """A null's memory does not grow with its draws: scored a chunk of draws at a time, down to one draw a
    chunk, its random matrices are the rows of those drawn whole, number for number, and so are its
    rows; the chunk is as many draws as the budget holds, on a block of 16 numbers of the whole tensor."""
    g = torch.Generator().manual_seed(5)
    shapes = [(6, 5), (3, 6, 5), (5, 6)]             # 30 numbers a draw: a piece starts on a block every 8 draws
    whole = [torch.randn(37, *x, generator=g, dtype=torch.float64) for x in shapes]
    for chunk in (8, 16, 37):
        pieces = list(C.null_draws(5, shapes, 37, chunk))
        assert len(pieces) == -(-37 // chunk)
        for k in range(3):
            assert torch.equal(torch.cat([m[k] for m in pieces]), whole[k])
    assert C.chunk_of([30, 90, 30], 37, budget=1) == 8 and C.chunk_of([32, 64], 37, budget=1) == 1
    assert C.chunk_of([30, 90, 30], 37, budget=8 * 150 * 17) == 16 and C.chunk_of([32], 37) == 37
    for n, shape in ((1, dict(width=64, head_dim=16)), (3, dict(width=24, head_dim=5))):
        once = C.composition_null(shape, n, 45, 3)
        for budget in (1, 8 * 24 * 5 * 12 * 10):
            pd.testing.assert_frame_equal(C.composition_null(shape, n, 45, 3, budget=budget), once, check_exact=True)
    a = Adapter(tiny_model("llama"))
    layers = [C.layer_weights(a, l) for l in range(a.n_layers)]
    heads, null = C.head_scores(a, layers, SETTINGS)
    chunked_heads, chunked_null = C.head_scores(a, layers, SETTINGS, budget=1)
    pd.testing.assert_frame_equal(chunked_heads, heads, check_exact=True)
    pd.testing.assert_frame_equal(chunked_null, null, check_exact=True)


def test_every_seed_the_schema_takes_gives_every_stream_its_own():
    """lens.seed from 0 to 2^32 − 1: each of a call's streams (the composition null and the bootstrap, the
    copying null, the verdict's pairings) gets a seed numpy and torch take, distinct within the call, the
    same as before (seed + stream) below 2^32 − stream; the top seeds run the whole verdict."""
    from headwatch.settings.lens import stream_seed

    assert [stream_seed(7, k) for k in range(3)] == [7, 8, 9]
    assert [stream_seed(2 ** 32 - 1, k) for k in range(3)] == [2 ** 32 - 1, 0, 1]
    assert [stream_seed(2 ** 32 - 2, k) for k in range(3)] == [2 ** 32 - 2, 2 ** 32 - 1, 0]
    x = np.arange(20.0)
    for seed in (2 ** 32 - 1, 2 ** 32 - 2):
        top = LensSettings(**{**SETTINGS.__dict__, "seed": seed})
        row = verdict(x, x ** 3, top, "c", "weights", "paths")
        assert row["resolved"] and row["verdict"].startswith("yes"), row
        a = Adapter(tiny_model("llama", layers=2))
        heads, comp, null, _ = C.weight_circuits(a, top)
        assert null["seed"].between(0, 2 ** 32 - 1).all() and heads["ov_copying_z"].notna().all()
    from scipy.stats import bootstrap

    y = np.sin(x)        # a small seed draws as it did: the bootstrap from seed itself
    want = bootstrap((x, y), spearman, paired=True, vectorized=True, n_resamples=SETTINGS.bootstrap,
                     confidence_level=SETTINGS.confidence, method="percentile", random_state=SETTINGS.seed)
    got = verdict(x, y, SETTINGS, "c", "weights", "paths")
    assert (got["low"], got["high"]) == tuple(float(v) for v in want.confidence_interval)


# ------------------------------------------------------------------ the verdicts
def test_spearman_and_the_verdicts_rules():
    """ρ is scipy's spearmanr (ties averaged); a monotone relation is a yes, a reversed one a no, too few
    pairs or a constant side not resolved, and independent numbers not resolved either."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, 30), rng.normal(size=30)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    x = np.arange(40.0)
    yes = verdict(x, x ** 2, SETTINGS, "c", "weights", "paths")
    assert yes["resolved"] and yes["verdict"].startswith("yes") and yes["low"] > yes["null_high"]
    no = verdict(x, -x, SETTINGS, "c", "weights", "paths")
    assert no["resolved"] and no["verdict"].startswith("no") and no["high"] < no["null_low"]
    noise = verdict(x, rng.normal(size=40), SETTINGS, "c", "weights", "paths")
    assert not noise["resolved"] and noise["verdict"].startswith("not resolved") and noise["low"] <= noise["null_high"]
    few = verdict(x[:MIN_PAIRS - 1], x[:MIN_PAIRS - 1], SETTINGS, "c", "weights", "paths")
    assert not few["resolved"] and "fewer than" in few["verdict"]
    flat = verdict(x, np.ones(40), SETTINGS, "c", "weights", "paths")
    assert not flat["resolved"] and "does not vary" in flat["verdict"]


def test_resamples_and_pairings_in_batches_are_those_drawn_at_once():
    """The verdict's memory does not grow with lens.bootstrap or lens.null_draws: its resamples and pairings
    drawn in batches of any size (down to one) give the interval, the null's range and p-value drawn at once."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=60)
    y = x + rng.normal(size=60)
    once = verdict(x, y, SETTINGS, "c", "weights", "paths", numbers=10 ** 9)
    for numbers in (1, 60 * 7, 60 * 299):
        assert verdict(x, y, SETTINGS, "c", "weights", "paths", numbers=numbers) == once


def test_a_key_or_value_path_counts_once_per_group_of_heads():
    """Path patching gives every head of a key/value group the group's key and value path, one measurement under
    each head's name: the verdict counts it once per (sender, group, input) — the composition table's group, its
    score the group's — and a query path once per head; the note says how many paths were read."""
    a = Adapter(tiny_model("llama"))                      # 4 heads, 2 key/value groups
    _, comp, _, _ = C.weight_circuits(a, SETTINGS)
    size = lambda s: float(np.cos(3 * s.sender_layer + s.sender_head + (s.receiver_head if s.input == "q" else 0)
                                  + ord(s.input)))

    def paths(receivers):
        rows = comp[comp["receiver_layer"].eq(2) & comp["receiver_head"].isin(receivers)].copy()
        return rows.assign(score=[size(r) for r in rows.itertuples()])[
            ["sender", "sender_layer", "sender_head", "receiver", "receiver_layer", "receiver_head", "input", "score"]]
    both, one = paths([0, 1]), paths([0])
    got, _, note = weights_vs_activations(comp, both, SETTINGS)
    want, _, _ = weights_vs_activations(comp, one, SETTINGS)
    got, want = got.set_index("comparison"), want.set_index("comparison")
    for i in "kv":
        row = f"composition vs path patching ({i})"
        assert got.loc[row].equals(want.loc[row]) and got.loc[row, "n"] == (one["input"] == i).sum() == 8
    q = "composition vs path patching (q)"
    assert got.loc[q, "n"] == 2 * want.loc[q, "n"] == (both["input"] == "q").sum()
    assert note["edges"] == len(both) == 48 and note["paths_read"] == 32 and "32 of the 48 paths" in note["counted"]
    with pytest.raises(hw.TableError, match="no key/value group"):
        weights_vs_activations(comp.assign(group=pd.NA), both, SETTINGS)


def test_scores_of_another_model_are_refused():
    """The copying score against the induction score reads one row per head of the circuits' model: a scores
    table of another model (30 layers × 9 heads, or 4 rows of this one) is refused, not read on its overlap."""
    a = Adapter(tiny_model("llama"))
    heads, comp, _, _ = C.weight_circuits(a, SETTINGS)
    paths = comp[comp["receiver_layer"] == 2].assign(score=0.5)
    scores = lambda L, H: pd.DataFrame(dict(layer=np.repeat(np.arange(L), H), head=np.tile(np.arange(H), L),
                                            induction=np.linspace(0, 1, L * H)))
    assert len(weights_vs_activations(comp, paths, SETTINGS, heads, scores(3, 4))[0]) == 5
    for other, said in ((scores(30, 9), "270 rows, L0H4 among them"), (scores(3, 4).head(4), "4 rows")):
        with pytest.raises(hw.TableError, match=f"scores has {said}, not one per head of the circuits' model "
                                                r"\(3 layers × 4 heads\)"):
            weights_vs_activations(comp, paths, SETTINGS, heads, other)


def test_paths_of_another_model_are_refused():
    from headwatch.settings.lens import LensError

    a = Adapter(tiny_model("llama"))
    _, comp, _, _ = C.weight_circuits(a, SETTINGS)
    paths = pd.DataFrame(dict(sender="L0H0", sender_layer=[0], sender_head=[0], receiver="L7H0", receiver_layer=[7],
                              receiver_head=[0], input=["q"], score=[0.3]))
    with pytest.raises(LensError, match="different models"):
        weights_vs_activations(comp, paths, SETTINGS)


# ------------------------------------------------------------------ the known circuit (§5f)
# ------------------------------------------------------------------ the public functions
@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    hw.set_progress(False)
    return hw.load_model(tiny_model_dir)


PAIRS = dict(clean=["When Mary and John went to the shop, John gave a drink to",
                    "Then Ann and Tom sat down, and Tom handed it to"],
             corrupted=["When Alice and Bob went to the shop, Tom gave a drink to",
                        "Then Sue and Bob sat down, and Jim handed it to"],
             answer=[" Mary", " Ann"], distractor=[" John", " Tom"])


def test_every_wrong_argument_is_refused_before_any_model_pass(tiny, monkeypatch):
    m = tiny
    prompts = hw.prompt_pairs(m, pd.DataFrame(PAIRS))
    L, H = m.adapter.n_layers, m.adapter.n_heads
    heads = pd.DataFrame(dict(layer=[l for l in range(L) for _ in range(H)], head=list(range(H)) * L,
                              score=0.1, logit_diff=0.2, score_rank=range(1, L * H + 1)))
    heads.attrs["note"] = dict(prompts=len(prompts), clean_logit_diff=1.0, corrupted_logit_diff=-1.0)
    other = heads.copy()
    other.attrs = dict(note=dict(heads.attrs["note"], prompts=7))              # patched on other prompts
    unsaid = heads.copy()
    unsaid.attrs = dict(note=dict(prompts=len(prompts), clean_logit_diff=float("nan"), corrupted_logit_diff=0.0))
    bare = heads.copy()
    bare.attrs = {}
    circuits = pd.DataFrame(dict(layer=[0], head=[0], kv_group=[0], ov_copying=[0.1], ov_copying_z=[1.0], qk_same_token=[0.0]))

    def no_pass(*args, **kwargs):
        raise AssertionError("a model pass before the refusal")
    monkeypatch.setattr(m.model, "forward", no_pass)
    cases = [
        (lambda: hw.direct_effects(m, "prompts.csv"), hw.TableError, "prompts"),
        (lambda: hw.direct_effects(m, prompts, heads.head(3)), hw.TableError, "one per head"),
        (lambda: hw.direct_effects(m, prompts, heads.assign(head=heads["head"] + H)), hw.TableError, "heads"),
        (lambda: hw.direct_effects(m, prompts, heads.drop(columns="logit_diff")), hw.TableError, "logit_diff"),
        (lambda: hw.direct_effects(m, prompts, heads.assign(score_rank=0)), hw.TableError, "score_rank"),
        (lambda: hw.direct_effects(m, prompts, other), hw.TableError, "7 prompts"),
        (lambda: hw.direct_effects(m, prompts, bare), hw.TableError, "heads carries no note"),
        (lambda: hw.direct_effects(m, prompts, unsaid), hw.TableError, "clean_logit_diff = nan, not a finite number"),
        (lambda: hw.direct_effects(m, prompts, batch=0), hw.ConfigError, "batch=0"),
        (lambda: hw.direct_effects(m, prompts, settings=[1]), hw.ConfigError, "settings"),
        (lambda: hw.logit_lens(m, prompts, rounding_factor=-1.0), hw.ConfigError, "rounding_factor"),
        (lambda: hw.logit_lens(m, prompts, colour=1), hw.ConfigError, "colour"),
        (lambda: hw.weight_circuits(m, qk_offset=10 ** 6), hw.ConfigError, "qk_offset"),
        (lambda: hw.weight_circuits(m, null_draws=1), hw.ConfigError, "null_draws"),
        (lambda: hw.weight_circuits("m"), hw.ConfigError, "not a loaded model"),
        (lambda: hw.weights_vs_paths(circuits, pd.DataFrame()), hw.TableError, "composition"),
        (lambda: hw.weights_vs_paths(circuits, pd.DataFrame(), confidence=1.0), hw.ConfigError, "confidence"),
        (lambda: hw.plot_direct(pd.DataFrame(dict(component=["x"]))), hw.TableError, "kind"),
        (lambda: hw.plot_logit_lens(pd.DataFrame()), hw.TableError, "no rows"),
        (lambda: hw.plot_weights(circuits), hw.TableError, "composition"),
    ]
    for call, error, said in cases:
        with pytest.raises(error, match=said) as err:
            call()
        assert str(err.value).startswith("hw."), err.value
        assert "\n" not in str(err.value), err.value


@pytest.fixture(scope="module")
def made(tiny):
    """The prompts of :data:`PAIRS` and the head sweep on them (top 2)."""
    prompts = hw.prompt_pairs(tiny, pd.DataFrame(PAIRS))
    return dict(prompts=prompts, heads=hw.patch_heads(tiny, prompts, top_k=2))


def test_a_heads_table_patched_on_other_prompts_is_refused(tiny, made):
    """A head's total effect and its direct effect must be of the same prompts: the heads' note says the clean and
    corrupted logit differences it was patched at, and a call whose own differ by more than rounding of numbers
    that size explains (as many prompts, other pairs) is refused naming heads; within the bound, it is read."""
    other = hw.prompt_pairs(tiny, pd.DataFrame(dict(PAIRS, answer=PAIRS["distractor"], distractor=PAIRS["answer"])))
    with pytest.raises(hw.TableError, match=r"^hw.direct_effects: heads were patched at clean and corrupted logit "
                                            r"differences .* these prompts give .* more than rounding explains"):
        hw.direct_effects(tiny, other, made["heads"])
    note = made["heads"].attrs["note"]
    lds = dict(clean=note["clean_logit_diff"], corrupted=note["corrupted_logit_diff"])
    bound = D.rounding(tiny.adapter, 1.0, 2 * 10.0).bound           # float32's, the magnitude 2 × |logit| 10
    D.same_prompts(tiny.adapter, note, dict(lds, clean=lds["clean"] + 0.9 * bound), 10.0, 1.0)
    with pytest.raises(hw.TableError, match="heads were patched at"):
        D.same_prompts(tiny.adapter, note, dict(lds, corrupted=lds["corrupted"] - 1.1 * bound), 10.0, 1.0)
    with in_float64(tiny.adapter):          # a float64 call still allows float32's rounding (the sweep's)
        D.same_prompts(tiny.adapter, note, dict(lds, clean=lds["clean"] + 0.9 * bound), 10.0, 1.0)


def test_the_public_functions_end_to_end(tiny, made, monkeypatch):
    """Direct effects beside patching's total effect (the totals are the head sweep's), the logit lens, the
    weights' circuits, their verdict, the figures and the explorer panel's table, on the tiny model; each call's
    progress named after it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    m = tiny
    prompts, heads = made["prompts"], made["heads"]
    named = []
    real = D.phases
    monkeypatch.setattr(D, "phases", lambda call, total=None: named.append(call) or real(call, total))
    direct = hw.direct_effects(m, prompts, heads)
    beside = direct.attrs["tables"]["heads"]
    corrupted = direct.attrs["note"]["corrupted_logit_diff"]
    assert corrupted == pytest.approx(heads.attrs["note"]["corrupted_logit_diff"], abs=1e-5)
    assert np.allclose(beside["total"], heads["logit_diff"] - corrupted)
    assert np.allclose(beside["direct"] + beside["indirect"], beside["total"])
    assert hw.guards_of(direct)["passed"].all()
    lens = hw.logit_lens(m, prompts)
    assert named == ["direct_effects", "logit_lens"]
    last = lens[(lens["run"] == "clean") & (lens["depth"] == m.adapter.n_layers) & (lens["position"] == -1)]
    assert float(last["logit_diff"].iloc[0]) == pytest.approx(direct.attrs["note"]["clean_logit_diff"], abs=1e-5)
    circuits = hw.weight_circuits(m, null_draws=20)
    paths = hw.path_patching(m, prompts, heads, receivers=[(2, 1)])
    v = hw.weights_vs_paths(circuits, paths, hw.head_scores(m), bootstrap=200, null_draws=50)
    assert list(v["comparison"]) == ["composition vs path patching (q, k, v)", *(
        f"composition vs path patching ({i})" for i in "kqv"), "OV copying vs induction score"]
    assert (v["n"].iloc[1:4] == len(paths) // 3).all() and (v["low"] <= v["rho"]).all() and (v["rho"] <= v["high"]).all()
    top = v.attrs["tables"]["top_paths"]
    assert list(top["receiver"]) == ["L2H1"] and 1 <= int(top["rank_by_weights"].iloc[0]) <= len(paths)
    for fig in (hw.plot_direct(direct), hw.plot_logit_lens(lens), hw.plot_weights(circuits, paths),
                hw.plot_weights(circuits)):
        assert fig.axes
        canvas = FigureCanvasAgg(fig)           # every axis label inside the figure, none cut off
        canvas.draw()
        for ax in fig.axes:
            for label in (x for x in (ax.xaxis.label, ax.yaxis.label) if x.get_text()):
                box = label.get_window_extent(canvas.get_renderer())
                assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 + 0.5, label.get_text()
    fig = hw.plot_logit_lens(lens)              # the middle panel's two lines named, on their two axes
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == ["p(answer) (left axis)", "rank (right axis)"]
    clean = lens[(lens["run"] == "clean") & (lens["depth"] == 0)].sort_values("position")
    varies = [str(t).strip() == f"−{-p}" for p, t in zip(clean["position"], clean["token"])]   # tokens differ there
    ticks = [t.get_text() for t in fig.axes[2].get_xticklabels()]
    assert any(varies) and not all(varies) and [t.endswith(" (varies)") for t in ticks] == varies, ticks
    panel = explorer_panel(circuits, circuits.attrs["tables"]["composition"], beside, paths)
    assert len(panel) == m.adapter.n_layers * m.adapter.n_heads
    assert (panel.loc[panel["layer"] == 0, "reads"] == "").all() and (panel.loc[panel["layer"] == 2, "feeds"] == "").all()
    assert panel.loc[(panel["layer"] == 2) & (panel["head"] == 1), "strongest_path"].iloc[0] != ""
    comp = circuits.attrs["tables"]["composition"]
    best = comp[(comp["receiver_layer"] == 1) & (comp["receiver_head"] == 0)].sort_values("z").iloc[-1]
    assert panel.set_index("label").loc["L1H0", "reads"] == f"{best['sender']} ({best['input']})"


def test_a_composition_or_paths_table_that_lies_about_its_heads_is_refused(tiny, made):
    """From a hostile trial: a key/value row's group must be its receiver's kv_group (a group of 0 everywhere
    merged two groups' paths, a group per head narrowed the intervals), every sender and receiver a head of the
    circuits' table (layers + 50 showed heads the model lacks), the heads of one key/value group one measurement
    (a path table whose heads of a group disagree is not path patching's), paths of another model refused by the
    figure too, and the heads named from their keys, never from a table's own labels."""
    m, prompts, heads = tiny, made["prompts"], made["heads"]
    circuits = hw.weight_circuits(m, null_draws=20)
    paths = hw.path_patching(m, prompts, heads, receivers=[(2, 0), (2, 1)])
    comp = circuits.attrs["tables"]["composition"]

    def with_composition(**changes):
        c = circuits.copy()
        c.attrs = dict(circuits.attrs, tables=dict(circuits.attrs["tables"], composition=comp.assign(**changes)))
        return c

    kv = comp["input"] != "q"
    for lie, said in ((with_composition(group=comp["group"].where(~kv, 0)), "key/value group 0"),
                      (with_composition(group=comp["group"].where(~kv, comp["receiver_head"])), "key/value group"),
                      (with_composition(receiver_layer=comp["receiver_layer"] + 50), "no head of the circuits' table")):
        with pytest.raises(hw.TableError, match=said):
            hw.weights_vs_paths(lie, paths)
        with pytest.raises(hw.TableError, match=said):
            hw.plot_weights(lie)
    disagree = paths.copy()
    k = disagree["input"].eq("k") & disagree["receiver_head"].eq(1)
    disagree.loc[k, "score"] *= -10
    with pytest.raises(hw.TableError, match="different k scores"):
        hw.weights_vs_paths(circuits, disagree)
    other = paths.assign(receiver_layer=paths["receiver_layer"] + 5)
    with pytest.raises(hw.TableError, match="different models"):
        hw.plot_weights(circuits, other)
    renamed = paths.assign(sender="L9H9", receiver="L9H9")
    top = hw.weights_vs_paths(circuits, renamed, bootstrap=50, null_draws=20).attrs["tables"]["top_paths"]
    assert sorted(top["receiver"]) == ["L2H0", "L2H1"] and "L9H9" not in set(top["sender"])
