"""The induction sweep (headwatch/induction/, protocol §7c): its generators against cases by hand
(the Markov task's Bayes-optimal loss among them), the induction score against §4's cell, the
phase-change rule, every estimator on a case with a known answer (Kaplan–Meier and its median by
hand, censored runs included; the Cox regression on data drawn with known hazard ratios; a separated
and a non-proportional case), the regression's verdicts, the stages, the controls' check, the
settings' checks, a run that stops on its events, and a model that forms the circuit beside its
control that must not."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from headwatch.induction import analysis, survival, tasks
from headwatch.induction.train import successor_cells, successor_mask, train_run, uniform_induction
from headwatch.scores.heads import induction_cells
from headwatch.settings.induction import InductionSettings, induction_errors, job_params, jobs, shapes
from headwatch.tableio import assert_finite

SETTINGS = dict(tasks=dict(repeat=dict(vocab=32, half=[4, 12]), markov=dict(states=8, alpha=0.1)),
                grid=dict(head_size=[8, 16, 64], heads=[1, 2, 4, 8], max_width=64),
                seeds=[0, 1, 2], control_seeds=[0], run=["repeat", "markov", "repeat_control", "markov_control"],
                shapes=None, context=32, ffn_mult=2, steps=300, control_steps=200, settle=32, batch=64, lr=3e-3,
                min_lr=3e-4, warmup=50, weight_decay=0.0, eval_every=20, eval_rows=64, edge_prompts=16, threshold=0.3, margin=0.25)


# ------------------------------------------------------------------ the generators
def test_repeated_segments_copy_themselves_and_their_references():
    b = tasks.repeat_rows(50, 32, 32, (4, 12), seed=3)
    assert b.ids.shape == (50, 33) and b.predictable.shape == b.reference.shape == b.unigram.shape == (50, 32)
    for row, pred, best, unordered in zip(b.ids, b.predictable, b.reference, b.unigram):
        # walk the row's segments: n distinct tokens, then the same n again
        i = 0
        while i < len(row):
            n = next(k for k in range(4, 13) if list(row[i:i + k]) == list(row[i + k:i + 2 * k])
                     or i + 2 * k > len(row)) if i + 8 <= len(row) else None
            if n is None or i + 2 * n > len(row):
                break
            a = row[i:i + n]
            assert len(set(a.tolist())) == n                               # distinct within a segment
            for j in range(n):
                t = i + n + j - 1                                          # the position predicting copy 2's j-th
                assert pred[t] == (j >= 1)
                if j >= 1:
                    assert best[t] == 0.0 and unordered[t] == pytest.approx(math.log(n - j))
            i += 2 * n
    assert b.predictable.any(axis=1).all()
    control = tasks.repeat_rows(50, 32, 32, (4, 12), seed=3, repeat=False)
    assert (control.predictable == b.predictable).all()                    # the same lengths, the same positions
    assert not (control.ids == b.ids).all()
    assert (control.reference[control.predictable] > math.log(20)).all()   # nothing to copy: ln(vocab - j)


def test_the_markov_tasks_bayes_optimal_loss_by_hand():
    """Two states, Dirichlet(1): p(next | counts) = (c + 1) / (n + 2). The sequence 0 0 1 0: token 1
    from state 0 with nothing counted: 1/2; token 2 (= 1) from state 0 after 0->0: (0 + 1) / (1 + 2);
    token 3 (= 0) from state 1, nothing counted from it: 1/2."""
    got = tasks.bayes_losses(np.array([[0, 0, 1, 0]]), states=2, alpha=1.0)
    assert got == pytest.approx(np.array([[math.log(2), math.log(3), math.log(2)]]))
    # the unordered estimate: counts of tokens 0 ... t, Laplace: (m + 1) / (t + 1 + 2)
    uni = tasks.unigram_losses(np.array([[0, 0, 1, 0]]), states=2)
    assert uni == pytest.approx(np.array([[-math.log(2 / 3), -math.log(1 / 4), -math.log(3 / 5)]]))
    # the known chain's own loss
    m = np.array([[0.9, 0.1], [0.5, 0.5]])
    assert tasks.chain_losses(np.array([[0, 0, 1, 0]]), m) == pytest.approx(-np.log([[0.9, 0.1, 0.5]]))


def test_in_context_chains_and_their_control():
    b = tasks.markov_rows(400, 32, 8, 0.1, seed=0)
    assert b.ids.shape == (400, 33) and b.ids.max() < 8 and b.predictable[:, :16].sum() == 0
    assert b.predictable[:, 16:].all()
    tail = b.predictable
    # the in-context bigram beats the unordered estimate, which beats nothing at all (ln 8)
    assert b.reference[tail].mean() < b.unigram[tail].mean() - 0.3 < math.log(8) - 0.3
    c1 = tasks.markov_rows(400, 32, 8, 0.1, seed=[0, 1, 5], fixed_seed=4)
    c2 = tasks.markov_rows(400, 32, 8, 0.1, seed=[0, 1, 6], fixed_seed=4)
    matrix = tasks.fixed_matrix(8, 0.1, 4)
    assert c1.reference == pytest.approx(tasks.chain_losses(c1.ids, matrix))
    assert c2.reference == pytest.approx(tasks.chain_losses(c2.ids, matrix))     # one chain for every batch
    counts = np.zeros((8, 8))
    np.add.at(counts, (np.concatenate([c1.ids, c2.ids])[:, :-1], np.concatenate([c1.ids, c2.ids])[:, 1:]), 1)
    seen = counts.sum(axis=1) > 200
    assert np.abs(counts[seen] / counts[seen].sum(axis=1, keepdims=True) - matrix[seen]).max() < 0.1


def test_the_induction_score_is_the_protocols_cell_on_repeated_distinct_tokens():
    """On a sequence a + a (distinct tokens) the only earlier occurrence of a copy-2 token is its copy:
    the successor cells are §4's induction cells A[r, r − T + 1]."""
    T = 6
    ids = torch.tensor([[3, 1, 4, 0, 5, 2] * 2])
    A = torch.rand(1, 2, 3, 2 * T, 2 * T).tril()
    A = A / A.sum(dim=-1, keepdim=True)
    rows = torch.zeros(1, 2 * T, dtype=torch.bool)
    rows[0, T:2 * T - 1] = True                                   # rows T ... 2T − 2, as §4
    cols, keep = successor_mask(ids, rows)
    got = successor_cells(A, cols, keep)                          # [rows, layers, heads]
    want = induction_cells(A, T)[0].permute(2, 0, 1)              # [layers, heads, cells] -> [cells, ...]
    assert torch.allclose(got, want)
    # uniform attention's score: 1 / (r + 1) on the one successor cell
    probe = tasks.Batch(np.concatenate([ids.numpy(), [[0]]], axis=1), rows.numpy(), np.zeros((1, 2 * T)),
                        np.zeros((1, 2 * T)))
    assert uniform_induction(probe) == pytest.approx(np.mean([1 / (r + 1) for r in range(T, 2 * T - 1)]))


