"""Summaries of the study sweeps ("studies"): experts, depth at a fixed budget,
shared keys/values, vocabulary size. A sweep with a ``study`` block in config gets one summary
table (one row per configuration, mean ± std over seeds), its contrasts (each arm against its
reference with an interval over seeds and a verdict: :mod:`headwatch.sweep.contrasts`) and one figure.

Each kind has an invariant that makes its comparison fair; it is checked on the
config before any job (``check_sweeps``) and again, on the parameter counts the
training jobs recorded, before a summary is written. When it fails the summary
raises :class:`~headwatch.sweep.summary.SummaryError` and nothing is written.

* ``experts``: every configuration traverses the same FFN width per token
  (``ffn_active_width`` = 4·width for a dense FFN, top_k × expert_width with
  experts). Columns: validation bits per character, parameters stored and
  active per token, training throughput (characters/s, the mean of the logged
  intervals), and the smallest and largest share of token→expert assignments
  that any expert of any layer received on the validation windows (mean over
  seeds; a uniform load gives 1/E; a dense FFN is one "expert" with share 1).

Every study table reads each run both ways (protocol §7, "Two readings";
:func:`headwatch.sweep.summary.run_readings`): beside the last evaluation's loss, each run's best
(``best_val_loss``, ``best_step``) and the rise between them, per configuration their mean
(``best_val_loss_mean``, ``_std``, ``best_step_min``, ``_max``, ``rise_mean``; in nats per token of the
sampled windows, so per character but for a vocab study). Every study table has ``peak_memory_mb``, the largest over seeds of each training
job's peak memory (``peak_memory_of``: on a GPU the CUDA allocator's peak for
tensors, on a CPU the job's peak resident set, interpreter included); <NA> where a
run predates the record.
* ``depth``: non-embedding parameters (attention + norms + FFN; no token or
  position embeddings, no output head) of every configuration within
  ``tolerance`` (relative) of the first grid entry's, and every head of size
  ``head_size``.
* ``kv``: configurations differ only in kv_heads (same width, heads, head
  size, layers, FFN). KV-cache bytes per token = 2 × layers × kv_heads ×
  head size × ``bytes_per_number``.
* ``vocab``: configurations differ only in the vocabulary they read (``vocab``:
  ``char`` or ``bpe{size}``, :mod:`headwatch.charlm.tokenizer`); same width,
  heads, layers, context, FFN, steps and batch. The context is held equal **in
  tokens**, so a larger vocabulary sees more characters per window
  (``chars_per_window`` = context × the validation split's characters per token).
  The metric is bits per character of the whole validation split
  (:func:`~headwatch.charlm.tokenizer.bits_per_char`: total nats over its tokens ÷
  its characters ÷ ln 2), which the training job of each arm records (``val_full`` in its
  metrics' note); arms evaluated on different validation text are refused
  (:func:`~headwatch.charlm.vocab.assert_same_validation`). Parameters:
  ``params`` (all), ``vocab_params`` = token embedding + output head (2 ×
  vocabulary × width, the part the vocabulary sets), ``positions`` (context ×
  width, the same in every arm), ``non_embedding`` = attention + norms + FFN;
  ``params`` = vocab_params + positions + non_embedding, so "without embeddings"
  (``non_embedding``) leaves out the position embeddings too, and
  ``params_without_vocab`` = positions + non_embedding keeps them.
  ``embedding_share`` = vocab_params ÷ params. Throughput: training
  ``tokens_per_s`` (the mean of the logged intervals) and ``chars_per_s`` =
  tokens/s × the training split's characters per token.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..charlm.spec import ModelSpec
from ..charlm.vocab import VocabError, assert_same_validation
from ..names import BYTES_PER_NUMBER
from ..settings.kinds import KINDS
from ..settings.sweep import StudySettings, invariant_error, model_numbers
from ..tableio import assert_finite, read_note, read_parquet
from .summary import SummaryError, run_readings

MODEL_COLUMNS = ["width", "heads", "layers", "head_size", "kv_heads", "experts", "top_k", "expert_width",
                 "balance"]


def read_study_runs(runs: list[dict], vocab_size: int,
                    bytes_per_number: int = BYTES_PER_NUMBER["float32"]) -> pd.DataFrame:
    """One row per (shape, seed): resolved architecture, recorded parameters, final losses,
    throughput and expert shares (``vocab_size``: the corpus's). ``runs[i]``: a run of ``headwatch.sweep.plan.runs`` with
    ``model`` (its settings) and ``metrics`` (path); a run that names its ``vocab`` (a vocab
    study's, :func:`headwatch.sweep.plan.study_runs`) also gets its vocabulary's columns
    (:func:`vocab_columns`)."""
    rows = []
    for r in runs:
        m = read_parquet(r["metrics"])
        note = read_note(r["metrics"])
        read = run_readings(m)
        vocab = "vocab" in r
        a = model_numbers(r["model"], int(note["vocab_size"]) if vocab else vocab_size, bytes_per_number)
        shares = np.asarray(note.get("expert_shares") or [[1.0]], dtype=float)
        rows.append(dict(sweep=r["sweep"], shape=r["shape"], seed=r["seed"],
                         trained_under=r["trained_under"], **{k: a[k] for k in MODEL_COLUMNS},
                         ffn_active_width=a["ffn_active_width"],
                         kv_cache_bytes_per_token=a["kv_cache_bytes_per_token"],
                         params=int(note["params"]),
                         params_active=int(note.get("params_active", note["params"])),
                         non_embedding=int(note.get("non_embedding", a["non_embedding"])),
                         params_formula=a["params_formula"],
                         **read,
                         chars_per_s=float(m["tokens_per_s"].mean()),
                         expert_share_min=float(shares.min()), expert_share_max=float(shares.max()),
                         peak_memory_mb=note.get("peak_memory_mb"),
                         peak_memory_of=note.get("peak_memory_of"),
                         **(vocab_columns(r, note, m) if vocab else {})))
    finals = pd.DataFrame(rows)
    finals["peak_memory_mb"] = finals["peak_memory_mb"].astype("Float64")   # <NA>: not recorded
    return finals


VOCAB_NOTE = dict(bits_per_char="val_full_bpc", nats="val_nats", tokens="scored_tokens",
                  chars="scored_chars", val_sha256="val_sha256", val_chars="val_chars", val_tokens="val_tokens",
                  chars_per_window="chars_per_window", context="context", stride="stride")
"""What a vocab study reads from each run's whole-validation evaluation (``val_full``), and its
column: the tokens and characters scored are the split's less its first token."""


def vocab_columns(run: dict, note: dict, metrics: pd.DataFrame) -> dict:
    """A vocab study run's own columns: its vocabulary, the whole-validation evaluation its
    training job recorded (``val_full``), its parameters split by what the vocabulary sets, and
    its training throughput in tokens and characters."""
    full = note.get("val_full")
    if not full:
        raise SummaryError(f"{run['sweep']}/{run['shape']}/seed{run['seed']} ({run['metrics']}) records no "
                           "whole-validation evaluation (val_full): it was trained before its job was asked for bits per "
                           "character; remake it (snakemake --forcerun that file)")
    if note.get("vocab", "char") != run["vocab"]:
        raise SummaryError(f"{run['metrics']} was trained on vocabulary {note.get('vocab', 'char')!r}, "
                           f"not {run['vocab']!r}")
    spec = ModelSpec.from_settings(int(note["vocab_size"]), run["model"])
    p = spec.param_counts()
    tokens_per_s = float(metrics["tokens_per_s"].mean())
    return dict(vocab=run["vocab"], vocab_size=int(note["vocab_size"]),
                **{column: full[key] for key, column in VOCAB_NOTE.items()},
                val_chars_per_token=full["val_chars"] / full["val_tokens"],
                train_chars_per_token=float(note["train_chars_per_token"]),
                token_embeddings=p["embeddings"], output_head=p["head"], vocab_params=p["embeddings"] + p["head"],
                positions=p["positions"], tokens_per_s=tokens_per_s,
                train_chars_per_s=tokens_per_s * float(note["train_chars_per_token"]),
                eval_tokens_per_s=float(full["tokens_per_s"]), eval_chars_per_s=float(full["chars_per_s"]))


def study_note(study: dict) -> dict:
    """What a study table's metadata says about its numbers (stored with the table, with the
    sweep's ``study`` block as the config gives it)."""
    if KINDS[StudySettings.of(study).kind].vocabularies:
        return dict(study=study, metric="bits per character of the whole validation split: total nats over "
                    "its tokens / its characters / ln 2 (val_full_bpc_mean, val_full_bpc_std); every arm scored on "
                    "the same validation characters (val_sha256, checked)",
                    context="held equal in TOKENS (sweep.model.context): a larger vocabulary sees more "
                    "characters per window (chars_per_window = context x validation characters per token); "
                    "steps and batch are equal too, so each arm trains on the same number of tokens and a "
                    "larger vocabulary on more characters (train_chars_per_token)",
                    params="params = vocab_params (token embedding + output head) + positions (position "
                    "embeddings, the same in every arm) + non_embedding (attention + norms + FFN); "
                    "params_without_vocab = positions + non_embedding; embedding_share = vocab_params / params",
                    throughput="tokens_per_s: training, mean of the logged intervals; chars_per_s = tokens_per_s "
                    "x the training split's characters per token; eval_*: the whole-validation evaluation",
                    val_loss="val_loss_mean: the sampled validation windows' loss in nats per TOKEN (not "
                    "comparable across vocabularies)", std="over seeds, ddof=1")
    return dict(study=study, loss="final validation loss of the sampled validation windows (val_loss_mean, "
                "nats per character)", bpc="val_bpc_mean, val_bpc_std: that loss / ln 2 (not the whole split, "
                "which a vocab study scores as val_full_bpc)", std="over seeds, ddof=1")


def summarize_study(finals: pd.DataFrame, study: StudySettings | dict) -> pd.DataFrame:
    """Per-configuration table (mean ± std over seeds); SummaryError when unfair or unsound.
    ``study``: the sweep's ``study`` block (:class:`StudySettings` or its mapping)."""
    study = StudySettings.of(study)
    if finals.empty:
        raise SummaryError("no runs to summarize")
    name = finals["sweep"].iloc[0]
    bad = finals[~np.isfinite(finals[["val_loss", "train_loss"]].to_numpy(dtype=float)).all(axis=1)]
    if len(bad):
        raise SummaryError("NaN/inf final loss in " + ", ".join(
            f"{r.sweep}/{r.shape}/seed{r.seed}" for r in bad.itertuples()) + "; refusing to summarize")
    wrong = finals[finals["params"] != finals["params_formula"]]
    if len(wrong):
        raise SummaryError("recorded parameter counts differ from the architecture formula for " +
                           ", ".join(f"{r.shape}/seed{r.seed}: {r.params} vs {r.params_formula}"
                                     for r in wrong.itertuples()))
    configs = list(dict.fromkeys(finals["shape"]))
    first = finals.drop_duplicates("shape").set_index("shape").loc[configs]
    models = [dict(width=int(r.width), heads=int(r.heads), layers=int(r.layers),
                   head_size=int(r.head_size), kv_heads=int(r.kv_heads),
                   **(dict(experts=int(r.experts), top_k=int(r.top_k),
                           expert_width=int(r.expert_width)) if r.experts else {}))
              for r in first.itertuples()]
    if KINDS[study.kind].vocabularies:
        models = [dict(m, context=int(r.context)) for m, r in zip(models, first.itertuples())]
    err = invariant_error(study, models, configs, [int(x) for x in first["non_embedding"]],
                          vocabs=list(first["vocab"]) if "vocab" in first else None)
    if err:
        raise SummaryError(f"sweep {name!r} ({study.kind} study): {err}; refusing to write the summary")

    keys = ["sweep", "shape", "trained_under"] + MODEL_COLUMNS + [
        "ffn_active_width", "kv_cache_bytes_per_token", "params", "params_active", "non_embedding"]
    g = finals.groupby(keys, sort=False)
    # each run's best (protocol §7, "Two readings"), where its finals were read both ways (read_study_runs)
    best = dict(best_val_loss_mean=("best_val_loss", "mean"), best_val_loss_std=("best_val_loss", "std"),
                best_step_min=("best_step", "min"), best_step_max=("best_step", "max"),
                rise_mean=("rise", "mean")) if {"best_val_loss", "best_step", "rise"} <= set(finals) else {}
    s = g.agg(seeds=("seed", "count"), steps=("steps", "max"),
              val_loss_mean=("val_loss", "mean"), val_loss_std=("val_loss", "std"),
              train_loss_mean=("train_loss", "mean"), **best,
              chars_per_s=("chars_per_s", "mean"),
              expert_share_min=("expert_share_min", "mean"),
              expert_share_max=("expert_share_max", "mean"),
              peak_memory_mb=("peak_memory_mb", "max"),
              peak_memory_of=("peak_memory_of", "first")).reset_index()
    if len(s) != len(configs):
        raise SummaryError(f"seeds of one configuration disagree on its architecture or parameter "
                           f"count: {len(s)} groups for {len(configs)} configurations")
    few = s[s["seeds"] < 2]
    if len(few):
        raise SummaryError("a seed std needs at least 2 seeds; only one for " + ", ".join(few["shape"]))
    s["val_bpc_mean"] = s["val_loss_mean"] / math.log(2)
    s["val_bpc_std"] = s["val_loss_std"] / math.log(2)
    ref = s["non_embedding"].iloc[0]
    s["non_embedding_vs_first"] = s["non_embedding"] / ref - 1
    s["uniform_share"] = np.where(s["experts"] > 0, 1 / s["experts"].clip(lower=1), 1.0)
    if KINDS[study.kind].vocabularies:
        s = _vocab_summary(finals, s, name)
    assert_finite(s, f"{name} study summary")
    return s


def _vocab_summary(finals: pd.DataFrame, s: pd.DataFrame, name: str) -> pd.DataFrame:
    """The vocab study's columns (module docstring): bits per character of the whole validation
    split mean ± std over seeds in place of the sampled windows' loss ÷ ln 2, parameters by what
    the vocabulary sets, characters per window and throughput. Refuses arms evaluated on
    different validation text."""
    try:
        assert_same_validation({f"{r.shape}/seed{r.seed}": dict(val_sha256=r.val_sha256, val_chars=r.val_chars)
                               for r in finals.itertuples()})
    except VocabError as err:
        raise SummaryError(f"sweep {name!r} (vocab study): {err}; refusing to write the summary") from None
    per_arm = ["vocab", "vocab_size", "token_embeddings", "output_head", "vocab_params", "positions",
               "context", "val_tokens", "val_chars", "val_chars_per_token", "chars_per_window",
               "train_chars_per_token", "val_sha256", "stride"]
    g = finals.groupby("shape", sort=False)
    varying = [c for c in per_arm if (g[c].nunique() > 1).any()]
    if varying:
        raise SummaryError(f"sweep {name!r} (vocab study): the seeds of one configuration disagree on {varying}")
    arm = g[per_arm].first()
    agg = g.agg(bpc_mean=("val_full_bpc", "mean"), bpc_std=("val_full_bpc", "std"),
                tokens_per_s=("tokens_per_s", "mean"), chars_per_s_train=("train_chars_per_s", "mean"),
                eval_tokens_per_s=("eval_tokens_per_s", "mean"), eval_chars_per_s=("eval_chars_per_s", "mean"))
    # val_bpc_* (the sampled windows' loss / ln 2) would be bits per TOKEN here: the whole split's
    # bits per character take their place, under their own name
    out = s.drop(columns=["chars_per_s", "val_bpc_mean", "val_bpc_std"]).join(arm, on="shape").join(agg, on="shape")
    out["val_full_bpc_mean"], out["val_full_bpc_std"] = out.pop("bpc_mean"), out.pop("bpc_std")
    out["chars_per_s"] = out.pop("chars_per_s_train")
    out["val_loss_unit"] = "nats per token"        # the sampled windows' loss: per token, not per character
    out["params_without_vocab"] = out["params"] - out["vocab_params"]
    if (out["params_without_vocab"] != out["positions"] + out["non_embedding"]).any():
        raise SummaryError(f"sweep {name!r} (vocab study): parameters do not add up to token embedding + head "
                           "+ positions + non-embedding")
    out["embedding_share"] = out["vocab_params"] / out["params"]
    order = ["sweep", "shape", "vocab", "vocab_size", "seeds", "steps", "val_full_bpc_mean", "val_full_bpc_std",
             "params", "vocab_params", "token_embeddings", "output_head", "positions", "non_embedding",
             "params_without_vocab", "embedding_share", "context", "val_chars_per_token", "chars_per_window",
             "train_chars_per_token", "tokens_per_s", "chars_per_s", "eval_tokens_per_s", "eval_chars_per_s",
             "peak_memory_mb", "peak_memory_of"]
    return out[order + [c for c in out.columns if c not in order]]
