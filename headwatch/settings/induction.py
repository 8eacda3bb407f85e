"""The induction sweep's settings (protocol §7c), in one typed object: every key under ``induction:``.

Like every settings module it imports only the standard library, so that the pre-job checks and
the Snakefile's parse read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import Settings, read_fields
from ..charlm.spec import ModelSpec
from .shapes import slug


@dataclass(frozen=True)
class TaskSettings(Settings):
    """``induction.tasks.<task>``: ``vocab`` and ``half`` (the repeated tokens: segment lengths, inclusive)
    or ``states`` and ``alpha`` (the in-context Markov chains: states, Dirichlet concentration)."""
    WHERE = "induction.tasks"

    vocab: int | None = None
    half: tuple[int, int] | None = None
    states: int | None = None
    alpha: float | None = None

    def __post_init__(self):
        if self.half is not None:
            object.__setattr__(self, "half", (int(self.half[0]), int(self.half[1])))
        for name, kind in (("vocab", int), ("states", int), ("alpha", float)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))


@dataclass(frozen=True)
class GridSettings(Settings):
    """``induction.grid``: every model of ``heads`` heads of ``head_size`` dimensions each whose width
    (heads × head size) is at most ``max_width`` — head count and head size told apart, both varied."""
    WHERE = "induction.grid"

    head_size: tuple[int, ...]
    heads: tuple[int, ...]
    max_width: int

    def __post_init__(self):
        object.__setattr__(self, "head_size", tuple(int(x) for x in self.head_size))
        object.__setattr__(self, "heads", tuple(int(x) for x in self.heads))
        object.__setattr__(self, "max_width", int(self.max_width))

    def cells(self) -> list[tuple[int, int]]:
        """(width, heads) of every cell within the width budget: smallest head size first, fewest heads
        first within it."""
        return [(d * h, h) for d in self.head_size for h in self.heads if d * h <= self.max_width]


@dataclass(frozen=True)
class InductionSettings(Settings):
    """Every key under ``induction:`` (config/config.yaml says what each means and why)."""
    WHERE = "induction"

    tasks: dict = field(default_factory=dict)      # task -> TaskSettings (repeat, markov)
    grid: GridSettings | dict | None = None        # head size x heads within a width budget
    seeds: tuple[int, ...] = ()                     # the tasks' runs
    control_seeds: tuple[int, ...] = ()             # the controls' runs
    run: tuple[str, ...] = ()                      # the tasks (and controls) this scale trains
    shapes: tuple[str, ...] | None = None          # this scale's shapes (None: every cell of the grid)
    context: int = 32
    ffn_mult: int = 4
    steps: int = 1000                               # the cap: a run still on the plateau here is censored
    control_steps: int = 1000                       # the controls' cap (each trains to it: no event expected)
    settle: int = 64                                # steps trained on after both events, then it stops
    batch: int = 64
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 50
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)         # AdamW's (a job's param only when not these)
    eval_every: int = 16
    eval_rows: int = 128
    edge_prompts: int = 32
    threshold: float = 0.3                          # an induction (previous-token) head: score at least this
    margin: float = 0.25                            # the phase change: loss this far below the plateau
    bootstrap: dict = field(default_factory=lambda: dict(resamples=10000, level=0.95, seed=0))

    def __post_init__(self):
        object.__setattr__(self, "tasks", {k: TaskSettings.of(v) for k, v in dict(self.tasks).items()})
        if self.grid is not None:
            object.__setattr__(self, "grid", GridSettings.of(self.grid))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "control_seeds", tuple(int(s) for s in self.control_seeds))
        object.__setattr__(self, "run", tuple(str(t) for t in self.run))
        if self.shapes is not None:
            object.__setattr__(self, "shapes", tuple(str(s) for s in self.shapes))
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        for name, kind in (("context", int), ("ffn_mult", int), ("steps", int), ("control_steps", int), ("settle", int), ("batch", int),
                           ("lr", float), ("min_lr", float), ("warmup", int), ("weight_decay", float), ("eval_every", int),
                           ("eval_rows", int), ("edge_prompts", int), ("threshold", float), ("margin", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    @classmethod
    def from_config(cls, cfg: dict) -> "InductionSettings":
        return cls(**read_fields(cls, cfg, cls.WHERE, required=()))

    def seeds_of(self, task: str) -> tuple[int, ...]:
        """The seeds a task trains: ``seeds`` for a task, ``control_seeds`` for a control."""
        return self.control_seeds if task.endswith("_control") else self.seeds

    def steps_of(self, task: str) -> int:
        """The cap a task trains to: ``steps`` for a task, ``control_steps`` for a control."""
        return self.control_steps if task.endswith("_control") else self.steps

    def task(self, name: str) -> TaskSettings:
        if name not in self.tasks:
            raise ValueError(f"induction.tasks has no task {name!r}; it has {sorted(self.tasks)}")
        return self.tasks[name]


# ------------------------------------------------------------------ the jobs
TASK_NAMES = ("repeat", "markov", "repeat_control", "markov_control")
"""Every task a scale may train (:mod:`headwatch.induction.tasks`: two tasks and their controls)."""
TRAIN_KEYS = ("context", "ffn_mult", "steps", "control_steps", "settle", "batch", "lr", "min_lr", "warmup", "weight_decay",
              "eval_every", "eval_rows", "edge_prompts", "threshold", "margin")
"""The keys a training job reads besides its task's settings and its seeds (its params: nothing else
reruns it). The threshold and the margin are the events a run stops on. ``betas`` joins them when it
is not the default (0.9, 0.95): the jobs trained before it was a setting keep their params."""


LAYERS = 2
"""Every model of the induction sweep has two layers (a previous-token head, then an induction head)."""
MAX_WIDTH = 8192
"""The widest model a training job builds: config/schema.yaml's bound of a sweep grid entry's width."""


def vocab_of(task: str, t: "TaskSettings") -> int:
    """The task's vocabulary size: ``vocab`` random tokens, or the chain's ``states``."""
    return t.vocab if task.startswith("repeat") else t.states


def model_spec(task: str, width: int, heads: int, s: "InductionSettings") -> ModelSpec:
    """The model a job trains: the sweep's character model, two layers, rotary positions (§5f says why)."""
    return ModelSpec(vocab_size=vocab_of(task, s.task(task_of(task))), width=width, heads=heads, layers=LAYERS,
                     context=s.context, rotary=True, ffn_mult=s.ffn_mult)


