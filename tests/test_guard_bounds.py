"""Guards whose bounds follow from rounding (headwatch/guards.py: Rounding): no false alarm on the
prompts a researcher writes — names, antonyms, facts, numbers, code, random tokens, of several
lengths — through every guarded public function, on tiny models of several families and on the
bundled SmolLM2-135M; and every guard still fails, by at least 100 times its bound, when the
computation it guards is made wrong on purpose (a patch at the wrong head, position or layer, a
cut that misses a head, circuits that drop a head's edges, the map of another head). A failed
guard carries the table the call computed (``err.table``) and its record (``err.record``)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import headwatch as hw
from headwatch.ablation.cut import BatchedCuts
from headwatch.circuits import faithfulness
from headwatch.circuits.path_patching import PATH_SITES, Edge, PathPatcher
from headwatch.guards import GuardError, batched_vs_loop, rounding
from headwatch.model.device import exact_numerics
from headwatch.settings.circuits import CircuitsError
from headwatch.patching import guards
from headwatch.patching.batch import PromptBatch
from headwatch.patching.patcher import Patch, Patcher
from headwatch.patching.positions import CachedPositions
from headwatch.tableio import guard_records

#: Margin a wrong computation must clear: max |Δ| at least this many times the guard's bound.
WIDE = 100

#: A researcher's prompt pairs, by kind: (clean, corrupted, answer, distractor), answers one token.
FAMILIES = {
    "names": [("When Mary and John went to the shop, John gave a drink to",
               "When Alice and Bob went to the shop, Tom gave a drink to", " Mary", " John"),
              ("Then Anna and Paul talked, and Paul said to", "Then Kate and Mark talked, and Jack said to",
               " Anna", " Paul")],
    "antonyms": [("The opposite of hot is", "The opposite of big is", " cold", " small"),
                 ("The opposite of up is", "The opposite of fast is", " down", " slow"),
                 ("The opposite of light is", "The opposite of good is", " dark", " bad"),
                 ("The opposite of wet is", "The opposite of old is", " dry", " new")],
    "facts": [("The capital of France is", "The capital of Italy is", " Paris", " Rome"),
              ("The Eiffel Tower is in the city of", "The Colosseum is in the city of", " Paris", " Rome")],
    "numbers": [("Two plus two equals", "Two plus three equals", " four", " five"),
                ("One, two, three, four,", "One, three, five, seven,", " five", " nine")],
    "code": [("for i in range(10):\n    print(", "for j in range(10):\n    print(", "i", "j"),
             ("x = [1, 2, 3]\nprint(len(", "y = [1, 2, 3]\nprint(len(", "x", "y")],
}
ANTONYMS = pd.DataFrame(FAMILIES["antonyms"], columns=["clean", "corrupted", "answer", "distractor"])


def random_pairs(tokenizer, n: int = 2, lengths=(6, 12), seed: int = 0) -> list[tuple]:
    """Pairs of random words, each one token of the tokenizer with its space: a clean prompt, its
    corrupted twin with two words drawn again, two more words as answer and distractor."""
    rng = np.random.default_rng(seed)
    words = []
    for i in rng.permutation(len(tokenizer))[:3000]:
        w = tokenizer.decode([int(i)])
        if w.startswith(" ") and w[1:].isalpha() and tokenizer(w, add_special_tokens=False).input_ids == [int(i)]:
            words.append(w)
    out = []
    for k in range(n):
        length = lengths[k % len(lengths)]
        picked = list(rng.choice(words, size=length + 4, replace=False))
        clean = picked[:length]
        corrupted = clean[:1] + picked[length:length + 2] + clean[3:]
        out.append(("".join(clean).lstrip(), "".join(corrupted).lstrip(), picked[-2], picked[-1]))
    return out


def family_pairs(tokenizer, per_family: int = 2) -> pd.DataFrame:
    """Every family's first ``per_family`` pairs and random words."""
    rows = [(name, *p) for name, pairs in FAMILIES.items() for p in pairs[:per_family]]
    rows += [("random", *p) for p in random_pairs(tokenizer, per_family)]
    return pd.DataFrame(rows, columns=["family", "clean", "corrupted", "answer", "distractor"])


