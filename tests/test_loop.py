"""The one training loop (headwatch.charlm.loop) and the stack it trains: a step reads nothing on the
host, its operators do not grow with the models (nor, after the backward pass, with the parameters),
and dropout sits where nanoGPT puts it — exact at 0, off in evaluation, each member of a stack with
masks of its own under which it computes what CharLM computes alone."""
import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from headwatch.charlm.loop import Schedule, Trainer
from headwatch.charlm.model import CharLM
from headwatch.charlm.spec import ModelSpec
from headwatch.charlm.stack import StackedCharLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from train import op_counts

V = 23


class HostReads(TorchDispatchMode):
    """Counts the aten ops that make a GPU wait for the host: reading a value (.item(), float(),
    bool(), .tolist() of a GPU tensor: ``_local_scalar_dense``; a copy to the host) or an output whose
    size depends on the data."""

    NAMES = {"_local_scalar_dense", "is_nonzero", "nonzero", "bincount", "masked_select", "unique",
             "_unique2", "unique_consecutive", "repeat_interleave"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.overloadpacket.__name__ in self.NAMES
        return func(*args, **(kwargs or {}))


def trainer_of(specs, seeds=None, **kw) -> Trainer:
    models = []
    for spec, seed in zip(specs, seeds or range(len(specs))):
        torch.manual_seed(seed)
        models.append(CharLM(spec))
    settings = dict(weight_decay=0.1, betas=(0.9, 0.99), grad_clip=0.5)
    return Trainer(StackedCharLM(models), Schedule(3e-3, 3e-4, 2, 20), **{**settings, **kw})


def rows(M, batch=3, T=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (M, batch, T + 1), generator=g)
    return ids[..., :-1], ids[..., 1:]


DENSE = dict(width=16, heads=2, layers=2, context=8)
EXPERTS = dict(DENSE, experts=4, top_k=2, expert_width=8)


# ------------------------------------------------------------------ no host read in a step
@pytest.mark.parametrize("options, M, balance", [(DENSE, 1, 0.0), (DENSE, 3, 0.0), (EXPERTS, 3, 0.01)],
                         ids=["dense-1", "dense-3", "experts-3-balanced"])
def test_a_step_reads_nothing_on_the_host(options, M, balance, monkeypatch):
    trainer = trainer_of([ModelSpec(V, **options)] * M, balance=[balance] * M)
    x, y = rows(M)
    trainer.step(0, x, y)
    reads = []
    for name in ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, _f=real, **k: reads.append(_n) or _f(self, *a, **k))
    with HostReads() as seen:
        trainer.step(1, x, y)
        trainer.step(2, x, y)
    assert (seen.count, reads) == (0, [])
    with HostReads() as seen:          # the check sees a read: the loop's own, at an evaluation
        sums = trainer.read(3)
    assert seen.count + len(reads) >= 1 and len(sums) == M and trainer.steps_since == 3


# ------------------------------------------------------------------ operators of a step
def kernels_of(options, M, part="step", layers=None):
    """The kernels (benchmarks/train.py: op_counts) of one step, or of its ``update`` (clipping and
    optimizer) or of one evaluation (``loss_sums``), of ``M`` stacked models."""
    spec = ModelSpec(V, **dict(options, **({"layers": layers} if layers else {})))
    trainer = trainer_of([spec] * M, balance=[0.01 if spec.experts else 0.0] * M)
    x, y = rows(M)
    trainer.step(0, x, y)
    if part == "update":
        trainer.losses(x, y).sum().backward()
        return op_counts(trainer.update)["kernels"]
    if part == "evaluation":
        return op_counts(lambda: trainer.loss_sums(x[0], y[0], 2))["kernels"]
    return op_counts(lambda: trainer.step(1, x, y))["kernels"]


def test_a_dense_steps_kernels_do_not_grow_with_its_models():
    one, two, eight = (kernels_of(DENSE, M) for M in (1, 2, 8))
    assert two == eight and one <= two <= one + 2       # one copy more once there are two (the embedding's rows)
    assert kernels_of(DENSE, 2, "evaluation") == kernels_of(DENSE, 8, "evaluation")   # the stack in one pass


def test_what_follows_the_backward_pass_is_as_many_kernels_whatever_the_models_and_parameters():
    """Clipping and AdamW work on the stack's two rows: the same kernels for 1 or 8 models, 1 or 3
    layers (14 or 38 of CharLM's parameters), dense or experts."""
    counts = {(o, M, L): kernels_of(options, M, "update", L) for o, options in (("dense", DENSE), ("experts", EXPERTS))
              for M in (1, 8) for L in (1, 3)}
    assert len(set(counts.values())) == 1, counts


