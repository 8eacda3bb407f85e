"""Benchmark: the blind spots of attribution patching on the two-names task (protocol §5e) —
the false negatives of each estimate against exact patching, for each head's output (z),
query (q) and key/value group's key (k), plain, with AtP*'s softmax fix, and with AtP*'s
GradDrop as well, side by side with their costs.

    .venv/bin/python benchmarks/attribution.py --threads 1              # 16 prompts
    .venv/bin/python benchmarks/attribution.py --n 64 --top-k 10        # paper scale
    .venv/bin/python benchmarks/attribution.py --n 4 --no-graddrop      # without GradDrop's L passes

The prompts are ``headwatch.patching.prompts.prompt_set``'s (the ``patching`` section of the config,
``n`` from ``--n``). Exact: every unit patched clean → corrupted by
``headwatch.patching.attribution.site_patcher`` (the Patcher with q and k), batched. Estimates:
``headwatch.patching.attribution.attribution_patching`` (z) and ``headwatch.patching.attribution.qk_estimates``
(q and k: plain, and AtP* with the attention softmax recomputed with the patched query or key);
by default also ``headwatch.patching.attribution.graddrop_estimates`` (AtP* + GradDrop at z, q and k:
one forward and backward pass per layer and batch, that layer's gradient stopped; ``--no-graddrop``
leaves them out). A false negative is a unit in the exact top k by |patched − corrupted| that the
estimate ranks below k (``headwatch.patching.attribution.false_negatives``). Printed: one row per site and
method — false negatives and which units, seconds, forward and backward passes — and the
estimates' Pearson correlation with the exact effects: signed (``pearson``; none for GradDrop,
a magnitude) and of the magnitudes (``pearson_abs``: |exact| with |estimate|).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from headwatch.patching.attribution import GRADDROP, blind_spots  # noqa: E402
from headwatch.model.device import exact_numerics  # noqa: E402
from headwatch.model.load import load_prepared  # noqa: E402
from headwatch.patching.prompts import prompt_set  # noqa: E402
from headwatch.patching.batch import PromptBatch  # noqa: E402
from headwatch.settings.patching import PatchingSettings  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "results/models/smollm2-135m"), help="a prepared model folder")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"), help="patching: from this config")
    ap.add_argument("--n", type=int, default=16, help="prompts (default 16; the paper's 64)")
    ap.add_argument("--top-k", type=int, default=10, help="the exact top k whose misses are counted")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-graddrop", action="store_true", help="leave out AtP* + GradDrop (L passes per batch)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    settings = dataclasses.replace(PatchingSettings.from_config(yaml.safe_load(open(args.config))["patching"]),
                                   n=args.n)
    model, tokenizer, adapter = load_prepared(args.model, "float32", args.device)
    prompts, note = prompt_set(tokenizer, settings)
    print(f"model {args.model}: {adapter.n_layers} layers × {adapter.n_heads} heads ({adapter.n_kv_heads} key/value "
          f"groups); {len(prompts)} prompts of {note['length']} tokens; top {args.top_k}; torch threads "
          f"{torch.get_num_threads()}, batch {settings.batch}")
    with exact_numerics():
        table, effects = blind_spots(model, adapter, PromptBatch.of(prompts), settings.batch, args.top_k,
                                     graddrop=not args.no_graddrop)

    def pearson(site, method, magnitude):
        exact, est = effects[site]["exact"].ravel(), effects[site][method.split(" ")[0]].ravel()
        if method.startswith(GRADDROP) and not magnitude:
            return float("nan")                            # a magnitude: no sign to correlate
        return float(np.corrcoef(*(np.abs((exact, est)) if magnitude else (exact, est)))[0, 1])

    for name, magnitude in (("pearson", False), ("pearson_abs", True)):
        table[name] = [1.0 if m.startswith("exact") else pearson(site, m, magnitude)
                       for site, m in zip(table["site"], table["method"])]
    with np.printoptions(precision=3):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))


if __name__ == "__main__":
    main()
