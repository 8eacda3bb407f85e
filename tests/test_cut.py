"""The cut mechanism (headwatch/ablation/cut.py) on a tiny model of every family."""
import pytest
import torch

from headwatch.model.arch import Adapter, HeadAddressError
from headwatch.ablation.cut import (BatchedCuts, cut_heads, cut_rows, full_logits, head_mask, heads_one_per_layer,
                                    loop_cuts, zeroed_columns)
from headwatch.guards import GuardError, Rounding, batched_vs_loop, rounding
from headwatch.ablation.guards import hook_vs_weights, restore
from headwatch.model.interventions import InterventionError
from tiny import random_ids


def _hooks(adapter):
    return sum(len(adapter.out_proj(l)._forward_pre_hooks) for l in range(adapter.n_layers))


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same_weights(model, snap):
    return all(torch.equal(v, snap[k]) for k, v in model.state_dict().items())


def test_hook_zeroes_exactly_the_head_slice(model):
    """The projection's input seen after the cut: the head's head_dim slice is 0, the rest untouched."""
    a = Adapter(model)
    ids = random_ids(2, 10)
    layer, head = a.n_layers - 1, 1
    seen = {}
    proj = a.out_proj(layer)
    rec = proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0].clone()))
    with torch.no_grad():
        model(ids)
        intact_in = seen["x"]
        rec.remove()
        with cut_heads(a, [(layer, head)]):      # registered first: runs before the recorder below
            rec = proj.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0].clone()))
            model(ids)
        rec.remove()
    cut_in = seen["x"]
    cols = a.out_columns(head)
    assert cut_in.shape[-1] == a.n_heads * a.head_dim
    assert intact_in[..., cols].abs().max() > 0            # the head had a voice ...
    assert torch.count_nonzero(cut_in[..., cols]) == 0      # ... and now has none
    others = torch.ones(cut_in.shape[-1], dtype=torch.bool)
    others[cols] = False
    assert torch.equal(cut_in[..., others], intact_in[..., others])


def test_hook_equals_zeroed_weights_on_full_logits(model):
    """Hook cut vs zeroed Wo columns: every logit identical, one cut per layer (and a group cut)."""
    a = Adapter(model)
    ids = random_ids(2, 12)
    intact = full_logits(model, ids)
    snap = _snapshot(model)
    rec = hook_vs_weights(model, a, ids, heads_one_per_layer(a) + [(1, 3)], tolerance=0.0)
    assert rec["max_abs_diff"] == 0.0 and rec["identical"]
    assert rec["layers_covered"] == list(range(a.n_layers))
    assert {tuple(c["shape"]) for c in rec["cases"]} == {(2, 12, model.config.vocab_size)}
    group = [(0, 0), (1, 2), (2, 3)]
    with cut_heads(a, group):
        hooked = full_logits(model, ids)
    with zeroed_columns(a, group):
        zeroed = full_logits(model, ids)
    assert torch.equal(hooked, zeroed)
    # The comparison means something: the cut moves the logits.
    assert (hooked - intact).abs().max() > 1e-3
    # Restored: weights and logits bit for bit, no hook left behind.
    assert _same_weights(model, snap)
    assert _hooks(a) == 0
    assert restore(model, ids, intact)["identical"]


def test_hook_never_modifies_weights(model):
    a = Adapter(model)
    snap = _snapshot(model)
    with torch.no_grad(), cut_heads(a, a.heads()):
        model(random_ids(1, 8))
    assert _same_weights(model, snap)


@pytest.mark.parametrize("family", ["llama"])
def test_hooks_removed_when_the_body_raises(model):
    a = Adapter(model)
    ids = random_ids(1, 8)
    intact = full_logits(model, ids)
    snap = _snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with cut_heads(a, [(0, 1), (2, 0)]):
            assert _hooks(a) == 2
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with cut_rows(a, head_mask(a, [[(1, 1)], []])):
            assert _hooks(a) == 1
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        with zeroed_columns(a, [(1, 2)]):
            assert not _same_weights(model, snap)
            raise RuntimeError("boom")
    assert _hooks(a) == 0
    assert _same_weights(model, snap)
    assert torch.equal(full_logits(model, ids), intact)


@pytest.mark.parametrize("family", ["gpt2"])
def test_out_of_range_head_is_a_clear_error(model):
    a = Adapter(model)
    for bad in [(0, a.n_heads), (a.n_layers, 0), (-1, 0), (0, -1)]:
        with pytest.raises(HeadAddressError, match=r"does not exist.*3 layers × 4 heads"):
            with cut_heads(a, [(0, 0), bad]):
                pass
        assert _hooks(a) == 0            # nothing was registered before the error
        with pytest.raises(HeadAddressError):
            head_mask(a, [[bad]])
        with pytest.raises(HeadAddressError):
            with zeroed_columns(a, [bad]):
                pass
    with pytest.raises(HeadAddressError, match=r"\(layer, head\)"):
        with cut_heads(a, [5]):
            pass
    with pytest.raises(HeadAddressError, match="masks address"):
        with cut_rows(a, torch.zeros(1, a.n_layers, a.n_heads + 1, dtype=torch.bool)):
            pass


