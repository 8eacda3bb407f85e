"""Training one model of the induction sweep on its task, evaluated as it learns (protocol §7c).

The model is the sweep's :class:`~headwatch.charlm.model.CharLM` with two layers and rotary
positions (§5f says why rotary). Every step draws a fresh batch of the task's rows
(:mod:`headwatch.induction.tasks`, stream ``[seed, task, step]``: no row is seen twice), AdamW with
a linear warm-up and cosine decay to the cap ``steps`` (:func:`headwatch.charlm.loop.lr_at`; the sweep's
loop, :class:`~headwatch.charlm.loop.Trainer`, with the betas ``betas`` and no clipping). At
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

from ..charlm.loop import Schedule, Trainer
from ..charlm.model import CharLM
from ..charlm.stack import StackedCharLM
from ..model.arch import Adapter
from ..model.interventions import attention_maps
from ..scores.heads import prev_cells
from ..settings.induction import InductionSettings, TaskSettings, cell_shape, model_spec, task_of, vocab_of
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
def prev_induction_scores(model: CharLM, probe: tasks.Batch, adapter: Adapter, mask=None) -> dict[str, np.ndarray]:
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


def train_runs(task: str, width: int, heads: int, seeds, s: InductionSettings,
               device: str | torch.device = "cpu") -> list[Run]:
    """Train the model of ``width`` and ``heads`` on ``task`` once per seed, every seed in one stack
    (:class:`~headwatch.charlm.loop.Trainer`, the sweep's loop: one optimizer step trains them all,
    each as it would train alone), each on its own rows; evaluated every ``eval_every`` steps model
    by model (module docstring). A run stops ``settle`` steps after the evaluation at which it has
    both changed phase and grown an induction head (:func:`headwatch.induction.analysis.run_events`,
    the summary's own definitions), else at the cap (``steps``; a control's ``control_steps``): it
    leaves the stack there (:meth:`~headwatch.charlm.loop.Trainer.subset`) and the others train on,
    each still as alone."""
    cell = _Cell(task, width, heads, [int(x) for x in seeds], s, torch.device(device))
    trainer = Trainer(cell.stack, Schedule(s.lr, s.min_lr, s.warmup, cell.cap), weight_decay=s.weight_decay,
                      betas=s.betas,
                      labels=[f"{task} {cell_shape(width, heads)} seed {seed}" for seed in cell.seeds])
    trainer.stack.train()
    with torch.no_grad():        # the untrained models; their training loss on the first batch, before any update
        cell.evaluate(0, trainer.losses(*cell.batch(0)).tolist())
    for done in trainer.train(0, cell.cap, cell.batch, (s.eval_every,)):
        trainer.read(done)       # the one host read of the steps since the last evaluation (a non-finite loss stops)
        trainer.reset()
        cell.evaluate(done, trainer.last.tolist())
        cell.charge()
        leaving = [j for j, i in enumerate(cell.live) if done == cell.cap
                   or (cell.per[i]["stop_at"] is not None and done >= cell.per[i]["stop_at"])]
        for j in leaving:
            p = cell.per[cell.live[j]]
            p["final"] = (trainer.stack.copy_of(j), done, "events" if p["stop_at"] is not None else "cap")
        if leaving:
            staying = [j for j in range(len(cell.live)) if j not in leaving]
            if not staying:
                break
            trainer.subset(staying)
            cell.follow(trainer.stack, staying)
    out = []
    for seed, p in zip(cell.seeds, cell.per):
        model, stop, reason = p["final"]
        adapter = Adapter(model)
        records = pd.DataFrame(p["records"])
        edges = edge_effects(model, adapter, records, cell.t, task, seed, s)
        out.append(Run(pd.DataFrame(p["curve"]), records, edges, p["seconds"],
                       sum(x.numel() for x in model.parameters()), stop, reason))
    return out


class _Cell:
    """One cell's seeds on one task (:func:`train_runs`): the stack it starts from, each run's
    evaluation rows and records, the members still training (``live``, in the stack's order), and
    their training rows, made on the host and put on the device together for the steps up to the
    next evaluation (no copy to the device, which waits for it, inside those steps)."""

    def __init__(self, task: str, width: int, heads: int, seeds: list[int], s: InductionSettings, device: torch.device):
        self.task, self.seeds, self.s, self.device = task, seeds, s, device
        self.t = s.task(task_of(task))
        self.spec = model_spec(task, width, heads, s)
        self.cap = s.steps_of(task)
        self.task_id = tasks.ALL_TASKS.index(task)
        models = []
        for seed in seeds:
            torch.manual_seed(seed)
            models.append(CharLM(self.spec))
        self.stack = StackedCharLM(models).to(device)
        self.per = []
        for seed in seeds:
            evaluation = rows(task_of(task), self.t, s.context, s.eval_rows, [seed, self.task_id, EVAL_STREAM], seed)
            own = evaluation if task_of(task) == task else rows(task, self.t, s.context, s.eval_rows,
                                                                    [seed, self.task_id, EVAL_STREAM], seed)
            self.per.append(dict(evaluation=evaluation, own=own,
                                 reference=float(evaluation.reference[evaluation.predictable].mean()),
                                 unigram=float(evaluation.unigram[evaluation.predictable].mean()),
                                 uniform=uniform_induction(evaluation),
                                 mask=successor_mask(torch.as_tensor(evaluation.ids[:, :-1]),
                                                     torch.as_tensor(evaluation.predictable)),
                                 curve=[], records=[], seconds=0.0, stop_at=None, final=None))
        self.live = list(range(len(seeds)))
        self.follow(self.stack, self.live)
        self.clock = time.process_time()

    def follow(self, stack: StackedCharLM, staying: list[int]) -> None:
        """The members ``staying`` (positions in the stack before) train on, in ``stack``."""
        self.live = [self.live[j] for j in staying]
        self.views = [stack.member(j) for j in range(len(self.live))]
        self.adapters = [Adapter(v) for v in self.views]
        self.chunk, self.chunk_steps = None, range(0)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step``'s rows of every live member (``[seed, task, step]``): inputs and targets."""
        if step not in self.chunk_steps:
            every, s = self.s.eval_every, self.s
            self.chunk_steps = range(step, min(self.cap, (step // every + 1) * every))
            self.chunk = torch.as_tensor(np.stack([
                np.stack([rows(self.task, self.t, s.context, s.batch, [self.seeds[i], self.task_id, k], self.seeds[i]).ids
                          for i in self.live]) for k in self.chunk_steps]), device=self.device)
        ids = self.chunk[step - self.chunk_steps.start]
        return ids[..., :-1], ids[..., 1:]

    def charge(self) -> None:
        """The CPU seconds since the last charge, shared by the members that trained in them."""
        now = time.process_time()
        for i in self.live:
            self.per[i]["seconds"] += (now - self.clock) / len(self.live)
        self.clock = now

    def evaluate(self, step: int, train_losses: list[float]) -> None:
        """Each live member's curve row and head records at ``step`` (its last training loss given);
        where it has had both events, the step it stops at."""
        from .analysis import run_events

        s = self.s
        for j, i in enumerate(self.live):
            view, adapter, p = self.views[j], self.adapters[j], self.per[i]
            loss = predictable_loss(view, p["evaluation"])
            own_loss = loss if p["own"] is p["evaluation"] else predictable_loss(view, p["own"])
            sc = prev_induction_scores(view, p["evaluation"], adapter, p["mask"])
            p["curve"].append(dict(step=step, loss=loss, reference=p["reference"], unigram=p["unigram"],
                                   gap=loss - p["reference"], own_loss=own_loss, train_loss=train_losses[j],
                                   best_prev=float(sc["prev"].max()), best_induction=float(sc["induction"].max()),
                                   best_induction_excess=float(sc["induction"].max()) - p["uniform"]))
            for l in range(self.spec.layers):
                for h in range(self.spec.heads):
                    p["records"].append(dict(step=step, layer=l, head=h, prev=float(sc["prev"][l, h]),
                                             induction=float(sc["induction"][l, h]),
                                             induction_excess=float(sc["induction"][l, h]) - p["uniform"]))
            if p["stop_at"] is None:
                ev = run_events(pd.DataFrame(p["curve"]), pd.DataFrame(p["records"]), s.threshold, s.margin)
                if ev["phase_step"] is not None and ev["induction_step"] is not None:
                    p["stop_at"] = step + s.settle


def edge_effects(model: CharLM, adapter: Adapter, records: pd.DataFrame, t: TaskSettings, task: str, seed: int,
                 s: InductionSettings) -> dict:
    """Path patching (§5e) from the layer-0 head of the highest final ``prev`` into the layer-1 head
    of the highest final ``induction``, through its q, k and v: each edge's effect (patched −
    corrupted mean logit difference, answer − distractor: the correct next token − another) on §5f's prompts in the task's vocabulary."""
    from ..circuits.known import induction_prompts
    from ..circuits.path_patching import Edge, PathPatcher
    from ..patching.patcher import Patcher

    last = records[records.step == records.step.max()]
    sender = last[last.layer == 0].sort_values(["prev", "head"], ascending=[False, True]).iloc[0]
    receiver = last[last.layer == 1].sort_values(["induction", "head"], ascending=[False, True]).iloc[0]
    vocab = vocab_of(task, t)
    half = min(t.half[1] if task.startswith("repeat") else s.context // 2, vocab, s.context // 2)
    prompts = induction_prompts(vocab, s.edge_prompts, half, seed + PROBE_STREAM)
    patcher = Patcher(model, adapter, prompts, batch=s.edge_prompts, extra_sites=("mlp_out",))
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
                     cell_shape(width, heads), seed, r.stop_step, r.stop_reason, r.seconds, c.loss.iloc[0],
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
