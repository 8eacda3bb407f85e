"""``hw.explore``: the explorer page of a notebook's own text and results, tested as a user meets it —
a notebook executed by a kernel (nbclient, as tests/test_tutorial.py runs the tutorial) whose cell
displays the page, its saved output's text/html opened in headless Chromium (the browser of
tests/test_explorer.py), the page's views clicked and hovered inside the cell's frame — and the
parts by hand: what a long text keeps, the size bound, the compressed data, the frame, the edge
table, the arguments refused before any model pass."""
from __future__ import annotations

import base64
import html
import json
import math
import zlib
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

import headwatch as hw
from headwatch import markup
from headwatch.explorer import ExplorerDataError, readout_text
from headwatch.explorer.build import COMPRESSED, render
from headwatch.explorer.panels import edge_scores_payload
from headwatch.explorer.notebook import Explorer, fit_page, keep_first, kept_note
from headwatch.settings.tables import TableError
from test_explorer import _hover, chromium   # Chromium, as the explorer's own tests drive it

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<img src=x onerror=alert(1)><b>x</b>\u202e"
TEXT = f"When Mary and John went to the shop, John gave a drink to Mary. {HOSTILE}"
PAIRS = dict(clean=["When Mary and John went to the shop, John gave a drink to"],
             corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"],
             answer=[" Mary"], distractor=[" John"])


# --------------------------------------------------------------------- by hand
def _maps(n: int, phrase: str = "p") -> tuple[pd.DataFrame, pd.DataFrame]:
    """One layer, one head, ``n`` tokens: every row reads its first token (weight 1)."""
    rows = [dict(phrase=phrase, layer=0, head=0, row=r, col=c, weight=float(c == 0)) for r in range(n) for c in range(r + 1)]
    return pd.DataFrame(rows), pd.DataFrame(dict(phrase=phrase, pos=range(n), token_id=range(n),
                                                 token=[f"t{i}" for i in range(n)]))


def test_keep_first_keeps_the_first_tokens_and_their_whole_maps():
    maps, tokens = _maps(5)
    got, kept = keep_first(maps, tokens, 3)
    assert len(got) == 3 * 4 // 2 and set(got["row"]) == {0, 1, 2} and got["col"].max() == 2
    assert kept["pos"].tolist() == [0, 1, 2]
    assert kept_note({"p": 5, "q": 2}, 3) == ("This page keeps each text's first 3 tokens (p: 3 of 5, q: 2 of 2): a causal "
                                             "model's attention among them is what it is in the whole text; the page's "
                                             "size grows with the square of the tokens kept.")
    assert kept_note({"p": 5}, 5) == "Every token of the text (p: 5 tokens)."


def test_fit_page_shrinks_the_tokens_kept_until_the_page_fits():
    sizes = []

    def build(n):                     # a page of 100 bytes and n² bytes of maps
        sizes.append(n)
        return "x" * (100 + n * n)

    page, n = fit_page(build, 100, 2_600)
    assert len(page) <= 2_600 and 100 + (n + 1) ** 2 > 2_600 * 0.7 and sizes[0] == 100 and len(sizes) <= 5
    assert fit_page(build, 10, 10_000) == ("x" * 200, 10)          # it fits at once: one build
    with pytest.raises(ValueError, match="hw.explore: the page of one token is 101 bytes, over max_mb = 5e-05 MB"):
        fit_page(build, 10, 50)


def test_the_compressed_page_holds_the_json_the_plain_page_holds():
    payload = dict(model="m <b>", phrases=[dict(name=HOSTILE)])
    plain, packed = render(payload), render(payload, compress=True)
    data = packed.split(f'id="explorer-data" data-encoding="{COMPRESSED}">', 1)[1].split("</script>", 1)[0]
    assert zlib.decompress(base64.b64decode(data)).decode() == markup.script_json(payload)
    assert '<script type="application/json" id="explorer-data">' + markup.script_json(payload) in plain
    assert "<b>" not in packed.split("<body>", 1)[1] and "m &lt;b&gt;" in packed


