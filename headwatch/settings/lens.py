"""The lens stage's settings (protocol §5h: direct effects, the logit lens, the weights' circuits and
their verdict), in one typed object, and their pre-job checks.

:class:`LensSettings` names every key under ``lens:`` once, typed; :mod:`headwatch.lens` reads it,
never string keys. Direct effects run on activation patching's prompts (``patching:``) and read its
head sweep; the verdict reads path patching's paths (``circuits:``): ``lens:`` holds only what is its
own. Imports only the standard library (the pre-job checks read it without torch).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import Settings
from .tables import TableError

SEED_RANGE = 1 << 32
"""numpy's legacy generators (``random_state=`` an integer, as scipy takes it) take a seed below 2^32."""


class LensError(TableError):
    """A table the lens stage cannot read as what it claims (heads patched on other prompts, paths or scores
    of another model): a :class:`~headwatch.settings.tables.TableError` (``except hw.TableError`` catches it)."""


def stream_seed(seed: int, stream: int) -> int:
    """The seed of a call's draw number ``stream`` (0: the composition null and the bootstrap, 1: the copying
    and same-token nulls, 2: the verdict's pairings): ``seed + stream`` wrapped below 2^32, so that every
    seed the schema takes (0 to 2^32 − 1) gives each stream a seed numpy and torch take, the streams of one
    call distinct, and a seed below 2^32 − stream its draws as before."""
    return (int(seed) + int(stream)) % SEED_RANGE


@dataclass(frozen=True)
class LensSettings(Settings):
    """Every key under ``lens:`` (config/config.yaml says what each means); a key outside the rule's
    slice is None."""
    WHERE = "lens"
    SLICE = "rules/lens.smk: the rule's params"

    batch: int | None = None                 # prompts of one forward pass (direct effects, the lens)
    rounding_factor: float | None = None     # the factor of the guards' bounds derived from rounding
    qk_offset: int | None = None             # a rotary head's QK circuit read at this query - key offset
    null_draws: int | None = None            # random matrices of each null
    bootstrap: int | None = None             # resamples of each rank correlation's interval
    confidence: float | None = None          # the intervals' level
    seed: int | None = None                  # the nulls' and the bootstrap's draws

    def __post_init__(self):
        for name, kind in (("batch", int), ("rounding_factor", float), ("qk_offset", int), ("null_draws", int),
                           ("bootstrap", int), ("confidence", float), ("seed", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))



def lens_errors(config: dict, facts) -> list[str]:
    """Every check of ``lens:`` that reads a studied model (``facts``: its ``key`` and ``shape``), before any
    job: a rotary head's QK matrix is read at an offset within the model's context."""
    if not config.get("lens"):
        return []
    s = LensSettings.from_config(config["lens"])
    context = facts.shape.get("context")
    if s.qk_offset is not None and context and s.qk_offset >= context:
        return [f"lens.qk_offset = {s.qk_offset}: model {facts.key} reads {context} positions; a query and its key "
                f"are at most {context - 1} apart"]
    return []
