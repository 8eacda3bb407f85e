"""The anatomy's settings (protocol §6), typed, and its pre-job checks.

:class:`AnatomySettings` names every key under ``anatomy:`` once; each anatomy job reads its
rule's params through it (a key outside the rule's slice is None; :meth:`~AnatomySettings.need`
names the keys a job needs). :func:`anatomy_errors` (the config alone) and :func:`shape_errors`
(against each studied model's shape) run before any job, with the other pre-job checks
(:func:`headwatch.config.check_config`). No torch: the pre-job checks read this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import Settings, read_fields


@dataclass(frozen=True)
class HeadAddress(Settings):
    """``anatomy.head``: the head whose weights are dissected and whose map is recomputed by hand."""
    WHERE = "anatomy.head"

    layer: int
    head: int


@dataclass(frozen=True)
class KVControl(Settings):
    """``anatomy.kv_control``: the ungrouped control of the key-group cuts (the studied model's
    architecture with kv heads = heads, its first ``layers`` layers, random init with ``seed``)."""
    WHERE = "anatomy.kv_control"

    layers: int
    seed: int


@dataclass(frozen=True)
class AnatomySettings(Settings):
    """Every key under ``anatomy:`` (config/config.yaml says what each means); a key outside the
    rule's slice is None."""
    WHERE = "anatomy"
    SLICE = "rules/anatomy.smk"

    head: HeadAddress | None = None
    weight_check_phrase: str | None = None     # the phrase whose map is recomputed by hand
    weight_check_rounding_factor: float | None = None   # the factor of the weight check's derived bound
    rotary_distance: int | None = None         # tokens: pairs not yet wrapped, the rotary clocks
    swap_base: dict | None = None              # {model: the model whose rotary base it borrows}
    references: tuple[str, ...] | None = None  # reference configs under config/models/
    sweep_vocab: int | None = None             # the sweep shapes' nominal vocabulary
    kv_phrase: str | None = None               # the phrase the key-group cuts run on
    kv_control: KVControl | None = None
    clocks: tuple[str, ...] | None = None      # the rotary clock figure's models

    @classmethod
    def from_config(cls, cfg: dict) -> "AnatomySettings":
        cfg = read_fields(cls, cfg, cls.WHERE)
        typed = {k: tuple(cfg[k]) for k in ("references", "clocks") if cfg.get(k) is not None}
        if cfg.get("head") is not None:
            typed["head"] = HeadAddress.of(cfg["head"])
        if cfg.get("kv_control") is not None:
            typed["kv_control"] = KVControl.of(cfg["kv_control"])
        return cls(**{**cfg, **typed})

    def known_models(self, studied) -> set[str]:
        """The names a rotary setting may give: the reference configs and the studied models."""
        return set(self.references or ()) | set(studied)


def anatomy_errors(config: dict, workdir=".") -> list[str]:
    """What a schema cannot say about the ``anatomy`` section; each message names its key."""
    if not config.get("anatomy"):
        return []
    a = AnatomySettings.from_config(config["anatomy"])
    errors = []
    phrases = set(config.get("phrases", {}))
    for key in ("weight_check_phrase", "kv_phrase"):
        if getattr(a, key) not in phrases:
            errors.append(f"anatomy.{key}: {getattr(a, key)!r} is not a phrase of `phrases` ({sorted(phrases)})")
    for i, name in enumerate(a.references or ()):
        if not (Path(workdir) / "config" / "models" / f"{name}.json").exists():
            errors.append(f"anatomy.references[{i}]: no reference config config/models/{name}.json")
    known = a.known_models(config["models_studied"])
    for name, other in (a.swap_base or {}).items():
        for what, key in (("model", name), ("base donor", other)):
            if key not in known:
                errors.append(f"anatomy.swap_base: {what} {key!r} is neither a reference config nor a "
                              f"studied model ({sorted(known)})")
    for i, name in enumerate(a.clocks or ()):
        if name not in known:
            errors.append(f"anatomy.clocks[{i}]: {name!r} is neither a reference config nor a studied model")
    return errors


def shape_errors(config: dict, facts) -> list[str]:
    """The anatomy's settings against one studied model's shape (``facts``:
    :class:`headwatch.model.sources.ModelFacts`): the dissected head and the ungrouped control's layers."""
    if not config.get("anatomy"):
        return []
    a = AnatomySettings.from_config(config["anatomy"])
    layers, heads, key = facts.shape["layers"], facts.shape["heads"], facts.key
    desc = f"model {key} has {layers} layers × {heads} heads = {layers * heads}"
    out = []
    if a.kv_control is not None and a.kv_control.layers > layers:
        out.append(f"anatomy.kv_control.layers = {a.kv_control.layers}: the ungrouped control is model {key} "
                   f"rebuilt with its first layers, and it has {layers}")
    if a.head is not None:
        if a.head.layer >= layers:
            out.append(f"anatomy.head.layer = {a.head.layer}: {desc}, layers 0–{layers - 1}")
        if a.head.head >= heads:
            out.append(f"anatomy.head.head = {a.head.head}: {desc}, heads 0–{heads - 1} per layer")
    return out