# ------------------------------------------------------------------ the rules
def curve(losses, unigram=1.3, reference=0.0):
    return pd.DataFrame(dict(step=np.arange(len(losses)) * 20, loss=losses, unigram=unigram, reference=reference))


def test_the_phase_change_is_where_the_loss_passes_below_the_unordered_reference():
    two_phases = [3.47, 3.45, 3.3, 2.5, 2.45, 2.44, 1.6, 0.9, 0.4, 0.3]     # the unordered drop, then induction
    assert analysis.phase_step(curve(two_phases), 0.25) == 140              # 0.9 <= 1.3 - 0.25
    assert analysis.phase_step(curve(two_phases), 0.5) == 160
    unordered_only = [3.47, 3.45, 3.3, 2.5, 2.0, 1.5, 1.4, 1.35, 1.32, 1.31]  # down to the bound, not past it
    assert analysis.phase_step(curve(unordered_only), 0.25) is None
    noisy_flat = list(3.45 + np.random.default_rng(0).normal(0, 0.02, 40))
    assert analysis.phase_step(curve(noisy_flat), 0.25) is None


# ------------------------------------------------------------------ the estimators, against known answers
def test_kaplan_meier_and_its_median_by_hand():
    """Six runs, two censored (one at a step where another has its event): S(t) = Π (1 − d/n) by hand,
    the median where S first reaches 1/2, its interval where the band's curves do (the upper one
    never: not reached), the upper bound kept where S reaches 0 (undefined there in log-log), and a
    cell with no event stays at 1 to its last step."""
    c = survival.km_curve([16, 32, 32, 48, 64, 80], [True, True, False, True, False, True])
    assert c["step"].tolist() == [0, 16, 32, 48, 64, 80]
    expected = [1, 5 / 6, 5 / 6 * 4 / 5, 5 / 6 * 4 / 5 * 2 / 3, 5 / 6 * 4 / 5 * 2 / 3, 0]
    assert c["survival"].tolist() == pytest.approx(expected)
    assert c["at_risk"].tolist() == [6, 6, 5, 3, 2, 1] and c["events"].tolist() == [0, 1, 1, 1, 0, 1]
    assert (c["lo"] <= c["survival"]).all() and (c["hi"] >= c["survival"]).all() and c["hi"].notna().all()
    assert c["hi"].iloc[-1] == c["hi"].iloc[-2] and c["lo"].iloc[-1] == 0      # at S = 0: the band's last upper bound
    assert survival.km_median(c) == (48, 16, None)
    every = survival.km_curve([16, 32, 48, 64], [True] * 4)                    # every run has the event: a table writes it
    assert every["survival"].iloc[-1] == 0 and every[["lo", "hi"]].notna().all().all()
    flat = survival.km_curve([100, 100, 100], [False, False, False])
    assert flat["survival"].tolist() == [1, 1] and flat["step"].tolist() == [0, 100]
    assert survival.km_median(flat) == (None, None, None)


