"""The laptop scale's pilot (protocol §7, config/laptop.yaml): CPU time per training step of each
sweep configuration, and the learning curve of one, with the sweep's own training code.

    .venv/bin/python benchmarks/laptop_pilot.py steps --batch 8 --context 128 --steps 30 \\
        --eval-batches 12 [--configs w256-h1,w256-h2,w256-h4,w256-h8,w256-h16,w256-h32,w128-h2,w512-h8] \\
        [--jobs 2] [--json PATH]
    .venv/bin/python benchmarks/laptop_pilot.py curve --shape w256-h4 --batch 8 --context 128 \\
        --steps 720 --eval-every 40 --eval-batches 12 [--json PATH]

``steps``: each configuration (a slug any sweep of config/config.yaml lists, options included, or a
plain w{width}-h{heads}) trains in a fresh process with 1 torch thread
(headwatch.sweep.train.train on the config's corpus, as a `sweep_train` job runs it), ``--jobs``
of them side by side, as ``snakemake --cores 2`` runs two training jobs. The machine may be
shared, so what is compared is **CPU time** (``time.process_time()`` of the job's own process),
not wall time: per training step, per evaluation (``eval_batches × batch`` windows), and the
job's start-up (imports and model set-up, before the first step). Wall time is printed beside
it with the load average, for the record.

``curve``: one configuration's validation loss every ``--eval-every`` steps (cosine decay to
``--steps``), to see where the loss stops falling fast.

The corpus is built from config/config.yaml's ``sweep.corpus`` into a temporary folder (or
read from ``--corpus DIR`` holding ids.npy and meta.json, e.g. results/sweep/corpus).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def corpus_dir(given: str | None) -> Path:
    """A folder with the sweep corpus's ids.npy and meta.json (built from config/config.yaml)."""
    if given:
        return Path(given)
    import yaml

    from headwatch.charlm.corpus import build_corpus, save_corpus

    out = Path(tempfile.mkdtemp(prefix="laptop_pilot_"))
    c = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]["corpus"]
    save_corpus(build_corpus(c["source"], c.get("plays"), c["target_chars"], c["val_fraction"]),
                out / "ids.npy", out / "meta.json")
    return out


def model_of(shape: str) -> dict:
    """The model settings of a configuration slug listed by any sweep of config/config.yaml (options
    included: experts, layers, kv heads; a `vocab` entry needs its tokenizer and is refused)."""
    import yaml

    from headwatch.settings.sweep import CHAR, model_of as entry_model, vocab_of
    from headwatch.sweep.plan import entry_of, parse_slug

    sw = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]
    for name in sw["sweeps"]:
        try:
            entry = entry_of(sw, name, shape)
        except KeyError:
            continue
        if vocab_of(entry) != CHAR:
            raise SystemExit(f"{shape}: a vocabulary other than the characters is not piloted here")
        return entry_model(sw, entry)
    width, heads = parse_slug(shape)            # a plain configuration no sweep lists
    return dict(width=width, heads=heads, **sw["model"])


