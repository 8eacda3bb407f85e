"""Training one model of the induction sweep on its task, evaluated as it learns (protocol §7c).

The model is the sweep's :class:`~headwatch.charlm.model.CharLM` with two layers and rotary
positions (§5f says why rotary). Every step draws a fresh batch of the task's rows
(:mod:`headwatch.induction.tasks`, stream ``[seed, task, step]``: no row is seen twice), AdamW with
a linear warm-up and cosine decay to the cap ``steps`` (:func:`headwatch.sweep.train.lr_at`). At
step 0 (before any update) and every ``eval_every`` steps, on fixed evaluation rows of the task
(stream ``[seed, task, EVAL]``):

* ``loss``: the mean next-token loss over the predictable positions (nats), and ``reference`` the
  mean loss of the task's best predictor on the same positions (the Bayes-optimal in-context
  bigram for ``markov``, the chain's own for its control, ``ln V`` where nothing is better), and
  ``gap`` = loss − reference;
* every head's ``prev`` (§4's cells, ``A[r, r−1]``) and ``induction`` score on the task's **probe**
  — the evaluation rows of the task itself, for the task and for its control alike, so that an
  induction head would show on both —: the attention each row puts on the successors of the
  earlier occurrences of its token, ``Σ_{s < r, x_s = x_r} A[r, s + 1]``, over the probe's
  predictable rows. On repeated distinct tokens this is §4's induction cell ``A[r, r − T + 1]``
  itself (the earlier copy is the only earlier occurrence); on a Markov chain it is the
  statistical induction head's pattern (Edelman et al. 2024).

A run stops ``settle`` steps after the evaluation at which it has both changed phase and grown an
induction head (protocol §7c's events), else at the cap ``steps``, where an event it has not had is
censored: every run is counted, the slowest too. At its end (:func:`edge_effects`), path patching (§5e) from the layer-0 head with the highest
``prev`` into the layer-1 head with the highest ``induction``, through that head's query, key and
value, on clean prompts ``a + a[:-1]`` of the task's vocabulary against corrupted ``b + a[:-1]``
(§5f's prompts and metric): the circuit's edge runs through the key.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..charlm.model import CharLM
from ..charlm.stack import StackedCharLM
from ..model.arch import Adapter
from ..model.interventions import attention_maps
from ..scores.heads import prev_cells
from ..settings.induction import InductionSettings, TaskSettings, model_spec, shape_of, task_of, vocab_of
from ..sweep.train import lr_at
from . import tasks

EVAL_STREAM, PROBE_STREAM = 1_000_001, 1_000_002
"""The random streams of the evaluation rows and the path-patching prompts (a training step's is its
number, below both)."""


def rows(task: str, t: TaskSettings, context: int, n: int, seed, run_seed: int) -> tasks.Batch:
    """``n`` rows of ``task`` drawn by ``seed`` (the run's ``run_seed`` fixes the control's chain)."""
    if task in ("repeat", "repeat_control"):
        return tasks.repeat_rows(n, context, t.vocab, t.half, seed, repeat=task == "repeat")
    if task in ("markov", "markov_control"):
        return tasks.markov_rows(n, context, t.states, t.alpha, seed,
                                 fixed_seed=run_seed if task == "markov_control" else None)
    raise ValueError(f"unknown task {task!r}; known: {list(tasks.ALL_TASKS)}")


def successor_mask(ids: torch.Tensor, rows_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cols ``[n, T, T]``: 1 at ``[r, s + 1]`` for every ``s < r`` with ``ids[s] = ids[r]``; keep ``[n, T]``:
    the rows of ``rows_mask`` (bool) with at least one earlier occurrence of their token)."""
    n, T = ids.shape
    same = ids.unsqueeze(2) == ids.unsqueeze(1)                               # [n, r, s]
    earlier = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril(-1)   # s < r
    cols = torch.zeros(n, T, T)
    cols[:, :, 1:] = (same & earlier)[:, :, :-1].float()                       # mark column s + 1
    return cols, rows_mask & (same & earlier).any(dim=2)


