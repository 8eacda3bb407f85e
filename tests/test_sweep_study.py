"""The sweep's summaries (headwatch.sweep.summary, headwatch.sweep.study): the split/capacity
contrast by hand and its guards; each study's invariant on the configured grids, a tiny experts
study trained and summarized in process, and the refusals when an invariant fails."""
import copy
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from headwatch.charlm.corpus import build_corpus
from headwatch.charlm.model import CharLM, count_params
from headwatch.charlm.spec import ModelSpec
from headwatch.tableio import write_parquet
from headwatch.settings.sweep import invariant_error, model_numbers, model_of
from headwatch.sweep.contrasts import beside_text, better, contrast_sentence, range_caveat, study_contrasts
from headwatch.sweep.plan import job_params, runs
from headwatch.sweep.study import read_study_runs, summarize_study
from headwatch.sweep.summary import SummaryError, summarize
from headwatch.sweep.train import train
from conftest import ROOT

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- summary
def finals(losses: dict, params: dict | None = None) -> pd.DataFrame:
    rows = []
    for (sweep, width, heads), values in losses.items():
        for seed, v in enumerate(values):
            rows.append(dict(sweep=sweep, shape=f"w{width}-h{heads}", seed=seed, width=width,
                             heads=heads, trained_under=sweep, head_size=width // heads,
                             params=(params or {}).get((sweep, width, heads), width * 100),
                             steps=10, val_loss=v, train_loss=v + 0.1, tokens_per_s=1000.0))
    return pd.DataFrame(rows)


LOSSES = {("split", 8, 1): [2.0, 2.2], ("split", 8, 2): [1.6, 1.8],     # means 2.1, 1.7
          ("width", 4, 1): [3.0, 3.2], ("width", 8, 2): [2.0, 2.0]}     # means 3.1, 2.0
CAP = dict(sweep="width", **{"from": 4, "to": 8})
BOOT = CONFIG["summary"]["bootstrap"]


def test_summary_spread_noise_gain_and_ratio_by_hand():
    summary, contrast = summarize(finals(LOSSES), "split", CAP, BOOT)
    row = summary.set_index(["sweep", "shape"]).loc[("split", "w8-h1")]
    assert row["val_loss_mean"] == pytest.approx(2.1) and row["val_loss_std"] == pytest.approx(0.1414214)
    c = contrast.iloc[0]
    assert (c["best_shape"], c["worst_shape"]) == ("w8-h2", "w8-h1")
    assert c["spread"] == pytest.approx(0.4)
    assert c["mean_seed_std"] == pytest.approx(math.sqrt(0.02))          # both stds are 0.1414
    assert c["capacity_gain"] == pytest.approx(1.1)
    assert c["spread_over_gain"] == pytest.approx(0.4 / 1.1)
    assert c["spread_over_std"] == pytest.approx(0.4 / math.sqrt(0.02))


def three_seeds(split: dict, cap: tuple) -> pd.DataFrame:
    """Hand-made finals of 3 seeds: split configurations of width 8 (heads: losses), the capacity
    sweep's w4-h1 and w8-h2 (``cap``: their losses)."""
    losses = {("split", 8, h): v for h, v in split.items()}
    losses.update({("width", 4, 1): cap[0], ("width", 8, 2): cap[1]})
    return finals(losses)


def test_the_bootstrap_intervals_exclude_0_for_configurations_apart_and_include_it_for_equal_ones():
    # Apart: h1 and h4 never overlap (every h4 seed beats every h1 seed), the width gain is clear.
    apart = three_seeds({1: [2.00, 2.02, 2.04], 2: [1.90, 1.93, 1.95], 4: [1.50, 1.51, 1.53]},
                        ([3.0, 3.05, 3.1], [2.0, 2.02, 2.05]))
    c = summarize(apart, "split", CAP, BOOT)[1].iloc[0]
    assert (c["best_shape"], c["worst_shape"]) == ("w8-h4", "w8-h1")
    for q in ("spread", "spread_over_std", "capacity_gain", "spread_over_gain"):
        assert 0 < c[f"{q}_lo"] <= c[f"{q}_hi"], q
    # The spread's interval spans what resampling 3 seeds can give: the worst-case and the best-case
    # (per configuration: min / max of its seeds) spreads bound it.
    assert 2.00 - 1.53 <= c["spread_lo"] and c["spread_hi"] <= 2.04 - 1.50
    # Paired, seed by seed: h1 - h4 = 0.50, 0.51, 0.51; the mean and an interval within the pairs.
    assert c["paired_seeds"] == 3 and c["paired_diff"] == pytest.approx(0.5066667)
    assert 0.50 <= c["paired_diff_lo"] <= c["paired_diff"] <= c["paired_diff_hi"] <= 0.51 + 1e-12
    assert c["split_resolved"] and c["width_resolved"] and c["split_p"] < 0.05
    assert (c["resamples"], c["level"]) == (BOOT["resamples"], BOOT["level"])

    # Equal: every configuration holds the same three losses: no spread beyond what resampling
    # makes, the width gain's interval includes 0, the paired difference is 0, nothing is resolved.
    # (The width sweep's two differ by a hair: a gain of exactly 0 makes spread / gain infinite,
    # which the summary refuses.)
    same = [2.0, 2.1, 1.9]
    equal = three_seeds({1: same, 2: same, 4: same}, (same, [2.0, 2.1, 1.91]))
    c = summarize(equal, "split", CAP, BOOT)[1].iloc[0]
    assert c["capacity_gain"] == pytest.approx(-0.01 / 3)
    assert c["capacity_gain_lo"] < 0 < c["capacity_gain_hi"]
    assert c["paired_diff"] == c["paired_diff_lo"] == c["paired_diff_hi"] == 0
    assert c["spread"] == 0 and c["spread_over_std"] == 0 and c["split_p"] == 1
    assert c["spread_over_std_lo"] < 1 and not c["split_resolved"] and not c["width_resolved"]


def test_the_bootstrap_is_repeatable_and_its_size_seed_and_level_are_the_configs():
    f = three_seeds({1: [2.0, 2.1, 2.05], 2: [1.95, 2.0, 2.1]}, ([3.0, 3.1, 3.2], [2.0, 2.1, 1.9]))
    a, b = (summarize(f, "split", CAP, BOOT)[1] for _ in range(2))
    pd.testing.assert_frame_equal(a, b)
    small = summarize(f, "split", CAP, dict(BOOT, resamples=200, seed=3, level=0.5))[1].iloc[0]
    assert (small["resamples"], small["resample_seed"], small["level"]) == (200, 3, 0.5)
    assert small["spread_hi"] - small["spread_lo"] < a["spread_hi"].iloc[0] - a["spread_lo"].iloc[0]


