"""The explorer's optional sections, one entry each (:data:`PANELS`): the tables a section shows, by the names
the workflow's rule (report_explorer's inputs) and :func:`headwatch.explore` give them, and the function that
makes the section's part of the page's data from them. Each table's note rides on its ``attrs["note"]``.

**A new section is one entry of** :data:`PANELS` (its tables, its function here), its ``<section>`` in
``template.html`` and its ``render…`` function in ``explorer.js``; the page builder
(:func:`headwatch.explorer.build.explorer_payload`) and the rule need no change beyond the tables' inputs
(:func:`headwatch.workflow.targets.explorer_inputs`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..markup import display_token
from ..model.arch import head_label
from .records import ExplorerDataError, plain, records


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
        out[p] = dict(drop=[plain(x) for x in a[col]], p_cut=[plain(x) for x in a["p_cut"]],
                      p_intact=plain(a["p_intact"].iloc[0]),
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
               summary={k: plain(note[k]) for k in PATCHING_SUMMARY + PATCHING_OPTIONAL if k in note},
               title=f"Activation patching: the heads that carry {carried(note)}",
               separation=dict(weak=not note["pairs_separate"], said=note["separation"])
               if "pairs_separate" in note else None)
    if resid is not None:
        labels = list(note["position_labels"])
        r = resid.sort_values(["layer", "position"])
        if len(r) != (int(r["layer"].max()) + 1) * len(labels):
            raise ExplorerDataError(f"patching/resid: {len(r)} rows, not one per layer and each of the "
                                    f"{len(labels)} positions")
        out["resid"] = dict(score=[plain(x) for x in r["score"]], layers=int(r["layer"].max()) + 1,
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
    threshold = plain(note["edge_threshold"])
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
                summary={k: plain(note[k]) for k in CIRCUITS_SUMMARY})


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
    summary = {k: plain(note.get(k)) for k in ("method", "threshold", "found", "fraction", "edges", "kept",
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


# ------------------------------------------------------------------ each section from its tables
def _note(table: pd.DataFrame, what: str) -> dict:
    note = table.attrs.get("note")
    if not isinstance(note, dict):
        raise ExplorerDataError(f"{what} and its note (attrs['note']) come together")
    return note


def ablation_panel(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """The ablation section (§5a–§5c): the cuts of every method, the circuit's re-scoring and loss, every
    head's drop per phrase."""
    out = {name: records(t[name]) for name in ("topk", "circuit_scores", "circuit_loss", "attribution_summary")
           if name in t}
    if "attribution" in t:
        out["attribution"] = _attribution(t["attribution"], phrases, layers, heads)
    return out


def patching_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """The activation-patching section (§5d): the heads table and its note come together; the residual
    stream's and the key/value groups' tables when given (groups highest score first)."""
    table = t.get("patching_heads")
    if table is None or len(table) != layers * heads:
        raise ExplorerDataError(f"patching: the heads table ({0 if table is None else len(table)} rows for "
                                f"{layers} × {heads} heads) and its note come together")
    out = patching_payload(table, t.get("patching_resid"), _note(table, "patching/heads"))
    if "patching_kv_groups" in t:
        out["kv_groups"] = records(t["patching_kv_groups"].sort_values(["score_rank", "layer", "group", "site"],
                                                                       kind="mergesort"))
    return out


def circuits_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """The path-patching section (§5e): the edge table with its note."""
    paths = t["circuits_paths"]
    return circuits_payload(paths, _note(paths, "circuits: the edge table"), layers, heads)


def edges_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """The edge-circuit section (§5g): the circuit table with its note, and every method's areas."""
    if "edges_circuit" not in t or "edges_areas" not in t:
        raise ExplorerDataError("edges: the circuit table, its note and the areas table come together")
    circuit = t["edges_circuit"]
    return edges_payload(circuit, _note(circuit, "edges: the circuit table"), t["edges_areas"], layers)


EDGE_SCORES_TOP = 50
"""How many of the strongest edges of each method the edge-scores section holds."""