def successor_cells(A: torch.Tensor, cols: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Each kept row's attention on the successors of the earlier occurrences of its token,
    ``Σ_{s < r, ids[s] = ids[r]} A[..., r, s + 1]`` (:func:`successor_mask`): ``[rows, layers, heads]``."""
    cells = (A * cols[:, None, None]).sum(dim=-1)                              # [n, L, H, r]
    return cells.permute(0, 3, 1, 2)[keep]


def uniform_induction(probe: tasks.Batch) -> float:
    """The ``induction`` score of a head that attends uniformly to every position it may see, on the
    probe's rows: the level an induction head must rise above (one successor cell on repeated
    distinct tokens, about 1/(r + 1); several on a Markov chain, whose tokens recur)."""
    ids = torch.as_tensor(probe.ids[:, :-1])
    T = ids.shape[1]
    A = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1).unsqueeze(1)
    cols, keep = successor_mask(ids, torch.as_tensor(probe.predictable))
    return float(successor_cells(A.expand(len(ids), 1, 1, T, T), cols, keep).mean())


@torch.no_grad()
def head_scores(model: CharLM, probe: tasks.Batch, adapter: Adapter, mask=None) -> dict[str, np.ndarray]:
    """Every head's ``prev`` and ``induction`` score on the probe rows ([layers, heads] each); ``mask``:
    the probe's :func:`successor_mask`, when made once for many calls."""
    ids = torch.as_tensor(probe.ids[:, :-1])
    cols, keep = mask if mask is not None else successor_mask(ids, torch.as_tensor(probe.predictable))
    A = attention_maps(model, ids, adapter)                                     # [n, L, H, T, T]
    prev = prev_cells(A).mean(dim=(0, 3))
    induction = successor_cells(A, cols.to(A.device), keep.to(A.device)).mean(dim=0)
    return dict(prev=prev.cpu().numpy(), induction=induction.cpu().numpy())


@torch.no_grad()
def predictable_loss(model: CharLM, batch: tasks.Batch) -> float:
    """The mean next-token loss over the batch's predictable positions (nats)."""
    device = next(model.parameters()).device
    ids = torch.as_tensor(batch.ids, device=device)
    logits = model(ids[:, :-1]).float()
    losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    return float(losses[torch.as_tensor(batch.predictable, device=device)].mean())


@dataclass
class Run:
    """One trained model: its evaluations (one row per step), its heads' scores at every
    evaluation (one row per step and head), its final edge effects, its CPU seconds (its share of
    its stack's), its parameters, the step it stopped at and why (``events``: it changed phase and
    grew an induction head ``settle`` steps before; ``cap``: it reached ``steps``)."""
    curve: pd.DataFrame
    heads: pd.DataFrame
    edges: dict
    seconds: float
    params: int
    stop_step: int = 0
    stop_reason: str = "cap"


def train_run(task: str, width: int, heads: int, seed: int, s: InductionSettings) -> Run:
    """Train the model of ``width`` and ``heads`` on ``task`` with ``seed`` (module docstring): a stack
    of one (:func:`train_runs`)."""
    return train_runs(task, width, heads, [seed], s)[0]