def test_the_paired_comparison_uses_the_same_seeds():
    # Seed effects shared by both configurations (seed 2 hard for both): unpaired, the seed spread
    # swamps the difference; paired, worst - best is 0.1 on every seed.
    f = three_seeds({1: [2.1, 2.5, 3.1], 2: [2.0, 2.4, 3.0]}, ([3.0, 3.1, 3.2], [2.0, 2.1, 2.2]))
    c = summarize(f, "split", CAP, BOOT)[1].iloc[0]
    assert c["paired_diff"] == pytest.approx(0.1)
    assert c["paired_diff_lo"] == pytest.approx(0.1) and c["paired_diff_hi"] == pytest.approx(0.1)
    assert c["spread_lo"] < 0.1 < c["spread_hi"] and c["spread_hi"] - c["spread_lo"] > 0.5
    # Seeds that differ between the split configurations: no pairs, refused.
    f.loc[(f["shape"] == "w8-h2") & (f["seed"] == 2), "seed"] = 7
    with pytest.raises(SummaryError, match="same seeds"):
        summarize(f, "split", CAP, BOOT)


def test_summary_refuses_differing_split_param_counts():
    bad = finals(LOSSES, params={("split", 8, 1): 800, ("split", 8, 2): 801})
    with pytest.raises(SummaryError, match="parameter count"):
        summarize(bad, "split", CAP, BOOT)


def test_summary_refuses_nan():
    nan = dict(LOSSES)
    nan[("split", 8, 2)] = [1.6, float("nan")]
    with pytest.raises(SummaryError, match="NaN.*split/w8-h2/seed1"):
        summarize(finals(nan), "split", CAP, BOOT)


# ---------------------------------------------------------------- two readings
def test_each_run_is_read_at_its_last_evaluation_and_at_its_best():
    """headwatch.sweep.summary.run_readings: the evaluations are the rows with a validation loss (a row a
    training loop adds between them, and a column it adds beside them, are not read); the best is the
    first evaluation of the lowest loss; the rise is last − best."""
    from headwatch.sweep.summary import at_reading, run_readings

    m = pd.DataFrame(dict(step=[10, 20, 25, 30, 40, 50], train_loss=[3.1, 2.4, 2.3, 2.2, 2.0, 1.9],
                          val_loss=[3.0, 2.0, np.nan, 2.1, 2.0, 2.5], tokens_per_s=1.0,
                          train_sample_loss=[9.0, 9.0, 9.0, 9.0, 9.0, 9.0], best_step=[99] * 6))
    r = run_readings(m.sample(frac=1, random_state=0))                   # any row order
    assert r == dict(steps=50, val_loss=2.5, train_loss=1.9, best_step=20, best_val_loss=2.0, best_train_loss=2.4,
                     rise=0.5, evaluations=5)
    f = pd.DataFrame([dict(shape="w8-h1", seed=0, **r)])
    assert (at_reading(f, "best")[["val_loss", "read_step"]].iloc[0].tolist() == [2.0, 20]
            and at_reading(f, "last")[["val_loss", "read_step"]].iloc[0].tolist() == [2.5, 50])
    with pytest.raises(SummaryError, match="no validation loss"):
        run_readings(m.assign(val_loss=np.nan))
    with pytest.raises(SummaryError, match="reading 'best' needs each run's curve"):
        at_reading(finals(LOSSES), "best")


def read_both(split: dict, cap: tuple) -> pd.DataFrame:
    """Hand-made finals read both ways: ``split`` {heads: [(last, best), …]} of width 8, the capacity sweep's
    w4-h1 and w8-h2 (``cap``: their (last, best) pairs); every best at step 5 of 10, 0 rise at step 10."""
    f = three_seeds({h: [x[0] for x in v] for h, v in split.items()}, tuple([x[0] for x in v] for v in cap))
    best = {("split", 8, h): [x[1] for x in v] for h, v in split.items()}
    best.update({("width", 4, 1): [x[1] for x in cap[0]], ("width", 8, 2): [x[1] for x in cap[1]]})
    f["best_val_loss"] = [best[(r.sweep, r.width, r.heads)][r.seed] for r in f.itertuples()]
    f["rise"] = f["val_loss"] - f["best_val_loss"]
    f["best_step"] = np.where(f["rise"] > 0, 5, 10)
    return f


def test_a_shape_overfits_where_its_rise_from_its_best_exceeds_the_seed_noise():
    """headwatch.sweep.summary.overfitting by hand: the seed noise is the split's mean seed std of the last
    loss; a rise far beyond it overfits, a rise of 0 is within it, a rise near it is not resolved; ranks at
    both readings; 2 seeds are too few for a verdict."""
    from headwatch.sweep.summary import overfitting

    # h1: last 2.00/2.10/2.05 (std 0.05), rises 0.50 0.52 0.51; h2: last 1.90/2.00/1.95 (std 0.05), no rise.
    f = read_both({1: [(2.00, 1.50), (2.10, 1.58), (2.05, 1.54)], 2: [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]},
                  ([(3.0, 2.96), (3.1, 3.02), (3.2, 3.13)], [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]))
    fit = overfitting(f, "split", BOOT).set_index(["sweep", "shape"])
    assert fit["seed_noise"].tolist() == pytest.approx([0.05] * 4)
    h1, h2, w4 = fit.loc[("split", "w8-h1")], fit.loc[("split", "w8-h2")], fit.loc[("width", "w4-h1")]
    assert h1["rise_mean"] == pytest.approx(0.51) and h1["rise_over_noise"] == pytest.approx(0.51 / 0.05)
    assert 0.50 <= h1["rise_lo"] <= h1["rise_hi"] <= 0.52 + 1e-12 and h1["verdict"] == "overfits"
    assert h2["rise_mean"] == 0 and h2["rise_over_noise_hi"] == 0 and h2["verdict"] == "within seed noise"
    assert h2["best_at_end"] == 3 and h1["best_at_end"] == 0 and (h1["best_step_min"], h1["last_step"]) == (5, 10)
    # w4-h1 rises 0.04, 0.08, 0.07 (mean 0.0633): about the seed noise, its ratio's interval holds 1
    assert w4["rise_mean"] == pytest.approx(0.19 / 3) and w4["rise_over_noise_lo"] < 1 < w4["rise_over_noise_hi"]
    assert w4["verdict"] == "not resolved"
    # h1 is worse than h2 at the last step and better at its best
    assert (h1["rank_last"], h1["rank_best"], h2["rank_last"], h2["rank_best"]) == (2, 1, 1, 2)
    assert h1["gap_mean"] == pytest.approx(-0.1)                   # the hand finals' train loss is val + 0.1
    two = overfitting(f[f["seed"] < 2], "split", BOOT)
    assert (two["verdict"] == "too few seeds").all() and two["rise_lo"].isna().all()


def test_the_summary_and_the_contrast_at_each_runs_best():
    """summarize(…, "best") is the same summary of each run's best loss, and names its reading."""
    f = read_both({1: [(2.00, 1.50), (2.10, 1.58), (2.05, 1.54)], 2: [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]},
                  ([(3.0, 2.96), (3.1, 3.02), (3.2, 3.13)], [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]))
    last, c_last = summarize(f, "split", CAP, BOOT)
    best, c_best = summarize(f, "split", CAP, BOOT, "best")
    assert set(last["reading"]) == {"last"} and set(best["reading"]) == {"best"}
    assert (c_last["reading"].iloc[0], c_best["reading"].iloc[0]) == ("last", "best")
    assert (c_last["best_shape"].iloc[0], c_best["best_shape"].iloc[0]) == ("w8-h2", "w8-h1")
    row = best.set_index(["sweep", "shape"]).loc[("split", "w8-h1")]
    assert row["val_loss_mean"] == pytest.approx(1.54) and (row["step_min"], row["step_max"]) == (5, 5)
    assert c_best["spread"].iloc[0] == pytest.approx(1.95 - 1.54)
    by_hand = summarize(f.assign(val_loss=f["best_val_loss"]), "split", CAP, BOOT)[1]
    pd.testing.assert_frame_equal(c_best.drop(columns="reading"), by_hand.drop(columns="reading"))


