"""Training one sweep model: data order, schedule, evaluation, checkpoint/resume.

* Data order depends only on the seed: the batch of step ``s`` is drawn from
  ``numpy.random.default_rng([seed, s])`` (stateless), so every configuration of a
  seed sees the same windows in the same order, independent of the model's
  initialization, and a resumed run needs no saved data position.
* The course (protocol §7): every ``eval_every`` steps and at the end, the validation loss on
  ``eval_batches × batch`` windows spaced evenly over the validation split and the loss on as many
  windows spaced evenly over the training split (a fixed sample; no randomness: the same windows
  for every model and every evaluation), the whole stack in one pass each, in eval mode. Loss is in
  nats per token (per character for the corpus's own character vocabulary). The run's info keeps
  its best validation loss and step, the final train–validation gap and its evaluations' share of
  the training time (:func:`course_record`).
* At the end (``full_eval``), bits per character of the **whole** validation split
  (:func:`headwatch.charlm.tokenizer.bits_per_char`, windows of the context tiling
  the split), recorded in the run's info as ``val_full`` with the hash of the
  validation text it scored, so runs on different vocabularies can be compared on
  the same characters (the vocab study). ``lengths`` gives each token id's
  characters (all 1 for the character vocabulary).
* The steps are :class:`headwatch.charlm.loop.Trainer`'s, the induction sweep's too: AdamW (weight
  decay on matrices and embeddings only), linear warm-up to ``lr`` then cosine decay to ``min_lr``,
  each model's gradient clipped on its own; no host synchronisation inside a step (every step's
  windows are on the device before the first one, each step's loss summed on the device in
  float64 and read only where a metrics row or a checkpoint is written — the same losses, bit for
  bit, as reading every step's). ``tokens_per_s`` is timed between those reads (evaluation and
  checkpoint writing excluded).
* With ``heads`` (``sweep.heads``, protocol §7b), every evaluation step also records every
  head's scores on a fixed probe and the in-context score (:mod:`headwatch.sweep.heads`); no
  pass over the data, outside the timed steps.
* A checkpoint (model, optimizer, metrics and head records so far, the loss accumulated since
  the last row, the torch RNG states (dropout's masks), and a fingerprint of everything that
  defines the run) is written atomically every ``checkpoint_every`` steps; the
  one before it is kept (``checkpoint.prev.pt``). A restarted run resumes from
  the newest readable one whose fingerprint matches and then ends with exactly
  the losses of an uninterrupted run (CPU, same thread count). A checkpoint
  that cannot be read (truncated by a full disk or a kill) is moved aside as
  ``<name>.corrupt`` and logged with its path; training goes on from the other
  one, or from the start, and the run's info (the metrics' note) says so.
* Each attempt's log is kept under its own name next to the rule's log
  (``<log>.attempt-<n>.log``, a hard link) until the attempt succeeds, so the
  log of an attempt that failed or was killed survives the rerun, which
  Snakemake starts by removing the rule's log.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..model.arch import Adapter
from ..charlm.corpus import batch_offsets, eval_offsets
from ..charlm.loop import Schedule, Trainer
from ..charlm.model import CharLM
from ..charlm.stack import StackedCharLM
from ..charlm.spec import OPTIONS, TRAINING_OPTIONS, ModelSpec
from ..charlm.tokenizer import bits_per_char, sha256
from ..settings.sweep import PRECISIONS, HeadsSettings, TrainSettings
from .. import paths
from ..tableio import assert_finite, file_sha256, read_note, verify_sha256
from ..jobs import keep_attempt_log
from .heads import heads_frame, in_context_score, make_probe, probe_scores, records

log = logging.getLogger("headwatch.sweep")


class Interrupted(RuntimeError):
    """Raised by ``train(stop_after=...)``: simulates a job killed after a checkpoint."""


def windows(ids: torch.Tensor, offsets, context: int):
    """Inputs and next-character targets for windows starting at ``offsets``."""
    idx = torch.as_tensor(offsets, device=ids.device).unsqueeze(1) + torch.arange(
        context + 1, device=ids.device)
    w = ids[idx]
    return w[:, :-1], w[:, 1:]


def make_model(vocab_size: int, model_cfg: dict, seed: int) -> CharLM:
    """A freshly initialized model of the job's model settings (``headwatch.settings.sweep.model_of``);
    its init depends on the seed only."""
    spec = ModelSpec.from_settings(vocab_size, model_cfg)
    torch.manual_seed(seed)
    return CharLM(spec)


def bf16_supported(device: torch.device) -> bool:
    """Whether this device multiplies bfloat16 matrices in hardware: on a CUDA GPU
    ``torch.cuda.is_bf16_supported()``; on a CPU oneDNN's bfloat16 kernels
    (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: AVX-512 or AMX on x86). Without them torch
    multiplies bfloat16 by a reference loop: on a 2-core AVX2 machine a laptop step took 7.4 s
    instead of float32's 0.52 s (benchmarks/train.py)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def resolve_precision(device: torch.device, precision: str) -> tuple[str, str | None]:
    """(the precision a run on ``device`` computes in, why it is not the one asked for or None):
    bf16 on a device without bfloat16 matmuls (:func:`bf16_supported`) falls back to float32."""
    if precision not in PRECISIONS:
        raise ValueError(f"sweep.precision: {precision!r} is not one of {list(PRECISIONS)}")
    if precision == "bf16" and not bf16_supported(device):
        return "float32", (f"bf16 asked for, but {device} has no bfloat16 matmul kernels "
                           "(torch.ops.mkldnn._is_mkldnn_bf16_supported() is False): trained in float32")
    return precision, None