def train_runs(task: str, width: int, heads: int, seeds, s: InductionSettings, device: str | torch.device = "cpu",
               progress=None) -> list[Run]:
    """Train the model of ``width`` and ``heads`` on ``task`` once per seed, every seed in one stack
    (:class:`~headwatch.charlm.stack.StackedCharLM`: one optimizer step trains them all, each as it
    would train alone), each on its own rows; evaluated every ``eval_every`` steps model by model
    (module docstring). A run stops ``settle`` steps after the evaluation at which it has both
    changed phase and grown an induction head (:func:`headwatch.induction.analysis.run_events`, the
    summary's own definitions), else at the cap (``steps``; a control's ``control_steps``): it leaves the stack there
    (:meth:`~headwatch.charlm.stack.StackedCharLM.subset`) and the others train on, each still as
    alone. ``progress(step)``: called after each step."""
    from .analysis import run_events

    t = s.task(task_of(task))
    spec = model_spec(task, width, heads, s)
    vocab = spec.vocab_size
    device = torch.device(device)
    seeds = [int(x) for x in seeds]
    cap = s.steps_of(task)
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(CharLM(spec))
    stack = StackedCharLM(models).to(device)
    task_id = tasks.ALL_TASKS.index(task)
    per = []
    for seed in seeds:
        evaluation = rows(task_of(task), t, s.context, s.eval_rows, [seed, task_id, EVAL_STREAM], seed)
        own = evaluation if task_of(task) == task else rows(task, t, s.context, s.eval_rows,
                                                                [seed, task_id, EVAL_STREAM], seed)
        per.append(dict(evaluation=evaluation, own=own,
                        reference=float(evaluation.reference[evaluation.predictable].mean()),
                        unigram=float(evaluation.unigram[evaluation.predictable].mean()),
                        uniform=uniform_induction(evaluation),
                        mask=successor_mask(torch.as_tensor(evaluation.ids[:, :-1]),
                                            torch.as_tensor(evaluation.predictable)),
                        curve=[], records=[], seconds=0.0, stop_at=None, final=None))
    decay, rest = stack.decay_groups()
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=s.weight_decay), dict(params=rest, weight_decay=0.0)],
                            lr=s.lr, betas=(0.9, 0.95), fused=True)
    live = list(range(len(seeds)))          # the members still training, in the stack's order
    views = [stack.member(j) for j in range(len(live))]
    adapters = [Adapter(v) for v in views]
    clock = [time.process_time()]

    def charge():
        """The CPU seconds since the last charge, shared by the members that trained in them."""
        now = time.process_time()
        for i in live:
            per[i]["seconds"] += (now - clock[0]) / len(live)
        clock[0] = now

    def evaluate(step: int, train_losses: list[float]):
        for j, i in enumerate(live):
            view, adapter, p = views[j], adapters[j], per[i]
            loss = predictable_loss(view, p["evaluation"])
            own_loss = loss if p["own"] is p["evaluation"] else predictable_loss(view, p["own"])
            sc = head_scores(view, p["evaluation"], adapter, p["mask"])
            p["curve"].append(dict(step=step, loss=loss, reference=p["reference"], unigram=p["unigram"],
                                   gap=loss - p["reference"], own_loss=own_loss, train_loss=train_losses[j],
                                   best_prev=float(sc["prev"].max()), best_induction=float(sc["induction"].max()),
                                   best_induction_excess=float(sc["induction"].max()) - p["uniform"]))
            for l in range(spec.layers):
                for h in range(spec.heads):
                    p["records"].append(dict(step=step, layer=l, head=h, prev=float(sc["prev"][l, h]),
                                             induction=float(sc["induction"][l, h]),
                                             induction_excess=float(sc["induction"][l, h]) - p["uniform"]))
            if p["stop_at"] is None:
                ev = run_events(pd.DataFrame(p["curve"]), pd.DataFrame(p["records"]), s.threshold, s.margin)
                if ev["phase_step"] is not None and ev["induction_step"] is not None:
                    p["stop_at"] = step + s.settle

    def batch_at(step: int) -> torch.Tensor:
        return torch.as_tensor(np.stack([rows(task, t, s.context, s.batch, [seeds[i], task_id, step], seeds[i]).ids
                                         for i in live]), device=device)

    def batch_losses(ids: torch.Tensor) -> torch.Tensor:
        logits = stack(ids[..., :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[..., 1:].reshape(-1),
                                                 reduction="none").view(len(live), -1).mean(dim=1)

    stack.train()
    with torch.no_grad():        # the untrained models; their training loss on the first batch, before any update
        evaluate(0, batch_losses(batch_at(0)).tolist())
    for step in range(cap):
        ids = batch_at(step)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, s.lr, s.min_lr, s.warmup, cap)
        losses = batch_losses(ids)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()      # each model's parameters get their own loss's gradient only
        opt.step()
        done = step + 1
        if done % s.eval_every == 0 or done == cap:
            evaluate(done, losses.detach().tolist())
            charge()
            leaving = [j for j, i in enumerate(live) if done == cap
                       or (per[i]["stop_at"] is not None and done >= per[i]["stop_at"])]
            for j in leaving:
                i = live[j]
                per[i]["final"] = (stack.copy_of(j), done, "events" if per[i]["stop_at"] is not None else "cap")
            if leaving:
                staying = [j for j in range(len(live)) if j not in leaving]
                live = [live[j] for j in staying]
                if not live:
                    break
                stack, opt = stack.subset(staying, opt)
                views = [stack.member(j) for j in range(len(live))]
                adapters = [Adapter(v) for v in views]
        if progress is not None:
            progress(done)
    out = []
    for seed, p in zip(seeds, per):
        model, stop, reason = p["final"]
        adapter = Adapter(model)
        records = pd.DataFrame(p["records"])
        edges = edge_effects(model, adapter, records, t, task, seed, s)
        out.append(Run(pd.DataFrame(p["curve"]), records, edges, p["seconds"],
                       sum(x.numel() for x in model.parameters()), stop, reason))
    return out


