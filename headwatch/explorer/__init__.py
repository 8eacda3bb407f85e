"""The explorer page: one self-contained HTML file to explore every head (see build.py; its sections: panels.py)."""
from .build import (ExplorerDataError, ExplorerTables, build_explorer, config_shape, decode_phrase, display_token,  # noqa: F401
                    encode_phrase, explorer_payload, flat_index, loaded_shape, model_shape, percent, readout_text,
                    reference_base, render, rotary_options)
from .panels import PANELS  # noqa: F401
