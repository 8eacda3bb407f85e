"""Build the explorer page: one self-contained HTML file, data embedded as JSON.

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
* optional sections, each rendered only when its table is given: ablation
  (top-k, circuit, attribution), activation patching (every head's score and its
  estimate, the residual stream by layer and position), path patching (the edges
  sender → receiver's q, k or v, drawn above the table's threshold), the training
  sweep, and always the rotary clock and KV-cache calculator (from the model's config).

Guards raise :class:`ExplorerDataError` (the rule fails) when a map is
incomplete, a weight is not a multiple of 1/quantum, or the tables disagree on
the model's shape.
"""
from __future__ import annotations

import base64
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from .. import markup
from ..model.arch import context_length, head_label, shape_of
from ..markup import display_token
from ..names import BYTES_PER_NUMBER, SCORES
from ..settings.tables import TableError

ESCAPE = 255


class ExplorerDataError(TableError):
    """A table the page is built from is incomplete or inconsistent: a :class:`~headwatch.settings.tables.TableError`
    (``except hw.TableError`` catches it), raised by the page's own checks."""


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


def _plain(value):
    """A JSON-able Python value from a pandas/numpy cell (lists joined by the page)."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return [_plain(v) for v in value]
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        f = float(value)
        if not math.isfinite(f):
            return None
        return f
    return str(value)


def records(df: pd.DataFrame) -> dict:
    """A table as {columns, rows} (rows as lists), JSON-able, column order kept."""
    cols = [str(c) for c in df.columns]
    rows = [[_plain(v) for v in row] for row in df.itertuples(index=False, name=None)]
    return dict(columns=cols, rows=rows)


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
    out = {k: _plain(v) for k, v in s.items()}
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
    return dict(label=path.stem, base=_plain(s["rotary_base"]), rotary_dims=int(s["rotary_dims"] or 0))


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


# ------------------------------------------------------------------ payload
def _attribution(attr: pd.DataFrame, phrases: list[str], layers: int, heads: int) -> dict:
    """Per phrase: every head's drop (percentage points, column ``drop_points``) in layer-major order."""
    col = next((c for c in ("drop_points", "drop") if c in attr.columns), None)
    if col is None or "p_cut" not in attr.columns or "p_intact" not in attr.columns:
        raise ExplorerDataError(f"attribution: needs columns drop_points, p_cut, p_intact; has {list(attr.columns)}")
    out = {}
    for p in phrases:
        a = attr[attr["phrase"] == p]
        if a.empty:
            continue
        if len(a) != layers * heads:
            raise ExplorerDataError(f"attribution, phrase {p!r}: {len(a)} rows, expected one per head "
                                    f"({layers} × {heads})")
        a = a.sort_values(["layer", "head"])
        exp = a["expected"].iloc[0] if "expected" in a else None
        out[p] = dict(drop=[_plain(x) for x in a[col]], p_cut=[_plain(x) for x in a["p_cut"]],
                      p_intact=_plain(a["p_intact"].iloc[0]),
                      expected=display_token(str(exp)) if exp is not None else None)
    return out


PATCHING_SUMMARY = ("prompts", "clean_logit_diff", "corrupted_logit_diff", "estimate_pearson",
                    "estimate_spearman", "estimate_top10_overlap", "top10", "exact_seconds", "estimate_seconds",
                    "top_heads")
"""What the patching panel's line reads from the tables' note (headwatch.patching)."""
PATCHING_OPTIONAL = ("names_phrase",)
"""What the line reads when the note has it (the rule's run on the names phrase; a notebook's
``hw.patch_heads`` without ``phrases`` has none)."""


