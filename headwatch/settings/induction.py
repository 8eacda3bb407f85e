"""The induction sweep's settings (protocol §7c), in one typed object: every key under ``induction:``.

Like every settings module it imports only the standard library, so that the pre-job checks and
the Snakefile's parse read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import Settings, read_fields
from ..charlm.spec import ModelSpec

ARMS = ("width", "head_size")
"""The two arms: heads at a fixed width (head size width ÷ heads), heads at a fixed head size
(width heads × head size)."""


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
class ArmSettings(Settings):
    """``induction.arms.<arm>``: the heads per layer, at a fixed ``width`` or a fixed ``head_size``."""
    WHERE = "induction.arms"

    heads: tuple[int, ...]
    width: int | None = None
    head_size: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        for name in ("width", "head_size"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def shapes(self) -> list[tuple[int, int]]:
        """(width, heads) of each model of the arm."""
        if self.width is not None:
            return [(self.width, h) for h in self.heads]
        return [(h * self.head_size, h) for h in self.heads]


@dataclass(frozen=True)
class InductionSettings(Settings):
    """Every key under ``induction:`` (config/config.yaml says what each means and why)."""
    WHERE = "induction"

    tasks: dict = field(default_factory=dict)      # task -> TaskSettings (repeat, markov)
    arms: dict = field(default_factory=dict)       # arm -> ArmSettings
    seeds: tuple[int, ...] = ()
    run: tuple[str, ...] = ()                      # the tasks (and controls) this scale trains
    shapes: tuple[str, ...] | None = None          # this scale's shapes (None: every arm's)
    context: int = 32
    ffn_mult: int = 4
    steps: int = 1000
    batch: int = 64
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 50
    weight_decay: float = 0.0
    evaluations: int = 41
    eval_rows: int = 128
    edge_prompts: int = 32
    threshold: float = 0.3                          # an induction (previous-token) head: score at least this
    margin: float = 0.25                            # the phase change: loss this far below the plateau
    bootstrap: dict = field(default_factory=lambda: dict(resamples=10000, level=0.95, seed=0))

    def __post_init__(self):
        object.__setattr__(self, "tasks", {k: TaskSettings.of(v) for k, v in dict(self.tasks).items()})
        object.__setattr__(self, "arms", {k: ArmSettings.of(v) for k, v in dict(self.arms).items()})
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "run", tuple(str(t) for t in self.run))
        if self.shapes is not None:
            object.__setattr__(self, "shapes", tuple(str(s) for s in self.shapes))
        for name, kind in (("context", int), ("ffn_mult", int), ("steps", int), ("batch", int), ("lr", float),
                           ("min_lr", float), ("warmup", int), ("weight_decay", float), ("evaluations", int),
                           ("eval_rows", int), ("edge_prompts", int), ("threshold", float), ("margin", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    @classmethod
    def from_config(cls, cfg: dict) -> "InductionSettings":
        return cls(**read_fields(cls, cfg, cls.WHERE, required=()))

    def task(self, name: str) -> TaskSettings:
        if name not in self.tasks:
            raise ValueError(f"induction.tasks has no task {name!r}; it has {sorted(self.tasks)}")
        return self.tasks[name]


# ------------------------------------------------------------------ the jobs
TASK_NAMES = ("repeat", "markov", "repeat_control", "markov_control")
"""Every task a scale may train (:mod:`headwatch.induction.tasks`: two tasks and their controls)."""
TRAIN_KEYS = ("context", "ffn_mult", "steps", "batch", "lr", "min_lr", "warmup", "weight_decay", "evaluations",
              "eval_rows", "edge_prompts", "seeds")
"""The keys a training job reads besides its task's settings (its params: nothing else reruns it)."""


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
    """Multiply-adds of one training job, every seed: its steps (forward and backward) and its
    evaluations (``eval_rows`` rows, forward only; the head scores' maps left out)."""
    job, s = job_params(cfg, task, shape), InductionSettings.from_config(cfg)
    spec = model_spec(task, job["width"], job["heads"], s)
    per_seed = s.steps * spec.step_macs(s.batch) + s.evaluations * s.eval_rows * s.context * spec.token_macs()
    return len(s.seeds) * per_seed