def test_the_pages_section_on_both_readings_is_written_from_the_tables():
    from headwatch.sweep.summary import overfitting, readings_section, split_verdict

    f = read_both({1: [(2.00, 1.50), (2.10, 1.58), (2.05, 1.54)], 2: [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]},
                  ([(3.0, 2.96), (3.1, 3.02), (3.2, 3.13)], [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]))
    t = {r: summarize(f, "split", CAP, BOOT, r) for r in ("last", "best")}
    fit = overfitting(f, "split", BOOT)
    text = "\n".join(readings_section({r: x[0] for r, x in t.items()}, {r: x[1].iloc[0] for r, x in t.items()}, fit,
                                      "readings.png", interval=5))
    assert "evaluations every 5 steps" in text and "![two readings](readings.png)" in text
    assert split_verdict(t["best"][1].iloc[0]) in text and split_verdict(t["last"][1].iloc[0]) in text
    assert "| split | w8-h1 | 3 | 2.0500 | 0.0500 | 2 | 1.5400 |" in text
    assert "the best split is w8-h2 at the last step and w8-h1 at each run's best" in text
    assert "w8-h1 2 → 1, w8-h2 1 → 2" in text and "overfits: w8-h1" in text


def test_a_further_pair_is_summarized_as_the_default_one_from_its_own_runs_at_both_readings():
    """headwatch.sweep.summary.summary_tables on a regularised pair's hand-made finals (a split and a width control
    with dropout, named as config.yaml names them): the same tables as the default pair's, from the same code, with
    its own contrast at both readings and its own seed noise as the overfitting's bar; the default pair's tables
    are summarize()'s, unchanged."""
    from headwatch.sweep.summary import READING_TABLES, overfitting, summary_tables
    from headwatch.workflow.targets import SWEEP_TABLES

    plain = read_both({1: [(2.00, 1.50), (2.10, 1.58), (2.05, 1.54)], 2: [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]},
                      ([(3.0, 2.96), (3.1, 3.02), (3.2, 3.13)], [(1.90, 1.90), (2.00, 2.00), (1.95, 1.95)]))
    # With dropout: h1 (last 1.80 1.84 1.82, never rises) beats h2 (last 1.90 1.96 1.93, best 0.02 lower each);
    # the width control w4-h1 2.50 2.60 2.55 (never rises) against the shared w8-h2.
    drop = read_both({1: [(1.80, 1.80), (1.84, 1.84), (1.82, 1.82)], 2: [(1.90, 1.88), (1.96, 1.94), (1.93, 1.91)]},
                     ([(2.50, 2.50), (2.60, 2.60), (2.55, 2.55)], [(1.90, 1.88), (1.96, 1.94), (1.93, 1.91)]))
    drop = drop.assign(sweep=drop["sweep"] + "_drop", trained_under=drop["trained_under"] + "_drop",
                       shape=drop["shape"] + "-drop0.2")
    pair = dict(split_sweep="split_drop", capacity=dict(sweep="width_drop", **{"from": 4, "to": 8}), bootstrap=BOOT)
    t = summary_tables(drop, pair)
    assert set(t) == set(SWEEP_TABLES) - {"finals", "curves"}
    last, best = t["contrast"].iloc[0], t["contrast_best"].iloc[0]
    assert (last["reading"], best["reading"]) == ("last", "best") and last["split_sweep"] == "split_drop"
    assert (last["best_shape"], last["worst_shape"]) == ("w8-h1-drop0.2", "w8-h2-drop0.2") == (
        best["best_shape"], best["worst_shape"])
    assert last["spread"] == pytest.approx(1.93 - 1.82) and best["spread"] == pytest.approx(1.91 - 1.82)
    assert last["mean_seed_std"] == pytest.approx((0.02 + 0.03) / 2)
    assert last["capacity_gain"] == pytest.approx(2.55 - 1.93) and best["capacity_gain"] == pytest.approx(2.55 - 1.91)
    assert (last["capacity_from"], last["capacity_to"]) == ("w4-h1-drop0.2", "w8-h2-drop0.2")
    assert set(t["summary_best"]["reading"]) == {"best"} and set(t["summary"]["sweep"]) == {"split_drop", "width_drop"}
    fit = t["overfitting"].set_index(["sweep", "shape"])
    assert fit["seed_noise"].tolist() == pytest.approx([0.025] * 4)             # its own split's, not the plain one's
    assert fit.loc[("split_drop", "w8-h1-drop0.2"), "verdict"] == "within seed noise"
    assert fit.loc[("split_drop", "w8-h2-drop0.2"), "rise_mean"] == pytest.approx(0.02)
    assert fit.loc[("width_drop", "w4-h1-drop0.2"), "rise_mean"] == 0
    # the default pair: the tables summarize() and overfitting() write, its noise its own split's (0.05)
    d = summary_tables(plain, dict(split_sweep="split", capacity=CAP, bootstrap=BOOT))
    for reading, (summary, contrast) in READING_TABLES.items():
        s, c = summarize(plain, "split", CAP, BOOT, reading)
        pd.testing.assert_frame_equal(d[summary], s)
        pd.testing.assert_frame_equal(d[contrast], c)
    pd.testing.assert_frame_equal(d["overfitting"], overfitting(plain, "split", BOOT))
    assert d["overfitting"]["seed_noise"].iloc[0] == pytest.approx(0.05)


# ---------------------------------------------------------------- budgets
def test_depth_sweep_budget_is_within_2_percent_with_heads_of_64():
    sw = CONFIG["sweeps"]["depth"]
    models = [model_of(CONFIG, e) for e in sw["grid"]]
    a = [model_numbers(m) for m in models]
    assert [x["layers"] for x in a] == [4, 8, 12] and {x["head_size"] for x in a} == {64}
    ne = [x["non_embedding"] for x in a]
    # Hand: L · (4·W·A + 8W² + 9W) + 2W with A = heads·64:
    #   4 · (4·256·256 + 8·65 536 + 2 304) + 512 = 3 155 456
    #   8 · (4·192·128 + 8·36 864 + 1 728) + 384 = 3 159 936   (+0.14 %)
    #  12 · (4·128·256 + 8·16 384 + 1 152) + 256 = 3 159 808   (+0.14 %)
    assert ne == [3_155_456, 3_159_936, 3_159_808]
    assert max(abs(n / ne[0] - 1) for n in ne) < 0.02
    for m, x in zip(models, a):        # the formula is the module's own count
        kw = {k: m[k] for k in ("head_size", "kv_heads") if k in m}
        model = CharLM(65, m["width"], m["heads"], layers=m["layers"], **kw)
        body = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("blocks.", "ln_f.")))
        assert body == x["non_embedding"]
    assert invariant_error(sw["study"], models) == ""
    # The textbook choice (width = heads × 64) misses the budget, and the study says so.
    bad = [dict(models[0]), dict(models[1], heads=3, head_size=64)]
    assert "outside" in invariant_error(sw["study"], bad) and "+12.60 %" in invariant_error(sw["study"], bad)