def drawn(n=900, seed=0, b_heads=0.7, b_size=-0.4, cap=3000.0):
    """Runs whose event time is exponential with hazard e^(b_heads·x + b_size·y) / 600, x and y on a grid,
    censored at a cap and rounded up to an evaluation grid of 16 (ties, as the sweep's)."""
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, 4, n).astype(float), rng.integers(0, 3, n).astype(float)
    t = rng.exponential(600 / np.exp(b_heads * x + b_size * y))
    observed = t <= cap
    t = np.minimum(np.ceil(t / 16) * 16, cap)
    return pd.DataFrame(dict(time=t, observed=observed, log2_heads=x, log2_head_size=y))


def test_the_cox_regression_finds_known_hazard_ratios():
    """Drawn with hazard ratios e^0.7 per unit of one covariate and e^−0.4 of the other, censored and
    tied: each interval holds the truth and each verdict is the one it must be; proportional hazards
    hold (the check does not fire); a covariate with no effect is not resolved."""
    fit = survival.cox(drawn(), ["log2_heads", "log2_head_size"],
                       combinations=analysis.FIXED_WIDTH).set_index("covariate")
    width = fit.loc["fixed_width"]                                        # 0.7 − (−0.4): twice the heads, half the size
    assert width.hr_lo < math.exp(1.1) < width.hr_hi and abs(width.coef - 1.1) < 0.2 and math.isnan(width.ph_p)
    for name, truth in (("log2_heads", 0.7), ("log2_head_size", -0.4)):
        r = fit.loc[name]
        assert r.hr_lo < math.exp(truth) < r.hr_hi and abs(r.coef - truth) < 0.15 and r.estimable
        assert r.ph_p > 0.01
    assert survival.ratio_verdict(fit.loc["log2_heads"], "sooner", "later") == "sooner"
    assert survival.ratio_verdict(fit.loc["log2_head_size"], "sooner", "later") == "later"
    null = survival.cox(drawn(b_size=0.0, seed=1), ["log2_heads", "log2_head_size"]).set_index("covariate")
    assert survival.ratio_verdict(null.loc["log2_head_size"], "sooner", "later") == "not resolved"


def test_a_separated_or_non_proportional_case_is_said():
    """Every event on one side of a covariate: not estimable, not a number; hazards that cross (one
    group early, the other late) fire the proportional-hazards check."""
    events = np.repeat([1.0, 0.0], 15)                 # every run with a = 1 has its event, none with a = 0
    sep = pd.DataFrame(dict(time=np.where(events == 1, np.tile([16.0, 32.0, 48.0], 10)[:30], 300.0),
                            observed=events == 1, a=events))
    r = survival.cox(sep, ["a"]).iloc[0]
    assert not r.estimable and ("separation" in r.why or "converge" in r.why)
    assert survival.ratio_verdict(r, "sooner", "later") == "not estimable"
    rng = np.random.default_rng(2)
    g = np.repeat([0.0, 1.0], 400)
    early = np.where(rng.random(800) < 0.5, rng.uniform(0, 40, 800), rng.uniform(200, 400, 800))
    late = rng.uniform(80, 160, 800)
    t = np.where(g == 1, early, late)
    crossing = pd.DataFrame(dict(time=np.ceil(t / 16) * 16, observed=True, g=g))
    assert survival.cox(crossing, ["g"]).iloc[0].ph_p < 0.05
    too_few = survival.cox(crossing.head(2), ["g"]).iloc[0]             # two runs, one value of g
    assert not too_few.estimable and "does not vary" in too_few.why


