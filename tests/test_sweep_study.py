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

    save(study_figure("experts", s, finals), tmp_path / "f.pdf", tmp_path / "f.png")
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
