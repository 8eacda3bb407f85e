"""Activation patching on a researcher's own prompt pairs (headwatch/patching/pairs.py, headwatch/settings/pairs.py):
prompts of different lengths in one left-padded batch, their guard, and hostile pairs files."""
import json
import os
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT
from headwatch.model import arch
from headwatch.guards import batched_vs_loop, rounding
from headwatch.patching import guards
from headwatch.model.arch import Adapter
from headwatch.patching.pairs import pair_prompt_set, position_scores
from headwatch.patching.batch import PromptBatch
from headwatch.patching.patcher import Patch, Patcher, head_patches, position_patches, resid_patches
from headwatch.patching.attribution import attribution_patching
from headwatch.patching.heads import run_patching
from headwatch.settings.pairs import COLUMNS, PairsError, pair_errors, pairs_path, read_pairs
from headwatch.model.sources.files import CAPS
from headwatch.settings.patching import PatchingSettings, patching_errors, prompt_keys
from tiny import random_ids, tiny_model

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
LENGTHS = (7, 10, 12)


def _prompts(lengths=LENGTHS, per=2):
    """A prompts table of random clean/corrupted pairs of three lengths (two prompts each), as a
    pairs file gives it: each corrupted prompt differs from its clean twin at two positions."""
    rows = []
    for i, n in enumerate(x for x in lengths for _ in range(per)):
        clean = random_ids(1, n, seed=10 + i)[0]
        corrupted = clean.clone()
        corrupted[[1, n - 3]] = random_ids(1, 2, seed=40 + i)[0]
        rows.append(dict(prompt=i, line=i + 2, clean_ids=clean.tolist(), corrupted_ids=corrupted.tolist(),
                         tokens=[f"t{x}" for x in clean.tolist()], answer_id=int(random_ids(1, 1, seed=70 + i)[0, 0]),
                         distractor_id=int(random_ids(1, 1, seed=90 + i)[0, 0])))
    return pd.DataFrame(rows)


def _patcher(model, prompts=None, batch=16):
    prompts = _prompts() if prompts is None else prompts
    return Patcher(model, Adapter(model), PromptBatch.of(prompts), batch)


# ------------------------------------------------------------------ padding, every family
def test_a_padded_batch_gives_each_prompt_as_run_alone_on_every_family(model):
    p = _patcher(model)
    mask = p.prompts.mask
    assert mask is not None and mask.shape == (6, max(LENGTHS)) and mask.sum(1).tolist() == [7, 7, 10, 10, 12, 12]
    rec = guards.padded_vs_alone(p, range(6), 1.0)
    assert rec["passed"] and rec["n_cases"] == 12 and rec["max_abs_diff"] <= rec["bound"]
    assert {c["padding"] for c in rec["cases"]} == {5, 2, 0}
    sample = [0, 2, 4]                                       # one prompt of each length
    for r in (guards.nothing_patched(p, sample), guards.everything_patched(p, sample),
              guards.clean_to_clean(p, sample, [(1, 1), (2, 0)])):
        assert r["passed"] and r["identical"], r
    patches = head_patches(p.adapter)[::5] + resid_patches(p.adapter, p.length)[::7] + position_patches([(1, 2)], p.length)[::4]
    batched = p.run(patches)
    rec = batched_vs_loop(p.against_loop(patches, batched[:, sample], sample),
                          rounding(p.adapter, 1.0, p.largest_logit), "logit difference")
    assert rec["passed"]


