"""One training loop for a stack of character models: the sweep's (protocol §7) and the induction
sweep's (§7c).

Both train the members of a :class:`~headwatch.charlm.stack.StackedCharLM` in one optimizer step,
each as it would train alone; what differs is only where a step's rows come from and what is done
at an evaluation. :class:`Trainer` holds what they share:

* the optimizer, built one way (:func:`make_optimizer`: fused AdamW over the stack's two rows, weight
  decay on the matrices and embeddings only, ``betas`` a setting of each sweep) and its schedule
  (:func:`lr_at`: linear warm-up, cosine decay);
* the step (:meth:`Trainer.step`): each member's mean next-token loss, its balancing loss where it has
  experts, one backward pass, each member's gradient clipped on its own (:func:`clip_per_model`), the
  optimizer step. Its operators do not grow with the members nor, after the backward pass, with the
  parameters (the stack's rows: ``benchmarks/train.py --ops`` counts them, ``tests/test_loop.py`` bounds
  them), and it reads nothing on the host: each member's loss is added on the device (float64) with
  the step of its first non-finite value;
* the loop (:meth:`Trainer.train`): it yields at the steps where the caller reads, evaluates,
  checkpoints or lets members go (:meth:`Trainer.subset`); :meth:`Trainer.read` is the one read on the
  host, there (and stops the clock: ``seconds`` is the steps' own time);
* evaluation in one pass for the whole stack (:meth:`Trainer.loss_sums`: eval mode, so no dropout).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ..model.interventions import at_least_float32
from ..tableio import NonFiniteError
from .stack import StackedCharLM, clip_per_model


def lr_at(step: int, lr: float, min_lr: float, warmup: int, steps: int) -> float:
    """Learning rate of step ``step`` (0-based): linear warm-up, then cosine to ``min_lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (lr - min_lr)


@dataclass(frozen=True)
class Schedule:
    """Every step's learning rate (:func:`lr_at`): a linear warm-up over ``warmup`` steps to ``lr``, then a
    cosine to ``min_lr`` at ``steps``, the schedule's last step."""
    lr: float
    min_lr: float
    warmup: int
    steps: int

    def lr_at(self, step: int) -> float:
        return lr_at(step, self.lr, self.min_lr, self.warmup, self.steps)


def make_optimizer(stack: StackedCharLM, lr: float, betas, weight_decay: float) -> torch.optim.AdamW:
    """Fused AdamW over the stack's rows: ``weight_decay`` on CharLM's matrices and embeddings, none on
    its biases and LayerNorms (:meth:`~headwatch.charlm.stack.StackedCharLM.decay_groups`)."""
    decay, rest = stack.decay_groups()
    return torch.optim.AdamW([dict(params=decay, weight_decay=weight_decay), dict(params=rest, weight_decay=0.0)],
                             lr=lr, betas=tuple(betas), fused=True)


