"""Bad models and absurd sizes never eat the machine (protocol §9), in five kinds:

1. every count and size a config or a model file sets has a bound, refused before any job
   naming the key (or the model and the field), and raisable only by ``raise_bounds``; the
   memory a job needs is estimated and refused when it cannot fit;
2. model files are data from outside: their shape numbers are checked, they are read as
   regular files of bounded size, a GGUF's header within its file's size, a GGUF's file
   name inside its package;
3. every parse error of a model's file names the model key, the file and the cause;
4. the guard records are read through one reader that names the file and its rule;
5. invisible and reordering characters are shown as escapes in every format; names that
   become file names are short enough to be ones.

The library is called directly (the checks the Snakefile runs, in-process or, where a case
is about memory or a hang, in a subprocess under an address-space limit and a timeout);
``tests/test_hostile.py`` runs the real workflow for the cases where Snakemake decides.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workflow import ROOT, deep_merge, tiny_config

SCHEMA = ROOT / "config" / "schema.yaml"
GiB = 1 << 30


def config_yaml() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def set_key(config: dict, dotted: str, value) -> dict:
    node = config
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return config


def run_limited(code: str, limit: int = 2 * GiB, timeout: int = 120, env: dict | None = None) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter whose address space is
    at most ``limit`` bytes: a case about memory is refused within it, or fails."""
    prelude = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
               f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); ")
    out = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT, env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ 1. sizes with no upper bound
ABSURD = [
    ("patching.n", 1_000_000_000, "patching.n: 1,000,000,000 is above its bound 4,096"),
    ("sequences.sets.induction.n", 100_000_000, "sequences.sets.induction.n: 100,000,000 is above its bound 100,000"),
    ("sweep.train.batch", 10_000_000, "sweep.train.batch: 10,000,000 is above its bound 4,096"),
    ("sweep.sweeps.heads_split.train.batch", 10_000_000,
     "sweep.sweeps.heads_split.train.batch: 10,000,000 is above its bound 4,096"),
    ("sweep.sweeps.width.train.eval_batches", 100_000_000,
     "sweep.sweeps.width.train.eval_batches: 100,000,000 is above its bound 1,000"),
    ("sweep.summary.bootstrap.resamples", 30_000_000,
     "sweep.summary.bootstrap.resamples: 30,000,000 is above its bound 1,000,000"),
    ("anatomy.kv_control.layers", 100_000, "anatomy.kv_control.layers: 100,000 is above its bound 512"),
    ("sweep.model.layers", 100_000, "sweep.model.layers: 100,000 is above its bound 64"),
    ("attention.batch", 10**9, "attention.batch: 1,000,000,000 is above its bound 1,024"),
    ("patching.kv_prompts", 10**9, "patching.kv_prompts: 1,000,000,000 is above its bound 4,096"),
    ("patching.positions_all_heads", 10**9,
     "patching.positions_all_heads: 1,000,000,000 is above its bound 65,536"),
    ("edges.ig_steps", 10**9, "edges.ig_steps: 1,000,000,000 is above its bound 1,000"),
    ("edges.batch", 10**9, "edges.batch: 1,000,000,000 is above its bound 8,192"),
    ("edges.random_draws", 10**9, "edges.random_draws: 1,000,000,000 is above its bound 1,000"),
]


@pytest.mark.parametrize("key, value, words", ABSURD, ids=[a[0] for a in ABSURD])
def test_an_absurd_count_is_refused_naming_the_key_the_bound_and_how_to_raise_it(key, value, words):
    """What the Snakefile runs first (check_keys): the refusal needs no memory (it compares
    numbers), names the key, the bound and its reason, and the one setting that raises it."""
    from headwatch.config import ConfigError, check_keys

    config = set_key(config_yaml(), key, value)
    with pytest.raises(ConfigError) as err:
        check_keys(config, SCHEMA)
    text = str(err.value)
    assert words in text and "raise the bound on purpose: raise_bounds: {" in text, text


