"""Vocabularies for the sweep's corpus, and bits per character (protocol §7).

The vocabulary study trains the same model on the same text cut into tokens by
different vocabularies. Every vocabulary is learned from the corpus's
**training split only** and applied to each split separately (the text is split
first, then each split is tokenized), so the validation split is the same
characters for every vocabulary and its hash can be compared across arms.

Vocabularies, each named by a slug usable as a workflow wildcard
(:data:`headwatch.charlm.vocab.VOCAB_PATTERN`, with their checks):

* ``char``: the sorted set of characters of the training split, id = position.
  It must equal the corpus's own vocabulary (``meta.json``'s ``vocab``: the
  characters of the whole text), so it gives exactly the corpus's ``ids.npy``;
  a validation split holding a character the training split lacks is refused
  (the vocabulary could not encode it).
* ``bpe{size}``: byte-level BPE (GPT-2's byte alphabet and pre-tokenizer
  regex, no prefix space, no special tokens, no normalizer) trained with the
  ``tokenizers`` library to ``size`` tokens, ``size`` >= 256: the 256 bytes
  come first, so every text can be encoded and ``bpe256`` is the plain byte
  vocabulary (one token per character on ASCII text, with the byte ids no
  ASCII text uses). The trainer stops early if it runs out of pairs to merge;
  the size reached is recorded as ``vocab_size`` beside the ``size`` asked.

Determinism: the BPE trainer has no randomness. Its merge queue is ordered by
pair count, ties broken by the smaller pair of token ids; the initial alphabet
is sorted before ids are assigned and merged tokens get ids in merge order;
word and pair counts are integer sums, so the order in which its threads
reduce them changes nothing; ``tokenizer.json`` lists the vocabulary by id and
the merges by rank. The one known source of run-to-run differences in this
trainer, ids handed out in hash-map order to tokens carrying a
``continuing_subword_prefix`` or ``end_of_word_suffix``, is not used here.
Training runs serially all the same (``TOKENIZERS_PARALLELISM=false`` while
it runs: one thread per workflow job); the tests check that serial, parallel
and a fresh process write byte-identical files. Nothing time-dependent is
written to disk.

Files of one vocabulary ``<name>`` (one folder, e.g.
``results/sweep/corpus/vocab/<name>/``):

* ``tokenizer.json`` (loadable with ``tokenizers.Tokenizer.from_file``) and
  ``meta.json`` (:func:`train_vocab`): kind, name, size asked, vocab size
  reached, training characters and their hash, the corpus hash, the library
  version, the tokenizer file's hash;
* ``train.npy``, ``val.npy`` and ``split.json`` (:func:`encode_splits`): the
  token ids of each split, tokens and characters per split, characters per
  token, the hash of each split's text.

:func:`load_split_ids` gives what :func:`headwatch.sweep.train.train` takes
(``ids`` = train then validation ids, ``meta`` with ``n_train`` in tokens and
``vocab_size``); :func:`bits_per_char` scores a trained model on the whole
validation split; :func:`headwatch.charlm.vocab.assert_same_validation` refuses arms that were
evaluated on different validation text.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..tableio import NonFiniteError, file_sha256, verify_sha256, write_json
from .vocab import BYTES, VocabError, parse_vocab_name

log = logging.getLogger("headwatch.charlm")

PARALLELISM = "TOKENIZERS_PARALLELISM"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------ corpus
def read_splits(corpus_dir) -> tuple[str, str, dict]:
    """(training text, validation text, corpus meta) of a corpus folder written by
    :func:`headwatch.charlm.corpus.save_corpus` (``corpus.txt`` and ``meta.json``).

    The text must have the length and hash its meta records; the split is the
    meta's ``n_train`` / ``n_val`` characters."""
    corpus_dir = Path(corpus_dir)
    meta = json.loads((corpus_dir / "meta.json").read_text())
    text = (corpus_dir / "corpus.txt").read_text(encoding="ascii")
    if len(text) != meta["chars"] or sha256(text) != meta["sha256"]:
        raise VocabError(f"{corpus_dir / 'corpus.txt'} ({len(text)} characters) is not the text "
                         f"{corpus_dir / 'meta.json'} describes ({meta['chars']} characters, "
                         f"sha256 {meta['sha256'][:12]}); rebuild the corpus")
    train_text, val_text = text[:meta["n_train"]], text[meta["n_train"]:]
    if len(val_text) != meta["n_val"]:
        raise VocabError(f"{corpus_dir / 'meta.json'}: n_train {meta['n_train']} + n_val "
                         f"{meta['n_val']} != chars {meta['chars']}")
    return train_text, val_text, meta


