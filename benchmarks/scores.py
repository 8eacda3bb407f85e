"""Time and peak memory of scoring every head of SmolLM2 (protocol §4) on the full
induction set (40 × 50 tokens) and the 8 prose sentences.

    .venv/bin/python benchmarks/scores.py [--threads 2] [--model-dir results/models/smollm2-135m]

Prepares the model into a temporary folder when the workflow has not yet done
so. Prints a table; targets: under 10 s and under 2 GB on 2 cores.
"""
import argparse
import resource
import tempfile
import time
from pathlib import Path

import torch
import yaml

from headwatch.model.load import load_prepared, prepare_model
from headwatch.scores.heads import four_scores
from headwatch.scores.sequences import ids_tensor, make_set, set_params

ROOT = Path(__file__).resolve().parents[1]


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model-dir", default=str(ROOT / "results/models/smollm2-135m"))
    ap.add_argument("--batch", type=int, default=None, help="sequences per forward (default: config)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    folder = Path(args.model_dir)
    if not (folder / "prepared.json").exists():
        folder = Path(tempfile.mkdtemp()) / "smollm2-135m"
        prepare_model(config["models"]["smollm2-135m"], folder)
    model, tokenizer, adapter = load_prepared(folder, "float32", "cpu")
    induction = make_set(tokenizer, "induction", set_params("induction", config))
    prose = make_set(tokenizer, "prose", set_params("prose", config))
    sentences = [torch.tensor(list(ids)) for ids in prose.token_ids]
    batch = args.batch or config["attention"]["batch"]
    four_scores(model, adapter, sentences[:1], ids_tensor(induction)[:1], 25)  # warm-up
    before = rss_mb()
    t0 = time.perf_counter()
    table = four_scores(model, adapter, sentences, ids_tensor(induction), 25, 0, batch)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| what | value |\n|---|---|")
    print(f"| heads scored | {len(table)} ({adapter.n_layers} layers × {adapter.n_heads} heads) |")
    print(f"| inputs | {len(induction)} induction sequences × {ids_tensor(induction).shape[1]} tokens, "
          f"{len(sentences)} prose sentences ({sum(len(s) for s in sentences)} tokens) |")
    print(f"| batch | {batch} sequences per forward |")
    print(f"| torch threads | {torch.get_num_threads()} |")
    print(f"| scoring time | {seconds:.2f} s (target < 10 s) |")
    print(f"| RSS before scoring (model loaded) | {before:.0f} MB |")
    print(f"| peak RSS of the process | {peak:.0f} MB (target < 2048 MB) |")
    top = table.sort_values("induction", ascending=False).head(3)
    print("top induction heads:", [(int(r.layer), int(r.head), round(r.induction, 3)) for r in top.itertuples()])


if __name__ == "__main__":
    main()
