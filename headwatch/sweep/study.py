"""Summaries of the study sweeps ("studies"): experts, depth at a fixed budget,
shared keys/values. A sweep with a ``study`` block in config gets one summary
table (one row per configuration, mean ± std over seeds) and one figure.

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

Every study table has ``peak_memory_mb``, the largest over seeds of each training
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
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..charlm.spec import TRAINING_OPTIONS, ModelSpec
from ..tableio import assert_finite, read_note, read_parquet
from .summary import SummaryError

MODEL_COLUMNS = ["width", "heads", "layers", "head_size", "kv_heads", "experts", "top_k", "expert_width",
                 "balance"]


def model_numbers(model: dict, vocab_size: int = 65, bytes_per_number: int = 4) -> dict:
    """Resolved numbers of one model-settings dict (``headwatch.sweep.plan.model_of``): its
    shape with every default filled in, and its parameter counts (:meth:`ModelSpec.param_counts`)."""
    spec = ModelSpec.from_settings(vocab_size, model)
    p = spec.param_counts()
    return dict(width=spec.width, heads=spec.heads, layers=spec.layers, head_size=spec.head_dim,
                kv_heads=spec.kv_groups, experts=spec.experts, top_k=spec.routed,
                expert_width=spec.expert_hidden,
                balance=float(model.get("balance", TRAINING_OPTIONS["balance"])),
                ffn_active_width=p["ffn_active_width"], non_embedding=p["non_embedding"],
                params_formula=p["total"], params_active_formula=p["total_active"],
                kv_cache_bytes_per_token=spec.kv_cache_bytes_per_token(bytes_per_number))


def invariant_error(study: dict, models: list[dict], labels: list[str] | None = None,
                    non_embedding: list[int] | None = None) -> str:
    """'' when the study's comparison is fair, else why not. ``non_embedding``:
    measured counts to use instead of the formula's (the summary passes them)."""
    kind = study["kind"]
    a = [model_numbers(m) for m in models]
    labels = labels or [f"grid[{i}]" for i in range(len(models))]
    if len(a) < 2:
        return f"a {kind} study needs at least 2 configurations"
    if kind == "experts":
        widths = {lab: x["ffn_active_width"] for lab, x in zip(labels, a)}
        if len(set(widths.values())) != 1:
            return ("active FFN width per token (4·width dense, top_k × expert_width with experts) "
                    f"must be equal across the sweep; got {widths}")
    elif kind == "depth":
        ne = non_embedding or [x["non_embedding"] for x in a]
        ref, tol = ne[0], study.get("tolerance", 0.02)
        off = {lab: f"{n:,} ({100 * (n / ref - 1):+.2f} %)" for lab, n in zip(labels, ne)
               if abs(n / ref - 1) > tol}
        if off:
            return (f"non-embedding parameters must lie within {100 * tol:g} % of {labels[0]}'s "
                    f"{ref:,}; outside: {off}")
        hs = study.get("head_size")
        if hs is not None:
            bad = {lab: x["head_size"] for lab, x in zip(labels, a) if x["head_size"] != hs}
            if bad:
                return f"every head must have size {hs}; got {bad}"
    elif kind == "kv":
        fixed = ["width", "heads", "layers", "head_size", "experts", "expert_width"]
        shapes = {lab: tuple(x[k] for k in fixed) for lab, x in zip(labels, a)}
        if len(set(shapes.values())) != 1:
            return f"configurations may differ only in kv_heads; ({', '.join(fixed)}) = {shapes}"
        if len({x["kv_heads"] for x in a}) != len(a):
            return "every configuration needs its own kv_heads"
    else:
        return f"unknown study kind {kind!r}"
    return ""


