"""A table means its keys, never its row order; a model folder's code never runs; every input is bounded
before anything is built from it (docs/security.md, "The library's calls").

* :func:`test_every_function_that_takes_a_table_reads_it_by_its_keys` — the property, over every public
  function that takes a table (derived from ``hw.__all__``: a new one fails until it is registered in
  :data:`CALLS`): the tables handed over sorted, shuffled or reindexed give the same result — its table,
  its note and companion tables (timings aside), a figure's pixels, the explorer's page —, and a key given
  twice is refused with :class:`hw.TableError` naming the key, before any model pass;
* no code from a folder: a folder whose files name code of their own (``auto_map``) is refused before
  anything is loaded, the folder's Python never runs whatever stdin answers, and every transformers call of
  the code passes ``trust_remote_code=False``;
* a model's files that are not what they say (weights of other shapes, NaN weights) are refused with the
  library's error; a float64 model, which a failed guard's advice asks for, runs the guarded calls;
* a long call says its time, memory and end before its first pass; a long pairs table is refused by its
  memory estimate before every pair is tokenized; ``plot_scores`` draws its documented maximum.

The refusals that need no model pass are cases of ``tests/test_hostile_api.py`` (each under a second).
"""
from __future__ import annotations

import inspect
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import headwatch as hw
import headwatch.api as api
from headwatch.settings.tables import KEYS

#: A refusal slower than this read or computed what it should have refused first (each takes well under a
#: second alone; the bound is wide so that a loaded machine passes: speed is benchmarks/' business).
HANG_S = 10.0

ROOT = Path(__file__).resolve().parents[1]
PAIRS = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to",
                                 "When Tom and Kate went to the park, Kate gave a ball to"],
                          corrupted=["When Alice and Bob went to the shop, Tom gave a drink to",
                                     "When Anna and Paul went to the park, Mark gave a ball to"],
                          answer=[" Mary", " Tom"], distractor=[" John", " Kate"]))
SMALL = dict(cuts=dict(k=[1], top_n=2, random_draws=1), circuit=dict(top_n=2, random_draws=2),
             each=dict(top_n=2, k=[1], random_draws=1), edges=dict(fractions=[0.1, 0.5, 1.0], random_draws=5))
"""The settings of the calls below: a tiny model's share of the protocol's (every call well under a second)."""


# ------------------------------------------------------------------ the tables, made once by the functions
@pytest.fixture(scope="module")
def t(tiny_model_dir):
    """The tiny Llama (3 layers × 4 heads, SmolLM2's tokenizer) and a table of every kind, each made by the
    function that makes it."""
    m = hw.load_model(tiny_model_dir)
    hw.set_progress(False)
    phrases = hw.token_set(m, "phrases")
    x = dict(m=m, pairs=PAIRS, phrases=phrases[phrases["phrase"].isin(["names", phrases["phrase"].iloc[0]])],
             rep=hw.sequences(m, ["a b c d e f g h", "one two three four five six"], repeat=True),
             prose=hw.sequences(m, ["The cat sat on the mat.", "Rain fell all night long."]))
    x["prompts"] = hw.prompt_pairs(m, PAIRS)
    x["scores"] = hw.head_scores(m, x["rep"], x["prose"])
    x["cuts"] = hw.cut_heads(m, x["scores"], x["rep"], **SMALL["cuts"])
    x["heads"] = hw.patch_heads(m, x["prompts"], top_k=2, resid=True)
    x["paths"] = hw.path_patching(m, x["prompts"], x["heads"], receivers_top_k=1)
    x["edges"] = hw.edge_scores(m, x["prompts"], ig_steps=2)
    x["curves"] = hw.edge_faithfulness(m, x["prompts"], x["edges"], **SMALL["edges"])
    x["maps"] = hw.attention_maps(m, x["phrases"])
    x["direct"] = hw.direct_effects(m, x["prompts"], x["heads"])
    x["lens"] = hw.logit_lens(m, x["prompts"])
    x["circuits"] = hw.weight_circuits(m, null_draws=20)
    return x