def test_a_bound_is_raised_on_purpose_only_by_its_name_in_raise_bounds():
    from headwatch.config import ConfigError, check_keys

    config = set_key(config_yaml(), "patching.n", 8192)
    with pytest.raises(ConfigError, match=r"patching\.n: 8,192 is above its bound 4,096"):
        check_keys(config, SCHEMA)
    check_keys(dict(config, raise_bounds={"patching.n": 8192}), SCHEMA)                  # raised: accepted
    with pytest.raises(ConfigError, match=r"patching\.n: 8,192 is above its bound 8,000"):
        check_keys(dict(config, raise_bounds={"patching.n": 8000}), SCHEMA)             # only as far as said
    batch = set_key(config_yaml(), "sweep.sweeps.width.train.batch", 5000)
    check_keys(dict(batch, raise_bounds={"sweep.sweeps.*.train.batch": 5000}), SCHEMA)
    with pytest.raises(ConfigError, match=r"raise_bounds: 'patching\.m' is not the name of a bound; "
                                          r"did you mean 'patching\.n'\?"):
        check_keys(dict(config_yaml(), raise_bounds={"patching.m": 8192}), SCHEMA)
    with pytest.raises(ConfigError, match=r"raise_bounds\.patching\.n: 'many' is not a bound"):
        check_keys(dict(config_yaml(), raise_bounds={"patching.n": "many"}), SCHEMA)


def test_every_shipped_config_is_within_its_bounds():
    from headwatch.config import check_keys

    base = config_yaml()
    for files in (["quick.yaml"], ["quick.yaml", "quick_more.yaml"], ["laptop.yaml"], ["laptop.yaml", "laptop_more.yaml"],
                  ["induction.yaml"]):
        config = base
        for name in files:
            config = deep_merge(config, yaml.safe_load((ROOT / "config" / name).read_text()) or {})
        check_keys(config, SCHEMA)


def test_the_security_page_lists_every_bound_from_the_one_table():
    """docs/security.md holds the table `python -m headwatch.config --bounds` prints,
    built from the schema's x-bound entries and the model files' FIELD_BOUNDS."""
    from headwatch.config import bounds_markdown, load_schema

    table = bounds_markdown(load_schema(SCHEMA))
    assert table in (ROOT / "docs" / "security.md").read_text()
    assert "`model_file.layers` | 512 |" in table and "`patching.n` | 4,096 |" in table
    printed = subprocess.run([sys.executable, "-m", "headwatch.config", "--bounds"], capture_output=True, text=True,
                             cwd=ROOT, check=True).stdout
    assert printed.strip() == table


def test_the_sweep_checks_of_a_100000_layer_model_need_no_memory():
    """`sweep.model.layers: 100000` (raised on purpose): the study checks count parameters from
    the spec's arithmetic; building the models to count them took 3 min and 4.4 GB."""
    code = ("import json, yaml; from headwatch.config import sweep_errors; "
            "c = yaml.safe_load(open('config/config.yaml')); c['sweep']['model']['layers'] = 100000; "
            "print(json.dumps(sweep_errors(c)))")
    said = run_limited(code, limit=1 * GiB, timeout=60)
    # the depth study's invariant, computed for 78.9 billion parameters in 1 GiB of address space
    assert len(said) == 1 and said[0].startswith("sweep.sweeps.depth.study: non-embedding parameters must lie "
                                                 "within 2 % of grid[0]'s 78,873,600,512"), said


