"""The explorer page: one self-contained HTML file to explore every head (see build.py)."""
from .build import (ExplorerDataError, build_explorer, config_shape, decode_phrase, display_token, encode_phrase,  # noqa: F401
                    explorer_payload, flat_index, loaded_shape, model_shape, percent, readout_text, reference_base,
                    render, rotary_options)
