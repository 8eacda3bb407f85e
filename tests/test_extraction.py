"""Attention extraction on tiny models of each family: causal maps, rows sum to 1,
and the long table round-trips."""
import json

import numpy as np
import pytest
import torch

from headwatch.model.arch import Adapter, HeadAddressError
from headwatch.scores.attention import assert_maps, maps_table
from headwatch.figures.heads import map_of
from headwatch.scores.heads import attention_maps
from tiny import EXPECT, random_ids, tiny_config, tiny_model


def test_maps_are_causal_and_rows_sum_to_one(family):
    model = tiny_model(family)
    adapter = Adapter(model)
    maps = attention_maps(model, random_ids(2, 17))
    assert maps.shape == (2, adapter.n_layers, adapter.n_heads, 17, 17)
    above = torch.triu(torch.ones(17, 17, dtype=torch.bool), 1)
    assert maps[..., above].abs().max().item() == 0.0
    assert torch.allclose(maps.sum(-1), torch.ones(()), atol=1e-5)
    assert_maps(maps, family)  # the guard agrees


def test_check_maps_refuses_non_causal_and_nan():
    A = torch.full((1, 1, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match="not causal"):
        assert_maps(A, "uniform")
    A = torch.eye(3).reshape(1, 1, 3, 3).clone()
    A[0, 0, 1, 1] = float("nan")
    with pytest.raises(Exception, match="NaN"):
        assert_maps(A, "nan")


def test_maps_table_quantizes_and_round_trips():
    model = tiny_model("llama")
    maps = attention_maps(model, random_ids(1, 9))[0]
    table = maps_table("p", maps, quantum=256)
    L, H, T = maps.shape[0], maps.shape[1], 9
    assert len(table) == L * H * T * (T + 1) // 2          # lower triangle only
    assert np.all(table["row"] >= table["col"])
    assert np.allclose(table.weight * 256, np.round(table.weight * 256))
    dense = map_of(table, "p", 2, 1)
    assert np.abs(dense - maps[2, 1].numpy()).max() <= 0.5 / 256 + 1e-7
    assert np.all(np.abs(dense.sum(1) - 1) <= T * 0.5 / 256)


def test_adapters_answer_shape_and_projection(family):
    model = tiny_model(family)
    a = Adapter(model)
    want = EXPECT[family]
    assert (a.n_layers, a.n_heads, a.head_dim, a.n_kv_heads) == (3, 4, 16, want["kv_heads"])
    assert a.out_weight_for_head(1, 2).numel() == 64 * 16
    assert a.rotary_dims == want["rotary_dims"]
    assert tuple(a.window(l) for l in range(3)) == want["windows"]
    with pytest.raises(HeadAddressError, match="does not exist"):
        a.require_head(3, 0)
    with pytest.raises(HeadAddressError):
        a.require_head(0, 4)


def test_the_pre_job_checks_read_every_family_from_its_config_json(family, tmp_path):
    """headwatch.model.sources reads a family's shape from config.json alone (no transformers) and
    finds its adapter."""
    from headwatch.config import head_errors
    from headwatch.model.sources import ModelFacts, shape_from_config
    from headwatch.model.sources.facts import config_fields, field_errors

    tiny_config(family).to_json_file(tmp_path / "config.json")
    raw = json.loads((tmp_path / "config.json").read_text())
    assert field_errors(config_fields(raw), family, {}) == []          # a sound shape of every family
    shape = shape_from_config(raw)
    subset = {k: shape[k] for k in ("model_type", "layers", "heads", "kv_heads", "context", "vocab")}
    assert subset == dict(model_type=family, layers=3, heads=4, kv_heads=EXPECT[family]["kv_heads"],
                          context=256, vocab=512)
    assert head_errors({}, ModelFacts("tiny", "folder", None, shape, "config.json")) == []
    unknown = dict(shape, model_type="mamba")
    assert "no adapter" in head_errors({}, ModelFacts("tiny", "folder", None, unknown, "config.json"))[0]
