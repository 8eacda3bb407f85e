"""Vocabularies of the sweep's corpus and bits per character (headwatch.charlm.tokenizer)."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from headwatch.charlm.corpus import build_corpus, save_corpus
from headwatch.charlm.model import CharLM
from headwatch.charlm.tokenizer import (bits_per_char, encode_splits, eval_windows, load_split_ids, load_vocab,
                                        read_splits, token_lengths, train_vocab)
from headwatch.charlm.vocab import VocabError, assert_same_validation, parse_vocab_name, vocab_name
from headwatch.charlm.loop import Schedule, Trainer
from headwatch.charlm.stack import StackedCharLM
from headwatch.sweep.train import windows
from conftest import ROOT

NAMES = ["char", "bpe256", "bpe300", "bpe384"]


def corpus_dir(root, **kw):
    c = build_corpus(**kw)
    root.mkdir(parents=True, exist_ok=True)
    save_corpus(c, root / "ids.npy", root / "meta.json", root / "corpus.txt")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~20 k characters of Macbeth (18 k training, 2 k validation)."""
    return corpus_dir(tmp_path_factory.mktemp("corpus"), plays=["tragedies/macbeth"],
                      target_chars=20_000)


@pytest.fixture(scope="module")
def vocabs(corpus, tmp_path_factory):
    """name -> folder with tokenizer.json, meta.json, train.npy, val.npy, split.json."""
    root = tmp_path_factory.mktemp("vocab")
    for name in NAMES:
        train_vocab(corpus, root / name, name)
        encode_splits(corpus, root / name)
    return {name: root / name for name in NAMES}


def files(folder, names=("tokenizer.json", "meta.json")):
    return {n: (folder / n).read_bytes() for n in names}


# ------------------------------------------------------------------ names
def test_names_are_slugs_and_bad_ones_are_refused():
    assert vocab_name("char") == "char" and vocab_name("bpe", 512) == "bpe512"
    assert parse_vocab_name("bpe4096") == ("bpe", 4096) and parse_vocab_name("char") == ("char", None)
    for bad in ("bpe100", "bpe0512", "bpe", "word512", "char64"):
        with pytest.raises(VocabError):
            parse_vocab_name(bad)
    with pytest.raises(VocabError, match="no size"):
        vocab_name("char", 64)
    with pytest.raises(VocabError, match=">= 256"):
        vocab_name("bpe", 255)


# ------------------------------------------------------------------ round trip
@pytest.mark.parametrize("name", NAMES)
def test_each_vocabulary_round_trips_both_splits(corpus, vocabs, name):
    train_text, val_text, _ = read_splits(corpus)
    tok = Tokenizer.from_file(str(vocabs[name] / "tokenizer.json"))   # the file, as a user loads it
    split = json.loads((vocabs[name] / "split.json").read_text())
    for text, ids_file in ((train_text, "train.npy"), (val_text, "val.npy")):
        ids = np.load(vocabs[name] / ids_file).tolist()
        assert tok.decode(ids) == text
        assert tok.encode(text).ids == ids
    assert split["val_chars"] == len(val_text) and split["val_tokens"] == len(np.load(vocabs[name] / "val.npy"))
    meta = json.loads((vocabs[name] / "meta.json").read_text())
    assert meta["train_chars"] == len(train_text)
    if name.startswith("bpe"):
        assert meta["size"] == meta["vocab_size"] == int(name[3:])


def test_bpe_merges_shorten_the_text_and_the_byte_vocabulary_does_not(vocabs):
    cpt = {n: json.loads((vocabs[n] / "split.json").read_text())["val_chars_per_token"] for n in NAMES}
    assert cpt["char"] == cpt["bpe256"] == 1.0
    assert 1.0 < cpt["bpe300"] < cpt["bpe384"]


def test_every_vocabulary_encodes_the_same_validation_text(vocabs):
    metas = {n: load_split_ids(vocabs[n])[1] for n in NAMES}
    assert assert_same_validation(metas) == metas["char"]["val_sha256"]
    assert len({m["val_chars"] for m in metas.values()}) == 1


