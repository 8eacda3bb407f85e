"""What recording the heads costs a training job (protocol §7b): CPU time of one job with and
without the records, at laptop-like and paper-like settings.

    PYTHONPATH=. .venv/bin/python benchmarks/heads.py [--shapes w256-h4,w256-h32] [--json PATH]

Each run trains one model with the sweep's own code (:func:`headwatch.sweep.train.train`, 1 torch
thread, the first two plays of config/config.yaml's ``sweep.corpus``) for S and 2S steps, each
ending with one evaluation point: a step's time is the difference, the rest of the S-step run is
the evaluation (and set-up). A record (``sweep.heads`` of config/config.yaml: the probe's scores
and the in-context score, what a job adds at an evaluation step) is timed on its own, the median
of 5. What is compared is the process's CPU time (``time.process_time()``), not wall time, as the
machine may be shared (a difference of two whole runs drowns in that noise). A record's share of
a job is its cost over one evaluation interval: ``eval_every`` steps, one evaluation and the
record.

S is ``eval_every // 2`` at laptop settings; paper settings (batch 64, ``eval_every`` 200) are long
on a CPU, so S is ``--paper-steps`` there (the step time is what is extrapolated).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_time(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(ids, meta, model_cfg: dict, train_cfg, heads: dict, repeats: int = 5) -> dict:
    """CPU seconds of a training step, of the rest of a run (evaluation, set-up) and of one record
    (the median of ``repeats``: the probe's scores and the in-context score, as a job records
    them at an evaluation step, on the trained short run's model). ``train_cfg``: the training settings
    (:class:`headwatch.settings.sweep.TrainSettings`)."""
    import statistics

    from headwatch.model.arch import Adapter
    from headwatch.sweep.heads import in_context_score, make_probe, probe_scores, records
    from headwatch.sweep.train import RunOptions, train

    def run(steps: int):
        settings = replace(train_cfg, steps=steps, eval_every=steps)
        return lambda: train(ids, meta, model_cfg, 0, settings, run=RunOptions(full_eval=False))

    steps = train_cfg.steps
    run(steps)()                                 # warm-up: imports, allocator, first-call costs
    short = cpu_time(run(steps))
    step = (cpu_time(run(2 * steps)) - short) / steps
    model = train(ids, meta, model_cfg, 0, replace(train_cfg, eval_every=steps), run=RunOptions(full_eval=False))[0]
    probe = make_probe(ids[meta["n_train"]:], meta["vocab_size"], model.spec.context, heads)
    adapter = Adapter(model)

    def record():
        in_context_score(model, probe)
        records(steps, probe_scores(model, probe, adapter))

    record()
    cost = statistics.median(cpu_time(record) for _ in range(repeats))
    return dict(step_cpu_s=step, eval_cpu_s=short - steps * step, record_cpu_s=cost)


def main(argv=None) -> None:
    import torch

    from headwatch.charlm.corpus import build_corpus
    from headwatch.settings.sweep import HeadsSettings, TrainSettings, train_of

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="w256-h4,w256-h32")
    ap.add_argument("--paper-steps", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    laptop = yaml.safe_load((ROOT / "config" / "laptop.yaml").read_text())
    sw = cfg["sweep"]
    heads = HeadsSettings.from_config(sw["heads"]).probe()
    corpus = build_corpus(plays=sw["corpus"]["plays"][:2], target_chars=200_000)
    ids, meta = corpus.ids(), corpus.meta()
    paper = TrainSettings.from_config(train_of(sw, "heads_split"))
    lap = replace(paper, **laptop["sweep"]["train"])     # the laptop scale's training settings
    scales = {"laptop": (lap, lap.eval_every // 2), "paper": (paper, args.paper_steps)}
    rows = []
    for shape in args.shapes.split(","):
        width, heads_n = (int(x) for x in shape[1:].split("-h"))
        model_cfg = dict(width=width, heads=heads_n, **sw["model"])
        for scale, (train_cfg, steps) in scales.items():
            short = replace(train_cfg, steps=steps, warmup=min(train_cfg.warmup, steps), checkpoint_every=10 ** 9)
            m = measure(ids, meta, model_cfg, short, heads)
            interval_s = train_cfg.eval_every * m["step_cpu_s"] + m["eval_cpu_s"] + m["record_cpu_s"]
            row = dict(scale=scale, shape=shape, batch=train_cfg.batch, eval_every=train_cfg.eval_every,
                       steps_run=steps, **m, share=m["record_cpu_s"] / interval_s)
            rows.append(row)
            print(f"{scale:6s} {shape:9s} batch {row['batch']:3d} every {row['eval_every']:3d} steps: job "
                  f"step {m['step_cpu_s']:.3f} s CPU, evaluation {m['eval_cpu_s']:.2f} s, a record "
                  f"{m['record_cpu_s']:.3f} s: {100 * row['share']:.1f} % of a job", flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(heads=heads, rows=rows), indent=1))


if __name__ == "__main__":
    main()