def precision_context(device: torch.device, precision: str):
    """float32 (exact), tf32 (CUDA matmuls in TF32) or bf16 (autocast); the precision as given
    (:func:`resolve_precision` says whether the device can)."""
    if precision not in PRECISIONS:
        raise ValueError(f"sweep.precision: {precision!r} is not one of {list(PRECISIONS)}")
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def peak_memory(device: torch.device) -> dict:
    """``peak_memory_mb``: on a CUDA device the most memory torch's allocator held for tensors
    since the run started (``torch.cuda.max_memory_allocated``); elsewhere the process's peak
    resident set (``ru_maxrss``: the whole process, its whole life). ``peak_memory_of`` says which."""
    if device.type == "cuda":
        return dict(peak_memory_mb=torch.cuda.max_memory_allocated(device) / 2**20,
                    peak_memory_of="cuda max_memory_allocated")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss     # KiB on Linux, bytes on macOS
    return dict(peak_memory_mb=rss / (2**20 if sys.platform == "darwin" else 2**10),
                peak_memory_of="process max RSS")


@torch.no_grad()
def expert_shares(model, ids: torch.Tensor, offsets, batch: int, context: int, amp) -> list[list[float]]:
    """Per expert layer, each expert's share of the token→expert assignments on the windows
    at ``offsets`` (each row sums to 1); [] for a dense model."""
    if not model.spec.experts:
        return []
    was = model.training
    model.eval()
    offsets = torch.as_tensor(offsets, device=ids.device)
    counts = 0
    for i in range(0, len(offsets), batch):
        x, _ = windows(ids, offsets[i:i + batch], context)
        with amp:
            model(x)
        counts = counts + model.expert_counts.double()
    model.train(was)
    return (counts / counts.sum(1, keepdim=True)).cpu().tolist()