def job_macs(cfg: dict, task: str, shape: str) -> float:
    """Multiply-adds of one training job, every seed trained to the cap (what a job may cost, before
    any run; :func:`run_macs` gives a run's once it is known where it stopped)."""
    s = InductionSettings.from_config(cfg)
    return len(s.seeds_of(task)) * run_macs(cfg, task, shape, s.steps_of(task))


def run_macs(cfg: dict, task: str, shape: str, steps: int) -> float:
    """Multiply-adds of one run trained ``steps`` steps: its steps (forward and backward) and its
    evaluations (``eval_rows`` rows, forward only; the head scores' maps left out)."""
    job, s = job_params(cfg, task, shape), InductionSettings.from_config(cfg)
    spec = model_spec(task, job["width"], job["heads"], s)
    return steps * spec.step_macs(s.batch) + len(eval_steps(steps, s.eval_every)) * s.eval_rows * s.context \
        * spec.token_macs()


def eval_steps(steps: int, every: int) -> list[int]:
    """The evaluation steps of a run trained to ``steps``: 0, every ``every`` steps, and ``steps``."""
    return sorted({*range(0, steps + 1, every), steps})


def cell_shape(width: int, heads: int) -> str:
    """A cell's shape name, written as the sweep writes every shape (:func:`headwatch.settings.shapes.slug`):
    ``w{width}-h{heads}``."""
    return slug({"width": int(width), "heads": int(heads)})


def task_of(task: str) -> str:
    """The task whose settings (and rows) a task or its control reads: ``markov_control`` → ``markov``."""
    return task.removesuffix("_control")


def shapes(s: InductionSettings) -> list[tuple[str, int, int]]:
    """(shape, width, heads) of every model this scale trains: the grid's cells (smallest head size
    first, fewest heads first within it); only those ``shapes`` names, when it names any."""
    cells = s.grid.cells() if s.grid is not None else []
    return [(cell_shape(w, h), w, h) for w, h in cells if s.shapes is None or cell_shape(w, h) in s.shapes]


def jobs(s: InductionSettings) -> list[tuple[str, str]]:
    """(task, shape) of every training job: the tasks of ``run`` × the shapes."""
    return [(task, shape) for task in s.run if s.seeds_of(task) for shape, _, _ in shapes(s)]


