"""The sweep's library: corpus, model, schedule, data order, resume, summary guards."""
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from headwatch.charlm import check_sweeps, job_params, owner, runs, train_jobs
from headwatch.charlm.corpus import build_corpus, speeches
from headwatch.charlm.model import CharLM, count_params
from headwatch.charlm.summary import SummaryError, summarize
from headwatch.charlm.train import (Interrupted, batch_offsets, eval_offsets, lr_at, train,
                                    windows)
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


# ------------------------------------------------------------------ model
def n_params(model):
    return sum(p.numel() for p in model.parameters())


def test_split_sweep_param_counts_are_identical_and_match_a_hand_count():
    # Hand count for width 256, 4 layers, context 128, FFN 4x, vocabulary 65:
    #   token embeddings 65*256 = 16 640; positions 128*256 = 32 768;
    #   per block: q,k,v,o 4*256*256 = 262 144; two LayerNorms 2*(256+256) = 1 024;
    #   FFN up 256*1024 + 1024 = 263 168, down 1024*256 + 256 = 262 400
    #   -> 788 736 per block, 3 154 944 for 4; final LayerNorm 512; head 256*65 = 16 640.
    hand = 16_640 + 32_768 + 3_154_944 + 512 + 16_640
    assert hand == 3_221_504
    split = CONFIG["sweep"]["sweeps"]["heads_split"]["grid"]
    assert [e["heads"] for e in split] == [1, 2, 4, 8, 16, 32]
    counts = {e["heads"]: n_params(CharLM(65, e["width"], e["heads"])) for e in split}
    assert set(counts.values()) == {hand}, counts
    assert count_params(65, 256)["total"] == hand


@pytest.mark.parametrize("vocab,width,heads,layers,context,ffn", [(65, 128, 2, 4, 128, 4),
                                                                 (65, 512, 8, 4, 128, 4),
                                                                 (11, 24, 3, 2, 7, 2)])
def test_param_formula_matches_the_module(vocab, width, heads, layers, context, ffn):
    model = CharLM(vocab, width, heads, layers=layers, context=context, ffn_mult=ffn)
    parts = count_params(vocab, width, layers, context, ffn)
    assert n_params(model) == parts["total"]
    attn = sum(p.numel() for n, p in model.named_parameters() if ".attn." in n)
    assert attn == parts["attention"] == layers * 4 * width * width


def test_attention_projections_have_the_documented_names_and_shapes():
    model = CharLM(20, 32, 4, layers=3)
    assert isinstance(model.blocks, torch.nn.ModuleList) and len(model.blocks) == 3
    for block in model.blocks:
        for name in ("q", "k", "v", "o"):
            lin = getattr(block.attn, name)
            assert isinstance(lin, torch.nn.Linear) and lin.bias is None
            assert lin.weight.shape == (32, 32)
    assert model.head.bias is None and model.head.weight.data_ptr() != model.tok.weight.data_ptr()


@pytest.mark.parametrize("width,heads", [(256, 3), (256, 0), (10, 4)])
def test_heads_that_do_not_divide_the_width_are_refused(width, heads):
    with pytest.raises(ValueError, match=f"heads {heads} do not divide width {width}|must be positive"):
        CharLM(65, width, heads)