def runs_from(cells: dict[tuple[int, int], list], cap=320) -> pd.DataFrame:
    """Runs of the repeat task: {(heads, head size): [phase step or None per seed]}; induction = phase."""
    rows = [dict(task="repeat", shape=f"w{h * d}-h{h}", width=h * d, heads=h, head_size=d, seed=seed,
                 phase_step=t, induction_step=t, stop_step=cap if t is None else t + 32,
                 stop_reason="cap" if t is None else "events", circuit=t is not None, stage=None,
                 lag=0 if t is not None else None, induction_heads=int(t is not None), final_gap=0.1, plateau_gap=None)
            for (h, d), ts in cells.items() for seed, t in enumerate(ts)]
    out = pd.DataFrame(rows)
    for col in ("phase_step", "induction_step", "lag"):
        out[col] = out[col].astype("Int64")
    out["plateau_gap"] = out["plateau_gap"].astype("Float64")
    return out


def test_the_regression_answers_both_questions_and_counts_every_run():
    """More heads later at every head size, head size of no consequence: the verdicts read *more heads:
    later* and *not resolved*; the runs that never changed phase are in it, censored at the cap (the
    summary counts them; the medians of a cell that never changes are not reached)."""
    rng = np.random.default_rng(3)
    cells = {}
    for h in (1, 2, 4, 8):
        for d in (8, 16, 32):
            base = 40 * h
            cells[(h, d)] = [int(16 * math.ceil(x / 16)) if x < 320 else None
                             for x in base * rng.exponential(1.0, 12)]
    runs = runs_from(cells)
    reg = analysis.regression(runs).set_index(["event", "covariate"])
    assert reg.loc[("phase", "log2_heads"), "verdict"] == "more heads: later"
    assert reg.loc[("phase", "log2_head_size"), "verdict"] == "not resolved"
    assert reg.loc[("phase", "log2_heads"), "runs"] == len(runs)             # every run, the censored too
    s = InductionSettings.from_config(dict(SETTINGS, bootstrap=dict(resamples=200, seed=0, level=0.95)))
    summ = analysis.summary(runs, s).set_index(["heads", "head_size"])
    assert (summ["runs"] == 12).all() and summ.loc[(8, 8), "capped"] == summ.loc[(8, 8), "runs"] - summ.loc[(8, 8), "changed"]
    never = runs_from({(1, 8): [None] * 4, (2, 8): [32, 48, 64, 80]})
    m = analysis.summary(never, s).set_index("heads")
    assert pd.isna(m.loc[1, "phase_median"]) and m.loc[2, "phase_median"] == 48
    curves = analysis.km_curves(never)
    assert set(curves.event) == {"phase", "induction"} and curves[curves.heads == 1]["survival"].eq(1).all()


def test_one_width_makes_heads_and_head_size_move_together_and_nothing_is_estimated():
    """Every run of one width (make quick's slice: width 64 with 1, 4 and 8 heads): log2 heads + log2
    head size is constant, so the regression cannot tell them apart — every row not estimable, saying
    why, and the table writable (no infinite bound from a NaN standard error: make quick's summary
    refused the table it wrote)."""
    runs = runs_from({(1, 64): [96, 112, None], (4, 16): [160, 176, 208], (8, 8): [240, None, 304]})
    reg = analysis.regression(runs)
    assert not reg["estimable"].any() and reg["why"].str.contains("move together").all()
    assert reg["verdict"].eq("not estimable").all() and reg["hr_lo"].isna().all()
    assert_finite(reg, "the regression table")
    assert math.isnan(survival._exp(math.nan)) and survival._exp(710.0) == math.inf


def test_the_stage_is_the_level_a_plateau_lies_nearest():
    levels = dict(uniform=2.08, unigram=1.65, bigram=1.07)
    assert analysis.stage_of(1.70, levels) == "unigram" and analysis.stage_of(2.0, levels) == "uniform"
    assert analysis.stage_of(None, levels) is None and analysis.stage_of(1.1, levels) == "bigram"


def test_the_share_of_seeds_by_hand():
    lo, hi = analysis.share_interval(5, 5)
    assert hi == 1 and lo == pytest.approx(0.025 ** (1 / 5))                    # Clopper–Pearson: (α/2)^(1/n)
    lo, hi = analysis.share_interval(0, 5)
    assert lo == 0 and hi == pytest.approx(1 - 0.025 ** (1 / 5))


