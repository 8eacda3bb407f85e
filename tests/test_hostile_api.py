"""Every public function, handed what it cannot use, refuses it — generated from ``hw.__all__``.

:data:`HOSTILE` holds each public function's hostile cases, one entry a function: a bad keyword, setting,
argument or table, and the words its refusal must hold. The test is made from ``hw.__all__`` (the errors
excepted), so that a function added there without an entry fails it. Every case must be refused:

* with one of the library's errors (``hw.ConfigError``, ``hw.TableError``, …: :data:`headwatch.api.ERRORS`),
  raised by headwatch's own code, no dependency's exception chained to it (a notebook shows no library's
  traceback);
* in one line that starts ``hw.<function>: `` and names the argument as the call gave it;
* in under a second, before any model pass (a hook on the tiny model counts its forward passes) and before
  anything is drawn (a figure made fails the case), printing nothing.

The tables are made by hand, of the kinds the functions return, on a tiny Llama (3 layers × 4 heads, 2
key/value heads, SmolLM2's tokenizer, a context of 256); a case changes one thing of one.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from types import SimpleNamespace

import torch

import headwatch as hw
import headwatch.api as api
from headwatch.settings.tables import TABLES

#: A refusal slower than this read or computed what it should have refused first (each takes well under a
#: second alone; the bound is wide so that a loaded machine passes: speed is benchmarks/' business).
HANG_S = 10.0

ROOT = Path(__file__).resolve().parents[1]
PAIRS = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to"],
                          corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"],
                          answer=[" Mary"], distractor=[" John"]))


@dataclass
class Case:
    """A call of the function with ``args`` and ``kwargs`` (each a value, or a function of the context
    :func:`ctx` for what needs the model or its tables), refused with ``said`` in its message."""
    said: str
    args: tuple = ()
    kwargs: dict | None = None

    def call(self, ctx: dict) -> tuple[list, dict]:
        made = lambda v: v(ctx) if callable(v) and getattr(v, "__name__", "") == "<lambda>" else v
        return [made(a) for a in self.args], {k: made(v) for k, v in (self.kwargs or {}).items()}


def c(said: str, *args, **kwargs) -> Case:
    return Case(said, args, kwargs)


def changed(table: pd.DataFrame, row: int = 0, **cells) -> pd.DataFrame:
    """A copy of ``table`` (its attrs kept) with ``cells`` set in row ``row`` (a column's whole list when
    ``row`` is None)."""
    out = table.copy()
    for col, value in cells.items():
        if row is None:
            out[col] = value
        else:
            out[col] = out[col].astype(object)
            out.at[out.index[row], col] = value
    return out


def noted(table: pd.DataFrame, *without: str, **note) -> pd.DataFrame:
    """A copy of ``table`` whose note has ``note`` set and the keys ``without`` left out."""
    out = table.copy()
    given = {k: v for k, v in {**table.attrs.get("note", {}), **note}.items() if k not in without}
    out.attrs = {**table.attrs, "note": given}
    return out


def bare(table: pd.DataFrame, *keep: str) -> pd.DataFrame:
    """A copy of ``table`` with only the ``attrs`` of ``keep`` (none: no note, no guards, no tables)."""
    out = table.copy()
    out.attrs = {k: v for k, v in table.attrs.items() if k in keep}
    return out


def keep_attrs(table: pd.DataFrame, source: pd.DataFrame | None, guards: dict | None = None, **tables) -> pd.DataFrame:
    """``table`` with the ``attrs`` of ``source`` (its companion ``tables`` replaced by name, its ``guards`` set)."""
    table.attrs = dict(source.attrs) if source is not None else {}
    if tables:
        table.attrs["tables"] = api.Tables({**table.attrs.get("tables", {}), **tables})
    if guards is not None:
        table.attrs["guards"] = guards
    return table


def _circuits() -> pd.DataFrame:
    """hw.weight_circuits' table of the tiny model's shape, by hand, its composition scores on its attrs."""
    heads = pd.DataFrame([dict(layer=l, head=h, label=f"L{l}H{h}", kv_group=h // 2, ov_copying=0.1 * h - 0.1,
                               ov_copying_z=float(h), qk_same_token=0.0) for l in range(3) for h in range(4)])
    comp = pd.DataFrame([dict(sender=f"L{l}H{h}", sender_layer=l, sender_head=h, receiver=f"L{r}H{j}", receiver_layer=r,
                              receiver_head=j, input=i, group=None if i == "q" else j // 2, head_score=0.1,
                              score=0.1 + 0.01 * h, null_mean=0.1, null_sd=0.01, z=float(h))
                         for l in range(3) for h in range(4) for r in range(l + 1, 3) for j in range(4) for i in "qkv"])
    comp["group"] = comp["group"].astype("Int64")          # as hw.weight_circuits makes it: none for a query
    heads.attrs["tables"] = api.Tables(composition=comp)
    return heads


def _with_composition(composition: pd.DataFrame) -> pd.DataFrame:
    """:func:`_circuits` carrying ``composition`` instead."""
    out = _circuits()
    out.attrs["tables"] = api.Tables(composition=composition)
    return out


def _direct() -> pd.DataFrame:
    """hw.direct_effects' table of the tiny model's shape, by hand."""
    rows = [dict(component="embed", kind="embed", layer=None, head=None)] + [
        dict(component=f"L{l}H{h}", kind="head", layer=l, head=h) for l in range(3) for h in range(4)]
    return pd.DataFrame(rows).assign(clean=0.1, corrupted=0.0, direct=0.1, direct_sem=0.01).astype(
        {"layer": "Int64", "head": "Int64"})


def _direct_heads(layers: int = 3, heads: int = 4) -> pd.DataFrame:
    """hw.direct_effects' table with its heads beside patching (attrs["tables"]["heads"]) of a model of ``layers`` ×
    ``heads``, by hand."""
    beside = pd.DataFrame([dict(layer=l, head=h, label=f"L{l}H{h}", direct=0.1, total=0.2, indirect_share=0.5,
                                through_others=False) for l in range(layers) for h in range(heads)])
    out = _direct()
    out.attrs["tables"] = api.Tables(heads=beside)
    return out


def _verdict(rows: int = 5) -> pd.DataFrame:
    """hw.weights_vs_paths' table, by hand."""
    return pd.DataFrame([dict(comparison=f"c{i}", weights="w", activations="a", n=10, rho=0.1, low=-0.1, high=0.3,
                              null_low=-0.2, null_high=0.2, p_null=0.5, resolved=False, verdict="not resolved")
                         for i in range(rows)])


def _lens(positions: int = 3) -> pd.DataFrame:
    """hw.logit_lens' table, by hand: two runs, four depths, three positions."""
    return pd.DataFrame([dict(run=r, depth=d, after=f"L{d - 1}", position=p, token=f"t{p}", logit_diff=0.1 * d,
                              rank=10.0 - d, p_answer=0.1, prompts=1) for r in ("clean", "corrupted")
                         for d in range(4 if positions < 10 else 1) for p in range(positions)])


M = lambda x: x["m"]                       # the cases' shorthand for the model
T = lambda name: (lambda x: x[name])       # ... and for a table of the context


