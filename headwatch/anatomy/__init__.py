"""Model anatomy (protocol §6): what a head is physically, how many there are, where the
weights are, how far the model can read and what it costs, and whether shared
key/value heads can be seen by cutting.

* :mod:`.configs`  — survey and parameters by block (configs on the meta device)
* :mod:`.context`  — rotary periods and reach, KV cache bytes, attention cells
* :mod:`.weights`  — one head's slices of the real tensors; its map recomputed by hand
* :mod:`.kvgroups` — key-slice cuts per (layer, group), the ungrouped control, map similarity
"""
import importlib

_EXPORTS = {
    "configs": ("BlockCountError", "Entry", "HeadShapeError", "build_meta", "classify_parameters",
                "params_by_block", "params_table", "reference_entry", "studied_entry", "survey_table",
                "sweep_entries"),
    "context": ("attention_cells", "attention_cells_table", "kv_cache_bytes", "kv_cache_table", "pair_periods",
                "pairs_not_wrapped", "reach", "rotary_pairs", "rotary_table"),
    "kvgroups": ("KVGroupError", "kv_group_cuts", "kv_similarity", "ungrouped_control", "zero_key_slice"),
    "weights": ("WeightCheckError", "hand_map", "head_slices", "weight_check"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    """Each name above, imported from its module on first use: configs, kvgroups and weights import
    torch, context does not, and the jobs of its three rules read a table only (~2 s of CPU each)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value