def _bounded(table) -> list[dict]:
    """The guard records of a returned table that have a derived bound (not the exact ones)."""
    return [g for g in guard_records(table.attrs["guards"]) if g["rounding"] is not None]


def _passed(table, *guards_run: str) -> None:
    """Every guard of the table passed, the named ones among them; each bounded one says its bound."""
    record = table.attrs["guards"]
    names = [g["guard"] for g in guard_records(record)]
    assert record["passed"] and set(guards_run) <= set(names), names
    for g in _bounded(table):
        r = g["rounding"]
        assert g["passed"] and g["max_abs_diff"] <= g["bound"] and g["ratio"] <= 1, g["guard"]
        u = 2 ** -53 if g["guard"] == "hook_vs_mean_bias" else 2 ** -24      # that one runs the model in float64
        assert r["unit_roundoff"] == u and r["dtype"] == ("float64" if u == 2 ** -53 else "float32"), g["guard"]
        assert r["magnitude"] > 0 and g["bound"] == pytest.approx(r["factor"] * u * r["magnitude"] * r["depth"]
                                                                  * r["terms"] ** 0.5)


def _far_past(err: GuardError, guard: str) -> dict:
    """The failed guard's record: ``guard``, past its bound by at least :data:`WIDE` times."""
    failed = [g for g in guard_records(err.guards) if not g["passed"]] if err.guards else [err.record]
    record = next(g for g in failed if g["guard"] == guard)
    assert record["ratio"] >= WIDE, (guard, record["ratio"])
    return record


# ------------------------------------------------------------------ tiny models: no false alarm
@pytest.fixture(scope="module")
def family_models(tiny_family_dir):
    return {f: hw.load_model(tiny_family_dir(f)) for f in ("llama", "gpt2", "gemma2", "qwen3")}


@pytest.fixture(scope="module")
def pairs(smollm2_tokenizer):
    """One pair of each family: 4 to 14 tokens."""
    return family_pairs(smollm2_tokenizer, per_family=1)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma2", "qwen3"])
def test_every_patching_guard_holds_on_every_prompt_family(family, family_models, pairs):
    """Grouped keys (llama), absolute positions (gpt2), soft-capping and windows (gemma2), QK-norm
    (qwen3): every prompt family at once, several lengths padded together."""
    m = family_models[family]
    prompts = hw.prompt_pairs(m, pairs.drop(columns="family"))
    assert PromptBatch.of(prompts).mask is not None                      # lengths differ: padding guarded too
    heads = hw.patch_heads(m, prompts, resid=True, positions=True)
    _passed(heads, "batched_vs_loop", "padded_vs_alone")
    _passed(hw.patch_positions(m, prompts, heads, positions_all_heads=2), "batched_vs_loop")
    _passed(hw.patch_kv_groups(m, prompts, kv_prompts=3), "kv_ungrouped")
    _passed(hw.path_patching(m, prompts, heads, receivers=[(1, 0), (2, 3)]), "path_into_everything", "batched_vs_loop")


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_every_edge_and_cut_guard_holds(family, family_models, pairs):
    m = family_models[family]
    prompts = hw.prompt_pairs(m, pairs.drop(columns="family"))
    edges = hw.edge_scores(m, prompts)
    _passed(hw.edge_faithfulness(m, prompts, edges, fractions=[0.05, 0.5, 1.0]),
            "full_circuit_is_clean", "empty_circuit_is_corrupted", "out_edges_are_z_patch", "batched_vs_loop")
    texts = [c for c in pairs.clean]
    repeated, prose = hw.sequences(m, texts, repeat=True), hw.sequences(m, texts[:4])
    scores = hw.head_scores(m, repeated, prose)
    for method in ("zero", "mean"):
        _passed(hw.cut_heads(m, scores, repeated, top_n=3, k=[1, 2], random_draws=2, method=method),
                "batched_vs_loop", "hook_vs_weights", "hook_vs_mean_bias")
    _passed(hw.cut_circuit(m, scores, repeated, repeated, random_draws=2), "batched_vs_loop")
    _passed(hw.cut_each_head(m, prose=prose, eval=repeated), "batched_vs_loop")


