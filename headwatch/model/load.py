"""Loading models: from a GGUF inside a wheel, a hub id, or a folder.

The workflow prepares every studied model once (``prepare_model``) into a
safetensors folder under ``results/models/{model}/``; every later rule loads
that folder with :func:`load_prepared`, which logs dtype and device, runs one
forward pass and refuses NaN/inf logits (:func:`assert_forward_finite`).

Where a model comes from (a GGUF in a wheel, a folder, a hub id) is resolved
by :mod:`headwatch.model.sources`, which the pre-job checks use without importing
torch; preparation writes into a temporary folder and renames it, so a failed
preparation leaves the earlier prepared folder as it was.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import NamedTuple

import torch

from .arch import Adapter
from .device import pick_device
from ..names import BYTES_PER_NUMBER
from ..paths import PREPARED_RECORD
from .. import paths
from .sources import ConfigError, ModelFileError, ModelNotFoundError, custom_code, one_line, read_json, source_of
from ..tableio import NonFiniteError, assert_finite, write_json

log = logging.getLogger("headwatch.model.load")


def _import_transformers():
    t0 = time.perf_counter()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM, AutoTokenizer, time.perf_counter() - t0


AutoModelForCausalLM, AutoTokenizer, TRANSFORMERS_IMPORT_S = _import_transformers()
"""``TRANSFORMERS_IMPORT_S``: what importing transformers' auto classes cost this process (near 0 when
something imported them before): part of every model job's start-up, logged with the rest by
:func:`load_prepared`."""

DTYPES = {name: getattr(torch, name) for name in BYTES_PER_NUMBER}    # the config's dtype → torch's
NO_CODE = dict(trust_remote_code=False)
"""Passed to every transformers ``from_pretrained``: no code from a model folder or a hub repository ever runs
(a folder that names some is refused before, :func:`headwatch.model.sources.custom_code`; never a prompt)."""


class LoadedModel(NamedTuple):
    """A loaded model as every stage reads it: the ``nn.Module`` (in eval mode), its tokenizer
    (None for a module handed over without one) and its :class:`~headwatch.model.arch.Adapter`.
    A tuple, so ``model, tokenizer, adapter = load_model(...)`` unpacks it."""
    model: torch.nn.Module
    tokenizer: object
    adapter: Adapter


class HalfOnCPUError(ConfigError):
    """float16 requested on a CPU: logits overflow to NaN while maps look plausible (a setting that cannot
    work: a :class:`ConfigError`, as the workflow's check of ``dtype`` raises)."""


def _not_found(src: str, err: Exception) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"cannot load model {src!r}: not a local folder and not in the Hugging Face cache "
        f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', 'unset')}). Put the weights in the "
        f"cache (huggingface-cli download {src}) or point `source:` at a folder. ({err})")


@contextlib.contextmanager
def _model_files(src, what: str = "model", passed: tuple = ()):
    """transformers' refusals of a model's files (a shape the weights do not have, a tokenizer it cannot
    build, …) as :class:`ModelFileError` naming the source, in one line, nothing chained (``passed``: errors
    the caller names itself)."""
    try:
        yield
    except (ConfigError, ModelNotFoundError, *passed):
        raise
    except Exception as err:  # noqa: BLE001  (transformers refuses in many ways: each re-raised as ours, unchained)
        raise ModelFileError(f"transformers cannot load the {what} of {str(src)!r}: {one_line(err)}") from None


def _no_foreign_classes(folder: Path) -> None:
    """Refuse a folder whose ``config.json`` (``architectures``) or ``tokenizer_config.json``
    (``tokenizer_class``) names a class transformers does not have (or code of its own:
    :func:`headwatch.model.sources.custom_code`), before transformers reads it."""
    import transformers

    for name, key in (("config.json", "architectures"), ("tokenizer_config.json", "tokenizer_class")):
        if (folder / name).exists():
            raw = read_json(folder / name)
            custom_code(raw, folder / name)
            given = raw.get(key) or []
            unknown = [c for c in ([given] if isinstance(given, str) else given if isinstance(given, list) else [given])
                       if not isinstance(c, str) or not c.isidentifier() or not hasattr(transformers, c)]
            if unknown:
                raise ModelFileError(f"{folder / name}: {key} names {unknown!r}, no class of transformers: code of the "
                                     "folder's own, which headwatch never runs")


def load_tokenizer(model_cfg: dict, prepared: str | Path | None = None):
    """The model's tokenizer, from the prepared folder when it exists (fast)."""
    if prepared is not None and (Path(prepared) / PREPARED_RECORD).exists():
        return AutoTokenizer.from_pretrained(prepared, **NO_CODE)
    src, kw = source_of(model_cfg)
    try:
        return AutoTokenizer.from_pretrained(src, **kw, **NO_CODE)
    except OSError as err:
        raise _not_found(src, err) from err