def edge_scores_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    return edge_scores_payload(t["edge_scores"], EDGE_SCORES_TOP)


def sweep_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """The training sweep's summary and its contrast."""
    if "sweep_summary" not in t:
        raise ExplorerDataError("sweep: the contrast comes with the summary")
    out = dict(summary=records(t["sweep_summary"]))
    if "sweep_contrast" in t:
        out["contrast"] = records(t["sweep_contrast"])
    return out


LENS_VERDICT_COLUMNS = ("comparison", "n", "rho", "low", "high", "null_low", "null_high", "verdict")
"""The verdict rows the lens section lists (lens/verdict.parquet, :func:`headwatch.weights_vs_paths`)."""


def lens_section(t: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """What a head writes, reads and feeds (§5h): per head its OV copying score, its QK same-token score, the
    earlier head it reads most from and the later one it feeds most by the weights' composition, with the
    direct effects its direct against its total effect, with path patching its strongest measured path in;
    the verdict rows (do the weights predict the paths?); the logit lens at the last position."""
    from ..lens.prediction import explorer_panel

    if "lens_circuits" not in t or "lens_composition" not in t:
        raise ExplorerDataError("lens: the weights' circuits (per head) and their composition scores come together")
    rows = explorer_panel(t["lens_circuits"], t["lens_composition"], t.get("lens_direct_heads"),
                          t.get("circuits_paths"))
    if len(rows) != layers * heads:
        raise ExplorerDataError(f"lens: {len(rows)} heads in the weights' table, the model has {layers} × {heads}")
    out = dict(heads=records(rows.sort_values(["layer", "head"], kind="mergesort")))
    if "lens_verdict" in t:
        v = t["lens_verdict"]
        out["verdict"] = records(v[[c for c in LENS_VERDICT_COLUMNS if c in v.columns]])
    if "lens_logit_lens" in t:
        lens = t["lens_logit_lens"]
        last = lens[lens["position"] == lens["position"].max()].sort_values(["run", "depth"], kind="mergesort")
        out["logit_lens"] = records(last[["run", "depth", "after", "logit_diff", "rank", "p_answer"]])
    return out


# ------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Panel:
    """One optional section: ``tables``, the tables that are its own (any one given shows it), ``reads``, others
    it reads when given (another section's), and ``build``, its part of the page's data from them (each
    by name, with its note on ``attrs``), the model's layers and heads and the page's phrases."""
    name: str
    tables: tuple[str, ...]
    build: Callable[[dict, int, int, list[str]], dict]
    reads: tuple[str, ...] = ()


PANELS: dict[str, Panel] = {p.name: p for p in (
    Panel("ablation", ("topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary"), ablation_panel),
    Panel("patching", ("patching_heads", "patching_resid", "patching_kv_groups"), patching_section),
    Panel("circuits", ("circuits_paths",), circuits_section),
    Panel("edges", ("edges_circuit", "edges_areas"), edges_section),
    Panel("edge_scores", ("edge_scores",), edge_scores_section),
    Panel("sweep", ("sweep_summary", "sweep_contrast"), sweep_section),
    Panel("lens", ("lens_circuits", "lens_composition", "lens_direct_heads", "lens_verdict", "lens_logit_lens"),
          lens_section, reads=("circuits_paths",)),
)}
"""Every optional section of the page, by the name its data has in the page (the module doc)."""
TABLES = tuple(dict.fromkeys(t for p in PANELS.values() for t in p.tables))
"""Every table a section shows, by name."""


def panels_payload(tables: dict, layers: int, heads: int, phrases: list[str]) -> dict:
    """Each section's data whose tables are given (``tables``: by the names of :data:`TABLES`; another name is
    refused, naming the known ones)."""
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise ExplorerDataError(f"no section of the page shows {unknown}; the tables it shows: {list(TABLES)}")
    out = {}
    for panel in PANELS.values():
        if any(name in tables for name in panel.tables):
            given = {name: tables[name] for name in panel.tables + panel.reads if name in tables}
            out[panel.name] = panel.build(given, layers, heads, phrases)
    return out
