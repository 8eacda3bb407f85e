"""The sweep's new options (experts, grouped keys/values, depth at a fixed budget)
and the studies that summarize them, with their invariants."""
import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from headwatch.charlm import SLUG, check_sweeps, job_params, model_of, runs, slug
from headwatch.charlm.corpus import build_corpus
from headwatch.charlm.model import CharLM, Experts, balance_loss, count_params
from headwatch.charlm.study import arch, invariant_error, read_study_runs, summarize_study
from headwatch.charlm.summary import SummaryError
from headwatch.charlm.train import train
from headwatch.checks import write_parquet
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------- router
def test_router_sends_each_token_to_exactly_top_k_experts_and_mixes_them_by_hand():
    torch.manual_seed(0)
    for E, k in ((4, 1), (8, 2), (16, 2)):
        m = Experts(width=12, experts=E, top_k=k, expert_width=6)
        for p in (m.w1, m.w2, m.b1, m.b2):
            torch.nn.init.normal_(p, 0, 0.3)
        x = torch.randn(3, 5, 12)
        y = m(x)
        probs, chosen, weight = m.route(x.reshape(-1, 12))
        assert chosen.shape == (15, k)
        assert all(len(set(row.tolist())) == k for row in chosen)        # k distinct experts each
        assert m.last_counts.sum().item() == 15 * k                        # N·k assignments, no more
        # Each token: the weighted sum of its k chosen experts, weighted by their router probability.
        x2 = x.reshape(-1, 12)
        hand = torch.zeros_like(x2)
        for t in range(15):
            for j in range(k):
                e = chosen[t, j]
                h = torch.nn.functional.gelu(x2[t] @ m.w1[e] + m.b1[e])
                hand[t] += probs[t, e] * (h @ m.w2[e] + m.b2[e])
            # the chosen are the k most probable
            assert probs[t, chosen[t]].min() >= probs[t].sort(descending=True).values[k - 1]
        torch.testing.assert_close(y.reshape(-1, 12), hand, rtol=1e-5, atol=1e-6)
        # An expert the token was not sent to does not influence it.
        t, unused = 0, [e for e in range(E) if e not in chosen[0].tolist()][0]
        with torch.no_grad():
            m.w2[unused] += 10.0
        assert torch.equal(m(x).reshape(-1, 12)[t], y.reshape(-1, 12)[t])


def test_balancing_loss_is_1_at_uniform_load_and_larger_when_unbalanced():
    # Uniform: f_i = P_i = 1/E, so E · Σ 1/E² = 1 exactly (times the weight 0.01: 0.01).
    E, N = 4, 8
    probs = torch.full((N, E), 1 / E)
    chosen = torch.tensor([[0, 1], [2, 3]] * 4)                  # top-2, every expert 4 of 16 times
    assert balance_loss(probs, chosen, E).item() == pytest.approx(1.0, abs=1e-7)
    assert 0.01 * balance_loss(probs, chosen, E).item() == pytest.approx(0.01, abs=1e-9)
    # Hand case: E = 2, top-1, both tokens to expert 0: f = [1, 0], P = [(0.9+0.8)/2, 0.15]
    # -> 2 · (1 · 0.85 + 0 · 0.15) = 1.7.
    probs = torch.tensor([[0.9, 0.1], [0.8, 0.2]])
    assert balance_loss(probs, torch.tensor([[0], [0]]), 2).item() == pytest.approx(1.7)
    # Everything on one expert, with certainty: the maximum, E.
    probs = torch.zeros(N, E)
    probs[:, 2] = 1
    assert balance_loss(probs, torch.full((N, 1), 2), E).item() == pytest.approx(E)
    # When the router's mean probabilities match its loads (P_i = f_i), the loss is
    # E·Σ f_i² >= 1 (Cauchy-Schwarz), equal only at f_i = 1/E: minimal at uniform load.
    # (With P != f it can dip a hair below 1: a random router gave 0.9991. It is a
    # surrogate, minimal at uniform only where f and P agree.)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        counts = torch.randint(0, 10, (E,), generator=g)
        counts[0] += 1
        chosen = torch.repeat_interleave(torch.arange(E), counts).unsqueeze(1)   # top-1 loads
        probs = (counts / counts.sum()).expand(len(chosen), E)                    # P = f
        value = balance_loss(probs, chosen, E).item()
        assert value == pytest.approx(E * float(((counts / counts.sum()) ** 2).sum()), rel=1e-6)
        assert value >= 1.0 - 1e-6 and (value > 1.0 + 1e-6 or len(set(counts.tolist())) == 1)


# ------------------------------------------------------------ grouped kv
def test_kv_heads_equal_to_heads_is_plain_attention_exactly():
    x = torch.randint(0, 30, (2, 12))
    torch.manual_seed(5)
    plain = CharLM(30, 32, 4, layers=2, context=12)
    torch.manual_seed(5)
    gqa = CharLM(30, 32, 4, layers=2, context=12, kv_heads=4)
    a, b = plain.state_dict(), gqa.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(plain(x), gqa(x))


def test_grouped_kv_is_plain_attention_with_each_group_copied_to_its_query_heads():
    torch.manual_seed(1)
    H, K, W = 4, 2, 32
    gqa = CharLM(30, W, H, layers=2, context=12, kv_heads=K)
    plain = CharLM(30, W, H, layers=2, context=12)
    sd = gqa.state_dict()
    d = W // H
    for name in list(sd):
        if name.endswith("attn.k.weight") or name.endswith("attn.v.weight"):
            assert sd[name].shape == (K * d, W)
            # query head h reads group h // (H // K): rows of group g repeated H // K times
            sd[name] = torch.cat([sd[name][(h // (H // K)) * d:(h // (H // K) + 1) * d] for h in range(H)])
    plain.load_state_dict(sd)
    x = torch.randint(0, 30, (2, 12))
    torch.testing.assert_close(gqa(x), plain(x), rtol=0, atol=1e-6)
    # k and v store kv_heads × head size rows each: attention 2·(2W² + 2·W·K·d) for 2 layers.
    p = count_params(30, W, 2, 12, heads=H, kv_heads=K)
    assert n_params(gqa) == p["total"] and p["attention"] == 2 * (2 * W * W + 2 * W * K * d)


# ---------------------------------------------------------------- budgets
def test_depth_sweep_budget_is_within_2_percent_with_heads_of_64():
    sw = CONFIG["sweeps"]["depth"]
    models = [model_of(CONFIG, e) for e in sw["grid"]]
    a = [arch(m) for m in models]
    assert [x["layers"] for x in a] == [4, 8, 12] and {x["head_size"] for x in a} == {64}
    ne = [x["non_embedding"] for x in a]
    # Hand: L · (4·W·A + 8W² + 9W) + 2W with A = heads·64:
    #   4 · (4·256·256 + 8·65 536 + 2 304) + 512 = 3 155 456
    #   8 · (4·192·128 + 8·36 864 + 1 728) + 384 = 3 159 936   (+0.14 %)
    #  12 · (4·128·256 + 8·16 384 + 1 152) + 256 = 3 159 808   (+0.14 %)
    assert ne == [3_155_456, 3_159_936, 3_159_808]
    assert max(abs(n / ne[0] - 1) for n in ne) < 0.02
    for m, x in zip(models, a):        # the formula is the module's own count
        kw = {k: m[k] for k in ("head_size", "kv_heads") if k in m}
        model = CharLM(65, m["width"], m["heads"], layers=m["layers"], **kw)
        body = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("blocks.", "ln_f.")))
        assert body == x["non_embedding"]
    assert invariant_error(sw["study"], models) == ""
    # The textbook choice (width = heads × 64) misses the budget, and the study says so.
    bad = [dict(models[0]), dict(models[1], heads=3, head_size=64)]
    assert "outside" in invariant_error(sw["study"], bad) and "+12.60 %" in invariant_error(sw["study"], bad)


def test_experts_sweeps_have_equal_active_ffn_width_and_stored_vs_active_counts():
    for name in ("experts", "experts_topk"):
        sw = CONFIG["sweeps"][name]
        a = [arch(model_of(CONFIG, e)) for e in sw["grid"]]
        assert {x["ffn_active_width"] for x in a} == {4 * 256}, name
        assert invariant_error(sw["study"], [model_of(CONFIG, e) for e in sw["grid"]]) == ""
    # 8 experts of half width (512), top 2: stored FFN 8 × (2·256·512 + 512 + 256) + router 256·8
    e8 = arch(model_of(CONFIG, CONFIG["sweeps"]["experts"]["grid"][1]))
    assert e8["expert_width"] == 512 and e8["top_k"] == 2
    ffn_stored, ffn_active = 8 * (2 * 256 * 512 + 768) + 2048, 2 * (2 * 256 * 512 + 768) + 2048
    dense_ffn = 2 * 4 * 256 * 256 + 4 * 256 + 256
    assert e8["params_formula"] - count_params(65, 256)["total"] == 4 * (ffn_stored - dense_ffn)
    assert e8["params_active_formula"] - count_params(65, 256)["total"] == 4 * (ffn_active - dense_ffn)
    m = CharLM(65, 256, 4, experts=8, top_k=2)
    assert n_params(m) == e8["params_formula"] and m.active_params() == e8["params_active_formula"]
    # An arm with a different active width is refused.
    models = [model_of(CONFIG, e) for e in CONFIG["sweeps"]["experts_topk"]["grid"]]
    models[2] = dict(models[2], expert_width=512)
    assert "must be equal" in invariant_error({"kind": "experts"}, models)


def test_slugs_are_readable_and_bad_options_are_named_by_key():
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0.01}) == "w256-h4-e8k2-b0.01"
    assert slug({"width": 256, "heads": 4, "experts": 8, "top_k": 2, "balance": 0}) == "w256-h4-e8k2-b0"
    assert slug({"width": 192, "heads": 2, "layers": 8, "head_size": 64}) == "w192-h2-l8-d64"
    assert slug({"width": 256, "heads": 4, "kv_heads": 2}) == "w256-h4-kv2"
    assert slug({"width": 256, "heads": 4}) == "w256-h4"
    assert all(SLUG.match(r["config"]) for r in runs(CONFIG))
    # Plain entries keep exactly the settings they had: nothing reruns.
    assert job_params(CONFIG, "heads_split", "w256-h4", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4)
    assert job_params(CONFIG, "experts", "w256-h4-e8k2-b0", 0)["model"] == dict(
        width=256, heads=4, layers=4, context=128, ffn_mult=4, experts=8, top_k=2, balance=0)
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["kv_sharing"]["grid"][1]["kv_heads"] = 3
    cfg["sweeps"]["heads_split"]["grid"][0]["balance"] = 0.01
    cfg["sweeps"]["depth"]["grid"][2]["head_size"] = 32
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.sweeps.kv_sharing.grid[1]: kv_heads 3 must divide heads 4") for e in errors)
    assert any(e.startswith("sweep.sweeps.heads_split.grid[0]: top_k, expert_width and balance need experts")
               for e in errors)
    assert any(e.startswith("sweep.sweeps.depth.study: non-embedding parameters must lie within 2 %")
               for e in errors), errors
    cfg = copy.deepcopy(CONFIG)
    cfg["skip"] = ["depth", "nope"]
    assert check_sweeps(cfg) == ["sweep.skip: 'nope' is not a sweep (" + str(sorted(cfg["sweeps"])) + ")"]
    cfg["skip"] = ["depth"]
    assert {r["sweep"] for r in runs(cfg)} == set(cfg["sweeps"]) - {"depth"}


# --------------------------------------------------- a tiny study, in process
TINY_TRAIN = dict(steps=6, batch=4, lr=3e-3, min_lr=3e-4, warmup=1, weight_decay=0.1, eval_every=3,
                  eval_batches=2, checkpoint_every=100)


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(plays=["tragedies/macbeth"], target_chars=20_000)


def test_a_tiny_experts_study_trains_and_summarizes_end_to_end(corpus, tmp_path):
    torch.set_num_threads(1)
    ids, meta = corpus.ids(), corpus.meta()
    cfg = dict(model=dict(layers=2, context=16, ffn_mult=4), sweeps=dict(ex=dict(
        study=dict(kind="experts"), seeds=[0, 1], train=TINY_TRAIN,
        grid=[dict(width=16, heads=2), dict(width=16, heads=2, experts=4, top_k=2, balance=0.01),
              dict(width=16, heads=2, experts=4, top_k=2, balance=0)])))
    planned = []
    for r in runs(cfg):
        job = job_params(cfg, r["sweep"], r["config"], r["seed"])
        model, metrics, info = train(ids, meta, job["model"], job["seed"], job["train"])
        path = tmp_path / f"{r['config']}-{r['seed']}.parquet"
        write_parquet(metrics, path, note=info)
        planned.append(dict(r, model=job["model"], metrics=path, info=info))
    by = {(p["config"], p["seed"]): p["info"] for p in planned}
    # the plain arm records nothing new; the expert arms record their load, each layer's shares sum to 1
    assert "expert_shares" not in by[("w16-h2", 0)]
    shares = np.array(by[("w16-h2-e4k2-b0.01", 0)]["expert_shares"])
    assert shares.shape == (2, 4) and np.allclose(shares.sum(1), 1)
    # balancing changes training (same seed, same data, same init): the losses differ
    assert by[("w16-h2-e4k2-b0.01", 0)]["final_val_loss"] != by[("w16-h2-e4k2-b0", 0)]["final_val_loss"]
    finals = read_study_runs(planned, meta["vocab_size"])
    s = summarize_study(finals, cfg["sweeps"]["ex"]["study"])
    assert s["config"].tolist() == ["w16-h2", "w16-h2-e4k2-b0.01", "w16-h2-e4k2-b0"]
    assert (s["ffn_active_width"] == 64).all() and (s["seeds"] == 2).all()
    dense, moe = s.iloc[0], s.iloc[1]
    assert dense["params"] == dense["params_active"] == count_params(meta["vocab_size"], 16, 2, 16)["total"]
    assert moe["params"] > moe["params_active"] > 0 and moe["uniform_share"] == 0.25
    assert moe["expert_share_min"] <= 0.25 <= moe["expert_share_max"]
    assert dense["val_bpc_mean"] == pytest.approx(dense["val_loss_mean"] / math.log(2))
    assert (s["chars_per_s"] > 0).all()
    # each run's peak memory is recorded (here one process: its peak resident set so far) and the
    # table keeps the largest over seeds
    assert all(p["info"]["peak_memory_of"] == "process max RSS" for p in planned)
    assert finals["peak_memory_mb"].min() > 50
    assert s["peak_memory_mb"].tolist() == finals.groupby("config", sort=False)["peak_memory_mb"].max().tolist()
    # The figure draws from the tables.
    from headwatch.figures.style import save
    from headwatch.figures.sweep import study_figure

    save(study_figure("experts", s, finals), tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    # A broken invariant in the measured data: no summary.
    broken = finals.copy()
    broken.loc[broken["config"] == "w16-h2-e4k2-b0", "expert_width"] = 16
    with pytest.raises(SummaryError, match="active FFN width.*refusing"):
        summarize_study(broken, cfg["sweeps"]["ex"]["study"])


def _finals(rows):
    base = dict(sweep="s", trained_under="s", heads=4, head_size=64, kv_heads=4, experts=0, top_k=0,
                expert_width=0, balance=0.0, ffn_active_width=1024, kv_cache_bytes_per_token=0, steps=5,
                train_loss=1.0, chars_per_s=1.0, expert_share_min=1.0, expert_share_max=1.0,
                peak_memory_mb=100.0, peak_memory_of="process max RSS")
    out = []
    for r in rows:
        for seed, loss in enumerate(r.pop("losses")):
            out.append(dict(base, **r, seed=seed, val_loss=loss))
    return pd.DataFrame(out)


def test_depth_and_kv_summaries_refuse_when_their_invariant_fails():
    depth = dict(kind="depth", tolerance=0.02, head_size=64)
    ok = [dict(config="a", width=256, layers=4, non_embedding=1000, params=5, params_formula=5,
               params_active=5, losses=[1.0, 1.2]),
          dict(config="b", width=192, heads=2, kv_heads=2, layers=8, non_embedding=1019, params=6, params_formula=6,
               params_active=6, losses=[1.1, 1.3])]
    s = summarize_study(_finals(copy.deepcopy(ok)), depth)
    assert s["val_loss_std"].tolist() == pytest.approx([math.sqrt(0.02)] * 2)
    # peak memory: the largest over seeds; a run that predates the record is <NA>, not a NaN refusal
    f = _finals(copy.deepcopy(ok))
    f["peak_memory_mb"] = pd.array([120.0, 90.0, None, None], dtype="Float64")
    s2 = summarize_study(f, depth)
    assert s2["peak_memory_mb"].iloc[0] == 120.0 and s2["peak_memory_mb"].isna().tolist() == [False, True]
    assert s["non_embedding_vs_first"].tolist() == pytest.approx([0, 0.019])
    off = copy.deepcopy(ok)
    off[1]["non_embedding"] = 1021
    with pytest.raises(SummaryError, match=r"within 2 %.*b.*\+2\.10 %.*refusing"):
        summarize_study(_finals(off), depth)
    wrong = copy.deepcopy(ok)
    wrong[1]["params"] = 7
    with pytest.raises(SummaryError, match="differ from the architecture formula"):
        summarize_study(_finals(wrong), depth)
    kv = [dict(config=c, width=256, layers=4, kv_heads=k, non_embedding=1, params=1, params_formula=1,
               params_active=1, losses=[1.0, 1.1]) for c, k in (("a", 4), ("b", 2))]
    assert len(summarize_study(_finals(copy.deepcopy(kv)), {"kind": "kv"})) == 2
    kv[1]["layers"] = 5
    with pytest.raises(SummaryError, match="differ only in kv_heads"):
        summarize_study(_finals(kv), {"kind": "kv"})


# ------------------------------------------------------- the dispatch
def loop_reference(m: Experts, x):
    """The straightforward dispatch: for each expert, the tokens sent to it, through its weights."""
    x2 = x.reshape(-1, x.shape[-1])
    probs, chosen, weight = m.route(x2)
    out = torch.zeros_like(x2)
    for e in range(m.experts):
        tok, slot = torch.nonzero(chosen == e, as_tuple=True)
        if tok.numel():
            h = torch.nn.functional.gelu(x2[tok] @ m.w1[e] + m.b1[e])
            y = (h @ m.w2[e] + m.b2[e]) * weight[tok, slot].unsqueeze(1)
            out.index_add_(0, tok, y.to(out.dtype))
    return out.view(x.shape)


def _experts(E, k, width, expert_width, seed=0):
    torch.manual_seed(seed)
    m = Experts(width=width, experts=E, top_k=k, expert_width=expert_width)
    for p in (m.w1, m.w2, m.b1, m.b2, m.router.weight):
        torch.nn.init.normal_(p, 0, 0.3)
    return m


def _grads(m, x, forward):
    m.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    y = forward(m, x)
    (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in m.named_parameters()}


@pytest.mark.parametrize("E, k, width, expert_width, fits", [
    (4, 1, 16, 32, True), (8, 2, 16, 16, True), (16, 2, 8, 4, True), (3, 3, 16, 8, True),
    (4, 2, 12, 6, False), (5, 1, 10, 7, False)])   # rows of 24 and 28 bytes: the per-group fallback
def test_sorted_grouped_dispatch_equals_the_loop_with_gradients(E, k, width, expert_width, fits, monkeypatch):
    from headwatch.charlm import model as model_mod

    calls = []
    real = torch.nn.functional.grouped_mm
    monkeypatch.setattr(torch.nn.functional, "grouped_mm", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    m = _experts(E, k, width, expert_width)
    x = torch.randn(3, 7, width)
    x[..., 0] = 5.0
    with torch.no_grad():      # expert 0 gets no token (logit 100 lower) unless k = E: an empty group
        m.router.weight[:, 0] = 0.0
        m.router.weight[0, 0] = -20.0
    y, gx, g = _grads(m, x, Experts.forward)
    idle = 0 not in m.route(x.reshape(-1, width))[1].flatten().tolist()
    assert idle == (k < E)
    assert bool(calls) == fits == model_mod._grouped_mm_fits(torch.empty(1, width), m.w1)
    ry, rgx, rg = _grads(m, x, loop_reference)
    torch.testing.assert_close(y, ry, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gx, rgx, rtol=1e-5, atol=1e-6)
    assert g.keys() == rg.keys()
    for name in g:
        torch.testing.assert_close(g[name], rg[name], rtol=1e-5, atol=1e-6, msg=name)
    assert torch.equal(g["w1"][0], torch.zeros_like(g["w1"][0])) == idle   # an idle expert learns nothing
    counts = torch.bincount(m.route(x.reshape(-1, width))[1].flatten(), minlength=E)
    assert torch.equal(m.last_counts, counts)


def test_dispatch_under_bf16_autocast_stays_near_the_loop_and_returns_float32():
    m = _experts(8, 2, 32, 32)
    x = torch.randn(4, 8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, ry = m(x), loop_reference(m, x)
    assert y.dtype == ry.dtype == torch.float32
    torch.testing.assert_close(y, ry, rtol=2e-2, atol=2e-3)      # both matmuls in bf16
    assert (y - m(x)).abs().max() > 0                             # and bf16 did change something


class _Allocations(torch.utils._python_dispatch.TorchDispatchMode):
    """Bytes of every new tensor storage the aten ops create (views and in-place results excluded),
    and the names of the ops called."""

    def __init__(self):
        super().__init__()
        self.bytes, self.ops = 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = torch.utils._pytree.tree_flatten
        seen = {t.untyped_storage().data_ptr() for t in flat((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        self.bytes += sum(t.untyped_storage().nbytes() for t in flat(out)[0]
                          if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen)
        self.ops.add(func.overloadpacket.__name__)
        return out


def _allocated(E, tokens, forward, k=1, width=32, expert_width=64):
    m = _experts(E, k, width, expert_width)
    x = torch.randn(tokens, width, requires_grad=True)
    with _Allocations() as a:
        forward(m, x).square().sum().backward()
    return a, sum(p.numel() * p.element_size() for p in m.parameters())


def test_dispatch_memory_grows_with_tokens_and_with_experts_only_by_their_gradients():
    # More experts at the same tokens: the only new bytes are the new experts' gradients,
    # each written once (the loop wrote a full-size gradient of the stacked weights per expert:
    # E² growth, 46× the new parameters here).
    def grown_by_experts(forward):
        (small, p_small), (big, p_big) = _allocated(4, 256, forward), _allocated(16, 256, forward)
        return (big.bytes - small.bytes) / (p_big - p_small)

    assert grown_by_experts(Experts.forward) < 2
    assert grown_by_experts(loop_reference) > 10
    # More tokens at the same experts: a bounded number of (width + expert_width) rows per
    # token→expert assignment, the same for 4 and for 16 experts (no padding to a capacity).
    for E in (4, 16):
        (few, _), (many, _) = _allocated(E, 256, Experts.forward), _allocated(E, 1024, Experts.forward)
        per_assignment = (many.bytes - few.bytes) / (1024 - 256)
        assert per_assignment < 16 * (32 + 64) * 4, (E, per_assignment)


def test_dispatch_calls_no_op_whose_output_size_depends_on_the_data():
    # Such ops (nonzero, bincount, masked_select, .item()) make a GPU wait for the host.
    sync_ops = {"nonzero", "bincount", "masked_select", "unique", "_unique2", "_local_scalar_dense",
                "repeat_interleave", "is_nonzero"}
    a, _ = _allocated(8, 64, Experts.forward, k=2)
    assert "_grouped_mm" in a.ops and not a.ops & sync_ops, a.ops & sync_ops
    ref, _ = _allocated(8, 64, loop_reference, k=2)
    assert ref.ops & sync_ops == {"nonzero"}      # the check sees what the loop did
