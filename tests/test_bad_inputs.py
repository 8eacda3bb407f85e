"""Bad input never runs quietly (protocol §9).

Each config mistake stops Snakemake before any job, with a message that names
the key, and leaves results/ exactly as it was (nothing written, nothing
removed); each corrupt file is either recovered from without a hand (a
training checkpoint) or named with the rule and the command that remake it (a
Parquet table). The cases are listed in docs/troubleshooting.md.
"""
import copy
import logging
import shutil

import numpy as np
import pytest
import torch

from headwatch import paths

from headwatch.charlm.corpus import build_corpus
from headwatch.sweep.train import Interrupted, RunOptions, train
from headwatch.tableio import read_note, read_parquet
from headwatch.jobs import log_to
from workflow import SCORES_TARGET as TARGET  # models_prepare, two sequence sets, scores_heads
from workflow import planned_jobs, snakemake, write_config


def snapshot(workdir) -> dict:
    """Every file under results/ and figures/ with its size and modification time."""
    out = {}
    for top in ("results", "figures"):
        for path in (workdir / top).rglob("*"):
            if path.is_file():
                st = path.stat()
                out[str(path.relative_to(workdir))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def tree(scores_tree):
    """A workflow folder whose scores exist: the state a user's mistake must not disturb
    (tests/conftest.py, shared with tests/test_hostile.py)."""
    return scores_tree


def run_with(tree, change, *args):
    """Snakemake on ``args`` (targets, -n) with the tree's config changed by ``change``."""
    workdir, config = tree
    config = copy.deepcopy(config)
    change(config)
    return snakemake(workdir, *args, "--configfile", str(write_config(workdir, config, "case.yaml")))


def set_in(path: str, value):
    """A change that sets the dotted config key ``path`` to ``value``."""
    def change(config):
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return change


def both(*changes):
    def change(config):
        for c in changes:
            c(config)
    return change


CASES = {
    # 1. misspelled keys, at the top level and inside sections
    "top-level key": (set_in("ablaton", {"top_n": 2}),
                      ["ablaton: unknown key 'ablaton' at the top level", "did you mean `ablation`?"]),
    "key inside attention": (set_in("attention.qantum", 128),
                             ["attention.qantum: unknown key", "did you mean `quantum`?"]),
    "key inside sequences": (set_in("sequences.half_lenght", 30),
                             ["sequences.half_lenght: unknown key", "did you mean `half_length`?"]),
    # 2. float16 on the CPU
    "float16 on the CPU": (both(set_in("models.tiny-llama.dtype", "float16"), set_in("device", "cpu")),
                           ["models.tiny-llama.dtype: float16 on the CPU", "use dtype: float32"]),
    # 3. longer than the model's context (256 positions)
    "phrase past the context": (set_in("phrases.long", {"text": "word " * 300, "expected": " word"}),
                                ["phrases.long.text: 301 tokens, longer than the context of model "
                                 "tiny-llama (256 positions"]),
    "sequences past the context": (set_in("sequences.half_length", 200),
                                   ["sequences.half_length = 200 (× 2): 400 tokens, longer than the context"]),
    # head addresses and counts vs the model's 3 layers × 4 heads
    "anatomy head out of range": (set_in("anatomy.head", {"layer": 7, "head": 0}),
                                  ["anatomy.head.layer = 7: model tiny-llama has 3 layers × 4 heads"]),
    "k above top_n": (set_in("ablation.k", [1, 2, 5]),
                      ["ablation.k = [1, 2, 5]: every k must be <= ablation.top_n = 3"]),
    "top_n above the heads": (set_in("ablation.top_n", 20),
                              ["ablation.top_n = 20: model tiny-llama has 3 layers × 4 heads = 12"]),
    # 6. model sources: a hub id not in the cache while offline
    "hub model missing offline": (set_in("models.tiny-llama.source", "EleutherAI/pythia-160m-deduped"),
                                  ["models.tiny-llama.source: 'EleutherAI/pythia-160m-deduped' is not a local "
                                   "folder and not in the Hugging Face cache (HF_HUB_OFFLINE=1)"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_config_mistake_stops_before_any_job(tree, case):
    change, words = CASES[case]
    before = snapshot(tree[0])
    result = run_with(tree, change, TARGET)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    for w in words:
        assert w in out, (w, out[-3000:])
    assert snapshot(tree[0]) == before, "a job ran, or an output was written or removed"


def test_a_typo_in_the_source_of_a_prepared_model_costs_nothing_once_fixed(tree, tiny_model_dir, tmp_path):
    """The source is checked even though the prepared folder exists: nothing is removed, and
    after the fix there is nothing to redo."""
    workdir, _ = tree
    before = snapshot(workdir)
    typo = str(tiny_model_dir)[:-1]
    result = run_with(tree, set_in("models.tiny-llama.source", typo), TARGET)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"models.tiny-llama.source: no folder {typo!r} on this machine; did you mean " \
           f"{str(tiny_model_dir)!r}?" in out, out[-3000:]
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    result = run_with(tree, set_in("models.tiny-llama.source", str(empty)), TARGET)
    assert result.returncode != 0
    assert f"the folder {str(empty)!r} holds no config.json" in result.stdout + result.stderr
    shutil.copy(tiny_model_dir / "config.json", empty / "config.json")
    result = run_with(tree, set_in("models.tiny-llama.source", str(empty)), TARGET)
    assert result.returncode != 0
    assert f"the folder {str(empty)!r} holds no weights" in result.stdout + result.stderr
    shutil.copy(tiny_model_dir / "model.safetensors", empty / "model.safetensors")
    result = run_with(tree, set_in("models.tiny-llama.source", str(empty)), TARGET)
    assert result.returncode != 0
    assert f"the folder {str(empty)!r} holds no tokenizer" in result.stdout + result.stderr
    assert snapshot(workdir) == before
    fixed = run_with(tree, lambda c: None, "-n", TARGET)
    assert fixed.returncode == 0 and planned_jobs(fixed) == {}, fixed.stdout[-2000:]


def test_an_expected_token_without_its_leading_space_is_warned_about(tree):
    """'mat' after '… on the' is accepted (it is one token), with a warning that shows what the
    tokenizer gives with and without the space."""
    before = snapshot(tree[0])
    result = run_with(tree, set_in("phrases.repetition", {"text": "The cat sat on the mat. The cat sat on the",
                                                          "expected": "mat"}), "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "headwatch: warning: phrases.repetition.expected = 'mat' has no leading space, but the phrase " \
           "ends in a word" in out, out[-3000:]
    assert "' mat' gives [' mat']" in out and "'mat' gives ['mat']" in out
    assert "write expected: ' mat'" in out
    assert snapshot(tree[0]) == before


def test_a_corrupt_table_names_its_rule_and_the_command_that_remakes_it(tree, tmp_path):
    """A truncated intermediate table (newer than its inputs) stops the rule that reads it with a
    message naming the file, the rule that makes it and the command; following it recovers."""
    workdir = tmp_path / "tree"
    shutil.copytree(tree[0], workdir, symlinks=True)
    prose = workdir / "results/tiny-llama/sequences/prose.parquet"
    data = prose.read_bytes()
    prose.write_bytes(data[: len(data) // 2])
    rewritten = ("results/logs/", "results/benchmarks/", "results/run_config.yaml", TARGET)  # by any run
    keep = {k: v for k, v in snapshot(workdir).items() if not k.startswith(rewritten)}
    previous = (workdir / TARGET).read_bytes() if (workdir / TARGET).exists() else None
    configfile = str(workdir / "tiny.yaml")
    failed = snakemake(workdir, TARGET, "--configfile", configfile)
    assert failed.returncode != 0
    log = (workdir / "results/logs/scores_heads/tiny-llama.log").read_text()
    assert ("results/tiny-llama/sequences/prose.parquet is corrupt: its Parquet footer cannot be read" in log
            and "It is made by rule sequences_make: remake it with `snakemake --forcerun sequences_make`" in log
            and "`snakemake --forcerun results/tiny-llama/sequences/prose.parquet`" in log), log[-3000:]
    # the failed job left the result it had before (kept aside while it ran, put back), or nothing
    assert ((workdir / TARGET).read_bytes() if (workdir / TARGET).exists() else None) == previous
    assert {k: v for k, v in snapshot(workdir).items() if k in keep} == keep   # and removed nothing else
    fixed = snakemake(workdir, TARGET, "--configfile", configfile, "--forcerun",
                      "results/tiny-llama/sequences/prose.parquet")
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert len(read_parquet(prose)) == 8 and len(read_parquet(workdir / TARGET)) == 12


def test_a_table_whose_rows_or_schema_disagree_with_its_own_record_is_refused(tmp_path):
    """Written with an integrity record (rows, columns and types): a file rewritten behind the
    workflow's back with other rows or another schema is named as corrupt, like a truncated one."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headwatch.tableio import CorruptTableError, write_parquet

    path = tmp_path / "scores.parquet"
    write_parquet(pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "sink": [0.5, 0.25, 0.125]}), path)
    table = pq.read_table(path)
    assert len(read_parquet(path)) == 3
    pq.write_table(table.slice(0, 2), path)                       # a row lost, the record kept
    with pytest.raises(CorruptTableError, match=r"scores.parquet is corrupt: it holds 2 rows, its integrity "
                                                r"record says 3\. Remake it with `snakemake --forcerun "):
        read_parquet(path)
    sink = table.schema.get_field_index("sink")
    pq.write_table(table.set_column(sink, pa.field("sink", pa.float32()),
                                    table.column("sink").cast(pa.float32())), path)
    with pytest.raises(CorruptTableError, match=r"its schema .*\['sink', 'float'\].* differs from its "
                                                r"integrity record .*\['sink', 'double'\]"):
        read_parquet(path)


# ---------------------------------------------------------------- training checkpoints
TINY = dict(steps=12, batch=4, lr=3e-3, min_lr=3e-4, warmup=2, weight_decay=0.1, eval_every=4,
            eval_batches=2, checkpoint_every=3)
TINY_MODEL = dict(width=16, heads=2, layers=2, context=16)


@pytest.fixture(scope="module")
def corpus():
    c = build_corpus(plays=["tragedies/macbeth"], target_chars=20_000)
    return c.ids(), c.meta()


@pytest.fixture(scope="module")
def straight(corpus):
    torch.set_num_threads(1)
    return train(*corpus, TINY_MODEL, 3, TINY)


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


@pytest.mark.parametrize("broken", [["checkpoint.pt"], ["checkpoint.pt", "checkpoint.prev.pt"]])
def test_an_unreadable_checkpoint_is_moved_aside_and_training_goes_on(corpus, straight, tmp_path, caplog, broken):
    """Kept two deep: a truncated newest checkpoint is moved aside and the run resumes from the one
    before (both truncated: from the start); either way it ends bit for bit like an uninterrupted
    run, and its info says what happened."""
    torch.set_num_threads(1)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(Interrupted):                    # "killed" after the checkpoint of step 6
        train(*corpus, TINY_MODEL, 3, TINY, run=RunOptions(checkpoint=ckpt, stop_after=5))
    assert ckpt.exists() and (tmp_path / "checkpoint.prev.pt").exists()
    for name in broken:
        truncate(tmp_path / name)
    caplog.set_level(logging.INFO, logger="headwatch.sweep")
    model, metrics, info, _ = train(*corpus, TINY_MODEL, 3, TINY, run=RunOptions(checkpoint=ckpt))
    for name in broken:
        aside = tmp_path / f"{name}.corrupt"
        assert aside.exists()
        assert f"checkpoint {tmp_path / name} cannot be read" in caplog.text
        assert f"moved aside to {aside}" in caplog.text
    assert [r["moved_to"] for r in info["checkpoints_moved_aside"]] == \
        [str(tmp_path / f"{n}.corrupt") for n in broken]
    assert info["resumed_from"] == (3 if len(broken) == 1 else 0)
    if len(broken) == 2:
        assert "no readable checkpoint left: training restarts from step 0" in caplog.text
    _, m0, *_ = straight
    cols = ["step", "train_loss", "val_loss"]
    assert np.array_equal(metrics[cols].to_numpy(), m0[cols].to_numpy())        # bit-identical
    assert not ckpt.exists() and not (tmp_path / "checkpoint.prev.pt").exists()


def test_a_failed_attempts_log_is_kept_when_the_rerun_replaces_the_rules_log(corpus, tmp_path, root_logging):
    torch.set_num_threads(1)
    ckpt, log = tmp_path / "run" / "checkpoint.pt", tmp_path / "logs" / "seed3.log"
    ckpt.parent.mkdir()
    log.parent.mkdir()
    with pytest.raises(Interrupted):
        with log_to(log):
            train(*corpus, TINY_MODEL, 3, TINY, run=RunOptions(checkpoint=ckpt, stop_after=5))
    first = log.read_text()
    log.unlink()                       # what Snakemake does before it runs the job again
    with log_to(log):
        _, _, info, _ = train(*corpus, TINY_MODEL, 3, TINY, run=RunOptions(checkpoint=ckpt))
    kept = tmp_path / "logs" / "seed3.attempt-1.log"
    assert kept.read_text() == first and "Interrupted: stopped after the checkpoint of step 6" in first
    assert info["earlier_attempt_logs"] == [str(kept)]
    assert sorted(p.name for p in log.parent.iterdir()) == ["seed3.attempt-1.log", "seed3.log"]
    assert "logs of earlier attempts that did not finish" in log.read_text()


def test_a_truncated_checkpoint_no_longer_blocks_the_training_job(tree, tmp_path):
    """The workflow's own run: a truncated checkpoint left by a killed job is moved aside, the job
    trains from the start and succeeds, its metrics say so."""
    workdir = tmp_path / "tree"
    shutil.copytree(tree[0], workdir, symlinks=True)
    run = workdir / "results/sweep/heads_split/w16-h1/seed0"
    ckpt = workdir / paths.sweep_stack_checkpoint("heads_split", "w16-l2")      # the stack that trains it
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"PK\x03\x04 truncated by a full disk")
    target = str((run / "metrics.parquet").relative_to(workdir))
    result = snakemake(workdir, target, "--configfile", str(workdir / "tiny.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    aside = ckpt.with_name(ckpt.name + ".corrupt")
    assert aside.exists() and not ckpt.exists()
    log = (workdir / "results/logs/sweep_train/heads_split/w16-l2.log").read_text()
    assert f"moved aside to {aside.relative_to(workdir)}" in log, log[-2000:]
    note = read_note(run / "metrics.parquet")
    assert note["resumed_from"] == 0 and note["checkpoints_moved_aside"][0]["moved_to"].endswith(
        "checkpoint.pt.corrupt")