def test_the_padding_guard_fires_without_position_ids(monkeypatch):
    """GPT-2 (absolute positions) with the padding masked but no position ids: each padded prompt's
    tokens sit at positions shifted by the padding, and its logits are not its own."""
    p = _patcher(tiny_model("gpt2"))
    assert guards.padded_vs_alone(p, [0, 4], 1.0)["passed"]
    monkeypatch.setattr(arch, "padded_inputs", lambda mask: {} if mask is None else dict(attention_mask=mask))
    with pytest.raises(guards.GuardError, match=r"padded_vs_alone: .* past its bound in 2 of 4 cases: .*'padding': 5"
                       ) as failed:
        guards.padded_vs_alone(p, [0, 4], 1.0)
    assert failed.value.record["ratio"] > 100
    with pytest.raises(guards.GuardError, match="nothing is padded"):
        guards.padded_vs_alone(_patcher(tiny_model("gpt2"), _prompts((9,))), [0], 1.0)


def test_the_padding_bound_follows_the_logits_scale():
    """Rounding grows with the logits: the bound is u × the largest |logit| × depth × √terms, so a model
    whose logits are 10^4 times larger passes as the model itself does, and the record says the scale it
    used; the missing position ids still fail by far more than that bound."""
    model = tiny_model("gpt2")
    p = _patcher(model)
    plain = guards.padded_vs_alone(p, [0, 4], 1.0)
    with torch.no_grad():
        model.lm_head.weight.mul_(1e4)
    loud = guards.padded_vs_alone(_patcher(model), [0, 4], 1.0)
    r = loud["rounding"]
    assert loud["passed"] and r["magnitude"] > 1e3 * plain["rounding"]["magnitude"]
    assert loud["bound"] == pytest.approx(2 ** -24 * r["magnitude"] * (3 + 1) * 256 ** 0.5)   # gpt2: 4 × width 64
    assert (r["factor"], r["dtype"], r["depth"], r["terms"]) == (1.0, "float32", 4, 256)


def test_the_metric_is_each_prompts_last_token_and_a_patch_is_the_same_padded_or_alone():
    """The clean and corrupted logit differences and a head's patched one, in the padded batch,
    equal those of each length's prompts in their own unpadded batch; so does attribution
    patching's estimate (a sum over prompts: the padding's gradient is 0)."""
    model = tiny_model("llama")
    prompts = _prompts()
    p = _patcher(model, prompts)
    patches = [Patch("z", 1, 2), Patch("resid_in", 2, None, p.length - 1)]
    padded = p.run(patches)
    n = len(prompts)
    estimate = attribution_patching(model, p.adapter, p.prompts, 4)
    by_length = torch.zeros_like(estimate)
    for T in LENGTHS:
        rows = [i for i in range(n) if len(prompts.clean_ids[i]) == T]
        alone = _patcher(model, prompts.iloc[rows].reset_index(drop=True))
        assert alone.prompts.mask is None
        torch.testing.assert_close(p.clean_ld[rows], alone.clean_ld, atol=1e-5, rtol=0)
        torch.testing.assert_close(p.corrupted_ld[rows], alone.corrupted_ld, atol=1e-5, rtol=0)
        own = [Patch("z", 1, 2), Patch("resid_in", 2, None, T - 1)]
        torch.testing.assert_close(padded[:, rows], alone.run(own), atol=1e-5, rtol=0)
        by_length += attribution_patching(model, alone.adapter, alone.prompts, 4) * len(rows) / n
    assert estimate.abs().max() > 1e-4
    torch.testing.assert_close(estimate, by_length, atol=1e-6, rtol=1e-4)


def test_positions_from_the_end_average_only_the_prompts_that_have_one():
    ld = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])       # two patches (columns 0 and 2) × three prompts
    mask = torch.tensor([[0, 0, 1], [0, 1, 1], [1, 1, 1]])      # lengths 1, 2, 3
    clean, corrupted = torch.tensor([3.0, 4.0, 5.0]), torch.tensor([1.0, 1.0, 1.0])
    got = position_scores(ld, [0, 2], mask, clean, corrupted)
    assert got["prompts"].tolist() == [1, 3]
    assert got["logit_diff"].tolist() == [3.0, 5.0]
    assert got["score"].tolist() == [(3.0 - 1.0) / (5.0 - 1.0), (5.0 - 1.0) / (4.0 - 1.0)]