# ------------------------------------------------------------------ training
@contextlib.contextmanager
def _parallelism(parallel: bool):
    """Set the tokenizers library's thread switch for the duration (read at each call)."""
    old = os.environ.get(PARALLELISM)
    os.environ[PARALLELISM] = "true" if parallel else "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PARALLELISM, None)
        else:
            os.environ[PARALLELISM] = old


def _char_tokenizer(train_text: str, val_text: str, corpus_vocab: str):
    vocab = "".join(sorted(set(train_text)))
    missing = sorted(set(val_text) - set(vocab))
    if missing:
        raise VocabError(f"the validation split holds characters {missing} that the training split "
                         "lacks: a character vocabulary learned from the training split cannot "
                         "encode it (use a larger corpus, or a byte-level vocabulary)")
    if vocab != corpus_vocab:
        raise VocabError(f"the training split's characters {vocab!r} differ from the corpus "
                         f"vocabulary {corpus_vocab!r}: the char vocabulary would not give the "
                         "corpus's ids")
    # One token per character (FixedLength(1)); a character outside the vocabulary is an error.
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.FixedLength(length=1)
    tok.decoder = decoders.Fuse()
    return tok, dict(vocab=vocab)


def _bpe_tokenizer(train_text: str, size: int):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, min_frequency=0, show_progress=False,
                                  special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # The split as ONE sequence: words are counted exactly as encode() will cut the split.
    tok.train_from_iterator([train_text], trainer=trainer)
    return tok, dict(pre_tokenizer="ByteLevel(add_prefix_space=False, use_regex=True)",
                     alphabet=BYTES)


def train_vocab(corpus_dir, out_dir, name: str, parallel: bool = False) -> dict:
    """Learn vocabulary ``name`` (``char`` or ``bpe{size}``) from the training split of the
    corpus in ``corpus_dir``; write ``tokenizer.json`` and ``meta.json`` into ``out_dir``.

    Same corpus and name -> byte-identical files (see the module docstring).
    ``parallel``: let the tokenizers library use its threads (same files; off by
    default so a job stays on its one core). Returns the meta written, plus
    ``seconds`` (the time spent training, not written to the file)."""
    kind, size = parse_vocab_name(name)
    train_text, val_text, corpus_meta = read_splits(corpus_dir)
    t0 = time.perf_counter()
    with _parallelism(parallel):
        if kind == "char":
            tok, extra = _char_tokenizer(train_text, val_text, corpus_meta["vocab"])
        else:
            tok, extra = _bpe_tokenizer(train_text, size)
    seconds = time.perf_counter() - t0
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"), pretty=True)
    file_hash = hashlib.sha256((out_dir / "tokenizer.json").read_bytes()).hexdigest()
    meta = dict(name=name, kind=kind, size=size, vocab_size=tok.get_vocab_size(),
                train_chars=len(train_text), train_sha256=sha256(train_text),
                corpus_sha256=corpus_meta["sha256"], tokenizers_version=tokenizers.__version__,
                tokenizer_sha256=file_hash, **extra)
    write_json(meta, out_dir / "meta.json")
    if size is not None and meta["vocab_size"] < size:
        log.warning("%s: the trainer ran out of pairs at %d tokens (asked %d)", name,
                    meta["vocab_size"], size)
    log.info("vocabulary %s: %d tokens from %d training characters in %.2f s", name,
             meta["vocab_size"], len(train_text), seconds)
    return dict(meta, seconds=seconds)


