"""Survey and parameters by block (protocol §6), from configs alone.

Every model the anatomy looks at is an :class:`Entry`: a studied model (its
prepared folder, with weights), a reference config shipped under
``config/models/`` (no weights) or one of the sweep's char-model shapes.
Each is instantiated on the ``meta`` device — shapes without memory — and its
parameters are counted into blocks by the modules that own them
(:mod:`headwatch.model.params`, the one parameter count; :func:`headwatch.model.arch.model_parts`
says which modules those are). What a config's keys mean is :mod:`headwatch.model.arch`'s
to know (:func:`~headwatch.model.arch.shape_of` and its neighbours).

A config whose width is not divisible by its heads (and that does not set a
head size of its own) gets a row with an ``error`` note instead of a crash.
Numeric columns of such a row are 0: read ``error`` first.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from safetensors import safe_open
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from ..model.arch import Adapter, context_length, ffn_width, rope_type, shape_of, tied_embeddings, vocab_size
from ..charlm.model import CharLM
from ..charlm.spec import FIELDS, ROTARY_BASE, ModelSpec
from ..model.params import BlockCountError, classify_parameters, params_by_block  # noqa: F401 (re-exported)
from ..settings.sweep import model_of, slug


class HeadShapeError(ValueError):
    """The head size of the config disagrees with the tensors."""


@dataclass
class Entry:
    name: str
    source: str                       # "studied" | "reference" | "sweep"
    kind: str                         # "hf" (transformers config) | "charlm" (the sweep's model)
    raw: dict                         # config.json contents, or the fields of a charlm ModelSpec
    weights: Path | None = None       # prepared folder holding the real tensors (studied models)
    note: str = ""
    _built: dict = field(default_factory=dict, repr=False)


# ------------------------------------------------------------------- entries
def studied_entry(name: str, folder) -> Entry:
    folder = Path(folder)
    raw = json.loads((folder / "config.json").read_text())
    return Entry(name, "studied", "hf", raw, weights=folder, note=f"weights in {folder}")


def reference_entry(name: str, folder="config/models") -> Entry:
    path = Path(folder) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"anatomy.references: no reference config {path} for {name!r}")
    return Entry(name, "reference", "hf", json.loads(path.read_text()), note=f"config {path}")


def sweep_entries(sweep_cfg: dict, vocab_size: int) -> list[Entry]:
    """One entry per distinct configuration of every sweep's grid (named by its slug), built
    with the sweep's own model settings and options (layers, head size, kv heads, experts)."""
    seen: dict[str, Entry] = {}
    for sweep_name, sweep in sweep_cfg.get("sweeps", {}).items():
        for g in sweep.get("grid", []):
            name = slug(g)
            if name in seen:
                seen[name].note += f", {sweep_name}"
                continue
            model = model_of(sweep_cfg, g)      # without its training settings (balance): a shape
            raw = dict(vocab_size=int(vocab_size), **{k: v for k, v in model.items() if k in FIELDS})
            seen[name] = Entry(f"sweep {name}", "sweep", "charlm", raw,
                               note=f"vocabulary {vocab_size} (nominal); sweeps: {sweep_name}")
    return list(seen.values())


# ------------------------------------------------------- config → shape → model
def _hf_config(raw: dict):
    return AutoConfig.for_model(**raw)