def member_losses(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Each model's next-token loss ``[M]`` from the stack's logits ``[M, B, T, V]`` (float32 or wider)
    and targets ``[M, B, T]``: the mean of its own positions (``F.cross_entropy``'s mean), or with
    ``reduction="none"`` every position's ``[M, B·T]``."""
    M = len(logits)
    each = F.cross_entropy(at_least_float32(logits).flatten(0, 2), targets.flatten(), reduction="none").view(M, -1)
    return each if reduction == "none" else each.mean(dim=1)


class Trainer:
    """A stack, its optimizer and schedule, and the accumulators of its training losses (module doc).

    ``schedule``: the learning rate of every step (:class:`Schedule`); ``grad_clip``: each
    member's gradient norm capped at it (0: none); ``balance``: each member's weight of its experts'
    balancing loss (the mean of its expert layers'; None or all 0: none); ``amp``: the precision's
    context (autocast) of every forward pass; ``compile``: the training steps' forward pass through
    ``torch.compile``; ``labels``: each member in words, for an error."""

    def __init__(self, stack: StackedCharLM, schedule: Schedule, *, weight_decay: float, betas,
                 grad_clip: float = 0.0, balance=None, amp=None, compile: bool = False,
                 labels: list[str] | None = None):
        self.stack, self.compiled = stack, bool(compile)
        self.forward = torch.compile(stack) if compile else stack
        self.opt = make_optimizer(stack, schedule.lr, betas, weight_decay)
        self.schedule = schedule
        self.grad_clip = float(grad_clip)
        self.amp = amp if amp is not None else contextlib.nullcontext()
        self.labels = list(labels) if labels is not None else [f"member {i}" for i in range(stack.M)]
        device = self.device
        weights = [float(b) for b in balance] if balance is not None else [0.0] * stack.M
        self.balance = torch.tensor(weights, device=device) if any(weights) else None
        self.loss_sum = torch.zeros(stack.M, dtype=torch.float64, device=device)
        self.last = torch.full((stack.M,), math.nan, device=device)    # the last step's losses
        self.bad_step = torch.full((stack.M,), -1, dtype=torch.long, device=device)
        self.bad_value = torch.zeros(stack.M, device=device)
        self.steps_since, self.seconds, self._clock = 0, 0.0, None

    @property
    def device(self) -> torch.device:
        return self.stack.matrices.device

    @property
    def M(self) -> int:
        return self.stack.M

    # ---- the loop
    def train(self, first: int, stop: int, batch, every: tuple[int, ...]):
        """Steps ``first`` … ``stop`` − 1, each on ``batch(step)`` (``(x, y)``, ``[M, B, T]`` on the device);
        after each step whose count ``done`` = step + 1 is a multiple of one of ``every`` or is ``stop``,
        yields ``done``: the caller reads (:meth:`read`), evaluates, checkpoints or lets members go
        (:meth:`subset`) there, and may stop the loop."""
        for step in range(first, stop):
            self.step(step, *batch(step))
            done = step + 1
            if done == stop or any(done % k == 0 for k in every):
                yield done

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's mean loss ``[M]`` on its rows, in the stack's mode (the training loss)."""
        with self.amp:
            logits = self.forward(x)
        return member_losses(logits, y)

    def step(self, step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """One optimizer step of every member (0-based ``step``) on its rows ``x``/``y`` ``[M, B, T]``:
        the losses added on the device, never read here."""
        if self._clock is None:
            self._clock = time.perf_counter()
        for g in self.opt.param_groups:
            g["lr"] = self.schedule.lr_at(step)
        losses = self.losses(x, y)
        self.opt.zero_grad(set_to_none=True)
        total = losses.sum()            # each member's parameters get their own loss's gradient only
        if self.balance is not None:    # the reported training loss stays the cross-entropy alone
            total = total + (self.balance * torch.stack(self.stack.balance_losses).mean(dim=0)).sum()
        total.backward()
        self.update()
        self.last = losses.detach()
        self.loss_sum += self.last.double()
        fresh = (self.bad_step < 0) & ~torch.isfinite(self.last)
        self.bad_step = torch.where(fresh, step, self.bad_step)
        self.bad_value = torch.where(fresh, self.last, self.bad_value)
        self.steps_since += 1

    def update(self) -> None:
        """What follows a backward pass: each member's gradient clipped (``grad_clip``), the optimizer's
        step — on the stack's two rows, so its operators are as many whatever the members and the
        parameters."""
        if self.grad_clip:
            clip_per_model(self.stack.parameters(), self.grad_clip)
        self.opt.step()

    # ---- reading, at the caller's steps
    def read(self, done: int) -> list[float]:
        """Each member's training losses summed since :meth:`reset`, read on the host (the loop's
        synchronisation; the clock stops, ``seconds`` keeps the steps' time). NonFiniteError naming the
        member, its step and value when a loss was not finite."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self._clock is not None:
            self.seconds += time.perf_counter() - self._clock
            self._clock = None
        sums = self.loss_sum.tolist()
        bad = [i for i, v in enumerate(sums) if not math.isfinite(v)]
        if bad:
            i = bad[0]
            raise NonFiniteError(f"training loss is {self.bad_value[i].item()} at step {int(self.bad_step[i])} "
                                 f"({self.labels[i]}; read at step {done}); lower the learning rate or use float32")
        return sums

    def reset(self, loss_sum: list[float] | None = None, steps: int = 0, seconds: float = 0.0) -> None:
        """The accumulators start again (at zero, or at a checkpoint's values)."""
        if loss_sum is None:
            self.loss_sum.zero_()
        else:
            self.loss_sum.copy_(torch.tensor(loss_sum, dtype=torch.float64))
        self.steps_since, self.seconds = steps, seconds

    # ---- the members
    def subset(self, keep: list[int]) -> None:
        """Only the members ``keep`` train on (:meth:`~headwatch.charlm.stack.StackedCharLM.subset`, their
        optimizer state and accumulators carried): each still takes the steps it would take alone."""
        self.stack, self.opt = self.stack.subset(keep, self.opt)
        self.forward = torch.compile(self.stack) if self.compiled else self.stack
        index = torch.tensor(keep, device=self.device)
        for name in ("loss_sum", "last", "bad_step", "bad_value"):
            setattr(self, name, getattr(self, name).index_select(0, index))
        if self.balance is not None:
            self.balance = self.balance.index_select(0, index)
        self.labels = [self.labels[i] for i in keep]

    @torch.no_grad()
    def loss_sums(self, x: torch.Tensor, y: torch.Tensor, batch: int) -> torch.Tensor:
        """Each member's next-token losses summed over windows ``x``/``y`` ``[n, T]`` (the same for every
        member): ``[M]`` float64, each position's loss in the forward's precision (float32 or wider)
        added in float64; ``batch`` windows a forward pass of the whole stack, in eval mode (no
        dropout; the mode is restored). On the device, not read."""
        stack = self.stack
        was = stack.training
        stack.eval()
        total = torch.zeros(stack.M, dtype=torch.float64, device=self.device)
        for i in range(0, len(x), batch):
            xb, yb = x[i:i + batch], y[i:i + batch]
            with self.amp:
                logits = stack(xb.expand(stack.M, *xb.shape))
            total += member_losses(logits, yb.expand(stack.M, *yb.shape), reduction="none").double().sum(dim=1)
        stack.train(was)
        return total
