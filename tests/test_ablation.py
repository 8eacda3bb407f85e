"""The ablation experiments (headwatch/ablation/experiments.py) on a tiny Llama with grouped kv heads."""
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from headwatch.ablation import experiments as A
from headwatch.settings.ablation import AblationSettings
from headwatch.model.arch import Adapter
from headwatch.ablation.cut import cut_heads, full_logits, zeroed_columns
from headwatch.ablation.guards import AblationGuards, random_control
from headwatch.ablation.guards import merge_guards
from headwatch.guards import GuardError
from headwatch.scores.heads import induction_scores, scores_table
from headwatch.tableio import guard_records
from tiny import random_ids, tiny_model

T, OFFSET, BOS = 6, 1, 0
PARAMS = dict(top_n=3, method="zero", k=[1, 2, 3], random_draws=3, seed=11, batch=8, rounding_factor=1.0,
              hook_tolerance=0.0, guard_sequences=1, circuit=dict(half_threshold=0.05),
              attribution=dict(no_effect_points=0.02, together=3, global_loss_nats=0.01))
SETTINGS = AblationSettings.from_config(PARAMS)


def _settings(**changed) -> AblationSettings:
    return AblationSettings.from_config(dict(PARAMS, **changed))


def _repeated(n, seed):
    """Sequences like the workflow's: BOS, T random ids, the same T ids again."""
    first = random_ids(n, T, seed=seed)
    ids = torch.cat([torch.full((n, 1), BOS), first, first], dim=1)
    return pd.DataFrame(dict(seq=range(n), token_ids=[r.tolist() for r in ids], half_length=T,
                             offset=OFFSET))


def _copy_losses(model, adapter, ids, heads, means=None):
    with cut_heads(adapter, heads, means):
        logits = full_logits(model, ids)
    c1 = F.cross_entropy(logits[:, OFFSET:OFFSET + T - 1].reshape(-1, logits.shape[-1]),
                         ids[:, OFFSET + 1:OFFSET + T].reshape(-1))
    c2 = F.cross_entropy(logits[:, OFFSET + T:OFFSET + 2 * T - 1].reshape(-1, logits.shape[-1]),
                         ids[:, OFFSET + T + 1:OFFSET + 2 * T].reshape(-1))
    return float(c1), float(c2)


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("llama")
    adapter = Adapter(model)
    g = torch.Generator().manual_seed(5)
    fake = {name: torch.rand(adapter.n_layers, adapter.n_heads, generator=g)
            for name in ("sink", "prev", "self", "induction")}
    scores = scores_table(adapter, fake)
    return model, adapter, scores


@pytest.fixture(scope="module")
def topk(setup):
    model, adapter, scores = setup
    eval_df = _repeated(3, seed=2)
    table, note, guards = A.run_topk(model, adapter, eval_df, scores, SETTINGS)
    return eval_df, table, note, guards


@pytest.fixture(scope="module")
def attribution(setup):
    model, adapter, _ = setup
    rows = []
    for name, seed in (("one", 7), ("two", 8)):
        ids = random_ids(1, 9, seed=seed)[0].tolist()
        with torch.no_grad():
            expected = int(model(torch.tensor([ids])).logits[0, -1].argmax())   # a likely token
        rows.append(dict(phrase=name, token_ids=ids, expected=f"tok{expected}", expected_id=expected))
    phrases = pd.DataFrame(rows)
    return (phrases,) + A.run_attribution(model, adapter, phrases, _prose(), SETTINGS)


def _prose():
    """Prose-like sentences of different lengths (the prose table's columns the cut scope reads)."""
    return pd.DataFrame(dict(seq=range(3), token_ids=[random_ids(1, n, seed=20 + n)[0].tolist() for n in (5, 8, 11)]))


