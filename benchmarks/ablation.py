"""Benchmark: every single-head cut on every phrase, one-at-a-time vs batched (protocol §5 "Speed").

    .venv/bin/python benchmarks/ablation.py --model results/models/smollm2-135m [--threads 1]

For each of the configured phrases and each head (SmolLM2: 270 heads × 4
phrases = 1080 cuts), the probability of the phrase's expected next token is
computed (i) with one full forward pass per cut under ``cut.cut_heads`` — the
plain loop — and (ii) with ``cut.BatchedCuts`` (per-row masks, the intact
computation reused below each chunk's earliest cut layer, logits only at the
last position), in the same run. Both must agree to the configured tolerance
(1e-5). Prints both times, their ratio and the peak memory (RSS high-water mark;
CUDA peak allocation too on a GPU). The batched time includes building the
intact cache. The runs are interleaved per phrase (batched, loop, batched again;
batched = the mean of its two runs) so that load from other processes on a
shared machine falls on both alike.

If ``transformer_lens`` is importable, its ``run_with_hooks`` loop over the same
cuts is timed as well (an optional benchmark dependency, never a runtime one).
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headwatch.ablation import prob_of  # noqa: E402
from headwatch.cut import BatchedCuts, compare_batched, cut_heads  # noqa: E402
from headwatch.models import load_prepared  # noqa: E402
from headwatch.sequences import phrases_table  # noqa: E402


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2   # ru_maxrss is KiB on Linux


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def loop(model, adapter, phrases, heads, device):
    out = []
    for ids, expected in phrases:
        for head in heads:
            with cut_heads(adapter, [head]):
                logits = model(input_ids=ids.to(device)).logits          # full logits, every position
            out.append(torch.softmax(logits[0, -1].float(), -1)[expected].item())
    return torch.tensor(out, dtype=torch.float64)


def batched(model, adapter, phrases, heads, batch):
    out = []
    for ids, expected in phrases:
        runner = BatchedCuts(model, adapter, ids, torch.tensor([ids.shape[1] - 1]), batch)
        out.append(runner.run_variants([[h] for h in heads], prob_of(expected))[:, 0, 0].double().cpu())
    return torch.cat(out)


def timed(fn, device, *args):
    """(result, wall seconds, CPU seconds of this process)."""
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn(*args)
    sync(device)
    return result, time.perf_counter() - t0, time.process_time() - c0


def transformer_lens_loop(model, tokenizer, adapter, phrases, heads, device):
    """run_with_hooks over the same cuts: zero head h of hook_z in block l."""
    from transformer_lens import HookedTransformer  # noqa: F401  (optional)

    tl = HookedTransformer.from_pretrained("HuggingFaceTB/SmolLM2-135M", hf_model=model,
                                           tokenizer=tokenizer, device=str(device))
    out = []
    with torch.no_grad():
        for ids, expected in phrases:
            for layer, head in heads:
                def zero(z, hook, head=head):
                    z[:, :, head, :] = 0.0
                    return z
                logits = tl.run_with_hooks(ids.to(device), fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
                out.append(torch.softmax(logits[0, -1].float(), -1)[expected].item())
    return torch.tensor(out, dtype=torch.float64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "results/models/smollm2-135m"),
                    help="a prepared model folder (models_prepare output)")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"))
    ap.add_argument("--batch", type=int, default=None, help="rows per forward (default: ablation.batch)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = yaml.safe_load(open(args.config))
    batch = args.batch or cfg["ablation"]["batch"]
    tolerance = cfg["ablation"]["tolerance"]

    model, tokenizer, adapter = load_prepared(args.model, "float32", args.device)
    device = next(model.parameters()).device
    table = phrases_table(tokenizer, cfg["phrases"], cfg["sequences"]["vocab_low"], cfg["sequences"]["vocab_high"])
    phrases = [(torch.tensor([list(r.token_ids)]), int(r.expected_id)) for r in table.itertuples()]
    heads = adapter.heads()
    n_cuts = len(heads) * len(phrases)
    print(f"model {args.model}: {adapter.n_layers} layers × {adapter.n_heads} heads = {len(heads)} heads; "
          f"{len(phrases)} phrases ({', '.join(f'{p}: {len(t)} tokens' for p, t in zip(table.phrase, table.token_ids))}); "
          f"{n_cuts} single-head cuts")
    print(f"device {device.type}, dtype {model.dtype}, torch threads {torch.get_num_threads()}, "
          f"batch {batch} rows per forward")
    with torch.no_grad():                                     # warm-up
        model(input_ids=phrases[0][0].to(device))

    # Interleaved per phrase (batched, loop, batched again) so that load from other
    # processes on a shared machine falls on both alike; batched = mean of its two runs.
    t_loop = t_b1 = t_b2 = c_loop = c_b1 = c_b2 = 0.0
    lp, b1, b2 = [], [], []
    for phrase, one in zip(table.phrase, phrases):
        x1, s1, k1 = timed(batched, device, model, adapter, [one], heads, batch)
        xl, sl, kl = timed(loop, device, model, adapter, [one], heads, device)
        x2, s2, k2 = timed(batched, device, model, adapter, [one], heads, batch)
        print(f"  {phrase:12s} wall: loop {sl:7.2f} s, batched {s1:6.2f} s / {s2:6.2f} s;   "
              f"CPU: loop {kl:7.2f} s, batched {k1:6.2f} s / {k2:6.2f} s", flush=True)
        t_loop, t_b1, t_b2 = t_loop + sl, t_b1 + s1, t_b2 + s2
        c_loop, c_b1, c_b2 = c_loop + kl, c_b1 + k1, c_b2 + k2
        lp.append(xl), b1.append(x1), b2.append(x2)
    lp, b1, b2 = torch.cat(lp), torch.cat(b1), torch.cat(b2)
    t_batched, c_batched = (t_b1 + t_b2) / 2, (c_b1 + c_b2) / 2
    agree = compare_batched(b1, lp, tolerance, "probability of the expected token, every cut")
    same = torch.equal(b1, b2)
    print(f"(i)  one forward per cut (hook):  wall {t_loop:8.2f} s ({1000 * t_loop / n_cuts:.1f} ms per cut); "
          f"CPU {c_loop:8.2f} s")
    print(f"(ii) batched (mask, prefix reuse, last-position logits): wall {t_batched:8.2f} s "
          f"(mean of two runs: {t_b1:.2f} s, {t_b2:.2f} s; {1000 * t_batched / n_cuts:.2f} ms per cut); "
          f"CPU {c_batched:8.2f} s ({c_b1:.2f} s, {c_b2:.2f} s)")
    ratio = t_loop / t_batched
    print(f"ratio (i)/(ii), wall: {ratio:.2f}×  (against the slower batched run: {t_loop / max(t_b1, t_b2):.2f}×)"
          f"   target ≥ 6×: {'met' if ratio >= 6 else 'NOT met'}")
    if device.type == "cpu":
        print(f"ratio (i)/(ii), CPU time of this process (insensitive to other processes' load): "
              f"{c_loop / c_batched:.2f}×  (against the slower batched run: {c_loop / max(c_b1, c_b2):.2f}×)")
    print(f"agreement: max |Δp| = {agree['max_abs_diff']:.3g} over {agree['n_values']} probabilities "
          f"(tolerance {tolerance:g}): {'PASS' if agree['passed'] else 'FAIL'}; batched runs identical: {same}")
    peak = peak_rss_gb()
    print(f"peak memory (RSS high-water mark): {peak:.2f} GB   target < 4 GB: {'met' if peak < 4 else 'NOT met'}")
    if device.type == "cuda":
        print(f"peak CUDA memory allocated: {torch.cuda.max_memory_allocated() / 1024 ** 3:.2f} GB")
    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        print("transformer_lens is not installed: its run_with_hooks loop is not timed (optional)")
    else:
        tl, t_tl, _ = timed(transformer_lens_loop, device, model, tokenizer, adapter, phrases, heads, device)
        d = float((tl - lp).abs().max())
        print(f"(iii) transformer_lens run_with_hooks loop: {t_tl:.2f} s; ratio to batched "
              f"{t_tl / t_batched:.2f}×; max |Δp| vs the hook loop {d:.3g}")


if __name__ == "__main__":
    main()