# ------------------------------------------------------------------ every function that takes a table
CALLS = {
    "attention_maps": (("phrases",), lambda x, m: hw.attention_maps(m, x["phrases"])),
    "head_scores": (("rep", "prose"), lambda x, m: hw.head_scores(m, x["rep"], x["prose"])),
    "cut_heads": (("scores", "rep"), lambda x, m: hw.cut_heads(m, x["scores"], x["rep"], **SMALL["cuts"])),
    "cut_circuit": (("scores", "rep"), lambda x, m: hw.cut_circuit(m, x["scores"], x["rep"], x["rep"],
                                                                   **SMALL["circuit"])),
    "cut_each_head": (("phrases", "prose", "rep"), lambda x, m: hw.cut_each_head(m, x["phrases"], x["prose"], x["rep"],
                                                                                 **SMALL["each"])),
    "prompt_pairs": (("pairs",), lambda x, m: hw.prompt_pairs(m, x["pairs"])),
    "patch_heads": (("prompts", "phrases"), lambda x, m: hw.patch_heads(m, x["prompts"], phrases=x["phrases"],
                                                                        top_k=2)),
    "patch_positions": (("prompts", "heads"), lambda x, m: hw.patch_positions(m, x["prompts"], x["heads"], top_k=2,
                                                                              positions_all_heads=2)),
    "patch_kv_groups": (("prompts",), lambda x, m: hw.patch_kv_groups(m, x["prompts"])),
    "attribution": (("prompts",), lambda x, m: hw.attribution(m, x["prompts"], top_k=2)),
    "path_patching": (("prompts", "heads"), lambda x, m: hw.path_patching(m, x["prompts"], x["heads"],
                                                                          receivers_top_k=1)),
    "edge_scores": (("prompts",), lambda x, m: hw.edge_scores(m, x["prompts"], ig_steps=2)),
    "edge_faithfulness": (("prompts", "edges"), lambda x, m: hw.edge_faithfulness(m, x["prompts"], x["edges"],
                                                                                  **SMALL["edges"])),
    "guards_of": (("heads",), lambda x, m: hw.guards_of(x["heads"])),
    "top_heads": (("scores",), lambda x, m: hw.top_heads(x["scores"], "prev", 5)),
    "plot_scores": (("scores",), lambda x, m: hw.plot_scores(x["scores"])),
    "plot_cuts": (("cuts",), lambda x, m: hw.plot_cuts(x["cuts"])),
    "plot_heads": (("heads",), lambda x, m: hw.plot_heads(x["heads"])),
    "plot_paths": (("paths",), lambda x, m: hw.plot_paths(x["paths"])),
    "plot_edges": (("edges",), lambda x, m: hw.plot_edges(x["edges"], n=5)),
    "plot_faithfulness": (("curves",), lambda x, m: hw.plot_faithfulness(x["curves"])),
    "direct_effects": (("prompts", "heads"), lambda x, m: hw.direct_effects(m, x["prompts"], x["heads"])),
    "logit_lens": (("prompts",), lambda x, m: hw.logit_lens(m, x["prompts"])),
    "weights_vs_paths": (("circuits", "paths", "scores"),
                         lambda x, m: hw.weights_vs_paths(x["circuits"], x["paths"], x["scores"])),
    "plot_direct": (("direct",), lambda x, m: hw.plot_direct(x["direct"])),
    "plot_logit_lens": (("lens",), lambda x, m: hw.plot_logit_lens(x["lens"])),
    "plot_weights": (("circuits", "paths"), lambda x, m: hw.plot_weights(x["circuits"], x["paths"])),
    "explore": (("maps", "scores", "cuts", "heads", "paths", "edges"),
                lambda x, m: hw.explore(m, x["maps"], x["scores"], x["cuts"], x["heads"], x["paths"], x["edges"])),
}
"""Each public function that takes a table: the tables of the context it is handed (each varied in turn) and the
call. Its result is compared variant by variant with its result on the tables as made."""
NO_KEY = {"guards_of"}
"""Functions that read no row of the table they take (``guards_of``: its ``attrs``' guard record): a row given
twice changes nothing there."""
KEY_OF = {"phrases": "phrases", "rep": "repeated", "prose": "prose", "scores": "scores", "pairs": "pairs",
          "prompts": "prompts", "heads": "heads", "paths": "paths", "edges": "edges", "cuts": "cuts", "curves": "curves",
          "maps": ("phrase", "layer", "head", "row", "col"), "direct": "direct", "lens": "logit_lens",
          "circuits": "circuits"}