def test_a_byte_vocabulary_encodes_what_the_training_split_never_showed(tmp_path):
    """'#' only in the validation split: the char vocabulary refuses, byte-level BPE copes."""
    body = "".join(f"Line {i} of plain text, said he.\n\n" for i in range(60))
    (tmp_path / "text.txt").write_text(body + "Line # said he.\n\nLine # said he.\n\n")
    root = corpus_dir(tmp_path / "corpus", source=str(tmp_path / "text.txt"), target_chars=None, outside=True)
    _, val_text, _ = read_splits(root)
    assert "#" in val_text
    with pytest.raises(VocabError, match=r"\['#'\]"):
        train_vocab(root, tmp_path / "char", "char")
    train_vocab(root, tmp_path / "bpe300", "bpe300")
    encode_splits(root, tmp_path / "bpe300")
    tok, _ = load_vocab(tmp_path / "bpe300")
    assert tok.decode(np.load(tmp_path / "bpe300" / "val.npy").tolist()) == val_text


# ------------------------------------------------------------------ char = corpus ids
def test_char_vocabulary_gives_the_corpus_ids_and_training_inputs(corpus, vocabs):
    ids, meta = load_split_ids(vocabs["char"])
    corpus_meta = json.loads((corpus / "meta.json").read_text())
    ref = np.load(corpus / "ids.npy")
    assert ids.dtype == ref.dtype and np.array_equal(ids, ref)
    # what train() reads: identical to the corpus's meta, so a char arm trains as today
    for key in ("n_train", "vocab_size", "sha256", "vocab"):
        assert meta[key] == corpus_meta[key], key
    tok, _ = load_vocab(vocabs["char"])
    assert [tok.token_to_id(c) for c in corpus_meta["vocab"]] == list(range(corpus_meta["vocab_size"]))


def test_bpe_training_inputs_count_tokens(vocabs):
    ids, meta = load_split_ids(vocabs["bpe384"])
    split = json.loads((vocabs["bpe384"] / "split.json").read_text())
    assert meta["n_train"] == split["train_tokens"] < split["train_chars"]
    assert len(ids) == meta["n_train"] + meta["n_val"] and ids.max() < meta["vocab_size"] == 384
    assert meta["sha256"] != split["corpus_sha256"]      # the ids' identity includes the tokenizer


# ------------------------------------------------------------------ determinism
def test_tokenizer_training_is_deterministic(corpus, vocabs, tmp_path):
    """Same corpus -> byte-identical files: again in this process, with the library's
    threads on, and in a fresh process (new hash-map seeds)."""
    ref = files(vocabs["bpe384"], ("tokenizer.json", "meta.json", "train.npy", "val.npy", "split.json"))
    train_vocab(corpus, tmp_path / "again", "bpe384")
    encode_splits(corpus, tmp_path / "again")
    train_vocab(corpus, tmp_path / "parallel", "bpe384", parallel=True)
    code = ("import sys; from headwatch.charlm.tokenizer import train_vocab; "
            "train_vocab(sys.argv[1], sys.argv[2], 'bpe384')")
    subprocess.run([sys.executable, "-c", code, str(corpus), str(tmp_path / "fresh")], check=True,
                   cwd=ROOT)
    assert files(tmp_path / "again", ref) == ref
    assert files(tmp_path / "parallel") == files(tmp_path / "fresh") == files(vocabs["bpe384"])
    char_again = tmp_path / "char"
    train_vocab(corpus, char_again, "char")
    assert files(char_again) == files(vocabs["char"])


# ------------------------------------------------------------------ guards
def test_guards_refuse_mixed_text(corpus, vocabs, tmp_path):
    other = corpus_dir(tmp_path / "other", plays=["tragedies/macbeth"], target_chars=15_000)
    train_vocab(other, tmp_path / "bpe256", "bpe256")
    encode_splits(other, tmp_path / "bpe256")
    metas = {"char": load_split_ids(vocabs["char"])[1], "bpe300": load_split_ids(vocabs["bpe300"])[1],
             "other_bpe256": json.loads((tmp_path / "bpe256" / "split.json").read_text())}
    with pytest.raises(VocabError, match="different validation text.*other_bpe256"):
        assert_same_validation(metas)
    with pytest.raises(VocabError, match="no validation text"):
        assert_same_validation({"a": metas["char"], "b": {"bits_per_char": 1.0}})
    # a vocabulary trained on another corpus is not applied to this one
    with pytest.raises(VocabError, match="another training split"):
        encode_splits(corpus, tmp_path / "bpe256")
    # a tokenizer file that is not the one trained is refused
    bad = tmp_path / "bad"
    train_vocab(corpus, bad, "bpe300")
    merges = json.loads((bad / "tokenizer.json").read_text())
    merges["model"]["merges"] = merges["model"]["merges"][:-1]          # one merge fewer
    (bad / "tokenizer.json").write_text(json.dumps(merges))
    with pytest.raises(VocabError, match="hash differs"):
        load_vocab(bad)


