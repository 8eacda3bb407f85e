"""Training throughput of the sweep's model on this machine, against its own matmul rate;
with ``--arms``, peak memory and step time of dense and experts models side by side.

    .venv/bin/python benchmarks/train.py [--threads 2] [--width 256 --heads 4]
        [--batch 64 --context 128] [--steps 5] [--variants eager,compile,bf16,bf16-compile,cudagraphs]
        [--layout] [--profile VARIANT] [--device cuda] [--json PATH]
    .venv/bin/python benchmarks/train.py --laptop        # the laptop run's step, every variant and layout
    .venv/bin/python benchmarks/train.py --arms dense,e8k2,e16k1 --batch 8 --context 64 \
        [--steps 5] [--device cuda] [--stack 3] [--variants eager,bf16] [--arm-profile 8] [--json PATH]
    .venv/bin/python benchmarks/train.py --arms e8k2 --width 128 --heads 2 --layers 2 --batch 4 \
        --context 64 --stack 1,16 --routing stack,model --arm-rounds 3 --threads 2    # one routing or many
    .venv/bin/python benchmarks/train.py --precisions float32,bf16 --width 128 --heads 2 \
        --batch 8 --context 64 [--train-steps 300] [--seeds 0,1] [--arm dense]
    .venv/bin/python benchmarks/train.py --precisions float32,bf16 --laptop   # the laptop-scale check
    .venv/bin/python benchmarks/train.py --ops dense,e8k2 --stack 1,16 --width 128 --heads 2 --layers 2 \
        --batch 4 --context 64 --threads 1 [--json PATH]         # the operators of one step

Measures, in one run and with the same thread count:
  1. the float32 matmul rate on the device (square matmuls of 1024 and 2048 on a CPU,
     4096 and 8192 on a GPU; full float32, no TF32): the yardstick;
  2. tokens/s (= characters/s for the character vocabulary) of full training steps (forward,
     loss, backward, gradient clipping, fused AdamW step), as headwatch.sweep.train runs them,
     for each variant: eager float32; compile (torch.compile of the model, as ``sweep.compile``);
     bf16 (autocast to bfloat16, as ``sweep.precision: bf16``) eager and compiled; cudagraphs
     (torch.compile with CUDA graphs, mode="reduce-overhead", CUDA only). Each is also given
     against eager float32 (``speed-up``). Whether the device has bfloat16 matmuls is printed
     (:func:`headwatch.sweep.train.bf16_supported`); without them the bf16 variants run torch's
     reference loop and the sweep itself trains in float32. ``--json PATH`` writes the figures
     as they come (after the warm-up, after each round), so a run cut short keeps what it measured;
  3. with ``--layout``: characters/s of the whole machine for two layouts of the laptop run, the
     eager float32 step: one process of ``--threads`` threads, and ``--threads`` processes of
     one thread each side by side (what ``snakemake --cores 2`` with ``sweep.threads: 1`` runs),
     each process timed on its own, interleaved over ``--rounds``;
  4. with ``--profile VARIANT``: torch.profiler's table of a few steps of that variant (where
     the time goes beyond the matmuls).
``--laptop`` sets the laptop run's step (width 256, 4 heads, batch 8 x 128, 2 threads) and asks
for every variant, the layouts and a profile of eager float32: the speed figures of protocol §7,
laptop scale, in one run.
The machine may be shared: rounds of (1) and (2) are interleaved and the best of
each is compared (both measured under the same background load); medians are
printed beside them.

With ``--arms`` each arm (``dense``; ``e{E}k{k}``: E experts, top k, expert width
4·width ÷ k; ``b{w}`` appended: balancing loss of weight w) runs in a fresh process
(so a peak resident set is that arm's alone) under each of ``--variants`` (eager float32
unless given; ``--stack`` models a step, as a training job stacks a shape's seeds; several sizes,
``--stack 1,16``, one row each): warm-up steps, then timed steps, and it prints the resident set
before the first step, the peak resident set (CPU), the CUDA allocator's peak and the host
synchronisations of one step (GPU), the operators of one step (torch.profiler: every aten operator,
and those called from outside another, each a dispatch from Python or autograd and on a GPU at
least one kernel launch), the best and median seconds per step and per model, tokens/s, the time
against the dense arm and a model's time against the same arm at a stack of one.
``--routing stack,model`` times the experts routed for the whole stack at once (``stack``, as the
sweep trains) beside each model's tokens routed alone, one model after another (``model``: what
the stack did before, :class:`RoutedByModel`). ``--arm-rounds N`` runs the whole set of processes N
times, interleaved, and keeps each row's best round (a shared machine's load falls on all alike).
``--arm-profile N`` adds each arm's N costliest kernels (operators on a CPU): where an
experts step spends what a dense step does not. ``--json`` keeps the record as it comes.

With ``--ops`` it counts the aten operators of one eager step of each arm at each of ``--stack``
models (:func:`op_counts`: every operator, and the kernels among them — on a GPU each a launch), of
its forward pass alone and of what follows the backward pass (the clipping and the optimizer), beside
the step's time: what a step costs in launches as the models grow.

With ``--precisions`` it trains with headwatch.sweep.train (two plays, ~120 k
characters) once per precision and seed and prints the final validation and
training losses: what a precision changes, beside the seed-to-seed spread. With ``--laptop``
too, exactly the laptop run's w256-h4 (config/laptop.yaml over config/config.yaml: the
1.1 M-character corpus, 600 steps of 8 x 128, its schedule and evaluation, seeds 0, 1, 2, one
thread per run) and a verdict (protocol §7, laptop scale): a precision passes when every
seed's difference from the first precision, and the bootstrap interval of their mean, lie
within ± the first precision's seed std. A device without bfloat16 matmuls is refused for bf16
(the sweep would train in float32; ``--force-bf16`` runs torch's slow reference kernels).

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from headwatch.charlm.model import CharLM, route_experts  # noqa: E402
from headwatch.charlm.spec import ModelSpec  # noqa: E402
from headwatch.settings.sweep import BootstrapSettings, CorpusSettings, TrainSettings  # noqa: E402
from headwatch.charlm.loop import Schedule, Trainer  # noqa: E402
from headwatch.charlm.stack import StackedCharLM  # noqa: E402
from headwatch.sweep.train import bf16_supported  # noqa: E402

VOCAB = 65   # the size of the Shakespeare character vocabulary


def matmul_rate(seconds: float = 0.5, device: str = "cpu", dtype=torch.float32) -> tuple[float, int]:
    """Best FLOP/s over square matmuls of a few sizes on ``device`` in ``dtype``."""
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    best = (0.0, 0)
    for n in ((4096, 8192) if dev.type == "cuda" else (1024, 2048)):
        a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
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


VARIANTS = ("eager", "compile", "bf16", "bf16-compile", "cudagraphs")
"""eager float32; torch.compile; bf16 autocast, eager and compiled; CUDA graphs (CUDA only)."""
ARM = re.compile(r"dense|e(\d+)k(\d+)(?:b([0-9.]+))?")


def arm_options(arm: str) -> tuple[dict, float]:
    """CharLM options and balancing weight of an arm name (dense, e8k2, e16k1, e8k2b0.01)."""
    m = ARM.fullmatch(arm)
    if not m:
        raise SystemExit(f"--arms: {arm!r} is not dense or e<experts>k<top_k>[b<balance>]")
    if arm == "dense":
        return {}, 0.0
    return dict(experts=int(m[1]), top_k=int(m[2])), float(m[3] or 0.0)


ROUTINGS = ("stack", "model")
"""How a stack's experts are routed: every model at once (the sweep's), or model by model."""


class RoutedByModel(StackedCharLM):
    """A stack whose experts route each model's tokens alone, one model after another — what
    :class:`StackedCharLM` did before it routed the whole stack at once: ``--routing model``, the
    baseline whose operators grow with the models."""

    def _ffn(self, h: torch.Tensor, l: int) -> torch.Tensor:
        if not self.experts:
            return super()._ffn(h, l)
        weights = [self.p(f"blocks.{l}.ffn.{w}") for w in ("router.weight", "w1", "b1", "w2", "b2")]
        parts = [route_experts(h[i:i + 1], *(w[i:i + 1] for w in weights), spec.routed)
                 for i, spec in enumerate(self.specs)]
        out, balance, counts = (torch.cat([part[j] for part in parts]) for j in range(3))
        self.balance_losses.append(balance)
        self._counts.append(counts)
        return out


def make_step(args, variant: str, arm: str = "dense", routing: str = "stack"):
    """One full training step of the sweep's model as headwatch.sweep.train runs it (its
    :class:`~headwatch.charlm.loop.Trainer`): ``--stack`` M models (different seeds) stacked and
    trained in one step (each model's loss and clipping, fused AdamW); M = 1 is one model.
    ``routing``: one of :data:`ROUTINGS`. The step's ``trainer`` is an attribute of it."""
    device = torch.device(args.device)
    options, balance = arm_options(arm)
    models = []
    for seed in range(args.stack):
        torch.manual_seed(seed)
        models.append(CharLM(ModelSpec(VOCAB, args.width, args.heads, layers=args.layers, context=args.context,
                                       **options)))
    if variant == "cudagraphs" and device.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    amp = (torch.autocast(device.type, dtype=torch.bfloat16) if variant.startswith("bf16")
           else torch.autocast(device.type, enabled=False))
    trainer = Trainer((RoutedByModel if routing == "model" else StackedCharLM)(models).to(device), Schedule(1e-3, 1e-4, 0, 10 ** 6),
                      weight_decay=0.1, betas=(0.9, 0.99), grad_clip=1.0, balance=[balance] * args.stack, amp=amp,
                      compile=variant in ("compile", "bf16-compile"))
    if variant == "cudagraphs":
        trainer.forward = torch.compile(trainer.stack, mode="reduce-overhead")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (args.stack, args.batch, args.context), generator=g).to(device)
    y = torch.randint(0, VOCAB, (args.stack, args.batch, args.context), generator=g).to(device)
    count = [0]

    def work():
        trainer.step(count[0], x, y)
        count[0] += 1

    def step():
        work()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step.work = work     # the step without the closing synchronisation (host_syncs counts inside it)
    step.trainer, step.x, step.y = trainer, x, y
    return step


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rss_mb() -> float:
    """This process's resident set now (Linux /proc), MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def host_syncs(work, device: torch.device) -> int | None:
    """Host synchronisations in one call of ``work`` on a CUDA device, as torch counts them
    (``torch.cuda.set_sync_debug_mode("warn")``: a warning per synchronising call, the backward
    pass's included); None off CUDA, where nothing waits on a device."""
    if device.type != "cuda":
        return None
    import warnings

    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            work()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize(device)
    return sum("synchroniz" in str(w.message) for w in caught)


def top_ops(step, device: torch.device, n: int, steps: int = 2, among: tuple[str, ...] = ()) -> dict:
    """torch.profiler over ``steps`` steps: the ``n`` costliest entries by their own time on the
    device (CUDA: the kernels; CPU: the operators' own CPU time), each per step with its share,
    and the share of all time that the entries named in ``among`` took."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = device.type == "cuda"
    with torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(steps):
            step()
    own = ((lambda e: getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0))
           if cuda else (lambda e: e.self_cpu_time_total))
    events = [e for e in prof.key_averages() if own(e) > 0]
    total = sum(own(e) for e in events)
    rows = sorted(events, key=own, reverse=True)[:n]
    return dict(clock="device" if cuda else "cpu", ms_per_step=total / 1e3 / steps,
                among_share=sum(own(e) for e in events if e.key in among) / total,
                ops=[dict(op=e.key, ms_per_step=own(e) / 1e3 / steps, share=own(e) / total,
                          calls_per_step=e.count / steps) for e in rows])


METADATA_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::as_strided", "aten::transpose",
    "aten::t", "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::expand_as",
    "aten::split", "aten::split_with_sizes", "aten::narrow", "aten::slice", "aten::select", "aten::unbind",
    "aten::flatten", "aten::unflatten", "aten::view_as_real", "aten::view_as_complex", "aten::detach",
    "aten::detach_", "aten::alias", "aten::lift_fresh", "aten::resolve_conj", "aten::resolve_neg", "aten::empty",
    "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided", "aten::to",
    "aten::set_", "aten::result_type", "aten::is_same_size", "aten::size", "aten::stride", "aten::numel"})
"""aten operators that only describe, allocate or re-label a tensor (a view, an empty tensor, ``to`` that
returns its input): on a GPU none launches a kernel."""


def op_counts(fn) -> dict:
    """The aten operators of one call of ``fn`` (torch.profiler, CPU): ``ops`` every one, those inside
    others too (how the operators of a step were first counted); ``outermost``, those not called from
    inside another operator (each a dispatch from Python or autograd; the ones inside are an operator's
    own, e.g. a CPU grouped matmul's product per group); and ``kernels``, the innermost ones that
    compute (not :data:`METADATA_OPS`): on a GPU each is a launch. ``by_op``: the kernels by name."""
    from collections import Counter

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    aten = [e for e in prof.events() if e.name.startswith("aten::")]

    def computes(e) -> bool:        # a kernel of its own, or one inside it
        return any((c.name.startswith("aten::") and c.name not in METADATA_OPS) or computes(c) for c in e.cpu_children)

    def outermost(e) -> bool:       # no aten operator above it
        parent = e.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    leaves = [e for e in aten if e.name not in METADATA_OPS and not computes(e)]
    return dict(ops=len(aten), outermost=sum(map(outermost, aten)), kernels=len(leaves),
                by_op=dict(Counter(e.name for e in leaves).most_common()))


def step_ops(args, arm: str) -> dict:
    """One eager training step of ``arm`` at ``--stack`` models (:func:`make_step`, after two warm-up
    steps): :func:`op_counts` of the whole step, of its forward pass alone and of what follows the
    backward pass (:meth:`~headwatch.charlm.loop.Trainer.update`: the clipping and the optimizer), and the
    best of ``--steps`` seconds a step."""
    step = make_step(args, "eager", arm)
    trainer, x, y = step.trainer, step.x, step.y
    step()
    step()
    whole = op_counts(step.work)
    forward = op_counts(lambda: trainer.losses(x, y))

    def backward_then_update():
        trainer.losses(x, y).sum().backward()
        update.update(op_counts(trainer.update))

    update: dict = {}
    backward_then_update()
    best = min(timed(step) for _ in range(args.steps))
    return dict(arm=arm, models=args.stack, ops=whole["ops"], kernels=whole["kernels"], forward_ops=forward["ops"],
                forward_kernels=forward["kernels"], update_ops=update["ops"], update_kernels=update["kernels"],
                best_s=best, by_op=whole["by_op"])


def ops_table(args) -> list[dict]:
    """--ops: :func:`step_ops` of every arm of ``--ops`` at every stack size of ``--stack``, as a table."""
    rows = []
    print(f"aten operators of one training step (torch.profiler, CPU, eager float32): width {args.width}, heads "
          f"{args.heads}, layers {args.layers}, batch {args.batch} x context {args.context} a model; torch "
          f"{torch.__version__}, {args.threads} thread(s)")
    print(f"{'arm':<8}{'models':>7}{'ops':>8}{'kernels':>9}{'forward':>9}{'(kernels)':>10}{'update':>8}"
          f"{'(kernels)':>10}{'s/step':>9}{'s/step/model':>14}")
    for arm in args.ops.split(","):
        arm_options(arm)
        for m in args.stacks:
            args.stack = m
            r = step_ops(args, arm)
            rows.append(r)
            print(f"{arm:<8}{m:>7}{r['ops']:>8,}{r['kernels']:>9,}{r['forward_ops']:>9,}{r['forward_kernels']:>10,}"
                  f"{r['update_ops']:>8,}{r['update_kernels']:>10,}{r['best_s']:>9.4f}{r['best_s'] / m:>14.4f}",
                  flush=True)
    for r in rows:
        top = ", ".join(f"{k.removeprefix('aten::')} {v}" for k, v in list(r["by_op"].items())[:8])
        print(f"-- {r['arm']} x {r['models']}: the most frequent kernels: {top}")
    return rows


def one_arm(args) -> dict:
    """Run one arm under one variant, stack size and routing in this process: its memory, step
    times and operators; with ``--arm-profile N`` the N costliest kernels (operators on a CPU) of a
    step, and on CUDA the host synchronisations of a step."""
    device = torch.device(args.device)
    step = make_step(args, args.one_variant, args.one_arm, args.routing)
    before = rss_mb()
    for _ in range(args.warmup):
        step()
    times = [timed(step) for _ in range(args.steps * args.rounds)]
    best = min(times)
    out = dict(arm=args.one_arm, variant=args.one_variant, stack=args.stack, routing=args.routing,
               rss_before_mb=before, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               best_s=best, median_s=sorted(times)[len(times) // 2], steps=len(times),
               tokens_per_s=args.stack * args.batch * args.context / best, ops_per_step=op_counts(step))
    if device.type == "cuda":
        out["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
        out["host_syncs_per_step"] = host_syncs(step.work, device)
    if args.arm_profile:
        out["profile"] = top_ops(step, device, args.arm_profile)
    return out


def run_arms(args, argv) -> dict:
    """Each arm under each of ``--variants``, stack sizes and routings in a fresh process (its own
    peak resident set), the whole set ``--arm-rounds`` times, interleaved; one table of each row's
    best round. With ``--json`` the record is written after every process (one cut short keeps the
    rows it has) and marked ``finished`` at the end. ``stack`` is the one stack size, or None when
    several were timed (each row names its own)."""
    arms, variants, stacks, routings = args.arms.split(","), args.variants.split(","), args.stacks, args.routings
    for arm in arms:
        arm_options(arm)
    record = dict(device=args.device, torch=torch.__version__, width=args.width, heads=args.heads,
                  layers=args.layers, batch=args.batch, context=args.context,
                  stack=stacks[0] if len(stacks) == 1 else None, stacks=stacks, routings=routings,
                  rounds=args.arm_rounds, threads=args.threads, warmup=args.warmup, steps=args.steps * args.rounds,
                  rows=[],
                  params={arm: ModelSpec(VOCAB, args.width, args.heads, layers=args.layers, context=args.context,
                                         **arm_options(arm)[0]).param_counts()["total"] for arm in arms})

    def keep() -> None:
        if args.json:
            part = Path(args.json + ".part")
            part.write_text(json.dumps(record, indent=1))
            part.replace(args.json)

    keep()
    base = argv if argv is not None else sys.argv[1:]
    runs = [(v, a, m, r) for v in variants for a in arms for m in stacks
            for r in (routings if arm_options(a)[0] else routings[:1])]       # a dense arm routes nothing
    for _ in range(args.arm_rounds):
        for variant, arm, stack, routing in runs:
            cmd = [sys.executable, __file__, *base, "--one-arm", arm, "--one-variant", variant, "--stack", str(stack),
                   "--routing", routing]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"arm {arm} ({variant}, stack {stack}, routing {routing}) failed:\n"
                                 f"{done.stderr[-2000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            same = [i for i, r in enumerate(record["rows"]) if _run_of(r) == _run_of(row)]
            if not same:
                record["rows"].append(row)
            elif row["best_s"] < record["rows"][same[0]]["best_s"]:      # the best round of each run
                record["rows"][same[0]] = row
            keep()
    record["finished"] = True
    keep()
    print("\n".join(arms_table(record)))
    return record


def _run_of(row: dict) -> tuple:
    """What a row of an --arms record measured: (arm, variant, stack, routing)."""
    return row["arm"], row["variant"], row.get("stack"), row.get("routing", "stack")


def arms_table(record: dict) -> list[str]:
    """An --arms record as lines: the setting, a row per arm, variant, stack size and routing (against
    the dense arm of the same variant and stack where there is one, and per model against the same
    arm, variant and routing at a stack of one), then each row's profile where it was taken. Rows
    of records older than the stack sizes and routings are of the record's stack, routed at once."""
    rows = record["rows"]
    cuda = any("cuda_peak_mb" in r for r in rows)
    w = max([len("arm"), *(len(r["arm"]) for r in rows)]) + 2
    stack_of = lambda r: r.get("stack") or record["stack"]
    stacks = record.get("stacks") or [record["stack"]]
    lines = [f"width {record['width']}, heads {record['heads']}, layers {record['layers']}; "
             f"{' or '.join(map(str, stacks))} model(s) stacked a step, each batch {record['batch']} x context "
             f"{record['context']}; {record['warmup']} warm-up + {record['steps']} timed steps per arm"
             + (f", best of {record['rounds']} interleaved rounds" if record.get("rounds", 1) > 1 else "")
             + f"; device {record['device']}, {record['threads']} thread(s); torch {record['torch']}"
             + ("" if record.get("finished") else " (cut short: the arms it measured)"),
             "routing: stack = every model's experts in one routing; model = each model's alone, one after another; "
             "ops: aten operators of a step, all / outermost (torch.profiler)",
             f"{'arm':<{w}}{'variant':<9}{'stack':>6}{'routing':>8}{'params':>12}{'RSS before':>12}{'peak RSS':>10}"
             f"{'growth':>8}" + (f"{'CUDA peak':>11}{'syncs/step':>12}" if cuda else "")
             + f"{'ops all/outer':>15}{'best s/step':>13}{'median':>8}{'s/model':>9}{'tokens/s':>12}{'vs dense':>10}"
             f"{'vs 1 model':>11}"]
    dense = {(r["variant"], stack_of(r)): r["best_s"] for r in rows if r["arm"] == "dense"}
    alone = {(r["arm"], r["variant"], r.get("routing", "stack")): r["best_s"] for r in rows if stack_of(r) == 1}
    for r in rows:
        m, routing = stack_of(r), r.get("routing", "stack")
        slower = (f"{r['best_s'] / dense[r['variant'], m]:>9.2f}x" if (r["variant"], m) in dense else f"{'-':>10}")
        one = alone.get((r["arm"], r["variant"], routing))
        per_model = f"{r['best_s'] / m / one:>10.2f}x" if one else f"{'-':>11}"
        ops = r.get("ops_per_step")
        lines.append(f"{r['arm']:<{w}}{r['variant']:<9}{m:>6}{routing:>8}{record['params'][r['arm']]:>12,}"
                     f"{r['rss_before_mb']:>10.0f}MB{r['peak_rss_mb']:>8.0f}MB{r['peak_rss_mb'] - r['rss_before_mb']:>6.0f}MB"
                     + (f"{r['cuda_peak_mb']:>9.0f}MB{r['host_syncs_per_step']:>12}" if cuda else "")
                     + (f"{ops['ops']:>8,}/{ops['outermost']:<6,}" if ops else f"{'-':>15}")
                     + f"{r['best_s']:>13.4f}{r['median_s']:>8.4f}{r['best_s'] / m:>9.4f}{r['tokens_per_s']:>12,.0f}"
                     f"{slower}{per_model}")
    for r in rows:
        prof = r.get("profile")
        if prof:
            lines.append(f"-- {r['arm']} {r['variant']} (stack {stack_of(r)}, routing {r.get('routing', 'stack')}): "
                         f"{prof['ms_per_step']:.1f} ms of {prof['clock']} time a step in "
                         f"{'kernels' if prof['clock'] == 'device' else 'operators'}; the costliest:")
            lines += [f"   {o['ms_per_step']:>8.2f} ms {o['share']:>6.1%} {o['calls_per_step']:>6.0f} calls  "
                      f"{o['op'][:90]}" for o in prof["ops"]]
    return lines


def one_layout(args) -> dict:
    """--one-layout: this process's step times of the eager float32 step (a process of a layout)."""
    step = make_step(args, "eager")
    for _ in range(args.warmup):
        step()
    return dict(times=[timed(step) for _ in range(args.steps)])


def layouts(args, argv) -> list[dict]:
    """Characters/s of the whole machine: one process of ``--threads`` threads, against
    ``--threads`` processes of one thread side by side; ``--rounds`` rounds, interleaved. Each
    process's steps are timed on its own; the machine's rate is the sum of its processes' rates
    (best: from each process's best step; median: from its median step)."""
    base = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--layout"]
    layouts_ = [(f"1 process x {args.threads} threads", 1, args.threads),
                (f"{args.threads} processes x 1 thread", args.threads, 1)]
    rates = {name: dict(best=[], median=[]) for name, _, _ in layouts_}
    for _ in range(args.rounds):
        for name, procs, threads in layouts_:
            cmd = [sys.executable, __file__, *base, "--threads", str(threads), "--one-layout",
                   "--steps", str(max(args.steps * 2, 4))]
            running = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                       for _ in range(procs)]
            outs = [p.communicate() for p in running]
            if any(p.returncode for p in running):
                raise SystemExit(f"layout {name} failed:\n{outs[0][1][-2000:]}")
            times = [json.loads(o.strip().splitlines()[-1])["times"] for o, _ in outs]
            tokens = args.batch * args.context
            rates[name]["best"].append(sum(tokens / min(t) for t in times))
            rates[name]["median"].append(sum(tokens / sorted(t)[len(t) // 2] for t in times))
    return [dict(layout=name, best=max(r["best"]), median=sorted(r["median"])[len(r["median"]) // 2])
            for name, r in rates.items()]


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
           "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def profile(args, variant: str, steps: int = 3) -> list[str]:
    """torch.profiler over ``steps`` training steps of ``variant`` (:func:`top_ops`): the costliest
    operators by their own CPU time, and the share of the matmuls and attention kernels
    (:data:`MATMULS`)."""
    step = make_step(args, variant)
    for _ in range(args.warmup):
        step()
    prof = top_ops(step, torch.device("cpu"), 14, steps, among=MATMULS)
    return ([f"profile of {variant}, {steps} steps: {prof['ms_per_step']:.0f} ms of operator CPU time per step; "
             f"matmuls and attention kernels {prof['among_share']:.0%}, everything else {1 - prof['among_share']:.0%}",
             f"{'operator':<58}{'ms/step':>9}{'share':>8}{'calls/step':>12}"]
            + [f"{o['op'][:57]:<58}{o['ms_per_step']:>9.1f}{o['share']:>8.1%}{o['calls_per_step']:>12.0f}"
               for o in prof["ops"]])


def laptop_run() -> tuple[CorpusSettings, dict, TrainSettings, list[int]]:
    """The laptop run's w256-h4 (config/laptop.yaml over config/config.yaml): its corpus settings,
    model settings, training settings and seeds, read as the workflow reads them."""
    from headwatch.workflow.run_record import config_of
    from headwatch.settings.sweep import model_of, train_of
    from headwatch.sweep.plan import entry_of

    sw = config_of(ROOT, "config/laptop.yaml")["sweep"]
    split = sw["summary"]["split_sweep"]
    return (CorpusSettings.of(sw["corpus"]), model_of(sw, entry_of(sw, split, "w256-h4")),
            TrainSettings.from_config(train_of(sw, split)),
            list(sw["sweeps"][split]["seeds"]))


def _train_final(job: tuple) -> dict:
    """One run of --precisions (in a worker process of one torch thread): its final losses."""
    ids, meta, model, seed, settings, device, precision, force = job
    import headwatch.sweep.train as training

    torch.set_num_threads(1)
    if force:       # --force-bf16: torch's reference bfloat16 kernels on a device without its own
        training.bf16_supported = lambda device: True
    t0 = time.perf_counter()
    metrics, info = training.train(ids, meta, model, seed, settings, device=device, precision=precision,
                                   full_eval=False)[1:3]
    last = metrics.iloc[-1]
    return dict(precision=precision, seed=seed, val_loss=float(last["val_loss"]), train_loss=float(last["train_loss"]),
                effective=info["precision"], seconds=time.perf_counter() - t0,
                curve=metrics[["step", "val_loss"]].to_numpy().tolist())


def precision_verdict(finals: dict, ref: str, bootstrap: BootstrapSettings | dict) -> list[str]:
    """Each precision against ``ref`` on the same seeds: the per-seed differences of the final
    validation loss, their mean with its percentile bootstrap interval, ``ref``'s seed std, and the
    verdict: *within seed noise* when every difference and the whole interval lie within ± that
    std (protocol §7, laptop scale)."""
    import numpy as np
    from scipy import stats

    b = BootstrapSettings.of(bootstrap)
    base = finals[ref]
    noise = float(np.std(base, ddof=1)) if len(base) > 1 else float("nan")
    lines = []
    for precision, v in finals.items():
        if precision == ref:
            continue
        d = np.asarray(v) - np.asarray(base)
        level = b.level
        if len(d) > 1:
            ci = stats.bootstrap((d,), np.mean, n_resamples=b.resamples, method="percentile",
                                 confidence_level=level, rng=np.random.default_rng(b.seed)).confidence_interval
            lo, hi = float(ci.low), float(ci.high)
        else:
            lo = hi = float(d[0])
        within = bool(np.isfinite(noise) and (np.abs(d) <= noise).all() and -noise <= lo and hi <= noise)
        lines += [f"{precision} - {ref}, final validation loss per seed: {' '.join(f'{x:+.5f}' for x in d)} nats/char",
                  f"  mean {d.mean():+.5f} ({100 * level:g} % percentile bootstrap interval {lo:+.5f} to {hi:+.5f}); "
                  f"seed std of {ref} {noise:.5f} (ddof 1, {len(base)} seeds)",
                  f"  verdict: {precision} is {'WITHIN' if within else 'NOT within'} seed noise of {ref} "
                  f"(every difference and the interval inside ± {noise:.5f}: {within})"]
    return lines


def compare_precisions(args) -> None:
    """Final losses of the same runs under each precision (same seeds, data, init); with --laptop
    the laptop run's w256-h4 itself, and the verdict."""
    import numpy as np

    from headwatch.charlm.corpus import build_corpus

    precisions = args.precisions.split(",")
    device = torch.device(args.device)
    if "bf16" in precisions and not bf16_supported(device) and not args.force_bf16:
        raise SystemExit(f"--precisions: {device} has no bfloat16 matmul kernels (bf16_supported is False): "
                         "the sweep would train in float32 there, so the comparison would compare float32 with "
                         "itself. Run it on a CPU with AVX-512/AMX (or a GPU), or give --force-bf16 to run torch's "
                         "reference kernels (7-32 times slower than float32).")
    if args.laptop:
        c, model, settings, seeds = laptop_run()
        corpus = build_corpus(c.source, None if c.plays is None else list(c.plays), c.target_chars, c.val_fraction)
        what = f"the laptop run's w256-h4 (config/laptop.yaml), {len(corpus.text):,} characters"
    else:
        corpus = build_corpus(plays=["tragedies/macbeth", "tragedies/hamlet"], target_chars=120_000)
        options, balance = arm_options(args.arm)
        model = dict(width=args.width, heads=args.heads, layers=args.layers, context=args.context, **options,
                     **(dict(balance=balance) if options else {}))
        steps = args.train_steps
        settings = TrainSettings(steps=steps, batch=args.batch, lr=1e-3, min_lr=1e-4, warmup=max(1, steps // 20),
                                 weight_decay=0.1, eval_every=steps, eval_batches=20, checkpoint_every=steps)
        seeds = [int(x) for x in args.seeds.split(",")]
        what = f"{args.arm}, two plays"
    ids, meta = corpus.ids(), corpus.meta()
    print(f"{what}: {model}; {settings.steps} steps of {settings.batch} x {model['context']}, warm-up "
          f"{settings.warmup}; seeds {seeds}; device {device} (bfloat16 matmuls: {bf16_supported(device)}), "
          f"1 thread per run, {args.jobs} run(s) at a time; torch {torch.__version__}", flush=True)
    jobs = [(ids, meta, model, seed, settings, args.device, p, args.force_bf16) for p in precisions for seed in seeds]
    if args.jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
            done = list(pool.map(_train_final, jobs))
    else:
        done = [_train_final(j) for j in jobs]
    finals = {}
    for precision in precisions:
        runs = [r for r in done if r["precision"] == precision]
        finals[precision] = np.array([r["val_loss"] for r in runs])
        val = " ".join(f"{r['val_loss']:.5f}" for r in runs)
        train_ = " ".join(f"{r['train_loss']:.5f}" for r in runs)
        print(f"{precision:<8} (computed in {', '.join(sorted({r['effective'] for r in runs}))}) val {val}  "
              f"train {train_}  ({sum(r['seconds'] for r in runs):.0f} s of runs)")
    if args.json:        # every run's final losses and validation curve
        Path(args.json).write_text(json.dumps(done, indent=1))
    from headwatch.workflow.run_record import config_of

    print("\n".join(precision_verdict(finals, precisions[0], config_of(ROOT, "config/laptop.yaml")["sweep"]
                                      ["summary"]["bootstrap"])))


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
    ap.add_argument("--stack", default="1",
                    help="models trained in one step, stacked (the sweep's stacks); with --arms several, e.g. 1,16")
    ap.add_argument("--routing", default="stack",
                    help=f"with --arms: how the experts of a stack are routed, from {','.join(ROUTINGS)}")
    ap.add_argument("--arm-rounds", type=int, default=1, help="with --arms: rounds of every process, interleaved")
    ap.add_argument("--json", help="write the figures here (as they come)")
    ap.add_argument("--arms", help="compare memory and time of these arms instead, e.g. dense,e8k2,e16k1")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--one-arm", help=argparse.SUPPRESS)
    ap.add_argument("--one-variant", default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--arm-profile", type=int, default=0, metavar="N",
                    help="with --arms: the N costliest kernels (CUDA) or operators (CPU) of each arm's step")
    ap.add_argument("--precisions",
                    help="train under each of these (float32,bf16,tf32) and compare the final losses")
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--arm", default="dense", help="with --precisions: dense or e<E>k<k>[b<w>]")
    ap.add_argument("--laptop", action="store_true",
                    help="the laptop run's step with every variant, the layouts and a profile; with --precisions, "
                         "the laptop-scale check (config/laptop.yaml's w256-h4, 3 seeds)")
    ap.add_argument("--layout", action="store_true", help="also 1 process x N threads vs N processes x 1 thread")
    ap.add_argument("--profile", help="also torch.profiler's table of this variant")
    ap.add_argument("--jobs", type=int, default=1, help="with --precisions: runs at a time (1 thread each)")
    ap.add_argument("--force-bf16", action="store_true",
                    help="with --precisions: bf16 even without bfloat16 matmuls (torch's slow reference kernels)")
    ap.add_argument("--one-layout", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ops", metavar="ARMS", help="count the aten operators of one step of these arms (dense,e8k2) "
                                                  "at each of --stack models instead")
    args = ap.parse_args(argv)
    if args.laptop and not args.precisions:     # the laptop run's step, two threads (the machine's two cores)
        given = set(argv if argv is not None else sys.argv[1:])
        args.width, args.heads, args.layers, args.batch, args.context = 256, 4, 4, 8, 128
        args.threads = args.threads if "--threads" in given else 2
        args.variants = args.variants if "--variants" in given else "eager,compile,bf16,bf16-compile"
        args.steps = args.steps if "--steps" in given else 4
        args.rounds = args.rounds if "--rounds" in given else 4
        args.layout, args.profile = True, args.profile or "eager"
    if args.arms and "--variants" not in set(argv if argv is not None else sys.argv[1:]):
        args.variants = "eager"          # arms compare models, under one variant unless told more
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: {unknown} not among {list(VARIANTS)}")
    try:
        args.stacks = [int(m) for m in args.stack.split(",")]
    except ValueError:
        ap.error(f"--stack: {args.stack!r} is not a number of models, or (with --arms) several, e.g. 1,16")
    args.routings = args.routing.split(",")
    if min(args.stacks) < 1 or [r for r in args.routings if r not in ROUTINGS]:
        ap.error(f"--stack {args.stack!r}, --routing {args.routing!r}: stacks of at least one model, routings "
                 f"from {list(ROUTINGS)}")
    if not (args.arms or args.ops) and (len(args.stacks) > 1 or len(args.routings) > 1):
        ap.error("several --stack sizes or --routing values need --arms (or --ops: --stack sizes)")
    args.stack, args.routing = args.stacks[0], args.routings[0]
    torch.set_num_threads(args.threads)
    if args.one_arm:
        print(json.dumps(one_arm(args)))
        return
    if args.one_layout:
        print(json.dumps(one_layout(args)))
        return
    if args.ops:
        rows = ops_table(args)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return
    if args.arms:
        run_arms(args, argv)
        return
    if args.precisions:
        compare_precisions(args)
        return

    f = flops_per_step(args.width, args.heads, args.layers, args.context, args.batch)
    total = (f["dense"] + f["attention"]) * args.stack
    params = ModelSpec(VOCAB, args.width, args.heads, layers=args.layers,
                       context=args.context).param_counts()["total"]
    bf16 = bf16_supported(torch.device(args.device))
    print(f"model: width {args.width}, heads {args.heads}, layers {args.layers}, "
          f"{params:,} parameters ({f['p_matmul']:,} in matmuls); {args.stack} model(s) a step, each batch "
          f"{args.batch} x context {args.context} = {args.stack * args.batch * args.context:,} tokens/step; "
          f"torch {torch.__version__}, "
          f"device {args.device}, {args.threads} thread(s); bfloat16 matmuls: "
          + ("yes" if bf16 else "NO (torch's reference kernels: the sweep trains bf16 runs in float32 here)"),
          flush=True)
    record = dict(device=args.device, torch=torch.__version__, width=args.width, heads=args.heads,
                  layers=args.layers, batch=args.batch, context=args.context, params=params, stack=args.stack,
                  flops_per_step=total, variants={}, failed={}, matmul_rates=[], bf16_matmul_rates=[])
    # The bf16 yardstick, where the device multiplies bfloat16 (torch's reference loop elsewhere:
    # seconds per matmul, and no yardstick of the hardware).
    bf16_rate = bf16 and any(v.startswith("bf16") for v in args.variants.split(","))

    def keep() -> None:
        """The figures so far, in --json (a run cut short keeps what it measured)."""
        for v, t in times.items():
            if t:
                best = min(t)
                rates = record["bf16_matmul_rates" if v.startswith("bf16") else "matmul_rates"]
                record["variants"][v] = dict(best_s=best, median_s=sorted(t)[len(t) // 2], steps=len(t),
                                             tokens_per_s=args.stack * args.batch * args.context / best,
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
        except Exception as err:  # noqa: BLE001 -- e.g. no C++ compiler for torch.compile: the variant is reported
            record["failed"][v] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
            steps.pop(v, None)
        print(f"{v}: " + (f"warm-up {warm[v]:.1f} s" if v in steps else f"failed: {record['failed'][v]}"),
              flush=True)
        keep()
    for _ in range(args.rounds):
        record["matmul_rates"].append(matmul_rate(device=args.device)[0])
        if bf16_rate:
            record["bf16_matmul_rates"].append(matmul_rate(device=args.device, dtype=torch.bfloat16)[0])
        for v, fn in steps.items():
            times[v] += [timed(fn) for _ in range(args.steps)]
        keep()
    record["matmul_rates"].append(matmul_rate(device=args.device)[0])
    keep()
    rates = record["matmul_rates"]
    rate = max(rates)
    print(f"float32 matmul rate: best {rate / 1e9:.1f} GFLOP/s, median {sorted(rates)[len(rates) // 2] / 1e9:.1f} "
          f"({len(rates)} measurements)")
    b16 = record["bf16_matmul_rates"]
    print(f"bfloat16 matmul rate: best {max(b16) / 1e9:.1f} GFLOP/s, median {sorted(b16)[len(b16) // 2] / 1e9:.1f} "
          f"({len(b16)} measurements; the bf16 variants' 'of matmul')" if b16 else
          "bfloat16 matmul rate: not measured (no bf16 variant, or no bfloat16 matmuls on this device)")
    print(f"counted FLOPs/step: {total / 1e9:.2f} G = ({args.stack} model(s)) x (6·P·tokens {f['dense'] / 1e9:.2f} G "
          f"+ attention {f['attention'] / 1e9:.2f} G)")
    print()
    print("\n".join(step_table(record)))
    if args.layout:
        record["layouts"] = layouts(args, argv)
        keep()
        print(f"\nthe machine's characters/s, eager float32 step ({args.rounds} rounds; each process timed on its own):")
        print(f"{'layout':<28}{'best':>10}{'median':>10}")
        print("\n".join(f"{r['layout']:<28}{r['best']:>10,.0f}{r['median']:>10,.0f}" for r in record["layouts"]))
    if args.profile:
        print()
        print("\n".join(profile(args, args.profile)))


def step_table(record: dict) -> list[str]:
    """The variants of a --json record as table lines (what this script and the GPU check print)."""
    lines = [f"{'variant':<13}{'best s/step':>12}{'median':>8}{'tokens/s':>11}{'GFLOP/s':>9}"
             f"{'of matmul':>11}{'speed-up':>10}{'warm-up s':>11}"]
    eager = record["variants"].get("eager")
    for v, r in record["variants"].items():
        share = f"{r['of_matmul']:>10.0%}" if r["of_matmul"] is not None else f"{'-':>10}"
        gain = (f"{eager['best_s'] / r['best_s']:>9.2f}x" if eager else f"{'-':>10}")
        lines.append(f"{v:<13}{r['best_s']:>12.4f}{r['median_s']:>8.4f}{r['tokens_per_s']:>11,.0f}"
                     f"{r['gflops']:>9.1f}{share}{gain}{r['warmup_s']:>11.1f}")
    return lines + [f"{v:<11} failed: {why}" for v, why in record["failed"].items()]


if __name__ == "__main__":
    main()
