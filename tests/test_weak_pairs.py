"""Weak prompt pairs (headwatch/patching/separation.py, protocol §5d "Do the pairs separate?"): the verdict on
hand-computed gaps, and every patching result saying it — the table's note (and its Parquet metadata), the
figure's title, the explorer's patching section — with hw.patch_heads warning once where the pairs are weak."""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import pandas as pd
import pytest

import headwatch as hw
from headwatch.patching.separation import KEYS, headline, separation

T975 = {2: 4.302652729749464, 3: 3.182446305284263}      # Student's t quantile 0.975, by degrees of freedom

#: Three pairs whose gaps cancel: the second is the first's prompts swapped, the third differs again.
WEAK = pd.DataFrame(dict(clean=["When Mary and John went to the shop, John gave a drink to",
                                "When Alice and Bob went to the shop, Tom gave a drink to",
                                "When Mary and John went to the park, John gave a book to"],
                         corrupted=["When Alice and Bob went to the shop, Tom gave a drink to",
                                    "When Mary and John went to the shop, John gave a drink to",
                                    "When Alice and Bob went to the park, Tom gave a book to"],
                         answer=[" Mary"] * 3, distractor=[" John"] * 3))
#: One pair: no spread to weigh, its gap far above rounding (a pair given twice is refused: tables by their keys).
STRONG = WEAK.head(1)


def test_the_verdict_on_hand_computed_gaps():
    """The interval is the mean gap ± t(0.975, N − 1)·s/√N, widened by the rounding bound; the pairs separate
    when it excludes 0."""
    weak = separation([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], 1e-4)      # gap 2, s 1: half-width 4.3027/√3 = 2.484
    half = T975[2] * 1.0 / math.sqrt(3)
    assert weak["gap"] == pytest.approx(2.0) and weak["gap_pairs"] == 3
    assert weak["gap_low"] == pytest.approx(2 - half - 1e-4) and weak["gap_high"] == pytest.approx(2 + half + 1e-4)
    assert weak["pairs_separate"] is False and weak["separation"].startswith("WEAK PAIRS")
    strong = separation([1.5, 1.6, 1.4, 1.5], [0.5] * 4, 0.0)        # gap 1, s 0.08165: half-width 0.1299
    half = T975[3] * math.sqrt(0.02 / 3) / 2
    assert (strong["gap_low"], strong["gap_high"]) == (pytest.approx(1 - half), pytest.approx(1 + half))
    assert strong["pairs_separate"] is True
    assert f"within a factor {1 / (1 + half):.2f} to {1 / (1 - half):.2f}" in strong["separation"]
    flipped = separation([0.0] * 4, [1.5, 1.6, 1.4, 1.5], 0.0)       # corrupted above clean, every pair: resolved too
    assert flipped["pairs_separate"] is True and flipped["gap_high"] < 0
    assert separation([0.5], [0.2], 1e-3)["pairs_separate"] is True            # one pair: rounding alone
    one = separation([0.5], [0.5 - 1e-5], 1e-4)
    assert one["pairs_separate"] is False and "one pair" in one["separation"]
    assert separation([1.0, 1.0], [0.5, 0.5], 0.6)["pairs_separate"] is False    # a gap within rounding
    assert set(KEYS) <= set(weak) and headline({}) is None
    assert headline(weak).startswith("WEAK PAIRS") and headline(strong).startswith("the pairs separate")


@pytest.fixture(scope="module")
def m(tiny_model_dir):
    hw.set_progress(False)
    yield hw.load_model(tiny_model_dir)
    hw.set_progress(True)


def _patched(m, pairs):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        heads = hw.patch_heads(m, pairs)
    return heads, [w for w in seen if issubclass(w.category, hw.WeakPairsWarning)]