def test_an_experts_stack_costs_no_more_kernels_than_its_models_alone():
    # The experts route model by model (headwatch.charlm.stack: StackedCharLM._ffn): their kernels grow with
    # the models; never beyond training each alone.
    one = kernels_of(EXPERTS, 1)
    assert kernels_of(EXPERTS, 4) <= 4 * one


# ------------------------------------------------------------------ dropout
def test_dropout_0_is_the_model_without_it(float64):
    assert ModelSpec(V, 16, 2, dropout=0.0) == ModelSpec(V, 16, 2) and "dropout" not in ModelSpec(V, 16, 2).to_dict()
    assert ModelSpec(V, 16, 2, dropout=0.2).to_dict()["dropout"] == 0.2
    for bad in (1.0, -0.1, "0.2", True):
        with pytest.raises(ValueError, match="dropout"):
            ModelSpec(V, 16, 2, dropout=bad)
    torch.manual_seed(0)
    model = CharLM(ModelSpec(V, 16, 2, layers=2, context=8, dropout=0.0)).train()
    x, _ = rows(1)
    assert torch.equal(model(x[0]), model(x[0]))       # no random draw in training mode


def test_with_dropout_training_draws_masks_and_evaluation_none(float64):
    torch.manual_seed(0)
    model = CharLM(ModelSpec(V, 16, 2, layers=2, context=8, dropout=0.3))
    plain = CharLM(ModelSpec(V, 16, 2, layers=2, context=8))
    plain.load_state_dict(model.state_dict())
    x, _ = rows(1)
    model.train()
    assert not torch.equal(model(x[0]), model(x[0]))
    model.eval()
    assert torch.equal(model(x[0]), model(x[0])) and torch.equal(model(x[0]), plain.eval()(x[0]))
    stack = StackedCharLM([model, model])
    stack.eval()
    assert torch.equal(stack(x.expand(2, -1, -1))[1], plain(x[0]))


class Masks(TorchDispatchMode):
    """Records every dropout mask a forward pass draws (``bernoulli_``: F.dropout's and the attention's
    in scaled_dot_product_attention), or replays recorded ones: member ``i``'s rows of each."""

    def __init__(self, recorded=None, member=None, models=None):
        super().__init__()
        self.masks, self.recorded, self.member, self.models = [], list(recorded or []), member, models

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.bernoulli_:
            if self.member is None:
                out = func(*args, **(kwargs or {}))
                self.masks.append(out.clone())
                return out
            mask = self.recorded.pop(0)      # [M, …] or [M·B, …]: member i's rows, in order
            return args[0].copy_(mask.reshape(self.models, -1)[self.member].view_as(args[0]))
        return func(*args, **(kwargs or {}))


def test_each_member_of_a_stack_draws_its_own_masks_and_computes_what_charlm_computes_under_them(float64):
    """Three models with dropout 0.2, two of them the same (seed 0): in training mode their logits
    differ (each member its own masks); each member's logits and gradients are those of CharLM alone
    given the member's slice of the stack's masks (every embedding, attention-weight and residual
    mask), within 1e-12."""
    spec = ModelSpec(V, 16, 2, layers=2, context=8, dropout=0.2)
    seeds = [0, 0, 1]
    trainer = trainer_of([spec] * 3, seeds)
    stack = trainer.stack.train()
    x, y = rows(3)
    with Masks() as drawn:
        out = stack(x)
    F.cross_entropy(out.flatten(0, 2), y.flatten(), reduction="sum").backward()
    assert len(drawn.masks) == 1 + 3 * spec.layers          # the embeddings; per layer attention, its output, the FFN's
    assert not torch.allclose(out[0], out[1])               # the same weights, other masks
    grads = stack.tensors(grad=True)
    for i, seed in enumerate(seeds):
        torch.manual_seed(seed)
        alone = CharLM(spec).train()
        with Masks(drawn.masks, i, len(seeds)) as replay:
            logits = alone(x[i])
        assert replay.recorded == []
        assert (logits - out[i]).abs().max() <= 1e-12
        F.cross_entropy(logits.flatten(0, 1), y[i].flatten(), reduction="sum").backward()
        for name, p in alone.named_parameters():
            assert (grads[name][i] - p.grad).abs().max() <= 1e-12, name