def job_params(cfg: dict, task: str, shape: str) -> dict:
    """Exactly the slice of ``induction:`` one training job depends on: its task's settings, the
    training keys and its shape (a rule's params: editing another task's settings, the threshold or
    the margin reruns no training)."""
    s = InductionSettings.from_config(cfg)
    match = [(w, h) for k, w, h in shapes(s) if k == shape]
    if task not in s.run or not match:
        raise ValueError(f"induction: no job {task}/{shape} at this scale (run: {list(s.run)}; shapes: "
                         f"{[k for k, _, _ in shapes(s)]})")
    own = {"betas": list(s.betas)} if s.betas != InductionSettings.betas else {}   # absent at the default: no rerun
    return dict(task=task, width=match[0][0], heads=match[0][1], task_settings=dict(cfg["tasks"][task_of(task)]),
                seeds=list(s.seeds_of(task)), **{k: cfg[k] for k in TRAIN_KEYS}, **own)


def induction_errors(config: dict) -> list[str]:
    """The induction sweep's checks before any job, each naming its key: every task run is known and
    has its task's settings; a segment fits the vocabulary (its tokens are distinct) and a repeated
    segment the context; the chain's states; the grid's head sizes even, its cells within the widest
    model, the shapes named its cells; the evaluation interval within the cap; seeds for what runs;
    the threshold and margin positive."""
    cfg = config.get("induction")
    if not cfg:
        return []
    s = InductionSettings.from_config(cfg)
    errors = []
    for i, task in enumerate(s.run):
        if task not in TASK_NAMES:
            errors.append(f"induction.run[{i}] = {task!r}: not a task; the tasks are {list(TASK_NAMES)}")
        elif task_of(task) not in s.tasks:
            errors.append(f"induction.run[{i}] = {task!r} reads induction.tasks.{task_of(task)}, which is not set")
    r = s.tasks.get("repeat")
    if r is not None:
        if r.vocab is None or r.half is None:
            errors.append("induction.tasks.repeat: needs vocab and half")
        elif not 1 <= r.half[0] <= r.half[1] <= r.vocab:
            errors.append(f"induction.tasks.repeat.half = {list(r.half)}: lengths from 1 to vocab = {r.vocab} "
                          "(a segment's tokens are distinct), the first at most the second")
        elif 2 * r.half[1] - 1 > s.context:
            errors.append(f"induction.tasks.repeat.half = {list(r.half)}: a prompt of the final path patching "
                          f"(2 × {r.half[1]} − 1 tokens) is longer than induction.context = {s.context}")
    m = s.tasks.get("markov")
    if m is not None and (m.states is None or m.alpha is None or m.states < 2 or m.alpha <= 0):
        errors.append("induction.tasks.markov: needs states >= 2 and alpha > 0")
    g = s.grid
    if g is None:
        errors.append("induction.grid: give head_size, heads and max_width")
    else:
        for d in g.head_size:
            if d % 2:
                errors.append(f"induction.grid.head_size: {d} is odd; rotary positions turn pairs of dimensions, "
                              "so a head's size is even")
        if g.max_width > MAX_WIDTH:
            errors.append(f"induction.grid.max_width = {g.max_width:,}: past the widest model a training job may "
                          f"build ({MAX_WIDTH:,}, as sweep.sweeps.*.grid[].width)")
        if not g.cells():
            errors.append(f"induction.grid: no cell of head_size {list(g.head_size)} x heads {list(g.heads)} is "
                          f"within max_width = {g.max_width}")
    known = {cell_shape(w, h) for w, h in (g.cells() if g is not None else [])}
    errors += [f"induction.shapes[{i}] = {k!r}: not a cell of the grid ({sorted(known)})"
               for i, k in enumerate(s.shapes or ()) if k not in known]
    if s.eval_every < 1 or s.eval_every > min(s.steps, s.control_steps):
        errors.append(f"induction.eval_every = {s.eval_every}: within 1 .. steps = {s.steps} and control_steps = "
                      f"{s.control_steps}")
    if s.settle < 0:
        errors.append(f"induction.settle = {s.settle}: 0 or more steps")
    if not 0 <= s.warmup <= s.steps:
        errors.append(f"induction.warmup = {s.warmup}: within 0 .. steps = {s.steps}")
    if len(s.betas) != 2 or not all(0 <= b < 1 for b in s.betas):
        errors.append(f"induction.betas = {list(s.betas)}: AdamW's two decay rates, each in [0, 1)")
    if not 0 < s.threshold < 1 or s.margin <= 0:
        errors.append(f"induction.threshold = {s.threshold} must lie in (0, 1) and induction.margin = {s.margin} "
                      "above 0")
    if not s.seeds and any(not t.endswith("_control") for t in s.run):
        errors.append("induction.seeds: at least one seed for the tasks of induction.run")
    if not s.control_seeds and any(t.endswith("_control") for t in s.run):
        errors.append("induction.control_seeds: at least one seed for the controls of induction.run")
    return errors
