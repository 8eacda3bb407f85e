"""Training throughput of the sweep's model on this machine, against its own matmul rate.

    .venv/bin/python benchmarks/train.py [--threads 2] [--width 256 --heads 4]
        [--batch 64 --context 128] [--steps 5] [--variants eager,compile]

Measures, in one run and with the same thread count:
  1. the float32 matmul rate (square matmuls of 1024 and 2048): the yardstick;
  2. tokens/s of full training steps (forward, loss, backward, gradient clipping,
     fused AdamW step), as headwatch.charlm.train runs them, for each variant
     (eager; torch.compile of the model).
The machine may be shared: rounds of (1) and (2) are interleaved and the best of
each is compared (both measured under the same background load); medians are
printed beside them.

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
import os
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from headwatch.charlm.model import CharLM, count_params  # noqa: E402
from headwatch.charlm.train import make_optimizer, settings_of  # noqa: E402

VOCAB = 65   # the size of the Shakespeare character vocabulary


def matmul_rate(seconds: float = 0.5) -> tuple[float, int]:
    """Best float32 FLOP/s over square matmuls of a few sizes."""
    best = (0.0, 0)
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(2):
            a @ b
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            k += 1
        rate = 2 * n ** 3 * k / (time.perf_counter() - t0)
        best = max(best, (rate, n))
    return best


def flops_per_step(width, heads, layers, context, batch, ffn=4, vocab=VOCAB) -> dict:
    p_matmul = layers * (4 + 2 * ffn) * width * width + width * vocab
    tokens = batch * context
    return dict(p_matmul=p_matmul, dense=6 * p_matmul * tokens,
                attention=12 * layers * context * width * tokens)


def make_step(args, variant: str):
    """One full training step of the sweep's model (as headwatch.charlm.train runs it)."""
    torch.manual_seed(0)
    model = CharLM(VOCAB, args.width, args.heads, layers=args.layers, context=args.context)
    s = settings_of(dict(steps=1, batch=args.batch, lr=1e-3, min_lr=1e-4, warmup=0, weight_decay=0.1,
                         eval_every=1, eval_batches=1, checkpoint_every=1))
    opt = make_optimizer(model, s, torch.device("cpu"))
    fwd = torch.compile(model) if variant == "compile" else model
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (args.batch, args.context), generator=g)
    y = torch.randint(0, VOCAB, (args.batch, args.context), generator=g)

    def step():
        loss = F.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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
    ap.add_argument("--variants", default="eager,compile")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    f = flops_per_step(args.width, args.heads, args.layers, args.context, args.batch)
    total = f["dense"] + f["attention"]
    params = count_params(VOCAB, args.width, args.layers, args.context)["total"]
    print(f"model: width {args.width}, heads {args.heads}, layers {args.layers}, "
          f"{params:,} parameters ({f['p_matmul']:,} in matmuls); batch {args.batch} x context "
          f"{args.context} = {args.batch * args.context:,} tokens/step; torch {torch.__version__}, "
          f"{args.threads} thread(s)")
    # Other processes share this machine: interleave rounds of (matmul rate, steps of
    # every variant) and compare the best of each, both measured under the same load.
    steps, warm, failed = {}, {}, {}
    for v in args.variants.split(","):
        try:
            steps[v] = make_step(args, v)
            warm[v] = sum(timed(steps[v]) for _ in range(args.warmup))
        except Exception as err:  # e.g. no C++ compiler for torch.compile
            failed[v] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
            steps.pop(v, None)
    rates, times = [], {v: [] for v in steps}
    for _ in range(args.rounds):
        rates.append(matmul_rate()[0])
        for v, fn in steps.items():
            times[v] += [timed(fn) for _ in range(args.steps)]
    rates.append(matmul_rate()[0])
    rate = max(rates)
    print(f"float32 matmul rate: best {rate / 1e9:.1f} GFLOP/s, median {sorted(rates)[len(rates) // 2] / 1e9:.1f} "
          f"({len(rates)} measurements, square 1024 and 2048)")
    print(f"counted FLOPs/step: {total / 1e9:.2f} G = 6·P·tokens {f['dense'] / 1e9:.2f} G "
          f"+ attention {f['attention'] / 1e9:.2f} G")
    print()
    print(f"{'variant':<10}{'best s/step':>12}{'median':>8}{'tokens/s':>10}{'GFLOP/s':>9}"
          f"{'of matmul':>11}{'warm-up s':>11}")
    for v, t in times.items():
        best, med = min(t), sorted(t)[len(t) // 2]
        achieved = total / best
        print(f"{v:<10}{best:>12.3f}{med:>8.3f}{args.batch * args.context / best:>10,.0f}"
              f"{achieved / 1e9:>9.1f}{achieved / rate:>10.0%}{warm[v]:>11.1f}")
    for v, why in failed.items():
        print(f"{v:<10} failed: {why}")


if __name__ == "__main__":
    main()