def load_vocab(vocab_dir):
    """(tokenizers.Tokenizer, meta) of a vocabulary folder; the file must be the one its meta
    describes."""
    vocab_dir = Path(vocab_dir)
    meta = json.loads((vocab_dir / "meta.json").read_text())
    raw = (vocab_dir / "tokenizer.json").read_bytes()
    if hashlib.sha256(raw).hexdigest() != meta["tokenizer_sha256"]:
        raise VocabError(f"{vocab_dir / 'tokenizer.json'} is not the file its meta.json describes "
                         "(hash differs); retrain the vocabulary")
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    if tok.get_vocab_size() != meta["vocab_size"]:
        raise VocabError(f"{vocab_dir}: tokenizer has {tok.get_vocab_size()} tokens, meta says "
                         f"{meta['vocab_size']}")
    return tok, meta


def token_lengths(tok) -> np.ndarray:
    """Characters of each token id, as an int64 array of length vocab size.

    A byte-level token's string holds one symbol per byte, and a char token is one
    character, so its length is its length in bytes: characters on ASCII text (the
    corpus is ASCII; :func:`encode_splits` checks that the lengths add up)."""
    n = tok.get_vocab_size()
    out = np.zeros(n, dtype=np.int64)
    for token, i in tok.get_vocab().items():
        out[i] = len(token)
    if (out < 1).any():
        raise VocabError(f"token ids {np.flatnonzero(out < 1)[:10].tolist()} have no string")
    return out


def encode_text(tok, text: str, lengths: np.ndarray | None = None) -> np.ndarray:
    """Token ids of ``text`` (one sequence: no chunking, so no boundary is invented),
    after checking that they decode to ``text`` exactly and hold its characters."""
    if not text.isascii():
        raise VocabError("the text is not ASCII: characters per token are counted in bytes")
    ids = np.asarray(tok.encode(text).ids, dtype=np.int64)
    lengths = token_lengths(tok) if lengths is None else lengths
    if int(lengths[ids].sum()) != len(text) or tok.decode(ids.tolist()) != text:
        raise VocabError(f"encoding {len(text)} characters into {len(ids)} tokens does not "
                         "round-trip (decode(encode(text)) != text)")
    return ids


def encode_splits(corpus_dir, vocab_dir) -> dict:
    """Encode the corpus's training and validation splits, each on its own, with the
    vocabulary in ``vocab_dir``; write ``train.npy``, ``val.npy`` (uint8 up to 256 tokens,
    else uint16) and ``split.json`` there. Returns the split meta.

    For ``char`` the ids are checked against the corpus's ``ids.npy`` when it exists."""
    tok, vmeta = load_vocab(vocab_dir)
    train_text, val_text, corpus_meta = read_splits(corpus_dir)
    if vmeta["train_sha256"] != sha256(train_text):
        raise VocabError(f"{vocab_dir} was trained on another training split than {corpus_dir}'s; "
                         "retrain the vocabulary")
    lengths = token_lengths(tok)
    t0 = time.perf_counter()
    train_ids, val_ids = encode_text(tok, train_text, lengths), encode_text(tok, val_text, lengths)
    seconds = time.perf_counter() - t0
    dtype = np.uint8 if vmeta["vocab_size"] <= 256 else np.uint16
    if vmeta["vocab_size"] > np.iinfo(np.uint16).max + 1:
        raise VocabError(f"{vmeta['vocab_size']} tokens do not fit uint16")
    corpus_ids = Path(corpus_dir) / "ids.npy"
    if vmeta["kind"] == "char" and corpus_ids.exists():
        ref = np.load(corpus_ids)
        if not np.array_equal(np.concatenate([train_ids, val_ids]), ref.astype(np.int64)):
            raise VocabError(f"the char vocabulary's ids differ from {corpus_ids}")
    vocab_dir = Path(vocab_dir)
    np.save(vocab_dir / "train.npy", train_ids.astype(dtype))
    np.save(vocab_dir / "val.npy", val_ids.astype(dtype))
    split = dict(name=vmeta["name"], kind=vmeta["kind"], vocab_size=vmeta["vocab_size"],
                 train_tokens=len(train_ids), val_tokens=len(val_ids),
                 train_chars=len(train_text), val_chars=len(val_text),
                 train_chars_per_token=len(train_text) / len(train_ids),
                 val_chars_per_token=len(val_text) / len(val_ids),
                 train_sha256=sha256(train_text), val_sha256=sha256(val_text),
                 corpus_sha256=corpus_meta["sha256"], tokenizer_sha256=vmeta["tokenizer_sha256"])
    split.update({f"{part}_ids_sha256": file_sha256(vocab_dir / f"{part}.npy") for part in ("train", "val")})

    write_json(split, vocab_dir / "split.json")
    log.info("%s: train %d chars -> %d tokens, val %d chars -> %d tokens (%.3f chars/token) in %.2f s",
             vmeta["name"], len(train_text), len(train_ids), len(val_text), len(val_ids),
             split["val_chars_per_token"], seconds)
    return split


