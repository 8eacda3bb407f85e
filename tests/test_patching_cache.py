"""Every head at every position through the corrupted run's key/value cache
(headwatch/patching/positions.py) against one patch per forward pass, on tiny models of every family."""
import pandas as pd
import pytest
import torch

from headwatch.guards import batched_vs_loop, rounding
from headwatch.patching import guards
from headwatch.model.arch import Adapter
from headwatch.patching.batch import PromptBatch
from headwatch.patching.patcher import Patch, Patcher, position_patches
from headwatch.patching.positions import CachedPositions, multiply_adds, position_chunks, run_positions_all
from headwatch.settings.patching import PatchingError, PatchingSettings
from tiny import patching_prompts, tiny_model


def _patcher(model, batch=16, kv_cache=True):
    return Patcher(model, Adapter(model), patching_prompts(), batch, kv_cache=kv_cache)


def test_cached_sweep_equals_one_patch_per_forward_pass_on_every_family(model):
    """Windows shorter than the prompts (tests/tiny.py) bite here: a windowed layer must still
    see only its window when the keys before p come from the cache."""
    p = _patcher(model, batch=7)       # chunks that cut through a position's rows
    a = p.adapter
    heads = [(0, 1), (1, 2), (a.n_layers - 1, 3)]
    patches = position_patches(heads, p.length)
    cached = CachedPositions(p).run(patches)
    looped = p.loop(patches)
    assert (cached - looped).abs().max() <= 1e-5
    assert torch.allclose(cached, p.run(patches), atol=1e-5)          # the Patcher's uncached rows
    assert (cached - p.corrupted_ld).abs().max() > 1e-3                # a patch moves the metric
    rec = batched_vs_loop(p.against_loop(patches[:4], cached[:4, :2], [0, 1]), rounding(a, 1.0, p.largest_logit),
                          "cached")
    assert rec["passed"]


def test_the_guard_fires_when_the_cache_holds_the_wrong_keys():
    p = _patcher(tiny_model("mistral"))
    cached = CachedPositions(p)
    cached.keys = [k.roll(1, dims=0) for k in cached.keys]            # another prompt's keys before p
    patches = position_patches([(1, 0)], p.length)
    got = cached.run(patches)
    with pytest.raises(guards.GuardError, match="batched_vs_loop: .* past its bound") as failed:
        batched_vs_loop(p.against_loop(patches, got[:, :2], [0, 1]), rounding(p.adapter, 1.0, p.largest_logit),
                        "cached")
    assert failed.value.record["ratio"] > 100


def test_what_the_cached_sweep_refuses():
    """A patch that is not one head at one position, a family without a transformers cache, a
    Patcher that kept no cache or one missing a layer, padded prompts."""
    p = _patcher(tiny_model("llama"))
    cached = CachedPositions(p)
    for bad in (Patch("z", 0, 1), Patch("z", 0, None, 2), Patch("resid_in", 1, None, 2)):
        with pytest.raises(PatchingError, match="one head's z at one position"):
            cached.run([bad])
    with pytest.raises(PatchingError, match="takes no transformers key/value cache"):
        _patcher(tiny_model("charlm"))
    with pytest.raises(PatchingError, match="kept no key/value cache of its corrupted run"):
        CachedPositions(_patcher(p.model, kv_cache=False))
    p.corrupted_caches[0].layers.pop()                                 # a cache that skipped a layer
    with pytest.raises(PatchingError, match=f"holds {p.adapter.n_layers - 1} layers; expected {p.adapter.n_layers}"):
        CachedPositions(p)
    four = patching_prompts()
    mask = torch.ones_like(four.clean)
    mask[0, :2] = 0                                                    # the first prompt padded
    padded = PromptBatch(four.clean, four.corrupted, four.answer, four.distractor, mask)
    with pytest.raises(PatchingError, match="prompts of one length"):
        CachedPositions(Patcher(p.model, p.adapter, padded, 16, kv_cache=True))


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_the_corrupted_run_through_the_cache_is_the_corrupted_run(family):
    """The Patcher's corrupted run made through a DynamicCache (kept for the cached sweep) captures
    what it captures without one, and its cache holds every layer's keys at every position."""
    model = tiny_model(family)
    plain, kept = _patcher(model, batch=3, kv_cache=False), _patcher(model, batch=3)
    assert plain.corrupted_caches is None and len(kept.corrupted_caches) == 2       # 4 prompts, batch 3
    assert torch.allclose(kept.corrupted_ld, plain.corrupted_ld, atol=1e-6)
    for site in ("z", "resid_in"):
        for a, b in zip(kept.acts["corrupted"][site], plain.acts["corrupted"][site]):
            assert torch.allclose(a, b, atol=1e-6)
    cached = CachedPositions(kept)
    assert len(cached.keys) == kept.adapter.n_layers
    assert tuple(cached.keys[0].shape[::2]) == (4, kept.length)        # [prompts, kv heads, T, head_dim]