# ------------------------------------------------------------------ tiny models: wrong computations fail
@pytest.fixture
def llama(family_models):
    return family_models["llama"]


def test_a_patch_at_the_wrong_head_fails_and_keeps_the_table(llama, pairs, monkeypatch):
    run = Patcher.run
    monkeypatch.setattr(Patcher, "run", lambda self, patches, prompts=None: run(
        self, [Patch(p.site, p.layer, (p.unit + 1) % self.adapter.n_heads, p.position)
               if p.site == "z" else p for p in patches], prompts))
    with pytest.raises(GuardError, match="batched_vs_loop: .* past its bound .*in_float64") as failed:
        hw.patch_heads(llama, hw.prompt_pairs(llama, pairs.drop(columns="family")))
    err = failed.value
    _far_past(err, "batched_vs_loop")
    table = err.table                                                 # what the call would have returned
    assert list(table.columns[:3]) == ["layer", "head", "label"] and len(table) == llama.adapter.n_layers * 4
    assert table.attrs["note"]["prompts"] == len(pairs) and not table.attrs["guards"]["passed"]
    assert table.attrs["guards"]["nothing_patched"]["passed"]        # the other guards ran and are kept


def test_a_patch_at_the_wrong_position_fails(llama, pairs, monkeypatch):
    prompts = hw.prompt_pairs(llama, pairs.drop(columns="family"))
    heads = hw.patch_heads(llama, prompts)
    run = CachedPositions.run
    monkeypatch.setattr(CachedPositions, "run", lambda self, patches, prompts=None: run(
        self, [Patch("z", p.layer, p.unit, max(p.position - 1, 0)) for p in patches], prompts))
    with pytest.raises(GuardError) as failed:
        hw.patch_positions(llama, prompts, heads, positions_all_heads=2)
    _far_past(failed.value, "batched_vs_loop")
    assert set(failed.value.table.columns) >= {"layer", "head", "position", "score"}


def test_a_key_value_patch_at_the_wrong_layer_fails(llama, pairs, monkeypatch):
    run = Patcher.run
    L = llama.adapter.n_layers
    monkeypatch.setattr(Patcher, "run", lambda self, patches, prompts=None: run(
        self, [Patch(p.site, (p.layer + 1) % L, p.unit, p.position) if p.site in "kv" else p for p in patches],
        prompts))
    with pytest.raises(GuardError) as failed:
        hw.patch_kv_groups(llama, hw.prompt_pairs(llama, pairs.drop(columns="family")), kv_prompts=3)
    _far_past(failed.value, "kv_ungrouped")
    assert "group" in failed.value.table.columns


def test_a_path_from_the_wrong_sender_fails(llama, pairs, monkeypatch):
    prompts = hw.prompt_pairs(llama, pairs.drop(columns="family"))
    heads = hw.patch_heads(llama, prompts)
    H = llama.adapter.n_heads
    run = PathPatcher.run
    monkeypatch.setattr(PathPatcher, "run", lambda self, edges, prompts=None: run(
        self, [Edge(e.sender_layer, (e.sender_head + 1) % H, e.receiver_layer, e.receiver_head, e.input)
               for e in edges], prompts))
    with pytest.raises(GuardError) as failed:
        hw.path_patching(llama, prompts, heads, receivers=[(1, 0), (2, 3)])
    _far_past(failed.value, "batched_vs_loop")


