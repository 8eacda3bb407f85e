"""The sweep's character model and its corpus: parameter counts, shapes, causality, its rotary
option (and the plain model unchanged by it), the plays."""
import hashlib
import math
import re

import pytest
import torch
import yaml

from headwatch.charlm.corpus import build_corpus, speeches
from headwatch.charlm.model import CharLM, count_params
from headwatch.charlm.spec import ModelSpec
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
    assert count_params(ModelSpec(65, 256, 4))["total"] == hand


@pytest.mark.parametrize("vocab,width,heads,layers,context,ffn", [(65, 128, 2, 4, 128, 4),
                                                                 (65, 512, 8, 4, 128, 4),
                                                                 (11, 24, 3, 2, 7, 2)])
def test_param_formula_matches_the_module(vocab, width, heads, layers, context, ffn):
    model = CharLM(vocab, width, heads, layers=layers, context=context, ffn_mult=ffn)
    parts = count_params(ModelSpec(vocab, width, heads, layers=layers, context=context, ffn_mult=ffn))
    assert n_params(model) == parts["total"]
    attn = sum(p.numel() for n, p in model.named_parameters() if ".attn." in n)
    assert attn == parts["attention"] == layers * 4 * width * width



# Every option of the spec, alone and together: heads, kv_heads, head_size, experts / top_k /
# expert_width, layers, vocabulary, context, ffn_mult, rotary.
OPTION_SHAPES = [dict(vocab_size=65, width=256, heads=4), dict(vocab_size=11, width=24, heads=3, layers=2, context=7),
         dict(vocab_size=300, width=16, heads=2, layers=1, ffn_mult=2),
         dict(vocab_size=65, width=64, heads=8, kv_heads=2), dict(vocab_size=65, width=64, heads=4, kv_heads=1),
         dict(vocab_size=65, width=48, heads=3, head_size=32, layers=3),
         dict(vocab_size=65, width=32, heads=4, experts=4, top_k=2),
         dict(vocab_size=65, width=32, heads=4, experts=8, top_k=1, expert_width=24),
         dict(vocab_size=4096, width=40, heads=5, kv_heads=5, head_size=8, layers=5, context=33, ffn_mult=3,
              experts=3, top_k=3, expert_width=17),
         dict(vocab_size=65, width=64, heads=4, layers=2, rotary=True),
         dict(vocab_size=65, width=48, heads=4, kv_heads=2, head_size=10, context=7, rotary=True)]