@pytest.fixture
def workdir(tmp_path):
    shutil.copytree(ROOT / "config", tmp_path / "config")
    return tmp_path


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    """A copy of the tiny model's folder, to damage."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    return folder


def check(config, workdir, **kw):
    from headwatch.config import check_config

    return check_config(config, workdir, cache=False, **kw)


MEMORY = {   # (changes, raise_bounds, words — a tuple: one refused estimate each): each within its bound (or raised)
    "patching.n": ({"patching.n": 20000}, {"patching.n": 20000},
                   ("patching.n: model tiny-llama's activation patching (20000 prompts",
                    "patching.n: model tiny-llama's direct effects and logit lens (20000 prompts")),
    "lens": ({"patching.n": 2000}, {},
             "patching.n: model tiny-llama's direct effects and logit lens (2000 prompts of 14 tokens, 64 a pass) "
             "needs at least"),
    "ablation.batch": ({"ablation.batch": 4096}, {}, "ablation.batch: model tiny-llama's cuts (4096 rows of 51 tokens"),
    "train": ({"sweep.sweeps.heads_split.train.batch": 4096, "sweep.sweeps.heads_split.train.steps": 1_000_000}, {},
              "sweep.sweeps.heads_split.grid[0]: training w16-h1 of sweep heads_split (train.batch = 4096, "
              "train.steps = 1000000)"),
    "bootstrap": ({"sweep.summary.bootstrap.resamples": 10_000_000},
                  {"sweep.summary.bootstrap.resamples": 10_000_000},
                  "sweep.summary.bootstrap.resamples: the summary's bootstrap (10000000 resamples of 8 final losses)"),
}


@pytest.mark.parametrize("case", list(MEMORY))
def test_a_job_that_cannot_fit_in_this_machines_memory_is_refused_naming_the_estimate(model_copy, workdir, case):
    """Within every bound (a raised bound too), but on a machine of 512 MiB (meminfo stands in
    for /proc/meminfo): the estimate is compared before any job, named with its key and parts."""
    from headwatch.config import ConfigError

    changes, raised, words = MEMORY[case]
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    for key, value in changes.items():
        set_key(config, key, value)
    config["raise_bounds"] = raised
    small = lambda: dict(MemTotal=512 << 20, MemAvailable=256 << 20)
    with pytest.raises(ConfigError, match="it cannot fit in this machine's memory") as err:
        check(config, workdir, meminfo=small)
    text, words = str(err.value), words if isinstance(words, tuple) else (words,)
    assert all(w in text for w in words), text
    assert "more than this machine's memory (512.0 MiB, MemTotal in /proc/meminfo); lower it" in text
    assert re.search(r"needs at least [\d.,]+ [GM]iB \(", text) and text.count("\n  ") == len(words), text  # those only
    assert check(config, workdir, meminfo=lambda: dict(MemTotal=1 << 50)) == []          # a machine that has it


def test_memory_above_what_is_free_now_is_a_warning_and_no_meminfo_is_a_note(model_copy, workdir, capsys):
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    warnings = check(config, workdir, meminfo=lambda: dict(MemTotal=1 << 40, MemAvailable=1 << 20))
    assert any("more than the 1.0 MiB free now (MemAvailable" in w for w in warnings), warnings
    assert check(config, workdir, meminfo=lambda: None) == []
    assert "headwatch: note: the memory the jobs need is not compared" in capsys.readouterr().err
    assert check(config, workdir, meminfo=None) == []                                   # a cluster's nodes


# ------------------------------------------------------------------ 2. model files are data
SHAPES = [
    ("num_attention_heads", "4", "num_attention_heads = '4' is not an integer (str)"),
    ("num_attention_heads", 4.5, "num_attention_heads = 4.5 is not an integer (float)"),
    ("num_attention_heads", 0, "num_attention_heads = 0 must be a positive integer"),
    ("num_attention_heads", 3, "num_attention_heads = 3 does not divide hidden_size = 64"),
    ("num_key_value_heads", 3, "num_key_value_heads = 3 does not divide num_attention_heads = 4"),
    ("vocab_size", 0, "vocab_size = 0 must be a positive integer"),
    ("max_position_embeddings", -1, "max_position_embeddings = -1 must be a positive integer"),
    ("rope_parameters", {"rope_theta": 0, "rope_type": "default"}, "rope_theta = 0 is not a positive number"),
    ("num_hidden_layers", 100_000, "num_hidden_layers: 100,000 is above its bound 512"),
]


@pytest.mark.parametrize("key, value, words", SHAPES, ids=[f"{k}={v!r}" for k, v, _ in SHAPES])
def test_a_shape_the_family_cannot_have_is_named_with_the_model_and_the_field(model_copy, workdir, key, value,
                                                                             words):
    from headwatch.config import ConfigError

    raw = json.loads((model_copy / "config.json").read_text())
    raw[key] = value
    (model_copy / "config.json").write_text(json.dumps(raw))
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    with pytest.raises(ConfigError) as err:          # every model's problems, listed (ModelFileError's)
        check(config, workdir)
    assert f"models.tiny-llama: {model_copy / 'config.json'}: " in str(err.value) and words in str(err.value), \
        str(err.value)


def checked_in_a_subprocess(config: dict, workdir: Path) -> str:
    """Code for :func:`run_limited`: check_config's refusal (or "passed") as its JSON line."""
    return (f"import json\nfrom headwatch.config import ConfigError, check_config\n"
            f"c = json.loads({json.dumps(json.dumps(config))})\n"
            f"try:\n    check_config(c, {str(workdir)!r}, cache=False)\n    print(json.dumps('passed'))\n"
            f"except ConfigError as e:\n    print(json.dumps(str(e)))\n")