def patching_payload(heads: pd.DataFrame, resid: pd.DataFrame | None, note: dict) -> dict:
    """The patching panel: every head's exact score and estimate (layer-major), the residual
    stream's score by layer and position with the position labels (when ``resid`` is given), and
    the note's summary."""
    missing = [k for k in PATCHING_SUMMARY + (("position_labels",) if resid is not None else ()) if k not in note]
    if missing:
        raise ExplorerDataError(f"patching/heads.parquet's note lacks {missing}")
    from ..patching.prompts import carried

    out = dict(heads=records(heads.sort_values(["layer", "head"])),
               summary={k: _plain(note[k]) for k in PATCHING_SUMMARY + PATCHING_OPTIONAL if k in note},
               title=f"Activation patching: the heads that carry {carried(note)}",
               separation=dict(weak=not note["pairs_separate"], said=note["separation"])
               if "pairs_separate" in note else None)
    if resid is not None:
        labels = list(note["position_labels"])
        r = resid.sort_values(["layer", "position"])
        if len(r) != (int(r["layer"].max()) + 1) * len(labels):
            raise ExplorerDataError(f"patching/resid: {len(r)} rows, not one per layer and each of the "
                                    f"{len(labels)} positions")
        out["resid"] = dict(score=[_plain(x) for x in r["score"]], layers=int(r["layer"].max()) + 1,
                            tokens=labels, positions=sorted(int(x) for x in r["position"].unique()))
    return out


CIRCUITS_SUMMARY = ("prompts", "edges", "edge_threshold", "receivers", "receivers_from", "senders_from",
                    "clean_logit_diff", "corrupted_logit_diff", "grouped_note")
"""What the path-patching panel's line reads from the edge table's note (headwatch.circuits)."""
PATH_COLUMNS = ("sender", "receiver", "input", "group", "score", "logit_diff", "rank_into_receiver",
                "sender_layer", "sender_head", "receiver_layer", "receiver_head")
"""The edge table's columns the panel shows and draws (circuits/paths.parquet)."""
INPUTS = ("q", "k", "v")


def circuits_payload(paths: pd.DataFrame, note: dict, layers: int, heads: int) -> dict:
    """The path-patching panel: every edge, strongest (|score|) first, and the note's summary;
    the page draws and lists those whose |score| reaches the note's ``edge_threshold`` (the
    rule's ``circuits.edge_threshold``). Raises when a column or note entry is missing, an edge
    names a head the model lacks, runs to the same or an earlier layer, into an input other than
    q, k or v, or a head label disagrees with its layer and head."""
    missing = [c for c in PATH_COLUMNS if c not in paths.columns] + [k for k in CIRCUITS_SUMMARY if k not in note]
    if missing:
        raise ExplorerDataError(f"circuits/paths.parquet (or its note) lacks {missing}")
    threshold = _plain(note["edge_threshold"])
    if not isinstance(threshold, float | int) or isinstance(threshold, bool) or threshold < 0:
        raise ExplorerDataError(f"circuits/paths.parquet's note: edge_threshold {note['edge_threshold']!r} is not "
                                "a number ≥ 0")
    for r in paths.itertuples():
        where = f"circuits/paths, edge {r.sender!r} -> {r.receiver!r} ({r.input!r})"
        ends = ((r.sender_layer, r.sender_head), (r.receiver_layer, r.receiver_head))
        if not all(0 <= int(l) < layers and 0 <= int(h) < heads for l, h in ends):
            raise ExplorerDataError(f"{where}: a head outside the model's {layers} layers × {heads} heads")
        if int(r.sender_layer) >= int(r.receiver_layer):
            raise ExplorerDataError(f"{where}: the sender's layer {r.sender_layer} is not below the receiver's "
                                    f"{r.receiver_layer}")
        if r.input not in INPUTS:
            raise ExplorerDataError(f"{where}: the input is none of {list(INPUTS)}")
        if (r.sender, r.receiver) != tuple(head_label(int(l), int(h)) for l, h in ends):
            raise ExplorerDataError(f"{where}: the labels disagree with the layers and heads "
                                    f"{head_label(*map(int, ends[0]))} -> {head_label(*map(int, ends[1]))}")
    order = paths["score"].abs().sort_values(ascending=False, kind="mergesort").index
    return dict(edges=records(paths.loc[order, list(PATH_COLUMNS)]),
                summary={k: _plain(note[k]) for k in CIRCUITS_SUMMARY})