def test_a_cut_that_misses_a_head_fails(llama, pairs, monkeypatch):
    texts = list(pairs.clean)
    repeated, prose = hw.sequences(llama, texts, repeat=True), hw.sequences(llama, texts[:4])
    scores = hw.head_scores(llama, repeated, prose)
    run = BatchedCuts.run_variants
    monkeypatch.setattr(BatchedCuts, "run_variants", lambda self, variants, reduce: run(
        self, [list(v)[1:] for v in variants], reduce))               # every cut set one head short
    with pytest.raises(GuardError) as failed:
        hw.cut_heads(llama, scores, repeated, top_n=3, k=[1, 2], random_draws=2)
    _far_past(failed.value, "batched_vs_loop")
    assert "targeted_copy2" in failed.value.table.columns
    with pytest.raises(GuardError) as failed:
        hw.cut_each_head(llama, prose=prose, eval=repeated)
    _far_past(failed.value, "batched_vs_loop")


def test_circuits_that_drop_a_heads_edges_fail(llama, pairs, monkeypatch):
    prompts = hw.prompt_pairs(llama, pairs.drop(columns="family"))
    edges = hw.edge_scores(llama, prompts)
    top = edges.attrs["tables"]["nodes"].query("kind == 'head'")["atp"].abs().idxmax()
    patched = faithfulness.patched_metric

    def dropping(adapter, graph, *args, **kw):                       # the top head's out-edges always patched
        circuits = np.asarray(args[1]) & (graph.sender != top)       # args: prompts, circuits, …
        return patched(adapter, graph, args[0], circuits, *args[2:], **kw)

    monkeypatch.setattr(faithfulness, "patched_metric", dropping)
    with pytest.raises(GuardError) as failed:
        hw.edge_faithfulness(llama, prompts, edges, fractions=[0.05, 0.5, 1.0])
    _far_past(failed.value, "full_circuit_is_clean")
    assert "faithfulness" in failed.value.table.columns


def test_the_map_of_another_head_fails_the_weight_check(monkeypatch):
    from headwatch.anatomy import weights
    from tiny import random_ids, tiny_model

    model = tiny_model("qwen3", layers=2)
    a = hw.load_model(model).adapter
    ids = random_ids(1, 12, seed=3)
    assert weights.weight_check(model, a, ids, 1, 2)["ratio"] <= 1
    hand = weights.hand_map
    monkeypatch.setattr(weights, "hand_map", lambda adapter, layer, head, hidden: hand(adapter, layer, head + 1, hidden))
    with pytest.raises(weights.WeightCheckError) as failed:
        weights.weight_check(model, a, ids, 1, 2)
    assert failed.value.record["ratio"] >= WIDE


# ------------------------------------------------------------------ the bundled SmolLM2-135M
@pytest.fixture(scope="module")
def smollm2():
    return hw.load_model()


def test_the_four_antonym_pairs_pass_every_guard_on_smollm2(smollm2):
    """The pairs whose logit differences (~11 and −8) once failed an absolute bound of 1e-5 by float32
    rounding alone: every guard of hw.patch_heads holds, and the record says by how much."""
    heads = hw.patch_heads(smollm2, ANTONYMS)
    _passed(heads, "batched_vs_loop", "nothing_patched", "everything_patched", "clean_to_clean")
    record = heads.attrs["guards"]["batched_vs_loop"]
    assert record["rounding"]["magnitude"] > 10 and record["rounding"]["depth"] == 31
    assert record["rounding"]["terms"] == 1536 and record["bound"] > 1e-3     # SmolLM2's feed-forward sum
    a = smollm2.adapter                  # path patching's guard on them: the path into everything
    prompts = PromptBatch.of(hw.prompt_pairs(smollm2, ANTONYMS))
    with exact_numerics():
        p = Patcher(smollm2.model, a, prompts, 64, extra_sites=PATH_SITES)
        rec = guards.path_into_everything(PathPatcher(p), [(3, 1), (20, 4)], range(4), rounding(a, 1.0, p.largest_logit))
    assert rec["passed"] and rec["ratio"] <= 1