def test_a_fifo_is_refused_not_waited_on(model_copy, workdir):
    """A FIFO tokenizer.json once hung `snakemake -n` (a read that never returns): the checks run
    in a subprocess with a timeout, and must refuse it by name."""
    (model_copy / "tokenizer.json").unlink()
    os.mkfifo(model_copy / "tokenizer.json")
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    code = checked_in_a_subprocess(config, workdir)
    said = run_limited(code, timeout=90)
    assert f"models.tiny-llama: {model_copy / 'tokenizer.json'} is a FIFO (named pipe), not a regular file" in said


def test_a_config_json_linked_to_dev_zero_is_refused_without_reading_it(model_copy, workdir):
    """A link to /dev/zero once filled the memory: within 2 GiB of address space the check
    refuses it by name (and a regular file larger than its cap is refused after the cap)."""
    (model_copy / "config.json").unlink()
    os.symlink("/dev/zero", model_copy / "config.json")
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    code = checked_in_a_subprocess(config, workdir)
    said = run_limited(code, timeout=90)
    assert f"{model_copy / 'config.json'} is a character device, not a regular file" in said, said
    from headwatch.model.sources import ModelFileError, read_json

    big = model_copy / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(17 << 20)
    with pytest.raises(ModelFileError, match=r"big.json holds more than 16 MiB, the most a model's JSON file may hold"):
        read_json(big)


# A GGUF header by hand (version 3, little-endian): magic, version, tensor count, key/value count,
# then each key (u64 length, bytes), its value type (u32) and its value.
def gguf_string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def gguf_kv(key: str, kind: int, value: bytes) -> bytes:
    return gguf_string(key.encode()) + struct.pack("<I", kind) + value


def gguf_bytes(kvs: list[bytes], count: int | None = None, version: int = 3, tensors: int = 0) -> bytes:
    return (b"GGUF" + struct.pack("<IQQ", version, tensors, len(kvs) if count is None else count) + b"".join(kvs)
            + b"\0" * 64)


def tiny_gguf(heads: int = 4) -> list[bytes]:
    u32 = lambda v: struct.pack("<I", v)
    return [gguf_kv("general.architecture", 8, gguf_string(b"llama")), gguf_kv("llama.block_count", 4, u32(2)),
            gguf_kv("llama.attention.head_count", 4, u32(heads)), gguf_kv("llama.embedding_length", 4, u32(64)),
            gguf_kv("llama.context_length", 4, u32(256)),
            gguf_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gguf_string(b"a") + gguf_string(b"b"))]


MALFORMED = {
    "a key 2^62 bytes long": gguf_bytes([struct.pack("<Q", 1 << 62) + b"x"]),
    "a string value past the end": gguf_bytes([gguf_kv("general.name", 8, struct.pack("<Q", 1 << 40) + b"abc")]),
    "an array of 2^60 u32": gguf_bytes([gguf_kv("a", 9, struct.pack("<IQ", 4, 1 << 60))]),
    "an array of 2^60 strings": gguf_bytes([gguf_kv("a", 9, struct.pack("<IQ", 8, 1 << 60))]),
    "2^50 key/values": gguf_bytes([], count=1 << 50),
    "2^50 tensors": gguf_bytes([], tensors=1 << 50),
    "an unknown value type": gguf_bytes([gguf_kv("a", 99, b"\0" * 8)]),
    "an array of an unknown type": gguf_bytes([gguf_kv("a", 9, struct.pack("<IQ", 77, 1))]),
    "arrays nested 6 deep": gguf_bytes([gguf_kv("a", 9, struct.pack("<IQ", 9, 1) * 6)]),
    "version 1": gguf_bytes([], version=1),
    "truncated inside a value": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gguf_kv("a", 4, b"\x01\x02"),
    "no magic": b"GGML" + b"\0" * 64,
}