def test_logits_shape_causality_and_attention_by_hand():
    torch.manual_seed(0)
    model = CharLM(13, 16, 4, layers=2, context=10).eval()
    idx = torch.randint(0, 13, (3, 10))
    logits = model(idx)
    assert logits.shape == (3, 10, 13)
    changed = idx.clone()
    changed[:, 6] = (changed[:, 6] + 1) % 13       # a later token cannot move earlier logits
    out = model(changed)
    assert torch.equal(out[:, :6], logits[:, :6]) and not torch.allclose(out[:, 6:], logits[:, 6:])
    # scaled_dot_product_attention == softmax(q k^T / sqrt(d) + causal mask) v, head by head
    attn, x = model.blocks[0].attn, torch.randn(2, 5, 16)
    q, k, v = (f(x).view(2, 5, 4, 4).transpose(1, 2) for f in (attn.q, attn.k, attn.v))
    s = q @ k.transpose(-1, -2) / 2.0 + torch.full((5, 5), float("-inf")).triu(1)
    manual = attn.o((s.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(attn(x), manual, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="longer than the context"):
        model(torch.zeros(1, 11, dtype=torch.long))


# --------------------------------------------------------- schedule, data
def test_learning_rate_schedule_hand_cases():
    kw = dict(lr=1e-3, min_lr=1e-4, warmup=10, steps=110)
    assert lr_at(0, **kw) == pytest.approx(1e-4)            # (0+1)/10 of lr
    assert lr_at(4, **kw) == pytest.approx(5e-4)
    assert lr_at(10, **kw) == pytest.approx(1e-3)           # end of warm-up: the peak
    assert lr_at(60, **kw) == pytest.approx(5.5e-4)         # half-way: (lr + min_lr) / 2
    assert lr_at(110, **kw) == pytest.approx(1e-4)          # the end: min_lr
    assert lr_at(30, **kw) > lr_at(31, **kw)


def test_data_order_depends_on_seed_and_step_only():
    a = batch_offsets(0, 7, 10_000, 8, 32)
    assert np.array_equal(a, batch_offsets(0, 7, 10_000, 8, 32))
    assert not np.array_equal(a, batch_offsets(1, 7, 10_000, 8, 32))
    assert not np.array_equal(a, batch_offsets(0, 8, 10_000, 8, 32))
    assert a.min() >= 0 and a.max() <= 10_000 - 32 - 1
    ids = torch.arange(100)
    x, y = windows(ids, [0, 50], 4)
    assert x.tolist() == [[0, 1, 2, 3], [50, 51, 52, 53]] and y.tolist() == [[1, 2, 3, 4], [51, 52, 53, 54]]
    assert eval_offsets(100, 3, 9).tolist() == [0, 45, 90]     # evenly spaced, last ends at id 99


# ------------------------------------------------------------------ corpus
MARKDOWN = """# A Play

## ACT I

### SCENE I. A heath.

_Thunder. Enter two Witches, with
a drum_

**First Witch**  
When shall we meet again\u2014  
In thunder? _\\[Aside]_  
_\\[Kneeling]_  

**SECOND WITCH & Third Witch**  
Done\\-done.

_Exeunt_
"""


def test_markdown_speeches_become_plain_ascii_speaker_blocks():
    assert speeches(MARKDOWN) == ["First Witch:\nWhen shall we meet again--\nIn thunder?\n\n",
                                  "SECOND WITCH & Third Witch:\nDone-done.\n\n"]


@pytest.fixture(scope="module")
def small_corpus():
    return build_corpus(plays=["tragedies/macbeth", "tragedies/hamlet"], target_chars=120_000)


def test_corpus_is_deterministic_ascii_speeches_cut_at_a_speech(small_corpus):
    c = small_corpus
    again = build_corpus(plays=["tragedies/macbeth", "tragedies/hamlet"], target_chars=120_000)
    assert again.text == c.text and again.meta()["sha256"] == c.meta()["sha256"]
    assert 115_000 < len(c.text) <= 120_000 and c.text.isascii()
    assert re.fullmatch(r"([^\n:]+:\n([^\n]+\n)+\n)+", c.text)        # SPEAKER:\nline...\n\n, only
    assert not set("_*#[]\\") & set(c.text)                            # no markdown left
    assert [s["name"] for s in c.sources] == ["tragedies/macbeth", "tragedies/hamlet"]
    assert c.sources[0]["chars"] + c.sources[1]["chars"] == len(c.text)
    assert c.vocab == "".join(sorted(set(c.text)))
    assert c.n_train + c.n_val == len(c.text) and c.n_val == round(0.1 * len(c.text))
    ids = c.ids()
    assert "".join(c.vocab[i] for i in ids[:200]) == c.text[:200]


def test_configured_play_list_gives_about_1_1_million_characters():
    cfg = CONFIG["sweep"]["corpus"]
    c = build_corpus(plays=cfg["plays"], target_chars=cfg["target_chars"])
    assert cfg["target_chars"] - 2_000 < len(c.text) <= cfg["target_chars"]
    assert [s["name"] for s in c.sources] == cfg["plays"]        # every listed play is used


# ---------------------------------------------------------------- resume
TINY = dict(steps=12, batch=4, lr=3e-3, min_lr=3e-4, warmup=2, weight_decay=0.1, eval_every=4,
            eval_batches=2, checkpoint_every=3)
TINY_MODEL = dict(width=16, heads=2, layers=2, context=16)


def test_a_resumed_run_ends_exactly_like_an_uninterrupted_one(small_corpus, tmp_path):
    torch.set_num_threads(1)
    ids, meta = small_corpus.ids(), small_corpus.meta()
    straight, m1, info1 = train(ids, meta, TINY_MODEL, 3, TINY)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):                   # "killed" right after step 6's checkpoint
        train(ids, meta, TINY_MODEL, 3, TINY, checkpoint=ckpt, stop_after=5)
    assert ckpt.exists()
    resumed, m2, info2 = train(ids, meta, TINY_MODEL, 3, TINY, checkpoint=ckpt)
    assert info2["resumed_from"] == 6 and info1["resumed_from"] == 0
    assert not ckpt.exists()                           # removed once the run is complete
    assert m1["step"].tolist() == m2["step"].tolist() == [4, 8, 12]
    cols = ["train_loss", "val_loss"]
    assert np.array_equal(m1[cols].to_numpy(), m2[cols].to_numpy())   # bit-identical
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), n
    assert m1["val_loss"].iloc[-1] < m1["val_loss"].iloc[0] < math.log(meta["vocab_size"]) + 0.1


