"""The tutorial notebook (docs/tutorial.ipynb) executed on a tiny model, so that it cannot rot; and
the public API (``import headwatch as hw``): what it exports, what ``help`` shows, and its
tables against the functions the workflow's rules call."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

import headwatch
import headwatch as hw
import headwatch.api

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
#: A tiny model has 3 layers × 4 heads: the cut's targeted set and its random pool made to fit.
TINY_CUT = dict(top_n=3, k=[1, 2, 3], random_draws=2, guard_sequences=1)


def _outputs(nb) -> tuple[list[str], list[str]]:
    """(every text a code cell printed or returned, the errors)."""
    texts, errors = [], []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                errors.append(f"{out.ename}: {out.evalue}")
            elif out.output_type == "stream":
                texts.append(out.text)
            elif "text/plain" in out.get("data", {}):
                texts.append(out["data"]["text/plain"])
    return texts, errors


def test_the_tutorial_runs_on_a_tiny_model(tiny_model_dir):
    """Every cell of the tutorial runs on a tiny Llama (with SmolLM2's tokenizer, so the reader's
    names are one token each), its parameters cell set for it; its guards passed and its path was
    found."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "the tutorial has one cell tagged 'parameters'"
    params[0].source = f"MODEL = {str(tiny_model_dir)!r}\nSCALE = 'config/quick.yaml'\nCUT = {TINY_CUT!r}"
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}},
                   allow_errors=True).execute()
    texts, errors = _outputs(nb)
    assert errors == []
    joined = "\n".join(texts)
    assert "3 layers x 4 heads (2 key/value heads a layer)" in joined
    assert "strongest path: L" in joined
    assert len([t for t in texts if t.lstrip().startswith("guard")]) == 3     # a failed guard raises: an error above
    assert "3 layers × 4 heads; 1 text" in _explorer(nb)                      # the page, in its frame


def _explorer(nb) -> str:
    """The text/plain of the one cell whose output is the explorer page (hw.explore), its text/html
    the page in a sandboxed frame (tests/test_explore.py opens such an output in Chromium)."""
    pages = [o["data"] for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})
             and o["data"]["text/html"].startswith('<iframe srcdoc="')]
    assert len(pages) == 1 and 'sandbox="allow-scripts"' in pages[0]["text/html"]
    return pages[0]["text/plain"]