def test_every_malformed_gguf_header_fails_at_once_with_one_error_naming_the_file(tmp_path):
    """Bare MemoryError, struct.error and KeyError once: now ModelFileError naming the file, each
    case within 1 GiB of address space."""
    files = {}
    for i, (case, data) in enumerate(MALFORMED.items()):
        files[case] = str(tmp_path / f"m{i}.gguf")
        Path(files[case]).write_bytes(data)
    code = ("import json; from headwatch.model.sources import gguf_header; out = {}\n"
            f"for case, path in {files!r}.items():\n"
            "    try:\n        gguf_header(path); out[case] = 'read'\n"
            "    except Exception as e:\n        out[case] = [type(e).__name__, str(e)]\n"
            "print(json.dumps(out))")
    said = run_limited(code, limit=1 * GiB)
    for case, path in files.items():
        assert said[case][0] == "ModelFileError" and said[case][1].startswith(
            f"{path} is not a GGUF header headwatch can read: "), (case, said[case])


def test_a_gguf_with_zero_heads_is_named_not_divided_by(tmp_path):
    """Heads 0 in a GGUF header was a bare ZeroDivisionError; its field is named now (and a
    sound header is read)."""
    from headwatch.model.sources import ModelFileError, gguf_header
    from headwatch.model.sources.facts import read_shape
    from headwatch.model.sources.resolve import Located

    good, bad = tmp_path / "good.gguf", tmp_path / "bad.gguf"
    good.write_bytes(gguf_bytes(tiny_gguf()))
    bad.write_bytes(gguf_bytes(tiny_gguf(heads=0)))
    assert gguf_header(good)["tokenizer.ggml.tokens#len"] == 2
    shape, _ = read_shape(Located("m", "gguf", None, None, gguf=good), {})
    assert (shape["layers"], shape["heads"], shape["head_dim"], shape["vocab"]) == (2, 4, 16, 2)
    with pytest.raises(ModelFileError, match=r"bad.gguf \(GGUF header\): llama.attention.head_count = 0 must be a "
                                             r"positive integer"):
        read_shape(Located("m", "gguf", None, None, gguf=bad), {})


@pytest.mark.parametrize("file, words", [("/etc/passwd", "is not a file name inside the package"),
                                         ("../../../../etc/passwd", "is not a file name inside the package"),
                                         ("..", "is not a file name inside the package"),
                                         ("sub/x.gguf", "is not a file name inside the package")])
def test_a_gguf_file_is_a_name_inside_its_package(file, words):
    from headwatch.config import ConfigError, check_keys

    config = config_yaml()
    config["models"]["smollm2-135m"]["gguf"]["file"] = file
    with pytest.raises(ConfigError, match=re.escape(f"models.smollm2-135m.gguf.file: the value {file!r} {words}")):
        check_keys(config, SCHEMA)


def test_a_gguf_file_that_links_out_of_its_package_is_refused(tmp_path, monkeypatch):
    """The schema holds the name to a name; a link of that name in the package to a file
    elsewhere is refused as well (defence in depth: gguf_path)."""
    from headwatch.model.sources import ConfigError, gguf_path

    package = tmp_path / "site" / "fakemodels"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.gguf").symlink_to("/etc/passwd")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"gguf.file 'model.gguf' links outside the package 'fakemodels'"):
        gguf_path("fakemodels", "model.gguf")
    with pytest.raises(ConfigError, match=r"gguf.file '../x' is not a file name inside the package"):
        gguf_path("fakemodels", "../x")