"""The key of each table of the context (:data:`headwatch.settings.tables.KEYS`)."""


def takes_a_table(name: str) -> bool:
    """Whether ``hw.<name>`` takes a table: an argument annotated as a DataFrame, or a table of its own kind."""
    params = inspect.signature(getattr(hw, name)).parameters.values()
    return any("DataFrame" in str(p.annotation) for p in params) or name in ("top_heads", "explore")


def test_the_property_covers_every_public_function_that_takes_a_table():
    """Generated from hw.__all__: a function added there that takes a table fails until :data:`CALLS` holds it."""
    taking = {n for n in hw.__all__ if n not in api.ERRORS and n not in api.WARNINGS and takes_a_table(n)}
    assert taking == set(CALLS), taking ^ set(CALLS)


def varied(table: pd.DataFrame, how: str, seed: int = 0) -> pd.DataFrame:
    """``table`` sorted by its last float column (descending; reversed where it has none), shuffled, or
    reindexed with other labels (strings, in another order) — and so each DataFrame of its ``attrs["tables"]``;
    its ``attrs`` otherwise kept."""
    rng = np.random.default_rng(seed)
    if how == "sorted":
        floats = [c for c in table.columns if table[c].dtype.kind == "f"]
        out = table.sort_values(floats[-1], ascending=False, kind="mergesort") if floats else table.iloc[::-1]
        if out.index.equals(table.index):
            out = table.iloc[::-1]
    elif how == "shuffled":
        order = rng.permutation(len(table))
        out = table.iloc[order if (order != np.arange(len(table))).any() else order[::-1]]
    else:
        out = table.set_axis([f"r{i}" for i in rng.permutation(len(table))])
    attrs = dict(table.attrs)
    if isinstance(attrs.get("tables"), dict):
        attrs["tables"] = type(attrs["tables"])({k: varied(v, how, seed) if isinstance(v, pd.DataFrame) else v
                                                  for k, v in attrs["tables"].items()})
    out = out.copy()
    out.attrs = attrs
    return out


def doubled(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its first row given again (last), its ``attrs`` kept."""
    out = pd.concat([table, table.iloc[[0]]])
    out.attrs = dict(table.attrs)
    return out


def plain(value):
    """What a result is, to compare: a table — its rows in the order of what they hold (a phrase's rows come in
    the order its phrases were given) — with its note and companion tables (timings left out), a figure's
    pixels, the explorer's page, a list as it is."""
    import matplotlib.figure

    timing = lambda k: "second" in str(k)
    if isinstance(value, pd.DataFrame):          # its rows by what they hold: a table means its keys, not its order
        table = value[[c for c in value.columns if not timing(c)]]
        sortable = [c for c in table.columns if table[c].map(lambda v: isinstance(v, (str, int, float, bool))).all()]
        table = table.sort_values(sortable, kind="mergesort", na_position="first") if sortable else table
        attrs = {k: plain(hw.guards_of(value) if k == "guards" else v) for k, v in value.attrs.items()}
        return dict(table=table.reset_index(drop=True), attrs=attrs)      # the guards: what each compared, found
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if not timing(k)}
    if isinstance(value, matplotlib.figure.Figure):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        value.set_dpi(30)
        canvas = FigureCanvasAgg(value)
        canvas.draw()
        return np.asarray(canvas.buffer_rgba()).copy()
    if hasattr(value, "html"):
        return value.html
    return value


