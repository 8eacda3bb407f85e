"""The induction sweep (headwatch/induction/, protocol §7c): its generators against cases by hand
(the Markov task's Bayes-optimal loss among them), the induction score against §4's cell, the
phase-change rule and the contrasts on synthetic runs, the controls' check, the settings' checks,
and a model that forms the circuit beside its control that must not."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from headwatch.induction import analysis, tasks
from headwatch.induction.train import successor_cells, successor_mask, train_run, uniform_induction
from headwatch.scores.heads import induction_cells
from headwatch.settings.induction import InductionSettings, induction_errors, job_params, jobs, shapes

SETTINGS = dict(tasks=dict(repeat=dict(vocab=32, half=[4, 12]), markov=dict(states=8, alpha=0.1)),
                arms=dict(width=dict(width=64, heads=[1, 2, 4]), head_size=dict(head_size=8, heads=[1, 2, 4, 8])),
                seeds=[0, 1, 2], run=["repeat", "markov", "repeat_control", "markov_control"], shapes=None,
                context=32, ffn_mult=2, steps=300, batch=64, lr=3e-3, min_lr=3e-4, warmup=50, weight_decay=0.0,
                evaluations=16, eval_rows=64, edge_prompts=16, threshold=0.3, margin=0.25)


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


def runs_with(steps: dict[str, list]) -> pd.DataFrame:
    rows = [dict(task="repeat", shape=shape, width=int(shape.split("-")[0][1:]), heads=int(shape.split("-h")[1]),
                 seed=seed, phase_step=s) for shape, ss in steps.items() for seed, s in enumerate(ss)]
    out = pd.DataFrame(rows)
    out["phase_step"] = out["phase_step"].astype("Int64")
    return out


def test_the_contrasts_of_an_arm_and_their_verdicts():
    s = InductionSettings.from_config(dict(SETTINGS, bootstrap=dict(resamples=2000, seed=0, level=0.95)))
    rising = runs_with({"w64-h1": [100, 120, 110], "w64-h2": [200, 210, 190], "w64-h4": [300, 320, 290]})
    c = analysis.contrasts(rising, s)
    w = c[(c.arm == "width")]
    assert list(w[w.kind == "pair"]["verdict"]) == ["resolved", "resolved"]
    assert w[w.kind == "arm"]["verdict"].iloc[0] == "increasing"
    assert w[w.kind == "pair"]["diff"].iloc[0] == pytest.approx(90)           # paired by seed: mean of 100, 90, 80
    mixed = runs_with({"w64-h1": [100, 120, 110], "w64-h2": [300, 310, 290], "w64-h4": [150, 160, 140]})
    assert analysis.contrasts(mixed, s).query("arm == 'width' and kind == 'arm'")["verdict"].iloc[0] == "not monotone"
    noisy = runs_with({"w64-h1": [100, 300, 200], "w64-h2": [200, 150, 260], "w64-h4": [250, 100, 300]})
    assert analysis.contrasts(noisy, s).query("arm == 'width' and kind == 'arm'")["verdict"].iloc[0] == "not resolved"
    censored = runs_with({"w64-h1": [100, 120, 110], "w64-h2": [200, None, None], "w64-h4": [None, None, None]})
    cc = analysis.contrasts(censored, s).query("arm == 'width'")
    assert list(cc.verdict) == ["too few runs", "too few runs", "too few runs"]
    # whether runs change phase: w64-h1 3 of 3 against w64-h4 0 of 3 — Fisher's exact p = 2 / C(6, 3) = 0.1
    arm = cc[cc.kind == "arm"].iloc[0]
    assert (arm.changed_fewer, arm.seeds_fewer, arm.changed_more, arm.seeds_more) == (3, 3, 0, 3)
    assert arm.whether_p == pytest.approx(0.1) and arm.whether == "not resolved"
    # the reading over the pairs with enough runs: the rising pairs stay, a last censored shape is left out
    tail = runs_with({"w64-h1": [100, 120, 110], "w64-h2": [200, 210, 190], "w64-h4": [300, None, None]})
    t = analysis.contrasts(tail, s).query("arm == 'width' and kind == 'arm'").iloc[0]
    assert (t.verdict, t.verdict_enough, t.pairs_enough) == ("too few runs", "increasing", 1)


def test_the_share_of_seeds_and_fishers_exact_test_by_hand():
    assert analysis.whether_p(0, 5, 5, 5) == pytest.approx(2 / 252)            # 2 / C(10, 5): only the two extremes
    assert analysis.whether_p(1, 5, 5, 5) == pytest.approx(12 / 252)  # x = 5 and x = 1 changed of 6: 6 / 252 each
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
    assert [k for k, _, _ in shapes(s)] == ["w64-h1", "w64-h2", "w64-h4", "w8-h1", "w16-h2", "w32-h4", "w64-h8"]
    assert len(jobs(s)) == 4 * 7
    p = job_params(SETTINGS, "markov_control", "w16-h2")
    assert p["task_settings"] == SETTINGS["tasks"]["markov"] and (p["width"], p["heads"]) == (16, 2)
    assert "threshold" not in p and "margin" not in p                     # the summary's, not a training job's
    narrowed = InductionSettings.from_config(dict(SETTINGS, shapes=["w64-h4", "w8-h1"], run=["repeat"]))
    assert jobs(narrowed) == [("repeat", "w64-h4"), ("repeat", "w8-h1")]


@pytest.mark.parametrize("change, message", [
    (dict(run=["repeat", "copy"]), "induction.run[1] = 'copy': not a task"),
    (dict(tasks=dict(repeat=dict(vocab=8, half=[4, 12]))), "induction.tasks.repeat.half = [4, 12]"),
    (dict(tasks=dict(repeat=dict(vocab=32, half=[4, 20]), markov=dict(states=8, alpha=0.1))),
     "longer than induction.context = 32"),
    (dict(arms=dict(width=dict(width=64, heads=[3]))), "induction.arms.width.heads: 3 heads do not divide width 64"),
    (dict(arms=dict(width=dict(width=64, head_size=8, heads=[1]))), "give exactly one of width and head_size"),
    (dict(shapes=["w64-h3"]), "induction.shapes[0] = 'w64-h3': not a shape of the arms"),
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
    s = InductionSettings.from_config(dict(SETTINGS, steps=400, evaluations=21))   # it changes phase at ~220
    run = train_run("repeat", 64, 1, 0, s)
    row = analysis.run_row(run.curve, run.heads, run.edges, s, 0.05)
    assert row["phase_step"] is not None and row["induction_step"] is not None and row["prev_step"] is not None
    assert row["circuit"] and row["final_loss"] < row["unigram"] - s.margin
    control = train_run("repeat_control", 64, 1, 0, s)
    c = analysis.run_row(control.curve, control.heads, control.edges, s, 0.05)
    assert c["phase_step"] is None and c["induction_heads"] == 0 and not c["circuit"]
    assert control.curve["own_loss"].iloc[-1] < control.curve["own_loss"].iloc[0]    # it learnt its own rows