@pytest.mark.parametrize("options", OPTION_SHAPES, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_the_specs_arithmetic_counts_what_a_built_model_holds(options):
    """ModelSpec.param_counts is arithmetic on the shape (a config check of an absurd shape
    must not build it); count_params builds the model on the meta device and counts its
    modules block by block: every key equal, for every option."""
    spec = ModelSpec(**options)
    counted = count_params(spec)
    assert spec.param_counts() == counted
    assert counted["total"] == n_params(CharLM(spec))


def test_the_spec_counts_an_absurd_shape_without_building_it():
    """`sweep.model.layers: 100000` once made `snakemake -n` build 100 000 blocks to count them
    (3 min, 4.4 GB): the count is now arithmetic, spec.py never imports the model (nor torch),
    and the count of a 100 000-layer model takes well under a second in 200 MB of address space."""
    import subprocess
    import sys

    code = ("import resource, sys, time; resource.setrlimit(resource.RLIMIT_AS, (200 << 20, 200 << 20)); "
            "t = time.perf_counter(); from headwatch.charlm.spec import ModelSpec; "
            "n = ModelSpec(65, 512, 8, layers=100000, experts=16, top_k=2).param_counts()['total']; "
            "print(n, round(time.perf_counter() - t, 3), 'torch' in sys.modules, "
            "'headwatch.charlm.model' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    total, seconds, torch_loaded, model_loaded = out.stdout.split()
    assert int(total) > 10**12 and float(seconds) < 1.0 and torch_loaded == model_loaded == "False", out.stdout

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



# ------------------------------------------------------------------ the rotary option
def _fingerprint(spec: ModelSpec) -> tuple:
    """The model ``spec`` builds after ``torch.manual_seed(0)``, as what its init order and draws
    decide: its tensors' names and shapes (a hash), Σ_k (k + 1) Σ_i x_i·sin(i + 1) over its k-th
    tensor's values x, and the generator's next three draws (what the build consumed). A tensor
    drawn in another order, or one draw more or less, moves the second or the third; a CPU whose
    kernels round the last bit differently moves the second by ~1e-7 of itself."""
    torch.manual_seed(0)
    state = CharLM(spec).state_dict()
    layout = hashlib.sha256(repr([(n, tuple(t.shape)) for n, t in state.items()]).encode()).hexdigest()[:16]
    value = sum((k + 1) * float((t.double().flatten() * torch.arange(1, t.numel() + 1, dtype=torch.float64).sin())
                                .sum()) for k, t in enumerate(state.values()))
    return layout, value, torch.rand(3).tolist()


# Recorded from the model before the rotary option existed (torch 2.13.0, the pinned release):
# adding an option must leave the plain model, and every earlier option, as it was, weight for
# weight and draw for draw (the sweep's published pages reproduce to every decimal).
BEFORE_ROTARY = {
    "plain": (dict(vocab_size=65, width=64, heads=4, layers=2, context=16),
              ("de09ad5595bdb4ad", -34.947869473156416, [0.7428960800170898, 0.6209264397621155, 0.2503799796104431])),
    "options": (dict(vocab_size=65, width=32, heads=4, layers=2, context=8, kv_heads=2, experts=4, top_k=2),
                ("6ca8fd5b79fe908c", 71.53559042581503, [0.8354063630104065, 0.7456325888633728, 0.05598241090774536])),
}


@pytest.mark.parametrize("name", list(BEFORE_ROTARY))
def test_a_model_without_the_rotary_option_is_the_one_before_it(name):
    options, (layout, value, draws) = BEFORE_ROTARY[name]
    got = _fingerprint(ModelSpec(**options))
    assert got[0] == layout and got[1] == pytest.approx(value, rel=1e-6) and got[2] == pytest.approx(draws, rel=1e-7)
    rotary = _fingerprint(ModelSpec(**options, rotary=True))                  # the fingerprint does see a change
    assert rotary[0] != layout and rotary[1] != pytest.approx(value, rel=1e-3)


def _rope_by_hand(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE as complex numbers (RoFormer; Llama's reference code): dims (i, i + d/2) are the real
    and imaginary part of one number, turned by position × base^(-2i/d)."""
    d, T = x.shape[-1], x.shape[-2]
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double())
    angle = torch.arange(T, dtype=torch.float64)[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = z * torch.polar(torch.ones_like(angle), angle)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def test_the_rotary_option_turns_queries_and_keys_and_drops_the_learned_positions():
    """With ``rotary`` the model has no position embeddings; its attention is softmax(R(q)·R(k)ᵀ/√d)
    with R the rotation written by hand as complex numbers (grouped keys: one group read by both
    heads); the option is in the saved form only when set, and an odd head size is refused."""
    torch.manual_seed(0)
    spec = ModelSpec(13, 16, 2, layers=2, context=12, kv_heads=1, rotary=True)
    model = CharLM(spec).eval()
    assert model.pos is None and "pos.weight" not in model.state_dict()
    assert spec.to_dict()["rotary"] is True and "rotary" not in ModelSpec(13, 16, 2).to_dict()
    assert spec.rotary_dims == 8 and ModelSpec(13, 16, 2).rotary_dims == 0
    attn, x = model.blocks[0].attn, torch.randn(2, 7, 16)
    q = attn.q(x).view(2, 7, 2, 8).transpose(1, 2)
    k, v = (f(x).view(2, 7, 1, 8).transpose(1, 2) for f in (attn.k, attn.v))
    s = _rope_by_hand(q) @ _rope_by_hand(k).transpose(-1, -2) / math.sqrt(8) + torch.full((7, 7), float("-inf")).triu(1)
    manual = attn.o((s.softmax(-1) @ v).transpose(1, 2).reshape(2, 7, 16))
    torch.testing.assert_close(attn(x), manual, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="head size 5 is odd"):
        ModelSpec(13, 10, 2, rotary=True)


def test_the_rotary_option_is_not_a_sweep_grid_option():
    """Only the known circuit's model uses it: a grid entry that sets it is refused by name."""
    from headwatch.settings.sweep import GRID_OPTIONS, entry_errors
    assert "rotary" not in GRID_OPTIONS and {"kv_heads", "experts", "head_size"} <= set(GRID_OPTIONS)
    errors = entry_errors(dict(width=64, heads=4, rotary=True), CONFIG["sweep"])
    assert any("unknown keys ['rotary']" in e for e in errors), errors

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


def test_any_text_file_can_be_the_corpus(tmp_path):
    text = tmp_path / "book.txt"
    text.write_text("".join(f"Paragraph {i}, caf\u00e9 \u2014 line.\nSecond line.\n\n" for i in range(100)))
    c = build_corpus(source="book.txt", target_chars=1500, workdir=tmp_path)       # inside the project
    assert c.text.startswith("Paragraph 0, cafe -- line.\nSecond line.\n\n") and c.text.endswith("\n\n")
    assert len(c.text) <= 1500 and c.text.isascii() and c.sources == [dict(name="book.txt", chars=len(c.text))]
    assert build_corpus(source=str(text), target_chars=1500, outside=True).text == c.text    # allowed outside
    with pytest.raises(ValueError, match="sweep.corpus.source = .*outside the project directory"):
        build_corpus(source=str(text), target_chars=1500)
    with pytest.raises(ValueError, match="sweep.corpus.source = 'missing.txt'.*cannot be read"):
        build_corpus(source="missing.txt", workdir=tmp_path)