def test_a_checkpoint_of_other_settings_is_not_resumed(small_corpus, tmp_path):
    ids, meta = small_corpus.ids(), small_corpus.meta()
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):
        train(ids, meta, TINY_MODEL, 3, dict(TINY, lr=1e-2), checkpoint=ckpt, stop_after=3)
    _, _, info = train(ids, meta, TINY_MODEL, 3, dict(TINY, steps=6), checkpoint=ckpt)
    assert info["resumed_from"] == 0


# ---------------------------------------------------------------- summary
def finals(losses: dict, params: dict | None = None) -> pd.DataFrame:
    rows = []
    for (sweep, width, heads), values in losses.items():
        for seed, v in enumerate(values):
            rows.append(dict(sweep=sweep, config=f"w{width}-h{heads}", seed=seed, width=width,
                             heads=heads, trained_under=sweep, head_size=width // heads,
                             params=(params or {}).get((sweep, width, heads), width * 100),
                             steps=10, val_loss=v, train_loss=v + 0.1, tokens_per_s=1000.0))
    return pd.DataFrame(rows)


LOSSES = {("split", 8, 1): [2.0, 2.2], ("split", 8, 2): [1.6, 1.8],     # means 2.1, 1.7
          ("width", 4, 1): [3.0, 3.2], ("width", 8, 2): [2.0, 2.0]}     # means 3.1, 2.0
CAP = dict(sweep="width", **{"from": 4, "to": 8})


def test_summary_spread_noise_gain_and_ratio_by_hand():
    summary, contrast = summarize(finals(LOSSES), "split", CAP)
    row = summary.set_index(["sweep", "config"]).loc[("split", "w8-h1")]
    assert row["val_loss_mean"] == pytest.approx(2.1) and row["val_loss_std"] == pytest.approx(0.1414214)
    c = contrast.iloc[0]
    assert (c["best_config"], c["worst_config"]) == ("w8-h2", "w8-h1")
    assert c["spread"] == pytest.approx(0.4)
    assert c["mean_seed_std"] == pytest.approx(math.sqrt(0.02))          # both stds are 0.1414
    assert c["capacity_gain"] == pytest.approx(1.1)
    assert c["spread_over_gain"] == pytest.approx(0.4 / 1.1)
    assert c["spread_over_std"] == pytest.approx(0.4 / math.sqrt(0.02))


