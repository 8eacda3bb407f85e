"""Each score against hand-built attention matrices, and the worked check of protocol §4."""
import pytest
import torch

from headwatch.model.arch import Adapter
from headwatch.names import top_heads
from headwatch.scores.heads import (four_scores, induction_cells, induction_scores, prev_cells, scores_table,
                                    self_cells, sink_cells)
from tiny import random_ids, tiny_model


def lower_triangular(T, seed=0):
    """A random causal attention matrix: rows sum to 1, 0 above the diagonal."""
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(T, T, generator=g).tril()
    return A / A.sum(-1, keepdim=True)


def test_sink_prev_self_read_the_cells_by_hand():
    A = torch.tensor([[1.0, 0.0, 0.0, 0.0],
                      [0.6, 0.4, 0.0, 0.0],
                      [0.5, 0.2, 0.3, 0.0],
                      [0.1, 0.2, 0.3, 0.4]])
    # row 0 excluded; sink = column 0 of rows 1..3
    assert sink_cells(A).tolist() == pytest.approx([0.6, 0.5, 0.1])
    # prev: A[1,0], A[2,1], A[3,2]
    assert prev_cells(A).tolist() == pytest.approx([0.6, 0.2, 0.3])
    # self: A[1,1], A[2,2], A[3,3]
    assert self_cells(A).tolist() == pytest.approx([0.4, 0.3, 0.4])
    assert sink_cells(A).mean().item() == pytest.approx(0.4)
    assert prev_cells(A).mean().item() == pytest.approx(1.1 / 3)
    assert self_cells(A).mean().item() == pytest.approx(1.1 / 3)


@pytest.mark.parametrize("offset", [0, 1])
def test_induction_reads_the_token_after_the_earlier_occurrence(offset):
    T = 5
    n = offset + 2 * T
    A = lower_triangular(n, seed=3)
    cells = induction_cells(A, T, offset)
    # rows r = offset+T .. offset+2T-2, column r - T + 1, written out by hand
    expected = [A[r, r - T + 1].item() for r in range(offset + T, offset + 2 * T - 1)]
    assert len(expected) == T - 1
    assert cells.tolist() == pytest.approx(expected)


def test_induction_cells_on_a_perfect_induction_head():
    """A head that attends exactly to r-T+1 in copy 2 scores 1; a sink-only head scores 0."""
    T = 25
    perfect = torch.zeros(2 * T, 2 * T)
    perfect[:, 0] = 1.0
    for r in range(T, 2 * T - 1):
        perfect[r] = 0
        perfect[r, r - T + 1] = 1.0
    assert induction_cells(perfect, T).shape == (T - 1,)
    assert induction_cells(perfect, T).mean().item() == 1.0
    sink_only = torch.zeros(2 * T, 2 * T)
    sink_only[:, 0] = 1.0
    assert induction_cells(sink_only, T).mean().item() == 0.0
    assert sink_cells(sink_only).mean().item() == 1.0


def test_scores_pool_cells_over_sequences_of_different_lengths(monkeypatch):
    """A score is the plain mean of all the cells it reads, not a mean of per-sentence means."""
    a, b = lower_triangular(3, 1), lower_triangular(6, 2)
    pooled = torch.cat([sink_cells(a), sink_cells(b)]).mean().item()
    per_sentence = (sink_cells(a).mean() + sink_cells(b).mean()).item() / 2
    assert pooled != pytest.approx(per_sentence)

    maps = {3: a, 6: b}   # stands in for the model: fixed maps per sentence length
    import headwatch.scores.heads as scores
    monkeypatch.setattr(scores, "attention_maps",
                        lambda model, ids, adapter=None: maps[ids.shape[-1]].reshape(1, 1, 1, *maps[ids.shape[-1]].shape))
    out = scores.prose_scores(None, None, [torch.zeros(3), torch.zeros(6)])
    assert out["sink"].item() == pytest.approx(pooled)


def test_worked_check_one_head_on_one_phrase_is_the_plain_mean_of_its_cells(family):
    """protocol §4 worked check: the score of one head equals the mean of the cells it reads,
    taken from the model's own attention map."""
    model = tiny_model(family)
    adapter = Adapter(model)
    ids = random_ids(1, 12, seed=5)
    scores = four_scores(model, adapter, [ids[0]], random_ids(2, 10, seed=6), half_length=5)
    layer, head = 1, 3
    with torch.no_grad():
        A = model(ids, output_attentions=True).attentions[layer][0, head]
    cells = {"sink": [A[r, 0] for r in range(1, 12)],
             "prev": [A[r, r - 1] for r in range(1, 12)],
             "self": [A[r, r] for r in range(1, 12)]}
    row = scores[(scores.layer == layer) & (scores["head"] == head)].iloc[0]
    for name, values in cells.items():
        assert row[name] == pytest.approx(torch.stack(values).mean().item(), abs=1e-6), name


def test_induction_scores_batching_does_not_change_the_result(family):
    model = tiny_model(family)
    adapter = Adapter(model)
    ids = random_ids(5, 5, seed=1).repeat(1, 2)
    one = induction_scores(model, adapter, ids, 5, batch=1)
    many = induction_scores(model, adapter, ids, 5, batch=8)
    assert torch.allclose(one, many, atol=1e-6)


def test_scores_table_ranks_and_groups():
    model = tiny_model("qwen2")
    adapter = Adapter(model)
    values = {name: torch.arange(12, dtype=torch.float32).reshape(3, 4) / 12
              for name in ("sink", "prev", "self", "induction")}
    df = scores_table(adapter, values)
    assert list(df.columns[:7]) == ["layer", "head", "kv_group", "sink", "prev", "self", "induction"]
    assert df.kv_group.tolist() == [0, 0, 1, 1] * 3     # 4 query heads share 2 kv heads
    assert df.loc[df.induction.idxmax(), "induction_rank"] == 1
    assert sorted(df.induction_rank) == list(range(1, 13))
    assert top_heads(df, "induction", 2) == [(2, 3), (2, 2)]
