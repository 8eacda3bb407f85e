"""What each anatomy rule does, end to end (the scripts under scripts/ only call these).

Kept apart from the formulas so that tests can call either: the formulas on
hand-made cases, these on tiny models saved to a folder. The settings each reads are
:mod:`headwatch.settings.anatomy`'s (:class:`HeadAddress`, :class:`KVControl`).
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import torch

from ..model.arch import Adapter
from ..model.load import load_prepared
from ..settings.anatomy import HeadAddress, KVControl
from .configs import params_table, reference_entry, studied_entry, survey_table, sweep_entries
from .kvgroups import all_maps, kv_group_cuts, kv_similarity, ungrouped_control
from .weights import head_slices, weight_check

log = logging.getLogger("headwatch.anatomy")


def entries(studied: dict, references: dict, sweep: dict | None, sweep_vocab: int) -> list:
    """Studied models ({name: prepared folder}), reference configs ({name: json path}),
    then the sweep's shapes (``sweep`` = {"model": ..., "sweeps": {name: {"grid": [...]}}})."""
    out = [studied_entry(name, folder) for name, folder in studied.items()]
    out += [reference_entry(name, Path(path).parent) for name, path in references.items()]
    if sweep:
        out += sweep_entries(sweep, sweep_vocab)
    return out


def configured(params, inputs) -> tuple[dict, dict, dict, int]:
    """The arguments of :func:`survey` and :func:`params` from their rules' params
    (``models_studied``, ``references``, ``sweep``, ``sweep_vocab``) and inputs (``models``: each
    studied model's prepared record, ``references``: each reference config), in the same order."""
    studied = {name: Path(f).parent for name, f in zip(params.models_studied, inputs.models, strict=True)}
    references = dict(zip(params.references, inputs.references, strict=True))
    return studied, references, params.sweep, params.sweep_vocab


def survey(studied, references, sweep, sweep_vocab) -> pd.DataFrame:
    table = survey_table(entries(studied, references, sweep, sweep_vocab))
    for row in table.itertuples():
        log.info("survey %s (%s): %s", row.name, row.source, row.error or
                 f"{row.layers} layers × {row.heads} heads ({row.kv_heads} kv), width {row.width}, "
                 f"head size {row.head_dim} (tensors: {row.head_dim_tensors:g}, {row.tensors_from})")
    return table


def params(studied, references, sweep, sweep_vocab) -> pd.DataFrame:
    return params_table(entries(studied, references, sweep, sweep_vocab))


def phrase_tokens(phrases: pd.DataFrame, name: str, key: str) -> tuple[list[int], list[str]]:
    """(token ids, token strings) of one phrase of the phrases table; ``key`` names the config key."""
    sel = phrases[phrases["phrase"] == name]
    if len(sel) != 1:
        raise KeyError(f"{key}: phrase {name!r} is not in the phrases table "
                       f"(have {sorted(phrases['phrase'])})")
    row = sel.iloc[0]
    return [int(i) for i in row["token_ids"]], [str(t) for t in row["tokens"]]


def run_head_slices(folder, head: HeadAddress, dtype: str = "float32") -> dict:
    model, _, adapter = load_prepared(folder, dtype, "cpu")
    return dict(model=Path(folder).name, **head_slices(model, adapter, head.layer, head.head))


def run_weight_check(folder, phrases: pd.DataFrame, phrase: str, head: HeadAddress,
                     rounding_factor: float, dtype: str = "float32", device: str = "auto") -> dict:
    model, _, adapter = load_prepared(folder, dtype, device)
    ids, tokens = phrase_tokens(phrases, phrase, "anatomy.weight_check_phrase")
    record = weight_check(model, adapter, ids, head.layer, head.head, tokens, rounding_factor)
    log.info("weight check (layer %d, head %d) on %r: max |Δ| = %.3e, %.3g × its bound %.3g",
             head.layer, head.head, phrase, record["max_abs_delta"], record["ratio"], record["bound"])
    return dict(model=Path(folder).name, phrase=phrase, **record)


def run_kv_groups(folder, phrases: pd.DataFrame, phrase: str, control: KVControl,
                  dtype: str = "float32", device: str = "auto") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cuts of the model and of its ungrouped control, map similarity within/across groups)."""
    model, _, adapter = load_prepared(folder, dtype, device)
    name = Path(folder).name
    ids, _ = phrase_tokens(phrases, phrase, "anatomy.kv_phrase")
    cuts = kv_group_cuts(model, adapter, ids, name, "model")
    log.info("%s: %d cuts; heads moved per cut %s; max |Δ| outside the group %g", name,
             adapter.n_layers * adapter.n_kv_heads,
             sorted(cuts.groupby(["layer", "kv_group"])["heads_moved"].first().unique().tolist()),
             cuts["others_max_delta"].max())
    ungrouped = ungrouped_control(model.config, control.layers, control.seed).to(model.device)
    control_name = (f"control: {name} without key sharing, {control.layers} layers, random init "
                    f"(seed {control.seed})")
    control_cuts = kv_group_cuts(ungrouped, Adapter(ungrouped), ids, control_name, "control")
    log.info("control: heads moved per cut %s",
             sorted(control_cuts.groupby(["layer", "kv_group"])["heads_moved"].first().unique().tolist()))
    maps = all_maps(model, torch.tensor([ids], device=model.device), adapter)
    return pd.concat([cuts, control_cuts], ignore_index=True), kv_similarity(maps, adapter, name)