def test_batched_rows_equal_one_at_a_time(model):
    """cut_rows: each batch row with its own cut == that cut alone (1e-5), intact rows untouched."""
    a = Adapter(model)
    ids = random_ids(1, 14, seed=3).repeat(4, 1)
    rows = [[], [(0, 1)], [(1, 0), (2, 3)], [(2, 2)]]
    with torch.no_grad(), cut_rows(a, head_mask(a, rows)):
        batched = model(ids).logits
    for i, heads in enumerate(rows):
        with torch.no_grad(), cut_heads(a, heads):
            alone = model(ids[:1]).logits[0]
        assert (batched[i] - alone).abs().max() <= 1e-5
    assert (batched[1] - batched[0]).abs().max() > 1e-3   # different rows really differ
    with pytest.raises(InterventionError, match="masks for 4 rows"):
        with torch.no_grad(), cut_rows(a, head_mask(a, rows)):
            model(ids[:2])


@pytest.mark.parametrize("reuse", [True, False])
def test_batched_runner_equals_loop(model, reuse):
    """BatchedCuts (prefix reuse, logits only at read positions, chunks) == loop_cuts to 1e-5."""
    a = Adapter(model)
    ids = random_ids(3, 16, seed=1)
    positions = torch.tensor([0, 5, 15])
    variants = [[], [(2, 1)], [(0, 0)], [(1, 2), (2, 0)], [(0, 3), (1, 1), (2, 2)]]

    def reduce(logits, seq):
        return torch.log_softmax(logits.float(), dim=-1)

    looped = loop_cuts(model, a, ids, variants, reduce, positions)
    batched = BatchedCuts(model, a, ids, positions, batch=4, reuse_prefix=reuse).run_variants(variants, reduce)
    assert batched.shape == (5, 3, 3, model.config.vocab_size)
    assert batched_vs_loop([({}, batched, looped)], rounding(a, 1.0, float(looped.abs().max())), "log-probs")["passed"]
    assert (looped[1] - looped[0]).abs().max() > 1e-3
    assert _hooks(a) == 0
    assert all("forward" not in a.block(l).__dict__ for l in range(a.n_layers))


def test_guards_fail_loudly():
    from tiny import tiny_model
    model = tiny_model("llama")
    a = Adapter(model)
    ids = random_ids(1, 8)
    intact = full_logits(model, ids)
    # by hand: factor 1 × u 2^-24 × magnitude 1 × depth 1 × √1 = 5.96e-08; 2e-5 is 336 times that
    with pytest.raises(GuardError, match=r"batched_vs_loop: x: \|Δ\| past its bound in 1 of 1 cases: \|Δ\| = 2e-05 "
                       r"> bound 5.96e-08 .*, 336 × the bound and 2e-05 × the numbers' size") as failed:
        batched_vs_loop([({}, torch.zeros(3), torch.tensor([0.0, 2e-5, 0.0]))], Rounding(1.0, "float32", 1.0, 1, 1), "x")
    assert failed.value.record["bound"] == 2 ** -24 and "in_float64" in str(failed.value)
    with pytest.raises(ValueError, match="a bound is 0 .* or derived from rounding"):
        batched_vs_loop([({}, torch.zeros(3), torch.zeros(3))], 1e-5, "x")      # a typed bound is refused
    with torch.no_grad():
        a.out_proj(1).weight[0, 0] += 1e-3          # the model did not come back
    with pytest.raises(GuardError, match="guard restore: .* not identical"):
        restore(model, ids, intact)


def test_plan_chunks_by_hand():
    from headwatch.ablation.cut import plan_chunks
    # Two rows cut at layer 0, one at layer 3, two intact (earliest = n_layers): batch 2.
    assert plan_chunks([0, 0, 3, 30, 30], 30, 2, 1) == [(0, 2), (2, 3), (3, 5)]
    # A big per-forward overhead makes full chunks cheaper than many small ones.
    assert plan_chunks([0, 1, 2, 3], 30, 4, 100) == [(0, 4)]
    assert plan_chunks([0, 10, 20, 29], 30, 4, 0) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    rows = sorted(l for l in range(30) for _ in range(9))
    chunks = plan_chunks(rows, 30, 64, 1)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(rows)
    assert all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))
    assert all(0 < j - i <= 64 for i, j in chunks)
    with pytest.raises(ValueError, match="sorted"):
        plan_chunks([3, 0], 30, 4)
    with pytest.raises(ValueError, match="at least one row"):
        plan_chunks([0, 1], 30, 0)


def _cheapest_split(earliest, n_layers, batch, overhead):
    """Every way to cut the rows into consecutive chunks of at most ``batch``: the least cost."""
    import itertools

    n, best = len(earliest), float("inf")
    for cuts in itertools.product([False, True], repeat=n - 1):
        starts = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        if all(b - a <= batch for a, b in zip(starts, starts[1:])):
            best = min(best, sum((n_layers - earliest[a]) * (b - a + overhead) for a, b in zip(starts, starts[1:])))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_plan_chunks_is_the_cheapest_split(seed):
    """Against every split of up to 11 rows, with budgets and overheads as the cached per-position
    sweep scales them (many rows a chunk, an overhead of several rows)."""
    from headwatch.ablation.cut import plan_chunks

    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 12, (1,), generator=g))
    earliest = sorted(torch.randint(0, 6, (n,), generator=g).tolist())
    for batch, overhead in ((1, 1), (3, 1), (5, 3.5), (12, 0.25), (12, 14)):
        chunks = plan_chunks(earliest, 6, batch, overhead)
        assert chunks[0][0] == 0 and chunks[-1][1] == n
        assert all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))
        assert all(0 < j - i <= batch for i, j in chunks)
        cost = sum((6 - earliest[i]) * (j - i + overhead) for i, j in chunks)
        assert cost == pytest.approx(_cheapest_split(earliest, 6, batch, overhead))
