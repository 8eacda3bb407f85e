"""Edge circuits' settings (protocol §5g), in one typed object, and their pre-job checks.

:class:`EdgesSettings` names every key under ``edges:`` once, typed; :mod:`headwatch.circuits`
reads it, never string keys. Edge circuits run on activation patching's prompts and metric
(``patching:``) and read the known circuit's models (``circuits.known``): ``edges:`` holds only
what is its own. Imports only the standard library (the pre-job checks read it without torch).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import Settings

METHODS = ("eap", "eap-ig")
"""The edge attribution methods: EAP and EAP-IG (MIB's EAP-IG-inputs)."""
MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""The MIB benchmark's circuit sizes, as fractions of every edge."""
MAX_CIRCUITS = 20_000
"""Circuits of the faithfulness curves at most (sizes × (random draws + each method's two rankings + the
node baseline's two)): each is a patched run of every prompt; 180 times the protocol's 110."""


@dataclass(frozen=True)
class EdgesSettings(Settings):
    """Every key under ``edges:`` (config/config.yaml says what each means); a key outside the
    rule's slice is None."""
    WHERE = "edges"
    SLICE = "rules/edges.smk: the rule's params"

    methods: tuple[str, ...] | None = None      # edge attribution methods scored and drawn
    ig_steps: int | None = None                 # EAP-IG's interpolation steps
    prompts: int | None = None                  # the first n of patching's prompts (None: all)
    fractions: tuple[float, ...] | None = None  # circuit sizes, fractions of every edge
    random_draws: int | None = None             # random circuits of each size
    seed: int | None = None                     # the random circuits' draws
    faithful: float | None = None               # faithfulness of a faithful circuit
    batch: int | None = None                    # circuit × prompt rows of one patched pass
    score_batch: int | None = None              # prompts of one attribution pass
    rounding_factor: float | None = None        # the factor of the guards' bounds derived from rounding
    guard_senders: int | None = None            # senders whose every out-edge the guards patch
    agreement_top_k: int | None = None          # top-k overlap with path patching

    def __post_init__(self):
        for name, kind in (("ig_steps", int), ("prompts", int), ("random_draws", int), ("seed", int),
                           ("faithful", float), ("batch", int), ("score_batch", int), ("rounding_factor", float),
                           ("guard_senders", int), ("agreement_top_k", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))
        if self.methods is not None:
            object.__setattr__(self, "methods", tuple(str(m) for m in self.methods))
        if self.fractions is not None:
            object.__setattr__(self, "fractions", tuple(float(f) for f in self.fractions))


def edges_errors(config: dict) -> list[str]:
    """Every check of ``edges:`` a schema cannot make, before any job: the circuit sizes strictly
    increasing and ending at 1 (the full circuit, against which faithfulness is measured: the
    areas run from the smallest size to it), no method named twice, and no more prompts than
    activation patching makes."""
    if not config.get("edges"):
        return []
    e = EdgesSettings.from_config(config["edges"])
    errors = []
    f = list(e.fractions or ())
    if any(b <= a for a, b in zip(f, f[1:])):
        errors.append(f"edges.fractions: {f} is not strictly increasing")
    if f and f[-1] != 1.0:
        errors.append(f"edges.fractions: the last size must be 1 (every edge: the full model); got {f[-1]}")
    if len(set(e.methods or ())) != len(e.methods or ()):
        errors.append(f"edges.methods: {list(e.methods)} names a method twice")
    circuits = len(f) * (2 * len(e.methods or ()) + 2 + (e.random_draws or 0))
    if circuits > MAX_CIRCUITS:
        errors.append(f"edges.fractions × edges.random_draws: {len(f)} sizes × ({e.random_draws} random draws + "
                      f"{2 * len(e.methods or ()) + 2} ranked circuits) make {circuits:,} circuits, each run on every "
                      f"prompt; at most {MAX_CIRCUITS:,} (the protocol's: {len(MIB_FRACTIONS) * 11})")
    n = (config.get("patching") or {}).get("n")
    if e.prompts is not None and n is not None and not (config.get("patching") or {}).get("pairs") and e.prompts > n:
        errors.append(f"edges.prompts: {e.prompts} is more than the {n} prompts activation patching makes "
                      "(patching.n)")
    return errors
