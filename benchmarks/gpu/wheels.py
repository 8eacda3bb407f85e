"""What `make gpu-wheels` downloads, resolved before anything is downloaded: every pin of
``wheels.txt`` must have a wheel a bare GPU machine can install (CPython 3.12, x86-64 Linux,
manylinux2014 — the platform ``pip download`` is told), and the folder plus the repository's
tracked files must fit what a GPU machine's copy may hold.

    python3 benchmarks/gpu/wheels.py            # resolve every pin on PyPI; sizes; exit 1 if over
    python3 benchmarks/gpu/wheels.py --folder   # the downloaded folder's size beside the repository's

A GPU machine lent to this project copies the working tree and the wheels folder, 64 MiB in all;
:data:`LIMIT_MIB` leaves room below it. Resolution follows pip: the wheel tags a CPython 3.12 on
manylinux2014 x86-64 takes (``packaging.tags``), most specific first; a pin without such a wheel
(scipy 1.17.1 publishes manylinux_2_27/2_28 wheels only) is named.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WHEELS_TXT = HERE / "wheels.txt"
FOLDER = HERE / "wheels"
LIMIT_MIB = 60.0
"""Wheels plus the repository's tracked files, at most (the machine's copy holds 64 MiB)."""
PYTHON = (3, 12)
PLATFORMS = ("manylinux2014_x86_64",)
"""What ``make gpu-wheels`` passes pip (``--python-version 3.12 --platform manylinux2014_x86_64``)."""
BUILT_HERE = {"connection-pool"}
"""Pins with no wheel on PyPI, which ``make gpu-wheels`` builds from their pure-Python source first."""


def pins(path: Path = WHEELS_TXT) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out.append((name.strip(), version.strip()))
    return out


def supported_tags() -> list:
    """Every wheel tag the GPU machine takes, most specific first (as pip orders them)."""
    from packaging import tags

    platforms = []
    for p in PLATFORMS:                     # manylinux2014 = manylinux_2_17: pip also takes the older ones
        if p.startswith("manylinux2014_"):
            arch = p.split("_", 1)[1]
            platforms += [f"manylinux_2_{minor}_{arch}" for minor in range(17, 4, -1)]
            platforms += [p, f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}"]
        else:
            platforms.append(p)
    return [*tags.cpython_tags(PYTHON, platforms=platforms), *tags.compatible_tags(PYTHON, platforms=platforms)]


def choose(files: list[dict], supported: list) -> dict | None:
    """The wheel pip would take from a release's ``files`` (``filename``, ``size``): the one whose best
    tag comes first in ``supported``; None when no wheel fits."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    rank = {t: i for i, t in enumerate(supported)}
    best = None
    for f in files:
        if not f["filename"].endswith(".whl"):
            continue
        try:
            wheel_tags = parse_wheel_filename(f["filename"])[3]
        except InvalidWheelFilename:
            continue
        r = min((rank[t] for t in wheel_tags if t in rank), default=None)
        if r is not None and (best is None or r < best[0]):
            best = (r, f)
    return None if best is None else best[1]


INDEX = "https://pypi.org/simple"


def release_of(filename: str):
    """The version a wheel's or a source archive's file name says, or None."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    try:
        return parse_wheel_filename(filename)[1] if filename.endswith(".whl") else parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def pypi_files(name: str, version: str, timeout: float = 30) -> list[dict]:
    """The files of one release on PyPI, from its simple index in JSON (PEP 691; sizes: PEP 700)."""
    from packaging.version import Version

    req = urllib.request.Request(f"{INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        files = json.load(r)["files"]
    want = Version(version)
    return [dict(filename=f["filename"], size=f["size"]) for f in files
            if not f.get("yanked") and release_of(f["filename"]) == want]


def resolve(fetch=pypi_files, listed: list[tuple[str, str]] | None = None) -> tuple[list[dict], list[str]]:
    """(the wheel of each pin, with its size; the pins with none a GPU machine can take)."""
    supported = supported_tags()
    chosen, missing = [], []
    for name, version in listed if listed is not None else pins():
        files = fetch(name, version)
        wheel = choose(files, supported)
        if wheel is not None:
            chosen.append(dict(name=name, version=version, **wheel))
        elif name in BUILT_HERE and any(f["filename"].endswith((".tar.gz", ".zip")) for f in files):
            source = next(f for f in files if f["filename"].endswith((".tar.gz", ".zip")))
            chosen.append(dict(name=name, version=version, filename=f"{name} {version}: a wheel built from "
                               f"{source['filename']}", size=source["size"]))
        else:
            missing.append(f"{name}=={version}")
    return chosen, missing


def tree_bytes() -> int:
    """The repository's tracked files, as a GPU machine's copy takes them."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / f).stat().st_size for f in out.decode().split("\0") if f and (ROOT / f).is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", action="store_true", help="measure the downloaded folder instead of resolving")
    args = ap.parse_args(argv)
    tree = tree_bytes()
    if args.folder:
        files = sorted(FOLDER.glob("*.whl"))
        wheels = sum(f.stat().st_size for f in files)
        what = f"{len(files)} wheels in {FOLDER}"
        missing = []
    else:
        chosen, missing = resolve()
        wheels = sum(w["size"] for w in chosen)
        what = f"{len(chosen)} wheels resolved on PyPI for CPython {PYTHON[0]}.{PYTHON[1]} on {', '.join(PLATFORMS)}"
        for name in missing:
            print(f"no wheel a GPU machine can take: {name}")
    total = (wheels + tree) / 2 ** 20
    print(f"{what}: {wheels / 2 ** 20:.1f} MiB; the repository's tracked files {tree / 2 ** 20:.1f} MiB; "
          f"{total:.1f} MiB in all (at most {LIMIT_MIB:.0f})")
    return 1 if missing or total > LIMIT_MIB else 0


if __name__ == "__main__":
    sys.exit(main())