def test_the_committed_tutorial_is_executed_on_smollm2():
    """The notebook in the repository carries its outputs from SmolLM2-135M, figures included, so
    that it renders where the repository is browsed."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    texts, errors = _outputs(nb)
    assert errors == [] and "30 layers x 9 heads (3 key/value heads a layer)" in "\n".join(texts)
    assert "30 layers × 9 heads; 1 text" in _explorer(nb) and "with cuts, heads, paths" in _explorer(nb)
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 4
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "every code cell was run, in order"
    assert [c.execution_count for c in code] == sorted(c.execution_count for c in code)


def test_the_package_exports_its_api_and_help_shows_it():
    """``import headwatch`` gives the public functions (read from headwatch.api on first use),
    none of them shadowed by a module of the same name, and ``help(headwatch)`` lists them."""
    import pydoc

    assert headwatch.__all__ == headwatch.api.__all__
    for name in headwatch.__all__:
        f = getattr(headwatch, name)
        assert callable(f) and f.__doc__ and ">>>" in f.__doc__, f"{name}: a docstring with an example"
    modules = {p.stem for p in (ROOT / "headwatch").glob("*.py")} | {p.name for p in (ROOT / "headwatch").iterdir()
                                                                      if (p / "__init__.py").exists()}
    assert set(headwatch.__all__) & modules == set()
    text = pydoc.render_doc(headwatch, renderer=pydoc.plaintext)
    assert all(f"{name}(" in text for name in headwatch.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        headwatch.nope


def test_importing_headwatch_loads_no_torch():
    """The Snakefile imports the package on every parse: the face loads nothing heavy."""
    code = "import sys, headwatch; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_api_page_holds_the_reference():
    """docs/api.md holds the function reference ``python -m headwatch.api`` writes from the
    signatures and docstrings."""
    printed = subprocess.run([sys.executable, "-m", "headwatch.api"], capture_output=True, text=True, check=True,
                             cwd=ROOT).stdout
    assert printed.strip() and printed in (ROOT / "docs" / "api.md").read_text()


def test_a_dataframe_of_pairs_gives_the_prompts_a_pairs_file_gives(tiny_model_dir, tmp_path):
    """The same pairs as a DataFrame and as a CSV file give the same prompts table; a pairs table
    with a missing column or an empty text is refused naming it."""
    m = hw.load_model(tiny_model_dir)
    pairs = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to",
                                     "Then Anna and Paul talked, and Paul said to"],
                              corrupted=["When Alice and Bob went to the shop, Tom gave a drink to",
                                         "Then Kate and Mark talked, and Jack said to"],
                              answer=[" Mary", " Anna"], distractor=[" John", " Paul"]))
    path = tmp_path / "pairs.csv"
    pairs.to_csv(path, index=False)
    from_frame, from_file = hw.prompt_pairs(m, pairs), hw.prompt_pairs(m, path)
    assert list(from_file.line) == [2, 3]                     # a file's pairs in its order, each named by its line
    assert list(from_frame.clean_text) == sorted(pairs.clean)   # a table's by its key, the texts: numbered so
    assert list(from_frame.line) == [1, 2] and list(from_frame.prompt) == [0, 1]
    by_text = from_file.sort_values("clean_text", ignore_index=True)
    pd.testing.assert_frame_equal(from_frame.drop(columns=["line", "prompt"]), by_text.drop(columns=["line", "prompt"]))
    assert from_file.attrs["note"]["pairs_sha256"] and "pairs_sha256" not in from_frame.attrs["note"]
    with pytest.raises(ValueError, match="lacks the column"):
        hw.prompt_pairs(m, pairs.drop(columns="distractor"))
    with pytest.raises(ValueError, match=r"hw.prompt_pairs: pairs, row 1, column 'answer': '' is not a non-empty text"):
        hw.prompt_pairs(m, pairs.assign(answer=[" Mary", ""]))


def test_the_api_gives_the_rules_tables(tiny_model_dir):
    """A table from the notebook's functions is the rule's: the same function the script calls,
    on the same inputs, gives the same table (scores and the head patching sweep on a tiny model),
    with its guards readable as a table."""
    from headwatch.patching.heads import run_patching
    from headwatch.scores.heads import four_scores
    from headwatch.scores.sequences import ids_tensor
    from headwatch.settings.patching import PatchingSettings
    from headwatch.tableio import guard_records
    import torch

    m = hw.load_model(tiny_model_dir)
    cfg = hw.load_config("config/quick.yaml")
    induction, prose = hw.token_set(m, "induction", cfg), hw.token_set(m, "prose", cfg)
    scores = hw.head_scores(m, induction, prose, 4)
    want = four_scores(m.model, m.adapter, [torch.tensor(list(i)) for i in prose.token_ids], ids_tensor(induction),
                       int(induction.half_length.iloc[0]), int(induction.offset.iloc[0]), 4)
    pd.testing.assert_frame_equal(scores, want)
    settings = dict(cfg["patching"], n=4, guard_prompts=2, top_k=2)
    prompts = hw.prompt_pairs(m, settings=settings)
    heads = hw.patch_heads(m, prompts, settings, resid=True, positions=True, phrases=hw.token_set(m, "phrases", cfg))
    got = run_patching(m.model, m.adapter, prompts, hw.token_set(m, "phrases", cfg), PatchingSettings.from_config(settings))
    table, resid, guards = got.heads, got.resid, got.guards
    pd.testing.assert_frame_equal(heads, table)
    pd.testing.assert_frame_equal(heads.attrs["tables"]["resid"], resid)
    alone = hw.patch_heads(m, prompts, settings)           # heads only, what a notebook asks for first
    pd.testing.assert_frame_equal(alone, table)
    assert "tables" not in alone.attrs and "names_phrase" not in alone.attrs["note"]
    record = hw.guards_of(heads)
    assert list(record.guard) == [g["guard"] for g in guard_records(guards)] and record.passed.all()
    with pytest.raises(ValueError, match="carries no guard record"):
        hw.guards_of(scores)