def shape_of(width: int, heads: int) -> str:
    """A shape's slug, the sweep's: ``w{width}-h{heads}``."""
    return f"w{width}-h{heads}"


def task_of(task: str) -> str:
    """The task whose settings (and rows) a task or its control reads: ``markov_control`` → ``markov``."""
    return task.removesuffix("_control")


def shapes(s: InductionSettings) -> list[tuple[str, int, int]]:
    """(shape, width, heads) of every model this scale trains: each arm's, once each (the arms may
    share one), fewest heads first within an arm; only those ``shapes`` names, when it names any."""
    out = {}
    for arm in s.arms.values():
        for width, heads in arm.shapes():
            out.setdefault(shape_of(width, heads), (width, heads))
    chosen = [(k, w, h) for k, (w, h) in out.items() if s.shapes is None or k in s.shapes]
    return chosen


def jobs(s: InductionSettings) -> list[tuple[str, str]]:
    """(task, shape) of every training job: the tasks of ``run`` × the shapes."""
    return [(task, shape) for task in s.run for shape, _, _ in shapes(s)]


def job_params(cfg: dict, task: str, shape: str) -> dict:
    """Exactly the slice of ``induction:`` one training job depends on: its task's settings, the
    training keys and its shape (a rule's params: editing another task's settings, the threshold or
    the margin reruns no training)."""
    s = InductionSettings.from_config(cfg)
    match = [(w, h) for k, w, h in shapes(s) if k == shape]
    if task not in s.run or not match:
        raise ValueError(f"induction: no job {task}/{shape} at this scale (run: {list(s.run)}; shapes: "
                         f"{[k for k, _, _ in shapes(s)]})")
    return dict(task=task, width=match[0][0], heads=match[0][1], task_settings=dict(cfg["tasks"][task_of(task)]),
                **{k: cfg[k] for k in TRAIN_KEYS})


def induction_errors(config: dict) -> list[str]:
    """The induction sweep's checks before any job, each naming its key: every task run is known and
    has its task's settings; a segment fits the vocabulary (its tokens are distinct) and a repeated
    segment the context; the chain's states; each arm's heads divide its width; the shapes named
    are the arms'; at least two evaluations; the threshold and margin positive."""
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
    for name, arm in s.arms.items():
        if name not in ARMS:
            errors.append(f"induction.arms.{name}: the arms are {list(ARMS)}")
        if (arm.width is None) == (arm.head_size is None):
            errors.append(f"induction.arms.{name}: give exactly one of width and head_size")
        elif arm.width is not None:
            errors += [f"induction.arms.{name}.heads: {h} heads do not divide width {arm.width}"
                       for h in arm.heads if arm.width % h]
        if (arm.width is None) != (arm.head_size is None):
            for width, heads in arm.shapes():
                size = arm.head_size if arm.head_size is not None else width // heads
                if width > MAX_WIDTH:
                    errors.append(f"induction.arms.{name}: {heads} heads of size {size} make a width of {width:,}, "
                                  f"past the widest model a training job may build ({MAX_WIDTH:,}, as "
                                  "sweep.sweeps.*.grid[].width)")
                elif size % 2 and (arm.head_size is not None or not arm.width % heads):
                    errors.append(f"induction.arms.{name}: {heads} heads of width {width} are of size {size}, "
                                  "odd; rotary positions turn pairs of dimensions, so a head's size is even")
    known = {shape_of(w, h) for arm in s.arms.values() for w, h in arm.shapes()}
    errors += [f"induction.shapes[{i}] = {k!r}: not a shape of the arms ({sorted(known)})"
               for i, k in enumerate(s.shapes or ()) if k not in known]
    if s.evaluations < 2:
        errors.append(f"induction.evaluations = {s.evaluations}: at least 2 (the first at step 0)")
    if not 0 <= s.warmup <= s.steps:
        errors.append(f"induction.warmup = {s.warmup}: within 0 .. steps = {s.steps}")
    if not 0 < s.threshold < 1 or s.margin <= 0:
        errors.append(f"induction.threshold = {s.threshold} must lie in (0, 1) and induction.margin = {s.margin} "
                      "above 0")
    if not s.seeds:
        errors.append("induction.seeds: at least one seed")
    return errors