def test_every_family_at_once_on_smollm2_and_a_wrong_head_fails(smollm2, pairs):
    """One pair of each family (4 to 14 tokens, padded together): the padding and the batched sweep
    hold within their bounds; the sweep read at the wrong head fails by far more. (The guards themselves, on a few patches: the whole sweep on these prompts is the cost of
    the antonyms' above again.)"""
    m = smollm2
    a = m.adapter
    prompts = hw.prompt_pairs(m, pairs.drop(columns="family"))
    with exact_numerics():
        p = Patcher(m.model, a, PromptBatch.of(prompts), 64, extra_sites=PATH_SITES)
        everyone = list(range(p.n))
        bound = rounding(a, 1.0, p.largest_logit)
        assert guards.padded_vs_alone(p, everyone, 1.0)["passed"]
        heads = [Patch("z", l, (l * 4) % a.n_heads) for l in range(2, a.n_layers, 9)]
        probe = heads + [Patch("resid_in", l, None, p.length - 1) for l in (1, 29)]
        batched = p.run(probe)
        rec = batched_vs_loop(p.against_loop(probe, batched, everyone), bound, "logit difference")
        assert rec["passed"] and rec["ratio"] <= 1
        with pytest.raises(CircuitsError, match="one length"):       # its passes run without a mask
            PathPatcher(p)
        wrong = [Patch("z", q.layer, (q.unit + 1) % a.n_heads) for q in heads]
        with pytest.raises(GuardError) as failed:
            batched_vs_loop(p.against_loop(wrong, batched[:len(heads)], everyone), bound, "logit difference")
        assert failed.value.record["ratio"] >= WIDE


# ------------------------------------------------------------------ progress names every phase
PHASES = {
    "patch_heads": ["run the clean and corrupted prompts", "patch every head", "guard nothing_patched",
                    "guard everything_patched", "guard padded_vs_alone", "attribution patching's estimate",
                    "guard clean_to_clean", "patch the residual stream", "patch the top", "guard batched_vs_loop"],
    "patch_positions": ["run the clean and corrupted prompts", "through the cache", "guard batched_vs_loop"],
    "patch_kv_groups": ["run the clean and corrupted prompts", "patch every key and value group",
                        "guard nothing_patched", "guard qkv_is_z", "guard kv_ungrouped"],
    "path_patching": ["run the clean and corrupted prompts", "paths", "guard path_into_everything",
                      "guard batched_vs_loop"],
    "edge_scores": ["eap: score every edge", "eap-ig: score every edge"],
    "edge_faithfulness": ["gap", "circuits ×", "guard full_circuit_is_clean", "guard empty_circuit_is_corrupted",
                          "guard out_edges_are_z_patch", "guard batched_vs_loop"],
    "head_scores": ["sink, prev and self", "induction"],
    "attention_maps": ["every head's map", "tables"],
    "cut_heads": ["intact model", "means", "guard hook_vs_weights", "guard hook_vs_mean_bias",
                  "guard random_control", "cut 7 head sets", "guard batched_vs_loop:", "guard restore",
                  "guard batched_vs_loop"],
    "cut_circuit": ["intact model", "guard hook_vs_weights", "induction score under", "guard batched_vs_loop:",
                    "the loss under", "guard restore", "guard batched_vs_loop"],
    "cut_each_head": ["intact model", "guard hook_vs_weights", "cut every head on", "the prose loss",
                      "guard restore", "guard batched_vs_loop"],
}


