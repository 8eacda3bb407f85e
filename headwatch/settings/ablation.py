"""The ablation experiments' settings (protocol §5), in one typed object.

:class:`AblationSettings` names every key under ``ablation:`` of the config once, typed;
every experiment of :mod:`headwatch.ablation` reads its settings from it, never from
string keys. Each rule's params are only the slice of ``ablation:`` its experiment
depends on (``rules/common.smk: ablation_slice``, so that only stale jobs rerun), so a
key outside the slice is None here, and an experiment names the keys it needs
(:meth:`~headwatch.settings.Settings.need`): one that is missing is an error naming it.

It imports only the standard library, like every settings module, so that the pre-job checks
can read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import Settings, read_fields

METHODS = ("zero", "mean")
"""How a head is cut: its ``z`` replaced by 0, or by its mean over the eval set."""


@dataclass(frozen=True)
class CircuitSettings(Settings):
    """``ablation.circuit`` (5b)."""
    WHERE = "ablation.circuit"

    half_threshold: float          # count heads with intact induction above this that lose > half

    def __post_init__(self):
        object.__setattr__(self, "half_threshold", float(self.half_threshold))


@dataclass(frozen=True)
class AttributionSettings(Settings):
    """``ablation.attribution`` (5c)."""
    WHERE = "ablation.attribution"

    no_effect_points: float        # |drop| below this many percentage points = "no effect"
    together: int                  # cut the N costliest heads together
    global_loss_nats: float        # a cut is "global" when the prose loss rises by more than this

    def __post_init__(self):
        object.__setattr__(self, "no_effect_points", float(self.no_effect_points))
        object.__setattr__(self, "together", int(self.together))
        object.__setattr__(self, "global_loss_nats", float(self.global_loss_nats))


@dataclass(frozen=True)
class AblationSettings(Settings):
    """Every key under ``ablation:`` (config/config.yaml says what each means); a key outside
    the rule's slice is None."""
    WHERE = "ablation"
    SLICE = "rules/common.smk: ablation_slice"

    method: str                    # zero | mean
    batch: int                     # rows (one cut × one sequence) per forward pass
    rounding_factor: float         # the factor of the guards' bounds derived from rounding
    hook_tolerance: float          # hook cut vs its weight-level form, max |Δlogit|
    top_n: int | None = None       # the targeted set: the top-n heads by induction score
    k: tuple[int, ...] | None = None   # heads cut on each side (5a)
    random_draws: int | None = None    # control draws
    seed: int | None = None        # every random draw: numpy default_rng([seed, experiment, k])
    guard_sequences: int | None = None  # eval / circuit sequences the guards run on
    circuit: CircuitSettings | None = None
    attribution: AttributionSettings | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"ablation.method = {self.method!r}: must be one of {list(METHODS)}")
        for name, kind in (("batch", int), ("rounding_factor", float), ("hook_tolerance", float), ("top_n", int),
                           ("random_draws", int), ("seed", int), ("guard_sequences", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))
        if self.k is not None:
            object.__setattr__(self, "k", tuple(int(k) for k in self.k))

    @classmethod
    def from_config(cls, cfg: dict) -> "AblationSettings":
        """The settings of ``config["ablation"]`` or of a rule's slice of it."""
        cfg = read_fields(cls, cfg, cls.WHERE)
        typed = {}
        if cfg.get("circuit") is not None:
            typed["circuit"] = CircuitSettings.of(cfg["circuit"])
        if cfg.get("attribution") is not None:
            typed["attribution"] = AttributionSettings.of(cfg["attribution"])
        return cls(**{**cfg, **typed})