def test_the_sweep_on_pairs_aligns_positions_from_the_end():
    model = tiny_model("gpt2")
    prompts = _prompts()
    phrases = pd.DataFrame([dict(phrase="names", text="x", token_ids=[5, 6, 7], expected=" a", expected_id=3,
                                 also=" b", also_id=4)])
    settings = PatchingSettings.from_config(dict(CONFIG["patching"], top_k=2, batch=16, guard_prompts=2))
    got = run_patching(model, Adapter(model), prompts, phrases, settings)
    resid, positions, note, record = got.resid, got.positions, got.note, got.guards
    T = max(LENGTHS)
    assert sorted(set(resid["position"])) == list(range(-T, 0)) and len(note["position_labels"]) == T
    assert note["position_labels"][-1].startswith("−1")
    last = resid[resid.position == -1]
    assert (last["prompts"] == 6).all() and (resid[resid.position == -T]["prompts"] == 2).all()
    assert set(positions["position"]) == set(range(-T, 0))
    assert record["padded_vs_alone"]["passed"] and record["padded_vs_alone"]["n_cases"] == 2 * 4
    assert {c["tokens"] for c in record["padded_vs_alone"]["cases"]} == set(LENGTHS)
    # the embeddings patched where every pair agrees (the last token) change nothing: score 0;
    # where a pair differs (the third token from the end of each prompt), they move the answer
    first = resid[resid.layer == 0].set_index("position")["score"]
    assert abs(first[-1]) < 1e-4 and abs(first[-3]) > 1e-3


