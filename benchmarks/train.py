"""Training throughput of the sweep's model on this machine, against its own matmul rate;
with ``--arms``, peak memory and step time of dense and experts models side by side.

    .venv/bin/python benchmarks/train.py [--threads 2] [--width 256 --heads 4]
        [--batch 64 --context 128] [--steps 5] [--variants eager,compile,cudagraphs]
        [--device cuda] [--json PATH]
    .venv/bin/python benchmarks/train.py --arms dense,e8k2,e16k1 --batch 8 --context 64 \
        [--steps 5] [--device cuda]
    .venv/bin/python benchmarks/train.py --precisions float32,bf16 --width 128 --heads 2 \
        --batch 8 --context 64 [--train-steps 300] [--seeds 0,1] [--arm dense]

Measures, in one run and with the same thread count:
  1. the float32 matmul rate on the device (square matmuls of 1024 and 2048 on a CPU,
     4096 and 8192 on a GPU; full float32, no TF32): the yardstick;
  2. tokens/s of full training steps (forward, loss, backward, gradient clipping,
     fused AdamW step), as headwatch.sweep.train runs them, for each variant
     (eager; torch.compile of the model; cudagraphs: torch.compile with CUDA graphs,
     mode="reduce-overhead", CUDA only). ``--json PATH`` writes the figures as they come
     (after the warm-up, after each round), so a run cut short keeps what it measured.
The machine may be shared: rounds of (1) and (2) are interleaved and the best of
each is compared (both measured under the same background load); medians are
printed beside them.

With ``--arms`` each arm (``dense``; ``e{E}k{k}``: E experts, top k, expert width
4·width ÷ k; ``b{w}`` appended: balancing loss of weight w) runs in a fresh process
(so a peak resident set is that arm's alone): warm-up steps, then timed steps, and
it prints the resident set before the first step, the peak resident set (CPU), the
CUDA allocator's peak (GPU) and the best and median seconds per step.

With ``--precisions`` it trains with headwatch.sweep.train (two plays, ~120 k
characters) once per precision and seed and prints the final validation and
training losses: what a precision changes, beside the seed-to-seed spread.

FLOPs counted per training step (forward + backward = 3 × forward), PaLM convention:
  6 × P_matmul × tokens            P_matmul = matmul weights: per layer 4·W² (q,k,v,o)
                                   + 2·f·W² (FFN), plus the output head W·V
                                   (embeddings are lookups, norms/biases are not matmuls)
  + 12 × layers × context × W × tokens   attention scores q·kᵀ and weights·v over the
                                   full T×T square (no discount for the causal mask)
Elementwise work (LayerNorm, GELU, softmax, AdamW) is not counted: it is the overhead
that keeps the achieved rate below the matmul rate.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from headwatch.charlm.model import CharLM  # noqa: E402
from headwatch.charlm.spec import ModelSpec  # noqa: E402
from headwatch.sweep.train import make_optimizer, settings_of  # noqa: E402

VOCAB = 65   # the size of the Shakespeare character vocabulary


def matmul_rate(seconds: float = 0.5, device: str = "cpu") -> tuple[float, int]:
    """Best float32 FLOP/s over square matmuls of a few sizes on ``device``."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    best = (0.0, 0)
    for n in ((4096, 8192) if dev.type == "cuda" else (1024, 2048)):
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        for _ in range(2):
            a @ b
        sync()
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            k += 1
            sync()
        rate = 2 * n ** 3 * k / (time.perf_counter() - t0)
        best = max(best, (rate, n))
    return best


def flops_per_step(width, heads, layers, context, batch, ffn=4, vocab=VOCAB) -> dict:
    p_matmul = layers * (4 + 2 * ffn) * width * width + width * vocab
    tokens = batch * context
    return dict(p_matmul=p_matmul, dense=6 * p_matmul * tokens,
                attention=12 * layers * context * width * tokens)


VARIANTS = ("eager", "compile", "cudagraphs")
ARM = re.compile(r"dense|e(\d+)k(\d+)(?:b([0-9.]+))?")


def arm_options(arm: str) -> tuple[dict, float]:
    """CharLM options and balancing weight of an arm name (dense, e8k2, e16k1, e8k2b0.01)."""
    m = ARM.fullmatch(arm)
    if not m:
        raise SystemExit(f"--arms: {arm!r} is not dense or e<experts>k<top_k>[b<balance>]")
    if arm == "dense":
        return {}, 0.0
    return dict(experts=int(m[1]), top_k=int(m[2])), float(m[3] or 0.0)