EDGE_COLUMNS = ("sender", "receiver", "score", "sender_role", "receiver_role", "sender_kind", "sender_layer",
                "receiver_kind", "receiver_layer")
"""The best small circuit's columns the edge-circuit panel lists (edges/circuit.parquet)."""
EDGE_SUMMARY = ("method", "threshold", "found")
AREA_COLUMNS = ("method", "draw", "cpr", "cmd")


def edges_payload(circuit: pd.DataFrame, note: dict, areas: pd.DataFrame, layers: int) -> dict:
    """The edge-circuit panel (§5g): the smallest faithful circuit's edges, strongest first, the
    note's summary (method, threshold, size, faithfulness) and every method's CPR and CMD. Raises
    when a column or note entry is missing, or an edge's layers lie outside the model."""
    missing = ([c for c in EDGE_COLUMNS if c not in circuit.columns] + [k for k in EDGE_SUMMARY if k not in note]
               + [c for c in AREA_COLUMNS if c not in areas.columns])
    if missing:
        raise ExplorerDataError(f"edges/circuit.parquet, its note or edges/areas.parquet lacks {missing}")
    for r in circuit.itertuples():
        if not (-1 <= int(r.sender_layer) < layers and 0 <= int(r.receiver_layer) <= layers):
            raise ExplorerDataError(f"edges/circuit, edge {r.sender!r} -> {r.receiver!r}: a layer outside the "
                                    f"model's {layers}")
    order = circuit["score"].abs().sort_values(ascending=False, kind="mergesort").index
    summary = {k: _plain(note.get(k)) for k in ("method", "threshold", "found", "fraction", "edges", "kept",
                                               "faithfulness", "best")}
    return dict(circuit=records(circuit.loc[order, list(EDGE_COLUMNS)]), summary=summary,
                areas=records(areas[list(AREA_COLUMNS)]))


EDGE_SCORE_COLUMNS = ("edge", "sender", "receiver", "sender_kind", "sender_layer", "receiver_kind",
                      "receiver_layer")
"""The columns of an edge score table (edges/scores.parquet, ``hw.edge_scores``) the page lists
beside each method's score."""
EDGE_METHODS = ("eap_ig", "eap")
"""The edge score methods, each a column of the table (§5g): EAP-IG first, shown first."""


def edge_scores_payload(edges: pd.DataFrame, top: int) -> dict:
    """The strongest ``top`` edges by |score| of each method the table holds (their union, in the
    table's columns :data:`EDGE_SCORE_COLUMNS` and the methods'), the number of edges scored; the
    page lists one method's top at a time. Raises when a column is missing or no method is scored."""
    methods = [c for c in EDGE_METHODS if c in edges.columns]
    missing = [c for c in EDGE_SCORE_COLUMNS if c not in edges.columns]
    if missing or not methods:
        raise ExplorerDataError(f"edge scores lack {missing + ([] if methods else [' or '.join(EDGE_METHODS)])}")
    keep = set()
    for m in methods:
        keep |= set(edges[m].abs().sort_values(ascending=False, kind="mergesort").index[:top])
    rows = edges.loc[sorted(keep), list(EDGE_SCORE_COLUMNS) + methods]
    return dict(methods=methods, top=int(top), total=len(edges), edges=records(rows))