def edge_effects(model: CharLM, adapter: Adapter, records: pd.DataFrame, t: TaskSettings, task: str, seed: int,
                 s: InductionSettings) -> dict:
    """Path patching (§5e) from the layer-0 head of the highest final ``prev`` into the layer-1 head
    of the highest final ``induction``, through its q, k and v: each edge's effect (patched −
    corrupted mean logit difference, correct − other token) on §5f's prompts in the task's vocabulary."""
    from ..circuits.known import induction_prompts
    from ..circuits.path_patching import Edge, PathPatcher
    from ..patching.patcher import Patcher

    last = records[records.step == records.step.max()]
    sender = last[last.layer == 0].sort_values(["prev", "head"], ascending=[False, True]).iloc[0]
    receiver = last[last.layer == 1].sort_values(["induction", "head"], ascending=[False, True]).iloc[0]
    vocab = vocab_of(task, t)
    half = min(t.half[1] if task.startswith("repeat") else s.context // 2, vocab, s.context // 2)
    clean, corrupted, correct, other = induction_prompts(vocab, s.edge_prompts, half, seed + PROBE_STREAM)
    patcher = Patcher(model, adapter, clean, corrupted, correct, other, batch=s.edge_prompts, extra_sites=("mlp_out",))
    pp = PathPatcher(patcher)
    sh, rh = (int(sender["layer"]), int(sender["head"])), (int(receiver["layer"]), int(receiver["head"]))
    edges = [Edge(*sh, *rh, x) for x in ("q", "k", "v")]
    ld = pp.run(edges).double().mean(dim=1).numpy()
    effects = {f"edge_{e.input}": float(v - patcher.corrupted_mean) for e, v in zip(edges, ld)}
    return dict(sender=f"L{sh[0]}H{sh[1]}", receiver=f"L{rh[0]}H{rh[1]}", clean_ld=float(patcher.clean_mean),
                corrupted_ld=float(patcher.corrupted_mean), **effects,
                key_strongest=bool(abs(effects["edge_k"]) > max(abs(effects["edge_q"]), abs(effects["edge_v"]))))


def train_job(job: dict, log=None, device=None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """Rule induction_train: one shape on one task (or its control), every seed of the job's params
    (:func:`headwatch.settings.induction.job_params`) in one stack: (curves, every head's records,
    edges — each labelled with its seed —, the note)."""
    task, width, heads, seeds = job["task"], int(job["width"]), int(job["heads"]), [int(x) for x in job["seeds"]]
    settings = InductionSettings.from_config(dict({k: job[k] for k in job if k not in ("task", "width", "heads",
                                                                                       "task_settings", "seeds")},
                                                  tasks={task_of(task): job["task_settings"]}, run=[task],
                                                  seeds=seeds, control_seeds=seeds))
    curves, records, edges, seconds = [], [], [], {}
    trained = train_runs(task, width, heads, seeds, settings, device=device or "cpu")
    for seed, r in zip(seeds, trained):
        curves.append(r.curve.assign(seed=seed))
        records.append(r.heads.assign(seed=seed))
        edges.append(dict(seed=seed, params=r.params, seconds=round(r.seconds, 2), stop_step=r.stop_step,
                          stop_reason=r.stop_reason, **r.edges))
        seconds[seed] = round(r.seconds, 2)
        if log is not None:
            c = r.curve
            log.info("%s %s seed %d: stopped at step %d (%s), %.1f CPU s; loss on the predictable part %.3f -> %.3f "
                     "(unordered %.3f, best %.3f); best induction %.3f above uniform; key edge %+.3f", task,
                     shape_of(width, heads), seed, r.stop_step, r.stop_reason, r.seconds, c.loss.iloc[0],
                     c.loss.iloc[-1], c.unigram.iloc[-1], c.reference.iloc[-1], c.best_induction_excess.iloc[-1],
                     r.edges["edge_k"])
    note = dict(job=job, model=dict(width=width, heads=heads, layers=2, context=settings.context, rotary=True,
                                    ffn_mult=settings.ffn_mult),
                seconds=seconds, seconds_note="CPU seconds of the stack's training and evaluations, each interval "
                "shared by the seeds that trained in it (the seeds train in one stack until each stops)",
                stop="a run stops `settle` steps after it has both changed phase and grown an induction head "
                     "(stop_reason events), else at the cap `steps` (cap), where an event it has not had is censored",
                loss="mean next-token loss (nats) over the predictable positions of the task's evaluation rows "
                     "(the task's, for its control too); reference: its best predictor's; unigram: the best "
                     "predictor's without the context's order",
                induction="attention on the successors of the earlier occurrences of each row's token (§4's "
                          "induction cell on repeated distinct tokens); induction_excess: minus uniform attention's")
    order = ["seed", "step"]
    curves = pd.concat(curves, ignore_index=True)
    records = pd.concat(records, ignore_index=True)
    return (curves[order + [c for c in curves.columns if c not in order]],
            records[order + [c for c in records.columns if c not in order]], pd.DataFrame(edges), note)
