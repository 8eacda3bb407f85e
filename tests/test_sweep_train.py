"""One training job (headwatch.sweep.train): schedule and data order by hand, resuming from a
checkpoint bit for bit, and the loop without host synchronisation — the same losses, bit
for bit, as the loop that read every step's loss on the host, and no per-step host read left."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from headwatch.charlm.corpus import batch_offsets, build_corpus, eval_offsets
from headwatch.charlm.stack import StackedCharLM, clip_per_model
from headwatch.settings.sweep import TrainSettings
from headwatch.charlm.loop import lr_at, member_losses
from test_loop import HostReads
from headwatch.sweep.train import (Interrupted, RunOptions, load_trained, make_model, save_trained, train,
                                   windows)

TRAIN = dict(steps=10, batch=4, lr=3e-3, min_lr=3e-4, warmup=2, weight_decay=0.1, eval_every=4,
             eval_batches=2, checkpoint_every=100)
DENSE = dict(width=16, heads=2, layers=2, context=16)
EXPERTS = dict(DENSE, experts=4, top_k=2, balance=0.01)


@pytest.fixture(scope="module")
def corpus():
    c = build_corpus(plays=["tragedies/macbeth"], target_chars=20_000)
    return c.ids(), c.meta()


def host_loop(ids, meta, model_cfg, seed, train_cfg):
    """The loop as it was: each step's loss read on the host (``.item()``) and summed in
    Python, every evaluation batch likewise (each position's loss added in float64), the validation
    windows and the fixed sample of the training split — on a stack of one model, as the trainer
    trains it (that a stack trains as CharLM alone does is tests/test_stack.py's). Returns (model,
    metrics)."""
    settings = TrainSettings.from_config(train_cfg)
    s = settings.as_dict()
    context, n_train = model_cfg["context"], meta["n_train"]
    data = torch.as_tensor(ids.astype(np.int64))
    train_ids, val_ids = data[:n_train], data[n_train:]
    fixed = s["eval_batches"] * s["batch"]
    val_offsets, sample_offsets = eval_offsets(len(val_ids), fixed, context), eval_offsets(n_train, fixed, context)
    stack = StackedCharLM([make_model(meta["vocab_size"], model_cfg, seed)])
    model = stack.member(0)
    decay, rest = stack.decay_groups()
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=s["weight_decay"]), dict(params=rest, weight_decay=0.0)],
                            lr=s["lr"], betas=tuple(s["betas"]), fused=True)
    balance = float(model_cfg.get("balance", 0.0))

    def mean_loss(split, offsets):
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(offsets), s["batch"]):
                vx, vy = windows(split, offsets[i:i + s["batch"]], context)
                total += F.cross_entropy(model(vx).flatten(0, 1), vy.flatten(), reduction="none").double().sum().item()
        return total / (len(offsets) * context)

    rows, loss_sum, loss_n = [], 0.0, 0
    for step in range(s["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, s["lr"], s["min_lr"], s["warmup"], s["steps"])
        x, y = windows(train_ids, batch_offsets(seed, step, n_train, s["batch"], context), context)
        loss = member_losses(stack(x[None]), y[None])[0]
        opt.zero_grad(set_to_none=True)
        (loss + balance * torch.stack(stack.balance_losses).mean() if balance else loss).backward()
        clip_per_model(list(stack.parameters()), s["grad_clip"])
        opt.step()
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        if (step + 1) % s["eval_every"] == 0 or step + 1 == s["steps"]:
            rows.append(dict(step=step + 1, train_loss=loss_sum / loss_n,
                             train_sample_loss=mean_loss(train_ids, sample_offsets),
                             val_loss=mean_loss(val_ids, val_offsets)))
            loss_sum, loss_n = 0.0, 0
    return model, pd.DataFrame(rows)


@pytest.mark.parametrize("model_cfg", [DENSE, EXPERTS], ids=["dense", "experts-balanced"])
def test_device_loop_gives_the_host_loops_losses_bit_for_bit(corpus, model_cfg):
    torch.set_num_threads(1)
    ids, meta = corpus
    ref_model, ref = host_loop(ids, meta, model_cfg, 2, TRAIN)
    model, metrics, info, _ = train(ids, meta, model_cfg, 2, TRAIN)
    assert metrics["step"].tolist() == ref["step"].tolist() == [4, 8, 10]
    for col in ("train_loss", "train_sample_loss", "val_loss"):
        assert [v.hex() for v in metrics[col]] == [v.hex() for v in ref[col]], col
    assert info["final_val_loss"] == ref["val_loss"].iloc[-1]
    for (name, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert torch.equal(a, b), name
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0] < math.log(meta["vocab_size"]) + 0.1


def test_the_host_reads_do_not_grow_with_the_steps(corpus):
    # One evaluation at the end either way: any read left inside the step would make the
    # 12-step run read 8 times more than the 4-step one (the host loop: one .item() a step).
    torch.set_num_threads(1)
    ids, meta = corpus
    counts = {}
    for steps in (4, 12):
        with HostReads() as reads:
            train(ids, meta, EXPERTS, 0, dict(TRAIN, steps=steps, warmup=1, eval_every=steps))
        counts[steps] = reads.count
    assert counts[4] == counts[12] > 0
    with HostReads() as reads:
        host_loop(ids, meta, EXPERTS, 0, dict(TRAIN, steps=4, warmup=1, eval_every=4))
    assert reads.count >= 4        # the check sees the host loop's reads


def test_a_run_records_its_course_its_best_and_its_evaluations_cost(corpus):
    """Every row: the training loss since the last row, the fixed training sample's and the validation
    loss; the info: the best validation loss and its first step, the final gap (validation minus the
    fixed sample) and the evaluations' seconds beside the steps'."""
    ids, meta = corpus
    _, metrics, info, _ = train(ids, meta, DENSE, 1, dict(TRAIN, steps=12, eval_every=2))
    assert list(metrics.columns) == ["step", "train_loss", "train_sample_loss", "val_loss", "tokens_per_s"]
    best = metrics["val_loss"].min()
    assert info["best_val_loss"] == best and info["best_val_step"] == metrics.loc[metrics["val_loss"] == best, "step"].min()
    last = metrics.iloc[-1]
    assert info["final_train_val_gap"] == last["val_loss"] - last["train_sample_loss"] != 0
    assert info["final_train_sample_loss"] == last["train_sample_loss"] and info["final_val_loss"] == last["val_loss"]
    assert info["eval_seconds"] > 0 and info["train_seconds"] > 0
    assert info["eval_share"] == info["eval_seconds"] / info["train_seconds"]


def test_with_dropout_a_run_is_reproducible_and_its_evaluations_draw_nothing(corpus):
    from headwatch.charlm.loop import Schedule, Trainer

    ids, meta = corpus
    cfg, settings = dict(DENSE, dropout=0.3), dict(TRAIN, steps=6, eval_every=3)
    model, metrics, info, _ = train(ids, meta, cfg, 1, settings)
    again = train(ids, meta, cfg, 1, settings)[1]
    pd.testing.assert_frame_equal(metrics.drop(columns="tokens_per_s"), again.drop(columns="tokens_per_s"))
    plain = train(ids, meta, DENSE, 1, settings)[1]
    assert not np.array_equal(plain["train_loss"].to_numpy(), metrics["train_loss"].to_numpy())
    # the last row's validation loss is the returned model's, scored again in eval mode: no mask drawn
    t = TrainSettings.from_config(settings)
    n_train, context = meta["n_train"], cfg["context"]
    val = torch.as_tensor(ids.astype(np.int64))[n_train:]
    x, y = windows(val, eval_offsets(len(val), t.eval_batches * t.batch, context), context)
    trainer = Trainer(StackedCharLM([model]), Schedule(t.lr, t.min_lr, t.warmup, t.steps), weight_decay=t.weight_decay,
                      betas=t.betas)
    assert (trainer.loss_sums(x, y, t.batch) / y.numel()).item() == metrics["val_loss"].iloc[-1]


def test_a_non_finite_loss_stops_training_and_names_its_step(corpus):
    from headwatch.tableio import NonFiniteError

    ids, meta = corpus
    with pytest.raises(NonFiniteError, match=r"training loss is (nan|inf) at step \d+ "):
        train(ids, meta, DENSE, 0, dict(TRAIN, lr=1e6, warmup=1))


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


# ---------------------------------------------------------------- resume
TINY = dict(steps=12, batch=4, lr=3e-3, min_lr=3e-4, warmup=2, weight_decay=0.1, eval_every=4,
            eval_batches=2, checkpoint_every=3)
TINY_MODEL = dict(width=16, heads=2, layers=2, context=16)
HEADS = dict(windows=2, sequences=2, seed=0, early=2, late=4, threshold=0.3)   # sweep.heads, tiny


def test_a_resumed_run_ends_exactly_like_an_uninterrupted_one(small_corpus, tmp_path):
    torch.set_num_threads(1)
    ids, meta = small_corpus.ids(), small_corpus.meta()
    straight, m1, info1, h1 = train(ids, meta, TINY_MODEL, 3, TINY, heads=HEADS)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):                   # "killed" right after step 6's checkpoint
        train(ids, meta, TINY_MODEL, 3, TINY, heads=HEADS, run=RunOptions(checkpoint=ckpt, stop_after=5))
    assert ckpt.exists()
    resumed, m2, info2, h2 = train(ids, meta, TINY_MODEL, 3, TINY, heads=HEADS, run=RunOptions(checkpoint=ckpt))
    assert info2["resumed_from"] == 6 and info1["resumed_from"] == 0
    assert not ckpt.exists()                           # removed once the run is complete
    assert m1["step"].tolist() == m2["step"].tolist() == [4, 8, 12]
    cols = ["train_loss", "train_sample_loss", "val_loss", "in_context"]
    assert np.array_equal(m1[cols].to_numpy(), m2[cols].to_numpy())   # bit-identical
    # §7b records: every head at every evaluation step, the ones before the kill read back
    # from the checkpoint, bit for bit
    assert h1["step"].tolist() == [s for s in (4, 8, 12) for _ in range(2 * 2)]
    pd.testing.assert_frame_equal(h1, h2, check_exact=True)
    assert h1[["sink", "prev", "self", "induction", "induction_text"]].gt(0).all().all()
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), n
    assert m1["val_loss"].iloc[-1] < m1["val_loss"].iloc[0] < math.log(meta["vocab_size"]) + 0.1


def test_a_checkpoint_of_other_settings_is_not_resumed(small_corpus, tmp_path):
    ids, meta = small_corpus.ids(), small_corpus.meta()
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):
        train(ids, meta, TINY_MODEL, 3, dict(TINY, lr=1e-2), run=RunOptions(checkpoint=ckpt, stop_after=3))
    _, _, info, _ = train(ids, meta, TINY_MODEL, 3, dict(TINY, steps=6), run=RunOptions(checkpoint=ckpt))
    assert info["resumed_from"] == 0


def test_a_saved_model_loads_back_with_its_record(corpus, tmp_path):
    ids, meta = corpus
    model, _, info, _ = train(ids, meta, EXPERTS, 1, dict(TRAIN, steps=2, eval_every=2))
    sha256 = save_trained(model, tmp_path / "model.pt", meta, info, extra=dict(run=dict(sweep="s", shape="a", seed=1)))
    back, saved = load_trained(tmp_path / "model.pt", sha256=sha256)     # verified, weights_only
    assert back.spec == model.spec and back.spec.experts == 4 and not back.training
    for (name, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), name
    x = torch.randint(0, meta["vocab_size"], (2, EXPERTS["context"]))
    assert torch.equal(back(x), model.eval()(x))
    assert saved["vocab"] == meta["vocab"] and saved["info"]["params"] == info["params"]
    assert saved["run"] == dict(sweep="s", shape="a", seed=1)


def test_bf16_without_bfloat16_matmuls_trains_in_float32_and_the_run_says_so(small_corpus, monkeypatch):
    import headwatch.sweep.train as training

    assert training.bf16_supported("cpu") == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    ids, meta = small_corpus.ids(), small_corpus.meta()
    settings = dict(TINY, steps=4)
    _, exact, info, _ = train(ids, meta, TINY_MODEL, 0, settings)
    assert (info["precision"], info["precision_requested"], info["precision_fallback"], info["compiled"]) == (
        "float32", "float32", None, False)
    monkeypatch.setattr(training, "bf16_supported", lambda device: False)
    _, fell, info, _ = train(ids, meta, TINY_MODEL, 0, settings, run=RunOptions(precision="bf16"))
    assert info["precision"] == "float32" and info["precision_requested"] == "bf16"
    assert "no bfloat16 matmul kernels" in info["precision_fallback"]
    pd.testing.assert_frame_equal(fell.drop(columns="tokens_per_s"), exact.drop(columns="tokens_per_s"))
    # Where the device has them, bf16 is what it computes in: other losses.
    monkeypatch.setattr(training, "bf16_supported", lambda device: True)
    _, low, info, _ = train(ids, meta, TINY_MODEL, 0, settings, run=RunOptions(precision="bf16"))
    assert info["precision"] == "bf16" and info["precision_fallback"] is None
    assert not np.array_equal(low["val_loss"].to_numpy(), exact["val_loss"].to_numpy())


def test_the_precision_check_passes_only_within_seed_noise():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from train import precision_verdict

    boot = dict(resamples=1000, seed=0, level=0.95)
    f32 = np.array([2.10, 2.12, 2.14])                      # seed std 0.02
    ok = precision_verdict({"float32": f32, "bf16": f32 + [0.004, -0.003, 0.005]}, "float32", boot)
    assert "bf16 is WITHIN seed noise" in ok[-1] and "seed std of float32 0.02000" in ok[1]
    far = precision_verdict({"float32": f32, "bf16": f32 + 0.03}, "float32", boot)
    assert "bf16 is NOT within seed noise" in far[-1]
    one = precision_verdict({"float32": f32, "bf16": f32 + [0.0, 0.0, 0.025]}, "float32", boot)
    assert "NOT within" in one[-1]                           # one seed beyond the std is enough