def test_position_chunks_by_tokens_by_hand():
    """Six rows at layer 0 and six at layer 2 of 3 layers, prompts of 4 tokens, batch 2, overhead 1.
    At position 0 a row computes 4 tokens: chunks of 2 rows, the Patcher's plan. At position 3 a
    row computes 1 token: 8 rows' budget (2 prompts × 4 tokens) and an overhead of 4 such rows per
    layer, so the layer-0 rows go in one pass (3 · (6 + 4) = 30) and the layer-2 rows in another
    (1 · (6 + 4) = 10): 40, where 8 rows then 4 cost 3 · 12 + 1 · 8 = 44."""
    layers = [0] * 6 + [2] * 6
    assert position_chunks(layers, 3, 2, 1, 4, 0) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12)]
    assert position_chunks(layers, 3, 2, 1, 4, 3) == [(0, 6), (6, 12)]
    # 20 rows of one layer at position 3: 3 passes of at most 8, the fewest (the first such split)
    assert position_chunks([0] * 20, 3, 2, 1, 4, 3) == [(0, 4), (4, 12), (12, 20)]


def test_multiply_adds_by_hand():
    """Two blocks of w weights each (Linear and Conv1D entries of GPT-2's blocks), vocabulary v:
    the loop runs T · (2w + v) per patch and prompt; a cached row (T − p) · (blocks from l) + v."""
    a = Adapter(tiny_model("gpt2", layers=2))
    w = sum(m.weight.numel() for m in a.block(0).modules() if type(m).__name__ == "Conv1D")
    v = a.embeddings()[1].weight.numel()
    loop, cached = multiply_adds(a, [Patch("z", 0, 1, 3), Patch("z", 1, 0, 9)], n=2, length=10)
    assert loop == 2 * 2 * 10 * (2 * w + v)
    assert cached == 2 * (7 * 2 * w + v) + 2 * (1 * w + v)


def test_the_rule_patches_the_top_heads_at_every_position():
    model = tiny_model("qwen3")
    a = Adapter(model)
    four = patching_prompts(n=4)
    prompts = pd.DataFrame(dict(clean_ids=list(four.clean.numpy()), corrupted_ids=list(four.corrupted.numpy()),
                                answer_id=four.answer.numpy(), distractor_id=four.distractor.numpy(),
                                tokens=[[f"t{i}" for i in range(10)]] * 4))
    heads = pd.DataFrame([(l, h) for l, h in a.heads()], columns=["layer", "head"])
    heads["score"] = [0.1 * ((7 * i) % 12) for i in range(12)]
    heads["score_rank"] = heads["score"].rank(ascending=False, method="min").astype(int)
    settings = PatchingSettings(batch=16, rounding_factor=1.0, guard_prompts=2, positions_all_heads=3)
    table, note, record = run_positions_all(model, a, prompts, heads, settings)
    top = heads.sort_values(["score", "layer", "head"], ascending=[False, True, True]).head(3)
    assert sorted(zip(table.layer, table["head"])) == sorted(
        (l, h) for l, h in zip(top.layer, top["head"]) for _ in range(10))
    assert len(table) == 3 * 10 and note["heads_patched"] == 3 and note["heads_total"] == 12
    assert note["multiply_adds_loop"] > note["multiply_adds_cached"] > 0
    assert record["passed"] and record["batched_vs_loop"]["n_cases"] > 10
    from headwatch.figures.patching_groups import positions_all_map

    fig = positions_all_map(table, dict(note, position_labels=[f"t{i}" for i in range(10)]))
    title = fig.axes[0].get_title()
    ratio = note["multiply_adds_loop"] / note["multiply_adds_cached"]
    assert "the top 3 heads of the head sweep by score (3 of 12)" in title and f"{ratio:.2f}× fewer" in title
    every = run_positions_all(model, a, prompts, heads, PatchingSettings(batch=16, rounding_factor=1.0, guard_prompts=2))
    assert len(every[0]) == 12 * 10 and every[1]["heads_chosen"] == "every head"
    p = Patcher(model, a, four, 16)
    row = table[(table.layer == top.layer.iloc[0]) & (table["head"] == top["head"].iloc[0]) & (table.position == 4)]
    want = p.loop([Patch("z", int(top.layer.iloc[0]), int(top["head"].iloc[0]), 4)]).double().mean()
    assert float(row.logit_diff.iloc[0]) == pytest.approx(float(want), abs=1e-5)