def _prose_loss(model, adapter, prose, heads, means=None):
    """Loss per token on the prose by hand: every next-token prediction of every sentence, pooled."""
    total, count = 0.0, 0
    with torch.no_grad(), cut_heads(adapter, heads, means):
        for ids in prose.token_ids:
            ids = torch.tensor([ids])
            logits = model(ids).logits[0, :-1]
            total += float(F.cross_entropy(logits.double(), ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    return total / count


@pytest.fixture(scope="module")
def circuit(setup):
    model, adapter, scores = setup
    circuit_df = _repeated(3, seed=3)
    return (circuit_df,) + A.run_circuit(model, adapter, circuit_df, scores, SETTINGS)


def test_copy_positions_by_hand():
    c1, c2 = A.copy_positions(3, 0)
    assert c1.tolist() == [0, 1] and c2.tolist() == [3, 4]     # targets 1,2 and 4,5
    c1, c2 = A.copy_positions(3, 1)
    assert c1.tolist() == [1, 2] and c2.tolist() == [4, 5]     # targets 2,3 and 5,6; BOS at 0
    with pytest.raises(ValueError):
        A.copy_positions(1, 0)


def test_token_losses_by_hand():
    ids = torch.tensor([[0, 2, 1]])
    logits = torch.tensor([[[0.0, 0.0, np.log(2.0)], [np.log(3.0), 0.0, 0.0]]])   # positions 0, 1
    loss = A.token_losses(ids, torch.tensor([0, 1]))(logits, torch.tensor([0]))
    # position 0 -> target 2: p = 2/4; position 1 -> target 1: p = 1/5
    assert torch.allclose(loss, torch.tensor([[-np.log(0.5), -np.log(0.2)]], dtype=torch.float32))


def test_random_heads_reproducible_and_sized():
    pool = [(l, h) for l in range(3) for h in range(4) if (l, h) != (1, 1)]
    a = A.random_heads(pool, 3, 5, seed=11, stream="topk", key=3)
    assert a == A.random_heads(list(reversed(pool)), 3, 5, seed=11, stream="topk", key=3)
    assert a != A.random_heads(pool, 3, 5, seed=12, stream="topk", key=3)
    assert all(len(set(d)) == 3 and set(d) <= set(pool) for d in a)
    with pytest.raises(ValueError, match="only 11 heads"):
        A.random_heads(pool, 12, 1, seed=11, stream="topk")


def test_topk_targeted_vs_random(setup, topk):
    model, adapter, scores = setup
    eval_df, both, note, guards = topk
    table = both[both.method == "zero"].reset_index(drop=True)      # the configured method (zero)
    ranked = scores.sort_values(["induction", "layer", "head"], ascending=[False, True, True])
    targeted = [A.head_label(int(r.layer), int(r["head"])) for _, r in ranked.head(3).iterrows()]
    assert table.k.tolist() == [1, 2, 3]
    assert table.n_cut_targeted.tolist() == [1, 2, 3] and table.n_cut_random.tolist() == [1, 2, 3]
    for row in table.itertuples():
        assert row.targeted_heads.split() == targeted[:row.k]
        assert len(row.random_heads) == row.n_draws == 3
        for draw in row.random_heads:                      # never a targeted head
            assert len(draw.split()) == row.k and not set(draw.split()) & set(targeted)
        for c in ("copy1", "copy2"):
            lo, mean, hi = (getattr(row, f"random_{c}_{s}") for s in ("min", "mean", "max"))
            assert lo <= mean <= hi
    # The losses, recomputed by hand from full logits (targets inside each copy).
    ids = torch.tensor(np.stack(eval_df.token_ids))
    def copy_losses(heads):
        return _copy_losses(model, adapter, ids, heads)
    i1, i2 = copy_losses([])
    assert np.allclose(table.intact_copy1, i1, atol=1e-5) and np.allclose(table.intact_copy2, i2, atol=1e-5)
    heads3 = [(int(t[1:].split("H")[0]), int(t.split("H")[1])) for t in targeted]
    t1, t2 = copy_losses(heads3)
    assert abs(table.targeted_copy1.iloc[-1] - t1) < 1e-5 and abs(table.targeted_copy2.iloc[-1] - t2) < 1e-5
    assert abs(t2 - i2) > 1e-4                                 # the cut does something
    # Reproducible from the seed.
    again, _, _ = A.run_topk(model, adapter, eval_df, scores, SETTINGS)
    pd.testing.assert_frame_equal(both, again)
    assert guards["passed"] and guards["hook_vs_weights"]["max_abs_diff"] == 0.0
    assert guards["restore"]["identical"] and guards["batched_vs_loop"]["max_abs_diff"] <= 1e-5
    assert guards["random_control"]["identical"] and guards["random_control"]["n_cases"] == 2 * len(PARAMS["k"])
    assert "t = offset+T .. offset+2T-2" in note["positions"]


def test_topk_refuses_k_above_top_n(setup, topk):
    model, adapter, scores = setup
    with pytest.raises(ValueError, match="ablation.k"):
        A.run_topk(model, adapter, topk[0], scores, _settings(k=[4]))


def test_attribution_summary_follows_from_table(setup, attribution):
    model, adapter, _ = setup
    phrases, attr, summary, pairs, note, guards = attribution
    thr = PARAMS["attribution"]["no_effect_points"]
    prose = _prose()
    intact = _prose_loss(model, adapter, prose, [])
    assert len(attr) == 2 * adapter.n_layers * adapter.n_heads
    assert np.allclose(attr["drop_points"], 100 * (attr.p_intact - attr.p_cut))
    for ph in phrases.itertuples():
        a = attr[attr.phrase == ph.phrase]
        s = summary.set_index("phrase").loc[ph.phrase]
        with torch.no_grad():
            p0 = torch.softmax(model(torch.tensor([ph.token_ids])).logits[0, -1], -1)[ph.expected_id]
        assert abs(s.p_intact - float(p0)) < 1e-6 and np.allclose(a.p_intact, s.p_intact)
        n = int((a["drop_points"].abs() < thr).sum())
        assert s.n_no_effect == n and 0 < n < len(a)           # the threshold splits the heads
        assert s.no_effect_points == thr and s.n_heads == len(a)
        top = a.sort_values(["drop_points", "layer", "head"], ascending=[False, True, True])
        assert (s.costliest_layer, s.costliest_head) == (top.layer.iloc[0], top["head"].iloc[0])
        assert s.costliest_drop == top["drop_points"].iloc[0]
        heads = list(zip(top.layer.head(3), top["head"].head(3)))
        assert s.together == 3 and s.together_heads == " ".join(A.head_label(*h) for h in heads)
        with torch.no_grad(), cut_heads(adapter, heads):
            pt = torch.softmax(model(torch.tensor([ph.token_ids])).logits[0, -1], -1)[ph.expected_id]
        assert abs(s.p_together - float(pt)) < 1e-6
        pr = pairs.set_index("phrase").loc[ph.phrase]
        assert (pr.a_layer, pr.a_head, pr.b_layer, pr.b_head) == (*heads[0], *heads[1])
        assert pr.drop_a == top["drop_points"].iloc[0] and pr.drop_b == top["drop_points"].iloc[1]
        assert np.isclose(pr.drop_sum, pr.drop_a + pr.drop_b)
        assert np.isclose(pr.nonadditivity, pr.drop_both - pr.drop_sum)
        # cut scope: the costliest head cut on the prose, against a loop by hand
        cut = _prose_loss(model, adapter, prose, [heads[0]])
        assert abs(s.prose_loss_intact - intact) < 1e-5 and abs(s.prose_loss_cut - cut) < 1e-5
        assert np.isclose(s.prose_loss_rise, s.prose_loss_cut - s.prose_loss_intact)
        assert s.global_loss_nats == PARAMS["attribution"]["global_loss_nats"]
        assert s.cut_scope == ("global" if cut - intact > s.global_loss_nats else "specific")
    assert guards["passed"] and guards["hook_vs_weights"]["max_abs_diff"] == 0.0
    assert all(len(c["shape"]) == 2 for c in guards["hook_vs_weights"]["cases"])   # guards ran on every phrase
    prose_guard = [c for c in guards["batched_vs_loop"]["cases"] if "prose" in c["quantity"]]
    assert len(prose_guard) == 1 and prose_guard[0]["max_abs_diff"] <= 1e-5   # guard 3 covers the prose losses
    # ... as reported: one pooled loss per variant (intact + each distinct costliest head)
    costliest = set(zip(summary.costliest_layer, summary.costliest_head))
    assert prose_guard[0]["shape"] == [1 + len(costliest)]


def test_cut_scope_threshold():
    """global only above the threshold: a rise equal to it is still specific."""
    assert A.cut_scope(0.2, 0.1) == "global"
    assert A.cut_scope(0.1, 0.1) == "specific" and A.cut_scope(-0.3, 0.1) == "specific"


def test_cut_scope_separates_a_silent_head_from_a_harmful_cut(setup):
    """By hand: the head whose cut raises the prose loss most is global under a threshold of half
    its rise; a head whose output-projection columns are zero changes nothing when cut (specific).
    prose_losses agrees with the loop by hand."""
    model, adapter, _ = setup
    prose = _prose()
    intact = _prose_loss(model, adapter, prose, [])
    rises = {h: _prose_loss(model, adapter, prose, [h]) - intact for h in adapter.heads()}
    harmful = max(rises, key=rises.get)
    silent = next(h for h in adapter.heads() if h != harmful)
    assert rises[harmful] > 0
    thr = rises[harmful] / 2
    guards = AblationGuards(model, adapter, torch.tensor([prose.token_ids[0]]), PARAMS["batch"])
    loss = A.prose_losses(model, adapter, prose, [[], [harmful]], guards, SETTINGS, None)
    assert abs(loss[0] - intact) < 1e-5 and abs(loss[1] - (intact + rises[harmful])) < 1e-5
    assert A.cut_scope(loss[1] - loss[0], thr) == "global"
    with zeroed_columns(adapter, [silent]):
        loss = A.prose_losses(model, adapter, prose, [[], [silent]], guards, SETTINGS, None)
    assert abs(loss[1] - loss[0]) < 1e-6 and A.cut_scope(loss[1] - loss[0], thr) == "specific"


def test_circuit(setup, circuit):
    model, adapter, scores = setup
    circuit_df, sc, loss, note, guards = circuit
    prev = scores.sort_values(["prev", "layer", "head"], ascending=[False, True, True]).iloc[0]
    prev_label = A.head_label(int(prev.layer), int(prev["head"]))
    assert (sc.prev_head == prev_label).all() and sc["rank"].tolist() == [1, 2, 3]
    targeted = set(sc.label)
    rand = loss.set_index("condition").loc["random head"]
    assert rand.n_draws == 3 and rand.n_heads_cut == 1
    assert len(set(rand.heads)) == 3 and not set(rand.heads) & (targeted | {prev_label})
    ids = torch.tensor(np.stack(circuit_df.token_ids))
    intact = induction_scores(model, adapter, ids, T, OFFSET)
    with cut_heads(adapter, [(int(prev.layer), int(prev["head"]))]):
        after = induction_scores(model, adapter, ids, T, OFFSET)
    for r in sc.itertuples():
        assert abs(r.intact - intact[r.layer, r.head]) < 1e-5
        assert abs(r.after_prev_cut - after[r.layer, r.head]) < 1e-5
    thr = PARAMS["circuit"]["half_threshold"]
    above = intact > thr
    assert sc.n_above_threshold.iloc[0] == int(above.sum())
    assert sc.n_lose_half_prev_cut.iloc[0] == int((above & (after < intact / 2)).sum())
    assert loss.condition.tolist() == ["intact", "random head", "best induction head", "previous-token head"]
    assert loss.set_index("condition").loc["previous-token head"].heads == [prev_label]
    assert guards["passed"]


def test_every_guard_record_has_one_shape_and_the_ablation_guards_fire(setup, topk):
    """The ablation rule's records have the patching guards' shape (headwatch.guards.compare); the
    random control refuses a draw of the wrong size or one holding a targeted head; a batched
    value off its loop stops the rule once its tables are made, and the error carries them."""
    model, adapter, _ = setup
    keys = {"guard", "compared", "n_cases", "max_abs_diff", "identical", "bound", "ratio", "rounding", "passed",
            "cases"}
    records = guard_records(topk[3])
    assert [r["guard"] for r in records] == ["hook_vs_weights", "hook_vs_mean_bias", "random_control",
                                             "restore", "batched_vs_loop"]
    for r in records:
        assert keys <= set(r) and r["n_cases"] == len(r["cases"]), r["guard"]
        assert all({"shape", "max_abs_diff", "identical"} <= set(c) for c in r["cases"])
    targeted = [(2, 0), (2, 1)]
    assert random_control(targeted, {2: [[(0, 1), (1, 1)], [(0, 2), (1, 0)]]})["passed"]
    with pytest.raises(GuardError, match="random_control: .* not identical .*'k': 2"):
        random_control(targeted, {2: [[(0, 1), (1, 1)], [(0, 2)]]})             # a draw of one head
    with pytest.raises(GuardError, match="targeted heads in each draw"):
        random_control(targeted, {2: [[(0, 1), (2, 1)]]})                        # a targeted head
    guards = AblationGuards(model, adapter, random_ids(1, 5), PARAMS["batch"], 1.0)
    guards.loop(torch.zeros(2), torch.zeros(2), "fine")
    guards.loop(torch.zeros(2), torch.tensor([0.0, 1e-3]), "off")
    table = pd.DataFrame(dict(loss=[1.0, 2.0]))
    with pytest.raises(GuardError, match="batched_vs_loop: .* past its bound in 1 of 2 cases: .*'quantity': 'off'"
                       ) as failed:
        guards.finish(dict(topk=table), dict(made="here"))
    err = failed.value
    assert err.record["ratio"] > 100 and err.table is table and table.attrs["note"] == dict(made="here")
    assert not table.attrs["guards"]["passed"] and table.attrs["guards"]["restore"]["passed"]
    assert [c["quantity"] for c in err.record["cases"]] == ["fine", "off"]


def test_merge_guards_refuses_a_failed_record(topk):
    rec = topk[3]
    merged = merge_guards({"topk": rec, "again": rec})
    assert merged["passed"] and merged["summary"]["hook_vs_weights"]["max_abs_diff"] == 0.0
    assert merged["summary"]["batched_vs_loop"]["rules"] == 2 and merged["rules"]["again"] is rec
    with pytest.raises(GuardError, match="again"):
        merge_guards({"topk": rec, "again": dict(rec, passed=False)})


def test_figures_from_tables(tmp_path, topk, circuit, attribution):
    from headwatch.figures import ablation as figs
    from headwatch.figures.style import save
    drawn = [("topk", figs.topk_curves(topk[1])), ("circuit", figs.circuit_bars(circuit[1])),
             ("heat", figs.attribution_heatmap(attribution[1], "two")),
             ("pairs", figs.pairs_bars(attribution[3]))]
    for name, fig in drawn:
        save(fig, tmp_path / f"{name}.pdf", tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.pdf").stat().st_size > 1000
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="no attribution rows"):
        figs.attribution_heatmap(attribution[1], "missing")


# ----------------------------------------------------------------- mean cuts
def test_topk_writes_both_methods_side_by_side(setup, topk):
    """5a: one row per (method, k), the configured method first, the same heads and draws for both;
    mean rows are losses with each cut head's z replaced by its mean over the eval set."""
    model, adapter, scores = setup
    eval_df, table, note, guards = topk
    assert table.columns[0] == "method" and table.method.tolist() == ["zero"] * 3 + ["mean"] * 3
    zero_rows, mean_rows = (table[table.method == m].reset_index(drop=True) for m in ("zero", "mean"))
    for col in ("k", "targeted_heads", "random_heads", "intact_copy1", "intact_copy2"):
        assert zero_rows[col].tolist() == mean_rows[col].tolist()
    ids = torch.tensor(np.stack(eval_df.token_ids))
    means = A.head_means(model, adapter, ids)
    heads3 = [(int(t[1:].split("H")[0]), int(t.split("H")[1])) for t in mean_rows.targeted_heads.iloc[-1].split()]
    m1, m2 = _copy_losses(model, adapter, ids, heads3, means)
    assert abs(mean_rows.targeted_copy1.iloc[-1] - m1) < 1e-5 and abs(mean_rows.targeted_copy2.iloc[-1] - m2) < 1e-5
    assert abs(mean_rows.targeted_copy2.iloc[-1] - zero_rows.targeted_copy2.iloc[-1]) > 1e-4
    assert guards["hook_vs_weights"]["max_abs_diff"] == 0.0
    assert guards["hook_vs_mean_bias"]["passed"]
    assert guards["hook_vs_mean_bias"]["max_abs_diff"] <= guards["hook_vs_mean_bias"]["bound"]
    assert guards["batched_vs_loop"]["n_cases"] == 2                             # one per method
    assert "configured ablation.method (zero) first" in note["method"]
    configured_mean, _, _ = A.run_topk(model, adapter, eval_df, scores, _settings(method="mean"))
    assert configured_mean.method.tolist() == ["mean"] * 3 + ["zero"] * 3
    pd.testing.assert_frame_equal(configured_mean[configured_mean.method == "zero"].reset_index(drop=True),
                                  zero_rows)


def test_circuit_and_attribution_use_the_configured_method(setup, topk, circuit, attribution):
    model, adapter, scores = setup
    eval_df = topk[0]
    mean_cuts = _settings(method="mean")
    with pytest.raises(ValueError, match="ablation.method = mean"):
        A.run_circuit(model, adapter, circuit[0], scores, mean_cuts)
    with pytest.raises(ValueError, match="ablation.method"):
        A.run_circuit(model, adapter, circuit[0], scores, _settings(method="median"), eval_df)
    sc, loss, note, guards = A.run_circuit(model, adapter, circuit[0], scores, mean_cuts, eval_df)
    assert note["method"] == "mean" and "hook_vs_mean_bias" in guards and "hook_vs_weights" not in guards
    means = A.head_means(model, adapter, torch.tensor(np.stack(eval_df.token_ids)))
    ids = torch.tensor(np.stack(circuit[0].token_ids))
    prev = sc.prev_head.iloc[0]
    prev = (int(prev[1:].split("H")[0]), int(prev.split("H")[1]))
    with cut_heads(adapter, [prev], means):
        after = induction_scores(model, adapter, ids, T, OFFSET)
    for r in sc.itertuples():
        assert abs(r.after_prev_cut - after[r.layer, r.head]) < 1e-5
    zero_sc = circuit[1]
    assert not np.allclose(sc.after_prev_cut, zero_sc.after_prev_cut, atol=1e-6)   # a different cut
    phrases = attribution[0]
    attr, summary, pairs, note, guards = A.run_attribution(model, adapter, phrases, _prose(), mean_cuts, eval_df)
    assert note["method"] == "mean" and guards["passed"] and "hook_vs_mean_bias" in guards
    row = attr.iloc[5]
    ph = phrases.set_index("phrase").loc[row.phrase]
    with torch.no_grad(), cut_heads(adapter, [(int(row.layer), int(row["head"]))], means):
        p = torch.softmax(model(torch.tensor([ph.token_ids])).logits[0, -1], -1)[ph.expected_id]
    assert abs(row.p_cut - float(p)) < 1e-6
    merged = merge_guards({"topk": topk[3], "attribution": guards})
    assert merged["summary"]["hook_vs_mean_bias"]["max_abs_diff"] <= guards["hook_vs_mean_bias"]["bound"]


def test_settings_are_typed_and_name_what_is_missing_or_unknown():
    """AblationSettings types every key under ablation: of the shipped config (a key it does not
    know is refused, so a new key must be typed here too), and a rule whose slice lacks a key
    the experiment reads is told which."""
    import yaml

    from workflow import ROOT

    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["ablation"]
    s = AblationSettings.from_config(shipped)
    assert s.k == tuple(shipped["k"]) and isinstance(s.rounding_factor, float)
    assert s.attribution.together == shipped["attribution"]["together"]
    assert s.circuit.half_threshold == shipped["circuit"]["half_threshold"]
    with pytest.raises(ValueError, match=r"ablation: unknown key\(s\) \['colour'\]"):
        AblationSettings.from_config(dict(shipped, colour=1))
    with pytest.raises(ValueError, match=r"ablation.attribution: unknown key\(s\) \['colour'\]"):
        AblationSettings.from_config(dict(shipped, attribution=dict(shipped["attribution"], colour=1)))
    with pytest.raises(ValueError, match="batch missing"):
        AblationSettings.from_config({k: v for k, v in shipped.items() if k != "batch"})
    attribution_only = AblationSettings.from_config({k: shipped[k] for k in ("attribution", "batch", "rounding_factor",
                                                                            "hook_tolerance", "method")})
    assert attribution_only.need("attribution") is attribution_only
    with pytest.raises(ValueError, match="top_n, seed not in this rule's settings"):
        attribution_only.need("top_n", "seed")