def assert_same(got, want, what: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{what}: keys {sorted(got)} vs {sorted(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{what}.{k}")
    elif isinstance(want, pd.DataFrame):
        pd.testing.assert_frame_equal(got, want, check_exact=True, obj=what)
    elif isinstance(want, np.ndarray):
        assert got.shape == want.shape and (got == want).all(), f"{what}: the figures differ"
    else:
        assert got == want, what


@pytest.mark.parametrize("name", list(CALLS))
def test_every_function_that_takes_a_table_reads_it_by_its_keys(name, t, monkeypatch):
    """The tables sorted, shuffled or reindexed (all of the call's at once, their companion tables too) give
    the call's result exactly; a key given twice (one table at a time) is refused before any model pass with
    hw.TableError naming the key's columns — except where the function reads no row (:data:`NO_KEY`)."""
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    arguments, call = CALLS[name]
    m = t["m"]
    want = plain(call(t, m))
    for how in ("sorted", "shuffled", "reindexed"):
        given = dict(t, **{a: varied(t[a], how) for a in arguments})
        assert_same(plain(call(given, m)), want, f"hw.{name}, its tables {how}")
    passes = []
    handle = m.model.register_forward_pre_hook(lambda *a: passes.append(1))
    try:
        for a in arguments:
            given = dict(t, **{a: doubled(t[a])})
            if name in NO_KEY:
                assert_same(plain(call(given, m)), want, f"hw.{name}, {a} with a row given twice")
                continue
            with pytest.raises(hw.TableError) as err:
                call(given, m)
            key = KEYS[KEY_OF[a]] if isinstance(KEY_OF[a], str) else KEY_OF[a]
            message = str(err.value)
            assert message.startswith(f"hw.{name}: ") and ("twice" in message or "again" in message), message
            assert all(c in message for c in key if c in t[a].columns), (key, message)
            assert passes == [], f"hw.{name}: a model pass ran before the refusal of {a} given twice"
    finally:
        handle.remove()


def test_the_faithfulness_of_the_edges_sorted_is_the_faithfulness_of_the_edges(t):
    """The reported case: the edges sorted by EAP-IG, as a notebook sorts them, gave another faithfulness (by
    up to 3 on a tiny model: the scores were read by position); senders renamed to ones the model has not,
    or a part of the edges, are refused naming what is foreign or missing."""
    m, prompts, edges = t["m"], t["prompts"], t["edges"]
    table = edges.sort_values("eap_ig", ascending=False)
    table.attrs = dict(edges.attrs)
    got = hw.edge_faithfulness(m, prompts, table, **SMALL["edges"])
    pd.testing.assert_series_equal(got["faithfulness"], t["curves"]["faithfulness"])
    renamed = edges.assign(sender=edges["sender"].str.replace("L0H", "L9H"))
    renamed.attrs = dict(edges.attrs)
    with pytest.raises(hw.TableError, match=r"^hw.edge_faithfulness: edges lacks \d+ of the model's \d+ edges \(.*\) "
                                            r"and holds \d+ edges the model's graph has not \(L9H"):
        hw.edge_faithfulness(m, prompts, renamed, **SMALL["edges"])
    part = edges.head(10)
    part.attrs = dict(edges.attrs)
    with pytest.raises(hw.TableError, match=r"edges lacks \d+ of the model's \d+ edges"):
        hw.edge_faithfulness(m, prompts, part, **SMALL["edges"])


@pytest.mark.parametrize("damage, said", [
    (lambda p: p.assign(corrupted_ids=[ids[:-1] for ids in p["corrupted_ids"]]), "the clean prompt gives \\d+ tokens "
                                                                                 "and the corrupted one \\d+"),
    (lambda p: p.assign(corrupted_ids=p["clean_ids"]), "the clean and the corrupted ids are the same"),
    (lambda p: p.assign(distractor_id=p["answer_id"]), "answer_id and distractor_id are the same token"),
], ids=["lengths", "same ids", "same answer"])
def test_a_prompts_table_no_patch_can_read_is_refused_by_every_function_that_takes_one(t, damage, said):
    """Clean and corrupted ids of other lengths (a numpy ValueError in six functions), or degenerate prompts
    that every other patching function refused after its passes and edge_scores computed: refused by each
    before any model pass, naming the row."""
    m, prompts, heads, edges = t["m"], damage(t["prompts"]), t["heads"], t["edges"]
    calls = dict(patch_heads=lambda: hw.patch_heads(m, prompts), attribution=lambda: hw.attribution(m, prompts),
                 patch_positions=lambda: hw.patch_positions(m, prompts, heads),
                 patch_kv_groups=lambda: hw.patch_kv_groups(m, prompts),
                 path_patching=lambda: hw.path_patching(m, prompts, heads), edge_scores=lambda: hw.edge_scores(m, prompts),
                 edge_faithfulness=lambda: hw.edge_faithfulness(m, prompts, edges))
    passes = []
    handle = m.model.register_forward_pre_hook(lambda *a: passes.append(1))
    try:
        for name, call in calls.items():
            with pytest.raises(hw.TableError, match=f"^hw.{name}: prompts, row 0: {said}"):
                call()
    finally:
        handle.remove()
    assert passes == []


def test_own_phrases_without_an_expected_token_get_their_maps(t):
    """A phrases table without ``expected_id`` (your own text) is read as phrases with no expected token: its
    maps and the model's top next tokens, where it raised a KeyError after every phrase's pass."""
    mine = t["phrases"][["phrase", "token_ids"]]
    maps = hw.attention_maps(t["m"], mine)
    assert set(maps["phrase"]) == set(mine["phrase"])
    assert maps.attrs["tables"]["predictions"]["expected"].isna().all()


def test_a_failed_guards_record_reads_as_its_rows_and_a_malformed_one_is_refused(t):
    """guards_of shows a failed guard (``passed: False``, as ``err.table`` carries it) as its rows; a record
    whose ``passed`` disagrees with its guards, or that holds none, is refused instead of an empty table."""
    heads = t["heads"]
    record = dict(heads.attrs["guards"])
    first = next(k for k, v in record.items() if isinstance(v, dict) and "guard" in v)
    failed = heads.copy()
    failed.attrs = dict(heads.attrs, guards=dict(record, passed=False, **{first: dict(record[first], passed=False)}))
    rows = hw.guards_of(failed)
    assert rows["passed"].tolist().count(False) == 1 and len(rows) == len(hw.guards_of(heads))
    for bad, said in ((dict(record, passed=False), "says passed: False, but its guards all passed"),
                      (dict(passed=False, x=dict(y=1)), "holds no guard")):
        table = heads.copy()
        table.attrs = dict(heads.attrs, guards=bad)
        with pytest.raises(hw.TableError, match=f"^hw.guards_of: table's guard record .*{said}"):
            hw.guards_of(table)


# ------------------------------------------------------------------ no code from a folder
MARKER_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("the folder's code ran")
from transformers import PreTrainedTokenizerFast



class MarkerTokenizer(PreTrainedTokenizerFast):
    pass
"""


@pytest.fixture(scope="module")
def code_folders(tiny_model_dir, tmp_path_factory):
    """Copies of the tiny model whose ``tokenizer_config.json`` or ``config.json`` names code of its own
    (``auto_map``), a Python file that writes a marker file when it is imported."""
    tmp = tmp_path_factory.mktemp("code")
    marker = tmp / "marker"
    folders = {}
    for name, file, entry in (("tokenizer", "tokenizer_config.json",
                               dict(auto_map={"AutoTokenizer": [None, "marker.MarkerTokenizer"]},
                                    tokenizer_class="MarkerTokenizer")),
                              ("config", "config.json", dict(auto_map={"AutoModelForCausalLM": "marker.MarkerModel"}))):
        folder = tmp / name
        shutil.copytree(tiny_model_dir, folder)
        (folder / "marker.py").write_text(MARKER_CODE.format(marker=str(marker)))
        raw = json.loads((folder / file).read_text())
        (folder / file).write_text(json.dumps({**raw, **entry}))
        folders[name] = folder
    return folders, marker


def test_no_code_from_a_folder_runs_whatever_stdin_answers(code_folders, monkeypatch):
    """A folder whose tokenizer_config.json or config.json names code of its own is refused before anything is
    loaded — as a path, as a config entry ({"source": folder}), and on the workflow's paths (the prepared
    folder's loader, the facts the pre-job checks read) — with stdin answering "y" to any prompt (transformers
    asked "Do you wish to run the custom code?"): the marker the folder's code would write is never written."""
    import io

    from headwatch.model.load import load_prepared
    from headwatch.model.sources import locate, model_facts

    folders, marker = code_folders
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 16))
    for folder in folders.values():
        entry = {"source": str(folder)}
        for call in (lambda: hw.load_model(folder), lambda: hw.load_model(entry), lambda: load_prepared(folder),
                     lambda: model_facts(locate("m", entry, ROOT), entry)):
            with pytest.raises(hw.ModelFileError, match=r"names code of its own \(auto_map: "):
                call()
            assert not marker.exists(), "the folder's code ran"
    assert sys.stdin.read() == "y\n" * 16          # nothing asked