def test_the_control_check_can_fail():
    ok = pd.DataFrame(dict(task="repeat_control", shape=["w64-h1", "w64-h2"], seed=[0, 0], phase_step=[None, None],
                           induction_heads=[0, 0]))
    ok["phase_step"] = ok["phase_step"].astype("Int64")
    assert analysis.control_check(ok)["clean"].tolist() == [True]
    bad = ok.assign(induction_heads=[0, 2])
    check = analysis.control_check(bad)
    assert check["clean"].tolist() == [False] and check["not_clean"].iloc[0] == "w64-h2/seed0"


# ------------------------------------------------------------------ the settings
def test_the_jobs_and_their_params():
    s = InductionSettings.from_config(SETTINGS)
    assert [k for k, _, _ in shapes(s)] == ["w8-h1", "w16-h2", "w32-h4", "w64-h8", "w16-h1", "w32-h2", "w64-h4",
                                           "w64-h1"]                  # head size 8, 16, 64 within width 64
    assert len(jobs(s)) == 4 * 8
    p = job_params(SETTINGS, "markov_control", "w16-h2")
    assert p["task_settings"] == SETTINGS["tasks"]["markov"] and (p["width"], p["heads"]) == (16, 2)
    assert p["seeds"] == [0] and job_params(SETTINGS, "markov", "w16-h2")["seeds"] == [0, 1, 2]
    assert p["threshold"] == 0.3 and p["margin"] == 0.25                   # the events a run stops on
    narrowed = InductionSettings.from_config(dict(SETTINGS, shapes=["w64-h4", "w8-h1"], run=["repeat"]))
    assert jobs(narrowed) == [("repeat", "w8-h1"), ("repeat", "w64-h4")]
    assert jobs(InductionSettings.from_config(dict(SETTINGS, control_seeds=[], run=["repeat", "repeat_control"]))) \
        == [("repeat", k) for k, _, _ in shapes(s)]
    # AdamW's betas, a setting: a job's param only where it is not the default (the jobs before it stand)
    assert s.betas == (0.9, 0.95) and "betas" not in p
    assert "betas" not in job_params(dict(SETTINGS, betas=[0.9, 0.95]), "markov", "w16-h2")
    assert job_params(dict(SETTINGS, betas=[0.9, 0.99]), "markov", "w16-h2")["betas"] == [0.9, 0.99]


@pytest.mark.parametrize("change, message", [
    (dict(run=["repeat", "copy"]), "induction.run[1] = 'copy': not a task"),
    (dict(tasks=dict(repeat=dict(vocab=8, half=[4, 12]))), "induction.tasks.repeat.half = [4, 12]"),
    (dict(tasks=dict(repeat=dict(vocab=32, half=[4, 20]), markov=dict(states=8, alpha=0.1))),
     "longer than induction.context = 32"),
    (dict(grid=dict(head_size=[6, 7], heads=[1], max_width=64)), "induction.grid.head_size: 7 is odd"),
    (dict(grid=dict(head_size=[128], heads=[1, 2], max_width=64)), "no cell of head_size [128] x heads [1, 2]"),
    (dict(shapes=["w64-h3"]), "induction.shapes[0] = 'w64-h3': not a cell of the grid"),
    (dict(eval_every=400), "induction.eval_every = 400: within 1 .. steps = 300"),
    (dict(control_seeds=[]), "induction.control_seeds: at least one seed"),
    (dict(betas=[0.9, 1.0]), "induction.betas = [0.9, 1.0]: AdamW's two decay rates"),
    (dict(run=["markov"], tasks=dict(repeat=dict(vocab=32, half=[4, 12]))), "reads induction.tasks.markov"),
])
def test_a_bad_induction_setting_is_refused_naming_its_key(change, message):
    config = dict(induction=dict(SETTINGS, **change))
    assert any(message in e for e in induction_errors(config)), induction_errors(config)
    assert induction_errors(dict(induction=SETTINGS)) == []


