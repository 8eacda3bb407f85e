"""The heads a sweep model grows (protocol §7b, headwatch.sweep.heads): a tiny two-layer
character model trained on a task only attention to the earlier copy solves (random
characters, each block repeated) grows a head the §4 induction score sees, its formation
step is recorded, and cutting it (the §5a code) raises the second copy's loss far more than
cutting a random head; the same model trained on random characters that never repeat grows
none. Plus the in-context score and the formation step against hand-computed cases.

With learned absolute positions and one block length, the head that forms may look back by
position alone (T - 1 places) rather than by content: on the probe's sequences of the same
length the two are the same attention, which is what the §4 score and the cut measure."""
import string

import numpy as np
import pandas as pd
import pytest
import torch

from headwatch.sweep.heads import formation_step, in_context_from_losses, make_probe, probe_scores, cut_table
from headwatch.sweep.train import RunOptions, train

HEADS = dict(windows=8, sequences=8, seed=0, early=4, late=8, threshold=0.3, cut_sequences=16)
MODEL = dict(width=32, heads=2, layers=2, context=32)
TRAIN = dict(steps=400, batch=32, lr=3e-3, min_lr=3e-4, warmup=20, weight_decay=0.0, eval_every=50,
             eval_batches=2, checkpoint_every=1000)
ABLATION = dict(random_draws=8, seed=11, method="zero", batch=64, rounding_factor=1.0, hook_tolerance=0.0,
                guard_sequences=2)
V, T = 32, 16


def blocks(repeat: bool, n: int = 2000, seed: int = 0):
    """``n`` blocks of T random characters, each followed by itself (``repeat``) or by fresh ones."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n):
        a = rng.integers(0, V, T)
        parts += [a, a if repeat else rng.integers(0, V, T)]
    ids = np.concatenate(parts).astype(np.uint8)
    meta = dict(vocab=list((string.ascii_letters + string.digits)[:V]), vocab_size=V,
                n_train=int(len(ids) * 0.9), sha256=f"blocks-{repeat}")
    return ids, meta


@pytest.fixture(scope="module")
def grown():
    torch.set_num_threads(1)
    return {repeat: train(*blocks(repeat), MODEL, 0, TRAIN, heads=HEADS, run=RunOptions(full_eval=False))
            for repeat in (True, False)}


@pytest.fixture(scope="module")
def cuts(grown):
    """Each model's top induction head (scored on the probe) cut against random heads, zero and mean."""
    out = {}
    for repeat, (model, *_) in grown.items():
        scores = probe_scores(model, make_probe(blocks(repeat)[0][-2000:], V, MODEL["context"], HEADS))
        out[repeat] = cut_table(model, scores, HEADS, ABLATION)
    return out


def test_a_head_forms_on_repeats_and_its_cut_costs_the_second_copy(grown, cuts):
    model, metrics, _, heads = grown[True]
    step = formation_step(heads, HEADS["threshold"])
    assert step is not None and step in set(metrics["step"])
    best = heads[heads.step == heads.step.max()].sort_values("induction").iloc[-1]
    assert best["induction"] > HEADS["threshold"] and best["induction_text"] > HEADS["threshold"]
    # later characters come cheaper: far more than where nothing repeats
    assert metrics["in_context"].iloc[-1] < grown[False][1]["in_context"].iloc[-1] - 0.2
    table, note, guards = cuts[True]
    assert guards["passed"]
    for _, row in table.iterrows():                             # zero and mean cuts
        targeted = row["targeted_copy2"] - row["intact_copy2"]
        random = row["random_copy2_mean"] - row["intact_copy2"]
        assert targeted > 1.0 and targeted > 5 * max(random, 0.01), row.to_dict()
        assert abs(row["targeted_copy1"] - row["intact_copy1"]) < 0.5 * targeted


def test_no_head_forms_when_nothing_repeats(grown):
    _, metrics, _, heads = grown[False]
    assert formation_step(heads, HEADS["threshold"]) is None
    assert heads["induction"].max() < HEADS["threshold"]
    assert abs(metrics["in_context"].iloc[-1]) < 0.2


def test_the_in_context_score_by_hand():
    losses = np.arange(20.0)                 # position t costs t nats
    # last 4 positions: 16..19 (mean 17.5); positions 1..3: mean 2
    assert in_context_from_losses(losses, 3, 4) == 15.5
    assert in_context_from_losses(np.full(12, 2.0), 2, 3) == 0.0
    with pytest.raises(ValueError, match="overlap or do not fit"):
        in_context_from_losses(losses, 10, 10)


def test_the_formation_step_by_hand():
    df = pd.DataFrame(dict(step=[10, 10, 20, 20, 30, 30], layer=0, head=[0, 1] * 3,
                           induction=[0.1, 0.2, 0.25, 0.31, 0.5, 0.1]))
    assert formation_step(df, 0.3) == 20               # the best head reaches 0.3 at step 20
    assert formation_step(df, 0.5) == 30               # reaching the threshold counts
    assert formation_step(df, 0.6) is None
    assert formation_step(df.iloc[::-1], 0.3) == 20    # the rows' order does not matter


def test_the_study_and_its_page_section_read_the_numbers(grown, cuts, tmp_path):
    from headwatch import paths
    from headwatch.sweep.heads import markdown_section, study
    from headwatch.tableio import write_parquet

    runs = []
    for repeat, (model, metrics, _, heads) in grown.items():
        shape = "repeats" if repeat else "fresh"
        for seed in (0, 1):          # the same run twice: std 0
            runs.append(dict(sweep="toy", shape=shape, width=32, heads=2 if repeat else 4, seed=seed,
                             metrics=metrics, records=heads, cut=cuts[repeat][0]))
    per_run, summary, curves, grid = study(runs, HEADS["threshold"])
    rep = per_run[per_run["shape"] == "repeats"].iloc[0]
    assert rep["formation_step"] == formation_step(grown[True][3], HEADS["threshold"])
    assert pd.isna(per_run[per_run["shape"] == "fresh"]["formation_step"]).all()
    assert rep["cut_top_zero"] > 1.0 > rep["cut_random_zero"]
    assert summary["formed"].tolist() == [1.0, 0.0] and (summary["best_induction_std"] == 0).all()
    assert len(curves) == 4 * len(grown[True][1]) and len(grid) == 4 * 4
    for name, df in zip(paths.SWEEP_HEADS_TABLES, (per_run, summary, curves, grid)):
        write_parquet(df, tmp_path / paths.sweep_heads_table(name), note=dict(threshold=HEADS["threshold"]))
    text = "\n".join(markdown_section(tmp_path, {"heads_formation": "x/heads_formation.png"}))
    assert "formed (best score ≥ 0.3 on random characters) in 2 of 4 runs" in text
    assert "Nothing forms" not in text and "![heads formation](x/heads_formation.png)" in text
    assert f"{rep['best_induction']:.3f} ± 0.000" in text