# ------------------------------------------------------------------ bits per character
@pytest.mark.parametrize("n,context,stride", [(2, 8, None), (9, 8, None), (10, 8, None), (61, 8, None),
                                              (61, 8, 3), (61, 8, 1), (64, 8, 8), (30, 40, 5)])
def test_eval_windows_score_every_target_once(n, context, stride):
    L, wins = eval_windows(n, context, stride)
    s = context if stride is None else stride
    seen = []
    for start, first in wins:
        assert 0 <= start and start + L <= n - 1 and 0 <= first < L
        for j in range(first, L):
            t = start + j + 1
            seen.append(t)
            # context of target t: j + 1 tokens, all of them when t <= L, else >= L - stride + 1
            assert j + 1 == t if start == 0 else j + 1 >= L - s + 1
    assert sorted(seen) == list(range(1, n)) and len(seen) == n - 1


def tiny_model(vocab_size, context=8, seed=0):
    torch.manual_seed(seed)
    return CharLM(vocab_size, width=16, heads=2, layers=1, context=context).eval()


def test_bits_per_char_of_a_char_model_is_its_nats_per_char_over_ln2(vocabs):
    ids, meta = load_split_ids(vocabs["char"])
    val = ids[meta["n_train"]:].astype(np.int64)
    tok, _ = load_vocab(vocabs["char"])
    model, C = tiny_model(meta["vocab_size"]), 8
    n = 20 * C + 1                                      # windows at 0, C, 2C, ... tile it exactly
    res = bits_per_char(model, val[:n], token_lengths(tok), batch=7)
    # the training loop's own validation loss (mean nats per character) on the same windows: the sum
    # its Trainer reads at an evaluation, over windows as sweep.train cuts them
    trainer = Trainer(StackedCharLM([model]), Schedule(1e-3, 1e-4, 0, 1), weight_decay=0.0, betas=(0.9, 0.99))
    ref = float(trainer.loss_sums(*windows(torch.as_tensor(val[:n]), np.arange(0, n - 1, C), C), 5)[0]) / (n - 1)
    assert res["tokens"] == res["chars"] == n - 1
    assert res["bits_per_char"] * math.log(2) == pytest.approx(ref, rel=1e-6)
    whole = bits_per_char(model, val, token_lengths(tok))
    assert whole["tokens"] == whole["chars"] == meta["n_val"] - 1
    assert whole["bits_per_char"] == pytest.approx(whole["nats_per_token"] / math.log(2), rel=1e-12)
    assert whole["chars_per_window"] == C and whole["val_chars"] == meta["val_chars"]


@pytest.mark.parametrize("stride", [None, 3, 1])
def test_bits_per_char_of_a_bpe_arm_by_hand(vocabs, stride):
    ids, meta = load_split_ids(vocabs["bpe384"])
    tok, _ = load_vocab(vocabs["bpe384"])
    C, n = 8, 61                                        # 60 targets: 7 full windows and a tail
    val = ids[meta["n_train"]:][:n].astype(np.int64)
    model = tiny_model(meta["vocab_size"], context=C, seed=1)
    S = C if stride is None else stride
    nats, chars = 0.0, 0
    with torch.no_grad():
        for t in range(1, n):
            # the window of target t, as bits_per_char's docstring states it
            if t <= C:
                start = 0
            else:
                k = -(-(t - C) // S)                    # the k-th window after the first covers t
                start = min(C + k * S, n - 1) - C
            logp = torch.log_softmax(model(torch.as_tensor(val[start:t])[None])[0, -1].double(), -1)
            nats -= logp[val[t]].item()
            chars += len(tok.decode([int(val[t])]))
    text = tok.decode(val.tolist())
    assert chars == len(text) - len(tok.decode([int(val[0])])) > n - 1   # tokens hold several chars
    res = bits_per_char(model, val, token_lengths(tok), stride=stride, batch=4)
    assert (res["tokens"], res["chars"], res["val_chars"]) == (n - 1, chars, len(text))
    assert res["nats"] == pytest.approx(nats, rel=1e-6)
    assert res["bits_per_char"] == pytest.approx(nats / chars / math.log(2), rel=1e-6)
    assert res["chars_per_window"] == pytest.approx(C * len(text) / n)
