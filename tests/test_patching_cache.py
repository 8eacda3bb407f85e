"""Every head at every position through the corrupted run's key/value cache
(headwatch/patching_cache.py) against one patch per forward pass, on tiny models of every family."""
import pandas as pd
import pytest
import torch

from headwatch import guards
from headwatch.arch import Adapter
from headwatch.patching import Patch, Patcher, position_patches
from headwatch.patching_cache import CachedPositions, multiply_adds, run_positions_all
from headwatch.settings.patching import PatchingError, PatchingSettings
from tiny import patching_prompts, tiny_model


def _patcher(model, batch=16):
    return Patcher(model, Adapter(model), *patching_prompts(), batch)


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
    rec = guards.batched_vs_loop(p.against_loop(patches[:4], cached[:4, :2], [0, 1]), 1e-5, "cached")
    assert rec["passed"]


def test_the_guard_fires_when_the_cache_holds_the_wrong_keys():
    p = _patcher(tiny_model("mistral"))
    cached = CachedPositions(p)
    cached.keys = [k.roll(1, dims=0) for k in cached.keys]            # another prompt's keys before p
    patches = position_patches([(1, 0)], p.length)
    got = cached.run(patches)
    with pytest.raises(guards.GuardError, match="batched_vs_loop: .* > 1e-05"):
        guards.batched_vs_loop(p.against_loop(patches, got[:, :2], [0, 1]), 1e-5, "cached")


def test_only_one_head_at_one_position_and_a_family_with_a_cache():
    p = _patcher(tiny_model("llama"))
    cached = CachedPositions(p)
    for bad in (Patch("z", 0, 1), Patch("z", 0, None, 2), Patch("resid_in", 1, None, 2)):
        with pytest.raises(PatchingError, match="one head's z at one position"):
            cached.run([bad])
    with pytest.raises(PatchingError, match="takes no transformers key/value cache"):
        CachedPositions(_patcher(tiny_model("charlm")))


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
    clean, corrupted, io, s = patching_prompts(n=4)
    prompts = pd.DataFrame(dict(clean_ids=list(clean.numpy()), corrupted_ids=list(corrupted.numpy()),
                                io_id=io.numpy(), s_id=s.numpy(), tokens=[[f"t{i}" for i in range(10)]] * 4))
    heads = pd.DataFrame([(l, h) for l, h in a.heads()], columns=["layer", "head"])
    heads["score"] = [0.1 * ((7 * i) % 12) for i in range(12)]
    heads["score_rank"] = heads["score"].rank(ascending=False, method="min").astype(int)
    settings = PatchingSettings(batch=16, tolerance=1e-5, guard_prompts=2, positions_all_heads=3)
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
    every = run_positions_all(model, a, prompts, heads, PatchingSettings(batch=16, tolerance=1e-5, guard_prompts=2))
    assert len(every[0]) == 12 * 10 and every[1]["heads_chosen"] == "every head"
    p = Patcher(model, a, clean, corrupted, io, s, 16)
    row = table[(table.layer == top.layer.iloc[0]) & (table["head"] == top["head"].iloc[0]) & (table.position == 4)]
    want = p.loop([Patch("z", int(top.layer.iloc[0]), int(top["head"].iloc[0]), 4)]).double().mean()
    assert float(row.logit_diff.iloc[0]) == pytest.approx(float(want), abs=1e-5)