def test_every_transformers_call_of_the_code_passes_trust_remote_code_false():
    """Every from_pretrained of the library, the scripts and the benchmarks says trust_remote_code=False (or
    passes headwatch.model.load.NO_CODE, which does): no default of transformers decides."""
    import ast

    from headwatch.model.load import NO_CODE

    assert NO_CODE == dict(trust_remote_code=False)
    missing, seen = [], 0
    for path in [*ROOT.glob("headwatch/**/*.py"), *ROOT.glob("scripts/*.py"), *ROOT.glob("benchmarks/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "from_pretrained":
                seen += 1
                said = {k.arg: k.value for k in node.keywords}
                ok = isinstance(said.get("trust_remote_code"), ast.Constant) and said["trust_remote_code"].value is False
                if not ok and not any(k.arg is None and getattr(k.value, "id", "") == "NO_CODE" for k in node.keywords):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert seen >= 8 and missing == []


# ------------------------------------------------------------------ a model's files, and float64
@pytest.mark.parametrize("damage, said", [
    ("shapes", "transformers cannot load the model of"),
    ("nan", "its weights hold NaN or inf"),
])
def test_weights_that_are_not_what_the_files_say_are_the_librarys_error(tiny_model_dir, tmp_path, damage, said):
    """A config.json whose shapes disagree with the weights, and NaN weights, are refused with hw.ModelFileError
    naming the folder, one line, no dependency's exception chained (they were a transformers traceback and an
    undocumented NonFiniteError)."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    if damage == "shapes":
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(dict(raw, intermediate_size=raw["intermediate_size"] * 2)))
    else:
        weights = load_file(folder / "model.safetensors")
        name = next(k for k in weights if "q_proj" in k)
        weights[name][0, 0] = float("nan")
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(hw.ModelFileError) as err:
        hw.load_model(folder)
    message = str(err.value)
    assert message.startswith("hw.load_model: ") and said in message and "\n" not in message, message
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_a_float64_model_runs_the_guarded_calls_the_advice_names(tiny_model_dir, t):
    """A failed guard advises rerunning in float64: hw.load_model(..., dtype="float64") loads it (it was
    refused), and a guarded call runs on it with its guards passed, its result the float32 model's within
    float32's rounding."""
    from headwatch.guards import FLOAT64_HINT

    assert "dtype='float64'" in FLOAT64_HINT
    m = hw.load_model({"source": str(tiny_model_dir), "dtype": "float64"}, device="cpu")     # a config entry's too
    assert next(m.model.parameters()).dtype.__repr__() == "torch.float64"
    heads = hw.patch_heads(m, t["prompts"], top_k=2)
    assert heads.attrs["guards"]["passed"] is True and heads.attrs["guards"]["dtype"] == "float64"
    np.testing.assert_allclose(heads["score"], t["heads"]["score"], rtol=1e-4, atol=1e-4)


def test_explore_shows_a_model_folder_named_like_a_placeholder_as_text(tiny_model_dir, tmp_path, t):
    """A model folder named ``{{DATA}}`` raised the template's RuntimeError; its name is the page's title,
    escaped, and the page's data is where it belongs. The page's own checks raise a hw.TableError."""
    from headwatch.explorer import ExplorerDataError

    assert issubclass(ExplorerDataError, hw.TableError)
    folder = tmp_path / "{{DATA}} <b>"
    shutil.copytree(tiny_model_dir, folder)
    m = hw.load_model(folder)
    page = hw.explore(m, t["maps"], t["scores"])
    import base64
    import re
    import zlib

    assert "<title>headwatch explorer: {{DATA}} &lt;b&gt;</title>" in page.html and "{{JS}}" not in page.html
    data = re.search(r'id="explorer-data"[^>]*>([^<]*)</script>', page.html).group(1)
    assert json.loads(zlib.decompress(base64.b64decode(data)))["model"] == "{{DATA}} <b>"


# ------------------------------------------------------------------ bounds before building
def test_a_long_call_says_its_time_memory_and_end_before_its_first_pass(t, caplog, monkeypatch):
    """1,000 pairs started a run of hours with nothing said: the call's estimate (passes, at least how long on
    this machine, when it should end, the memory) is a warning of the headwatch logger before its first pass
    (here the first pass stops the call)."""
    from headwatch.config import calls

    class FirstPass(Exception):
        pass

    def stop(*a):
        raise FirstPass

    monkeypatch.setattr(calls, "LONG_CALL_S", 0.0)
    handle = t["m"].model.register_forward_pre_hook(stop)
    try:
        with caplog.at_level(logging.INFO, logger="headwatch"), pytest.raises(FirstPass):
            hw.patch_heads(t["m"], t["prompts"], top_k=2)
    finally:
        handle.remove()
    said = [r for r in caplog.records if r.name == "headwatch" and r.levelno == logging.WARNING]
    assert len(said) == 1, caplog.text
    assert said[0].getMessage().startswith("hw.patch_heads: about 34 forward passes of ")
    assert " on this machine, ends about " in said[0].getMessage() and "(ETA); memory at least " in said[0].getMessage()


def test_long_pairs_are_refused_by_the_memory_estimate_before_they_are_tokenized(t, monkeypatch):
    """1,000 long pairs were refused by the memory estimate after 45 s of tokenizing: the estimate, from the
    longest text's tokens (a lower bound of the longest prompt), comes first."""
    from headwatch.config import memory
    from headwatch.patching import pairs

    monkeypatch.setattr(memory, "read_meminfo", lambda: dict(MemTotal=1 << 24, MemAvailable=1 << 23))
    monkeypatch.setattr(pairs, "pairs_table", lambda *a, **k: pytest.fail("every pair was tokenized first"))
    many = pd.DataFrame(dict(clean=[f"{i} " + "word " * 200 for i in range(1000)],
                             corrupted=[f"{i} " + "text " * 200 for i in range(1000)], answer=" a", distractor=" b"))
    t0 = time.perf_counter()
    with pytest.raises(hw.ConfigError, match=r"^hw.patch_heads: prompts: activation patching of 1000 prompts of \d+ "
                                             r"tokens .* more than this machine's memory"):
        hw.patch_heads(t["m"], many)
    assert time.perf_counter() - t0 < HANG_S


def test_plot_scores_draws_its_documented_maximum(t):
    """16,384 heads (the documented maximum, 128 × 128) did not finish in 300 s as a bar each; drawn as one
    outline a panel, the figure and its PNG take seconds."""
    import io

    from headwatch.settings.tables import PLOT_HEADS

    rng = np.random.default_rng(0)
    side = int(PLOT_HEADS ** 0.5)
    scores = pd.DataFrame(dict(layer=np.repeat(np.arange(side), side), head=np.tile(np.arange(side), side),
                               **{s: rng.random(PLOT_HEADS) for s in ("sink", "prev", "self", "induction")}))
    t0 = time.perf_counter()
    hw.plot_scores(scores).savefig(io.BytesIO(), format="png")
    assert time.perf_counter() - t0 < 20


def test_bounded_inputs_are_refused_with_little_memory(t):
    """The cases that read a whole input before its bound (hw.load_config of /dev/zero read 4.5 GB; ids of a
    range of 3e8 reached 11.9 GB; an endless generator of texts never ended) are refused at once, with less than
    0.5 GB more than the process held."""
    import resource

    def endless():
        while True:
            yield "w1 w2"

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for call in (lambda: hw.load_config("/dev/zero"), lambda: hw.load_config("/dev/urandom"),
                 lambda: hw.sequences(t["m"], ids=[range(3 * 10 ** 8)]), lambda: hw.sequences(t["m"], endless()),
                 lambda: hw.sequences(t["m"], ids=([1, 2] for _ in range(10 ** 8)))):
        t0 = time.perf_counter()
        with pytest.raises(hw.ConfigError):
            call()
        assert time.perf_counter() - t0 < HANG_S
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024       # KiB