def load_split_ids(vocab_dir) -> tuple[np.ndarray, dict]:
    """(ids, meta) for :func:`headwatch.sweep.train.train`: ``ids`` = training then
    validation ids; ``meta`` = the split meta plus ``n_train``/``n_val`` (tokens),
    ``vocab_size``, ``vocab`` (the characters for ``char``, else the name) and ``sha256``
    (the corpus hash for ``char``, so a char arm's training fingerprint is the corpus's;
    otherwise a hash of corpus and tokenizer, so the ids' identity is in the fingerprint)."""
    vocab_dir = Path(vocab_dir)
    split = json.loads((vocab_dir / "split.json").read_text())
    vmeta = json.loads((vocab_dir / "meta.json").read_text())
    for part in ("train", "val"):          # the files we wrote, not only of the same length
        verify_sha256(vocab_dir / f"{part}.npy", split.get(f"{part}_ids_sha256"),
                      f"{vocab_dir / 'split.json'} ({part}_ids_sha256)")
    train_ids = np.load(vocab_dir / "train.npy", allow_pickle=False)
    val_ids = np.load(vocab_dir / "val.npy", allow_pickle=False)
    if (len(train_ids), len(val_ids)) != (split["train_tokens"], split["val_tokens"]) or \
            split["tokenizer_sha256"] != vmeta["tokenizer_sha256"]:
        raise VocabError(f"{vocab_dir}: train.npy/val.npy/split.json do not belong together or to "
                         "its tokenizer; re-encode the splits")
    if vmeta["kind"] == "char":
        vocab, ident = vmeta["vocab"], split["corpus_sha256"]
    else:
        vocab, ident = vmeta["name"], sha256(split["corpus_sha256"] + split["tokenizer_sha256"])
    meta = dict(split, vocab=vocab, sha256=ident, n_train=len(train_ids), n_val=len(val_ids))
    return np.concatenate([train_ids, val_ids]), meta


# ------------------------------------------------------------------ bits per character
def eval_windows(n: int, context: int, stride: int | None = None) -> tuple[int, list[tuple[int, int]]]:
    """The windows that score a split of ``n`` tokens: (window length L, [(start, first)]).

    A window reads tokens ``start .. start+L-1`` and predicts ``start+1 .. start+L``; it
    scores its positions ``first .. L-1`` (target ``start+j+1`` at position j, predicted from
    the j+1 tokens ``start .. start+j``). Targets 1 … n−1 are each scored exactly once;
    token 0 is never a target (nothing precedes it). See :func:`bits_per_char`."""
    if n < 2:
        raise ValueError(f"a split of {n} tokens has nothing to predict")
    stride = context if stride is None else stride
    if not 1 <= stride <= context:
        raise ValueError(f"stride {stride} must lie in [1, context={context}]")
    L = min(context, n - 1)
    windows, end = [(0, 0)], L               # targets 1 .. end are scored
    while end < n - 1:
        new_end = min(end + stride, n - 1)
        start = new_end - L
        windows.append((start, end - start))
        end = new_end
    return L, windows