def explorer_payload(maps: pd.DataFrame, tokens: pd.DataFrame, scores: pd.DataFrame, *, model: str,
                     shape: dict, quantum: int, predictions: pd.DataFrame | None = None,
                     topk: pd.DataFrame | None = None, circuit_scores: pd.DataFrame | None = None,
                     circuit_loss: pd.DataFrame | None = None, attribution: pd.DataFrame | None = None,
                     attribution_summary: pd.DataFrame | None = None,
                     sweep_summary: pd.DataFrame | None = None, sweep_contrast: pd.DataFrame | None = None,
                     patching_heads: pd.DataFrame | None = None, patching_resid: pd.DataFrame | None = None,
                     patching_note: dict | None = None, patching_kv_groups: pd.DataFrame | None = None,
                     circuits_paths: pd.DataFrame | None = None, circuits_note: dict | None = None,
                     edges_circuit: pd.DataFrame | None = None, edges_note: dict | None = None,
                     edges_areas: pd.DataFrame | None = None, edge_scores: pd.DataFrame | None = None,
                     edge_scores_top: int = 50,
                     rotary: list[dict] | None = None, rotary_distance: int = 1000,
                     sources: dict | None = None, made_by: dict | None = None, text: dict | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict (see the module doc for the map encoding)."""
    L, H = int(shape["layers"]), int(shape["heads"])
    if len(scores) != L * H:
        raise ExplorerDataError(f"scores: {len(scores)} rows, but the model has {L} layers × {H} heads")
    if int(maps["layer"].max()) + 1 != L or int(maps["head"].max()) + 1 != H:
        raise ExplorerDataError(f"maps cover {int(maps['layer'].max()) + 1} layers × "
                                f"{int(maps['head'].max()) + 1} heads; the model has {L} × {H}")
    phrases = []
    names = list(dict.fromkeys(tokens["phrase"]))
    for name in names:
        t = tokens[tokens["phrase"] == name].sort_values("pos")
        n = len(t)
        if t["pos"].tolist() != list(range(n)):
            raise ExplorerDataError(f"tokens, phrase {name!r}: positions are not 0..{n - 1}")
        entry = dict(name=name, n=n, tokens=[str(x) for x in t["token"]],
                     display=[display_token(str(x)) for x in t["token"]],
                     **encode_phrase(maps, name, n, L, H, quantum))
        if predictions is not None:
            p = predictions[predictions["phrase"] == name].sort_values("rank")
            if len(p):
                first = p.iloc[0]
                shown = lambda v: display_token(str(v)) if _plain(v) is not None else None
                entry["prediction"] = dict(
                    expected=shown(first.get("expected")), expected_prob=_plain(first.get("expected_prob")),
                    expected_rank=_plain(first.get("expected_rank")), also=shown(first.get("also")),
                    also_prob=_plain(first.get("also_prob")), also_rank=_plain(first.get("also_rank")),
                    top=[dict(token=display_token(str(r.token)), prob=_plain(r.prob)) for r in p.itertuples()])
        phrases.append(entry)
    extra = set(maps["phrase"]) - set(names)
    if extra:
        raise ExplorerDataError(f"maps hold phrases without tokens: {sorted(extra)}")

    s = scores.sort_values(["layer", "head"]).reset_index(drop=True)
    expected = [(l, h) for l in range(L) for h in range(H)]
    if list(zip(s["layer"].astype(int), s["head"].astype(int))) != expected:
        raise ExplorerDataError("scores: not exactly one row per (layer, head)")
    score_cols = {"layer": [int(x) for x in s["layer"]], "head": [int(x) for x in s["head"]]}
    if "kv_group" in s:
        score_cols["kv_group"] = [int(x) for x in s["kv_group"]]
    for name in SCORES:
        score_cols[name] = [_plain(x) for x in s[name]]
        rank = s[f"{name}_rank"] if f"{name}_rank" in s else s[name].rank(ascending=False, method="min")
        score_cols[f"{name}_rank"] = [int(x) for x in rank]

    import matplotlib     # here, with the figures' style: the table pages (report_table) draw no colours

    from ..figures.style import DIVERGING, SEQUENTIAL

    def lut(name):
        cmap = matplotlib.colormaps[name]
        return [matplotlib.colors.to_hex(cmap(i / 255)) for i in range(256)]

    payload = dict(model=model, shape=shape, quantum=int(quantum), phrases=phrases, scores=score_cols,
                   score_names=list(SCORES),
                   colormaps=dict(sequential=lut(SEQUENTIAL), diverging=lut(DIVERGING),
                                  sequential_name=SEQUENTIAL, diverging_name=DIVERGING),
                   rotary=dict(options=rotary or [], distance=int(rotary_distance)),
                   sources=sources or {}, made_by=made_by or {})
    if text is not None:
        payload["text"] = text
    ablation = {}
    if topk is not None:
        ablation["topk"] = records(topk)       # every cut method; the page switches between them
    if circuit_scores is not None:
        ablation["circuit_scores"] = records(circuit_scores)
    if circuit_loss is not None:
        ablation["circuit_loss"] = records(circuit_loss)
    if attribution is not None:
        ablation["attribution"] = _attribution(attribution, names, L, H)
    if attribution_summary is not None:
        ablation["attribution_summary"] = records(attribution_summary)
    if ablation:
        payload["ablation"] = ablation
    if patching_heads is not None:
        if len(patching_heads) != L * H or patching_note is None:
            raise ExplorerDataError(f"patching: the heads table ({len(patching_heads)} rows for {L} × {H} heads) "
                                    "and its note come together")
        payload["patching"] = patching_payload(patching_heads, patching_resid, patching_note)
        if patching_kv_groups is not None:      # key/value groups, highest score first
            payload["patching"]["kv_groups"] = records(patching_kv_groups.sort_values(
                ["score_rank", "layer", "group", "site"], kind="mergesort"))
    if circuits_paths is not None:
        if circuits_note is None:
            raise ExplorerDataError("circuits: the edge table and its note come together")
        payload["circuits"] = circuits_payload(circuits_paths, circuits_note, L, H)
    if edges_circuit is not None:
        if edges_note is None or edges_areas is None:
            raise ExplorerDataError("edges: the circuit table, its note and the areas table come together")
        payload["edges"] = edges_payload(edges_circuit, edges_note, edges_areas, L)
    if edge_scores is not None:
        payload["edge_scores"] = edge_scores_payload(edge_scores, edge_scores_top)
    if sweep_summary is not None:
        payload["sweep"] = dict(summary=records(sweep_summary))
        if sweep_contrast is not None:
            payload["sweep"]["contrast"] = records(sweep_contrast)
    return payload


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


def build_explorer(maps: pd.DataFrame, tokens: pd.DataFrame, scores: pd.DataFrame, *, model: str,
                   shape: dict, quantum: int, out: str | Path | None = None, compress: bool = False,
                   **optional) -> str:
    """The explorer page as HTML (written to ``out`` when given).

    ``optional``: predictions, topk, circuit_scores, circuit_loss, attribution,
    attribution_summary, patching_heads, patching_resid (with ``patching_note``, the
    heads table's note), patching_kv_groups (the key/value group sweep), circuits_paths (path
    patching's edges, with ``circuits_note``, its note), edges_circuit (the smallest faithful edge
    circuit, with ``edges_note``, its note, and ``edges_areas``, every method's CPR and CMD),
    edge_scores (every edge's score, its strongest ``edge_scores_top`` of each method listed),
    sweep_summary, sweep_contrast (DataFrames; a section is omitted when its table is None), rotary
    (list of {label, base}), rotary_distance, sources ({name: path} shown in the page's footer),
    made_by ({table: what made it}, named in the captions instead of the workflow's file), text
    (the notebook's own text: what the page keeps of it; shows the views of one head on the text).
    """
    html = render(explorer_payload(maps, tokens, scores, model=model, shape=shape, quantum=quantum,
                                   **optional), compress)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(html, encoding="utf-8")
    return html