def assert_forward_finite(model, what: str = "forward pass") -> torch.Tensor:
    """One forward pass on a fixed short input; NaN/inf logits stop everything."""
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    ids = (torch.arange(16, device=device) * 7919 % max(vocab - 1, 1)).unsqueeze(0)
    with torch.no_grad():
        logits = model(ids).logits
    return assert_finite(logits, f"{what}: logits ({model.dtype} on {device.type})")


def refuse_half_on_cpu(dtype: torch.dtype, device: torch.device, what: str = "dtype") -> None:
    """float16 on a CPU is refused (protocol §1); bfloat16 (float32's range) is only warned about."""
    if device.type != "cpu":
        return
    if dtype == torch.float16:
        raise HalfOnCPUError(f"{what}: float16 on the CPU overflows to NaN/inf while attention maps "
                             "still look plausible (protocol §1); use float32 (or bfloat16), or a GPU")
    if dtype == torch.bfloat16:
        log.warning("%s on CPU: 8 bits of mantissa; the finite-logits assertion stops the rule on NaN/inf "
                    "(protocol §1)", dtype)


def prepare_model(model_cfg: dict, out_dir: str | Path) -> dict:
    """Load a configured model once and save it as a safetensors folder.

    GGUF weights are dequantized to float32 by transformers; its quantizer
    record is cleared so that ``save_pretrained`` accepts the model.
    """
    out_dir = Path(out_dir)
    src, kw = source_of(model_cfg)
    t0 = time.time()
    log.info("loading %s %s", src, kw)
    try:
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32,
                                                     attn_implementation="eager", **kw, **NO_CODE)
    except OSError as err:
        raise _not_found(src, err) from err
    except Exception as err:    # transformers refuses a config or a shape in many ways: re-raised as ours
        where = f"file {kw['gguf_file']}" if kw.get("gguf_file") else "its config.json"
        raise ModelFileError(f"transformers cannot load model {src!r} ({where}): {one_line(err)}") from err
    tokenizer = load_tokenizer(model_cfg)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    Adapter(model)  # refuse an architecture without an adapter before saving anything
    assert_forward_finite(model, f"prepare {src}")
    probe = tokenizer("a").input_ids
    record = dict(source=src, source_kwargs={k: str(v) for k, v in kw.items()},
                  saved_dtype="float32", seconds=round(time.time() - t0, 2),
                  tokenizer_adds_bos=bool(tokenizer.bos_token_id is not None
                                          and probe[:1] == [tokenizer.bos_token_id]),
                  **Adapter(model).describe())
    tmp = paths.temporary(out_dir)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(record, tmp / PREPARED_RECORD)
        _replace_folder(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("prepared %s in %.1f s: %s", src, record["seconds"], record)
    return record


def _replace_folder(new: Path, target: Path) -> None:
    """Put the finished folder ``new`` in place of ``target`` by renames: until the last step
    ``target`` is the earlier prepared model, untouched."""
    old = paths.temporary(target)
    if target.exists():
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old.exists():
            os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def load_prepared(folder: str | Path, dtype: str = "float32", device: str = "auto") -> LoadedModel:
    """(model, tokenizer, adapter) from a prepared folder, checked and in eval mode."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise ModelNotFoundError(f"{folder} holds no prepared model (run the models_prepare rule)")
    dev = pick_device(device)
    torch_dtype = DTYPES[dtype]
    refuse_half_on_cpu(torch_dtype, dev, f"load {folder} as {dtype} on {dev.type}")
    _no_foreign_classes(folder)
    t0 = time.perf_counter()
    with _model_files(folder):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, attn_implementation="eager", **NO_CODE)
    t1 = time.perf_counter()
    model = model.to(dev).eval()          # on a GPU the process's first CUDA call: its context starts here
    t2 = time.perf_counter()
    with _model_files(folder, "tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(folder, **NO_CODE)
    # The start-up's parts, as key=value (benchmarks/startup.py reads them from every job's log).
    log.info("loaded %s: dtype=%s device=%s import_s=%.3f weights_s=%.3f to_device_s=%.3f tokenizer_s=%.3f",
             folder, model.dtype, dev, TRANSFORMERS_IMPORT_S, t1 - t0, t2 - t1, time.perf_counter() - t2)
    with _model_files(folder):
        _finite_weights(model, f"load {folder}")
        return LoadedModel(model, tokenizer, Adapter(model))


def _finite_weights(model, what: str) -> None:
    """:func:`assert_forward_finite`, a NaN or inf of the weights named as the model files' fault."""
    try:
        assert_forward_finite(model, what)
    except NonFiniteError as err:
        bad = [n for n, p in model.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
        raise ModelFileError(f"{what}: {err}" + (f"; its weights hold NaN or inf ({', '.join(bad[:3])}"
                                                  f"{', …' if len(bad) > 3 else ''})" if bad else "")) from None


def load_model(source, dtype: str = "float32", device: str = "auto") -> LoadedModel:
    """A :class:`LoadedModel` from a loaded ``nn.Module``, a folder (prepared by the workflow, or any
    local Hugging Face folder with config.json), a model's entry of the config (``{"gguf": {package,
    file}}`` or ``{"source": ...}``) or a hub id read from the local cache. float16 on a CPU is
    refused before any weight is read, as at every load (:func:`refuse_half_on_cpu`); the model runs
    one forward pass whose logits must be finite (:func:`assert_forward_finite`)."""
    if isinstance(source, torch.nn.Module):
        try:
            return LoadedModel(source, None, Adapter(source))
        except ValueError as err:
            raise ConfigError(f"{type(source).__name__} is not a model headwatch can read: {err}") from None
    if not isinstance(source, dict) and Path(source, "config.json").exists():
        return load_prepared(source, dtype, device)
    dev = pick_device(device)
    model_cfg = source if isinstance(source, dict) else {"source": str(source)}
    src, kw = source_of(model_cfg)
    refuse_half_on_cpu(DTYPES[dtype], dev, f"load {src} as {dtype} on {dev.type}")
    cached = cached_prepared(model_cfg)       # a GGUF converted once, in the user's cache: seconds, not a minute
    if cached is not None:
        return from_cache(cached, src, dtype, device)
    try:
        with _model_files(src, passed=(OSError,)):
            model = AutoModelForCausalLM.from_pretrained(src, dtype=DTYPES[dtype], attn_implementation="eager", **kw,
                                                         **NO_CODE)
    except OSError as err:
        raise _not_found(src, err) from err
    if kw.get("gguf_file"):      # dequantized to float32 by transformers; forget the quantizer, as prepare_model
        model.hf_quantizer = None
    with _model_files(src, "tokenizer", (OSError,)):
        tok = load_tokenizer(model_cfg)

    model = model.to(dev).eval()
    with _model_files(src):
        _finite_weights(model, f"load {src}")
        return LoadedModel(model, tok, Adapter(model))


# ------------------------------------------------------------------ the user's cache of prepared models
def cached_prepared(model_cfg: dict, files=None) -> Path | None:
    """The prepared folder of the model ``model_cfg`` in the user's cache (:mod:`headwatch.model.sources.cache`:
    where, the key, the checks), made by :func:`prepare_model` when it is missing or damaged; None for a
    source the cache does not keep (a folder, a hub id: ``files`` None) or where the cache cannot be written
    (the model then loads from its source, as without a cache). ``files``: the source's files its key
    hashes (default: :func:`~headwatch.model.sources.cache.source_files`).

    The entry is made under a name no other writer has and renamed into place (:func:`headwatch.paths.written`):
    two processes filling it at once each make one, and the later finds the earlier's, verified, in place."""
    from .sources import cache

    files = cache.source_files(model_cfg) if files is None else files
    if files is None:
        return None
    src, kw = source_of(model_cfg)
    t0 = time.perf_counter()
    key = cache.source_key(files, kw)
    entry = cache.entry_path(key, Path(kw.get("gguf_file") or src).stem)
    why = cache.damage(entry, key)
    if why is None:
        log.info("model cache: %s verified in %.2f s (source %s)", entry, time.perf_counter() - t0, src)
        return entry
    if why != "missing":
        log.warning("model cache: %s is damaged (%s): made again from %s", entry, why, src)
        _set_aside(entry)
    step = "its folder"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        stale = cache.remove_stale(entry.parent)
        if stale:
            log.info("model cache: removed %d temporary entries of fills that were stopped: %s", len(stale), stale)
        with paths.written(entry) as tmp:
            step = "the entry"
            prepare_model(model_cfg, tmp)          # the source's own errors (not found, a bad file) go to the caller
            cache.seal(tmp, key, src)
            cache.readable_by_all(tmp)
            step = "its name"                      # the rename: refused where another process's entry stands
    except ModelNotFoundError:
        raise
    except OSError as err:
        if step == "its name" and cache.damage(entry, key) is None:
            log.info("model cache: %s was filled by another process meanwhile; using it", entry)
            return entry
        log.warning("model cache: cannot write %s of %s (%s); loading %s without the cache", step, entry,
                    one_line(err), src)
        return None
    log.info("model cache: %s made from %s in %.1f s", entry, src, time.perf_counter() - t0)
    return entry


def _set_aside(entry: Path) -> None:
    """Move a damaged entry out of the way in one rename, then remove it (another process may have done so)."""
    aside = paths.temporary(entry)
    try:
        os.rename(entry, aside)
    except OSError:
        return
    if aside.is_symlink() or not aside.is_dir():       # a link or a file where an entry belongs: itself goes
        aside.unlink(missing_ok=True)
    else:
        shutil.rmtree(aside, ignore_errors=True)


def from_cache(entry: Path, src: str, dtype: str = "float32", device: str = "auto") -> LoadedModel:
    """:func:`load_prepared` of a cache entry, the model named by its source ``src`` as a load from the
    source names it (its ``name_or_path``: what a page and an error call the model)."""
    loaded = load_prepared(entry, dtype, device)
    loaded.model.config._name_or_path = src
    return loaded