# ------------------------------------------------------------------ 3. every parse error names its file and model
PARSE = [
    ("config.json", "", "config.json is empty; it should hold a JSON object"),
    ("config.json", "{not json", "config.json is not JSON (Expecting property name"),
    ("config.json", "[1, 2]", "config.json holds a JSON list, not an object"),
    ("tokenizer.json", "", "tokenizer.json is empty; it should hold a tokenizer (JSON)"),
    ("tokenizer.json", "{not json", "tokenizer.json is not a tokenizer the tokenizers library can read (Exception: "),
    ("tokenizer_config.json", "{x", "tokenizer_config.json is not JSON ("),
    ("config.json", "\xff\xfe", "config.json is not UTF-8 text"),
]


@pytest.mark.parametrize("name, text, words", PARSE, ids=[f"{n}:{t!r}" for n, t, _ in PARSE])
def test_a_model_file_that_cannot_be_parsed_is_named_with_the_model(model_copy, workdir, name, text, words):
    from headwatch.config import ConfigError

    (model_copy / name).write_bytes(text.encode("latin-1"))
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    with pytest.raises(ConfigError) as err:          # every model's problems, listed (ModelFileError's)
        check(config, workdir)
    assert f"models.tiny-llama: {model_copy}/" in str(err.value) and words in str(err.value), str(err.value)


def test_a_hub_model_not_in_the_cache_fails_at_once_even_online(workdir, tmp_path, monkeypatch):
    """HF_HUB_OFFLINE=0 without a network once retried for 29 s and ended in a raw traceback naming
    no model: the cache is looked in, and the model named, before any request."""
    import time

    from headwatch.config import ConfigError

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    config = config_yaml()
    config["models"]["pythia"] = {"source": "nobody-here/no-such-model", "dtype": "float32"}
    config["models_studied"] = ["pythia"]
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"models\.pythia\.source: 'nobody-here/no-such-model' is not a local "
                                          r"folder and not in the Hugging Face cache \(HF_HUB_OFFLINE=0\)"):
        check(config, workdir)
    assert time.perf_counter() - t0 < 20          # no network retried (it took 29 s)


def layer_types_refused(model_copy):
    """A config.json every field check accepts, but transformers refuses (3 layers, 1 layer type),
    with a tokenizer only transformers can read (a slow tokenizer class)."""
    raw = json.loads((model_copy / "config.json").read_text())
    raw["layer_types"] = ["full_attention"]
    (model_copy / "config.json").write_text(json.dumps(raw))
    tok = json.loads((model_copy / "tokenizer_config.json").read_text())
    tok["tokenizer_class"] = "GPT2Tokenizer"
    (model_copy / "tokenizer_config.json").write_text(json.dumps(tok))


def test_a_shape_transformers_refuses_is_named_with_the_model_and_the_cause(model_copy, workdir, tmp_path):
    from headwatch.model.sources import ConfigError, ModelFileError
    from headwatch.model.load import prepare_model

    layer_types_refused(model_copy)
    config = deep_merge(config_yaml(), tiny_config(model_copy))
    with pytest.raises(ConfigError, match=r"models\.tiny-llama: transformers cannot read the tokenizer of "
                                             r".*\(its config\.json and tokenizer files\): "
                                             r"StrictDataclassClassValidationError: .*`num_hidden_layers` \(3\) must "
                                             r"be equal to the number of `layer_types` \(1\)"):
        check(config, workdir)
    with pytest.raises(ModelFileError, match=r"transformers cannot load model .* \(its config\.json\): "
                                             r"StrictDataclassClassValidationError"):
        prepare_model({"source": str(model_copy)}, tmp_path / "prepared" / "m")         # the job's own message


# ------------------------------------------------------------------ 4. guard records verified like tables
@pytest.fixture
def record(tmp_path):
    from headwatch.tableio import write_record

    path = tmp_path / "patching" / "guards.json"
    write_record({"passed": True, "dtype": "float32", "nothing_patched": {"max_abs_diff": 0.0, "passed": True}},
                 path)
    return path


