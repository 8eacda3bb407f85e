"""The GPU check's model and overlay (sections 2 and 3 of ``check.py``): a SmolLM2-shaped model with
random weights, built from ``config/models/smollm2-135m.json`` and the tokenizer in
``benchmarks/gpu/tokenizer``, saved as a local model folder; and the config file over
``config/config.yaml`` that studies it."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import time
from pathlib import Path

from check_records import HERE, ROOT

# ---- the names of the workflow this check depends on (a rename there is a one-line fix here).
# Rule names are read from Snakemake's own listing (--summary), never typed here.
MODELS_KEY = "models"                        # top-level config key: every model by key
STUDY_KEY = "models_studied"                 # the list of studied models (found by its contents if renamed)
MODEL_KEY = "smollm2-135m-random"            # the random model's key under `models:` (and results/ folder)
REFERENCE = "config/models/smollm2-135m.json"   # its shape
JOBS_PER_GPU = ("sweep", "jobs_per_gpu")     # set (--jobs-per-gpu) when config/schema.yaml knows the key
MODEL_JOBS_PER_GPU = ("model_jobs_per_gpu",)   # set (--model-jobs-per-gpu) likewise
PRECISION = ("sweep", "precision")           # set (--precision) on a GPU with bfloat16 matmuls
TINY_SHAPE = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16)
SEED = 0


def tokenizer_record() -> dict:
    return json.loads((HERE / "tokenizer" / "source.json").read_text())


def unpack_tokenizer(folder: Path) -> None:
    """tokenizer.json (checked against its recorded SHA-256) and tokenizer_config.json."""
    raw = gzip.decompress((HERE / "tokenizer" / "tokenizer.json.gz").read_bytes())
    want = tokenizer_record()["tokenizer_json_sha256"]
    if hashlib.sha256(raw).hexdigest() != want:
        raise SystemExit(f"{HERE / 'tokenizer'}: tokenizer.json does not match its SHA-256 in source.json")
    (folder / "tokenizer.json").write_bytes(raw)
    shutil.copy(HERE / "tokenizer" / "tokenizer_config.json", folder / "tokenizer_config.json")


def model_config(tiny: bool) -> dict:
    cfg = json.loads((ROOT / REFERENCE).read_text())
    return dict(cfg, **TINY_SHAPE) if tiny else cfg


def build_model(args) -> dict:
    """The random model's folder (reused when its recipe has not changed)."""
    folder = args.workdir / "models" / MODEL_KEY
    recipe = dict(reference=REFERENCE, config=model_config(args.cpu_tiny), seed=SEED,
                  tokenizer_sha256=tokenizer_record()["tokenizer_json_sha256"])
    record_file = folder / "gpu_check_model.json"
    if record_file.exists() and json.loads(record_file.read_text()).get("recipe") == recipe:
        rec = json.loads(record_file.read_text())
        return dict(rec, folder=str(folder), reused=True)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(recipe["config"], indent=1))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    model.save_pretrained(folder)
    unpack_tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    if len(tokenizer) != config.vocab_size:
        raise SystemExit(f"the tokenizer has {len(tokenizer)} tokens, the model's vocabulary {config.vocab_size}")
    rec = dict(recipe=recipe, layers=config.num_hidden_layers, heads=config.num_attention_heads,
               kv_heads=config.num_key_value_heads, width=config.hidden_size,
               params=sum(p.numel() for p in model.parameters()), seconds=round(time.perf_counter() - t0, 1))
    record_file.write_text(json.dumps(rec, indent=1))
    return dict(rec, folder=str(folder), reused=False)


# ------------------------------------------------------------------ the overlay
def schema_knows(keys: tuple[str, ...]) -> bool:
    import yaml

    node = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    for key in keys:
        node = (node or {}).get("properties", {}).get(key)
        if node is None:
            return False
    return True


def studied_key() -> str:
    """The top-level key of config/config.yaml that lists the studied models: STUDY_KEY, or else
    the one top-level list whose entries are all keys of `models:`."""
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    models = config.get(MODELS_KEY) or {}
    keys = [k for k, v in config.items() if isinstance(v, list) and v and all(x in models for x in v)]
    if STUDY_KEY in keys or len(keys) == 1:
        return STUDY_KEY if STUDY_KEY in keys else keys[0]
    raise SystemExit(f"config/config.yaml: which top-level key lists the studied models? candidates {keys}; "
                     f"set STUDY_KEY in {__file__}")


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) \
            else value
    return out


def overlay(args, model_folder: str) -> tuple[dict, list[str]]:
    import yaml

    notes = []
    cfg = {MODELS_KEY: {MODEL_KEY: dict(source=model_folder, dtype="float32")},
           studied_key(): [MODEL_KEY]}
    if args.cpu_tiny:
        tiny = yaml.safe_load((HERE / "tiny.yaml").read_text())
        # every sweep tiny.yaml does not scale down is left out (a study added later too)
        paper = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]["sweeps"]
        tiny["sweep"]["skip"] = [name for name in paper if name not in tiny["sweep"]["sweeps"]]
        cfg = deep_merge(cfg, tiny)
    if schema_knows(JOBS_PER_GPU):
        cfg = deep_merge(cfg, {JOBS_PER_GPU[0]: {JOBS_PER_GPU[1]: args.jobs_per_gpu}})
    else:
        notes.append(f"{'.'.join(JOBS_PER_GPU)} is not in config/schema.yaml: training jobs share the GPU "
                     "only as the sweep rules allow")
    if schema_knows(MODEL_JOBS_PER_GPU):
        cfg = deep_merge(cfg, {MODEL_JOBS_PER_GPU[0]: args.model_jobs_per_gpu})
    if not args.cpu_tiny and args.precision:
        import torch

        if torch.cuda.is_available() and (args.precision != "bf16" or torch.cuda.is_bf16_supported()):
            cfg = deep_merge(cfg, {PRECISION[0]: {PRECISION[1]: args.precision}})
            notes.append(f"the sweep, its studies and their training in {args.precision} (mixed precision: each "
                         "run's metrics note names the precision it computed in)")
        else:
            notes.append(f"{args.precision} asked for, but this machine has no GPU with bfloat16 matmuls: the "
                         "config's precision stands")
    for item in args.set:
        key, _, value = item.partition("=")
        node: dict = {}
        leaf = node
        parts = key.split(".")
        for p in parts[:-1]:
            leaf = leaf.setdefault(p, {})
        leaf[parts[-1]] = yaml.safe_load(value)
        cfg = deep_merge(cfg, node)
    return cfg, notes