# ------------------------------------------------------------------ the pairs file
def _write(path, rows, kind="csv"):
    if kind == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [dict(clean="When Mary and John went to the shop, John gave a drink to",
             corrupted="When Alice and Bob went to the shop, Tom gave a drink to", answer=" Mary", distractor=" John"),
        dict(clean="Mary and John met; John thanked", corrupted="Alice and Bob met; Tom thanked",
             answer=" Mary", distractor=" John"),
        dict(clean="After a long day at the office, Sarah and Paul went home, and Paul handed the keys to",
             corrupted="After a long day at the office, Lisa and Mark went home, and Kate handed the keys to",
             answer=" Sarah", distractor=" Paul")]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_pairs_file_of_three_lengths_is_the_prompt_set(smollm2_tokenizer, tmp_path, kind):
    path = _write(tmp_path / f"pairs.{kind}", ROWS, kind)
    settings = PatchingSettings.from_config({"pairs": str(path), "pairs_outside_project": True})
    table, note = pair_prompt_set(smollm2_tokenizer, settings, tmp_path, "m1")
    assert len(table) == 3 and list(table.line) == ([2, 3, 4] if kind == "csv" else [1, 2, 3])
    assert len(set(table.clean_ids.map(len))) == 3 and (table.clean_ids.map(len) == table.corrupted_ids.map(len)).all()
    assert note["lengths"] == sorted(table.clean_ids.map(len)) and note["rows"] == 3
    assert [smollm2_tokenizer.decode([i]) for i in table.answer_id] == [" Mary", " Mary", " Sarah"]
    import hashlib
    assert note["pairs_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    batch = PromptBatch.of(table)
    clean, mask = batch.clean, batch.mask
    assert clean.shape == mask.shape and (clean[mask == 0] == 0).all()
    assert [list(clean[i][mask[i].bool()].tolist()) for i in range(3)] == [list(x) for x in table.clean_ids]
    assert prompt_keys({"pairs": "p.csv", "templates": None}) == ("pairs", "pairs_outside_project")
    assert prompt_keys(CONFIG["patching"]) == ("n", "seed", "templates", "names")


def _facts(tok, key="m1"):
    return SimpleNamespace(tokenizer=tok, key=key, shape=dict(layers=2, heads=4, context=512))


def _errors(tmp_path, tok, content: str | bytes, name="pairs.csv", **over):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    patching = {**CONFIG["patching"], "templates": None, "pairs": name, "guard_prompts": 1, "top_k": 2, **over}
    return "\n".join(patching_errors(dict(CONFIG, models_studied=["m1"], patching=patching), _facts(tok), tmp_path))


GOOD = "clean,corrupted,answer,distractor\n" + "".join(
    f'"{r["clean"]}","{r["corrupted"]}",{r["answer"]},{r["distractor"]}\n' for r in ROWS)


def test_hostile_pairs_files_are_refused_before_any_job_naming_the_line(smollm2_tokenizer, tmp_path):
    tok = smollm2_tokenizer
    assert _errors(tmp_path, tok, GOOD) == ""
    name = str(tmp_path / "pairs.csv")
    cases = {
        "clean,corrupted,answer\nA b,C d, Mary\n": r"pairs.csv: the header line \['clean', 'corrupted', 'answer'\] "
                                                   r"lacks the column\(s\) 'distractor'; the columns are",
        GOOD + '"",x, Mary, John\n': r"pairs.csv, line 5: clean is empty",
        GOOD + 'a b,c d, Maryland-upon-Thames, John\n': r"pairs.csv, line 5: answer = ' Maryland-upon-Thames' is split "
                                                        r".*\(model m1\)",
        GOOD + 'a b,c d, Mary, Mary\n': r"pairs.csv, line 5: the answer and the distractor are the same token",
        GOOD + 'Mary met John,Alice met Bob and Tom, Mary, John\n': r"pairs.csv, line 5: the clean prompt gives 3 "
                                                                  r"tokens and the corrupted one 5 \(model m1\)",
        GOOD + 'a,b,c,d,e\n': r"pairs.csv, line 5: 1 value\(s\) more than the header's 4 columns",
        "clean,corrupted,answer,distractor\n": r"pairs.csv: no rows",
        GOOD.replace("clean,", "clean,clean,", 1): r"pairs.csv, line",
    }
    for content, want in cases.items():
        got = _errors(tmp_path, tok, content)
        assert want and __import__("re").search(want, got), (want, got)
        assert name in got or "pairs.csv" in got
    assert "pairs.csv is not UTF-8" in _errors(tmp_path, tok, b"clean,corrupted\n\xff\xfe\n")
    got = _errors(tmp_path, tok, '{"clean": "a b", "corrupted": "c d", "answer": " Mary"}\n', "pairs.jsonl")
    assert "pairs.jsonl, line 1: its keys ['clean', 'corrupted', 'answer'] lacks the column(s) 'distractor'" in got
    assert "pairs.jsonl, line 2: not JSON" in _errors(tmp_path, tok, json.dumps(ROWS[0]) + "\n{oops\n", "pairs.jsonl")
    assert "pairs.jsonl, line 1: a JSON list" in _errors(tmp_path, tok, "[1, 2]\n", "pairs.jsonl")
    assert "pairs.jsonl, line 1: answer is a int, not text" in _errors(
        tmp_path, tok, json.dumps(dict(ROWS[0], answer=3)) + "\n", "pairs.jsonl")
    assert "patching.guard_prompts = 9: more than the 3 rows" in _errors(tmp_path, tok, GOOD, guard_prompts=9)
    # both sources, or neither
    both = dict(CONFIG, models_studied=["m1"], patching=dict(CONFIG["patching"], pairs="pairs.csv"))
    assert "exactly one of patching.templates and patching.pairs" in "".join(patching_errors(both, _facts(tok), tmp_path))


def test_a_misspelt_header_gets_did_you_mean_and_spaces_after_its_commas_are_stripped(smollm2_tokenizer, tmp_path):
    """The CSV path names the column a header misspells, as the table path does (and JSON Lines its key); a header
    written ``clean, corrupted, …`` is read by its names, the values as written."""
    tok = smollm2_tokenizer
    got = _errors(tmp_path, tok, GOOD.replace("corrupted", "corupted", 1))
    assert "the header line ['clean', 'corupted', 'answer', 'distractor'] lacks the column(s) 'corrupted' (it has " \
           "'corupted': did you mean 'corrupted'?)" in got, got
    got = _errors(tmp_path, tok, json.dumps(dict(ROWS[0], anwser=" Mary")).replace('"answer"', '"x"') + "\n",
                  "pairs.jsonl")
    assert "lacks the column(s) 'answer' (it has 'anwser': did you mean 'answer'?)" in got, got
    spaced = GOOD.replace("clean,corrupted,answer,distractor", "clean, corrupted,  answer ,distractor", 1)
    assert _errors(tmp_path, tok, spaced) == ""
    (tmp_path / "spaced.csv").write_text(spaced)
    rows = read_pairs(tmp_path / "spaced.csv")
    assert [r["answer"] for r in rows] == [r["answer"] for r in ROWS] and set(rows[0]) == {"line", *COLUMNS}


def test_a_digit_with_its_space_is_refused_with_the_fix_and_the_readmes_pairs_hold(smollm2_tokenizer, tmp_path):
    """On SmolLM2 " 7" is two tokens (" " and "7"): the refusal says to end the prompts with the space and answer
    "7"; the README's example pairs file (names, digits, code) passes every check as written."""
    import re

    rows = [dict(line=2, clean="3 + 4 =", corrupted="3 + 5 =", answer=" 7", distractor=" 12")]
    answer, distractor = pair_errors(rows, smollm2_tokenizer, "pairs.csv", "smollm2-135m")
    assert answer.startswith("pairs.csv, line 2: answer = ' 7' is split by the tokenizer into 2 tokens [' ', '7']")
    assert "end the clean and the corrupted prompt with it ('3 + 4 = ', not '3 + 4 =') and give the answer as '7', " \
           "one token; the distractor likewise" in answer
    assert "choose a distractor of one token after it ('12' is 2); the answer likewise" in distractor
    fixed = [dict(line=2, clean="3 + 4 = ", corrupted="3 + 5 = ", answer="7", distractor="8")]
    assert pair_errors(fixed, smollm2_tokenizer, "pairs.csv", "smollm2-135m") == []
    plain = pair_errors([dict(rows[0], answer=" Maryland-upon-Thames", distractor=" John")], smollm2_tokenizer,
                        "pairs.csv", "m")
    assert len(plain) == 1 and "token of its own" not in plain[0]         # a word split for other reasons: no such fix
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```csv\n(.*?)```", readme, re.S).group(1)
    (tmp_path / "readme.csv").write_text(block)
    rows = read_pairs(tmp_path / "readme.csv")
    assert pair_errors(rows, smollm2_tokenizer, "readme.csv", "smollm2-135m") == []
    assert [r["answer"] for r in rows] == [" Mary", "7", ")"]              # names, digits, code


def test_pd_read_csv_digits_are_refused_with_dtype_str(smollm2_tokenizer, tmp_path):
    """pd.read_csv turns a column of digits into integers (and an empty cell into NaN): refused with the fix, since
    the number has lost its text (" 7" and "7" both read as 7); read with dtype=str the same file is the pairs."""
    import headwatch as hw

    path = tmp_path / "sums.csv"
    path.write_text('clean,corrupted,answer,distractor\n"3 + 4 = ","3 + 5 = ",7,8\n"2 + 5 = ","2 + 6 = ",7,8\n')
    with pytest.raises(hw.PatchingError) as err:
        hw.prompt_pairs(smollm2_tokenizer, pd.read_csv(path))
    said = str(err.value)
    assert said.startswith("hw.prompt_pairs: pairs, row 0, column 'answer': 7 is a number, not a text") and \
           "pd.read_csv(path, dtype=str, keep_default_na=False)" in said, said
    (tmp_path / "empty.csv").write_text(path.read_text().replace(",7,8\n", ",7,\n", 1))   # an empty cell
    with pytest.raises(hw.PatchingError, match=r"row 0, column 'distractor': nan is empty \(NaN\): pd.read_csv reads"):
        hw.prompt_pairs(smollm2_tokenizer, pd.read_csv(tmp_path / "empty.csv", dtype=str))
    prompts = hw.prompt_pairs(smollm2_tokenizer, pd.read_csv(path, dtype=str, keep_default_na=False))
    assert [smollm2_tokenizer.decode([i]) for i in prompts.answer_id] == ["7", "7"]


def test_a_pairs_file_outside_the_project_or_not_a_file_is_refused(tmp_path):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    _write(elsewhere / "pairs.csv", ROWS)
    for given in ("../elsewhere/pairs.csv", str(elsewhere / "pairs.csv")):
        with pytest.raises(PairsError, match="outside the project directory"):
            pairs_path(given, project)
    with pytest.raises(PairsError, match="outside the project directory"):
        pairs_path("../elsewhere/pairs.csv", project, outside=True)      # only an absolute path may be allowed
    assert pairs_path(str(elsewhere / "pairs.csv"), project, outside=True) == (elsewhere / "pairs.csv").resolve()
    (project / "link.csv").symlink_to(elsewhere / "pairs.csv")
    with pytest.raises(PairsError, match="outside the project directory"):
        pairs_path("link.csv", project)
    (project / "passwd.csv").symlink_to("/etc/passwd")           # a name that looks right, leading elsewhere
    with pytest.raises(PairsError, match="leads to /etc/passwd, outside the project directory"):
        pairs_path("passwd.csv", project)
    with pytest.raises(PairsError, match="must end in one of"):
        pairs_path("pairs.txt", project)
    os.mkfifo(project / "fifo.csv")
    with pytest.raises(PairsError, match="FIFO"):
        read_pairs(pairs_path("fifo.csv", project))
    with open(project / "big.csv", "wb") as fh:
        fh.truncate(CAPS["pairs file"][0] + 1)
    with pytest.raises(PairsError, match="more than 64 MiB, the most a pairs file may hold"):
        read_pairs(project / "big.csv")
    _write(project / "many.csv", ROWS * 2)
    with pytest.raises(PairsError, match="more than 5 rows"):
        read_pairs(project / "many.csv", max_rows=5)


def test_a_hostile_pairs_file_stops_the_config_check_before_any_job(tiny_model_dir, tmp_path):
    from headwatch.config import ConfigError, check_config

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "schema.yaml").write_text((ROOT / "config" / "schema.yaml").read_text())
    (tmp_path / "pairs.csv").write_text(GOOD + 'a b,c d, Zzxqvbnmk, John\n')
    config = dict(CONFIG, models={"tiny-llama": {"source": str(tiny_model_dir), "dtype": "float32"}},
                  models_studied=["tiny-llama"],
                  patching=dict(CONFIG["patching"], templates=None, pairs="pairs.csv", guard_prompts=2, top_k=2),
                  anatomy=dict(CONFIG["anatomy"], references=[], clocks=[], swap_base={}),
                  report=dict(CONFIG["report"], explorer=dict(CONFIG["report"]["explorer"], rotary_references=[])))
    with pytest.raises(ConfigError, match=r"pairs\.csv, line 5: answer = ' Zzxqvbnmk' is split .* \(model tiny-llama\)"):
        check_config(config, tmp_path, cache=False)