def test_a_guard_record_reads_back_as_written(record):
    from headwatch.tableio import read_record

    assert read_record(record) == {"passed": True, "dtype": "float32",
                                   "nothing_patched": {"max_abs_diff": 0.0, "passed": True}}


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:40]), "it is not valid JSON (.*): it was cut short"),
    "garbage": (lambda p: p.write_bytes(bytes(range(256)) * 4), "it is not UTF-8 text"),
    "altered": (lambda p: p.write_text(p.read_text().replace('"max_abs_diff": 0.0', '"max_abs_diff": 0.5')),
                "its content's SHA-256 .* differs from the one it records"),
    "not a passing record": (lambda p: p.write_text(json.dumps({"passed": False})),
                             "it does not say that its guards passed"),
    "a FIFO": (lambda p: (p.unlink(), os.mkfifo(p)), "it is not a regular file"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_guard_record_is_named_with_the_command_that_remakes_it(record, damage):
    from headwatch.tableio import CorruptTableError, broken_records, read_record

    change, why = DAMAGE[damage]
    change(record)
    with pytest.raises(CorruptTableError, match=f"{re.escape(str(record))} is corrupt: {why}.*"
                                                f"Remake it with `snakemake --forcerun {re.escape(str(record))}`"):
        read_record(record)
    said = broken_records([record, record.parent / "absent.json"])        # what every run reads first
    assert len(said) == 1 and said[0].startswith(f"{record} is corrupt: ") and said[0].endswith(
        "Delete it and run snakemake again, with your usual options: the job that writes it reruns"), said


# ------------------------------------------------------------------ 5. text is shown as text
HIDDEN = "\u202e\u202a\u2066\u2069\u200e\u200f\u061c\u200b\u200c\u200d\u2060\ufeff"


@pytest.mark.parametrize("char", list(HIDDEN), ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_a_reordering_or_zero_width_character_is_shown_as_its_escape_in_every_format(char):
    """RST (rendered by docutils, as Snakemake's report does), HTML, Markdown, the JSON in the
    explorer's script and the tokens it and the figures show: never the character itself."""
    from docutils.core import publish_parts
    from markdown_it import MarkdownIt

    from headwatch import markup
    from headwatch.explorer.build import display_token

    text = f"When Mary{char} and John went to the shop"
    escape = f"\\u{ord(char):04x}"
    rendered = {
        "rst": publish_parts(f"Phrase: {markup.rst(text)}.", writer="html",
                             settings_overrides={"halt_level": 2, "report_level": 2})["body"],
        "html": markup.html(text),
        "markdown": MarkdownIt("commonmark").render(markup.markdown(text)),
        "script": markup.script_json({"t": text}),
        "token": display_token(text),
    }
    for fmt, shown in rendered.items():
        assert char not in shown and escape in shown, (fmt, shown)
    assert json.loads(rendered["script"]) == {"t": text}                    # the data itself is unchanged


def test_a_figures_axis_shows_a_reordering_token_as_its_escape():
    """The patching figure's position labels (and the explorer's tokens) pass through
    display_token; the head maps' tick labels through repr."""
    import pandas as pd

    from headwatch.patching.prompts import position_labels

    prompts = pd.DataFrame({"tokens": [["A", " x\u202e"], ["A", " y\u200b"]], "clean_ids": [[1, 2], [1, 3]],
                            "corrupted_ids": [[1, 2], [1, 3]], "answer_id": [9, 9], "distractor_id": [8, 8]})
    labels = position_labels(prompts)
    assert labels == ["A", "␣x\\u202e/␣y\\u200b"], labels


def test_a_name_too_long_to_be_a_file_name_is_refused_naming_the_key():
    """A model key or sweep name long enough to exceed the file system's name length once failed
    deep in Snakemake (`File name too long`); names are at most 100 characters."""
    from headwatch.config import ConfigError, check_keys

    config = config_yaml()
    long = "m" * 101
    config["models"][long] = {"source": "x"}
    config["sweep"]["sweeps"]["s" * 101] = config["sweep"]["sweeps"]["width"]
    config["phrases"]["p" * 101] = {"random": 4, "seed": 1}
    with pytest.raises(ConfigError) as err:
        check_keys(config, SCHEMA)
    for key, name in (("models", long), ("sweep.sweeps", "s" * 101), ("phrases", "p" * 101)):
        assert f"{key}: the key {name!r} is longer than 100 characters" in str(err.value), str(err.value)
    config = config_yaml()
    config["models"]["m" * 100] = {"source": "x"}
    check_keys(config, SCHEMA)
