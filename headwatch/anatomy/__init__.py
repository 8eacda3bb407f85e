"""Model anatomy (protocol §6): what a head is physically, how many there are, where the
weights are, how far the model can read and what it costs, and whether shared
key/value heads can be seen by cutting.

* :mod:`.configs`  — survey and parameters by block (configs on the meta device)
* :mod:`.context`  — rotary periods and reach, KV cache bytes, attention cells
* :mod:`.weights`  — one head's slices of the real tensors; its map recomputed by hand
* :mod:`.kvgroups` — key-slice cuts per (layer, group), the ungrouped control, map similarity
"""
from .configs import (BlockCountError, Entry, HeadShapeError, build_meta, classify_parameters,  # noqa: F401
                      params_by_block, params_table, reference_entry, studied_entry, survey_table,
                      sweep_entries)
from .context import (attention_cells, attention_cells_table, kv_cache_bytes, kv_cache_table,  # noqa: F401
                      pair_periods, pairs_not_wrapped, reach, rotary_pairs, rotary_table)
from .kvgroups import KVGroupError, kv_group_cuts, kv_similarity, ungrouped_control, zero_key_slice  # noqa: F401
from .weights import WeightCheckError, hand_map, head_slices, weight_check  # noqa: F401