def test_patch_heads_warns_once_on_weak_pairs_and_every_result_says_it(m, tmp_path):
    from headwatch.tableio import read_note, write_parquet

    heads, warned = _patched(m, WEAK)
    note = heads.attrs["note"]
    assert note["pairs_separate"] is False and set(KEYS) <= set(note), note
    assert len(warned) == 1 and str(warned[0].message).startswith("hw.patch_heads: WEAK PAIRS")
    assert warned[0].filename == __file__                           # it points at the caller's line
    assert hw.WeakPairsWarning is __import__("headwatch.settings.patching").settings.patching.WeakPairsWarning
    write_parquet(heads, tmp_path / "heads.parquet", note=note)     # the workflow's table: its Parquet metadata
    back = read_note(tmp_path / "heads.parquet")
    assert back["pairs_separate"] is False and back["separation"] == note["separation"]
    fig = hw.plot_heads(heads)
    assert "WEAK PAIRS" in fig._suptitle.get_text()
    kv = hw.patch_kv_groups(m, WEAK)
    assert kv.attrs["note"]["pairs_separate"] is False and kv.attrs["note"]["gap"] == pytest.approx(note["gap"])

    strong, warned = _patched(m, STRONG)
    assert strong.attrs["note"]["pairs_separate"] is True and warned == []
    assert "the pairs separate" in hw.plot_heads(strong)._suptitle.get_text()


def test_the_explorers_patching_section_says_its_task_and_whether_the_pairs_separate(m):
    from headwatch.explorer.panels import patching_payload
    from headwatch.patching.prompts import TASK_NOTE

    heads, _ = _patched(m, WEAK)
    panel = patching_payload(heads, None, heads.attrs["note"])
    assert panel["title"] == "Activation patching: the heads that carry the answer"      # a researcher's pairs
    assert panel["separation"] == dict(weak=True, said=heads.attrs["note"]["separation"])
    names = dict(heads.attrs["note"], task=TASK_NOTE["task"])
    assert patching_payload(heads, None, names)["title"] == "Activation patching: the heads that carry the name"
    import headwatch.explorer

    page = (Path(headwatch.explorer.__file__).parent / "template.html").read_text()
    assert "carry the name" not in page and 'id="patching-title"' in page and 'id="patching-separation"' in page


def test_the_explorer_page_in_chromium_titles_the_section_by_its_task_and_flags_weak_pairs(m, tmp_path):
    """The page hw.explore saves, in Chromium: the patching section's title (and its entry in the contents) is the
    task's, and weak pairs are said in red above the maps."""
    from selenium.webdriver.common.by import By
    from test_explorer import _open, chromium

    heads, _ = _patched(m, WEAK)
    path = tmp_path / "page.html"
    hw.explore(m, "When Mary and John went to the shop", heads=heads).save(path)
    driver = chromium(tmp_path / "profile")
    try:
        _open(driver, path)
        assert driver.find_element(By.ID, "patching-title").text == "Activation patching: the heads that carry the answer"
        assert "Activation patching: the heads that carry the answer" in \
            [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#toc a")]
        said = driver.find_element(By.ID, "patching-separation")
        assert said.get_attribute("data-weak") == "true" and said.get_attribute("class") == "weak-pairs"
        assert said.text.startswith("WEAK PAIRS") and said.value_of_css_property("color") == "rgba(176, 0, 32, 1)"
    finally:
        driver.quit()


def test_weak_pairs_are_said_before_the_patches_run(m, monkeypatch):
    """The gap is known once the clean and corrupted runs are made: the warning comes then, before the head
    sweep (minutes on a large model), not after it."""
    from headwatch.patching.patcher import Patcher

    def no_patches(self, patches, *args, **kwargs):
        raise RuntimeError("the patches ran")

    monkeypatch.setattr(Patcher, "run", no_patches)
    with warnings.catch_warnings(record=True) as seen, pytest.raises(RuntimeError, match="the patches ran"):
        warnings.simplefilter("always")
        hw.patch_heads(m, WEAK)
    said = [w for w in seen if issubclass(w.category, hw.WeakPairsWarning)]
    assert len(said) == 1 and "said before the patches" in str(said[0].message) and said[0].filename == __file__