# ------------------------------------------------------------------ a model that forms it, and its control
def test_a_small_model_forms_the_circuit_and_its_control_does_not():
    """One head a layer at width 64 on repeated segments changes phase, grows a previous-token head and an
    induction head, and path patching's strongest edge between them runs through the key; the same
    model trained on segments that never repeat, scored on the repeated rows, does none of it."""
    s = InductionSettings.from_config(dict(SETTINGS, steps=400, eval_every=20))   # it changes phase at ~220
    run = train_run("repeat", 64, 1, 0, s)
    assert run.stop_reason == "events" and run.stop_step < s.steps          # it stopped on its events
    row = analysis.run_row(run.curve, run.heads, dict(run.edges, stop_step=run.stop_step,
                                                      stop_reason=run.stop_reason), s, 0.05)
    settled = max(row["phase_step"], row["induction_step"]) + s.settle          # the first evaluation there
    assert run.stop_step == -(-settled // s.eval_every) * s.eval_every == run.curve["step"].max()
    assert row["phase_step"] is not None and row["induction_step"] is not None and row["prev_step"] is not None
    assert row["circuit"] and row["final_loss"] < row["unigram"] - s.margin
    control = train_run("repeat_control", 64, 1, 0, s)
    assert control.stop_reason == "cap" and control.stop_step == s.control_steps == control.curve["step"].max()
    c = analysis.run_row(control.curve, control.heads, control.edges, s, 0.05)
    assert c["phase_step"] is None and c["induction_heads"] == 0 and not c["circuit"]
    assert control.curve["own_loss"].iloc[-1] < control.curve["own_loss"].iloc[0]    # it learnt its own rows


# ------------------------------------------------------------------ the page, read from the tables
def test_the_page_says_what_the_tables_hold():
    """benchmarks/induction_tables.py's parts: each verdict and ratio as the regression table holds it, a
    cell's medians (*not reached* past its runs' ends), the onset in tokens = median × batch × context
    beside Aoyama et al.'s law at the same batch and context, and the chains' stages counted."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    import induction_tables as page

    rng = np.random.default_rng(4)
    cells = {(h, d): [int(16 * math.ceil(x / 16)) if x < 320 else None for x in 40 * h * rng.exponential(1.0, 10)]
             for h in (1, 2, 4) for d in (8, 16)}
    runs = runs_from(cells)
    reg = analysis.regression(runs)
    r = reg[(reg.event == "phase") & (reg.covariate == "log2_heads")].iloc[0]
    lines = "\n".join(page.answer_lines(reg, "repeat"))
    assert f"**{r.verdict}** (hazard ratio {r.hr:.2f} per doubling ({r.hr_lo:.2f}–{r.hr_hi:.2f})" in lines
    assert f"| {r.hr:.2f} ({r.hr_lo:.2f}–{r.hr_hi:.2f}) |" in page.regression_table(reg, "repeat")
    caveat = "the hazards are not proportional"
    held = reg.assign(ph_holds=pd.array([True] * len(reg), dtype="boolean"))
    broken = reg.assign(ph_holds=pd.array([False] * len(reg), dtype="boolean"), ph_p=0.01)
    assert caveat not in "\n".join(page.answer_lines(held, "repeat"))
    assert caveat in "\n".join(page.answer_lines(broken, "repeat"))
    assert "do not hold" in page.regression_table(broken, "repeat") and "**" not in page.regression_table(reg, "repeat")
    s = InductionSettings.from_config(dict(SETTINGS, bootstrap=dict(resamples=200, seed=0, level=0.95)))
    summ = analysis.summary(runs, s)
    fastest = summ.sort_values("phase_median").iloc[0]
    onset = "\n".join(page.onset_lines(summ, 64, 32))
    assert f"{fastest.phase_median * 64 * 32:,.0f}" in onset and f"{page.AOYAMA_T * (64 * 32) ** 0.5:,.0f}" in onset
    never = analysis.summary(runs_from({(1, 8): [None] * 3, (2, 8): [32, 48, 64]}), s)
    assert "not reached by 320" in page.cell_table(never, "repeat")
    chains = runs.assign(task="markov", stage=pd.array(["unigram", None] * (len(runs) // 2), dtype="string"),
                         plateau_gap=pd.array([0.02, None] * (len(runs) // 2), dtype="Float64"),
                         plateau_step=pd.array([16, None] * (len(runs) // 2), dtype="Int64"),
                         leave_step=pd.array([48, None] * (len(runs) // 2), dtype="Int64"))
    changed = chains[chains.phase_step.notna()]
    text = " ".join(page.stage_lines(chains))
    assert f"Of the {len(changed)} runs that changed phase on the chains" in text
    assert f"{int((changed.stage == 'unigram').sum())} at the unigram level" in text
