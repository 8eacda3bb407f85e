"""Where the jobs run: CUDA devices a setting names (asked when a local run starts), float16
on a CPU, and what decides whether CUDA is usable (a key of the verdict cache)."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from ..model.sources import ConfigError, fingerprint


def needs_device(config: dict) -> bool:
    return any(config["models"][k].get("dtype") == "float16" for k in config["models_studied"])


DEVICE_KEYS = ("device", "sweep.device")
"""The settings that say where the jobs run (``auto``, ``cpu``, ``cuda`` or ``cuda:N``)."""


def cuda_devices() -> int:
    """How many CUDA GPUs torch can use here (0 without CUDA); asked only when a setting names CUDA."""
    import torch     # here: the pre-job checks import this module; a cached verdict never needs torch (3.2 s)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_errors(config: dict, gpus=cuda_devices) -> list[str]:
    """``cuda``/``cuda:N`` settings that this machine cannot honour (``gpus()``: its CUDA GPUs,
    asked only when a setting names CUDA). For the jobs that run on this machine: the
    workflow asks when a local run starts (rules/report.smk, onstart)."""
    out, count = [], None
    for key in DEVICE_KEYS:
        node = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        setting = str(node)
        if not setting.startswith("cuda"):
            continue
        count = gpus() if count is None else count
        index = int(setting.split(":", 1)[1]) if ":" in setting else 0
        if count == 0:
            out.append(f"{key}: {setting!r}, but torch finds no CUDA GPU on this machine; use auto "
                       "(CUDA when present, else the CPU) or cpu, or run where a GPU is")
        elif index >= count:
            out.append(f"{key}: {setting!r}, but this machine has {count} CUDA GPU"
                       f"{'s' if count > 1 else ''} (cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    return out


def check_devices(config: dict, gpus=cuda_devices) -> None:
    """Refuse a CUDA device this machine does not have, naming the key."""
    errors = device_errors(config, gpus)
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))


def cuda_probe() -> str:
    """What decides whether CUDA is usable here, read without importing torch (a cache key)."""
    spec = importlib.util.find_spec("torch")
    version = (Path(spec.origin).parent / "version.py") if spec and spec.origin else None
    devices = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
    return json.dumps([fingerprint(version) if version else None, devices,
                       os.environ.get("CUDA_VISIBLE_DEVICES")])


def cuda_available() -> bool:
    import torch     # here: the pre-job checks import this module; a cached verdict never needs torch (3.2 s)

    return torch.cuda.is_available()


def dtype_errors(config: dict, cuda=cuda_available) -> list[str]:
    """float16 on a CPU overflows to NaN while maps still look plausible (protocol §1)."""
    errors = []
    setting = str(config.get("device", "auto"))
    for key in config["models_studied"]:
        if config["models"][key].get("dtype") != "float16":
            continue
        if setting == "cpu" or setting.startswith("cpu:"):
            why = "device: cpu"
        elif setting == "auto" and not cuda():
            why = "device: auto, and this machine has no CUDA GPU"
        else:
            continue
        errors.append(f"models.{key}.dtype: float16 on the CPU ({why}) overflows to NaN/inf while "
                      "attention maps still look plausible (protocol §1); use dtype: float32 "
                      "(or bfloat16), or run on a GPU (device: cuda)")
    return errors