# ------------------------------------------------------------------ the registry: one entry a function
HOSTILE: dict[str, list[Case]] = {
    "load_config": [
        c("overlays[0]=5 is not a config file's path", 5),
        c("base=3 is not a config file's path", base=3),
        c("nope.yaml does not exist", "config/nope.yaml"),
        c("patching.top_kk: unknown key 'top_kk' under `patching`; did you mean `top_k`?", lambda x: x["typo.yaml"]),
        c("overlays[0]=None is not a config file's path", None),
        c("/dev/zero: not a config file: /dev/zero is a character device, not a regular file", "/dev/zero"),
        c("/dev/urandom is a character device, not a regular file", "/dev/urandom"),
        c("is a FIFO (named pipe), not a regular file", lambda x: x["fifo"]),
        c("is a folder, not a regular file", lambda x: x["empty"]),
        c("list.yaml holds a YAML list, not a mapping of config keys", lambda x: x["list.yaml"]),
        c("scalar.yaml holds a YAML str, not a mapping of config keys", lambda x: x["scalar.yaml"]),
    ],
    "load_model": [
        c("source='smollm' is not a model key", "smollm"),
        c("source=5 is a int", 5),
        c("holds no config.json", lambda x: x["empty"]),
        c("config.json", lambda x: x["malformed"]),
        c("num_attention_heads = 0 must be a positive integer", lambda x: x["no heads"]),
        c("has no adapter", lambda x: x["unknown family"]),
        c("source='someone/no-such-model': this hub id is not in this machine's Hugging Face cache",
          "someone/no-such-model"),
        c("device='gpu' is not a device", lambda x: x["tiny"], device="gpu"),
        c("device='cuda:99', but", lambda x: x["tiny"], device="cuda:99"),
        c("dtype='f32' is not one of", lambda x: x["tiny"], dtype="f32"),
        c("dtype='float16' on the CPU", lambda x: x["tiny"], dtype="float16", device="cpu"),
        c("is no model key, folder or hub id: File name too long", "x" * 10_000),
        c("source=Linear(in_features=2, out_features=2, bias=True) is a Linear of no family headwatch knows",
          lambda x: x["linear"]),
        c("source={} is not a model's entry of the config", {}),
        c("source['source']=5 is not a folder or a hub id", {"source": 5}),
        c("source['dtype']='float8' is not one of", lambda x: {"source": x["tiny"], "dtype": "float8"}),
        c("tokenizer_config.json names code of its own (auto_map: ", lambda x: x["auto_map"]),
        c("tokenizer_config.json names code of its own (auto_map: ", lambda x: {"source": x["auto_map"]}),
        c("model.safetensors is not a safetensors file headwatch can read: it ends before its header's length",
          lambda x: x["empty weights"]),
        c("model.safetensors is not a safetensors file headwatch can read: its header's length", lambda x: x["garbage weights"]),
        c("tokenizer.json is not a tokenizer the tokenizers library can read", lambda x: x["bad tokenizer"]),
        c("config.json is nested deeper than any model's JSON file", lambda x: x["deep config"]),
    ],
    "token_set": [
        c("name='inductoin' is not one of", M, "inductoin"),
        c("name=3 is not one of", M, 3),
        c("m='model' is a str, not a loaded model", "model", "induction"),
        c("config='abc' is not a config", M, "prose", config="abc"),
        c("config: sequences.half_length: 1 is less than the minimum of 2", M, "induction",
          config=lambda x: {**x["config"], "sequences": {**x["config"]["sequences"], "half_length": 1}}),
        c("config: sequences.half_length = 200 (× 2): 400 tokens, longer than the context", M, "induction",
          config=lambda x: {**x["config"], "sequences": {**x["config"]["sequences"], "half_length": 200}}),
    ],
    "sequences": [
        c("texts='a text' is not a list", M, "a text"),
        c("texts[1]=2 is not a non-empty text", M, ["a b c", 2]),
        c("texts[0]='   ' is not a non-empty text", M, ["   "]),
        c("texts[0]='a' gives 1 token", M, ["a"]),
        c("texts[0]='a' gives 1 token", M, ["a", "b c d"], repeat=True),
        c("ids[0]=[1.5, 2.7]: holds 1.5, not a token id", M, ids=[[1.5, 2.7]]),
        c("ids[0]=[1000000000, 5]: holds token id 1000000000, past the model's vocabulary", M, ids=[[10 ** 9, 5]]),
        c("ids[0]=[-1, 5]: holds -1, not a token id", M, ids=[[-1, 5]]),
        c("ids=5 is not a list", M, ids=5),
        c("repeat='no' is not True or False", M, ["a b c"], repeat="no"),
        c("give texts (a list of strings) or ids", M, ["a b"], ids=[[1, 2]]),
        c("texts=", M, ["x" * 100_001]),
        c("longer than the model's context of 256 positions", M, ["word " * 300]),
        c("ids[0] holds more than 256 token ids (the model's context is 256 positions)", M, ids=[range(3 * 10 ** 8)]),
        c("ids[0] holds more than 256 token ids", M, ids=lambda x: [np.arange(10 ** 7)]),
        c("texts holds more than 256 texts", M, lambda x: itertools.repeat("w1 w2")),
        c("texts holds more than 256 texts", M, ["w1 w2"] * 10 ** 6),
        c("ids holds more than 256 rows", M, ids=[[1, 2]] * 10 ** 6),
        c("texts[0]='abc \\ud800 def' holds '\\ud800' at character 4, half of a UTF-16 pair", M, ["abc \ud800 def"]),
    ],
    "attention_maps": [
        c("quantum=0 (attention.quantum): 0 is less than the minimum of 2", M, quantum=0),
        c("quantum=2.5 (attention.quantum): 2.5 is not of type 'integer'", M, quantum=2.5),
        c("quantum=nan (attention.quantum): nan is not a finite number", M, quantum=float("nan")),
        c("top=-1 (attention.top_predictions): -1 is less than the minimum of 1", M, top=-1),
        c("top=0 (attention.top_predictions)", M, top=0),
        c("top=100000 (attention.top_predictions)", M, top=100_000),
        c("phrases is a str, not a pandas DataFrame", M, "phrases"),
        c("phrases, row 0, column 'token_ids': holds token id 1000000", M,
          lambda x: changed(x["phrases"], token_ids=[1, 10 ** 6])),
    ],
    "head_scores": [
        c("batch=-1 (attention.batch): -1 is less than the minimum of 1", M, batch=-1),
        c("batch=0 (attention.batch)", M, batch=0),
        c("batch=1000000 (attention.batch)", M, batch=10 ** 6),
        c("batch=1.5 (attention.batch)", M, batch=1.5),
        c("prose, row 0: 1 token", M, T("rep"), lambda x: changed(x["prose"], token_ids=[5])),
        c("prose is a list, not a pandas DataFrame", M, T("rep"), [1, 2]),
        c("induction, row 0: its 16 token ids are not offset 0 and then two copies of half_length 9", M,
          lambda x: changed(x["rep"], half_length=9), T("prose")),
        c("induction, row 0: half_length 1", M, lambda x: changed(x["rep"], token_ids=[7, 7], half_length=1),
          T("prose")),
        c("m=None is a NoneType, not a loaded model", None),
    ],
    "cut_heads": [
        c("settings='abc' is not the ablation settings", M, T("scores"), settings="abc"),
        c("scores, row 0, column 'layer': layer 99 is past the 3 layers of the model", M,
          lambda x: changed(x["scores"], layer=99)),
        c("scores, row 0, column 'induction': 1000000000000.0 is not a fraction from 0 to 1", M,
          lambda x: changed(x["scores"], induction=1e12)),
        c("scores, row 1: layer 0, head 0 again", M, lambda x: changed(x["scores"], 1, head=0)),
        c("k=[0] (ablation.k[0]): 0 is less than the minimum of 1", M, T("scores"), k=[0]),
        c("k=3 (ablation.k): 3 is not of type 'array'; give a list, e.g. [3]", M, T("scores"), k=3),
        c("top_n=100 (ablation.top_n = 100): model", M, T("scores"), top_n=100, k=[1]),
        c("random_draws=-1 (ablation.random_draws)", M, T("scores"), random_draws=-1),
        c("method='max' (ablation.method)", M, T("scores"), method="max"),
        c("eval lacks the column 'half_length'", M, T("scores"), lambda x: x["rep"].drop(columns="half_length")),
        c("k=range(1, 100000000) (ablation.k): holds more than 4,096 entries, which is above its bound 4,096", M,
          T("scores"), k=range(1, 10 ** 8)),
        c("k=[1, 2, 3, 4, 5, 6, 7, 8, ...] (ablation.k): holds 999,999 entries, which is above its bound 4,096", M,
          T("scores"), k=list(range(1, 10 ** 6))),
    ],
    "cut_circuit": [
        c("settings=[1] is not the ablation settings", M, T("scores"), settings=[1]),
        c("scores, row 0, column 'prev': nan is not a finite number", M, lambda x: changed(x["scores"], prev=np.nan)),
        c("circuit is a str, not a pandas DataFrame", M, T("scores"), "circuit"),
        c("settings (ablation.circuit.half_threshold): 2 is greater than the maximum of 1", M, T("scores"), circuit=None,
          settings=lambda x: {**x["config"]["ablation"], "circuit": {"half_threshold": 2}}),
    ],
    "cut_each_head": [
        c("phrases lacks the column 'expected_id'", M, lambda x: x["phrases"].drop(columns="expected_id")),
        c("prose, row 0: 1 token", M, T("phrases"), lambda x: changed(x["prose"], token_ids=[5])),
        c("settings (ablation.attribution.together): 100,000 is above its bound 4,096", M,
          settings=lambda x: {**x["config"]["ablation"], "attribution": {
              **x["config"]["ablation"]["attribution"], "together": 100_000}}),
        c("settings=5 is not the ablation settings", M, settings=5),
    ],
    "prompt_pairs": [
        c("pairs=5 is a int", M, 5),
        c("pairs lacks the column 'answer' (it has 'anwser': did you mean 'answer'?)", M,
          PAIRS.rename(columns={"answer": "anwser"})),
        c("pairs, row 0: answer = ' Maryland and' is split by the tokenizer into 2 tokens", M,
          PAIRS.assign(answer=[" Maryland and"])),
        c("pairs='nope.csv'", M, "nope.csv"),
        c("model=5 is not a non-empty text", M, PAIRS, model=5),
        c("n=0 (patching.n): 0 is less than the minimum of 2", M, n=0),
        c("names=['Annabellarina', 'John', 'Alice', 'Bob', 'Tom', 'Kate'] (patching.names[0]): ('Annabellarina' with "
          "its leading space) = ' Annabellarina' is split by the tokenizer", M,
          names=["Annabellarina", "John", "Alice", "Bob", "Tom", "Kate"]),
        c("guard_prompts=8 (patching.guard_prompts = 8): more than the patching.n = 4 prompts", M, n=4,
          guard_prompts=8),
        c("m='x' is a str, not a loaded model", "x", PAIRS),
        c("pairs is given twice, as the argument in its place and as pairs=...; to set the setting 'pairs' of the same "
          "name, give it in settings=dict(pairs=...)", M, PAIRS, pairs="pairs.csv"),
    ],
    "patch_heads": [
        c("prompts, row 0: answer = ' Maryland and' is split by the tokenizer into 2 tokens", M,
          PAIRS.assign(answer=[" Maryland and"])),
        c("prompts, row 0: the clean prompt gives 14 tokens and the corrupted one 12", M,
          PAIRS.assign(corrupted=["When Alice went to the shop, Tom gave a drink to"])),
        c("top_k=0 (patching.top_k)", M, T("prompts"), top_k=0),
        c("rounding_factor=1e+300 (patching.rounding_factor)", M, T("prompts"), rounding_factor=1e300),
        c("top_k=13 (patching.top_k = 13): model", M, T("prompts"), top_k=13),
        c("topk=3 (patching.topk): unknown key 'topk' under `patching`; did you mean `top_k`?", M, T("prompts"),
          topk=3),
        c("resid='yes' is not True or False", M, T("prompts"), resid="yes"),
        c("positions=1 is not True or False", M, T("prompts"), positions=1),
        c("prompts, row 0, column 'answer_id': token id 1000000 is past the model's vocabulary", M,
          lambda x: changed(x["prompts"], answer_id=10 ** 6)),
        c("phrases is a str, not a pandas DataFrame", M, T("prompts"), phrases="x"),
        c("settings=5 is not the patching settings", M, T("prompts"), 5),
    ],
    "patch_positions": [
        c("heads, row 0, column 'layer': layer 99 is past the 3 layers of the model", M, T("prompts"),
          lambda x: changed(x["heads"], layer=99)),
        c("heads, row 0, column 'head': -1 is not a whole number >= 0", M, T("prompts"),
          lambda x: changed(x["heads"], head=-1)),
        c("positions_all_heads=1000 (patching.positions_all_heads = 1000): model", M, T("prompts"), T("heads"),
          positions_all_heads=1000),
        c("prompts is a list, not a pandas DataFrame", M, [1], T("heads")),
    ],
    "patch_kv_groups": [
        c("kv_prompts=0 (patching.kv_prompts)", M, T("prompts"), kv_prompts=0),
        c("prompts has no rows", M, lambda x: x["prompts"].iloc[:0]),
        c("settings='x' is not the patching settings", M, T("prompts"), "x"),
    ],
    "attribution": [
        c("top_k=0 (patching.top_k)", M, T("prompts"), top_k=0),
        c("top_k=13 (patching.top_k = 13): model", M, T("prompts"), top_k=13),
        c("top_k=100000 (patching.top_k)", M, T("prompts"), top_k=100_000),
        c("graddrop='yes' is not True or False", M, T("prompts"), graddrop="yes"),
        c("batch=-1 (patching.batch)", M, T("prompts"), batch=-1),
        c("the prompts differ in length", M, lambda x: x["uneven"]),
    ],
    "path_patching": [
        c("heads=None: the receivers are the top heads of hw.patch_heads(m, prompts)'s table", M, T("prompts"), None),
        c("receivers=[(99, 0)] (circuits.receivers[0] = layer 99, head 0): model", M, T("prompts"), T("heads"),
          receivers=[(99, 0)]),
        c("receivers=[(0, 1)] (circuits.receivers[0] = layer 0, head 1): a receiver in layer 0", M, T("prompts"),
          T("heads"), receivers=[(0, 1)]),
        c("receivers_top_k=0 (circuits.receivers_top_k)", M, T("prompts"), T("heads"), receivers_top_k=0),
        c("patching='abc' is not the patching settings", M, T("prompts"), T("heads"), patching="abc"),
        c("heads lacks the column 'score'", M, T("prompts"), lambda x: x["heads"].drop(columns="score")),
        c("(circuits.receivers): holds 1,000,000 entries, which is above its bound 1,024", M, T("prompts"), T("heads"),
          receivers=[(1, 0)] * 10 ** 6),
    ],
    "edge_scores": [
        c("score_batch=-1 (edges.score_batch): -1 is less than the minimum of 1", M, T("prompts"), score_batch=-1),
        c("fractions=[2] (edges.fractions[0]): 2 is greater than the maximum of 1", M, T("prompts"), fractions=[2]),
        c("ig_steps=1000000000 (edges.ig_steps)", M, T("prompts"), ig_steps=10 ** 9),
        c("rounding_factor=inf (edges.rounding_factor): inf is not a finite number", M, T("prompts"),
          rounding_factor=float("inf")),
        c("(edges.fractions): holds 1,000,000 entries, which is above its bound 1,000", M, T("prompts"),
          fractions=[0.5] * 10 ** 6),
        c("methods=['eap', 'eap', 'eap', 'eap', 'eap', 'eap', 'eap', 'eap', ...] (edges.methods): holds 1,000,000 "
          "entries; each of ['eap', 'eap-ig'] at most once", M, T("prompts"), methods=["eap"] * 10 ** 6),
        c("tolerance=1e-05 (edges.tolerance): 'tolerance' is now `edges.rounding_factor`", M, T("prompts"),
          tolerance=1e-5),
        c("method='eap' (edges.method): unknown key 'method' under `edges`; did you mean `methods`?", M,
          T("prompts"), method="eap"),
        c("prompts, row 0: answer_id and distractor_id are the same token", M,
          lambda x: x["prompts"].assign(distractor_id=x["prompts"]["answer_id"])),
        c("prompts, row 0: the clean and the corrupted ids are the same", M,
          lambda x: x["prompts"].assign(corrupted_ids=x["prompts"]["clean_ids"])),
        c("prompts, row 0: the clean prompt gives 14 tokens and the corrupted one 13", M,
          lambda x: x["prompts"].assign(corrupted_ids=[ids[:-1] for ids in x["prompts"]["corrupted_ids"]])),
        c("prompts is given twice, as the argument in its place and as prompts=...; to set the setting 'prompts' of "
          "the same name, give it in settings=dict(prompts=...)", M, T("prompts"), prompts=1),
    ],
    "edge_faithfulness": [
        c("edges carries no node table", M, T("prompts"), lambda x: bare(x["edges"])),
        c("edges, row 0, column 'eap': '0.5' is not a finite number", M, T("prompts"),
          lambda x: changed(x["edges"], eap="0.5")),
        c("fractions=[0] (edges.fractions[0])", M, T("prompts"), T("edges"), fractions=[0]),
        c("edges lacks 1 of the model's 190 edges (L2 MLP -> logits)", M, T("prompts"),
          lambda x: keep_attrs(x["graph edges"].iloc[:-1].copy(), x["graph edges"])),
        c("and holds 1 edges the model's graph has not (L99H99 -> logits)", M, T("prompts"),
          lambda x: keep_attrs(x["graph edges"].assign(sender=[*x["graph edges"]["sender"][:-1], "L99H99"]),
                               x["graph edges"])),
        c("edges.attrs['tables']['nodes'] lacks 1 of the model's 16 sender nodes (L2 MLP)", M, T("prompts"),
          lambda x: keep_attrs(x["graph edges"].copy(), x["graph edges"],
                               nodes=x["graph edges"].attrs["tables"]["nodes"].iloc[:-1])),
    ],
    "guards_of": [
        c("table is a list, not a pandas DataFrame", [1]),
        c("table carries no guard record", pd.DataFrame(dict(a=[1]))),
        c("table has no rows", pd.DataFrame()),
        c("table's guard record (attrs['guards']) holds no guard (no entry that names its 'guard'; passed: False)",
          lambda x: keep_attrs(pd.DataFrame(dict(a=[1])), None, guards=dict(passed=False, x=dict(y=1)))),
    ],
    "top_heads": [
        c("n=-1 is not a whole number >= 1", T("scores"), "induction", -1),
        c("n=1.5 is not a whole number >= 1", T("scores"), "induction", 1.5),
        c("n=500: table holds 12 heads; ask for at most that many", T("scores"), "induction", 500),
        c("table holds layer 0, head 0 twice (rows 0 and 0); a table is read by its key (layer, head)",
          lambda x: pd.concat([x["scores"], x["scores"]]), "induction", 3),
        c("column='inductoin' is not one of", T("scores"), "inductoin", 3),
        c("table is a list, not a pandas DataFrame", [1], "induction", 3),
        c("table, row 0, column 'layer': -1 is not a whole number >= 0", lambda x: changed(x["scores"], layer=-1),
          "induction", 3),
        c("table, row 0, column 'induction': 'high' is not a finite number",
          lambda x: changed(x["scores"], induction="high"), "induction", 3),
    ],
    "plot_scores": [
        c("scores, row 0, column 'sink': 1000000000000.0 is not a fraction from 0 to 1",
          lambda x: changed(x["scores"], sink=1e12)),
        c("scores, row 0, column 'layer': -1 is not a whole number >= 0", lambda x: changed(x["scores"], layer=-1)),
        c("scores, row 0, column 'prev': nan is not a finite number", lambda x: changed(x["scores"], prev=np.nan)),
        c("scores is a list, not a pandas DataFrame", [1]),
        c("scores would draw 20,000 heads, more than a figure draws (16,384)", lambda x: x["many scores"]),
    ],
    "plot_cuts": [
        c("cuts, row 0, column 'targeted_copy2': nan is not a finite number",
          lambda x: changed(x["cuts"], targeted_copy2=np.nan)),
        c("cuts, row 0, column 'k': -1 is not a whole number >= 0", lambda x: changed(x["cuts"], k=-1)),
        c("cuts lacks the column 'random_copy1_min'", lambda x: x["cuts"].drop(columns="random_copy1_min")),
        c("cuts holds method 'zero', k 1 twice (rows 0 and 2)", lambda x: pd.concat([x["cuts"], x["cuts"].iloc[[0]]],
                                                                                    ignore_index=True)),
    ],
    "plot_heads": [
        c("heads, row 0, column 'layer': -1 is not a whole number >= 0", lambda x: changed(x["heads"], layer=-1)),
        c("heads, row 0, column 'layer': layer 1000000 is past the 512 layers of the largest model",
          lambda x: changed(x["heads"], layer=10 ** 6)),
        c("heads, row 1: layer 0, head 0 again", lambda x: changed(x["heads"], 1, head=0)),
        c("heads, row 0, column 'score': inf is not a finite number", lambda x: changed(x["heads"], score=np.inf)),
        c("heads carries no note", lambda x: bare(x["heads"])),
        c("heads's note (attrs['note']), 'exact_seconds': 'fast' is not a finite number",
          lambda x: noted(x["heads"], exact_seconds="fast")),
        c("heads would draw 40,401 cells (layers × heads)", lambda x: changed(x["heads"], layer=200, head=200)),
    ],
    "plot_paths": [
        c("paths, row 0, column 'receiver_layer': layer 10000000 is past the 512 layers",
          lambda x: changed(x["paths"], receiver_layer=10 ** 7)),
        c("paths, row 0: receiver layer 0 is not after sender layer 0", lambda x: changed(x["paths"], receiver_layer=0)),
        c("paths, row 0, column 'input': 'x' is not one of ['q', 'k', 'v']", lambda x: changed(x["paths"], input="x")),
        c("paths's note (attrs['note']) lacks 'edge_threshold'", lambda x: noted(x["paths"], "edge_threshold")),
        c("paths would draw 2,500 arrows", lambda x: x["many paths"]),
        c("paths holds sender_layer 0, sender_head 0, receiver_layer 2, receiver_head 0, input 'q' twice",
          lambda x: keep_attrs(pd.concat([x["paths"], x["paths"].iloc[[0]]]), x["paths"])),
    ],
    "plot_edges": [
        c("n=-1 is not a whole number >= 1", T("edges"), n=-1),
        c("n=0 is not a whole number >= 1", T("edges"), n=0),
        c("n=1.5 is not a whole number >= 1", T("edges"), n=1.5),
        c("n would draw 1,000,000 bars a panel, more than a figure draws (2,000)", T("edges"), n=10 ** 6),
        c("edges, row 0, column 'eap': '0.5' is not a finite number", lambda x: changed(x["edges"], eap="0.5")),
        c("edges, row 1, column 'eap_ig': nan is not a finite number", lambda x: changed(x["edges"], 1, eap_ig=np.nan)),
        c("edges has no score column (eap or eap_ig)", lambda x: x["edges"].drop(columns=["eap", "eap_ig"])),
    ],
    "plot_faithfulness": [
        c("curves, row 0, column 'fraction': 0.0 is not a fraction above 0 and at most 1",
          lambda x: changed(x["curves"], fraction=0.0)),
        c("curves, row 0, column 'fraction': -1.0 is not a fraction above 0", lambda x: changed(x["curves"], fraction=-1.0)),
        c("curves, row 0, column 'faithfulness': nan is not a finite number",
          lambda x: changed(x["curves"], faithfulness=np.nan)),
        c("curves carries no areas", lambda x: bare(x["curves"], "note")),
        c("curves, row 0, column 'ranking': 'x' is not one of", lambda x: changed(x["curves"], ranking="x")),
        c("curves.attrs['tables']['areas'], row 0, column 'cmd': 'x' is not a finite number",
          lambda x: keep_attrs(x["curves"].copy(), x["curves"], areas=x["curves"].attrs["tables"]["areas"].assign(cmd="x"))),
    ],
    "explore": [
        c("m=None is a NoneType, not a loaded model", None, "a b c"),
        c("texts is a int", M, 5),
        c("texts[0] is '  ', not a non-empty text", M, ["  "]),
        c("max_tokens=0", M, "a b c", max_tokens=0),
        c("max_tokens=True", M, "a b c", max_tokens=True),
        c("max_mb=0", M, "a b c", max_mb=0),
        c("max_mb=nan", M, "a b c", max_mb=float("nan")),
        c("is not more than the page's own code", M, "a b c", max_mb=0.01),
        c("scores, row 0, column 'prev'", M, "a b c", scores=lambda x: changed(x["scores"], prev=np.nan)),
        c("heads lacks the column 'logit_diff'", M, "a b c", heads=lambda x: x["heads"]),
        c("heads, row 0, column 'layer': layer 1000000 is past the 3 layers", M, "a b c",
          heads=lambda x: changed(x["heads"].assign(logit_diff=0.1), layer=10 ** 6)),
        c("paths, row 0, column 'score'", M, "a b c",
          paths=lambda x: changed(x["paths"].assign(rank_into_receiver=1), score="x")),
        c("edges has no score column (eap or eap_ig)", M, "a b c", edges=lambda x: bare(x["edges"])[["sender", "receiver"]]),
        c("cuts is a list, not a pandas DataFrame", M, "a b c", cuts=[1, 2]),
        c("texts, row 5, column 'weight': nan is not a finite number", M,
          lambda x: keep_attrs(changed(x["maps"], 5, weight=np.nan), x["maps"])),
        c("texts holds phrase 'noise', layer 0, head 0, row 0, col 0 twice", M,
          lambda x: keep_attrs(pd.concat([x["maps"], x["maps"].iloc[[0]]]), x["maps"])),
        c("lens: give hw.weight_circuits(m)'s table", M, "a b c", lens=5),
        c("lens holds no hw.weight_circuits(m) table", M, "a b c", lens=lambda x: [_direct()]),
        c("lens[1] is a second circuits table", M, "a b c", lens=lambda x: [_circuits(), _circuits()]),
        c("lens carries no composition scores", M, "a b c", lens=lambda x: bare(_circuits())),
        c("lens lacks the column 'ov_copying_z'", M, "a b c", lens=lambda x: _circuits().drop(columns="ov_copying_z")),
        c("lens's direct_effects table's heads, row 0, column 'layer': layer 3 is past the 3 layers", M, "a b c",
          lens=lambda x: [_circuits(), _direct_heads(4, 4).pipe(lambda t: keep_attrs(t, t, heads=t.attrs["tables"][
              "heads"].iloc[::-1].reset_index(drop=True)))]),
        c("lens's direct_effects table's heads has 8 rows, not one per head of the model's 3 layers × 4 heads", M,
          "a b c", lens=lambda x: [_circuits(), _direct_heads(2, 4)]),
        c("lens's weights_vs_paths table has 1,000,000 rows, more than the 5 comparisons", M, "a b c",
          lens=lambda x: [_circuits(), pd.DataFrame(dict(comparison=range(10 ** 6)))]),
        c("lens's weights_vs_paths table lacks the column 'null_high'", M, "a b c",
          lens=lambda x: [_circuits(), _verdict().drop(columns="null_high")]),
        c("lens's weights_vs_paths table, row 0, column 'rho': nan is not a finite number", M, "a b c",
          lens=lambda x: [_circuits(), changed(_verdict(), rho=np.nan)]),
        c("lens's weights_vs_paths table holds comparison 'c0' twice", M, "a b c",
          lens=lambda x: [_circuits(), changed(_verdict(), 1, comparison="c0")]),
    ],
    "direct_effects": [
        c("prompts is a str, not a pandas DataFrame", M, "prompts"),
        c("heads lacks the column 'logit_diff'", M, T("prompts"), T("heads")),
        c("heads were patched on 1 prompts, prompts holds 2", M, T("uneven"),
          lambda x: x["heads"].assign(logit_diff=0.1, score_rank=range(1, 13))),
        c("heads has 3 rows, not one per head", M, T("prompts"),
          lambda x: x["heads"].assign(logit_diff=0.1, score_rank=range(1, 13)).head(3)),
        c("heads carries no note (attrs['note']) saying the clean and corrupted logit differences", M, T("prompts"),
          lambda x: bare(x["heads"].assign(logit_diff=0.1, score_rank=range(1, 13)))),
        c("heads' note (attrs['note']) has corrupted_logit_diff = 'x', not a finite number", M, T("prompts"),
          lambda x: noted(x["heads"].assign(logit_diff=0.1, score_rank=range(1, 13)), corrupted_logit_diff="x")),
        c("batch=0 (lens.batch): 0 is less than the minimum of 1", M, T("prompts"), batch=0),
        c("settings=5 is not the lens settings", M, T("prompts"), settings=5),
    ],
    "logit_lens": [
        c("rounding_factor=inf (lens.rounding_factor): inf is not a finite number", M, T("prompts"),
          rounding_factor=float("inf")),
        c("prompts has no rows", M, lambda x: x["prompts"].iloc[:0]),
        c("batch=100000 (lens.batch)", M, T("prompts"), batch=100_000),
        c("colour=1 (lens.colour): unknown key 'colour' under `lens`", M, T("prompts"), colour=1),
    ],
    "weight_circuits": [
        c("qk_offset=1000 (lens.qk_offset", M, qk_offset=1000),
        c("null_draws=1 (lens.null_draws): 1 is less than the minimum of 2", M, null_draws=1),
        c("seed=-1 (lens.seed)", M, seed=-1),
        c("m='m' is a str, not a loaded model", "m"),
    ],
    "weights_vs_paths": [
        c("circuits carries no composition scores", lambda x: bare(_circuits()), T("paths")),
        c("confidence=1.0 (lens.confidence)", lambda x: _circuits(), T("paths"), confidence=1.0),
        c("paths, row 0, column 'input': 'x' is not one of", lambda x: _circuits(),
          lambda x: changed(x["paths"], input="x")),
        c("scores lacks the column 'induction'", lambda x: _circuits(), T("paths"),
          lambda x: x["scores"].drop(columns="induction")),
        c("circuits, row 1: layer 0, head 0 again", lambda x: changed(_circuits(), 1, head=0), T("paths")),
        c("scores has 20,000 rows, L0H4 among them, not one per head of the circuits' model (3 layers × 4 heads)",
          lambda x: _circuits(), T("paths"), T("many scores")),
        c("scores has 4 rows, not one per head of the circuits' model (3 layers × 4 heads)", lambda x: _circuits(),
          T("paths"), lambda x: x["scores"].head(4)),
        c("circuits.attrs['tables']['composition'] lacks the column 'group'", lambda x: _with_composition(
            _circuits().attrs["tables"]["composition"].drop(columns="group")), T("paths")),
        c("circuits.attrs['tables']['composition'], row 1, column 'group': 'x' is not", lambda x: _with_composition(
            changed(_circuits().attrs["tables"]["composition"], 1, group="x")), T("paths")),
        c("paths holds 1 edges with no composition score, the first L0H0 -> L2H0 (q)", lambda x: _with_composition(
            _circuits().attrs["tables"]["composition"].query("not (sender == 'L0H0' and receiver == 'L2H0' and "
                                                             "input == 'q')")), T("paths")),
    ],
    "plot_direct": [
        c("direct lacks the column 'kind'", pd.DataFrame(dict(component=["x"]))),
        c("direct, row 1, column 'clean': nan is not a finite number", lambda x: changed(_direct(), 1, clean=np.nan)),
        c("direct has no head rows", lambda x: _direct().iloc[:1]),
        c("direct is a list, not a pandas DataFrame", [1]),
    ],
    "plot_logit_lens": [
        c("lens has no rows", pd.DataFrame()),
        c("lens, row 0, column 'run': 'x' is not one of", lambda x: changed(_lens(), run="x")),
        c("lens, row 0, column 'p_answer': 2.0 is not a fraction from 0 to 1", lambda x: changed(_lens(), p_answer=2.0)),
        c("lens would draw 2,001 positions (a column and a token's label each), more than a figure draws (2,000)",
          lambda x: _lens(2001)),
    ],
    "plot_weights": [
        c("circuits carries no composition scores", lambda x: bare(_circuits())),
        c("circuits.attrs['tables']['composition'], row 0: receiver layer 0 is not after sender layer 0",
          lambda x: _with_composition(changed(_circuits().attrs["tables"]["composition"], receiver_layer=0))),
        c("paths, row 0, column 'input': 'x' is not one of", lambda x: _circuits(),
          lambda x: changed(x["paths"], input="x")),
        c("circuits would draw 20,100 cells (layers × heads), more than a figure draws (16,384)",
          lambda x: keep_attrs(pd.DataFrame(dict(layer=[200], head=[99], kv_group=[0], ov_copying=[0.1], ov_copying_z=[1.0],
                                                 qk_same_token=[0.0])), _circuits())),
        c("paths would draw 16,385 points (a path each), more than a figure draws (16,384)", lambda x: _circuits(),
          lambda x: pd.DataFrame(dict(sender_layer=0, sender_head=np.arange(16385) % 100, receiver_layer=1 + np.arange(
              16385) // 100, receiver_head=0, input="q", score=0.1))),
    ],
    "set_progress": [
        c("on='False' is not True or False", "False"),
        c("on=1 is not True or False", 1),
        c("on=None is not True or False", None),
    ],
}
"""Each public function's hostile cases (``hw.explore``'s go here too: one entry)."""

FUNCTIONS = [name for name in hw.__all__ if name not in api.ERRORS and name not in api.WARNINGS]


# ------------------------------------------------------------------ the context: a tiny model and its tables
@pytest.fixture(scope="module")
def ctx(tiny_model_dir, tmp_path_factory):
    """The tiny model, the tables every function takes (made by hand where a model pass would make them),
    and model folders that are not models."""
    m = hw.load_model(tiny_model_dir)
    hw.set_progress(False)
    tmp = tmp_path_factory.mktemp("hostile")
    heads = pd.DataFrame([dict(layer=l, head=h, label=f"L{l}H{h}", score=0.1 * h - 0.05 * l,
                               estimate_score=0.09 * h) for l in range(3) for h in range(4)])
    heads.attrs["note"] = dict(prompts=1, clean_logit_diff=2.0, corrupted_logit_diff=-1.0, exact_seconds=1.0,
                               estimate_seconds=0.1, top10=10, estimate_top10_overlap=8)
    scores = pd.DataFrame([dict(layer=l, head=h, kv_group=h // 2, sink=0.5, prev=0.1 * h, self=0.05, induction=0.02 * l)
                           for l in range(3) for h in range(4)])
    paths = pd.DataFrame([dict(sender=f"L{l}H{h}", sender_layer=l, sender_head=h, receiver="L2H0", receiver_layer=2,
                               receiver_head=0, input=i, group=0, logit_diff=0.1, score=0.2 * h)
                          for l in range(2) for h in range(4) for i in "qkv"])
    paths.attrs["note"] = dict(edge_threshold=0.05, receivers="L2H0", prompts=1, clean_logit_diff=2.0,
                               corrupted_logit_diff=-1.0)
    many = pd.DataFrame([dict(sender_layer=0, sender_head=h % 50, receiver_layer=1, receiver_head=h // 50, input="q",
                              score=1.0) for h in range(2500)])
    many.attrs["note"] = dict(paths.attrs["note"])
    edges = pd.DataFrame(dict(edge=range(4), sender=["input", "L0H0", "L0H1", "L1H0"], receiver=["L1H0.q"] * 3 + ["logits"],
                              eap=[0.5, 0.25, -0.1, 0.3], eap_ig=[0.4, 0.2, -0.2, 0.1]))
    edges.attrs["tables"] = api.Tables(nodes=pd.DataFrame(dict(sender=["input"], atp=[0.1])))
    curves = pd.DataFrame(dict(method=["eap", "eap", "random"], ranking=["signed", "absolute", "none"], draw=[-1, -1, 0],
                               fraction=[0.5, 0.5, 0.5], edges=[2, 2, 2], kept=[2, 2, 2], metric=[1.0, 1.0, 0.5],
                               faithfulness=[0.8, 0.9, 0.1]))
    curves.attrs["note"] = dict(edges=4, prompts=1, full=2.0, empty=-1.0)
    curves.attrs["tables"] = api.Tables(areas=pd.DataFrame(dict(method=["eap"], draw=[-1], cpr=[0.4], cmd=[0.2])))
    cuts = pd.DataFrame([dict(dict.fromkeys([name for name, _ in TABLES["cuts"]], 1), method="zero", k=k)
                         for k in (1, 2)])
    prompts = hw.prompt_pairs(m, PAIRS)
    uneven = hw.prompt_pairs(m, pd.concat([PAIRS, pd.DataFrame(dict(clean=["Then Anna and Paul talked, Paul said to"],
                                                                     corrupted=["Then Kate and Mark talked, Jack said to"],
                                                                     answer=[" Anna"], distractor=[" Paul"]))]))
    folders = {}
    for name, change in (("malformed", "{not json"), ("no heads", {"num_attention_heads": 0}),
                         ("unknown family", {"model_type": "no_such_family"})):
        folder = tmp / name.replace(" ", "_")
        shutil.copytree(tiny_model_dir, folder)
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(change if isinstance(change, str) else json.dumps({**raw, **change}))
        folders[name] = str(folder)
    for name, change in (("auto_map", None), ("empty weights", b""), ("garbage weights", b"\xff" * 64),
                         ("bad tokenizer", '{"not": "a tokenizer"}'), ("deep config", "[" * 100_000 + "]" * 100_000)):
        folder = tmp / name.replace(" ", "_")
        shutil.copytree(tiny_model_dir, folder)
        if name == "auto_map":
            raw = json.loads((folder / "tokenizer_config.json").read_text())
            (folder / "tokenizer_config.json").write_text(json.dumps(dict(raw, auto_map={"AutoTokenizer": ["x.X", None]})))
        elif isinstance(change, bytes):
            (folder / "model.safetensors").write_bytes(change)
        else:
            (folder / ("tokenizer.json" if name == "bad tokenizer" else "config.json")).write_text(change)
        folders[name] = str(folder)
    from headwatch.circuits.graph import EdgeGraph

    graph = EdgeGraph.of(m.adapter)
    graph_edges = graph.edges().assign(eap=0.1, eap_ig=0.2)
    graph_edges.attrs["tables"] = api.Tables(nodes=graph.senders.assign(atp=0.3))
    (tmp / "empty").mkdir()
    os.mkfifo(tmp / "fifo")
    (tmp / "typo.yaml").write_text("patching:\n  top_kk: 3\n")
    (tmp / "list.yaml").write_text("- patching\n- top_k\n")
    (tmp / "scalar.yaml").write_text("just a line of text\n")
    return dict(m=m, tiny=str(tiny_model_dir), config=hw.load_config(), prompts=prompts, uneven=uneven, heads=heads,
                scores=scores, paths=paths, edges=edges, curves=curves, cuts=cuts, **{"many paths": many},
                **{"many scores": pd.DataFrame([dict(layer=l, head=h, sink=0.5, prev=0.1, self=0.1, induction=0.1)
                                                 for l in range(20) for h in range(1000)])},
                rep=hw.sequences(m, ["a b c d e f g h"], repeat=True), prose=hw.sequences(m, ["The cat sat."]),
                phrases=hw.token_set(m, "phrases"), empty=str(tmp / "empty"), **{"typo.yaml": str(tmp / "typo.yaml")},
                fifo=str(tmp / "fifo"), **{"list.yaml": str(tmp / "list.yaml"), "scalar.yaml": str(tmp / "scalar.yaml")},
                linear=torch.nn.Linear(2, 2), maps=hw.attention_maps(m, hw.token_set(m, "phrases").head(1)),
                **{"graph edges": graph_edges}, **folders)


@pytest.fixture
def watched(ctx, monkeypatch):
    """Counts the tiny model's forward passes; a figure made fails the case."""
    import matplotlib.pyplot as plt

    passes = []
    handle = ctx["m"].model.register_forward_pre_hook(lambda *a: passes.append(1))
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: pytest.fail("a figure was drawn"))
    monkeypatch.setattr(plt, "figure", lambda *a, **k: pytest.fail("a figure was drawn"))
    yield passes
    handle.remove()


# ------------------------------------------------------------------ the test, made from hw.__all__
@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_public_function_refuses_what_it_cannot_use(name, ctx, watched, capsys, monkeypatch):
    cases = HOSTILE.get(name)
    assert cases, f"hw.{name} has no hostile cases: register them in HOSTILE (tests/test_hostile_api.py)"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    errors = tuple(getattr(hw, e) for e in api.ERRORS)
    for case in cases:
        args, kwargs = case.call(ctx)
        t0 = time.perf_counter()
        with pytest.raises(Exception) as caught:
            getattr(hw, name)(*args, **kwargs)
        seconds = time.perf_counter() - t0
        err, message = caught.value, str(caught.value)
        what = f"hw.{name} {case.said!r}: {type(err).__name__}: {message}"
        assert isinstance(err, errors), what
        assert caught.traceback[-1].path.is_relative_to(ROOT / "headwatch"), f"{what} (raised outside headwatch)"
        chained = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        assert chained is None or type(chained).__module__.startswith("headwatch"), f"{what} (chained to {chained!r})"
        assert message.startswith(f"hw.{name}: ") and "\n" not in message and case.said in message, what
        assert seconds < HANG_S, f"{what} ({seconds:.2f} s: it read or computed what it should refuse first)"
        assert watched == [], f"{what} (a model pass ran first)"
        out = capsys.readouterr()
        assert out.out == out.err == "", f"{what} (printed {out.out + out.err!r})"


def test_a_function_without_cases_fails_the_test():
    """The registry covers hw.__all__ and nothing else: a new public function fails until its cases are here."""
    assert set(HOSTILE) == set(FUNCTIONS)


def test_what_the_checks_must_not_refuse(ctx):
    """The other side of each check: any iterable of texts, kept whole (a generator was read by the check and
    gave no rows); a keyword that is a config key, within its range; a table the functions return."""
    m = ctx["m"]
    texts = ["The cat sat on the mat.", "Rain fell all night."]
    for given in (iter(texts), (t for t in texts), tuple(texts), pd.Series(texts)):
        assert list(hw.sequences(m, given).text) == texts
    assert len(hw.sequences(m, ids=[np.array([5, 6, 7]), [8, 9]], repeat=True)) == 2
    assert hw.top_heads(ctx["scores"], "prev", 2) == [(0, 3), (1, 3)]
    hw.set_progress(True)
    hw.set_progress(np.bool_(False))
    maps = hw.attention_maps(m, ctx["phrases"].head(1), quantum=8, top=3)
    assert set(maps.weight * 8) <= set(range(9)) and len(maps.attrs["tables"]["predictions"]) == 3


def test_a_hub_id_not_in_the_cache_is_refused_at_once_where_the_hub_cannot_be_reached(monkeypatch):
    """Not offline by HF_HUB_OFFLINE, but no network: one connection attempt says so at once (the hub
    client's own retries took about 25 s before its error); where the hub answers, nothing is refused."""
    import socket
    import time

    from headwatch.model.sources import hub_unreachable

    def no_network(address, timeout=None):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example:8443")
    monkeypatch.setattr(socket, "create_connection", no_network)
    t0 = time.perf_counter()
    with pytest.raises(hw.ModelNotFoundError, match=r"^hw.load_model: source='someone/no-such-model': this hub id is "
                       r"not in this machine's Hugging Face cache, and hub.example:8443 cannot be reached \(Name or "
                       r"service not known\); download it"):
        hw.load_model("someone/no-such-model")
    assert time.perf_counter() - t0 < HANG_S       # one connection attempt, not the hub client's retries (25 s)
    asked = []
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout=None: asked.append((address, timeout))
                        or SimpleNamespace(close=lambda: None))
    assert hub_unreachable() is None and asked == [(("hub.example", 8443), 3.0)]


def test_each_cut_is_refused_only_for_the_settings_it_uses(ctx, monkeypatch):
    """The protocol's ablation (k up to 8 of the top 8) does not fit the tiny model's 12 heads: the top-k
    cut, which draws its random control from the other 4, is refused for it; the circuit's cut (its
    control: ``random_draws`` heads outside the top 8) and the cut of every head alone read no k, and
    reach their computation (here a stand-in that stops the call)."""
    from headwatch.ablation import experiments

    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached

    m, scores, rep = ctx["m"], ctx["scores"], ctx["rep"]
    with pytest.raises(hw.ConfigError, match=r"^hw.cut_heads: .*ablation.k = \[1, 2, 3, 5, 8\]: the random control"):
        hw.cut_heads(m, scores, rep)
    for name in ("run_circuit", "run_attribution"):
        monkeypatch.setattr(experiments, name, reached)
    with pytest.raises(Reached):
        hw.cut_circuit(m, scores, rep, rep, random_draws=2)
    with pytest.raises(hw.ConfigError, match=r"^hw.cut_circuit: random_draws=4 \(ablation.random_draws = 4\): the circuit's control .* leaves 3$"):
        hw.cut_circuit(m, scores, rep, rep, random_draws=4)
    with pytest.raises(Reached):
        hw.cut_each_head(m, ctx["phrases"], ctx["prose"], rep)


@pytest.mark.parametrize("call, said", [
    (lambda x: hw.head_scores(x["m"], x["rep"], hw.sequences(x["m"], ["word " * 200])),
     "hw.head_scores: prose: every head's attention on its longest row (201 tokens, alone) needs at least"),
    (lambda x: hw.attention_maps(x["m"], x["phrases"]), "hw.attention_maps: phrases: every head's attention"),
    (lambda x: hw.patch_heads(x["m"], x["prompts"]), "hw.patch_heads: prompts: activation patching of 1 prompts"),
    (lambda x: hw.edge_scores(x["m"], x["prompts"]), "hw.edge_scores: score_batch: edge attribution"),
    (lambda x: hw.cut_each_head(x["m"], settings=dict(x["config"]["ablation"], top_n=3, k=[1], random_draws=1)),
     "hw.cut_each_head: batch: the cuts' "),
    (lambda x: hw.logit_lens(x["m"], x["prompts"]), "hw.logit_lens: "),
    (lambda x: hw.direct_effects(x["m"], x["prompts"]), "hw.direct_effects: "),
    (lambda x: hw.weight_circuits(x["m"]), "hw.weight_circuits: m: the weights' circuits of every pair of heads"),
])
def test_a_call_that_cannot_fit_in_this_machines_memory_is_refused_naming_the_estimate(ctx, watched, monkeypatch,
                                                                                      call, said):
    """On the notebook's path as on the workflow's (headwatch/config/memory.py): a call whose arrays (a lower
    bound) exceed this machine's memory (here 1 MiB: meminfo stands in for /proc/meminfo) is refused before
    any model pass, naming the estimate, its parts and the argument to change."""
    from headwatch.config import memory

    monkeypatch.setattr(memory, "read_meminfo", lambda: dict(MemTotal=1 << 20, MemAvailable=1 << 19))
    with pytest.raises(hw.ConfigError) as err:
        call(ctx)
    message = str(err.value)
    assert message.startswith(said) and "more than this machine's memory (1.0 MiB, MemTotal" in message, message
    assert "\n" not in message and watched == []


def test_the_security_page_and_the_docstrings_say_the_bounds_the_code_holds():
    """docs/security.md's table of the library's bounds and the plots' docstrings give the numbers of the
    code: the figures' bounds, a pairs table's rows, the shortest rows, and the schema's bounds of the keys
    a keyword stands for."""
    from headwatch.config import load_schema
    from headwatch.config.bounds import bound_table
    from headwatch.model.arch import FIELD_BOUNDS
    from headwatch.settings.pairs import MAX_ROWS
    from headwatch.settings.tables import MIN_HALF, MIN_TOKENS, PLOT_HEADS, PLOT_ITEMS

    page = (ROOT / "docs" / "security.md").read_text()
    section = page.split("**The library's calls.**", 1)[1].split("The bounds, from", 1)[0]
    bounds = {k: v["max"] for k, v in bound_table(load_schema(ROOT / "config" / "schema.yaml")).items()}
    said = [f"at most {PLOT_HEADS:,} heads drawn", f"{PLOT_ITEMS:,} bars or arrows", f"at most {MAX_ROWS:,} rows",
            f"each at least {MIN_TOKENS} tokens (a repeated half at least {MIN_HALF})",
            f"at most {bounds['prose']} texts", f"at most {bounds['prose[]']:,} characters",
            f"(1 to {bounds['attention.top_predictions']:,}, at most the vocabulary)",
            f"`attention.batch` (1 to {bounds['attention.batch']:,})",
            f"`patching.top_k` (1 to {bounds['patching.top_k']:,}, at most the model's heads)",
            f"`patching.batch` (1 to {bounds['patching.batch']:,})",
            f"below {FIELD_BOUNDS['layers'][0]} layers and {FIELD_BOUNDS['heads'][0]:,} heads"]
    assert [s for s in said if s not in " ".join(section.split())] == []
    for name in ("plot_scores", "plot_heads", "plot_paths", "plot_direct", "plot_weights"):
        assert f"{PLOT_HEADS:,}" in getattr(hw, name).__doc__, name
    for name in ("plot_paths", "plot_edges", "plot_logit_lens"):
        assert f"{PLOT_ITEMS:,}" in getattr(hw, name).__doc__, name
    assert f"{PLOT_ITEMS:,} bars or arrows (`plot_edges`' `n`; Agg draws at most 2^16 pixels a side, 2,040 bars at " \
           "200 dpi) or positions (`plot_logit_lens`" in " ".join(section.split())