def test_progress_names_every_phase_of_every_long_call(llama, pairs, caplog):
    """Each long public function reports each of its phases by name — the sweeps, every guard, the
    estimate — in order, numbered against its total where it knows one (logger headwatch.progress:
    the lines a workflow job logs and the descriptions a notebook's bar shows)."""
    m = llama
    prompts = hw.prompt_pairs(m, pairs.drop(columns="family"))
    texts = list(pairs.clean)
    repeated, prose = hw.sequences(m, texts, repeat=True), hw.sequences(m, texts[:4])
    with caplog.at_level("INFO", logger="headwatch.progress"):
        heads = hw.patch_heads(m, prompts, resid=True, positions=True)
        hw.patch_positions(m, prompts, heads, positions_all_heads=1)
        hw.patch_kv_groups(m, prompts, kv_prompts=2)
        hw.path_patching(m, prompts, heads, receivers=[(2, 3)])
        edges = hw.edge_scores(m, prompts)
        hw.edge_faithfulness(m, prompts, edges, fractions=[0.5, 1.0])
        scores = hw.head_scores(m, repeated, prose)
        hw.attention_maps(m)
        hw.cut_heads(m, scores, repeated, top_n=3, k=[1, 2], random_draws=2, method="zero")
        hw.cut_circuit(m, scores, repeated, repeated, random_draws=2)
        hw.cut_each_head(m, prose=prose, eval=repeated)
    said: dict[str, list[str]] = {}
    for r in (r for r in caplog.records if r.name == "headwatch.progress"):
        call, _, rest = r.getMessage().partition(": ")
        said.setdefault(call, []).append(rest)
    assert set(said) == set(PHASES)
    for call, expected in PHASES.items():
        lines = said[call]
        at = 0
        for name in expected:                        # each expected phase, in this order
            at = next((i for i in range(at, len(lines)) if name in lines[i]), None)
            assert at is not None, (call, name, lines)
            at += 1
        numbers = [line.rsplit("(phase ", 1)[1].rstrip(")") for line in lines]
        if "/" in numbers[-1]:                       # a known total: every phase counted, the last is the total
            assert numbers[-1].split("/")[0] == numbers[-1].split("/")[1] == str(len(lines)), (call, numbers)


def test_a_notebooks_bar_shows_each_phase_by_name(monkeypatch):
    """With progress on, the bar over a call's phases is described by the call and the phase
    running, one step per phase; with progress off nothing is drawn and the phases are still logged."""
    from headwatch import jobs

    shown = []

    class Bar:
        def __init__(self, iterable=None, total=None, desc="", **kw):
            self.total, self.n, self.start_t = total, 0, 0.0
            shown.append(("new", desc, total))

        def set_description_str(self, desc, refresh=True):
            shown.append(("phase", desc))

        def update(self, n=1):
            self.n += n

        def refresh(self):
            shown.append(("refresh",))

        def close(self):
            shown.append(("closed", self.n))

    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setitem(jobs._PROGRESS, "on", True)
    with jobs.phases("patch_heads", 2) as step:
        step("patch every head")
        step("guard batched_vs_loop")
    assert shown[0] == ("new", "patch_heads", 2)
    assert [s[1] for s in shown if s[0] == "phase"] == ["patch_heads: patch every head",
                                                         "patch_heads: guard batched_vs_loop"]
    assert shown[-1] == ("closed", 2)
    monkeypatch.setitem(jobs._PROGRESS, "on", False)
    shown.clear()
    with jobs.phases("patch_heads", 1) as step:
        step("patch every head")
    assert shown == []