def test_the_explorer_panel_carries_the_positions_from_the_end():
    from headwatch.explorer.panels import PATCHING_SUMMARY, patching_payload

    heads = pd.DataFrame(dict(layer=[0, 0], head=[0, 1], score=[0.5, 0.25], estimate_score=[0.4, 0.2],
                              logit_diff=[1.0, 0.5]))
    resid = pd.DataFrame(dict(layer=[0, 0, 0, 1, 1, 1], position=[-1, -3, -2] * 2, score=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]))
    note = dict({k: 1 for k in PATCHING_SUMMARY}, position_labels=["−3", "−2", "−1 ␣to"])
    got = patching_payload(heads, resid, note)["resid"]
    assert got["positions"] == [-3, -2, -1] and got["tokens"] == note["position_labels"]
    assert got["score"] == [0.2, 0.3, 0.1, 0.5, 0.6, 0.4]               # layer-major, the columns from -3 to -1
    js = (ROOT / "headwatch" / "explorer" / "explorer.js").read_text()
    assert "R.positions[p] < 0 ? ' from the end'" in js and "positions counted from the end" in js


def test_every_patching_table_says_the_task_of_its_own_prompts(tiny_model_dir):
    """A notebook's own pairs are not the two-names task: patch_heads, patch_positions and
    patch_kv_groups on them say the pairs' task and metric (once labelled "two names (indirect
    object)"); on the two-names set, that task's."""
    import headwatch as hw

    m = hw.load_model(tiny_model_dir)
    hw.set_progress(False)
    mine = hw.prompt_pairs(m, pd.DataFrame(dict(clean=["The opposite of hot is"], corrupted=["The opposite of big is"],
                                                answer=[" cold"], distractor=[" small"])))
    patching = dict(hw.load_config("config/quick.yaml")["patching"], n=4, guard_prompts=2, top_k=2)
    names = hw.prompt_pairs(m, settings=patching)
    for prompts, task in ((mine, "a researcher's prompt pairs"), (names, "two names (indirect object)")):
        heads = hw.patch_heads(m, prompts, patching, resid=False)
        tables = [heads, hw.patch_positions(m, prompts, heads, patching, positions_all_heads=2),
                  hw.patch_kv_groups(m, prompts, patching)]
        assert [t.attrs["note"]["task"][:len(task)] for t in tables] == [task] * 3
        assert ("logit(answer)" in heads.attrs["note"]["metric"]) == (prompts is mine)


