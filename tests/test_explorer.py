"""The explorer page (headwatch/explorer): the encoding by hand, the guards, and the page
itself driven end to end in headless Chromium (Debian's chromium + chromedriver, installed
by `make browser`; the test FAILS, never skips, when they are missing).

The page is built from a tiny run: a 3-layer × 4-head Llama (tests/tiny.py) through the
workflow's own code: attention maps and predictions (headwatch.scores.attention.phrase_outputs),
scores (headwatch.scores), the three ablation experiments (headwatch.ablation), and a sweep
summary (headwatch.sweep.summary) from made-up final losses.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from headwatch.model.arch import Adapter
from headwatch.scores.attention import phrase_outputs
from headwatch.explorer import (ExplorerDataError, ExplorerTables, build_explorer, config_shape, decode_phrase, display_token,
                                encode_phrase, explorer_payload, flat_index, percent, readout_text, rotary_options)
from headwatch.scores.heads import four_scores
from tiny import tiny_model

CHROMIUM = os.environ.get("HEADWATCH_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HEADWATCH_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]

WORDS = ["The", " cat", " sat", " on", " the", " mat", ".", " The", " cat", " sat", " on", " the"]
NAMES = ["When", " Mary", " and", " John", " went", " to", " the", " shop", ",", " John", " gave", " a",
         " drink", " to"]


# --------------------------------------------------------------------- tiny tables
class _Tok:
    """The one tokenizer method predictions_table needs."""
    def decode(self, ids):
        return f" t{ids[0]}"


def _phrase_rows():
    g = np.random.default_rng(0)
    rows = []
    for name, words in (("repetition", WORDS), ("names", NAMES)):
        ids = g.integers(1, 500, len(words)).tolist()
        rows.append(dict(phrase=name, token_ids=ids, tokens=list(words), expected=" mat", expected_id=7,
                         also=None, also_id=None))
    return pd.DataFrame(rows)


ABLATION_PARAMS = dict(top_n=4, method="zero", k=[1, 2, 4], random_draws=3, seed=0, batch=64, rounding_factor=1.0,
                       hook_tolerance=0.0,
                       guard_sequences=2, circuit=dict(half_threshold=0.1),
                       attribution=dict(no_effect_points=0.5, together=3, global_loss_nats=0.1))


def ablation_tables(model, adapter, scores, repeated_ids, phrases, prose) -> dict:
    """The ablation tables of the tiny run, by the workflow's own code (headwatch.ablation)."""
    from headwatch.ablation.experiments import run_attribution, run_circuit, run_topk
    from headwatch.settings.ablation import AblationSettings

    seqs = pd.DataFrame(dict(seq=range(len(repeated_ids)), token_ids=[r.tolist() for r in repeated_ids],
                             half_length=repeated_ids.shape[1] // 2, offset=0))
    settings = AblationSettings.from_config(ABLATION_PARAMS)
    topk, _, _ = run_topk(model, adapter, seqs, scores, settings)
    circuit_scores, circuit_loss, _, _ = run_circuit(model, adapter, seqs, scores, settings)
    attribution, attribution_summary, _, _, _ = run_attribution(model, adapter, phrases, prose, settings)
    return dict(topk=topk, circuit_scores=circuit_scores, circuit_loss=circuit_loss, attribution=attribution,
                attribution_summary=attribution_summary)


def sweep_tables() -> dict:
    """Sweep summary and contrast by headwatch.sweep.summary, from made-up final losses."""
    from headwatch.sweep.summary import summarize

    finals = []
    for sweep, grid in (("heads_split", [(16, 1), (16, 2), (16, 4)]), ("width", [(8, 1), (16, 2)])):
        for i, (w, h) in enumerate(grid):
            for seed in (0, 1):
                finals.append(dict(sweep=sweep, shape=f"w{w}-h{h}", seed=seed, width=w, heads=h, trained_under=sweep,
                                   params=1000 * w, head_size=w // h, steps=5, val_loss=3.0 - 0.1 * i + 0.02 * seed,
                                   train_loss=2.9 - 0.1 * i, tokens_per_s=1000.0))
    summary, contrast = summarize(pd.DataFrame(finals), "heads_split", dict(sweep="width", **{"from": 8, "to": 16}),
                                  dict(resamples=200, seed=0, level=0.95))
    return dict(sweep_summary=summary, sweep_contrast=contrast)


@pytest.fixture(scope="module")
def tiny_tables():
    """maps / tokens / predictions / scores of a 3 × 4 tiny Llama, through the workflow's code."""
    model = tiny_model("llama")
    adapter = Adapter(model)
    maps, tokens, predictions = phrase_outputs(model, _Tok(), _phrase_rows(), quantum=256, top=5)
    g = torch.Generator().manual_seed(1)
    first = torch.randint(1, 500, (4, 10), generator=g)
    prose = [torch.randint(1, 500, (1, 12), generator=g) for _ in range(3)]
    repeated = torch.cat([first, first], dim=1)
    scores = four_scores(model, adapter, prose, repeated, half_length=10)
    shape = config_shape(model.config, "float32")
    return dict(maps=maps, tokens=tokens, predictions=predictions, scores=scores, shape=shape,
                layers=adapter.n_layers, heads=adapter.n_heads,
                ablation=ablation_tables(model, adapter, scores, repeated, _phrase_rows(),
                                         pd.DataFrame(dict(seq=range(len(prose)), token_ids=[p[0].tolist() for p in prose]))),
                sweep=sweep_tables())


# --------------------------------------------------------------------- by hand
def test_flat_index_by_hand():
    # 2 heads, 3 tokens: 6 lower-triangle cells per head; (layer 1, head 0, row 2, col 1):
    # (1 * 2 + 0) * 6 + 2 * 3 / 2 + 1 = 12 + 3 + 1 = 16
    assert flat_index(1, 0, 2, 1, heads=2, n=3) == 16
    assert flat_index(0, 0, 0, 0, heads=2, n=3) == 0
    assert flat_index(1, 1, 2, 2, heads=2, n=3) == 2 * 2 * 6 - 1   # the last cell


def _hand_maps():
    """1 layer × 2 heads × 3 tokens, weights in 1/256 steps (one of them 1 = 256/256)."""
    cells = {(0, 0, 0): 256, (0, 1, 0): 100, (0, 1, 1): 156, (0, 2, 0): 0, (0, 2, 1): 255, (0, 2, 2): 1,
             (1, 0, 0): 256, (1, 1, 0): 3, (1, 1, 1): 253, (1, 2, 0): 86, (1, 2, 1): 85, (1, 2, 2): 85}
    return pd.DataFrame([dict(phrase="p", layer=0, head=h, row=r, col=c, weight=np.float32(q / 256))
                         for (h, r, c), q in cells.items()]), cells


def test_encoding_is_exact_with_the_escape_for_255_and_256():
    maps, cells = _hand_maps()
    enc = encode_phrase(maps, "p", n=3, layers=1, heads=2, quantum=256)
    import base64
    raw = np.frombuffer(base64.b64decode(enc["maps"]), np.uint8)
    # head 0: [256, 100, 156, 0, 255, 1] -> bytes [255, 100, 156, 0, 255, 1]; head 1 likewise
    assert raw.tolist() == [255, 100, 156, 0, 255, 1, 255, 3, 253, 86, 85, 85]
    esc_i = np.frombuffer(base64.b64decode(enc["escape_index"]), "<u4").tolist()
    esc_v = np.frombuffer(base64.b64decode(enc["escape_value"]), "<u4").tolist()
    assert dict(zip(esc_i, esc_v)) == {0: 256, 4: 255, 6: 256}
    dense = decode_phrase(enc, n=3, layers=1, heads=2, quantum=256)
    for (h, r, c), q in cells.items():
        assert dense[0, h, r, c] == q / 256
    assert dense[0, 0, 0, 1] == 0 and dense[0, 1, 1, 2] == 0   # above the diagonal


def test_roundtrip_on_the_tiny_run(tiny_tables):
    t = tiny_tables
    m = t["maps"]
    for phrase, n in t["tokens"].groupby("phrase").size().items():
        enc = encode_phrase(m, phrase, n, t["layers"], t["heads"], 256)
        dense = decode_phrase(enc, n, t["layers"], t["heads"], 256)
        sub = m[m.phrase == phrase]
        got = dense[sub.layer, sub["head"], sub.row, sub.col]
        assert np.array_equal(got, sub.weight.to_numpy(np.float64)), phrase


def test_guards_raise_and_name_what_is_wrong(tiny_tables):
    maps, _ = _hand_maps()
    with pytest.raises(ExplorerDataError, match=r"phrase 'p': 1 of 12 .* missing \(first: layer 0, head 1, row 2, col 1\)"):
        encode_phrase(maps.drop(index=10), "p", 3, 1, 2, 256)
    off = maps.copy()
    off.loc[3, "weight"] = 0.3
    with pytest.raises(ExplorerDataError, match=r"not a multiple of 1/256"):
        encode_phrase(off, "p", 3, 1, 2, 256)
    with pytest.raises(ExplorerDataError, match=r"outside 1 layers × 2 heads × 2 tokens"):
        encode_phrase(maps, "p", 2, 1, 2, 256)
    t = tiny_tables
    with pytest.raises(ExplorerDataError, match=r"scores: 11 rows, but the model has 3 layers × 4 heads"):
        explorer_payload(page_of(t, scores=t["scores"].iloc[1:]))


def test_display_and_readout_text():
    assert display_token(" cat") == "␣cat" and display_token("\n") == "↵" and display_token("") == "∅"
    assert percent(82 / 256) == "32.03 %" and percent(1.0) == "100.00 %"
    assert percent(8 / 256) == "3.13 %" and percent(24 / 256) == "9.38 %"     # ties up, as toFixed rounds them
    assert readout_text(" sat", "The", 0.5) == "␣sat → The: 50.00 %"


def test_rotary_options_dedupe_bases_and_keep_the_model_first():
    shape = dict(rotary_base=100000.0, rotary_dims=64)
    refs = [dict(label="pythia", base=10000.0), dict(label="smol", base=100000.0), dict(label="qwen", base=1e6),
            dict(label="gpt2", base=None)]
    assert rotary_options("m", shape, refs) == [dict(label="m, smol", base=100000.0),
                                                 dict(label="pythia", base=10000.0),
                                                 dict(label="qwen", base=1e6)]


def page_of(t: dict, tables: dict | None = None, **facts) -> ExplorerTables:
    """The tiny model's page: its spine (``scores`` etc. replaced by ``facts``), the sections' ``tables``."""
    spine = dict(maps=t["maps"], tokens=t["tokens"], scores=t["scores"], model="tiny", shape=t["shape"], quantum=256)
    return ExplorerTables(**{**spine, **facts}, tables=tables or {})


def with_note(table: pd.DataFrame, note: dict) -> pd.DataFrame:
    """``table`` carrying ``note`` as its ``attrs["note"]`` (as report_explorer reads it from its file)."""
    out = table.copy()
    out.attrs["note"] = note
    return out


def test_optional_sections_and_self_contained_html(tiny_tables):
    t = tiny_tables
    bare = explorer_payload(page_of(t, predictions=t["predictions"]))
    assert "ablation" not in bare and "sweep" not in bare
    full = explorer_payload(page_of(t, {**t["ablation"], **t["sweep"]}, predictions=t["predictions"]))
    assert set(full["ablation"]) == {"topk", "circuit_scores", "circuit_loss", "attribution", "attribution_summary"}
    assert len(full["ablation"]["attribution"]["names"]["drop"]) == t["layers"] * t["heads"]
    assert full["sweep"]["summary"]["columns"][:2] == ["sweep", "shape"]
    html = build_explorer(page_of(t, predictions=t["predictions"]))
    lower = html.lower()
    for bad in ("<script src", "<link", "@import", "url(http", "cdn.", "fetch(", "xmlhttprequest"):
        assert bad not in lower, bad
    assert html.count('<script type="application/json" id="explorer-data">') == 1


# --------------------------------------------------------------------- path patching's edges
HOSTILE = "<img src=x onerror=alert(1)></script><b>x</b>"


def _paths_table(threshold=0.15):
    """Hand-made edges of the tiny 3 × 4 model, in circuits/paths.parquet's columns: every head
    of layers 0 and 1 into L2H1's q, k and v, |score| 0.01 … 0.24 by hand, signs alternating;
    and a note, two of its texts markup (shown as text)."""
    rows = []
    for k, (l, h, x) in enumerate((l, h, x) for l in (0, 1) for h in range(4) for x in "qkv"):
        score = round(0.01 * (k + 1) * (-1) ** k, 4)
        rows.append(dict(sender=f"L{l}H{h}", sender_layer=l, sender_head=h, receiver="L2H1", receiver_layer=2,
                         receiver_head=1, input=x, group=None if x == "q" else 0, logit_diff=2.0 * score + 0.5,
                         score=score))
    t = pd.DataFrame(rows)
    t["group"] = t["group"].astype("Int64")
    t["rank_into_receiver"] = t["score"].abs().rank(ascending=False, method="min").astype(int)
    note = dict(prompts=8, edges=len(t), edge_threshold=threshold, receivers="L2H1", receivers_from=HOSTILE,
                senders_from="every head of every earlier layer", clean_logit_diff=2.5, corrupted_logit_diff=0.5,
                grouped_note=f"2 heads share each key/value group {HOSTILE}")
    return t, note


def test_the_edges_go_strongest_first_and_a_table_that_cannot_be_one_is_refused(tiny_tables):
    from headwatch.explorer.panels import circuits_payload

    t, note = _paths_table()
    got = circuits_payload(t, note, 3, 4)
    score = [r[got["edges"]["columns"].index("score")] for r in got["edges"]["rows"]]
    assert score == sorted(t["score"], key=abs, reverse=True) and got["summary"]["edge_threshold"] == 0.15
    assert got["edges"]["rows"][0][:3] == ["L1H3", "L2H1", "v"] and got["summary"]["receivers_from"] == HOSTILE

    def refused(change, words, n=note):
        bad = t.copy()
        change(bad)
        with pytest.raises(ExplorerDataError, match=words):
            circuits_payload(bad, n, 3, 4)

    refused(lambda x: x.drop(columns="input", inplace=True), r"lacks \['input'\]")
    refused(lambda x: x.loc.__setitem__((0, "sender_head"), 4), "outside the model's 3 layers × 4 heads")
    refused(lambda x: x.loc.__setitem__((0, "receiver_layer"), 0), "layer 0 is not below the receiver's 0")
    refused(lambda x: x.loc.__setitem__((0, "input"), "o"), "none of")
    refused(lambda x: x.loc.__setitem__((0, "sender"), HOSTILE), "labels disagree")
    refused(lambda x: None, r"lacks \['grouped_note'\]", {k: v for k, v in note.items() if k != "grouped_note"})
    refused(lambda x: None, "edge_threshold -1 is not a number", dict(note, edge_threshold=-1))
    with pytest.raises(ExplorerDataError, match="come together"):
        explorer_payload(page_of(tiny_tables, dict(circuits_paths=t)))


# --------------------------------------------------------------------- the browser
def chromium(profile: Path, bidi: bool = False):
    """Headless Chromium through its chromedriver, offline, its browser log kept; ``bidi``: speaking
    WebDriver BiDi too (it hears every frame's console, where the browser log misses a sandboxed
    frame's). Fails, never skips, when the browser or selenium is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() and os.access(p, os.X_OK))]
    if missing:
        pytest.fail(f"the explorer's browser test needs Debian's chromium and chromium-driver, but "
                    f"{', '.join(missing)} is missing: run `make browser` (apt-get install -y chromium "
                    f"chromium-driver; `make test` does it first)", pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as err:
        pytest.fail(f"selenium is not installed ({err}): pip install -r requirements.txt", pytrace=False)
    os.environ["SE_OFFLINE"] = "true"   # selenium-manager must never download a driver or browser
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    opts.enable_bidi = bidi
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(tiny_tables, tmp_path_factory):
    t = tiny_tables
    out = tmp_path_factory.mktemp("explorer") / "explorer.html"
    build_explorer(page_of(t, {**t["ablation"], **t["sweep"]}, model="tiny-llama", predictions=t["predictions"],
                           rotary=rotary_options("tiny-llama", t["shape"], [dict(label="a-1e6-model", base=1e6)]),
                           rotary_distance=100), out=out)
    return out


def _open(driver, path):
    driver.get(Path(path).resolve().as_uri())
    assert driver.find_element("tag name", "body").get_attribute("data-ready") == "true", \
        "the page's script did not finish: " + str(driver.get_log("browser"))


def _hover(driver, element):
    from selenium.webdriver.common.action_chains import ActionChains
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    ActionChains(driver).move_to_element(element).perform()


def _bar_order(driver):
    return [(int(b.get_attribute("data-layer")), int(b.get_attribute("data-head")))
            for b in driver.find_elements("css selector", "#bars .bar")]


def test_page_in_chromium(browser, page, tiny_tables, tmp_path):
    d, t = browser, tiny_tables
    L, H = t["layers"], t["heads"]
    _open(d, page)
    by = "css selector"

    # the grid: layers × heads cells, layer 0 on top, head 0 on the left
    cells = d.find_elements(by, "#grid canvas.head-cell")
    assert len(cells) == L * H
    top = d.find_element(by, "#cell-L0-H0").location
    below = d.find_element(by, f"#cell-L{L - 1}-H0").location
    right = d.find_element(by, f"#cell-L0-H{H - 1}").location
    assert top["y"] < below["y"] and top["x"] < right["x"]

    # clicking a head shows that head, with the phrase's tokens on both axes
    from selenium.webdriver.support.ui import Select
    Select(d.find_element(by, "#phrase-select")).select_by_visible_text("names (14 tokens)")
    d.find_element(by, "#cell-L2-H1").click()
    view = d.find_element(by, "#head-view")
    assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == ("2", "1")
    assert "L2 H1" in d.find_element(by, "#head-title").text
    n = len(NAMES)
    assert len(d.find_elements(by, "#head-map rect.map-cell")) == n * (n + 1) // 2
    assert [e.text for e in d.find_elements(by, "#head-map text.rowlab")] == [display_token(w) for w in NAMES]
    assert [e.get_attribute("textContent") for e in d.find_elements(by, "#head-map text.collab")] == \
        [display_token(w) for w in NAMES]

    # hovering a known cell shows the value stored in the Parquet
    m = t["maps"]
    head = m[(m.phrase == "names") & (m.layer == 2) & (m["head"] == 1) & (m.row > 0)]
    known = head.loc[head.weight.idxmax()]
    r, c, w = int(known.row), int(known.col), float(known.weight)
    _hover(d, d.find_element(by, f"#map-cell-{r}-{c}"))
    ro = d.find_element(by, "#readout")
    assert (ro.get_attribute("data-row"), ro.get_attribute("data-col")) == (str(r), str(c))
    assert float(ro.get_attribute("data-weight")) == w
    assert d.find_element(by, "#readout-text").text == readout_text(NAMES[r], NAMES[c], w)
    _hover(d, d.find_element(by, "#map-cell-0-0"))            # weight 1 = 256/256: the escaped value
    assert float(ro.get_attribute("data-weight")) == 1.0
    assert d.find_element(by, "#readout-text").text.endswith(": 100.00 %")

    # switching scores reorders the bars, in the order of the scores table's ranks
    Select(d.find_element(by, "#bar-count")).select_by_value(str(L * H))
    s = t["scores"]
    orders = {}
    for score in ("sink", "prev", "self", "induction"):
        d.find_element(by, f"#score-{score}").click()
        assert d.find_element(by, "#bars").get_attribute("data-score") == score
        orders[score] = _bar_order(d)
        expected = s.sort_values([f"{score}_rank", "layer", "head"])
        assert orders[score] == list(zip(expected.layer, expected["head"])), score
        first = d.find_element(by, "#bars .bar")
        assert float(first.get_attribute("data-value")) == float(expected[score].iloc[0])
    assert orders["sink"] != orders["induction"], "the tiny run must rank heads differently by score"

    # a bar jumps to its head
    l, h = orders["induction"][-1]
    d.find_element(by, f"#bar-L{l}-H{h}").click()
    assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == (str(l), str(h))
    assert "selected" in d.find_element(by, f"#cell-L{l}-H{h}").get_attribute("class")

    # attribution heat map: the hovered head's drop is the table's
    attr = t["ablation"]["attribution"]
    cell = d.find_element(by, "#attr-L1-H3")
    _hover(d, cell)
    want = attr[(attr.phrase == "names") & (attr.layer == 1) & (attr["head"] == 3)]["drop_points"].item()
    assert float(d.find_element(by, "#attr-readout").get_attribute("data-drop")) == want
    assert d.find_element(by, "#ablation-section").is_displayed()
    assert len(d.find_elements(by, "#topk-plot svg")) == 2

    # the cut method: the configured one shown first, every other a click away; plots and table follow
    topk = t["ablation"]["topk"]
    methods = list(dict.fromkeys(topk["method"]))
    assert methods == [ABLATION_PARAMS["method"], "mean"]
    j = list(topk.columns).index("method") + 1

    def shown(method):
        assert d.find_element(by, "#topk-methods").get_attribute("data-method") == method
        cells = [c.text for c in d.find_elements(by, f"#topk-data tbody td:nth-child({j})")]
        assert cells == [method] * int((topk["method"] == method).sum())
        titles = [e.text for e in d.find_elements(by, "#topk-plot svg text") if e.text.startswith("copy ")]
        assert len(titles) == 2 and all(x.endswith(f"{method} cut") for x in titles), titles

    shown(methods[0])
    d.find_element(by, f"#topk-method-{methods[1]}").click()
    shown(methods[1])
    assert len(d.find_elements(by, "#topk-plot svg")) == 2
    d.find_element(by, f"#topk-method-{methods[0]}").click()
    shown(methods[0])
    assert len(d.find_elements(by, "#sweep-plot svg")) == 2   # one panel per sweep

    # rotary clock: head size 16 → P = 8 pairs; base 10000, distance 100: periods
    # 2π·10000^((n−1)/8) = 6.3, 19.9, 62.8, 198.7, 628, 1987, 6283, 19869 → 5 not wrapped
    summary = d.find_element(by, "#rotary-summary")
    assert t["shape"]["rotary_dims"] == 16 and t["shape"]["rotary_base"] == 10000.0
    assert summary.get_attribute("data-pairs") == "8" and summary.get_attribute("data-unwrapped") == "5"
    assert math.isclose(float(summary.get_attribute("data-reach")), 2 * math.pi * 10000 ** (7 / 8), rel_tol=1e-12)
    assert len(d.find_elements(by, "#rotary-clocks .clock.wrapped")) == 3
    d.find_element(by, "#rotary-base-1").click()                        # base 1e6: periods 6.3, 35, 199, ...
    assert summary.get_attribute("data-unwrapped") == "6"
    dist = d.find_element(by, "#rotary-distance")
    dist.clear()
    dist.send_keys("7")                                                   # only pair 1 (6.28) has wrapped
    assert summary.get_attribute("data-unwrapped") == "7"

    # KV cache: SmolLM2's numbers by hand: 2 × 30 layers × 3 kv heads × 64 × 4 bytes = 46 080 B/token
    def typed(key, value):
        box = d.find_element(by, f"#{key}")
        box.clear()
        box.send_keys(str(value))

    row = lambda k: d.find_element(by, f"#kv-row-{k}")
    for key, value in (("kv-layers", 30), ("kv-heads", 9), ("kv-kvheads", 3), ("kv-headdim", 64), ("kv-context", 8192)):
        typed(key, value)
    Select(d.find_element(by, "#kv-bytes")).select_by_value("4")
    assert row("per_token").get_attribute("data-value") == "46080"
    assert row("at_context").get_attribute("data-value") == str(46080 * 8192)
    assert row("per_token_no_sharing").get_attribute("data-value") == "138240"
    assert row("cells").get_attribute("data-value") == str(8192 ** 2 * 9 * 30)
    # what changes and what does not: back to the tiny model (2 kv heads), then 1 kv head
    d.find_element(by, "#kv-reset").click()
    assert all("same" in e.get_attribute("class") for e in d.find_elements(by, "#kv-table tbody tr"))
    typed("kv-kvheads", 1)
    changed = {e.get_attribute("id")[len("kv-row-"):] for e in d.find_elements(by, "#kv-table tbody tr.changed")}
    assert changed == {"per_token", "at_context", "sharing"}      # the cache; not the maps, not the no-sharing cache
    assert row("per_token").get_attribute("data-value") == str(2 * 3 * 1 * 16 * 4)
    assert row("cells").get_attribute("data-value") == str(256 ** 2 * 4 * 3)

    shot = tmp_path / "explorer.png"
    d.find_element(by, "#cell-L2-H1").click()
    _hover(d, d.find_element(by, f"#map-cell-{r}-{c}"))
    d.execute_script("window.scrollTo(0, 0)")
    assert d.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe


def test_the_path_patching_panel_draws_and_lists_the_edges_of_a_hand_made_table(browser, tiny_tables, tmp_path):
    """The edges with |score| at or above the note's threshold drawn from sender to receiver
    (colour the input, dashed when negative) and listed strongest first; the threshold box
    redraws them; a node opens its head; the note's markup is text."""
    t = tiny_tables
    edges, note = _paths_table()
    out = tmp_path / "circuits.html"
    build_explorer(page_of(t, dict(circuits_paths=with_note(edges, note)), model="tiny-llama"), out=out)
    d, by = browser, "css selector"
    _open(d, out)
    assert d.find_element(by, "#circuits-section").is_displayed()
    assert "Path patching: which earlier head a head reads" in [a.text for a in d.find_elements(by, "#toc a")]

    def drawn():
        return {(e.get_attribute("data-sender"), e.get_attribute("data-receiver"), e.get_attribute("data-input"),
                 float(e.get_attribute("data-score")), bool(e.get_attribute("stroke-dasharray")))
                for e in d.find_elements(by, "#circuits-graph path.edge")}

    def wanted(threshold):
        kept = edges[edges["score"].abs() >= threshold]
        return {(f"L{r.sender_layer} H{r.sender_head}", f"L{r.receiver_layer} H{r.receiver_head}", r.input, r.score,
                 r.score < 0) for r in kept.itertuples()}

    above = edges[edges["score"].abs() >= 0.15].sort_values("score", key=abs, ascending=False)
    assert len(above) == 10 and drawn() == wanted(0.15)
    assert d.find_element(by, "#edge-count").get_attribute("data-shown") == "10"
    assert d.find_element(by, "#edge-threshold").get_attribute("value") == "0.15"
    rows = d.find_elements(by, "#circuits-edges-data tbody tr")
    assert [[c.text for c in r.find_elements(by, "td")[:3]] for r in rows] == \
        [[r.sender, r.receiver, r.input] for r in above.itertuples()]
    strongest = d.find_element(by, "#edge-0")
    assert strongest.get_attribute("stroke") == "#009E73"                 # into v: the third colour
    d.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseenter'))", strongest)
    ro = d.find_element(by, "#edge-readout")
    assert float(ro.get_attribute("data-score")) == above["score"].iloc[0]
    assert ro.text == f"L1 H3 → L2 H1 (v): score {above['score'].iloc[0]:g} (logit difference " \
                      f"{above['logit_diff'].iloc[0]:g})"

    box = d.find_element(by, "#edge-threshold")
    for typed, threshold in (("0", 0.0), ("0.2", 0.2), ("9", 9.0)):
        box.clear()
        box.send_keys(typed)
        assert drawn() == wanted(threshold), typed
        assert len(d.find_elements(by, "#circuits-edges-data tbody tr")) == len(wanted(threshold))
    assert "receiver" in d.find_element(by, "#node-L2-H1").get_attribute("class")
    assert "receiver" not in d.find_element(by, "#node-L1-H1").get_attribute("class")
    d.find_element(by, "#node-L1-H3").click()
    view = d.find_element(by, "#head-view")
    assert (view.get_attribute("data-layer"), view.get_attribute("data-head")) == ("1", "3")

    line = d.find_element(by, "#circuits-line").text
    assert HOSTILE in line and "circuits.edge_threshold = 0.15" in line
    assert not d.find_elements(by, "#circuits-section img") and not d.find_elements(by, "#circuits-section b")
    assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def _edge_circuit():
    """A hand-made smallest faithful circuit of the tiny model (edges/circuit.parquet's columns, one role
    markup, shown as text), its note and the areas table."""
    circuit = pd.DataFrame([
        dict(sender="input", receiver="L0H1 q", score=0.2, sender_role="", receiver_role=HOSTILE, sender_kind="input",
             sender_layer=-1, receiver_kind="q", receiver_layer=0),
        dict(sender="L0H1", receiver="L2G0 k", score=-0.9, sender_role="§5d: patching rank 1", receiver_role="",
             sender_kind="head", sender_layer=0, receiver_kind="k", receiver_layer=2),
        dict(sender="L2H0", receiver="logits", score=0.5, sender_role="", receiver_role="", sender_kind="head",
             sender_layer=2, receiver_kind="logits", receiver_layer=3)])
    note = dict(method="eap-ig", ranking="signed", threshold=0.8, found=True, fraction=0.02, edges=3, kept=3,
                faithfulness=0.91)
    areas = pd.DataFrame([dict(method="eap", draw=-1, cpr=0.3, cmd=0.4), dict(method="eap-ig", draw=-1, cpr=0.9,
                                                                              cmd=0.1)])
    return circuit, note, areas


def test_the_edge_circuit_panel_lists_the_circuit_strongest_first_and_its_areas(browser, tiny_tables, tmp_path):
    from headwatch.explorer.panels import edges_payload

    circuit, note, areas = _edge_circuit()
    got = edges_payload(circuit, note, areas, 3)
    assert [r[0] for r in got["circuit"]["rows"]] == ["L0H1", "L2H0", "input"] and got["summary"]["kept"] == 3
    with pytest.raises(ExplorerDataError, match="a layer outside the model's 3"):
        edges_payload(circuit.assign(sender_layer=[5, 0, 2]), note, areas, 3)
    with pytest.raises(ExplorerDataError, match=r"lacks \['cmd'\]"):
        edges_payload(circuit, note, areas.drop(columns="cmd"), 3)
    t = tiny_tables
    out = tmp_path / "edges.html"
    build_explorer(page_of(t, dict(edges_circuit=with_note(circuit, note), edges_areas=areas), model="tiny-llama"),
                   out=out)
    d, by = browser, "css selector"
    _open(d, out)
    assert d.find_element(by, "#edges-section").is_displayed()
    rows = d.find_elements(by, "#edges-circuit-data tbody tr")
    assert [[c.text for c in r.find_elements(by, "td")[:2]] for r in rows] == \
        [["L0H1", "L2G0 k"], ["L2H0", "logits"], ["input", "L0H1 q"]]
    assert HOSTILE in d.find_element(by, "#edges-section").text and not d.find_elements(by, "#edges-section img")
    assert len(d.find_elements(by, "#edges-areas-data tbody tr")) == 2
    assert "faithfulness 0.91" in d.find_element(by, "#edges-line").text
    assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def test_page_without_optional_tables_omits_their_sections(browser, tiny_tables, tmp_path):
    t = tiny_tables
    out = tmp_path / "bare.html"
    build_explorer(page_of(t, model="bare", shape=dict(t["shape"], rotary_dims=0)), out=out)
    _open(browser, out)
    by = "css selector"
    assert not browser.find_element(by, "#ablation-section").is_displayed()
    assert not browser.find_element(by, "#sweep-section").is_displayed()
    assert not browser.find_element(by, "#circuits-section").is_displayed()
    assert not browser.find_element(by, "#edges-section").is_displayed()
    assert browser.find_element(by, "#rotary-none").is_displayed()
    assert len(browser.find_elements(by, "#grid canvas.head-cell")) == t["layers"] * t["heads"]
    assert [a.text for a in browser.find_elements(by, "#toc a")] == \
        ["Where every head looks", "Heads ranked by score", "Rotary clock", "KV cache calculator"]


# --------------------------------------------------------------------- report pages and captions
def test_table_page_prints_numbers_and_notes():
    from headwatch.explorer.tables import cell_text, table_page

    assert [cell_text(v) for v in (3, 0.123456, 12345.678, float("nan"), ["L0H1", "L2H3"], None)] == \
        ["3", "0.1235", "12346", "–", "L0H1; L2H3", "–"]
    page = table_page(pd.DataFrame(dict(head=["L0H1", "<b>"], drop_points=[1.5, -0.25])), "t.parquet",
                      {"drop_points": "percentage points"})
    assert "2 rows × 2 columns" in page and "<dt>drop_points</dt><dd>percentage points</dd>" in page
    assert "<td class=\"\">-0.25</td>" in page and "&lt;b&gt;" in page and "<b>" not in page.split("<body>")[1]


def test_every_caption_named_in_the_rules_exists_and_is_a_template():
    import re

    import jinja2

    root = Path(__file__).resolve().parents[1]
    named = set()
    for smk in (root / "rules").glob("*.smk"):
        named |= set(re.findall(r'caption="\.\./report/([\w.-]+\.rst)"', smk.read_text()))
    assert {"explorer.rst", "table.rst", "figures_grid.rst"} <= named
    for name in named:
        assert (root / "report" / name).exists(), f"rules name report/{name}, which does not exist"
    env = jinja2.Environment()
    for rst in (root / "report").glob("*.rst"):
        env.parse(rst.read_text())   # Snakemake renders captions as Jinja templates
