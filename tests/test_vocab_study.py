"""The vocabulary study (headwatch.sweep.study kind ``vocab``): tiny models trained in process on
the corpus's characters and on a byte-level BPE vocabulary, summarized through the study's own
code path; bits per character of a BPE arm recomputed by hand from the saved model; the refusals
(different validation text, a run without the record, an unfair grid); the plan's vocab option."""
import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from headwatch.charlm.corpus import load_ids
from headwatch.charlm.model import count_params
from headwatch.charlm.spec import ModelSpec
from headwatch.charlm.tokenizer import encode_splits, load_split_ids, load_vocab, token_lengths, train_vocab
from headwatch.settings.sweep import check_sweeps, slug
from headwatch.sweep.plan import SLUG, job_params, runs, study_runs, train_jobs, vocabularies
from headwatch.sweep.study import read_study_runs, summarize_study
from headwatch.sweep.summary import SummaryError
from headwatch.sweep.train import train
from headwatch.tableio import read_note, write_parquet
from conftest import ROOT
from test_tokenizer import corpus_dir

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
TINY_TRAIN = dict(steps=5, batch=4, lr=3e-3, min_lr=3e-4, warmup=1, weight_decay=0.1, eval_every=5,
                  eval_batches=2, checkpoint_every=100)
STUDY = dict(kind="vocab")


def tiny_cfg(grid):
    return dict(model=dict(layers=2, context=16, ffn_mult=4), precision="float32", device="cpu",
                sweeps=dict(vs=dict(study=STUDY, seeds=[0, 1], train=TINY_TRAIN, grid=grid)))


GRID = [dict(width=16, heads=2), dict(width=16, heads=2, vocab="bpe300")]


def train_study(cfg, corpus, vocab_root, out):
    """Every run of the study trained as its workflow job would be; returns study_runs with paths."""
    planned = []
    for r in study_runs(cfg, "vs"):
        job = job_params(cfg, r["sweep"], r["shape"], r["seed"])
        if "vocab" in job:
            ids, meta = load_split_ids(vocab_root / job["vocab"])
            lengths = token_lengths(load_vocab(vocab_root / job["vocab"])[0])
        else:
            (ids, meta), lengths = load_ids(corpus / "ids.npy", corpus / "meta.json"), None
        model, metrics, info, _ = train(ids, meta, job["model"], job["seed"], job["train"], lengths=lengths)
        path = out / f"{r['shape']}-{r['seed']}.parquet"
        write_parquet(metrics, path, note=dict(info, model=model.spec.to_dict()))
        planned.append(dict(r, metrics=path, trained=model, ids=ids, meta=meta))
    return planned


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("vocab_study")
    corpus = corpus_dir(root / "corpus", plays=["tragedies/macbeth"], target_chars=20_000)
    train_vocab(corpus, root / "bpe300", "bpe300")
    encode_splits(corpus, root / "bpe300")
    cfg = tiny_cfg(GRID)
    planned = train_study(cfg, corpus, root, root)
    corpus_vocab = load_ids(corpus / "ids.npy", corpus / "meta.json")[1]["vocab_size"]
    finals = read_study_runs(planned, corpus_vocab)
    return dict(root=root, corpus=corpus, cfg=cfg, planned=planned, finals=finals,
                summary=summarize_study(finals, STUDY))