def shape_error(entry: Entry) -> str:
    """'' when the config makes sense, else why not (width not divisible by heads, …)."""
    r = entry.raw
    if entry.kind == "charlm":
        width, heads = r["width"], r["heads"]
        head_dim = r.get("head_size") or (width // heads if heads and width % heads == 0 else None)
        kv = r.get("kv_heads") or heads
    else:
        s = shape_of(r)
        width, heads, head_dim, kv = s["width"], s["heads"], s["head_dim"], s["kv_heads"]
    if not width or not heads:
        return f"config has no width/heads (width={width}, heads={heads})"
    if head_dim is None:
        return (f"width {width} is not divisible by {heads} heads (width ÷ heads = "
                f"{width / heads:g}); no head size")
    if heads % kv:
        return f"{heads} heads do not split into {kv} key/value groups"
    if entry.kind == "charlm":
        try:
            ModelSpec(**r)
        except ValueError as err:
            return str(err)
    return ""


def build_meta(entry: Entry) -> nn.Module:
    """The model on the meta device (no memory): shapes and names only. Cached on the entry."""
    if "model" not in entry._built:
        if entry.kind == "charlm":
            with torch.device("meta"):
                model = CharLM(ModelSpec(**entry.raw))
        else:
            cfg = _hf_config(entry.raw)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(cfg)
        entry._built["model"] = model
    return entry._built["model"]


def weight_shapes(folder) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape from a safetensors folder (single file or sharded), headers only."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists()
             else ["model.safetensors"])
    shapes = {}
    for f in files:
        if not (folder / f).exists():
            raise FileNotFoundError(f"{folder / f}: no weights to cross-check the head size against")
        with safe_open(folder / f, framework="pt") as fh:
            for k in fh.keys():
                shapes[k] = tuple(fh.get_slice(k).get_shape())
    return shapes


def _param_names(model: nn.Module) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


def tensor_head_dims(model: nn.Module, entry: Entry, shapes: dict | None = None) -> dict:
    """Head size read off the q, k and o projection tensors of layer 0.

    ``shapes`` maps parameter names to the real tensors' shapes (weights on
    disk); without it the meta model's own shapes are used.
    """
    names = _param_names(model)
    a = Adapter(model)
    mods, heads, kv = dict(q=a.query_proj(0), k=a.key_proj(0), o=a.out_proj(0)), a.n_heads, a.n_kv_heads
    fused, conv1d = a.family.fused_layout, a.family.conv1d

    def shape(mod):
        name = names[id(mod.weight)]
        if shapes is None:
            return tuple(mod.weight.shape), name
        if name not in shapes:
            raise HeadShapeError(f"{entry.name}: tensor {name!r} is missing from the weights")
        return shapes[name], name

    def out_in(shp):  # (outputs, inputs) whatever the storage order
        return (shp[1], shp[0]) if conv1d else (shp[0], shp[1])

    (qs, qn), (ks, kn), (os_, on) = shape(mods["q"]), shape(mods["k"]), shape(mods["o"])
    q_out, k_out, o_in = out_in(qs)[0], out_in(ks)[0], out_in(os_)[1]
    if fused:  # one fused QKV tensor: q of every head, k and v of every group
        q_dim = k_dim = q_out / a.family.fused_units(heads, kv)
    else:
        q_dim, k_dim = q_out / heads, k_out / kv
    return dict(q=q_dim, k=k_dim, o=o_in / heads, tensors=f"{qn}, {kn}, {on}")


# ---------------------------------------------------------------------- survey
SURVEY_COLUMNS = ["name", "source", "architecture", "layers", "heads", "kv_heads", "group_size",
                  "width", "head_dim", "width_over_heads", "head_dim_tensors", "tensors_from",
                  "ffn", "vocab", "context", "position", "rotary_dims", "rotary_fraction",
                  "rotary_base", "rope_type", "tied_embeddings", "error", "note"]


def _describe(entry: Entry) -> dict:
    r = entry.raw
    if entry.kind == "charlm":
        spec = ModelSpec(**r)
        # ffn: neurons a token traverses (with experts: top_k × expert width, the active FFN)
        return dict(architecture="charlm", layers=spec.layers, heads=spec.heads, kv_heads=spec.kv_groups,
                    width=spec.width, head_dim=spec.head_dim, ffn=spec.ffn_active_width,
                    vocab=spec.vocab_size, context=spec.context, rotary_dims=spec.rotary_dims,
                    rotary_base=ROTARY_BASE if spec.rotary else 0.0, rope_type="default" if spec.rotary else "",
                    tied_embeddings=False)
    cfg = _hf_config(r)
    s = shape_of(cfg)
    return dict(architecture=cfg.model_type, layers=s["layers"], heads=s["heads"],
                kv_heads=s["kv_heads"], width=s["width"], head_dim=s["head_dim"], ffn=ffn_width(cfg),
                vocab=vocab_size(cfg), context=context_length(cfg), rotary_dims=int(s["rotary_dims"] or 0),
                rotary_base=float(s["rotary_base"] or 0.0), rope_type=rope_type(cfg),
                tied_embeddings=tied_embeddings(cfg))