def fingerprint(**parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def previous_checkpoint(path: Path) -> Path:
    """Where the checkpoint before ``path`` is kept: ``checkpoint.prev.pt``."""
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def hash_record(path: Path) -> Path:
    """Where a checkpoint's SHA-256 is recorded when it is written: ``<name>.sha256``."""
    return path.with_name(path.name + ".sha256")


def _save_atomic(obj, path: Path) -> None:
    """Write ``path`` whole (temporary file, then rename) with its SHA-256 beside it, keeping the
    one before it (both files move together)."""
    tmp = paths.temporary(path)
    try:
        torch.save(obj, tmp)
        hash_record(tmp).write_text(file_sha256(tmp) + "\n")
        if path.exists():
            os.replace(path, previous_checkpoint(path))
            if hash_record(path).exists():
                os.replace(hash_record(path), hash_record(previous_checkpoint(path)))
        os.replace(hash_record(tmp), hash_record(path))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        hash_record(tmp).unlink(missing_ok=True)


def remove_checkpoints(path: Path) -> None:
    """The run is done: its checkpoints and their hash records go."""
    for p in (path, previous_checkpoint(path)):
        p.unlink(missing_ok=True)
        hash_record(p).unlink(missing_ok=True)


CHECKPOINT_KEYS = ("fingerprint", "model", "optimizer", "rng", "state")


def _read_checkpoint(path: Path, device) -> dict:
    """A checkpoint verified against its recorded SHA-256, read as tensors and plain data only."""
    record = hash_record(path)
    verify_sha256(path, record.read_text().strip() if record.exists() else None, str(record))
    return torch.load(path, map_location=device, weights_only=True)


def load_checkpoint(path: Path, fp: str, device) -> tuple[dict | None, list[dict]]:
    """The newest readable checkpoint of this run (``path``, then the one before it), and a
    record of every file that could not be read or is not the file written (its SHA-256 differs
    from the one recorded beside it): each is moved aside as ``<name>.corrupt`` and logged with
    its path. (None, record) when training must start from step 0."""
    recovered = []
    for candidate in (path, previous_checkpoint(path)):
        if not candidate.exists():
            continue
        try:
            saved = _read_checkpoint(candidate, device)
            missing = [k for k in CHECKPOINT_KEYS if k not in saved]
            if missing:
                raise KeyError(f"no {missing} in it")
        except Exception as err:   # noqa: BLE001 -- whatever torch raises, the file is unusable
            aside = candidate.with_name(candidate.name + ".corrupt")
            os.replace(candidate, aside)
            hash_record(candidate).unlink(missing_ok=True)
            recovered.append(dict(file=str(candidate), moved_to=str(aside),
                                  error=f"{type(err).__name__}: {err}"[:300]))
            log.warning("checkpoint %s cannot be read (%s); moved aside to %s", candidate,
                        recovered[-1]["error"], aside)
            continue
        if saved["fingerprint"] != fp:
            log.info("ignoring checkpoint %s: it belongs to other settings", candidate)
            continue
        log.info("resumed from %s at step %d", candidate, saved["state"]["step"])
        return saved, recovered
    if recovered:
        log.warning("no readable checkpoint left: training restarts from step 0")
    return None, recovered


def _log_file() -> Path | None:
    """The file the root logger writes to (the rule's log under headwatch.jobs.log_to)."""
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        name = getattr(stream, "name", None) or getattr(handler, "baseFilename", None)
        if isinstance(name, str) and not getattr(stream, "closed", False) and Path(name).is_file():
            return Path(name)
    return None


FULL_EVAL_BATCH = 32
"""Windows per forward pass of the whole-validation evaluation (the result does not depend on it)."""


def validation_record(val_ids: np.ndarray, meta: dict, lengths: np.ndarray | None) -> dict:
    """Characters per token id and the validation text's hash and length for
    :func:`headwatch.charlm.tokenizer.bits_per_char`: from the vocabulary's split meta
    (``val_sha256``), or, for the corpus's characters (``lengths`` None), decoded from the ids
    with the corpus vocabulary (``meta["vocab"]``)."""
    if lengths is None:
        lengths = np.ones(meta["vocab_size"], dtype=np.int64)
        vocab = meta["vocab"]
        text = "".join(vocab[i] for i in val_ids.tolist())
        return dict(lengths=lengths, val_sha256=sha256(text), val_chars=len(text), train_chars_per_token=1.0)
    if "val_sha256" not in meta:
        raise KeyError("a vocabulary's ids need its split meta (val_sha256): load them with "
                       "headwatch.charlm.tokenizer.load_split_ids")
    return dict(lengths=np.asarray(lengths, dtype=np.int64), val_sha256=meta["val_sha256"],
                val_chars=meta["val_chars"], train_chars_per_token=meta["train_chars_per_token"])


@dataclass(frozen=True)
class RunOptions:
    """How a training job runs, not what it trains (none of these moves a result beyond the precision
    asked for): ``checkpoint``, the file to resume from and to save to every ``checkpoint_every``
    steps (it and the one before it are removed at the end; unreadable ones are moved aside, see
    :func:`load_checkpoint`; it holds the whole stack, and is resumed only by the same members with
    the same settings); ``device``; ``precision`` as asked (``sweep.precision``: bf16 on a device
    without bfloat16 matmuls trains in float32, :func:`resolve_precision`, said in the log);
    ``compile``: the training steps' forward and backward through ``torch.compile`` (``sweep.compile``;
    the evaluations stay eager); ``full_eval``: score the whole validation split in bits per character
    at the end (``val_full`` in the info); ``stop_after``: raise :class:`Interrupted` right after the
    checkpoint of that step (to test resuming)."""
    checkpoint: str | Path | None = None
    device: str | torch.device = "cpu"
    precision: str = "float32"
    compile: bool = False
    full_eval: bool = True
    stop_after: int | None = None


def train(ids: np.ndarray, meta: dict, model_cfg: dict, seed: int, train_cfg: TrainSettings | dict,
          run: RunOptions = RunOptions(), lengths: np.ndarray | None = None,
          heads: HeadsSettings | dict | None = None):
    """Train one model; return (model, metrics DataFrame, info dict, heads DataFrame): a stack of one
    (:func:`train_stack`, whose arguments these are)."""
    return train_stack(ids, meta, [dict(model=model_cfg, seed=seed)], train_cfg, run, lengths, heads)[0]


def train_stack(ids: np.ndarray, meta: dict, members: list[dict], train_cfg: TrainSettings | dict,
                run: RunOptions = RunOptions(), lengths: np.ndarray | None = None,
                heads: HeadsSettings | dict | None = None) -> list[tuple]:
    """Train several models in one process and one optimizer step, their weights stacked
    (:class:`~headwatch.charlm.stack.StackedCharLM`); return, per member, (model, metrics DataFrame,
    info dict, heads DataFrame) — what training it alone returns, equal to float rounding.

    ``members``: ``[{"model": model settings, "seed": seed}, …]`` (and ``val_full``: this member's
    ``full_eval``, where it differs from the stack's) whose parameters have the same
    shapes (:func:`headwatch.charlm.stack.stack_key`): the seeds of a shape, or the head counts of one
    width. Each trains on its own seed's windows (data order), with its own balancing weight, its
    own gradient clipping and its own metrics; they share the training settings, the step, the
    evaluation windows and the clock (``tokens_per_s`` of a member: its tokens over the stack's
    seconds; the info's ``stack`` says how many models shared them).

    ``ids``/``meta``: the corpus's character ids (:func:`headwatch.charlm.corpus.load_ids`) or a
    vocabulary's (:func:`headwatch.charlm.tokenizer.load_split_ids`, with ``lengths`` =
    :func:`~headwatch.charlm.tokenizer.token_lengths` of its tokenizer).
    ``train_cfg``: the job's training settings (:class:`TrainSettings`, or its mapping); ``run``: how
    the job runs (:class:`RunOptions`: checkpoint, device, precision, compile, the final evaluation).

    ``heads``: the ``sweep.heads`` settings (:class:`HeadsSettings` or its mapping; protocol §7b): at
    every evaluation step every head's scores on a fixed probe (:mod:`headwatch.sweep.heads`) are
    recorded (the heads DataFrame, one row per step and head; empty without them) and the metrics
    rows get the in-context score (``in_context``). Both are kept in the checkpoint, so a resumed run
    ends with the same records.

    The info records the precision and compilation: ``precision_requested``, ``precision`` (what was
    computed), ``precision_fallback`` (why they differ, or None) and ``compiled``.
    """
    options = run
    run = _setup(ids, meta, members, train_cfg, options.checkpoint, options.device, options.precision, lengths,
                 heads, options.compile)
    s, trainer = run.s, run.trainer
    every = (s.eval_every,) + ((s.checkpoint_every,) if run.ckpt else ())
    for done in trainer.train(run.first, s.steps, run.batch, every):    # each reads the losses (the one host read)
        if done % s.eval_every == 0 or done == s.steps:
            _evaluation(run, done)
        if run.ckpt and done % s.checkpoint_every == 0 and done < s.steps:
            _checkpoint(run, done, options.stop_after)
    return _finish(run, ids, meta, lengths, options.full_eval)


@dataclass
class _Run:
    """One stack's settings, data and trainer (:class:`~headwatch.charlm.loop.Trainer`: the stack, its
    optimizer and the training losses on the device), and its running state (``state``: what a
    checkpoint keeps besides the weights and the optimizer, plain data, one entry per member where
    the members differ)."""

    s: TrainSettings
    members: list[dict]
    seeds: list[int]
    specs: list[ModelSpec]
    trainer: Trainer
    device: torch.device
    precision: str                # the precision computed in (the one asked for is in the fingerprint)
    precision_requested: str
    fallback: str | None          # why they differ
    record: dict
    data: dict                    # train_ids, val_ids, and the fixed windows: val_offsets, sample_offsets
    offsets: torch.Tensor         # [steps, M, batch]: every step's windows, on the device
    views: list[CharLM]           # each member as a CharLM reading the stack's weights (evaluations)
    params: list[int]
    fps: list[str]
    fp: str
    state: dict
    ckpt: Path | None
    resumed_from: int
    recovered: list
    attempt_log: Path | None
    earlier_logs: list
    first: int
    probe: object = None          # headwatch.sweep.heads.Probe when the heads are recorded
    adapters: list | None = None

    @property
    def M(self) -> int:
        return len(self.members)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s windows of every member (its own seed's): inputs and targets ``[M, batch, T]``."""
        x, y = windows(self.data["train_ids"], self.offsets[step - self.first].flatten(), self.specs[0].context)
        return x.view(self.M, self.s.batch, -1), y.view(self.M, self.s.batch, -1)


def member_fingerprint(meta: dict, model_cfg: dict, seed: int, s: TrainSettings, precision: str,
                       heads: HeadsSettings | None, compile: bool) -> str:
    """What defines one member's run (its checkpoint's part): model, seed, training, precision asked,
    corpus, vocabulary, the heads' probe, compilation."""
    return fingerprint(model=model_cfg, seed=seed, train=s.as_dict(), precision=precision,
                       corpus=meta.get("sha256"), vocab=meta["vocab_size"], **({"heads": heads.probe()} if heads else {}),
                       **({"compile": True} if compile else {}))


CHECKPOINT_FORMAT = 2
"""The checkpoints' layout: 2, the stack's parameters as two rows (:mod:`headwatch.charlm.stack`) and the
fine course's state. A checkpoint of another layout belongs to other settings (its run starts again)."""


def _setup(ids, meta, members, train_cfg, checkpoint, device, precision, lengths, heads, compile=False) -> _Run:
    """Settings, data on the device, the stack and its trainer, resumed from the newest matching
    checkpoint if there is one; every step's windows on the device."""
    if not members:
        raise ValueError("train_stack needs at least one member")
    s = TrainSettings.of(train_cfg)
    heads = HeadsSettings.of(heads) if heads else None
    device = torch.device(device)
    specs = [ModelSpec.from_settings(meta["vocab_size"], m["model"]) for m in members]
    seeds = [int(m["seed"]) for m in members]
    context = specs[0].context
    n_train = meta["n_train"]
    record = validation_record(np.asarray(ids[n_train:]), meta, lengths)   # before any step: fail early
    whole = torch.as_tensor(ids.astype(np.int64), device=device)
    fixed = s.eval_batches * s.batch         # the validation windows, and as many of the training split
    data = dict(train_ids=whole[:n_train], val_ids=whole[n_train:],
                val_offsets=torch.as_tensor(eval_offsets(len(whole) - n_train, fixed, context), device=device),
                sample_offsets=torch.as_tensor(eval_offsets(n_train, fixed, context), device=device))
    requested = precision
    precision, fallback = resolve_precision(device, requested)
    if fallback:
        log.warning("%s", fallback)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    # Weight of each member's load-balancing loss (mean of its expert layers' E·Σ f_i·P_i); 0 = none.
    balance = [float(m["model"].get("balance", TRAINING_OPTIONS["balance"])) for m in members]
    for b, spec in zip(balance, specs):
        if b and not spec.experts:
            raise ValueError(f"balance {b} needs experts (model {spec.to_dict()})")
    stack = StackedCharLM([make_model(meta["vocab_size"], m["model"], seed) for m, seed in zip(members, seeds)])
    trainer = Trainer(stack.to(device), Schedule(s.lr, s.min_lr, s.warmup, s.steps), weight_decay=s.weight_decay, betas=s.betas, grad_clip=s.grad_clip, balance=balance,
                      amp=precision_context(device, precision), compile=compile,
                      labels=[f"model {spec.to_dict()}, seed {seed}" for spec, seed in zip(specs, seeds)])
    params = [spec.param_counts()["total"] for spec in specs]
    fps = [member_fingerprint(meta, m["model"], seed, s, requested, heads, compile) for m, seed in zip(members, seeds)]
    fp = fingerprint(checkpoint=CHECKPOINT_FORMAT, members=fps)
    M = len(members)
    state = dict(step=0, rows=[[] for _ in range(M)], loss_sum=[0.0] * M, loss_n=0, seconds=0.0, train_seconds=0.0,
                 eval_seconds=0.0, heads=[[] for _ in range(M)])
    resumed_from = 0
    ckpt = Path(checkpoint) if checkpoint else None
    saved, recovered = load_checkpoint(ckpt, fp, device) if ckpt else (None, [])
    attempt_log, earlier_logs = keep_attempt_log(_log_file(), copy=False) if ckpt else (None, [])
    if saved is not None:
        stack.load_state_dict(saved["model"])
        trainer.opt.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
        if saved.get("cuda_rng") is not None and device.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"], device)
        state = saved["state"]
        resumed_from = state["step"]
        trainer.reset(state["loss_sum"], state["loss_n"], state["seconds"])
    views = [stack.member(i) for i in range(M)]
    probe = adapters = None
    if heads:
        probe = make_probe(ids[n_train:], meta["vocab_size"], context, heads).to(device)
        adapters = [Adapter(v) for v in views]
    for m, spec, seed, n in zip(members, specs, seeds, params):
        log.info("model %s seed %d: %d parameters, device %s, precision %s%s, threads %d%s",
                 spec.to_dict(), seed, n, device, precision,
                 f" (asked: {requested})" if precision != requested else "", torch.get_num_threads(),
                 ", training steps compiled (torch.compile)" if compile else "")
    if M > 1:
        log.info("%d models trained in one stack: one optimizer step trains them all", M)
    stack.train()
    first = state["step"]
    # No host synchronisation inside a step: every step's windows are on the device before the
    # first step; the trainer adds each step's losses on the device, read only where a metrics
    # row or a checkpoint is written. The clip norms and the balancing losses are never read.
    offsets = torch.as_tensor(np.array([[batch_offsets(seed, k, n_train, s.batch, context) for seed in seeds]
                                        for k in range(first, s.steps)], dtype=np.int64)
                              .reshape(-1, M, s.batch), device=device)
    return _Run(s=s, members=members, seeds=seeds, specs=specs, trainer=trainer, device=device, precision=precision,
                precision_requested=requested, fallback=fallback, record=record, data=data, offsets=offsets,
                views=views, params=params, fps=fps, fp=fp, state=state, ckpt=ckpt, resumed_from=resumed_from,
                recovered=recovered, attempt_log=attempt_log, earlier_logs=earlier_logs, first=first, probe=probe,
                adapters=adapters)


@torch.no_grad()
def _evaluation(run: _Run, done: int) -> None:
    """Every member's metrics row of step ``done``: the validation loss and the loss on the fixed sample
    of the training split (one pass of the stack each), the training loss since the last row; with a
    probe, the in-context score and every head's scores (§7b). The accumulators start again; the
    evaluation's time is kept apart from the steps' (``eval_seconds``)."""
    s, state, trainer, data = run.s, run.state, run.trainer, run.data
    sums = trainer.read(done)
    started = time.perf_counter()
    context = run.specs[0].context
    fixed = len(data["val_offsets"]) * context
    losses = [trainer.loss_sums(*windows(data[split], data[f"{part}_offsets"], context), s.batch) / fixed
              for split, part in (("val_ids", "val"), ("train_ids", "sample"))]
    vals, samples = torch.stack(losses).tolist()
    seconds = trainer.seconds
    for i in range(run.M):
        row = dict(step=done, train_loss=sums[i] / trainer.steps_since, train_sample_loss=samples[i],
                   val_loss=vals[i], tokens_per_s=trainer.steps_since * s.batch * context / max(seconds, 1e-9))
        if run.probe is not None:    # §7b: every head's scores and the in-context score, on the fixed probe
            with trainer.amp:
                row["in_context"] = in_context_score(run.views[i], run.probe)
                state["heads"][i] += records(done, probe_scores(run.views[i], run.probe, run.adapters[i]))
        assert_finite(list(row.values()), f"metrics at step {done} (seed {run.seeds[i]})")
        state["rows"][i].append(row)
        log.info("step %d%s: train %.4f (fixed sample %.4f) val %.4f (%.0f tokens/s)", done,
                 f" {run.specs[i].to_dict()} seed {run.seeds[i]}" if run.M > 1 else "", row["train_loss"],
                 row["train_sample_loss"], row["val_loss"], row["tokens_per_s"])
    state["train_seconds"] += seconds
    trainer.reset()
    state["eval_seconds"] += time.perf_counter() - started


def _checkpoint(run: _Run, done: int, stop_after: int | None) -> None:
    """Write the checkpoint of step ``done``; raise :class:`Interrupted` if asked to stop there."""
    trainer = run.trainer
    run.state.update(step=done, loss_sum=trainer.read(done), loss_n=trainer.steps_since, seconds=trainer.seconds)
    _save_atomic(dict(fingerprint=run.fp, model=trainer.stack.state_dict(), optimizer=trainer.opt.state_dict(),
                      rng=torch.get_rng_state(),
                      cuda_rng=torch.cuda.get_rng_state(run.device) if run.device.type == "cuda" else None,
                      state=run.state), run.ckpt)
    if stop_after is not None and done >= stop_after:
        raise Interrupted(f"stopped after the checkpoint of step {done}")


METRICS = ["step", "train_loss", "train_sample_loss", "val_loss", "tokens_per_s"]
"""The columns of a run's metrics table (``in_context`` after them with the heads' probe)."""


def course_record(metrics: pd.DataFrame) -> dict:
    """What a run's info says of its course: the final validation loss, the best one and its step (the
    first evaluation that reaches it), the final loss on the fixed training sample and the final
    train–validation gap (validation minus fixed sample; the training loss since the last row moves
    with the weights, the sample's does not)."""
    best = metrics.loc[metrics["val_loss"].idxmin()]
    last = metrics.iloc[-1]
    out = dict(final_val_loss=float(last["val_loss"]), best_val_loss=float(best["val_loss"]),
               best_val_step=int(best["step"]))
    if "train_sample_loss" in metrics:
        out.update(final_train_sample_loss=float(last["train_sample_loss"]),
                   final_train_val_gap=float(last["val_loss"] - last["train_sample_loss"]))
    return out


def _finish(run: _Run, ids, meta: dict, lengths, full_eval: bool) -> list[tuple]:
    """Each member's model, tables and info (the whole validation split scored if asked); the
    checkpoints and this attempt's extra log name removed."""
    s, record, amp, state = run.s, run.record, run.trainer.amp, run.state
    out = []
    for i, (member, spec, view) in enumerate(zip(run.members, run.specs, run.views)):
        metrics = pd.DataFrame(state["rows"][i], columns=METRICS + (["in_context"] if run.probe is not None else []))
        full = None
        if member.get("val_full", full_eval):
            full = bits_per_char(view, np.asarray(ids[meta["n_train"]:]), record["lengths"],
                                 batch=FULL_EVAL_BATCH, amp=amp)
            if full["val_chars"] != record["val_chars"]:
                raise RuntimeError(f"the validation ids hold {full['val_chars']} characters, their record says "
                                   f"{record['val_chars']}")
            full["val_sha256"] = record["val_sha256"]
            log.info("whole validation split: %.4f bits/char (%d tokens, %d characters, %.1f characters per "
                     "window)", full["bits_per_char"], full["val_tokens"], full["val_chars"], full["chars_per_window"])
        info = dict(params=run.params[i], fingerprint=run.fps[i], resumed_from=run.resumed_from,
                    device=str(run.device), precision=run.precision, precision_requested=run.precision_requested,
                    precision_fallback=run.fallback, compiled=run.trainer.compiled, threads=torch.get_num_threads(),
                    **course_record(metrics), val_full=full,
                    train_seconds=state["train_seconds"], eval_seconds=state["eval_seconds"],
                    eval_share=state["eval_seconds"] / max(state["train_seconds"], 1e-9),
                    vocab=meta["vocab"] if lengths is not None else "char", vocab_size=meta["vocab_size"],
                    train_chars_per_token=record["train_chars_per_token"], **peak_memory(run.device))
        if run.M > 1:        # the models that shared this one's steps and clock
            info["stack"] = dict(models=run.M, member=i, fingerprint=run.fp)
        model_cfg = member["model"]
        if set(model_cfg) & {*OPTIONS, *TRAINING_OPTIONS}:   # study options: record what the studies read
            parts = spec.param_counts()
            info.update(params_active=parts["total_active"], non_embedding=parts["non_embedding"],
                        balance=float(model_cfg.get("balance", TRAINING_OPTIONS["balance"])),
                        expert_shares=expert_shares(view, run.data["val_ids"], run.data["val_offsets"], s.batch,
                                                    spec.context, amp))
        if run.ckpt:
            info.update(checkpoints_moved_aside=run.recovered, earlier_attempt_logs=run.earlier_logs)
        out.append((run.trainer.stack.copy_of(i), metrics, info, heads_frame(state["heads"][i])))
    if run.ckpt:
        remove_checkpoints(run.ckpt)
    if run.attempt_log is not None:    # this attempt succeeded: the rule's log is its log
        run.attempt_log.unlink(missing_ok=True)
    return out


def save_trained(model: CharLM, path, meta: dict, info: dict, extra: dict | None = None) -> str:
    """Weights with everything needed to rebuild and read the model (tensors and plain data only,
    so that it loads with ``weights_only=True``); returns the file's SHA-256, which the run's
    record keeps (``model_sha256`` in its metrics' note) for :func:`load_trained`."""
    record = json.loads(json.dumps(dict(spec=model.spec.to_dict(), vocab=meta["vocab"], info=info,
                                        **(extra or {})), default=_plain))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(dict(record, state_dict=model.state_dict()), path)
    return file_sha256(path)


def _plain(x):
    """numpy scalars and arrays in a record, as Python numbers and lists."""
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} in a model's record is not plain data")


def finished_run(folder, fp: str) -> bool:
    """Whether ``folder`` holds a finished run of fingerprint ``fp`` (:func:`member_fingerprint`):
    its metrics, heads and model, the model's SHA-256 the one its metrics recorded, and its course
    recorded as this code records it (the fixed training sample's loss: a run trained before it is
    trained again). A stack that a run joins (a seed or a shape added beside it) takes such a run as
    it is instead of training it again: what a run computes does not depend on the models beside it
    (tests/test_stack.py; with dropout, the masks are its stack's draws: the same model in
    distribution)."""
    from ..tableio import read_note

    folder = Path(folder)
    files = [folder / f for f in ("metrics.parquet", "heads.parquet", "model.pt")]
    if not all(f.is_file() for f in files):
        return False
    try:
        note = read_note(files[0])
    except Exception:  # noqa: BLE001 -- a table that cannot be read is not a finished run
        return False
    return note.get("fingerprint") == fp and bool(note.get("model_sha256")) and "final_train_val_gap" in note \
        and file_sha256(files[2]) == note["model_sha256"]


RUN_RECORD = "metrics.parquet"
"""The file beside a trained ``model.pt`` whose note records its SHA-256 (``model_sha256``)."""


def load_trained(path, device="cpu", sha256: str | None = None) -> tuple[CharLM, dict]:
    """A trained sweep model saved by :func:`save_trained` (``model.pt``), in eval mode, and its
    record (vocab, info, ...), read only if the file's SHA-256 is ``sha256`` (default: the one its
    run recorded, ``model_sha256`` in the note of ``metrics.parquet`` beside it), and then as
    tensors and plain data only. (Studied models load with :func:`headwatch.model.load.load_model`.)"""
    path = Path(path)
    record = f"the argument sha256 of load_trained({str(path)!r})"
    if sha256 is None:
        run = path.with_name(RUN_RECORD)
        sha256 = read_note(run).get("model_sha256") if run.exists() else None
        record = f"{run} (model_sha256)"
    verify_sha256(path, sha256, record)
    saved = torch.load(path, map_location=device, weights_only=True)
    model = CharLM(ModelSpec(**saved["spec"])).to(device)
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved
