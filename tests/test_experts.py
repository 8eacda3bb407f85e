"""The character model's options: experts behind a router (dispatch, balancing loss, memory)
and grouped keys/values."""
import pytest
import torch

from headwatch.charlm.model import CharLM, Experts, balance_loss, count_params
from headwatch.charlm.spec import ModelSpec


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def experts_layer(width, experts, top_k, expert_width):
    """One Experts module of a spec with these numbers (vocabulary and heads play no part)."""
    return Experts(ModelSpec(vocab_size=1, width=width, heads=1, experts=experts, top_k=top_k,
                             expert_width=expert_width))

# ----------------------------------------------------------------- router
def test_router_sends_each_token_to_exactly_top_k_experts_and_mixes_them_by_hand():
    torch.manual_seed(0)
    for E, k in ((4, 1), (8, 2), (16, 2)):
        m = experts_layer(12, E, k, 6)
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
    p = count_params(ModelSpec(30, W, H, layers=2, context=12, kv_heads=K))
    assert n_params(gqa) == p["total"] and p["attention"] == 2 * (2 * W * W + 2 * W * K * d)



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
    m = experts_layer(width, E, k, expert_width)
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


def test_dispatch_gradients_sum_without_indexings_accumulating_kernels():
    # Indexing's gradient sums by index_put (on a GPU one warp adds a row's copies one after
    # another: an expert's bias is copied to thousands of rows) and index_select's by index_add
    # (atomics, in no fixed order). The dispatch's gathers sum their gradients by a gather and a
    # fixed-order sum, and by one matmul for the biases: neither kernel is called.
    accumulating = {"index_put", "index_put_", "_index_put_impl_", "index_add", "index_add_"}
    for k in (1, 2, 3):
        a, _ = _allocated(8, 64, Experts.forward, k=k)
        assert not a.ops & accumulating, (k, a.ops & accumulating)
    ref, _ = _allocated(8, 64, loop_reference, k=2)
    assert ref.ops & accumulating          # the check sees them where they are called