def make_step(args, variant: str, arm: str = "dense"):
    """One full training step of the sweep's model (as headwatch.sweep.train runs it)."""
    device = torch.device(args.device)
    options, balance = arm_options(arm)
    torch.manual_seed(0)
    model = CharLM(ModelSpec(VOCAB, args.width, args.heads, layers=args.layers, context=args.context,
                             **options)).to(device)
    s = settings_of(dict(steps=1, batch=args.batch, lr=1e-3, min_lr=1e-4, warmup=0, weight_decay=0.1,
                         eval_every=1, eval_batches=1, checkpoint_every=1))
    opt = make_optimizer(model, s, device)
    if variant == "cudagraphs" and device.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    fwd = model if variant == "eager" else torch.compile(model, mode="reduce-overhead" if variant == "cudagraphs"
                                                         else None)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (args.batch, args.context), generator=g).to(device)
    y = torch.randint(0, VOCAB, (args.batch, args.context), generator=g).to(device)

    def step():
        loss = F.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        (loss + balance * torch.stack(model.balance_losses).mean() if balance else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rss_mb() -> float:
    """This process's resident set now (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one_arm(args) -> dict:
    """Run one arm in this process; its memory and step times."""
    step = make_step(args, "eager", args.one_arm)
    before = rss_mb()
    for _ in range(args.warmup):
        step()
    times = [timed(step) for _ in range(args.steps * args.rounds)]
    out = dict(arm=args.one_arm, rss_before_mb=before, peak_rss_mb=resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024, best_s=min(times), median_s=sorted(times)[len(times) // 2])
    if args.device.startswith("cuda"):
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(args.device) / 2**20
    return out


def run_arms(args, argv) -> None:
    """Each arm in a fresh process (its own peak resident set); one table."""
    rows = []
    for arm in args.arms.split(","):
        arm_options(arm)
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one-arm", arm]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"arm {arm} failed:\n{done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"width {args.width}, heads {args.heads}, layers {args.layers}; batch {args.batch} x context "
          f"{args.context} = {args.batch * args.context:,} tokens/step; {args.warmup} warm-up + "
          f"{args.steps * args.rounds} timed steps per arm; device {args.device}, "
          f"{args.threads} thread(s); torch {torch.__version__}")
    cuda = "cuda_peak_mb" in rows[0]
    print(f"{'arm':<10}{'params':>12}{'RSS before':>12}{'peak RSS':>10}{'growth':>8}"
          + (f"{'CUDA peak':>11}" if cuda else "") + f"{'best s/step':>13}{'median':>8}")
    for r in rows:
        options, _ = arm_options(r["arm"])
        params = ModelSpec(VOCAB, args.width, args.heads, layers=args.layers, context=args.context,
                           **options).param_counts()["total"]
        print(f"{r['arm']:<10}{params:>12,}{r['rss_before_mb']:>10.0f}MB{r['peak_rss_mb']:>8.0f}MB"
              f"{r['peak_rss_mb'] - r['rss_before_mb']:>6.0f}MB"
              + (f"{r['cuda_peak_mb']:>9.0f}MB" if cuda else "")
              + f"{r['best_s']:>13.3f}{r['median_s']:>8.3f}")


def compare_precisions(args) -> None:
    """Final losses of the same runs under each precision (same seeds, data, init)."""
    import numpy as np

    from headwatch.charlm.corpus import build_corpus
    from headwatch.sweep.train import train

    corpus = build_corpus(plays=["tragedies/macbeth", "tragedies/hamlet"], target_chars=120_000)
    ids, meta = corpus.ids(), corpus.meta()
    options, balance = arm_options(args.arm)
    model = dict(width=args.width, heads=args.heads, layers=args.layers, context=args.context, **options,
                 **(dict(balance=balance) if options else {}))
    steps = args.train_steps
    settings = dict(steps=steps, batch=args.batch, lr=1e-3, min_lr=1e-4, warmup=max(1, steps // 20),
                    weight_decay=0.1, eval_every=steps, eval_batches=20, checkpoint_every=steps)
    seeds = [int(x) for x in args.seeds.split(",")]
    print(f"{args.arm} {model}; {steps} steps of {args.batch} x {args.context}; seeds {seeds}; "
          f"device {args.device}, {args.threads} thread(s); torch {torch.__version__}")
    finals = {}
    for precision in args.precisions.split(","):
        t0 = time.perf_counter()
        runs = [train(ids, meta, model, seed, settings, device=args.device, precision=precision)[1].iloc[-1]
                for seed in seeds]
        finals[precision] = np.array([r["val_loss"] for r in runs])
        print(f"{precision:<8} val {' '.join(f'{r.val_loss:.5f}' for r in runs)}  train "
              f"{' '.join(f'{r.train_loss:.5f}' for r in runs)}  ({time.perf_counter() - t0:.0f} s)")
    ref = args.precisions.split(",")[0]
    noise = f"{finals[ref].std(ddof=1):.5f}" if len(seeds) > 1 else "(one seed)"
    for precision, v in finals.items():
        if precision != ref:
            d = v - finals[ref]
            print(f"{precision} - {ref}: val loss {' '.join(f'{x:+.5f}' for x in d)} nats/char "
                  f"(mean {d.mean():+.5f}); seed std of {ref}: {noise}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per variant and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (matmul rate, timed steps)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--variants", default="eager,compile", help=f"from {','.join(VARIANTS)}")
    ap.add_argument("--json", help="write the figures here (as they come)")
    ap.add_argument("--arms", help="compare memory and time of these arms instead, e.g. dense,e8k2,e16k1")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--one-arm", help=argparse.SUPPRESS)
    ap.add_argument("--precisions",
                    help="train under each of these (float32,bf16,tf32) and compare the final losses")
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--arm", default="dense", help="with --precisions: dense or e<E>k<k>[b<w>]")
    args = ap.parse_args(argv)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: {unknown} not among {list(VARIANTS)}")
    torch.set_num_threads(args.threads)
    if args.one_arm:
        print(json.dumps(one_arm(args)))
        return
    if args.arms:
        run_arms(args, argv)
        return
    if args.precisions:
        compare_precisions(args)
        return

    f = flops_per_step(args.width, args.heads, args.layers, args.context, args.batch)
    total = f["dense"] + f["attention"]
    params = ModelSpec(VOCAB, args.width, args.heads, layers=args.layers,
                       context=args.context).param_counts()["total"]
    print(f"model: width {args.width}, heads {args.heads}, layers {args.layers}, "
          f"{params:,} parameters ({f['p_matmul']:,} in matmuls); batch {args.batch} x context "
          f"{args.context} = {args.batch * args.context:,} tokens/step; torch {torch.__version__}, "
          f"device {args.device}, {args.threads} thread(s)", flush=True)
    record = dict(device=args.device, torch=torch.__version__, width=args.width, heads=args.heads,
                  layers=args.layers, batch=args.batch, context=args.context, params=params,
                  flops_per_step=total, variants={}, failed={}, matmul_rates=[])

    def keep() -> None:
        """The figures so far, in --json (a run cut short keeps what it measured)."""
        for v, t in times.items():
            if t:
                best = min(t)
                rates = record["matmul_rates"]
                record["variants"][v] = dict(best_s=best, median_s=sorted(t)[len(t) // 2], steps=len(t),
                                             tokens_per_s=args.batch * args.context / best,
                                             gflops=total / best / 1e9, warmup_s=warm[v],
                                             of_matmul=total / best / max(rates) if rates else None)
        if args.json:                   # whole or not at all: a reader never sees half a file
            part = Path(args.json + ".part")
            part.write_text(json.dumps(record, indent=1))
            part.replace(args.json)

    # Other processes may share this machine: interleave rounds of (matmul rate, steps of
    # every variant) and compare the best of each, both measured under the same load.
    steps, warm, times = {}, {}, {}
    for v in args.variants.split(","):
        try:
            steps[v] = make_step(args, v)
            warm[v] = sum(timed(steps[v]) for _ in range(args.warmup))
            times[v] = []
        except Exception as err:  # e.g. no C++ compiler for torch.compile
            record["failed"][v] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
            steps.pop(v, None)
        print(f"{v}: " + (f"warm-up {warm[v]:.1f} s" if v in steps else f"failed: {record['failed'][v]}"),
              flush=True)
        keep()
    for _ in range(args.rounds):
        record["matmul_rates"].append(matmul_rate(device=args.device)[0])
        for v, fn in steps.items():
            times[v] += [timed(fn) for _ in range(args.steps)]
        keep()
    record["matmul_rates"].append(matmul_rate(device=args.device)[0])
    keep()
    rates = record["matmul_rates"]
    rate = max(rates)
    print(f"float32 matmul rate: best {rate / 1e9:.1f} GFLOP/s, median {sorted(rates)[len(rates) // 2] / 1e9:.1f} "
          f"({len(rates)} measurements)")
    print(f"counted FLOPs/step: {total / 1e9:.2f} G = 6·P·tokens {f['dense'] / 1e9:.2f} G "
          f"+ attention {f['attention'] / 1e9:.2f} G")
    print()
    print("\n".join(step_table(record)))


def step_table(record: dict) -> list[str]:
    """The variants of a --json record as table lines (what this script and the GPU check print)."""
    lines = [f"{'variant':<11}{'best s/step':>12}{'median':>8}{'tokens/s':>11}{'GFLOP/s':>9}"
             f"{'of matmul':>11}{'warm-up s':>11}"]
    for v, r in record["variants"].items():
        share = f"{r['of_matmul']:>10.0%}" if r["of_matmul"] is not None else f"{'-':>10}"
        lines.append(f"{v:<11}{r['best_s']:>12.4f}{r['median_s']:>8.4f}{r['tokens_per_s']:>11,.0f}"
                     f"{r['gflops']:>9.1f}{share}{r['warmup_s']:>11.1f}")
    return lines + [f"{v:<11} failed: {why}" for v, why in record["failed"].items()]


if __name__ == "__main__":
    main()
