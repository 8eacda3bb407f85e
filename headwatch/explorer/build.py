"""Build the explorer page: one self-contained HTML file, data embedded as JSON.

:class:`ExplorerTables` is everything a page is built from (the spine's tables, the page's facts, each
optional section's tables by name); :func:`explorer_payload` makes the page's data of it — the phrases'
maps and tokens, every head's scores, and each section of :data:`headwatch.explorer.panels.PANELS` whose
tables are given —; :func:`render` inlines it in the page; :func:`build_explorer` does both (the rule
report_explorer and :func:`headwatch.explore` call it).

The page (``template.html`` + ``explorer.css`` + ``explorer.js``, inlined) works
offline from ``file://``: no CDN, no server, no framework. Everything it shows
comes from the workflow's tables:

* attention maps (``attention/maps.parquet``), stored as integers ``q`` with
  ``weight = q / quantum`` (the maps are already quantized to 1/quantum, so this
  is exact). Per phrase, every head's lower triangle is one flat uint8 array,
  base64-encoded; ``q >= 255`` (possible when quantum >= 255: a weight of 1 is
  ``q = quantum``) is written as 255 and the true value kept in a short escape
  list (flat index → q, uint32 each). Flat index of a cell:
  ``(layer * heads + head) * n(n+1)/2 + row(row+1)/2 + col`` for ``col <= row``.
* tokens, predictions and head scores;
* optional sections, each rendered only when its tables are given (:mod:`headwatch.explorer.panels`):
  ablation (top-k, circuit, attribution), activation patching (every head's score and its
  estimate, the residual stream by layer and position), path patching (the edges
  sender → receiver's q, k or v, drawn above the table's threshold), edge circuits and scores, the
  training sweep, what a head writes, reads and feeds (the lens), and always the rotary clock and
  KV-cache calculator (from the model's config).

Guards raise :class:`ExplorerDataError` (the rule fails) when a map is
incomplete, a weight is not a multiple of 1/quantum, or the tables disagree on
the model's shape.
"""
from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from .. import markup
from ..model.arch import context_length, shape_of
from ..markup import display_token
from ..names import BYTES_PER_NUMBER, SCORES
from .panels import panels_payload
from .records import ExplorerDataError, plain, records  # noqa: F401  (ExplorerDataError, records: the package's)

ESCAPE = 255


# ------------------------------------------------------------------ helpers
def percent(weight: float) -> str:
    """The hover read-out's percentage (JavaScript: ``(100 * w).toFixed(2) + " %"``, which rounds an
    exact tie up: 8/256 is 3.125, shown 3.13, where Python's format rounds it to even, 3.12)."""
    from decimal import ROUND_HALF_UP, Decimal

    return f"{Decimal(100.0 * weight).quantize(Decimal('0.01'), ROUND_HALF_UP)} %"


def readout_text(row_token: str, col_token: str, weight: float) -> str:
    """The hover read-out: "row token → column token: percentage"."""
    return f"{display_token(row_token)} → {display_token(col_token)}: {percent(weight)}"


def _b64(arr: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()).decode()


def _unb64(text: str, dtype) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.dtype(dtype).newbyteorder("<"))


# ------------------------------------------------------------------ maps
def cell_count(n: int) -> int:
    """Lower-triangle cells (row >= col) of an n-token map."""
    return n * (n + 1) // 2


def flat_index(layer, head, row, col, heads: int, n: int):
    """Position of a cell in a phrase's flat array (works on numpy arrays)."""
    return (np.asarray(layer) * heads + np.asarray(head)) * cell_count(n) + \
        np.asarray(row) * (np.asarray(row) + 1) // 2 + np.asarray(col)


