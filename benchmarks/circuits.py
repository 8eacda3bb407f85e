"""Benchmark: the peak memory (and time) of path patching (protocol §5e) against the head sweep
of activation patching (§5d) on the same prompts, at 16 prompts and at paper scale's 64.

    .venv/bin/python benchmarks/circuits.py --model results/models/smollm2-135m --threads 1
    .venv/bin/python benchmarks/circuits.py --n 16 --senders 18 --heads 18      # a shorter run

Each measurement runs in a process of its own (the RSS high-water mark only rises), on the
two-names prompts of ``headwatch.patching.prompts.prompt_set`` (the ``patching`` section of the config,
``n`` from ``--n``):

(i)  the head sweep: ``Patcher`` (both runs captured) and every head's ``z`` patched, batched
     (``--heads``: a subset spread over the layers; the peak does not grow with the number of
     heads beyond one chunk of ``patching.batch`` rows);
(ii) path patching: the same ``Patcher``, ``PathPatcher`` (the corrupted run's ``mlp_out``
     added), and every edge from ``--senders`` senders (spread over the layers below the
     receivers; default every head) into the receivers' q, k and v (``--receivers``, default the
     top ``circuits.receivers_top_k`` of ``--heads-table``, else the last layer's first heads).

Printed: each part's peak RSS (and peak CUDA memory on a GPU), wall time, and the ratio of the
peaks, which the protocol keeps within 2×.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ablation import peak_rss_gb, pick_heads  # noqa: E402
from headwatch.circuits.path_patching import PATH_SITES, PathPatcher, edges_into  # noqa: E402
from headwatch.model.load import load_prepared  # noqa: E402
from headwatch.patching.batch import PromptBatch  # noqa: E402
from headwatch.patching.patcher import Patch, Patcher  # noqa: E402
from headwatch.patching.prompts import prompt_set  # noqa: E402
from headwatch.settings.circuits import CircuitsSettings  # noqa: E402
from headwatch.settings.patching import PatchingSettings  # noqa: E402


def part(args) -> dict:
    """One measurement, in this process: (i) ``heads`` or (ii) ``paths``."""
    torch.set_num_threads(args.threads or torch.get_num_threads())
    config = yaml.safe_load(open(args.config))
    settings = dataclasses.replace(PatchingSettings.from_config(config["patching"]), n=args.n)
    model, tokenizer, adapter = load_prepared(args.model, "float32", args.device)
    prompts, _ = prompt_set(tokenizer, settings)
    dev = next(model.parameters()).device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    # path patching's Patcher also keeps every block's mlp_out (pass A freezes it): part of its memory
    patcher = Patcher(model, adapter, PromptBatch.of(prompts), settings.batch,
                      extra_sites=PATH_SITES if args.part == "paths" else ())
    if args.part == "heads":
        heads = pick_heads(adapter.heads(), args.heads)
        patcher.run([Patch("z", l, h) for l, h in heads])
        what = f"{len(heads)} heads"
    else:
        receivers = [tuple(int(x) for x in r.split(",")) for r in args.receivers]
        senders = pick_heads([h for h in adapter.heads() if h[0] < min(r[0] for r in receivers)], args.senders)
        edges = edges_into(adapter, receivers, ("q", "k", "v"), senders)
        PathPatcher(patcher).run(edges)
        what = f"{len(edges)} edges ({len(senders)} senders into {len(receivers)} receivers' q, k, v)"
    out = dict(part=args.part, n=args.n, what=what, seconds=time.perf_counter() - t0, peak_rss_gb=peak_rss_gb())
    if dev.type == "cuda":
        out["peak_cuda_gb"] = torch.cuda.max_memory_allocated() / 1024 ** 3
    return out


def default_receivers(args) -> list[str]:
    if args.heads_table:
        import pandas as pd

        from headwatch.circuits.path_patching import receivers_of
        k = CircuitsSettings.from_config(yaml.safe_load(open(args.config))["circuits"])
        return [f"{l},{h}" for l, h in receivers_of(pd.read_parquet(args.heads_table), k)]
    layers = json.loads((Path(args.model) / "config.json").read_text())["num_hidden_layers"]
    return [f"{layers - 1},{h}" for h in range(3)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "results/models/smollm2-135m"), help="a prepared model folder")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"), help="patching: and circuits: from here")
    ap.add_argument("--n", type=int, nargs="*", default=[16, 64], help="prompts (default: 16, and the paper's 64)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--heads", type=int, default=None, help="heads the head sweep patches (default every head)")
    ap.add_argument("--senders", type=int, default=None, help="senders, spread over the layers (default every one)")
    ap.add_argument("--receivers", nargs="*", default=None, help="receivers as layer,head (default: see the doc)")
    ap.add_argument("--heads-table", default=None, help="a patching/heads.parquet: its top heads are the receivers")
    ap.add_argument("--part", choices=("heads", "paths"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.part:                                   # one measurement (a child process)
        args.n = args.n[0]
        print(json.dumps(part(args)))
        return
    receivers = args.receivers or default_receivers(args)
    print(f"model {args.model}; receivers {receivers}; threads {args.threads}")
    for n in args.n:
        got = {}
        for which in ("heads", "paths"):
            cmd = [sys.executable, __file__, "--part", which, "--n", str(n), "--model", args.model, "--config",
                   args.config, "--device", args.device, "--receivers", *receivers]
            for flag in ("threads", "heads", "senders"):
                if getattr(args, flag) is not None:
                    cmd += [f"--{flag}", str(getattr(args, flag))]
            got[which] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                                    .strip().splitlines()[-1])
            g = got[which]
            print(f"  n = {n:3d} {which:5s}: {g['what']}: peak RSS {g['peak_rss_gb']:.3f} GB"
                  + (f", peak CUDA {g['peak_cuda_gb']:.3f} GB" if "peak_cuda_gb" in g else "")
                  + f", {g['seconds']:.1f} s")
        ratio = got["paths"]["peak_rss_gb"] / got["heads"]["peak_rss_gb"]
        print(f"  n = {n:3d} path patching / head sweep, peak RSS: {ratio:.2f}x"
              + (f"; peak CUDA {got['paths']['peak_cuda_gb'] / got['heads']['peak_cuda_gb']:.2f}x"
                 if "peak_cuda_gb" in got["heads"] else ""))


if __name__ == "__main__":
    main()
