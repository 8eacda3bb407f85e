"""Many models per step (headwatch.charlm.stack, headwatch.sweep.train.train_stack): a stack computes
each model's forward pass and gradient, and training a stack equals training each model alone —
in float64, the same seeds, every step's loss within 1e-9 of a plain loop over one CharLM
written here apart from the trainer."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from headwatch.charlm.corpus import batch_offsets, build_corpus, eval_offsets
from headwatch.charlm.model import CharLM
from headwatch.charlm.spec import ModelSpec
from headwatch.charlm.stack import StackedCharLM, clip_per_model, stack_key
from headwatch.charlm.loop import lr_at
from headwatch.sweep.train import RunOptions, train_stack

TRAIN = dict(steps=6, batch=3, lr=3e-3, min_lr=3e-4, warmup=2, weight_decay=0.1, betas=[0.9, 0.99], grad_clip=0.5,
             eval_every=1, eval_batches=2, checkpoint_every=100)
V = 23


@pytest.fixture(scope="module")
def corpus():
    c = build_corpus(plays=["tragedies/macbeth"], target_chars=12_000)
    return c.ids(), c.meta()


def built(specs, seeds):
    out = []
    for spec, seed in zip(specs, seeds):
        torch.manual_seed(seed)
        out.append(CharLM(spec))
    return out


STACKS = {
    "seeds": [ModelSpec(V, 16, 2, layers=2, context=8)] * 3,
    "heads": [ModelSpec(V, 16, h, layers=2, context=8) for h in (1, 2, 4, 8)],
    "kv": [ModelSpec(V, 16, 4, layers=2, context=8, kv_heads=2), ModelSpec(V, 16, 2, layers=2, context=8, kv_heads=1,
                                                                            head_size=8)],
    "rotary": [ModelSpec(V, 16, h, layers=2, context=8, rotary=True) for h in (1, 2, 4)],
    "experts": [ModelSpec(V, 16, 2, layers=2, context=8, experts=4, top_k=k, expert_width=8) for k in (1, 2)],
}


@pytest.mark.parametrize("kind", list(STACKS))
def test_a_stack_computes_each_models_logits_and_gradients(kind, float64):
    specs = STACKS[kind]
    models = built(specs, range(len(specs)))
    stack = StackedCharLM(models)
    idx = torch.randint(0, V, (len(specs), 3, 8), generator=torch.Generator().manual_seed(1))
    out = stack(idx)
    sum(F.cross_entropy(out[i].flatten(0, 1), idx[i].flatten()) for i in range(len(specs))).backward()
    for i, model in enumerate(models):
        alone = model(idx[i])
        assert (out[i] - alone).abs().max() <= 1e-12
        F.cross_entropy(alone.flatten(0, 1), idx[i].flatten()).backward()
        for name, p in model.named_parameters():
            assert (stack.tensors(grad=True)[name][i] - p.grad).abs().max() <= 1e-12, name
        assert torch.equal(stack.member(i)(idx[i]), stack.copy_of(i)(idx[i]))


def test_models_whose_parameters_differ_in_shape_share_no_stack():
    a, b = ModelSpec(V, 16, 2), ModelSpec(V, 32, 2)
    assert stack_key(ModelSpec(V, 16, 1)) == stack_key(ModelSpec(V, 16, 8)) != stack_key(a := ModelSpec(V, 16, 2, kv_heads=1))
    with pytest.raises(ValueError, match="differ in shape"):
        StackedCharLM(built([a, b], [0, 1]))
    with pytest.raises(ValueError, match="holds 2 models"):
        StackedCharLM(built([a, a], [0, 1]))(torch.zeros(3, 1, 4, dtype=torch.long))


def test_clipping_per_model_is_clip_grad_norm_of_each(float64):
    models = built([ModelSpec(V, 16, 2, layers=1, context=8)] * 3, [0, 1, 2])
    stack = StackedCharLM(models)
    idx = torch.randint(0, V, (3, 2, 8), generator=torch.Generator().manual_seed(2))
    out = stack(idx)
    (out[0].sum() * 10 + out[1].sum() * 1e-4 + (out[2] ** 2).sum()).backward()      # one clipped, one not
    norms = clip_per_model(list(stack.parameters()), 1.0)
    for i, (model, scale) in enumerate(zip(models, (10, 1e-4, None))):
        o = model(idx[i])
        (o.sum() * scale if scale else (o ** 2).sum()).backward()
        want = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        assert math.isclose(float(norms[i]), float(want), rel_tol=1e-12)
        for name, p in model.named_parameters():
            assert (stack.tensors(grad=True)[name][i] - p.grad).abs().max() <= 1e-12
    assert norms[0] > 1 > norms[1]


def alone(ids, meta, model_cfg, seed, t):
    """One model trained by a plain loop (CharLM, torch's AdamW and clip_grad_norm_): each step's
    training loss, validation loss and loss on the fixed training sample, and the model."""
    context, n_train = model_cfg["context"], meta["n_train"]
    data = torch.as_tensor(ids.astype(np.int64))
    train_ids, val_ids = data[:n_train], data[n_train:]
    spec = ModelSpec.from_settings(meta["vocab_size"], model_cfg)
    torch.manual_seed(seed)
    model = CharLM(spec)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=t["weight_decay"]), dict(params=rest, weight_decay=0.0)],
                            lr=t["lr"], betas=tuple(t["betas"]))
    balance = model_cfg.get("balance", 0.0)
    val = eval_offsets(len(val_ids), t["eval_batches"] * t["batch"], context)
    sample = eval_offsets(n_train, t["eval_batches"] * t["batch"], context)     # the fixed training sample
    cut = lambda d, offs: d[torch.as_tensor(offs)[:, None] + torch.arange(context + 1)]
    train_losses, val_losses, sample_losses = [], [], []
    for step in range(t["steps"]):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, t["lr"], t["min_lr"], t["warmup"], t["steps"])
        w = cut(train_ids, batch_offsets(seed, step, n_train, t["batch"], context))
        loss = F.cross_entropy(model(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten())
        opt.zero_grad()
        (loss + balance * torch.stack(model.balance_losses).mean() if balance else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"])
        opt.step()
        train_losses.append(loss.item())
        with torch.no_grad():
            for split, offs, out in ((val_ids, val, val_losses), (train_ids, sample, sample_losses)):
                v = cut(split, offs)
                out.append(F.cross_entropy(model(v[:, :-1]).flatten(0, 1), v[:, 1:].flatten()).item())
    return train_losses, val_losses, sample_losses, model


MEMBERS = {
    "seeds and heads": [dict(model=dict(width=16, heads=h, layers=2, context=8), seed=s)
                        for h in (1, 4) for s in (0, 1)],
    "experts, balanced or not": [dict(model=dict(width=16, heads=2, layers=1, context=8, experts=4, top_k=2,
                                                 balance=b), seed=s) for b, s in ((0.01, 0), (0.0, 1), (0.1, 2))],
}


@pytest.mark.parametrize("kind", list(MEMBERS))
def test_training_a_stack_equals_training_each_model_alone(corpus, kind, float64):
    ids, meta = corpus
    members = MEMBERS[kind]
    together = train_stack(ids, meta, members, TRAIN, run=RunOptions(full_eval=False))
    assert len(together) == len(members)
    for m, (model, metrics, info, _) in zip(members, together):
        train_losses, val_losses, sample_losses, ref = alone(ids, meta, m["model"], m["seed"], TRAIN)
        assert metrics["step"].tolist() == list(range(1, TRAIN["steps"] + 1))
        assert np.abs(metrics["train_loss"].to_numpy() - train_losses).max() <= 1e-9
        assert np.abs(metrics["val_loss"].to_numpy() - val_losses).max() <= 1e-9
        assert np.abs(metrics["train_sample_loss"].to_numpy() - sample_losses).max() <= 1e-9
        for name, p in ref.named_parameters():
            assert (dict(model.named_parameters())[name] - p).abs().max() <= 1e-9, name
        assert info["stack"]["models"] == len(members)
        assert train_losses[-1] < train_losses[0]
    finals = [m[1]["val_loss"].iloc[-1] for m in together]
    assert len(set(finals)) == len(finals)            # the members are different models


def test_a_member_trained_on_in_a_smaller_stack_takes_its_own_steps(float64):
    """Three models stacked, trained 4 steps; then two of them, in the other order, as their own stack
    (StackedCharLM.subset, the optimizer's moments carried), 3 steps more: each ends as that model
    trained alone for 7 steps (float64, every weight within 1e-9), and the stack dropped to one model
    too; a member left out stops where it was."""
    specs = [ModelSpec(V, 16, h, layers=2, context=8, rotary=True) for h in (1, 2, 4)]
    seeds = [5, 6, 7]
    g = torch.Generator().manual_seed(0)
    batches = torch.randint(0, V, (7, 3, 2, 9), generator=g)          # [step, model, batch, T + 1]

    def step(model, opt, ids):
        opt.zero_grad(set_to_none=True)
        logits = model(ids[..., :-1])
        F.cross_entropy(logits.reshape(-1, V), ids[..., 1:].reshape(-1), reduction="none") \
            .view(ids.shape[0], -1).mean(dim=1).sum().backward() if logits.dim() == 4 else \
            F.cross_entropy(logits.reshape(-1, V), ids[..., 1:].reshape(-1)).backward()
        opt.step()

    stack = StackedCharLM(built(specs, seeds))
    opt = torch.optim.AdamW(stack.parameters(), lr=1e-2, weight_decay=0.1)
    for k in range(4):
        step(stack, opt, batches[k])
    before = stack.copy_of(1)
    keep = [2, 0]
    small, opt_small = stack.subset(keep, opt)
    for k in range(4, 7):
        step(small, opt_small, batches[k, keep])
    one, opt_one = small.subset([1], opt_small)                    # model 0, alone in a stack of one
    for i, member in enumerate(keep):
        ref = built([specs[member]], [seeds[member]])[0]
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
        for k in range(7):
            step(ref, ref_opt, batches[k, member])
        got = small.copy_of(i)
        for name, p in ref.named_parameters():
            assert (dict(got.named_parameters())[name] - p).abs().max() <= 1e-9, (member, name)
    assert all(torch.equal(a, b) for a, b in zip(one.copy_of(0).parameters(), small.copy_of(1).parameters()))
    assert all(torch.equal(a, b) for a, b in zip(stack.copy_of(1).parameters(), before.parameters()))
    with pytest.raises(ValueError, match="members"):
        stack.subset([3])


@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_one_routing_for_the_stack_equals_each_model_routed_alone(dtype, bound):
    """Every model's experts routed at once — (model, expert) groups of one grouped product — give
    each model what routing its own tokens alone gives (CharLM): logits, every gradient, each
    model's balancing losses and counts; models of another top-k in a routing of their own; a
    (model, expert) pair that gets no token (model 1's expert 3) learns nothing, as alone. In
    float64 (torch's loop over the groups) within its rounding, 1e-12; in float32 (one grouped
    product) within float32 rounding of numbers of order 1, 1e-5."""
    was = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        _stack_against_alone(bound)
    finally:
        torch.set_default_dtype(was)


def _stack_against_alone(bound: float) -> None:
    specs = [ModelSpec(V, 16, 2, layers=2, context=8, experts=4, top_k=k, expert_width=8) for k in (2, 1, 2, 2, 1)]
    models = built(specs, range(len(specs)))
    with torch.no_grad():      # model 1's FFN inputs near 5 everywhere, its expert 3's router row −1: last
        for block in models[1].blocks:
            block.ln2.bias.fill_(5.0)
            block.ln2.weight.fill_(0.1)
            block.ffn.router.weight[3] = -1.0
    stack = StackedCharLM(models)
    assert stack.routings == [(2, [0, 2, 3]), (1, [1, 4])]
    idx = torch.randint(0, V, (len(specs), 3, 8), generator=torch.Generator().manual_seed(4))
    out = stack(idx)
    balance = torch.stack(stack.balance_losses)                  # [layers, models]
    (sum(F.cross_entropy(out[i].flatten(0, 1), idx[i].flatten()) for i in range(len(specs)))
     + 0.1 * balance.mean(dim=0).sum()).backward()
    assert stack.expert_counts[1, :, 3].sum() == 0 < stack.expert_counts[0, :, 3].sum()
    grads = stack.tensors(grad=True)                          # the rows' gradients, by CharLM's names
    for i, model in enumerate(models):
        alone = model(idx[i])
        assert (out[i] - alone).abs().max() <= bound
        assert (balance[:, i] - torch.stack(model.balance_losses)).abs().max() <= bound
        assert torch.equal(stack.expert_counts[i], model.expert_counts)
        (F.cross_entropy(alone.flatten(0, 1), idx[i].flatten()) + 0.1 * torch.stack(model.balance_losses).mean()).backward()
        for name, p in model.named_parameters():
            assert (grads[name][i] - p.grad).abs().max() <= bound, name
    assert torch.equal(grads["blocks.0.ffn.w1"][1, 3], torch.zeros(16, 8))


def test_an_experts_step_runs_as_many_operators_for_16_models_as_for_one():
    """The operators of a training step (benchmarks/train.py's step and count: forward, backward,
    clipping, AdamW), those called from Python or autograd: the same at 1 and at 16 experts models,
    as for dense ones; routing model by model (the baseline) adds hundreds a model."""
    import sys
    from argparse import Namespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from train import make_step, op_counts

    def ops(arm, stack, routing="stack"):
        args = Namespace(device="cpu", stack=stack, width=16, heads=2, layers=2, context=8, batch=2)
        step = make_step(args, "eager", arm, routing)
        step()
        return op_counts(step)["outermost"]

    one, many = ops("e4k2b0.01", 1), ops("e4k2b0.01", 16)
    assert abs(many - one) <= 4, (one, many)
    assert ops("dense", 16) == ops("dense", 1)
    assert ops("e4k2b0.01", 4, "model") > one + 3 * 100          # the count sees the growth it bounds