def test_the_kv_and_cached_position_sweeps_run_on_the_first_rows_length():
    """A pairs file of several lengths: the key/value sweep and the cached per-position sweep patch
    every position of prompts that line up, so they run on the first row's length and say so; the
    same prompts given alone give the same table."""
    from headwatch.patching.pairs import one_length
    from headwatch.patching.positions import run_positions_all
    from headwatch.patching.kv import run_kv_patching

    model = tiny_model("qwen3")
    a = Adapter(model)
    prompts = _prompts()
    alone, note = one_length(prompts)
    assert len(alone) == 2 and set(alone.clean_ids.map(len)) == {LENGTHS[0]} and note["prompt_lines"] == [2, 3]
    assert one_length(alone) == (alone, {})
    heads = pd.DataFrame(a.heads(), columns=["layer", "head"])
    heads["score"] = [0.1 * ((7 * i) % 12) for i in range(len(heads))]
    heads["score_rank"] = heads["score"].rank(ascending=False, method="min").astype(int)
    settings = PatchingSettings(batch=16, rounding_factor=1.0, guard_prompts=2, positions_all_heads=2)
    for run in (lambda p: run_positions_all(model, a, p, heads, settings), lambda p: run_kv_patching(model, a, p, settings)):
        table, note, record = run(prompts)
        assert record["passed"] and "of the 6 prompts of the pairs file" in note["prompts_of_one_length"]
        assert note["prompts"] == 2 and note["length"] == LENGTHS[0]
        assert note["task"].startswith("a researcher's prompt pairs") and "logit(answer)" in note["metric"]
        same, note_alone, _ = run(alone)
        pd.testing.assert_frame_equal(table, same)
        assert "prompts_of_one_length" not in note_alone
