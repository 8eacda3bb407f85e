"""The guards' exact form (headwatch.model.interventions.in_float64): every step of the model in
float64, the two that transformers' models run in float32 whatever the dtype included: their
RMSNorms and eager attention's softmax."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from headwatch.model.arch import Adapter
from headwatch.model.interventions import InterventionError, in_float64
from headwatch.model.recompute import norm
from headwatch.model import arch
from tiny import FAMILIES, random_ids, tiny_model

RMS_FAMILIES = [f for f in FAMILIES if arch.FAMILIES[f].norm == "RMSNorm"]


def _rms_norms(model):
    return [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]


@pytest.mark.parametrize("family", RMS_FAMILIES)
def test_every_rmsnorm_runs_its_formula_in_float64_inside_and_its_own_code_outside(family):
    model = tiny_model(family)
    a = Adapter(model)
    norms = _rms_norms(model)
    assert norms, f"{family}: no RMSNorm module found"
    x = torch.randn(2, 5, norms[0].weight.shape[0], dtype=torch.float64) * 3
    with torch.no_grad(), in_float64(a):
        for m in norms:
            y = torch.randn(2, 5, m.weight.shape[0], dtype=torch.float64) * 3
            inside = m(y)
            assert inside.dtype == torch.float64
            assert torch.equal(inside, norm(y, a.norm_params(m)))    # the float64 formula, bit for bit
    # outside: the module's own float32 arithmetic again, its parameters back in float32
    m = norms[0]
    assert m.weight.dtype == torch.float32
    own = m(x.float())
    assert own.dtype == torch.float32
    assert not m._forward_hooks


@pytest.mark.parametrize("family", RMS_FAMILIES[:1])
def test_the_float64_norm_differs_from_the_models_own_where_float32_rounds(family):
    """The reason for the swap: the module's own code in a float64 model still rounds to float32
    inside (its output is not the float64 formula), the swapped one does not."""
    model = tiny_model(family).double()
    a = Adapter(model)
    m = _rms_norms(model)[0]
    y = torch.randn(4, 7, m.weight.shape[0], dtype=torch.float64)
    with torch.no_grad():
        own = m(y)
        assert own.dtype == torch.float64 and not torch.equal(own, norm(y, a.norm_params(m)))
        assert torch.allclose(own, norm(y, a.norm_params(m)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", RMS_FAMILIES[:1])
def test_a_formula_that_is_not_the_modules_fails_loudly(family, monkeypatch):
    model = tiny_model(family)
    a = Adapter(model)
    real = a.norm_params
    monkeypatch.setattr(a, "norm_params", lambda module, what="norm": dict(real(module, what), offset=1.0))
    with torch.no_grad(), in_float64(a):
        with pytest.raises(InterventionError, match="the formula is not this module's"):
            a.logits(random_ids(1, 6))


def test_softmax_keeps_float64_inside_and_is_restored_on_exit():
    model = tiny_model("gpt2")
    x = torch.randn(3, 9, dtype=torch.float64) * 20
    with in_float64(Adapter(model)):
        inside = nn.functional.softmax(x, dim=-1, dtype=torch.float32)
        assert inside.dtype == torch.float64 and torch.equal(inside, torch.softmax(x, dim=-1))
        assert nn.functional.softmax(x.float(), dim=-1, dtype=torch.float32).dtype == torch.float32
    assert nn.functional.softmax(x, dim=-1, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(RuntimeError):
        with in_float64(Adapter(model)):
            raise RuntimeError("body fails")
    assert nn.functional.softmax(x, dim=-1, dtype=torch.float32).dtype == torch.float32
