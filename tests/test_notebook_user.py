"""The notebook user: functions that do what their name says, figures that leave a user's own plots
alone, progress that one switch silences, own text in, and one-line errors for wrong inputs — each
naming the function, the argument and the row as the user wrote them."""
from __future__ import annotations

import io
import re
import subprocess
import sys

import matplotlib
import pandas as pd
import pytest

import headwatch as hw
from headwatch.config import ConfigError
from headwatch.settings.tables import TableError

PAIRS = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to",
                                 "Then Anna and Paul talked, and Paul said to"],
                          corrupted=["When Alice and Bob went to the shop, Tom gave a drink to",
                                     "Then Kate and Mark talked, and Jack said to"],
                          answer=[" Mary", " Anna"], distractor=[" John", " Paul"]), index=["first", "second"])


@pytest.fixture(scope="module")
def m(tiny_model_dir):
    return hw.load_model(tiny_model_dir)


def test_importing_and_plotting_leave_the_users_matplotlib_settings_alone(m):
    """The house style applies while a figure is drawn, never to matplotlib's global settings."""
    code = ("import matplotlib; before = dict(matplotlib.rcParams); import headwatch.figures.style, "
            "headwatch.figures.patching; after = dict(matplotlib.rcParams); "
            "print(sorted(k for k in before if before[k] != after[k]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    before = dict(matplotlib.rcParams)
    scores = hw.head_scores(m, hw.sequences(m, ["a b c d e f g h"], repeat=True), hw.sequences(m, ["The cat sat."]))
    fig = hw.plot_scores(scores)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert dict(matplotlib.rcParams) == before


def test_a_log_axis_saves_as_plain_text_with_a_plain_savefig(m, tmp_path):
    """faithfulness curves have a log axis: saved by the user's own fig.savefig, no math source."""
    from pypdf import PdfReader

    prompts = hw.prompt_pairs(m, PAIRS)
    edges = hw.edge_scores(m, prompts)
    curves = hw.edge_faithfulness(m, prompts, edges)
    fig = hw.plot_faithfulness(curves)
    fig.savefig(tmp_path / "f.pdf")
    text = "".join(page.extract_text() for page in PdfReader(tmp_path / "f.pdf").pages)
    assert "mathdefault" not in text and "$" not in text and "10" in text
    for plot, table in ((hw.plot_edges, edges), (hw.plot_heads, hw.patch_heads(m, prompts))):
        assert isinstance(plot(table), matplotlib.figure.Figure)


def test_one_switch_silences_progress(m, capsys):
    from headwatch.jobs import progress

    items = [1, 2, 3]
    hw.set_progress(False)
    try:
        assert progress(items, desc="x") is items
    finally:
        hw.set_progress(True)
    assert progress(items, desc="x") is not items


def test_the_switch_silences_the_model_loaders_bars_too():
    """transformers' own bars (loading weights, converting a GGUF) follow the switch inside
    hw.load_model, and are as they were after it."""
    from transformers import modeling_gguf_pytorch_utils as gguf
    from transformers.utils import logging as hf_logging

    from headwatch.jobs import library_progress

    hw.set_progress(False)
    bar = gguf.tqdm
    try:
        with library_progress():
            assert not hf_logging.is_progress_bar_enabled()
            assert gguf.tqdm([1, 2]).disable                    # the GGUF converter's own bar
        assert hf_logging.is_progress_bar_enabled() and gguf.tqdm is bar
    finally:
        hw.set_progress(True)
    with library_progress():
        assert hf_logging.is_progress_bar_enabled()


def test_own_text_in_gives_the_tables_the_scores_read(m):
    prose = hw.sequences(m, ["The cat sat on the mat.", "Rain fell."])
    assert list(prose.columns[:3]) == ["seq", "text", "token_ids"]
    rep = hw.sequences(m, ["one two three four five six", "seven eight nine ten"], repeat=True)
    T = int(rep.half_length.iloc[0])
    ids = list(rep.token_ids.iloc[0])
    off = int(rep.offset.iloc[0])
    assert ids[off:off + T] == ids[off + T:] and rep.attrs["note"]["cut"][1] == 0 and T > 0
    scores = hw.head_scores(m, rep, prose)
    assert len(scores) == m.adapter.n_layers * m.adapter.n_heads
    bad = rep.assign(half_length=T + 1)                  # a wrong half_length once gave other scores silently
    with pytest.raises(TableError, match=r"hw.head_scores: induction, row 0: its \d+ token ids are not offset"):
        hw.head_scores(m, bad, prose)
    with pytest.raises(ValueError, match="wrap a single one in a list"):
        hw.sequences(m, "a text")


@pytest.mark.parametrize("call, said", [
    (lambda m, s: hw.head_scores(m, s["rep"].rename(columns={"half_length": "half_len"}), s["prose"]),
     "hw.head_scores: induction lacks the column 'half_length' (did you mean 'half_len'?); its columns are"),
    (lambda m, s: hw.head_scores(m, s["rep"], [1, 2]),
     "hw.head_scores: prose is a list, not a pandas DataFrame"),
    (lambda m, s: hw.cut_heads(m, s["scores"].drop(columns="induction")),
     "hw.cut_heads: scores lacks the column 'induction'"),
    (lambda m, s: hw.prompt_pairs(m, PAIRS.rename(columns={"distractor": "distracter"})),
     "hw.prompt_pairs: pairs lacks the column 'distractor' (did you mean 'distracter'?)"),
    (lambda m, s: hw.prompt_pairs(m, PAIRS.assign(answer=[" Mary", ""])),
     "hw.prompt_pairs: pairs, row 'second', column 'answer': '' is not a non-empty text"),
    (lambda m, s: hw.prompt_pairs(m, PAIRS.assign(answer=[" Mary", " Annabellarina"])),
     "pairs, row 'second': answer"),
    (lambda m, s: hw.patch_heads(m, hw.prompt_pairs(m, PAIRS), top_k=0),
     "hw.patch_heads: top_k=0 (patching.top_k): 0 is less than the minimum of 1"),
    (lambda m, s: hw.patch_heads(m, hw.prompt_pairs(m, PAIRS), topk=3),
     "hw.patch_heads: topk=3 (patching.topk): unknown key 'topk' under `patching`; did you mean `top_k`?"),
    (lambda m, s: hw.plot_heads(s["scores"]), "hw.plot_heads: heads lacks the column 'score'"),
    (lambda m, s: hw.load_model("smollm2"), "did you mean 'smollm2-135m'?"),
    (lambda m, s: hw.load_model("SmolLM2-135M"), "did you mean 'smollm2-135m'?"),
])
def test_every_wrong_input_gets_one_line_in_the_callers_words(m, call, said):
    s = {"prose": hw.sequences(m, ["The cat sat."]), "rep": hw.sequences(m, ["a b c d e f"], repeat=True)}
    s["scores"] = hw.head_scores(m, s["rep"], s["prose"])
    from headwatch.model.sources import ModelNotFoundError

    with pytest.raises((ValueError, ConfigError, ModelNotFoundError)) as err:
        call(m, s)
    message = str(err.value)
    assert said in message, message
    assert "\n" not in message and "(model ?)" not in message and "source:" not in message


def test_guard_error_and_the_public_names_have_plain_docstrings_with_an_example():
    from headwatch.guards import GuardError

    assert hw.GuardError is GuardError and "GuardError" in hw.__all__
    for name in hw.__all__:
        f = getattr(hw, name)
        doc = f.__doc__ or ""
        assert doc.strip(), name
        if callable(f) and name not in ("GuardError", "set_progress"):
            assert ">>>" in doc, f"{name} has no example"
        assert not re.search(r":func:`top_rows`|annul|at its voice", doc), name
    help_text = io.StringIO()
    import pydoc

    help_text.write(pydoc.render_doc(hw.top_heads, renderer=pydoc.plaintext))
    assert "top_rows" not in help_text.getvalue()