def test_the_cell_shows_the_page_in_a_sandboxed_frame(tmp_path):
    page = Explorer('<!DOCTYPE html><html><body><p class="x">"a" & \'b\' <i>c</i></p></body></html>', f"m {HOSTILE}")
    cell = page._repr_html_()
    srcdoc = cell.split('srcdoc="', 1)[1].split('"', 1)[0]
    assert html.unescape(srcdoc) == page.html and "<" not in srcdoc and '"' not in srcdoc
    assert 'sandbox="allow-scripts"' in cell and "allow-same-origin" not in cell
    assert markup.html(f"m {HOSTILE}") in cell and "<img" not in cell.split("</iframe>")[1]
    assert page.save(tmp_path / "a" / "page.html").read_text() == page.html and page.nbytes == len(page.html.encode())


def test_the_edge_table_keeps_each_methods_strongest():
    edges = pd.DataFrame(dict(edge=[f"e{i}" for i in range(6)], sender="input", receiver="logits", sender_kind="input",
                              sender_layer=-1, receiver_kind="logits", receiver_layer=3,
                              eap=[5.0, -4.0, 0.1, 0.2, 0.3, 0.0], eap_ig=[0.0, 0.1, -9.0, 0.2, 8.0, 0.3]))
    got = edge_scores_payload(edges, 2)
    assert [r[0] for r in got["edges"]["rows"]] == ["e0", "e1", "e2", "e4"]       # eap's two, eap_ig's two
    assert got["methods"] == ["eap_ig", "eap"] and got["total"] == 6 and got["top"] == 2
    with pytest.raises(ExplorerDataError, match=r"lack \['eap_ig or eap'\]"):
        edge_scores_payload(edges.drop(columns=["eap", "eap_ig"]), 2)


# --------------------------------------------------------------------- the API's own checks
@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tiny Llama with SmolLM2's tokenizer, as the notebook loads it."""
    hw.set_progress(False)
    return hw.load_model(tiny_model_dir)


def test_every_wrong_argument_is_refused_before_any_model_pass(tiny, saved_output):
    m, heads = tiny, saved_output[1]["heads"]
    scores = pd.DataFrame([dict(layer=l, head=h, sink=0.1, prev=0.2, self=0.3, induction=0.4) for l in range(3)
                           for h in range(4)])

    def refused(words, *args, **kw):
        with pytest.raises(ValueError, match=words) as err:
            hw.explore(m, *args, **kw)
        assert "\n" not in str(err.value) and str(err.value).startswith("hw.explore: "), err.value

    passes = []
    hook = m.model.register_forward_pre_hook(lambda *a: passes.append(1))
    try:
        with pytest.raises(ValueError, match="hw.explore: m=.smollm2-135m. is a str, not a loaded model"):
            hw.explore("smollm2-135m", "a")
        refused("texts is a int", 5)
        refused("texts is a list; give a text", [])
        refused(r"texts\[1\] is '  ', not a non-empty text", ["a", "  "])
        refused("texts lacks the column 'token_ids'", pd.DataFrame(dict(seq=[0], text=["a"])))
        refused("texts holds seq 0 twice", pd.DataFrame(dict(seq=[0, 0], token_ids=[[1], [2]], tokens=[["a"], ["b"]])))
        refused(r"texts carries no tokens table", pd.DataFrame(dict(phrase=["p"], layer=[0], head=[0], row=[0], col=[0],
                                                                   weight=[1.0])))
        refused("scores lacks the column 'induction'", "a", scores.drop(columns="induction"))
        refused("scores has 11 rows, not one per head of the model's 3 layers × 4 heads", "a", scores.iloc[1:])
        refused("cuts is a str, not a pandas DataFrame", "a", cuts="topk")
        refused("heads has 11 rows, not one per head", "a", heads=heads.iloc[1:])
        bare = heads.copy()
        bare.attrs = {}
        refused(r"heads's note \(attrs\['note'\]\) lacks \['prompts'.*hw.patch_heads returned", "a", heads=bare)
        paths = pd.DataFrame([dict(sender="L0H0", receiver="L5H1", input="q", group=None, score=0.1, logit_diff=0.2,
                                   rank_into_receiver=1, sender_layer=0, sender_head=0, receiver_layer=5,
                                   receiver_head=1)])
        refused(r"paths, row 0: a head outside the model's 3 layers × 4 heads", "a", paths=paths)
        refused("edges has no score column", "a", edges=pd.DataFrame(dict(
            edge=["e"], sender=["input"], receiver=["logits"], sender_kind=["input"], sender_layer=[-1],
            receiver_kind=["logits"], receiver_layer=[3])))
        for bad in (0, True, 2.5):
            refused(f"max_tokens={bad!r}; give a whole number", "a", max_tokens=bad)
        for bad in (0, -1.0, math.nan, math.inf, "5"):
            refused(r"max_mb=.*; give the page's largest size in MB", "a", max_mb=bad)
        refused(r"max_mb=0.01 is not more than the page's own code \(0.0\d\d MB\)", "a", max_mb=0.01)
    finally:
        hook.remove()
    assert passes == []
    with pytest.raises(TableError):               # the table check's own error, named for the caller
        hw.explore(m, "a", scores.assign(sink="x"))