def bits_per_char(model, val_ids, lengths, stride: int | None = None, batch: int = 32,
                  amp=None) -> dict:
    """Bits per character of ``model`` on the whole validation split ``val_ids``.

    Windowing (:func:`eval_windows`): every validation token after the first is predicted
    exactly once, from the tokens before it inside its window of ``L = min(context, n−1)``
    tokens. The first window starts at token 0 and scores all its positions (target t
    sees tokens 0 … t−1). Each later window ends ``stride`` targets further on (the last one
    ends at the split's last token and may move less) and scores only the targets no earlier
    window scored, so each of those sees at least ``L − stride + 1`` tokens. With
    ``stride = context`` (the default) the windows tile the split: a target sees 1 … context
    tokens, as in training, whose loss averages over all window positions; ``stride = 1``
    gives every target the full ``min(t, context)`` preceding tokens (context × the cost).
    Nothing outside the split is read.

    ``lengths``: characters of each token id (:func:`token_lengths`). Returns ``nats`` (the
    sum of −ln p over the scored tokens, float64), ``tokens`` (n − 1), ``chars`` (the
    characters those tokens hold: the split's characters less the first token's),
    ``bits_per_char`` = nats ÷ chars ÷ ln 2, ``nats_per_token``, ``val_tokens``,
    ``val_chars``, ``chars_per_token`` (of the split), ``context``, ``stride``, ``windows``,
    ``chars_per_window`` = context × chars_per_token, and the evaluation's ``seconds``,
    ``tokens_per_s`` and ``chars_per_s`` (scored tokens / characters per second).
    """
    # torch here, not at the top: the vocabulary jobs (sweep_vocab) train and encode vocabularies
    # without it, and importing it takes 3.2 s.
    import torch
    from torch.nn import functional as F

    with torch.no_grad():
        device = next(model.parameters()).device
        context = model.context
        stride = context if stride is None else stride
        ids = torch.as_tensor(np.asarray(val_ids, dtype=np.int64), device=device)
        lengths = np.asarray(lengths, dtype=np.int64)
        n = len(ids)
        L, wins = eval_windows(n, context, stride)
        amp = amp if amp is not None else contextlib.nullcontext()
        offsets = torch.arange(L + 1, device=device)
        was = model.training
        model.eval()
        nats, scored = 0.0, 0
        t0 = time.perf_counter()
        for i in range(0, len(wins), batch):
            chunk = wins[i:i + batch]
            starts = torch.tensor([s for s, _ in chunk], device=device)
            first = torch.tensor([f for _, f in chunk], device=device)
            w = ids[starts.unsqueeze(1) + offsets]
            with amp:
                logits = model(w[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten(),
                                   reduction="none").view(len(chunk), L)
            keep = torch.arange(L, device=device).unsqueeze(0) >= first.unsqueeze(1)
            nats += loss[keep].double().sum().item()
            scored += int(keep.sum().item())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        model.train(was)
        if scored != n - 1:
            raise RuntimeError(f"windows scored {scored} tokens, not the split's {n - 1}")
        val_chars = int(lengths[ids.cpu().numpy()].sum())
        chars = val_chars - int(lengths[int(ids[0])])
        if not math.isfinite(nats):
            raise NonFiniteError(f"validation nats are {nats}")
        cpt = val_chars / n
        return dict(nats=nats, tokens=scored, chars=chars, bits_per_char=nats / chars / math.log(2),
                    nats_per_token=nats / scored, val_tokens=n, val_chars=val_chars,
                    chars_per_token=cpt, context=context, stride=stride, windows=len(wins),
                    chars_per_window=context * cpt, seconds=seconds,
                    tokens_per_s=scored / max(seconds, 1e-9), chars_per_s=chars / max(seconds, 1e-9))