def test_experts_sweeps_have_equal_active_ffn_width_and_stored_vs_active_counts():
    for name in ("experts", "experts_topk"):
        sw = CONFIG["sweeps"][name]
        a = [model_numbers(model_of(CONFIG, e)) for e in sw["grid"]]
        assert {x["ffn_active_width"] for x in a} == {4 * 256}, name
        assert invariant_error(sw["study"], [model_of(CONFIG, e) for e in sw["grid"]]) == ""
    # 8 experts of half width (512), top 2: stored FFN 8 × (2·256·512 + 512 + 256) + router 256·8
    e8 = model_numbers(model_of(CONFIG, CONFIG["sweeps"]["experts"]["grid"][1]))
    assert e8["expert_width"] == 512 and e8["top_k"] == 2
    ffn_stored, ffn_active = 8 * (2 * 256 * 512 + 768) + 2048, 2 * (2 * 256 * 512 + 768) + 2048
    dense_ffn = 2 * 4 * 256 * 256 + 4 * 256 + 256
    plain = count_params(ModelSpec(65, 256, 4))["total"]
    assert e8["params_formula"] - plain == 4 * (ffn_stored - dense_ffn)
    assert e8["params_active_formula"] - plain == 4 * (ffn_active - dense_ffn)
    m = CharLM(65, 256, 4, experts=8, top_k=2)
    assert n_params(m) == e8["params_formula"] and m.active_params() == e8["params_active_formula"]
    # An arm with a different active width is refused.
    models = [model_of(CONFIG, e) for e in CONFIG["sweeps"]["experts_topk"]["grid"]]
    models[2] = dict(models[2], expert_width=512)
    assert "must be equal" in invariant_error({"kind": "experts"}, models)


# --------------------------------------------------- a tiny study, in process
TINY_TRAIN = dict(steps=6, batch=4, lr=3e-3, min_lr=3e-4, warmup=1, weight_decay=0.1, eval_every=3,
                  eval_batches=2, checkpoint_every=100)


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(plays=["tragedies/macbeth"], target_chars=20_000)


