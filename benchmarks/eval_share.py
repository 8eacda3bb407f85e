"""The evaluations' share of a sweep run's training time (protocol §7, "the course of a run"): what
recording the course at a scale's cadence costs.

    .venv/bin/python benchmarks/eval_share.py                       # laptop scale: config/laptop.yaml
    .venv/bin/python benchmarks/eval_share.py --config config/quick.yaml --evaluations 2
    .venv/bin/python benchmarks/eval_share.py --set eval_every=60 eval_batches=3   # another cadence

Trains the scale's split-sweep run ``--shape`` (seed 0; one torch thread, as a laptop job) for
``--evaluations`` evaluation intervals of its ``eval_every`` steps, with the scale's heads probe, as
the training job does (:func:`headwatch.sweep.train.train`), and prints what the run's info records:
the steps' seconds (``train_seconds``), the evaluations' (``eval_seconds``: the validation windows,
the fixed sample of the training split, and the probe's head scores) and their ratio
(``eval_share``); then the same run without the probe, to part the two. Other processes may share
the machine: the lead times it alone.

It also states the paper scale's share on a GPU from the H200 step of ``--gpu-record`` (the GPU
check's ``training_step``: 24 stacked models, bf16): an evaluation scores ``eval_batches`` × batch
windows of the validation split and as many of the training split, each a forward pass, a third of
a training step's multiply-adds per window (``ModelSpec.step_macs``), so it costs
``2 × eval_batches / 3`` steps' time at least, every ``eval_every`` steps (the probe not counted:
it is not timed on a GPU yet).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from headwatch.charlm.corpus import build_corpus  # noqa: E402
from headwatch.settings.sweep import CorpusSettings, HeadsSettings, TrainSettings, model_of, train_of  # noqa: E402
from headwatch.sweep.plan import entry_of  # noqa: E402
from headwatch.sweep.train import RunOptions, train  # noqa: E402
from headwatch.workflow.run_record import config_of  # noqa: E402

GPU_RECORD = ROOT / "benchmarks/gpu/runs/2026-12-04-h200/run-2/report.json"


def scale(config: str, shape: str, changes: list[str]) -> tuple[dict, TrainSettings, dict, dict]:
    """(the sweep section, the split sweep's training settings with ``changes``, the shape's model
    settings, the heads probe) of ``config`` over config/config.yaml."""
    sw = config_of(ROOT, config)["sweep"] if config != "config/config.yaml" else \
        yaml.safe_load((ROOT / config).read_text())["sweep"]
    split = sw["summary"]["split_sweep"]
    t = train_of(sw, split)
    for kv in changes:
        key, value = kv.split("=", 1)
        t[key] = yaml.safe_load(value)
    heads = HeadsSettings.of(sw["heads"]).probe() if sw.get("heads") else None
    return sw, TrainSettings.from_config(t), model_of(sw, entry_of(sw, split, shape)), heads


def gpu_share(s: TrainSettings, record: Path) -> str:
    """The paper scale's evaluation share on the GPU of ``record``, from its bf16 step time."""
    step = json.loads(record.read_text())["training_step"]
    best = step["variants"]["bf16"]["best_s"]
    per_eval = 2 * s.eval_batches / 3 * best
    return (f"GPU ({record.relative_to(ROOT)}: {step['stack']} stacked models, batch {step['batch']} x {step['context']}, "
            f"bf16 {best * 1e3:.1f} ms a step): an evaluation of 2 x {s.eval_batches} x {s.batch} windows is at least "
            f"{2 * s.eval_batches / 3:.2f} steps' multiply-adds = {per_eval:.3f} s, every {s.eval_every} steps "
            f"({s.eval_every * best:.2f} s): {per_eval / (s.eval_every * best):.1%} of the steps' time (the probe "
            "not counted)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/laptop.yaml", help="the scale's overlay over config/config.yaml")
    ap.add_argument("--shape", default="w256-h4", help="a shape of the split sweep")
    ap.add_argument("--evaluations", type=int, default=3, help="evaluation intervals to train")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="training settings to change")
    ap.add_argument("--gpu-record", type=Path, default=GPU_RECORD)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sw, s, model, heads = scale(args.config, args.shape, args.set)
    c = CorpusSettings.of(sw["corpus"])
    corpus = build_corpus(c.source, None if c.plays is None else list(c.plays), c.target_chars, c.val_fraction)
    ids, meta = corpus.ids(), corpus.meta()
    steps = args.evaluations * s.eval_every
    run = dict(s.as_dict(), steps=steps, warmup=min(s.warmup, steps), checkpoint_every=steps)
    print(f"{args.config}: {args.shape} {model}; {steps} steps of {s.batch} x {model['context']}, an evaluation every "
          f"{s.eval_every} of 2 x {s.eval_batches} x {s.batch} windows; {args.threads} thread(s); torch "
          f"{torch.__version__}", flush=True)
    for probe in ([heads, None] if heads else [None]):
        t0 = time.perf_counter()
        info = train(ids, meta, model, 0, run, heads=probe, run=RunOptions(full_eval=False))[2]
        print(f"{'with' if probe else 'without'} the heads probe: steps {info['train_seconds']:.1f} s, evaluations "
              f"{info['eval_seconds']:.1f} s ({info['eval_seconds'] / args.evaluations:.2f} s "
              f"each): {info['eval_share']:.1%} of the steps' time ({time.perf_counter() - t0:.0f} s in all)", flush=True)
    paper = TrainSettings.from_config(train_of(yaml.safe_load((ROOT / "config/config.yaml").read_text())["sweep"],
                                               "heads_split"))
    print(gpu_share(paper, args.gpu_record))


if __name__ == "__main__":
    main()