def read_study_runs(runs: list[dict], vocab_size: int, bytes_per_number: int = 4) -> pd.DataFrame:
    """One row per (arch, seed): resolved architecture, recorded parameters, final losses,
    throughput and expert shares (``vocab_size``: the corpus's). ``runs[i]``: a run of ``headwatch.sweep.plan.runs`` with
    ``model`` (its settings) and ``metrics`` (path)."""
    rows = []
    for r in runs:
        m = read_parquet(r["metrics"])
        note = read_note(r["metrics"])
        last = m.iloc[-1]
        a = model_numbers(r["model"], vocab_size, bytes_per_number)
        shares = np.asarray(note.get("expert_shares") or [[1.0]], dtype=float)
        rows.append(dict(sweep=r["sweep"], arch=r["arch"], seed=r["seed"],
                         trained_under=r["trained_under"], **{k: a[k] for k in MODEL_COLUMNS},
                         ffn_active_width=a["ffn_active_width"],
                         kv_cache_bytes_per_token=a["kv_cache_bytes_per_token"],
                         params=int(note["params"]),
                         params_active=int(note.get("params_active", note["params"])),
                         non_embedding=int(note.get("non_embedding", a["non_embedding"])),
                         params_formula=a["params_formula"],
                         steps=int(last["step"]), val_loss=float(last["val_loss"]),
                         train_loss=float(last["train_loss"]),
                         chars_per_s=float(m["tokens_per_s"].mean()),
                         expert_share_min=float(shares.min()), expert_share_max=float(shares.max()),
                         peak_memory_mb=note.get("peak_memory_mb"),
                         peak_memory_of=note.get("peak_memory_of")))
    finals = pd.DataFrame(rows)
    finals["peak_memory_mb"] = finals["peak_memory_mb"].astype("Float64")   # <NA>: not recorded
    return finals


def summarize_study(finals: pd.DataFrame, study: dict) -> pd.DataFrame:
    """Per-configuration table (mean ± std over seeds); SummaryError when unfair or unsound."""
    if finals.empty:
        raise SummaryError("no runs to summarize")
    name = finals["sweep"].iloc[0]
    bad = finals[~np.isfinite(finals[["val_loss", "train_loss"]].to_numpy(dtype=float)).all(axis=1)]
    if len(bad):
        raise SummaryError("NaN/inf final loss in " + ", ".join(
            f"{r.sweep}/{r.arch}/seed{r.seed}" for r in bad.itertuples()) + "; refusing to summarize")
    wrong = finals[finals["params"] != finals["params_formula"]]
    if len(wrong):
        raise SummaryError("recorded parameter counts differ from the architecture formula for " +
                           ", ".join(f"{r.arch}/seed{r.seed}: {r.params} vs {r.params_formula}"
                                     for r in wrong.itertuples()))
    configs = list(dict.fromkeys(finals["arch"]))
    first = finals.drop_duplicates("arch").set_index("arch").loc[configs]
    models = [dict(width=int(r.width), heads=int(r.heads), layers=int(r.layers),
                   head_size=int(r.head_size), kv_heads=int(r.kv_heads),
                   **(dict(experts=int(r.experts), top_k=int(r.top_k),
                           expert_width=int(r.expert_width)) if r.experts else {}))
              for r in first.itertuples()]
    err = invariant_error(study, models, configs, [int(x) for x in first["non_embedding"]])
    if err:
        raise SummaryError(f"sweep {name!r} ({study['kind']} study): {err}; refusing to write the summary")

    keys = ["sweep", "arch", "trained_under"] + MODEL_COLUMNS + [
        "ffn_active_width", "kv_cache_bytes_per_token", "params", "params_active", "non_embedding"]
    g = finals.groupby(keys, sort=False)
    s = g.agg(seeds=("seed", "count"), steps=("steps", "max"),
              val_loss_mean=("val_loss", "mean"), val_loss_std=("val_loss", "std"),
              train_loss_mean=("train_loss", "mean"),
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
        raise SummaryError("a seed std needs at least 2 seeds; only one for " + ", ".join(few["arch"]))
    s["val_bpc_mean"] = s["val_loss_mean"] / math.log(2)
    s["val_bpc_std"] = s["val_loss_std"] / math.log(2)
    ref = s["non_embedding"].iloc[0]
    s["non_embedding_vs_first"] = s["non_embedding"] / ref - 1
    s["uniform_share"] = np.where(s["experts"] > 0, 1 / s["experts"].clip(lower=1), 1.0)
    assert_finite(s, f"{name} study summary")
    return s
