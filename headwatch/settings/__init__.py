"""Each stage's settings, in one typed object per stage: torch-free, so that the pre-job checks
(:mod:`headwatch.config`) and the Snakefile's parse read them too.

* :mod:`.ablation` — :class:`AblationSettings`, every key under ``ablation:``;
* :mod:`.patching` — :class:`PatchingSettings`, ``patching:``, and its pre-job errors;
* :mod:`.sweep`    — ``sweep:``: a sweep's training, the probe, the summary, the course, a
  training job's params; what a grid entry means; the sweep's pre-job errors;
* :mod:`.anatomy`  — :class:`AnatomySettings`, ``anatomy:``, and its pre-job errors.

An object is built from its section of the config, or from a rule's slice of it
(``from_config``): a key the object has no field for is an error naming it (a new config key
is typed here too); a key outside the slice is None, and a job names the keys it needs
(``need``). A rule's params stay the config's own mappings (so that only stale jobs rerun); the
job reads them through these objects, never by string keys.
"""
from __future__ import annotations

from dataclasses import MISSING, fields


def read_fields(cls, cfg, where: str, required: tuple[str, ...] | None = None) -> dict:
    """``cfg`` (a mapping) as keyword arguments of the dataclass ``cls``: a key ``cls`` has no
    field for is an error naming it, and so is a missing key of ``required`` (default: every
    field without a default)."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: {cfg!r} is not a mapping of settings")
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(cfg) - set(names), key=str)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    if required is None:
        required = tuple(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"{where}: {', '.join(missing)} missing (config/schema.yaml gives the workflow every "
                         "default)")
    return dict(cfg)


class Settings:
    """What every settings dataclass shares: :meth:`of` and :meth:`need`. ``WHERE`` is the
    config key of its section (named in errors), ``SLICE`` where a rule's slice is made."""

    WHERE = ""
    SLICE = "the rule's params"

    @classmethod
    def from_config(cls, cfg: dict):
        return cls(**read_fields(cls, cfg, cls.WHERE))

    @classmethod
    def of(cls, value):
        """``value`` itself when it is one of these settings, else the settings of the mapping."""
        return value if isinstance(value, cls) else cls.from_config(value)

    def need(self, *names: str):
        """Itself, when every key of ``names`` is set; else an error naming those that are not
        (a rule whose slice lacks them)."""
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise ValueError(f"{self.WHERE}: {', '.join(missing)} not in this rule's settings ({self.SLICE})")
        return self