def test_summary_refuses_differing_split_param_counts():
    bad = finals(LOSSES, params={("split", 8, 1): 800, ("split", 8, 2): 801})
    with pytest.raises(SummaryError, match="parameter count"):
        summarize(bad, "split", CAP)


def test_summary_refuses_nan():
    nan = dict(LOSSES)
    nan[("split", 8, 2)] = [1.6, float("nan")]
    with pytest.raises(SummaryError, match="NaN.*split/w8-h2/seed1"):
        summarize(finals(nan), "split", CAP)


# ---------------------------------------------------------- config, plan
def test_config_sweeps_are_valid_and_plan_24_models_with_w256_h4_trained_once():
    cfg = CONFIG["sweep"]
    assert check_sweeps(cfg) == []
    # The split/capacity summary's 27 runs (24 trained); the studies add 45 runs of
    # which 33 are trained (w256-h4 x 3 is heads_split's, e8k2-b0.01 x 3 is experts').
    assert len(runs(cfg, studies=False)) == 27
    assert len(runs(cfg)) == 72 and len(train_jobs(cfg)) == 24 + 33
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 24
    assert owner(cfg, "experts_topk", "w256-h4-e8k2-b0.01", 1) == "experts"
    assert owner(cfg, "kv_sharing", "w256-h4", 2) == owner(cfg, "depth", "w256-h4", 2) == "heads_split"
    assert owner(cfg, "width", "w256-h4", 0) == "heads_split"
    with pytest.raises(ValueError, match="trained under sweep 'heads_split'"):
        job_params(cfg, "width", "w256-h4", 0)
    p = job_params(cfg, "width", "w512-h8", 2)
    assert p["model"] == dict(width=512, heads=8, layers=4, context=128, ffn_mult=4) and p["seed"] == 2


def test_different_settings_train_their_own_copy():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["width"]["train"] = dict(cfg["sweeps"]["width"]["train"], steps=10)
    assert owner(cfg, "width", "w256-h4", 0) == "width"
    assert len([r for r in train_jobs(cfg) if r["sweep"] in ("heads_split", "width")]) == 27


def test_bad_grid_entries_are_named_by_key():
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 256, "heads": 3}
    cfg["sweeps"]["width"]["train"] = dict(cfg["sweeps"]["width"]["train"], warmup=5000)
    errors = check_sweeps(cfg)
    assert "sweep.sweeps.heads_split.grid[2]: heads 3 do not divide width 256" in errors
    assert any(e.startswith("sweep.sweeps.width.train.warmup:") for e in errors)
    assert len(errors) == 2, errors
    cfg["sweeps"]["heads_split"]["grid"][2] = {"width": 128, "heads": 4}
    assert any(e.startswith("sweep.summary.split_sweep: sweep 'heads_split' must keep one width")
               for e in check_sweeps(cfg))


def test_any_text_file_can_be_the_corpus(tmp_path):
    text = tmp_path / "book.txt"
    text.write_text("".join(f"Paragraph {i}, caf\u00e9 \u2014 line.\nSecond line.\n\n" for i in range(100)))
    c = build_corpus(source=str(text), target_chars=1500)
    assert c.text.startswith("Paragraph 0, cafe -- line.\nSecond line.\n\n") and c.text.endswith("\n\n")
    assert len(c.text) <= 1500 and c.text.isascii() and c.sources == [dict(name="book.txt", chars=len(c.text))]
    with pytest.raises(FileNotFoundError, match="sweep.corpus.source"):
        build_corpus(source=str(tmp_path / "missing.txt"))