# ------------------------------------------------------------------ what a failed guard leaves and says
def test_the_old_tolerance_keys_are_refused_naming_the_new_ones(llama, pairs):
    import copy

    from headwatch.config import ConfigError, load_schema, unknown_keys
    from workflow import ROOT

    schema, config = load_schema(ROOT / "config" / "schema.yaml"), hw.load_config()
    for section, old, new in (("patching", "tolerance", "rounding_factor"), ("ablation", "tolerance", "rounding_factor"),
                              ("edges", "tolerance", "rounding_factor"),
                              ("anatomy", "weight_check_tolerance", "weight_check_rounding_factor")):
        changed = copy.deepcopy(config)
        changed[section][old] = 1e-5
        [said] = unknown_keys(changed, schema)
        assert said.startswith(f"{section}.{old}: '{old}' is now `{section}.{new}`: ") and "rounding" in said
    with pytest.raises(ConfigError, match=r"hw.patch_heads: tolerance=0.0001 \(patching.tolerance\): 'tolerance' is "
                                          r"now `patching.rounding_factor`"):
        hw.patch_heads(llama, pairs.drop(columns="family"), tolerance=1e-4)


def test_in_float64_the_bounds_shrink_and_the_guards_still_tell(llama, pairs, monkeypatch):
    """What a failed guard's message advises: the same call with the model in float64. Every guard
    holds there within float64's bound (about 1e9 times smaller), and a wrong computation still fails."""
    from headwatch.model.interventions import in_float64

    prompts = hw.prompt_pairs(llama, pairs.drop(columns="family"))
    with in_float64(llama.adapter):
        heads = hw.patch_heads(llama, prompts)
    record = heads.attrs["guards"]
    assert record["passed"] and record["dtype"] == "float64"
    r = record["batched_vs_loop"]["rounding"]
    assert r["dtype"] == "float64" and r["unit_roundoff"] == 2 ** -53
    run = Patcher.run
    monkeypatch.setattr(Patcher, "run", lambda self, patches, prompts=None: run(
        self, [Patch(p.site, p.layer, (p.unit + 1) % self.adapter.n_heads) if p.site == "z" else p
               for p in patches], prompts))
    with in_float64(llama.adapter), pytest.raises(GuardError) as failed:
        hw.patch_heads(llama, prompts)
    assert _far_past(failed.value, "batched_vs_loop")["rounding"]["dtype"] == "float64"
    assert next(llama.model.parameters()).dtype == torch.float32           # the model back as it was


def test_a_job_keeps_what_a_failed_guard_computed_beside_its_attempts_log(llama, pairs, tmp_path, monkeypatch,
                                                                          root_logging):
    from headwatch.jobs import log_to
    from headwatch.tableio import read_note, read_parquet

    run = Patcher.run
    monkeypatch.setattr(Patcher, "run", lambda self, patches, prompts=None: run(
        self, [Patch(p.site, p.layer, (p.unit + 1) % self.adapter.n_heads, p.position) if p.site == "z" else p
               for p in patches], prompts))
    log = tmp_path / "logs" / "patching_sweep" / "tiny.log"
    log.parent.mkdir(parents=True)
    with pytest.raises(GuardError):
        with log_to(log):
            hw.patch_heads(llama, hw.prompt_pairs(llama, pairs.drop(columns="family")), resid=True)
    kept = sorted(p.name for p in log.parent.iterdir())
    assert kept == ["tiny.attempt-1.guard-failed.guards.json", "tiny.attempt-1.guard-failed.heads.parquet",
                    "tiny.attempt-1.guard-failed.resid.parquet", "tiny.attempt-1.log", "tiny.log"]
    heads = read_parquet(log.parent / "tiny.attempt-1.guard-failed.heads.parquet")
    assert len(heads) == llama.adapter.n_layers * llama.adapter.n_heads
    assert read_note(log.parent / "tiny.attempt-1.guard-failed.heads.parquet")["prompts"] == len(pairs)
    record = __import__("json").loads((log.parent / "tiny.attempt-1.guard-failed.guards.json").read_text())
    assert not record["passed"] and not record["batched_vs_loop"]["passed"] and record["batched_vs_loop"]["ratio"] > WIDE
    text = log.read_text()
    assert "past its bound" in text and "tiny.attempt-1.guard-failed.heads.parquet" in text
    assert "patch_heads: guard batched_vs_loop" in text                    # the job logs its phases