def train_cfg(args, steps: int, eval_every: int) -> dict:
    """The paper scale's training settings (sweep.train) with the pilot's steps, batch and evaluation."""
    import yaml

    from headwatch.settings.sweep import train_of

    t = train_of(yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"], "heads_split")
    return dict(t, steps=steps, batch=args.batch, warmup=max(1, steps // 20), eval_every=eval_every,
                eval_batches=args.eval_batches, checkpoint_every=steps)


def one_job(args) -> dict:
    """Run in a fresh process: train ``args.shape`` and time it (CPU and wall)."""
    c0, w0 = time.process_time(), time.perf_counter()
    import torch

    from headwatch.charlm.corpus import load_ids
    from headwatch.sweep import train as tr

    torch.set_num_threads(1)
    ids, meta = load_ids(Path(args.corpus) / "ids.npy", Path(args.corpus) / "meta.json")
    model_cfg = dict(model_of(args.shape), context=args.context)
    startup = time.process_time() - c0
    c1, w1 = time.process_time(), time.perf_counter()
    _, metrics, info, _ = tr.train(ids, meta, model_cfg, 0, train_cfg(args, args.steps, args.eval_every),
                                full_eval=False)
    cpu, wall = time.process_time() - c1, time.perf_counter() - w1
    # the run's own record of its evaluations' time (wall seconds of its one thread) parts them from the steps'
    evals = len(metrics)
    eval_share = info["eval_seconds"] / (info["eval_seconds"] + info["train_seconds"])
    return dict(shape=args.shape, params=info["params"], steps=args.steps, batch=args.batch,
                context=args.context, startup_cpu_s=startup, train_cpu_s=cpu, train_wall_s=wall,
                evals=evals, eval_cpu_s=cpu * eval_share / evals, step_cpu_s=cpu * (1 - eval_share) / args.steps,
                curve=metrics[["step", "train_loss", "val_loss"]].to_dict("records"),
                total_cpu_s=time.process_time() - c0, total_wall_s=time.perf_counter() - w0)


def spawn(args, shape: str, steps: int, eval_every: int) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "job", "--shape", shape, "--corpus", str(args.corpus),
           "--batch", str(args.batch), "--context", str(args.context), "--steps", str(steps),
           "--eval-every", str(eval_every), "--eval-batches", str(args.eval_batches)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def run_steps(args) -> list[dict]:
    """Every configuration, ``--jobs`` at a time, each in its own process."""
    queue, running, out = list(args.configs.split(",")), [], []
    while queue or running:
        while queue and len(running) < args.jobs:
            shape = queue.pop(0)
            running.append((shape, spawn(args, shape, args.steps, args.steps), os.getloadavg()[0]))
        shape, proc, load = running.pop(0)
        r = json.loads(proc.communicate()[0].strip().splitlines()[-1])
        r.update(load_at_start=load, load_at_end=os.getloadavg()[0])
        del r["curve"]
        out.append(r)
        print(f"{shape:10s} {r['params']:>9,} params  step {r['step_cpu_s'] * 1e3:7.1f} ms CPU  "
              f"eval {r['eval_cpu_s']:6.2f} s CPU  start-up {r['startup_cpu_s']:5.2f} s CPU  "
              f"(wall {r['train_wall_s']:6.1f} s for {r['steps']} steps, load {load:.1f})", flush=True)
    return out


def run_curve(args) -> dict:
    proc = spawn(args, args.shape, args.steps, args.eval_every)
    r = json.loads(proc.communicate()[0].strip().splitlines()[-1])
    prev = None
    for row in r["curve"]:
        drop = "" if prev is None else f"  -{prev - row['val_loss']:.4f} since the last"
        print(f"step {row['step']:6d}  train {row['train_loss']:.4f}  val {row['val_loss']:.4f}{drop}")
        prev = row["val_loss"]
    print(f"{args.shape}: {r['step_cpu_s'] * 1e3:.1f} ms CPU per step, {r['eval_cpu_s']:.2f} s CPU per evaluation")
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("steps", "curve", "job"))
    ap.add_argument("--configs", default="w256-h1,w256-h2,w256-h4,w256-h8,w256-h16,w256-h32,w128-h2,w512-h8")
    ap.add_argument("--shape", default="w256-h4")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=30)
    ap.add_argument("--eval-batches", type=int, default=12)
    ap.add_argument("--jobs", type=int, default=2, help="configurations trained side by side")
    ap.add_argument("--corpus", help="folder with ids.npy and meta.json (default: built from the config)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    if args.mode == "job":
        print(json.dumps(one_job(args)))
        return
    args.corpus = corpus_dir(args.corpus)
    from headwatch.workflow.run_record import machine

    mach = machine()
    print(f"{mach['cpu_model']}, {mach['usable_cores']} cores; batch {args.batch}, context {args.context}; "
          f"load {os.getloadavg()}")
    out = run_steps(args) if args.mode == "steps" else run_curve(args)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(mach, args=vars(args) | dict(corpus=str(args.corpus)),
                                                   result=out), indent=1, default=str))


if __name__ == "__main__":
    main()