def bpc_by_hand(model, val, tok):
    """Bits per character of ``val`` (token ids), one target at a time: target t is predicted from
    the tokens of its window (windows of ``context`` tokens tiling the split: target t >= 1 sees
    the tokens from the start of its block of ``context`` targets), nats summed in float64 and
    divided by the characters of the targets (decoded) and ln 2."""
    C = model.context
    nats, chars = 0.0, 0
    with torch.no_grad():
        for t in range(1, len(val)):
            start = 0 if t <= C else min(C + -(-(t - C) // C) * C, len(val) - 1) - C
            logp = torch.log_softmax(model(torch.as_tensor(val[start:t])[None])[0, -1].double(), -1)
            nats -= logp[int(val[t])].item()
            chars += len(tok.decode([int(val[t])]))
    return nats / chars / math.log(2), chars


def test_bits_per_char_of_a_bpe_arm_by_hand_matches_the_summary(study):
    tok, _ = load_vocab(study["root"] / "bpe300")
    arm = [p for p in study["planned"] if p["shape"] == "w16-h2-vbpe300"]
    hand = []
    for p in arm:
        val = p["ids"][p["meta"]["n_train"]:].astype(np.int64)
        bpc, chars = bpc_by_hand(p["trained"].eval(), val, tok)
        hand.append(bpc)
        assert chars == p["meta"]["val_chars"] - len(tok.decode([int(val[0])]))
    row = study["summary"].set_index("shape").loc["w16-h2-vbpe300"]
    assert row["val_full_bpc_mean"] == pytest.approx(np.mean(hand), rel=1e-6)
    assert row["val_full_bpc_std"] == pytest.approx(np.std(hand, ddof=1), rel=1e-4)
    # the sampled windows' loss / ln 2 would be bits per TOKEN here: not in the vocab table under a bpc name
    assert "val_bpc_mean" not in study["summary"] and "val_bpc_std" not in study["summary"]
    # tokens hold several characters: bits per token would be a different number
    assert row["val_chars_per_token"] > 1.2


def test_the_char_arm_is_the_plain_model_and_its_bits_are_nats_per_char(study):
    s = study["summary"].set_index("shape")
    char = s.loc["w16-h2"]
    assert char["vocab"] == "char" and char["val_chars_per_token"] == 1.0
    assert char["chars_per_window"] == 16 and char["chars_per_s"] == pytest.approx(char["tokens_per_s"])
    notes = [read_note(p["metrics"]) for p in study["planned"] if p["shape"] == "w16-h2"]
    full = [n["val_full"] for n in notes]
    assert [f["bits_per_char"] for f in full] == pytest.approx([f["nats"] / f["chars"] / math.log(2) for f in full])
    assert char["val_full_bpc_mean"] == pytest.approx(np.mean([f["bits_per_char"] for f in full]))


def test_the_summary_reports_parameters_window_and_throughput(study):
    s = study["summary"].set_index("shape")
    bpe, char = s.loc["w16-h2-vbpe300"], s.loc["w16-h2"]
    counts = count_params(ModelSpec(300, 16, 2, layers=2, context=16))
    assert bpe["vocab_size"] == 300 and bpe["params"] == counts["total"]
    assert bpe["vocab_params"] == counts["embeddings"] + counts["head"] == 2 * 300 * 16
    assert bpe["positions"] == char["positions"] == 16 * 16
    assert bpe["non_embedding"] == char["non_embedding"] == counts["non_embedding"]
    for r in (bpe, char):
        assert r["params"] == r["vocab_params"] + r["positions"] + r["non_embedding"]
        assert r["params_without_vocab"] == r["positions"] + r["non_embedding"]
        assert r["embedding_share"] == pytest.approx(r["vocab_params"] / r["params"])
    assert bpe["embedding_share"] > char["embedding_share"]
    # the context is equal in tokens, so the BPE window holds more characters
    assert bpe["context"] == char["context"] == 16
    assert bpe["chars_per_window"] == pytest.approx(16 * bpe["val_chars_per_token"]) and bpe["chars_per_window"] > 16
    assert bpe["chars_per_s"] == pytest.approx(bpe["tokens_per_s"] * bpe["train_chars_per_token"])
    assert (s["seeds"] == 2).all() and (s["peak_memory_mb"] > 0).all()


def test_the_contrast_is_unpaired_and_the_figure_draws_from_the_tables(study, tmp_path):
    from headwatch.figures.style import save
    from headwatch.figures.sweep import study_figure
    from headwatch.sweep.contrasts import study_contrasts

    # bpe300 − char in bits per character of the whole split: the two vocabularies cut the text into
    # other tokens, so a seed draws other windows in each (unpaired); 2 seeds: no interval, no verdict
    c = study_contrasts(study["finals"], study["summary"], STUDY, CONFIG["summary"]["bootstrap"])
    assert len(c) == 1 and (c["contrast"].iloc[0], c["arm"].iloc[0], c["reference"].iloc[0]) == (
        "char", "w16-h2-vbpe300", "w16-h2")
    assert not c["paired"].iloc[0] and c["verdict"].iloc[0] == "too few seeds" and c["diff_lo"].isna().all()
    bpc = study["summary"].set_index("shape")["val_full_bpc_mean"]
    assert c["diff"].iloc[0] == pytest.approx(bpc["w16-h2-vbpe300"] - bpc["w16-h2"])
    assert c["arm_embedding_share"].iloc[0] == study["summary"].set_index("shape")["embedding_share"]["w16-h2-vbpe300"]
    save(study_figure("vocab", study["summary"], study["finals"], c), tmp_path / "v.pdf", tmp_path / "v.png")
    assert (tmp_path / "v.png").stat().st_size > 0


def test_the_summary_refuses_arms_on_different_validation_text(study, tmp_path):
    """An arm whose vocabulary was encoded from another corpus's validation split is refused."""
    other = corpus_dir(tmp_path / "other", plays=["tragedies/macbeth"], target_chars=15_000)
    train_vocab(other, tmp_path / "bpe300", "bpe300")
    encode_splits(other, tmp_path / "bpe300")
    cfg = study["cfg"]
    mixed = []
    for p in train_study(cfg, other, tmp_path, tmp_path):
        mixed.append(p if p["shape"] == "w16-h2-vbpe300" else
                     next(q for q in study["planned"] if (q["shape"], q["seed"]) == (p["shape"], p["seed"])))
    finals = read_study_runs(mixed, 65)
    with pytest.raises(SummaryError, match="different validation text.*refusing"):
        summarize_study(finals, STUDY)
    # a run trained before the record existed is named, not summarized
    bare = tmp_path / "bare.parquet"
    note = read_note(study["planned"][0]["metrics"])
    del note["val_full"]
    write_parquet(pd.read_parquet(study["planned"][0]["metrics"]), bare, note=note)
    with pytest.raises(SummaryError, match="no whole-validation evaluation"):
        read_study_runs([dict(study["planned"][0], metrics=bare)], 65)


# ---------------------------------------------------------------- plan and checks
def test_the_vocab_option_names_the_slug_and_leaves_plain_jobs_unchanged():
    assert slug(dict(width=256, heads=4, vocab="bpe1024")) == "w256-h4-vbpe1024"
    assert slug(dict(width=256, heads=4, vocab="char")) == slug(dict(width=256, heads=4)) == "w256-h4"
    assert SLUG.match("w256-h4-e8k2-b0.01-vbpe512") and not SLUG.match("w256-h4-vbpe0512")
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["vocab"] = dict(study=dict(kind="vocab"), seeds=[0, 1, 2],
                                  grid=[dict(width=256, heads=4)] + [dict(width=256, heads=4, vocab=f"bpe{n}")
                                                                     for n in (256, 512, 1024, 2048, 4096)])
    plain = job_params(cfg, "heads_split", "w256-h4", 0)
    assert "vocab" not in plain and plain["val_full"] is True        # the vocab study reads it
    assert job_params(cfg, "vocab", "w256-h4-vbpe1024", 0) == dict(plain, vocab="bpe1024")
    # a job no vocab study reads skips the whole-validation evaluation, skipped study or not
    assert "val_full" not in job_params(cfg, "heads_split", "w256-h8", 0)
    assert job_params(dict(cfg, skip=["vocab"]), "heads_split", "w256-h4", 0) == plain
    # the char arm is trained once, under heads_split
    vocab_runs = [r for r in runs(cfg) if r["sweep"] == "vocab"]
    assert {r["trained_under"] for r in vocab_runs if r["shape"] == "w256-h4"} == {"heads_split"}
    assert vocabularies(cfg) == ["bpe256", "bpe512", "bpe1024", "bpe2048", "bpe4096"]
    assert [r["vocab"] for r in study_runs(cfg, "vocab")][::3] == ["char"] + vocabularies(cfg)
    assert all(SLUG.match(r["shape"]) for r in train_jobs(cfg))


def test_the_paper_vocab_study_is_sound_and_unfair_grids_are_named_by_key():
    cfg = copy.deepcopy(CONFIG)
    assert check_sweeps(cfg) == []
    grid = cfg["sweeps"]["vocab"]["grid"]
    assert [e.get("vocab", "char") for e in grid] == ["char", "bpe256", "bpe512", "bpe1024", "bpe2048", "bpe4096"]
    assert {(e["width"], e["heads"]) for e in grid} == {(256, 4)} and cfg["sweeps"]["vocab"]["seeds"] == [0, 1, 2]
    grid[2] = dict(grid[2], layers=8)
    grid.append(dict(width=256, heads=4, vocab="bpe100"))
    errors = "\n".join(check_sweeps(cfg))
    assert "sweep.sweeps.vocab.grid[6]: vocab: " in errors and ">= 256" in errors
    del grid[6]
    assert "sweep.sweeps.vocab.study: configurations may differ only in their vocabulary" in "\n".join(check_sweeps(cfg))