def encode_phrase(maps: pd.DataFrame, phrase: str, n: int, layers: int, heads: int,
                  quantum: int) -> dict:
    """One phrase's maps as base64 uint8 (+ escapes); raises when the maps are incomplete."""
    m = maps[maps["phrase"] == phrase]
    layer, head = m["layer"].to_numpy(np.int64), m["head"].to_numpy(np.int64)
    row, col = m["row"].to_numpy(np.int64), m["col"].to_numpy(np.int64)
    w = m["weight"].to_numpy(np.float64)
    bad = (layer < 0) | (layer >= layers) | (head < 0) | (head >= heads) | (row >= n) | (col < 0) | (col > row)
    if bad.any():
        i = int(np.argmax(bad))
        raise ExplorerDataError(
            f"maps, phrase {phrase!r}: cell (layer {layer[i]}, head {head[i]}, row {row[i]}, col {col[i]}) "
            f"is outside {layers} layers × {heads} heads × {n} tokens (lower triangle)")
    total = layers * heads * cell_count(n)
    idx = flat_index(layer, head, row, col, heads, n)
    if len(np.unique(idx)) != len(idx):
        raise ExplorerDataError(f"maps, phrase {phrase!r}: duplicated cells")
    if len(idx) != total:
        seen = np.zeros(total, bool)
        seen[idx] = True
        first = int(np.argmin(seen))
        per = cell_count(n)
        lh, rest = divmod(first, per)
        r = int((math.isqrt(8 * rest + 1) - 1) // 2)
        raise ExplorerDataError(
            f"maps, phrase {phrase!r}: {total - len(idx)} of {total} lower-triangle cells missing "
            f"(first: layer {lh // heads}, head {lh % heads}, row {r}, col {rest - r * (r + 1) // 2})")
    scaled = w * quantum
    q = np.rint(scaled)
    off = np.abs(scaled - q)
    if (off > 1e-3).any() or (q < 0).any() or (q > quantum).any():
        i = int(np.argmax((off > 1e-3) | (q < 0) | (q > quantum)))
        raise ExplorerDataError(
            f"maps, phrase {phrase!r}: weight {w[i]!r} (layer {layer[i]}, head {head[i]}, row {row[i]}, "
            f"col {col[i]}) is not a multiple of 1/{quantum} in [0, 1]: the maps were not quantized "
            f"with attention.quantum = {quantum}")
    q = q.astype(np.int64)
    dense = np.zeros(total, np.int64)
    dense[idx] = q
    esc = np.flatnonzero(dense >= ESCAPE)
    return dict(maps=_b64(np.minimum(dense, ESCAPE).astype(np.uint8)),
                escape_index=_b64(esc.astype(np.uint32)), escape_value=_b64(dense[esc].astype(np.uint32)))


def decode_phrase(entry: dict, n: int, layers: int, heads: int, quantum: int) -> np.ndarray:
    """Inverse of :func:`encode_phrase`: weights ``[layers, heads, n, n]`` (0 above the diagonal)."""
    q = _unb64(entry["maps"], np.uint8).astype(np.int64)
    q[_unb64(entry["escape_index"], np.uint32).astype(np.int64)] = _unb64(entry["escape_value"], np.uint32)
    out = np.zeros((layers, heads, n, n))
    r, c = np.tril_indices(n)
    per = cell_count(n)
    for l in range(layers):
        for h in range(heads):
            base = (l * heads + h) * per
            out[l, h, r, c] = q[base + r * (r + 1) // 2 + c] / quantum
    return out


# ------------------------------------------------------------------ model
def model_shape(folder, dtype: str = "float32") -> dict:
    """Layers, heads, kv heads, head size, rotary and context of a prepared model folder (config only)."""
    from transformers import AutoConfig     # here: the table pages (report_table) import this module, never a config

    return config_shape(AutoConfig.from_pretrained(str(folder), trust_remote_code=False), dtype)


def config_shape(cfg, dtype: str = "float32") -> dict:
    """:func:`headwatch.model.arch.shape_of` plus the context length and bytes per number of ``dtype``."""
    return _shape(shape_of(cfg), context_length(cfg), dtype)


def loaded_shape(model) -> dict:
    """:func:`config_shape` of a loaded model in its parameters' dtype (a model without a transformers
    config, the sweep's character model: the shape its family reads off the module, no context)."""
    from ..model.arch import family_of_model, model_shape as module_shape

    dtype = str(next(model.parameters()).dtype).rpartition(".")[2]
    if family_of_model(model).has_config:
        return config_shape(model.config, dtype)
    return _shape(module_shape(model), None, dtype)


def _shape(s: dict, context, dtype: str) -> dict:
    if dtype not in BYTES_PER_NUMBER:
        raise ExplorerDataError(f"dtype {dtype!r}: bytes per number unknown "
                                f"(know {sorted(BYTES_PER_NUMBER)})")
    out = {k: plain(v) for k, v in s.items()}
    out.update(context=int(context) if context else None, dtype=dtype, bytes=BYTES_PER_NUMBER[dtype])
    if out["rotary_dims"] is None:
        out["rotary_dims"] = 0
    return out


def reference_base(path) -> dict:
    """{label, base, rotary_dims} of a reference config (config/models/<name>.json)."""
    from transformers import AutoConfig     # as in model_shape

    path = Path(path)
    raw = json.loads(path.read_text())
    cfg = AutoConfig.for_model(**raw)
    s = shape_of(cfg)
    return dict(label=path.stem, base=plain(s["rotary_base"]), rotary_dims=int(s["rotary_dims"] or 0))


def rotary_options(model_key: str, shape: dict, references: list[dict]) -> list[dict]:
    """The clock's base switch: the model's own base first, then each other base (deduplicated)."""
    opts = []
    if shape.get("rotary_base"):
        opts.append(dict(label=model_key, base=float(shape["rotary_base"])))
    for ref in references:
        if not ref.get("base"):
            continue
        for o in opts:
            if o["base"] == float(ref["base"]):
                if ref["label"] not in o["label"].split(", "):
                    o["label"] += f", {ref['label']}"
                break
        else:
            opts.append(dict(label=ref["label"], base=float(ref["base"])))
    return opts


@dataclass
class ExplorerTables:
    """Everything one page is built from (the module doc): the spine — every head's maps, the phrases' tokens,
    every head's scores, the predictions —, the page's facts (the model's name and shape, the maps' quantum,
    the rotary clock's options, the tables' sources and makers, the notebook's text), and each optional
    section's tables by name (``tables``: :data:`~headwatch.explorer.panels.TABLES`, each with its note on
    ``attrs["note"]``; :data:`~headwatch.explorer.panels.PANELS` says which section shows which)."""
    maps: pd.DataFrame
    tokens: pd.DataFrame
    scores: pd.DataFrame
    model: str
    shape: dict
    quantum: int
    predictions: pd.DataFrame | None = None
    tables: dict = field(default_factory=dict)
    rotary: list = field(default_factory=list)
    rotary_distance: int = 1000
    sources: dict = field(default_factory=dict)
    made_by: dict = field(default_factory=dict)
    text: dict | None = None


def explorer_payload(page: ExplorerTables) -> dict:
    """Everything the page shows, as one JSON-able dict (see the module doc for the map encoding): the
    spine's phrases and scores, the colour maps, and each section whose tables are given."""
    L, H = int(page.shape["layers"]), int(page.shape["heads"])
    maps = page.maps
    if int(maps["layer"].max()) + 1 != L or int(maps["head"].max()) + 1 != H:
        raise ExplorerDataError(f"maps cover {int(maps['layer'].max()) + 1} layers × "
                                f"{int(maps['head'].max()) + 1} heads; the model has {L} × {H}")
    phrases = _phrases(page, L, H)
    names = [p["name"] for p in phrases]
    payload = dict(model=page.model, shape=page.shape, quantum=int(page.quantum), phrases=phrases,
                   scores=_score_columns(page.scores, L, H), score_names=list(SCORES), colormaps=_colormaps(),
                   rotary=dict(options=page.rotary or [], distance=int(page.rotary_distance)),
                   sources=page.sources or {}, made_by=page.made_by or {})
    if page.text is not None:
        payload["text"] = page.text
    return dict(payload, **panels_payload(page.tables, L, H, names))


def _phrases(page: ExplorerTables, L: int, H: int) -> list[dict]:
    """Each phrase's tokens, its maps encoded (:func:`encode_phrase`) and the model's prediction after it."""
    tokens, predictions = page.tokens, page.predictions
    phrases = []
    names = list(dict.fromkeys(tokens["phrase"]))
    for name in names:
        t = tokens[tokens["phrase"] == name].sort_values("pos")
        n = len(t)
        if t["pos"].tolist() != list(range(n)):
            raise ExplorerDataError(f"tokens, phrase {name!r}: positions are not 0..{n - 1}")
        entry = dict(name=name, n=n, tokens=[str(x) for x in t["token"]],
                     display=[display_token(str(x)) for x in t["token"]],
                     **encode_phrase(page.maps, name, n, L, H, page.quantum))
        p = predictions[predictions["phrase"] == name].sort_values("rank") if predictions is not None else ()
        if len(p):
            first = p.iloc[0]
            shown = lambda v: display_token(str(v)) if plain(v) is not None else None
            entry["prediction"] = dict(
                expected=shown(first.get("expected")), expected_prob=plain(first.get("expected_prob")),
                expected_rank=plain(first.get("expected_rank")), also=shown(first.get("also")),
                also_prob=plain(first.get("also_prob")), also_rank=plain(first.get("also_rank")),
                top=[dict(token=display_token(str(r.token)), prob=plain(r.prob)) for r in p.itertuples()])
        phrases.append(entry)
    extra = set(page.maps["phrase"]) - set(names)
    if extra:
        raise ExplorerDataError(f"maps hold phrases without tokens: {sorted(extra)}")
    return phrases


def _score_columns(scores: pd.DataFrame, L: int, H: int) -> dict:
    """Every head's scores and their ranks, layer-major, one row per (layer, head)."""
    if len(scores) != L * H:
        raise ExplorerDataError(f"scores: {len(scores)} rows, but the model has {L} layers × {H} heads")
    s = scores.sort_values(["layer", "head"]).reset_index(drop=True)
    expected = [(l, h) for l in range(L) for h in range(H)]
    if list(zip(s["layer"].astype(int), s["head"].astype(int))) != expected:
        raise ExplorerDataError("scores: not exactly one row per (layer, head)")
    out = {"layer": [int(x) for x in s["layer"]], "head": [int(x) for x in s["head"]]}
    if "kv_group" in s:
        out["kv_group"] = [int(x) for x in s["kv_group"]]
    for name in SCORES:
        out[name] = [plain(x) for x in s[name]]
        rank = s[f"{name}_rank"] if f"{name}_rank" in s else s[name].rank(ascending=False, method="min")
        out[f"{name}_rank"] = [int(x) for x in rank]
    return out


def _colormaps() -> dict:
    """The figures' sequential and diverging colour maps as 256 hex colours each."""
    import matplotlib     # here, with the figures' style: the table pages (report_table) draw no colours

    from ..figures.style import DIVERGING, SEQUENTIAL

    def lut(name):
        cmap = matplotlib.colormaps[name]
        return [matplotlib.colors.to_hex(cmap(i / 255)) for i in range(256)]

    return dict(sequential=lut(SEQUENTIAL), diverging=lut(DIVERGING), sequential_name=SEQUENTIAL,
                diverging_name=DIVERGING)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


COMPRESSED = "zlib-base64"
"""The data element's encoding when the page is compressed: the JSON, zlib-compressed (what the
browser's ``DecompressionStream("deflate")`` reads), in base64."""


def render(payload: dict, compress: bool = False) -> str:
    """The page: template with CSS, JS and the payload inlined; ``compress``: the payload's JSON
    compressed (:data:`COMPRESSED`; the page decompresses it before it draws)."""
    import zlib

    data = markup.script_json(payload)      # no string in it can close the <script> element
    encoding = ""
    if compress:                            # base64: nothing in it is markup either
        data = base64.b64encode(zlib.compress(data.encode("utf-8"), 6)).decode()
        encoding = f' data-encoding="{COMPRESSED}"'
    import re

    html = _asset("template.html")
    title = markup.html(f"headwatch explorer: {payload['model']}")
    parts = {"TITLE": title, "CSS": _asset("explorer.css"), "JS": _asset("explorer.js"), "ENCODING": encoding,
             "DATA": data}
    for key in parts:
        if html.count(f"{{{{{key}}}}}") != 1:
            raise RuntimeError(f"explorer template must hold {{{{{key}}}}} exactly once")
    # One pass over the template: a placeholder inside a part (a model folder named {{DATA}}) stays its text.
    return re.sub(r"\{\{(TITLE|CSS|JS|ENCODING|DATA)\}\}", lambda hit: parts[hit.group(1)], html)


def build_explorer(page: ExplorerTables, out: str | Path | None = None, compress: bool = False) -> str:
    """The explorer page of ``page`` (:class:`ExplorerTables`) as HTML, written to ``out`` when given;
    ``compress``: its data compressed (:data:`COMPRESSED`)."""
    html = render(explorer_payload(page), compress)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(html, encoding="utf-8")
    return html