def _error_row(entry: Entry, error: str) -> dict:
    row = {c: 0 for c in SURVEY_COLUMNS}
    row.update(name=entry.name, source=entry.source, architecture=entry.raw.get("model_type", entry.kind),
               tensors_from="", position="", rope_type="", tied_embeddings=False,
               width_over_heads=0.0, head_dim_tensors=0.0, rotary_fraction=0.0, rotary_base=0.0,
               error=error, note=entry.note)
    return row


def survey_row(entry: Entry) -> dict:
    """One survey row; a head size the tensors contradict raises :class:`HeadShapeError`."""
    err = shape_error(entry)
    if not err:
        try:
            d = _describe(entry)
            model = build_meta(entry)
        except Exception as exc:  # noqa: BLE001 -- a config transformers itself refuses: reported in its row
            err = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"
    if err:
        return _error_row(entry, err)
    shapes = weight_shapes(entry.weights) if entry.weights is not None else None
    dims = tensor_head_dims(model, entry, shapes)
    for which in ("q", "k", "o"):
        if dims[which] != d["head_dim"]:
            raise HeadShapeError(
                f"{entry.name}: the config says head size {d['head_dim']}, but the {which} projection "
                f"tensor ({'weights' if shapes else 'meta'}: {dims['tensors']}) gives {dims[which]:g}")
    W, H = d["width"], d["heads"]
    return dict(name=entry.name, source=entry.source, **{k: d[k] for k in ("architecture", "layers", "heads",
                "kv_heads")}, group_size=H // d["kv_heads"], width=W, head_dim=d["head_dim"],
                width_over_heads=W / H, head_dim_tensors=float(dims["q"]),
                tensors_from="weights" if shapes else "meta",
                ffn=d["ffn"], vocab=d["vocab"], context=d["context"],
                position="rotary" if d["rotary_dims"] else "learned", rotary_dims=d["rotary_dims"],
                rotary_fraction=d["rotary_dims"] / d["head_dim"], rotary_base=d["rotary_base"],
                rope_type=d["rope_type"], tied_embeddings=d["tied_embeddings"], error="", note=entry.note)


def survey_table(entries: list[Entry]) -> pd.DataFrame:
    return pd.DataFrame([survey_row(e) for e in entries], columns=SURVEY_COLUMNS)


# --------------------------------------------------------- parameters by block
def params_table(entries: list[Entry]) -> pd.DataFrame:
    """Parameters by block for every entry; an entry that cannot be built gets one error row.

    A studied model's total is also checked against the tensors on disk.
    """
    parts = []
    for e in entries:
        err = shape_error(e)
        if not err:
            try:
                model = build_meta(e)
            except Exception as exc:  # noqa: BLE001 -- as above: reported in its row
                err = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1]}"
        if err:
            parts.append(pd.DataFrame([dict(name=e.name, source=e.source, block="error", params=0,
                                            share=0.0, biases=0, counted="", error=err)]))
            continue
        table = params_by_block(model, e.name, e.source)
        if e.weights is not None:
            on_disk = sum(int(torch.Size(s).numel()) for s in weight_shapes(e.weights).values())
            total = int(table.loc[table["block"] == "total", "params"].item())
            if on_disk != total:
                raise BlockCountError(f"{e.name}: the weights on disk hold {on_disk} numbers, "
                                      f"the model built from its config {total}")
        parts.append(table)
    return pd.concat(parts, ignore_index=True)