def test_a_tiny_experts_study_trains_and_summarizes_end_to_end(corpus, tmp_path):
    torch.set_num_threads(1)
    ids, meta = corpus.ids(), corpus.meta()
    cfg = dict(model=dict(layers=2, context=16, ffn_mult=4), precision="float32", device="cpu", sweeps=dict(ex=dict(
        study=dict(kind="experts"), seeds=[0, 1], train=TINY_TRAIN,
        grid=[dict(width=16, heads=2), dict(width=16, heads=2, experts=4, top_k=2, balance=0.01),
              dict(width=16, heads=2, experts=4, top_k=2, balance=0)])))
    planned = []
    for r in runs(cfg):
        job = job_params(cfg, r["sweep"], r["shape"], r["seed"])
        model, metrics, info, _ = train(ids, meta, job["model"], job["seed"], job["train"])
        path = tmp_path / f"{r['shape']}-{r['seed']}.parquet"
        write_parquet(metrics, path, note=info)
        planned.append(dict(r, model=job["model"], metrics=path, info=info))
    by = {(p["shape"], p["seed"]): p["info"] for p in planned}
    # the plain arm records nothing new; the expert arms record their load, each layer's shares sum to 1
    assert "expert_shares" not in by[("w16-h2", 0)]
    shares = np.array(by[("w16-h2-e4k2-b0.01", 0)]["expert_shares"])
    assert shares.shape == (2, 4) and np.allclose(shares.sum(1), 1)
    # balancing changes training (same seed, same data, same init): the losses differ
    assert by[("w16-h2-e4k2-b0.01", 0)]["final_val_loss"] != by[("w16-h2-e4k2-b0", 0)]["final_val_loss"]
    finals = read_study_runs(planned, meta["vocab_size"])
    s = summarize_study(finals, cfg["sweeps"]["ex"]["study"])
    assert s["shape"].tolist() == ["w16-h2", "w16-h2-e4k2-b0.01", "w16-h2-e4k2-b0"]
    assert (s["ffn_active_width"] == 64).all() and (s["seeds"] == 2).all()
    dense, moe = s.iloc[0], s.iloc[1]
    assert dense["params"] == dense["params_active"] == count_params(
        ModelSpec(meta["vocab_size"], 16, 2, layers=2, context=16))["total"]
    assert moe["params"] > moe["params_active"] > 0 and moe["uniform_share"] == 0.25
    assert moe["expert_share_min"] <= 0.25 <= moe["expert_share_max"]
    assert dense["val_bpc_mean"] == pytest.approx(dense["val_loss_mean"] / math.log(2))
    assert (s["chars_per_s"] > 0).all()
    # each run's peak memory is recorded (here one process: its peak resident set so far) and the
    # table keeps the largest over seeds
    assert all(p["info"]["peak_memory_of"] == "process max RSS" for p in planned)
    assert finals["peak_memory_mb"].min() > 50
    assert s["peak_memory_mb"].tolist() == finals.groupby("shape", sort=False)["peak_memory_mb"].max().tolist()
    # The figure draws from the tables.
    from headwatch.figures.style import save
    from headwatch.figures.sweep import study_figure

    # Its contrasts (dense, balance) from 2 seeds: computed, but no interval and no verdict.
    c = study_contrasts(finals, s, cfg["sweeps"]["ex"]["study"], BOOT)
    assert list(zip(c["contrast"], c["arm"], c["reference"])) == [
        ("dense", "w16-h2-e4k2-b0.01", "w16-h2"), ("dense", "w16-h2-e4k2-b0", "w16-h2"),
        ("balance", "w16-h2-e4k2-b0.01", "w16-h2-e4k2-b0")]
    assert (c["verdict"] == "too few seeds").all() and c["diff_lo"].isna().all() and c["paired"].all()
    bits = s.set_index("shape")["val_bpc_mean"]
    assert c["diff"].iloc[2] == pytest.approx(bits["w16-h2-e4k2-b0.01"] - bits["w16-h2-e4k2-b0"])
    save(study_figure("experts", s, finals, c), tmp_path / "f.pdf", tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    # A broken invariant in the measured data: no summary.
    broken = finals.copy()
    broken.loc[broken["shape"] == "w16-h2-e4k2-b0", "expert_width"] = 16
    with pytest.raises(SummaryError, match="active FFN width.*refusing"):
        summarize_study(broken, cfg["sweeps"]["ex"]["study"])


def _finals(rows):
    base = dict(sweep="s", trained_under="s", heads=4, head_size=64, kv_heads=4, experts=0, top_k=0,
                expert_width=0, balance=0.0, ffn_active_width=1024, kv_cache_bytes_per_token=0, steps=5,
                train_loss=1.0, chars_per_s=1.0, expert_share_min=1.0, expert_share_max=1.0,
                peak_memory_mb=100.0, peak_memory_of="process max RSS")
    out = []
    for r in rows:
        for seed, loss in enumerate(r.pop("losses")):
            out.append(dict(base, **r, seed=seed, val_loss=loss))
    return pd.DataFrame(out)


def test_depth_and_kv_summaries_refuse_when_their_invariant_fails():
    depth = dict(kind="depth", tolerance=0.02, head_size=64)
    ok = [dict(shape="a", width=256, layers=4, non_embedding=1000, params=5, params_formula=5,
               params_active=5, losses=[1.0, 1.2]),
          dict(shape="b", width=192, heads=2, kv_heads=2, layers=8, non_embedding=1019, params=6, params_formula=6,
               params_active=6, losses=[1.1, 1.3])]
    s = summarize_study(_finals(copy.deepcopy(ok)), depth)
    assert s["val_loss_std"].tolist() == pytest.approx([math.sqrt(0.02)] * 2)
    # peak memory: the largest over seeds; a run that predates the record is <NA>, not a NaN refusal
    f = _finals(copy.deepcopy(ok))
    f["peak_memory_mb"] = pd.array([120.0, 90.0, None, None], dtype="Float64")
    s2 = summarize_study(f, depth)
    assert s2["peak_memory_mb"].iloc[0] == 120.0 and s2["peak_memory_mb"].isna().tolist() == [False, True]
    assert s["non_embedding_vs_first"].tolist() == pytest.approx([0, 0.019])
    off = copy.deepcopy(ok)
    off[1]["non_embedding"] = 1021
    with pytest.raises(SummaryError, match=r"within 2 %.*b.*\+2\.10 %.*refusing"):
        summarize_study(_finals(off), depth)
    wrong = copy.deepcopy(ok)
    wrong[1]["params"] = 7
    with pytest.raises(SummaryError, match="differ from the architecture formula"):
        summarize_study(_finals(wrong), depth)
    kv = [dict(shape=c, width=256, layers=4, kv_heads=k, non_embedding=1, params=1, params_formula=1,
               params_active=1, losses=[1.0, 1.1]) for c, k in (("a", 4), ("b", 2))]
    assert len(summarize_study(_finals(copy.deepcopy(kv)), {"kind": "kv"})) == 2
    kv[1]["layers"] = 5
    with pytest.raises(SummaryError, match="differ only in kv_heads"):
        summarize_study(_finals(kv), {"kind": "kv"})


# --------------------------------------------------- each study's contrasts (protocol §7)
LN2 = math.log(2)
KV = dict(kind="kv", bytes_per_number=4, contrasts=["full"])


def kv_study(losses: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finals, summary) of a hand-made kv study: 4 query heads with ``losses``' key/value heads
    (kv heads: final losses by seed, nats per character)."""
    rows = [dict(shape="w256-h4" + (f"-kv{k}" if k != 4 else ""), width=256, layers=4, kv_heads=k,
                 kv_cache_bytes_per_token=2 * 4 * k * 64 * 4, non_embedding=1, params=1, params_formula=1,
                 params_active=1, losses=list(v)) for k, v in losses.items()]
    finals = _finals(rows)
    return finals, summarize_study(finals, KV)


def test_a_clearly_worse_arm_is_resolved_with_its_sign_and_one_within_noise_is_not():
    full = np.array([2.00, 2.10, 2.05])
    finals, summary = kv_study({4: full, 2: full + [0.05, 0.07, 0.06], 1: full + [0.03, -0.04, 0.01]})
    c = study_contrasts(finals, summary, KV, BOOT).set_index("arm")
    assert c["reference"].tolist() == ["w256-h4", "w256-h4"] and c["paired"].all() and (c["seeds"] == 3).all()
    kv2, kv1 = c.loc["w256-h4-kv2"], c.loc["w256-h4-kv1"]
    # kv2 costs 0.06 nats on average, every seed worse: resolved, the reference (full attention) better
    assert kv2["diff"] == pytest.approx(0.06 / LN2) and kv2["verdict"] == "resolved" and kv2["diff_lo"] > 0
    # with 3 seeds the 95 % interval is the range of the per-seed differences, and the table says so
    assert (kv2["diff_lo"], kv2["diff_hi"]) == (pytest.approx(0.05 / LN2), pytest.approx(0.07 / LN2))
    assert kv2["interval_is_range"]
    # the trade: 2 × 4 layers × 2 key/value heads fewer × 64 × 4 bytes saved per token, nats per byte
    assert kv2["kv_bytes_saved"] == 4096
    assert kv2["nats_per_byte_saved"] == pytest.approx(0.06 / 4096)
    assert (kv2["nats_per_byte_saved_lo"], kv2["nats_per_byte_saved_hi"]) == (pytest.approx(0.05 / 4096),
                                                                              pytest.approx(0.07 / 4096))
    assert (kv2["arm_kv_cache_bytes_per_token"], kv2["reference_kv_cache_bytes_per_token"]) == (4096, 8192)
    sentence = contrast_sentence(dict(kv2, arm="w256-h4-kv2"))
    assert sentence.endswith("resolved, w256-h4 better") and f"{kv2['diff']:+.4f}" in sentence
    assert "25 % of the time" in range_caveat(dict(kv2))
    assert "4,096 KV-cache bytes per token saved" in beside_text(dict(kv2))
    # kv1: one seed better, two worse: the interval holds 0
    assert kv1["verdict"] == "not resolved" and kv1["diff_lo"] < 0 < kv1["diff_hi"]
    assert contrast_sentence(dict(kv1, arm="w256-h4-kv1")).endswith("not resolved")
    # An arm clearly better: resolved, negative, the arm named better.
    finals, summary = kv_study({4: full, 2: full - [0.05, 0.07, 0.06], 1: full})
    better_arm = study_contrasts(finals, summary, KV, BOOT).iloc[0]
    assert better_arm["verdict"] == "resolved" and better_arm["diff_hi"] < 0 and better(better_arm) == "w256-h4-kv2"
    # A fourth seed: the interval lies inside the range of the differences.
    finals, summary = kv_study({4: [2.0, 2.1, 2.05, 2.0], 2: [2.05, 2.17, 2.11, 2.06], 1: [2.0, 2.1, 2.05, 2.01]})
    four = study_contrasts(finals, summary, KV, BOOT).iloc[0]
    assert not four["interval_is_range"] and four["diff_lo"] > 0.05 / LN2 and four["diff_hi"] < 0.07 / LN2


def vocab_tables(losses: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finals, summary) of a hand-made vocab study: each vocabulary's bits per character by seed."""
    arms = [dict(sweep="v", shape="w256-h4" + (f"-v{v}" if v != "char" else ""), width=256, heads=4, layers=4,
                 head_size=64, kv_heads=4, experts=0, top_k=0, expert_width=0, balance=0.0, vocab=v,
                 vocab_size=65 if v == "char" else int(v[3:]), embedding_share=0.01 if v == "char" else 0.1,
                 chars_per_window=128.0 if v == "char" else 300.0) for v in losses]
    finals = pd.DataFrame([dict(shape=a["shape"], seed=i, val_full_bpc=x)
                           for a, v in zip(arms, losses.values()) for i, x in enumerate(v)])
    return finals, pd.DataFrame(arms)


def test_a_studys_contrasts_at_each_runs_best_and_none_for_a_metric_scored_at_the_end():
    """study_contrasts(…, "best"): the same contrasts of each run's best loss (protocol §7, "Two readings");
    a vocab study's whole-split bits per character are scored at the end only, so it has no best reading."""
    ref = np.array([2.0, 2.6, 3.2])
    finals, summary = kv_study({4: ref, 2: ref + 0.05, 1: ref})
    finals["best_val_loss"] = finals["val_loss"] - np.where(finals["kv_heads"] == 2, 0.10, 0.0)   # kv2 overfit
    finals["best_step"], finals["rise"] = 5, finals["val_loss"] - finals["best_val_loss"]
    last, best = (study_contrasts(finals, summary, KV, BOOT, r).iloc[0] for r in ("last", "best"))
    assert (last["reading"], best["reading"]) == ("last", "best") and best["arm"] == "w256-h4-kv2"
    assert last["diff"] == pytest.approx(0.05 / LN2) and best["diff"] == pytest.approx(-0.05 / LN2)
    assert best["verdict"] == "resolved" and better(best) == "w256-h4-kv2" and better(last) == "w256-h4"
    finals, summary = vocab_tables({"char": ref, "bpe256": ref + 0.05})
    with pytest.raises(SummaryError, match="scored at the end of training only"):
        study_contrasts(finals, summary, dict(kind="vocab"), BOOT, "best")


def test_paired_by_seed_where_the_arms_share_their_data_order_and_not_where_they_do_not():
    # Seed effects much larger than the difference (seed 2 hard for both arms): the arm is worse
    # by exactly 0.05 on every seed.
    ref = np.array([2.0, 2.6, 3.2])
    # One vocabulary (kv study): the arms see the same windows per seed, so the pair is compared
    # seed by seed and the seed effect cancels.
    finals, summary = kv_study({4: ref, 2: ref + 0.05, 1: ref})
    paired = study_contrasts(finals, summary, KV, BOOT).iloc[0]
    assert paired["paired"] and paired["verdict"] == "resolved"
    assert (paired["diff_lo"], paired["diff_hi"]) == (pytest.approx(0.05 / LN2), pytest.approx(0.05 / LN2))
    # Two vocabularies: other tokens, other windows: the same numbers, unpaired, are not resolved.
    finals, summary = vocab_tables({"char": ref, "bpe256": ref + 0.05})
    unpaired = study_contrasts(finals, summary, dict(kind="vocab"), BOOT).iloc[0]
    assert (unpaired["contrast"], unpaired["arm"], unpaired["reference"]) == ("char", "w256-h4-vbpe256", "w256-h4")
    assert not unpaired["paired"] and unpaired["verdict"] == "not resolved"
    assert unpaired["diff"] == pytest.approx(0.05) and unpaired["diff_lo"] < 0 < unpaired["diff_hi"]
    assert "unpaired" in contrast_sentence(unpaired) and not unpaired["interval_is_range"]
    assert "10.0 % vs 1.0 %" in beside_text(unpaired)
    # The unpaired interval is the two arms' seeds resampled on their own (one bootstrap: course.py's).
    from headwatch.sweep.course import mean_interval
    assert (unpaired["diff_lo"], unpaired["diff_hi"]) == mean_interval(list(ref + 0.05), BOOT, minus=list(ref))[1:]
    # ... and a vocabulary clearly better on every seed, far beyond the seed spread, is resolved unpaired.
    finals, summary = vocab_tables({"char": [2.0, 2.01, 2.02], "bpe512": [1.5, 1.51, 1.49]})
    clear = study_contrasts(finals, summary, dict(kind="vocab"), BOOT).iloc[0]
    assert not clear["paired"] and clear["verdict"] == "resolved" and better(clear) == "w256-h4-vbpe512"


def test_too_few_seeds_give_no_interval_and_no_verdict(tmp_path):
    finals, summary = kv_study({4: [2.0, 2.1], 2: [2.5, 2.6], 1: [2.0, 2.1]})
    c = study_contrasts(finals, summary, KV, BOOT)
    assert (c["verdict"] == "too few seeds").all() and c["diff_lo"].isna().all() and c["diff_hi"].isna().all()
    assert c["nats_per_byte_saved_lo"].isna().all() and c["nats_per_byte_saved"].notna().all()
    assert c["diff"].iloc[0] == pytest.approx(0.5 / LN2) and not c["interval_is_range"].any()
    assert "too few seeds for an interval (a verdict needs 3), no verdict" in contrast_sentence(c.iloc[0])
    # the table is written as any other (<NA>, not NaN), and the figure draws it
    write_parquet(c, tmp_path / "c.parquet")
    from headwatch.figures.style import save
    from headwatch.figures.sweep import study_figure

    save(study_figure("kv", summary, finals, c), tmp_path / "k.pdf", tmp_path / "k.png")
    assert (tmp_path / "k.png").stat().st_size > 0


def test_a_paired_contrast_refuses_arms_on_different_seeds():
    finals, summary = kv_study({4: [2.0, 2.1, 2.2], 2: [2.1, 2.2, 2.3], 1: [2.0, 2.1, 2.2]})
    finals.loc[(finals["shape"] == "w256-h4-kv2") & (finals["seed"] == 2), "seed"] = 7
    with pytest.raises(SummaryError, match="paired by seed, but their seeds differ"):
        study_contrasts(finals, summary, KV, BOOT)


TOPK = dict(kind="experts", contrasts=["extremes", "top_k"])


def topk_study(offsets: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finals, summary) of a hand-made experts × top-k study: (experts, top_k) → each seed's loss."""
    rows = [dict(shape=f"w256-h4-e{e}k{k}-b0.01", width=256, layers=4, experts=e, top_k=k, expert_width=1024 // k,
                 balance=0.01, non_embedding=1, params=1, params_formula=1, params_active=1, losses=list(v))
            for (e, k), v in offsets.items()]
    finals = _finals(rows)
    return finals, summarize_study(finals, TOPK)


def test_the_grids_best_and_worst_need_the_relabelling_test_and_top_k_pairs_at_equal_experts():
    base = np.array([2.0, 2.1, 2.05])
    tiny = {(4, 1): [0.0, 0.01, 0.0], (4, 2): [0.01, 0.0, 0.01], (8, 1): [0.0, 0.0, 0.01],
            (8, 2): [0.01, 0.01, 0.0], (16, 1): [0.0, 0.01, 0.01]}
    # 16 experts top 2 worse by 0.3 nats on every seed: the worst, by far.
    finals, summary = topk_study({**{k: base + v for k, v in tiny.items()}, (16, 2): base + 0.3})
    c = study_contrasts(finals, summary, TOPK, BOOT)
    assert c["contrast"].tolist() == ["extremes", "top_k", "top_k", "top_k"]
    ext = c.iloc[0]
    assert ext["selected"] and ext["arm"] == "w256-h4-e16k2-b0.01" and ext["verdict"] == "resolved"
    assert ext["relabel_p"] < 1 - BOOT["level"]
    assert "relabelling p" in contrast_sentence(ext)
    pairs = c.iloc[1:].set_index("arm")["reference"].to_dict()
    assert pairs == {f"w256-h4-e{e}k2-b0.01": f"w256-h4-e{e}k1-b0.01" for e in (4, 8, 16)}
    verdicts = c.iloc[1:].set_index("arm")["verdict"]
    assert verdicts["w256-h4-e16k2-b0.01"] == "resolved"                 # 0.3 worse, every seed
    assert verdicts["w256-h4-e4k2-b0.01"] == "not resolved"               # +0.01, −0.01, +0.01
    # Six arms of pure noise: the worst and the best, picked from the losses, differ on every seed
    # (their paired interval excludes 0), but relabelling the arms within each seed does as much:
    # not resolved.
    noise = {(4, 1): [0.02, -0.026, 0.004], (4, 2): [-0.006, -0.005, -0.002], (8, 1): [-0.02, -0.002, -0.009],
             (8, 2): [0.033, 0.002, -0.004], (16, 1): [-0.003, -0.007, -0.011], (16, 2): [-0.004, 0.005, -0.002]}
    finals, summary = topk_study({k: base + v for k, v in noise.items()})
    ext = study_contrasts(finals, summary, TOPK, BOOT).iloc[0]
    assert (ext["arm"], ext["reference"]) == ("w256-h4-e8k2-b0.01", "w256-h4-e8k1-b0.01")
    assert ext["diff_lo"] > 0 and ext["relabel_p"] >= 1 - BOOT["level"] and ext["verdict"] == "not resolved"
    said = contrast_sentence(ext)           # a picked pair whose interval excludes 0 says why it is not resolved
    assert said.startswith("w256-h4-e8k2-b0.01 − w256-h4-e8k1-b0.01") and "not resolved — the interval excludes 0" in said
    assert f"relabelling p = {ext['relabel_p']:.3g})" in said and "at least 5 % of the time" in said


def test_each_configured_study_fixes_its_arms_before_any_data():
    """The contrasts of config/config.yaml's five studies, from their grids alone."""
    from headwatch.settings.sweep import contrast_arms, slug, study_arm, vocab_of

    def arms(name):
        sw = CONFIG["sweeps"][name]
        return [study_arm(slug(e), model_numbers(model_of(CONFIG, e)), vocab_of(e)) for e in sw["grid"]]

    def pairs(name):
        return [(c["contrast"], c["arm"], c["reference"])
                for c in contrast_arms(CONFIG["sweeps"][name]["study"], arms(name))]

    assert pairs("experts") == [("dense", "w256-h4-e8k2-b0.01", "w256-h4"), ("dense", "w256-h4-e8k2-b0", "w256-h4"),
                                ("balance", "w256-h4-e8k2-b0.01", "w256-h4-e8k2-b0")]
    assert pairs("depth") == [("first", "w192-h2-l8-d64", "w256-h4"), ("first", "w128-h4-l12-d64", "w256-h4")]
    assert pairs("kv_sharing") == [("full", "w256-h4-kv2", "w256-h4"), ("full", "w256-h4-kv1", "w256-h4")]
    assert pairs("experts_topk") == [("extremes", None, None)] + [
        ("top_k", f"w256-h4-e{e}k2-b0.01", f"w256-h4-e{e}k1-b0.01") for e in (4, 8, 16)]
    assert pairs("vocab") == [("char", f"w256-h4-vbpe{n}", "w256-h4") for n in (256, 512, 1024, 2048, 4096)]


def test_a_contrast_the_grid_cannot_make_is_refused_before_any_job_naming_its_key():
    from headwatch.settings.sweep import check_sweeps

    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["experts"]["grid"] = cfg["sweeps"]["experts"]["grid"][:2]       # no arm without balancing
    assert any(e.startswith("sweep.sweeps.experts.study.contrasts: contrast 'balance'") and "finds no pair" in e
               for e in check_sweeps(cfg))
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["kv_sharing"]["study"]["contrasts"] = ["dense"]                  # not a kv study's
    assert any(e.startswith("sweep.sweeps.kv_sharing.study:") and "contrasts" in e and "'full'" in e
               for e in check_sweeps(cfg))
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["vocab"]["study"]["contrasts"] = ["first", "first"]
    assert any(e.startswith("sweep.sweeps.vocab.study:") and "at most once" in e for e in check_sweeps(cfg))
    assert check_sweeps(copy.deepcopy(CONFIG)) == []
    # and again in the study's job, on the arms its runs recorded
    finals, summary = kv_study({4: [2.0, 2.1, 2.2], 2: [2.1, 2.2, 2.3], 1: [2.0, 2.1, 2.2]})
    with pytest.raises(SummaryError, match="contrast 'first'.*two references|contrast 'full' needs one reference"):
        study_contrasts(finals, summary.assign(kv_heads=4), dict(KV, contrasts=["full"]), BOOT)


def test_every_kind_is_one_entry_of_the_registry(monkeypatch):
    """headwatch/settings/kinds.py: each kind's contrasts, defaults, settings and figure are its entry's,
    the schema types exactly the kinds' own keys, and a new kind (here one entry, borrowing the depth
    panels) is checked, planned and drawn without code elsewhere; another kind's key and an unknown
    kind are refused before any job, naming their key."""
    from headwatch.figures.sweep import study_panels
    from headwatch.settings import kinds
    from headwatch.settings.sweep import StudySettings, check_sweeps, contrast_arms, slug, study_arm, vocab_of
    from headwatch.sweep.contrasts import metric

    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    study_keys = schema["properties"]["sweep"]["properties"]["sweeps"]["additionalProperties"]["properties"][
        "study"]["properties"]
    assert set(study_keys) - {"kind", "contrasts"} == {k for kind in kinds.KINDS.values() for k in kind.settings}
    for name, kind in kinds.KINDS.items():
        assert set(kind.default_contrasts) <= set(kind.contrasts) <= set(kinds.CONTRASTS)
        assert callable(study_panels(name)[0]) and StudySettings.of({"kind": name}).own == kind.settings
    toy = kinds.Kind("toy", "any arms of one width", lambda a: "" if len({x["width"] for x in a.numbers}) == 1
                     else "one width", contrasts=("first", "extremes"), default_contrasts=("first",),
                     beside=("layers",), beside_text=lambda c: f"{c['arm_layers']} layers", figure=("depth_study", 1, 2.0),
                     settings=dict(care=1.0))
    monkeypatch.setitem(kinds.KINDS, "toy", toy)
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["toy"] = dict(study=dict(kind="toy", care=0.5), seeds=[0, 1],
                                grid=[{"width": 64, "heads": 1}, {"width": 64, "heads": 2}])
    assert check_sweeps(cfg) == [] and StudySettings.of(cfg["sweeps"]["toy"]["study"]).own == dict(care=0.5)
    grid = cfg["sweeps"]["toy"]["grid"]
    arms = [study_arm(slug(e), model_numbers(model_of(CONFIG, e)), vocab_of(e)) for e in grid]
    assert [(c["arm"], c["reference"]) for c in contrast_arms(dict(kind="toy"), arms)] == [("w64-h2", "w64-h1")]
    assert metric("toy")[0] == "val_bpc_mean" and study_panels("toy")[2] == 2.0
    grid.append({"width": 128, "heads": 2})
    assert check_sweeps(cfg) == ["sweep.sweeps.toy.study: one width"]
    cfg = copy.deepcopy(CONFIG)
    cfg["sweeps"]["kv_sharing"]["study"]["tolerance"] = 0.1                   # a depth study's key
    cfg["sweeps"]["depth"]["study"]["kind"] = "breadth"
    errors = check_sweeps(cfg)
    assert any(e.startswith("sweep.sweeps.kv_sharing.study: a kv study reads ['bytes_per_number']") and
               "tolerance: read by depth" in e for e in errors), errors
    assert f"sweep.sweeps.depth.study.kind: 'breadth' is not one of {list(kinds.KINDS)}" in errors


def test_the_results_page_writes_a_study_section_from_its_tables(tmp_path, monkeypatch):
    """benchmarks/laptop_tables.py's section on one study, from hand-made tables: every number of
    its tables, contrasts and verdicts is read from them; the original study's findings, where the
    repository records them, set beside the contrasts point by point."""
    import sys

    from headwatch import paths
    from headwatch.markup import markdown

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables

    full = np.array([2.00, 2.10, 2.05])
    finals, summary = kv_study({4: full, 2: full + [0.05, 0.07, 0.06], 1: full + [0.03, -0.04, 0.01]})
    contrasts = study_contrasts(finals, summary, KV, BOOT)
    root = tmp_path / "run"
    write_parquet(summary, root / paths.study_table("kv_sharing"))
    write_parquet(contrasts, root / paths.study_table("kv_sharing", "contrasts"))
    figure = root / paths.sweep_figure("study_kv_sharing", "png")
    figure.parent.mkdir(parents=True)
    figure.write_bytes(b"\x89PNG drawn by the run")
    sw = dict(sweeps=dict(kv_sharing=dict(study=KV, seeds=[0, 1, 2])))
    out = tmp_path / "docs" / "laptop-scale.md"
    monkeypatch.setitem(laptop_tables.ORIGINAL_STUDIES, "kv_sharing", [])     # first: none on record
    text = "\n\n".join(laptop_tables.study_section(root, out, "kv_sharing", sw))
    assert text.startswith("### `kv_sharing` (kv study)")
    for r in summary.itertuples():
        assert f"| {r.shape} | {r.seeds} | {r.val_bpc_mean:.4f} ± {r.val_bpc_std:.4f} | {r.kv_heads} |" in text
    for c in contrasts.to_dict("records"):
        assert (f"| {c['arm']} − {c['reference']} | paired by seed | 3 | {c['diff']:+.4f} | "
                f"{c['diff_lo']:+.4f} to {c['diff_hi']:+.4f} | {c['verdict']} |") in text
        assert f"- {markdown(contrast_sentence(c))}." in text and markdown(beside_text(c)) in text
    assert contrasts["verdict"].tolist() == ["resolved", "not resolved"]
    assert "Read with care: with 3 seeds" in text and "25 % of the time" in text
    assert "left this question unmeasured" in text
    assert (out.parent / "laptop-scale" / "study_kv_sharing.png").read_bytes() == figure.read_bytes()
    assert "(laptop-scale/study_kv_sharing.png)" in text
    # An original finding on record is set beside the contrast it names, with what holds, what does
    # not and what this scale cannot tell.
    monkeypatch.setitem(laptop_tables.ORIGINAL_STUDIES, "kv_sharing", [
        dict(finding="two key/value heads cost loss", arm="w256-h4-kv2", reference="w256-h4", claim="arm worse"),
        dict(finding="two key/value heads help", arm="w256-h4-kv2", reference="w256-h4", claim="arm better"),
        dict(finding="one key/value head costs loss", arm="w256-h4-kv1", reference="w256-h4", claim="arm worse")])
    text = "\n\n".join(laptop_tables.study_section(root, out, "kv_sharing", sw))
    assert "| two key/value heads cost loss |" in text and "| holds |" in text
    assert "| does not hold |" in text and "| this scale cannot tell (not resolved) |" in text
    # A finding on the KV cache: bytes per token, by arithmetic, the loss contrast beside it.
    monkeypatch.setitem(laptop_tables.ORIGINAL_STUDIES, "kv_sharing", [
        dict(finding="sharing shrinks the cache", arm="w256-h4-kv1", reference="w256-h4", claim="arm smaller cache"),
        dict(finding="sharing grows the cache", arm="w256-h4-kv1", reference="w256-h4", claim="arm worse cache")])
    with pytest.raises(laptop_tables.PageError, match="not 'arm worse cache'"):
        laptop_tables.study_section(root, out, "kv_sharing", sw)
    laptop_tables.ORIGINAL_STUDIES["kv_sharing"].pop()
    text = "\n\n".join(laptop_tables.study_section(root, out, "kv_sharing", sw))
    kv1 = contrasts.set_index("arm").loc["w256-h4-kv1"]
    assert (f"| sharing shrinks the cache | {kv1.arm_kv_cache_bytes_per_token:,} against "
            f"{kv1.reference_kv_cache_bytes_per_token:,} KV-cache bytes per token (×4 smaller; 1 against 4 "
            "key/value heads); the loss: ") in text and text.count("| holds |") == 1
    monkeypatch.setitem(laptop_tables.ORIGINAL_STUDIES, "kv_sharing", [
        dict(finding="eight heads", arm="w256-h4-kv8", reference="w256-h4", claim="arm worse")])
    text = "\n\n".join(laptop_tables.study_section(root, out, "kv_sharing", sw))
    assert "| eight heads | this run's study has no w256-h4-kv8 − w256-h4 contrast | not compared |" in text
    # A study the run did not finish: refused, the table named.
    (root / paths.study_table("kv_sharing", "contrasts")).unlink()
    with pytest.raises(laptop_tables.PageError, match="kv_sharing_contrasts.parquet"):
        laptop_tables.study_section(root, out, "kv_sharing", sw)


def test_an_original_finding_on_speed_is_read_from_the_throughputs_without_an_interval():
    """benchmarks/laptop_tables.py: a claim on training speed holds or not by the two throughputs
    (one figure per arm: no interval), whatever the loss contrast says."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import laptop_tables

    c = dict(arm="e8", reference="dense", arm_chars_per_s=2700.0, reference_chars_per_s=1950.0, diff=-0.09,
             diff_lo=-0.14, diff_hi=-0.06, verdict="not resolved")
    assert laptop_tables.original_verdict("arm slower", c) == "does not hold"
    assert laptop_tables.original_verdict("arm faster", c) == "holds"
    assert laptop_tables.original_verdict("arm slower", dict(c, arm_chars_per_s=1000.0)) == "holds"
    assert laptop_tables.original_verdict("arm better", c) == "this scale cannot tell (not resolved)"
    assert laptop_tables.original_here("arm slower", c).startswith(
        "training throughput 1.38× the reference's (2,700 against 1,950 characters/s; one figure per arm")