# --------------------------------------------------------------------- in Chromium
@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Chromium that hears the page in its frame: every frame's console messages and uncaught
    errors, through WebDriver BiDi (``driver.heard``; the browser log misses a sandboxed frame's)."""
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"), bidi=True)
    driver.heard = []
    driver.script.add_console_message_handler(lambda e: driver.heard.append(f"console.{e.level}: {e.text}"))
    driver.script.add_javascript_error_handler(lambda e: driver.heard.append(f"error: {e.text}"))
    yield driver
    driver.quit()


def _errors(driver) -> list[str]:
    """What the pages opened so far said as errors, in any frame."""
    return [h for h in driver.heard if h.startswith(("error", "console.error"))]


def _open_frame(driver, page, path):
    """The cell's output as a notebook shows it (its text/html in a document), opened in Chromium,
    the driver inside the page's frame once the page is drawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    cell = page if isinstance(page, str) else page._repr_html_()
    Path(path).write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{cell}</body></html>',
                          encoding="utf-8")
    driver.switch_to.default_content()
    driver.get(Path(path).resolve().as_uri())
    driver.switch_to.frame(driver.find_element("css selector", "iframe"))
    WebDriverWait(driver, 30).until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true",
                                    message=f"the page in the frame was not drawn: {_errors(driver)}")


def test_the_browser_hears_an_error_inside_the_frame(browser, tmp_path):
    """The frame's errors reach the tests (else "no console error" below could not fail)."""
    import time

    broken = Explorer("<!DOCTYPE html><html><body><script>console.error('said'); null.x;</script></body></html>", "x")
    Path(tmp_path / "broken.html").write_text(f"<!DOCTYPE html><html><body>{broken._repr_html_()}</body></html>")
    browser.get((tmp_path / "broken.html").resolve().as_uri())
    for _ in range(50):
        if len(_errors(browser)) >= 2:
            break
        time.sleep(0.1)
    assert [e.split(":")[0] for e in _errors(browser)] == ["console.error", "error"]
    browser.heard.clear()


def test_a_1000_token_text_keeps_its_first_tokens_within_the_size_bound(tiny, browser, tmp_path):
    """A 1,000-token text: the page keeps its first 256 tokens (the maps of those are the whole
    text's), under its 5 MB bound; with a smaller bound, fewer, and the page and the object say so;
    the page of the long text is drawn in Chromium, its map a canvas whose hover reads the maps."""
    m = tiny
    ids = np.random.default_rng(0).integers(1000, 20000, 1000).tolist()
    mine = pd.DataFrame(dict(seq=[0], token_ids=[ids], tokens=[[m.tokenizer.decode([i]) for i in ids]]))
    page = hw.explore(m, mine)
    assert page.nbytes <= 5_000_000 and "256 of 1,000 tokens" in page.summary
    text = " ".join(f"word{i}" for i in range(400))                 # a text longer than the context, as given
    n = len(m.tokenizer(text).input_ids)
    assert n > 256 and f"256 of {n:,} tokens" in hw.explore(m, text).summary
    with pytest.raises(TableError, match="longer than the model's context of 256 positions"):
        hw.sequences(m, [text])                                      # the scores' own tables must fit it
    small = hw.explore(m, mine, max_mb=0.15)
    kept = int(small.summary.split(" of 1,000 tokens")[0].rsplit(" ", 1)[1])
    assert small.nbytes <= 150_000 and 50 < kept < 256
    whole = hw.attention_maps(m, mine.assign(token_ids=[ids[:kept]], tokens=[mine["tokens"][0][:kept]]))

    d, by = browser, "css selector"
    _open_frame(d, small, tmp_path / "long.html")
    assert f"text 0: {kept:,} of 1,000" in d.find_element(by, "#text-line").text
    assert d.find_element(by, "#head-canvas").get_attribute("data-n") == str(kept)
    view = d.find_element(by, "#head-view")
    l, h = int(view.get_attribute("data-layer")), int(view.get_attribute("data-head"))
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = d.find_element(by, "#head-canvas")
    size = canvas.size
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    ActionChains(d).move_to_element_with_offset(canvas, -size["width"] // 4, size["height"] // 4).perform()
    ro = d.find_element(by, "#readout")                 # a quarter in and three quarters down: row 3n/4, col n/4
    r, c = int(ro.get_attribute("data-row")), int(ro.get_attribute("data-col"))
    assert abs(r - 3 * kept / 4) <= 2 and abs(c - kept / 4) <= 2
    want = whole[(whole.layer == l) & (whole["head"] == h) & (whole.row == r) & (whole.col == c)].weight.item()
    assert float(ro.get_attribute("data-weight")) == want
    assert _errors(d) == []


# --------------------------------------------------------------------- through a notebook's saved output
NOTEBOOK_CELLS = [
    "MODEL, ROOT, TEXT, PAIRS = {model!r}, {root!r}, {text!r}, {pairs!r}",
    "import pandas as pd\nimport headwatch as hw\n\nhw.set_progress(False)\nm = hw.load_model(MODEL)\n"
    "cfg = hw.load_config(ROOT + '/config/quick.yaml')",
    "heads = hw.patch_heads(m, pd.DataFrame(PAIRS), settings=cfg['patching'], top_k=2, resid=True)\n"
    "paths = hw.path_patching(m, pd.DataFrame(PAIRS), heads, patching=cfg['patching'], receivers=[(2, 1)])\n"
    "edges = hw.edge_scores(m, pd.DataFrame(PAIRS), settings=cfg['edges'])",
    "hw.explore(m, TEXT, heads=heads, paths=paths, edges=edges)",
]


@pytest.fixture(scope="module")
def saved_output(tiny_model_dir):
    """The text/html and text/plain a notebook saved for its cell ``hw.explore(...)``, executed by a
    kernel on the tiny model, with the tables the notebook made (as the test reads them back)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src.format(
        model=str(tiny_model_dir), root=str(ROOT), text=TEXT, pairs=PAIRS)) for src in NOTEBOOK_CELLS])
    nb.cells.append(nbformat.v4.new_code_cell("import pickle\nprint(pickle.dumps(dict(heads=heads, paths=paths, "
                                              "edges=edges)).hex())"))
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True).execute()
    errors = [f"{o.ename}: {o.evalue}" for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert errors == []
    import pickle

    tables = pickle.loads(bytes.fromhex(nb.cells[-1].outputs[0].text.strip()))
    saved = nbformat.reads(nbformat.writes(nb), as_version=4)                             # as saved, read back
    (data,) = [o["data"] for o in saved.cells[3].outputs if "text/html" in o.get("data", {})]
    return data, tables


def test_the_notebook_shows_the_page_and_its_views_answer(saved_output, tiny, browser, tmp_path):
    """Executed, the notebook's cell holds the page (text/html: a frame whose srcdoc is the page;
    text/plain: what it holds). Opened in Chromium: the text's views of one head — lines from each
    token to the tokens it reads, the text coloured from one position — answer hovers and clicks
    with the maps' own weights; the grid opens a head in every view, a ranked bar too, and each
    names the head's scores; the tables given have their sections; the text is text; no console
    error."""
    data, tables = saved_output
    m = tiny
    assert "3 layers × 4 heads; 1 text" in data["text/plain"] and "with heads, paths, edges" in data["text/plain"]
    assert data["text/html"].startswith('<iframe srcdoc="') and 'sandbox="allow-scripts"' in data["text/html"]
    maps = hw.attention_maps(m, hw.sequences(m, [TEXT]))
    tokens = maps.attrs["tables"]["tokens"]["token"].tolist()
    n = len(tokens)
    assert n <= 64, "the map of a short text is drawn cell by cell"

    def weight(l, h, r, c):
        return maps[(maps.layer == l) & (maps["head"] == h) & (maps.row == r) & (maps.col == c)].weight.item()

    d, by = browser, "css selector"
    _open_frame(d, data["text/html"], tmp_path / "cell.html")
    assert d.find_element(by, "#text-section").is_displayed()
    toc = [a.text for a in d.find_elements(by, "#toc a")]
    assert toc[0] == "Your text: what one head reads" and "Edge scores: the strongest edges of the graph" in toc
    for section in ("patching", "circuits", "edge-scores"):
        assert d.find_element(by, f"#{section}-section").is_displayed(), section
    assert not d.find_element(by, "#ablation-section").is_displayed()

    # a grid thumbnail opens its head in the map and in the text's views, each naming its scores
    from selenium.webdriver.support.ui import Select
    d.find_element(by, "#cell-L2-H1").click()
    view = d.find_element(by, "#head-view")
    assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == ("2", "1")
    assert Select(d.find_element(by, "#text-layer")).first_selected_option.text == "2"
    assert Select(d.find_element(by, "#text-head")).first_selected_option.text == "1"
    head_scores = d.find_element(by, "#head-scores").text
    assert head_scores.startswith("sink ") and d.find_element(by, "#text-scores").text == \
        f"L2 H1 on “text 0”: {head_scores}"

    # the thumbnail's pixels: each cell the colour of its weight (the page's colour map), grey above the diagonal
    import matplotlib

    def pixel(canvas, x, y):
        return d.execute_script("return Array.from(arguments[0].getContext('2d').getImageData(arguments[1], "
                                "arguments[2], 1, 1).data)", canvas, x, y)

    viridis = matplotlib.colormaps["viridis"]
    thumb = d.find_element(by, "#cell-L2-H1")
    for r, c in ((n - 1, 0), (n - 1, n - 1), (n // 2, 1)):
        rgb = [round(255 * x) for x in viridis(round(255 * weight(2, 1, r, c)) / 255)[:3]]
        assert pixel(thumb, c, r) == rgb + [255], (r, c)
    assert pixel(thumb, n - 1, 0) == [242, 242, 242, 255]

    # lines: every line of weight above 0; hover a token on the left: its row's lines alone, the maps' weights
    def lines():
        return {(int(e.get_attribute("data-row")), int(e.get_attribute("data-col"))): float(e.get_attribute("data-weight"))
                for e in d.find_elements(by, "#lines-svg line.attn")}

    head = maps[(maps.layer == 2) & (maps["head"] == 1) & (maps.weight > 0)]
    assert lines() == {(r.row, r.col): r.weight for r in head.itertuples()}
    r = n - 1
    _hover(d, d.find_element(by, f"#line-row-{r}"))
    row = head[head.row == r]
    assert lines() == {(r, x.col): x.weight for x in row.itertuples()} and len(row) >= 1
    assert d.find_element(by, "#lines-readout").get_attribute("data-row") == str(r)
    top = row.sort_values("weight", ascending=False, kind="mergesort").iloc[0]
    assert markup.display_token(tokens[int(top.col)]) + " " in d.find_element(by, "#lines-readout").text.split("reads most: ")[1]
    _hover(d, d.find_element(by, "#line-col-0"))                   # who reads the first token
    assert lines() == {(x.row, 0): x.weight for x in head[head.col == 0].itertuples()}

    # the text coloured from one position: the last by default, then the one clicked
    box = d.find_element(by, "#tokens-view")
    assert box.get_attribute("data-from") == str(n - 1)
    f = n // 2
    d.find_element(by, f"#tok-{f}").click()
    assert box.get_attribute("data-from") == str(f)
    shown = [e.get_attribute("data-weight") for e in d.find_elements(by, "#tokens-view .tok")]
    assert [float(w) for w in shown[:f + 1]] == [weight(2, 1, f, c) for c in range(f + 1)] and set(shown[f + 1:]) == {""}
    _hover(d, d.find_element(by, "#tok-0"))
    assert d.find_element(by, "#tokens-readout").text == readout_text(tokens[f], tokens[0], weight(2, 1, f, 0))

    # the layer and head selects set the page's head; a ranked bar does too
    Select(d.find_element(by, "#text-layer")).select_by_visible_text("0")
    assert view.get_attribute("data-layer") == "0" and d.find_element(by, "#text-scores").text.startswith("L0 H1")
    bar = d.find_element(by, "#bars .bar")
    l, h = bar.get_attribute("data-layer"), bar.get_attribute("data-head")
    bar.click()
    assert Select(d.find_element(by, "#text-layer")).first_selected_option.text == l
    assert Select(d.find_element(by, "#text-head")).first_selected_option.text == h
    assert "On this page, the scores of your text" in d.find_element(by, "#score-def").text

    # the map of one head: a cell hovered shows its weight
    _hover(d, d.find_element(by, f"#map-cell-{r}-0"))
    assert float(d.find_element(by, "#readout").get_attribute("data-weight")) == weight(int(l), int(h), r, 0)

    # the tables given: named by the function that made them; the edge table per method
    assert "(hw.patch_heads)" in d.find_element(by, "#patching-top-data caption").text
    assert "(hw.path_patching)" in d.find_element(by, "#circuits-edges-data caption").text
    edges = tables["edges"]

    def listed():
        return [c.text for c in d.find_elements(by, "#edge-scores-data tbody td:first-child")]

    for method in ("eap", "eap_ig"):
        d.find_element(by, f"#edge-score-method-{method}").click()
        want = edges.reindex(edges[method].abs().sort_values(ascending=False, kind="mergesort").index)["edge"][:50]
        assert listed() == [str(e) for e in want], method
    labels = tables["heads"].attrs["note"]["position_labels"]          # the residual stream beside the heads
    assert len(d.find_elements(by, "#patching-resid .patch-cell")) == 3 * len(labels)

    # the text is text: the markup in it is shown, never made
    assert not d.find_elements(by, "img") and not d.find_elements(by, "b")
    shown = d.find_element(by, "#tokens-view").text                # the override: split into bytes by the tokenizer
    assert "<img␣src=x␣onerror=alert(1)><b>x</b>" in shown and "\u202e" not in shown
    assert _errors(d) == []


def _payload(page: str) -> dict:
    """The JSON a compressed page holds."""
    packed = page.split(f'data-encoding="{COMPRESSED}">', 1)[1].split("</script>", 1)[0]
    return json.loads(zlib.decompress(base64.b64decode(packed)))


def test_the_saved_page_is_the_cells_page(saved_output, tiny, tmp_path):
    """``.save`` writes what the cell shows; the page's data is the JSON of the workflow's builder,
    compressed: every phrase's maps decoded equal the maps of ``hw.attention_maps`` on the text; a
    cut table given is the ablation section's, named by the function that made it."""
    from headwatch.explorer import decode_phrase

    data, _ = saved_output
    payload = _payload(html.unescape(data["text/html"].split('srcdoc="', 1)[1].split('"', 1)[0]))
    m = tiny
    maps = hw.attention_maps(m, hw.sequences(m, [TEXT]))
    (entry,) = payload["phrases"]
    dense = decode_phrase(entry, entry["n"], 3, 4, payload["quantum"])
    assert np.array_equal(dense[maps.layer, maps["head"], maps.row, maps.col], maps.weight.to_numpy(np.float64))
    assert entry["tokens"] == maps.attrs["tables"]["tokens"]["token"].tolist() and entry["prediction"]["expected"] is None
    cuts = pd.DataFrame([dict(method="zero", k=k, n_cut_targeted=k, n_cut_random=k, n_draws=2,
                              **{f"{w}_{c}": 1.0 + k for c in ("copy1", "copy2") for w in ("intact", "targeted")},
                              **{f"random_{c}_{s}": 1.0 for c in ("copy1", "copy2") for s in ("mean", "min", "max")})
                         for k in (1, 2)])
    page = hw.explore(m, TEXT, cuts=cuts)
    got = _payload(page.save(tmp_path / "page.html").read_text())
    assert got["ablation"]["topk"]["rows"] == [list(r) for r in cuts.itertuples(index=False)]
    assert got["made_by"] == {"topk": "hw.cut_heads"} and "with cuts" in page.summary
    phrases = hw.token_set(m, "phrases")                 # the protocol's phrases: their expected tokens said
    got = _payload(hw.explore(m, phrases).html)
    assert [p["name"] for p in got["phrases"]] == phrases["phrase"].tolist()
    assert [p["prediction"]["expected"] for p in got["phrases"]] == [markup.display_token(e) for e in phrases.expected]
    with pytest.raises(TableError, match=r"hw.explore: texts holds phrase 'names' twice \(rows 2 and 2\)"):
        hw.explore(m, pd.concat([phrases, phrases[phrases.phrase == "names"]]))


def test_the_lens_section_says_what_a_head_writes_reads_and_feeds(tiny, browser, tmp_path):
    """hw.explore's ``lens``: the weights' circuits with the direct effects and the verdict. The section's grid
    colours every head by its OV copying score; a click (in the section or on the page's grid) says what that
    head writes, reads and feeds — its numbers the tables' —, and the verdict and the logit lens are drawn."""
    from selenium.webdriver.common.by import By

    m = tiny
    prompts = hw.prompt_pairs(m, pd.DataFrame(dict(
        clean=["When Mary and John went to the shop, John gave a drink to"],
        corrupted=["When Alice and Bob went to the shop, Tom gave a drink to"], answer=[" Mary"], distractor=[" John"])))
    heads = hw.patch_heads(m, prompts)
    paths = hw.path_patching(m, prompts, heads, receivers_top_k=1)
    circuits = hw.weight_circuits(m, null_draws=20)
    direct = hw.direct_effects(m, prompts, heads)
    verdict = hw.weights_vs_paths(circuits, paths)
    page = hw.explore(m, "a b c d e", paths=paths, lens=[circuits, direct, verdict])
    assert "with paths, lens" in page.summary
    _open_frame(browser, page, tmp_path / "lens.html")
    d = browser
    assert d.find_element(By.ID, "lens-section").is_displayed()
    assert "What each head writes, reads and feeds" in [a.text for a in d.find_elements(By.CSS_SELECTOR, "#toc a")]
    assert len(d.find_elements(By.CSS_SELECTOR, "#lens-grid .cell")) == m.adapter.n_layers * m.adapter.n_heads
    d.find_element(By.ID, "lens-cell-L2-H1").click()
    line = d.find_element(By.ID, "lens-head")
    row = circuits.set_index(["layer", "head"]).loc[(2, 1)]
    assert line.get_attribute("data-head") == "L2 H1" and f"OV copying {row.ov_copying:.3g}"[:14] in line.text
    mine = direct.attrs["tables"]["heads"].set_index(["layer", "head"]).loc[(2, 1)]
    assert "direct " in line.text and "of total " in line.text, (line.text, mine.direct, mine.total)
    assert "feeds no head" in line.text                                  # the last layer feeds none
    d.find_element(By.ID, "cell-L0-H2").click()                           # the page's own grid selects it too
    assert d.find_element(By.ID, "lens-head").get_attribute("data-head") == "L0 H2"
    assert "reads from no head" in d.find_element(By.ID, "lens-head").text
    verdict_rows = d.find_elements(By.CSS_SELECTOR, "#lens-verdict-table tbody tr")
    assert len(verdict_rows) == len(verdict)
    assert d.find_elements(By.CSS_SELECTOR, "#lens-logit-lens svg") == []          # no logit lens given: none drawn
    assert _errors(d) == []
