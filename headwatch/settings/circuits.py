"""Path patching's settings (protocol §5e) and the known circuit's (§5f), in one typed object,
and their pre-job checks.

:class:`CircuitsSettings` names every key under ``circuits:`` once, typed; the rules of
:mod:`headwatch.circuits` read it, never string keys. Path patching runs on activation
patching's prompts and metric (``patching:``): ``circuits:`` holds only what is its own.
:func:`circuits_errors` is every check of ``circuits:`` a schema cannot make, before any job,
for one studied model (``headwatch/config/checks.py`` calls it). Imports only the standard
library, so that the pre-job checks read it without torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import Settings
from .patching import PatchingError

INPUTS = ("q", "k", "v")
"""A receiver head's inputs: its query slice, its key/value group's key and value slices."""


class CircuitsError(PatchingError):
    """An edge or a circuit result that cannot be what it claims: a
    :class:`~headwatch.settings.patching.PatchingError` (``except hw.PatchingError`` catches it)."""


def _heads(value) -> tuple[tuple[int, int], ...] | None:
    """Heads as the config names them (``{layer, head}`` mappings) or as pairs, as ``(layer, head)``."""
    if value is None:
        return None
    return tuple((int(h["layer"]), int(h["head"])) if isinstance(h, dict) else (int(h[0]), int(h[1])) for h in value)


@dataclass(frozen=True)
class CircuitsSettings(Settings):
    """Every key under ``circuits:`` (config/config.yaml says what each means); a key outside
    the rule's slice is None. ``receivers`` and ``senders`` are ``(layer, head)`` pairs."""
    WHERE = "circuits"
    SLICE = "rules/circuits.smk: the rule's params"

    receivers_top_k: int | None = None          # receivers: the head sweep's top k by score ...
    receivers: tuple | None = None              # ... unless heads are named here
    senders: tuple | None = None                # senders named (empty: every head of an earlier layer)
    sender_layers: int | None = None            # ... of this many layers below each receiver (None: every one)
    inputs: tuple[str, ...] | None = None       # receiver inputs patched, of q, k, v
    edge_threshold: float | None = None         # |score| of an edge drawn in the figure
    guard_senders: int | None = None            # senders of the strongest edges the guards re-run
    known: dict | None = None                   # the known circuit's model, prompts and claims

    def __post_init__(self):
        for name, kind in (("receivers_top_k", int), ("sender_layers", int), ("edge_threshold", float),
                           ("guard_senders", int)):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, kind(value))
        for name in ("receivers", "senders"):
            object.__setattr__(self, name, _heads(getattr(self, name)))
        if self.inputs is not None:
            object.__setattr__(self, "inputs", tuple(str(x) for x in self.inputs))


def circuits_errors(config: dict, facts) -> list[str]:
    """Every check of ``circuits:`` before any job, for one studied model (``facts``: its ``key``
    and ``shape``): each named receiver and sender is a head of the model, no receiver is in
    layer 0 (nothing before it sends), and no named receiver is in an earlier or the same layer
    as a named sender (naming both); ``receivers_top_k`` at most the model's heads."""
    if not config.get("circuits"):
        return []
    c = CircuitsSettings.from_config(config["circuits"])
    key, shape = facts.key, facts.shape
    layers, heads = shape.get("layers") or 0, shape.get("heads") or 0
    errors = []
    for what, named in (("receivers", c.receivers or ()), ("senders", c.senders or ())):
        for i, (l, h) in enumerate(named):
            if layers and heads and not (l < layers and h < heads):
                errors.append(f"circuits.{what}[{i}] = layer {l}, head {h}: model {key} has {layers} layers of "
                              f"{heads} heads")
    for i, (l, h) in enumerate(c.receivers or ()):
        if l == 0:
            errors.append(f"circuits.receivers[{i}] = layer 0, head {h}: a receiver in layer 0 has no earlier "
                          "layer to read from")
        for j, (sl, sh) in enumerate(c.senders or ()):
            if sl >= l:
                errors.append(f"circuits.receivers[{i}] (layer {l}, head {h}) is in "
                              f"{'the same' if sl == l else 'an earlier'} layer than circuits.senders[{j}] "
                              f"(layer {sl}, head {sh}): a path runs from a sender to a later layer")
    if key == config["models_studied"][0] and c.known and c.known["half"][0] > c.known["half"][1]:
        errors.append(f"circuits.known.half = {list(c.known['half'])}: the shortest length is above the longest")
    if layers and heads and c.receivers_top_k > layers * heads:
        errors.append(f"circuits.receivers_top_k = {c.receivers_top_k}: model {key} has {layers * heads} heads")
    return errors
