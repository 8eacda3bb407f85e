"""Benchmark: every single-head cut on every phrase, one-at-a-time vs batched (protocol §5 "Speed"),
and the same cuts through TransformerLens when it is installed.

    .venv/bin/python benchmarks/ablation.py --model results/models/smollm2-135m [--threads 2]
    .venv/bin/python benchmarks/ablation.py --phrases names --heads 20    # a short smoke run

For each configured phrase and each head (SmolLM2: 270 heads × 4 phrases = 1,080 cuts)
the probability of the phrase's expected next token is computed

(i)   with one full forward pass per cut under ``cut.cut_heads`` — the plain loop;
(ii)  with ``cut.BatchedCuts`` — per-row masks, the intact computation reused below each
      chunk's earliest cut layer, logits only at the last position;
(iii) with TransformerLens (optional): the same model, loaded through
      ``TransformerBridge.boot_transformers(..., hf_model=..., tokenizer=...)`` offline,
      one ``run_with_hooks`` forward per cut that zeroes the head in
      ``blocks.{layer}.attn.hook_z`` (the input of the output projection, as in (i)).

Before timing (iii) the bridge's logits are compared with the model's on every phrase
(they must agree within ``--tl-logit-tolerance``), and afterwards its probabilities with
the loop's (within the guards' bound: float32 rounding of logits the size of the phrases' largest,
``ablation.rounding_factor`` × u × that × (layers + 1) × √(longest sum)); (ii) must agree with (i)
within the same bound. A failed check ends the run with an error. The loops are interleaved per phrase
(batched, loop, TransformerLens, batched again; batched = the mean of its two runs) so that
load from other processes on a shared machine falls on all alike. Printed: each path's wall
and CPU time, the ratios (i)/(ii), (iii)/(ii) and (iii)/(i), and the peak memory (RSS
high-water mark; CUDA peak allocation too on a GPU).

What the numbers mean: (i)/(ii) is what batching buys inside headwatch; (iii)/(ii) is how
much longer the same cuts take as a TransformerLens user would write them (a hook per
forward). Both loops compute the full logits of every position; (ii) computes only what is
read. The times are wall-clock seconds of this process and depend on the machine, the
thread count (``--threads``) and other load: compare ratios measured in the same run. For
scale: on an unloaded 2-core machine with 2 threads, the 1,080 cuts took 220–260 s in
TransformerLens 4.3's loop and 23–24 s on the batched path.

TransformerLens is a test-only dependency, never a runtime one (pinned in requirements.txt,
installed by `make venv`).
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
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headwatch.ablation.experiments import prob_of  # noqa: E402
from headwatch.settings.ablation import AblationSettings  # noqa: E402
from headwatch.ablation.cut import BatchedCuts, cut_heads  # noqa: E402
from headwatch.guards import batched_vs_loop, rounding  # noqa: E402
from headwatch.model.load import load_prepared  # noqa: E402
from headwatch.scores.sequences import phrases_table  # noqa: E402


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


# ------------------------------------------------------------------ TransformerLens
def transformer_lens_bridge(folder, tokenizer, dtype: str, device):
    """The prepared model booted through TransformerLens 4.x, offline: a second copy of the
    weights (so that nothing TransformerLens does to its model can touch headwatch's)."""
    from importlib.metadata import version

    try:
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError as err:
        raise SystemExit(f"TransformerLens {version('transformer-lens')} has no TransformerBridge; this "
                         "benchmark needs 4.x: make venv installs requirements.txt's pin") from err
    hf_model, _, _ = load_prepared(folder, dtype, device.type)
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf_model, tokenizer=tokenizer,
                                                 device=device.type, dtype=hf_model.dtype)
    return bridge, version("transformer-lens")


@torch.no_grad()
def compare_bridge_logits(bridge, model, phrases, device, tolerance: float) -> tuple[float, bool]:
    """Max |Δlogit| (every position, every vocabulary entry, every phrase) between the bridge
    and the model, and whether they are identical; SystemExit above ``tolerance``."""
    worst, identical = 0.0, True
    for ids, _ in phrases:
        mine = model(input_ids=ids.to(device)).logits.float()
        theirs = bridge(ids.to(device))
        if not isinstance(theirs, torch.Tensor) or theirs.shape != mine.shape:
            raise SystemExit(f"TransformerBridge returned {type(theirs).__name__} "
                             f"{getattr(theirs, 'shape', '')}, expected logits {tuple(mine.shape)}")
        theirs = theirs.float()
        worst = max(worst, float((theirs - mine).abs().max()))
        identical = identical and torch.equal(theirs, mine)
    if worst > tolerance:
        raise SystemExit(f"TransformerBridge's logits differ from the model's by up to {worst:g} "
                         f"> {tolerance:g}: its cuts would not be the same computation")
    return worst, identical


@torch.no_grad()
def transformer_lens_loop(bridge, adapter, phrases, heads, device):
    """run_with_hooks over the same cuts: zero head h of hook_z ([batch, pos, heads, head_dim])
    in block l — the head's slice of the output projection's input, as cut_heads does."""
    out = []
    for ids, expected in phrases:
        for layer, head in heads:
            def zero(z, hook, head=head):
                if z.ndim != 4 or z.shape[2] != adapter.n_heads:
                    raise SystemExit(f"{hook.name}: expected [batch, pos, {adapter.n_heads} heads, "
                                     f"head_dim], got {tuple(z.shape)}")
                z[:, :, head, :] = 0.0
                return z
            logits = bridge.run_with_hooks(ids.to(device), fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
            out.append(torch.softmax(logits[0, -1].float(), -1)[expected].item())
    return torch.tensor(out, dtype=torch.float64)


def pick_heads(all_heads, n: int | None):
    """All heads, or ``n`` of them spread evenly over the layers (for a short run)."""
    if not n or n >= len(all_heads):
        return list(all_heads)
    step = len(all_heads) / n
    return [all_heads[int(i * step)] for i in range(n)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "results/models/smollm2-135m"),
                    help="a prepared model folder (models_prepare output)")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"))
    ap.add_argument("--batch", type=int, default=None, help="rows per forward (default: ablation.batch)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--phrases", default=None, help="comma-separated phrase names (default: every phrase)")
    ap.add_argument("--heads", type=int, default=None,
                    help="cut only this many heads, spread over the layers (default: every head)")
    ap.add_argument("--no-transformer-lens", action="store_true", help="skip (iii) even when installed")
    ap.add_argument("--tl-logit-tolerance", type=float, default=1e-5,
                    help="max |Δlogit| allowed between TransformerBridge and the model (default 1e-5)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = yaml.safe_load(open(args.config))
    validate(cfg, str(ROOT / "config" / "schema.yaml"))              # the defaults the workflow fills in
    settings = AblationSettings.from_config(cfg["ablation"])        # the rules' typed settings
    batch = args.batch or settings.batch
    phrase_cfg = cfg["phrases"]
    if args.phrases:
        unknown = sorted(set(args.phrases.split(",")) - set(phrase_cfg))
        if unknown:
            raise SystemExit(f"--phrases: {unknown} are not phrases of {args.config} ({sorted(phrase_cfg)})")
        phrase_cfg = {k: v for k, v in phrase_cfg.items() if k in args.phrases.split(",")}

    model, tokenizer, adapter = load_prepared(args.model, "float32", args.device)
    device = next(model.parameters()).device
    table = phrases_table(tokenizer, phrase_cfg, cfg["sequences"]["vocab_low"], cfg["sequences"]["vocab_high"])
    phrases = [(torch.tensor([list(r.token_ids)]), int(r.expected_id)) for r in table.itertuples()]
    heads = pick_heads(adapter.heads(), args.heads)
    n_cuts = len(heads) * len(phrases)
    full = len(heads) == len(adapter.heads()) and len(phrases) == len(cfg["phrases"])
    print(f"model {args.model}: {adapter.n_layers} layers × {adapter.n_heads} heads; cutting {len(heads)} "
          f"heads{' (a subset)' if len(heads) < len(adapter.heads()) else ''} on {len(phrases)} phrases "
          f"({', '.join(f'{p}: {len(t)} tokens' for p, t in zip(table.phrase, table.token_ids))}): "
          f"{n_cuts} single-head cuts")
    print(f"device {device.type}, dtype {model.dtype}, torch threads {torch.get_num_threads()}, "
          f"batch {batch} rows per forward")

    bridge = None
    if args.no_transformer_lens:
        print("(iii) TransformerLens: skipped (--no-transformer-lens)")
    else:
        try:
            import transformer_lens  # noqa: F401
        except ImportError:
            print("(iii) TransformerLens is not installed, so its loop is not timed (make venv installs "
                  "requirements.txt's pin)")
        else:
            bridge, version = transformer_lens_bridge(args.model, tokenizer, "float32", device)
            worst, identical = compare_bridge_logits(bridge, model, phrases, device, args.tl_logit_tolerance)
            print(f"(iii) TransformerLens {version}: TransformerBridge.boot_transformers on the same weights; "
                  f"its logits vs the model's on every phrase: max |Δ| = {worst:g} "
                  f"({'identical' if identical else 'within ' + format(args.tl_logit_tolerance, 'g')})")
    with torch.no_grad():                                     # warm-up, and the logits' size for the bound
        largest = max(float(model(input_ids=ids.to(device)).logits.abs().max()) for ids, _ in phrases)
    bound = rounding(adapter, settings.rounding_factor, largest)
    with torch.no_grad():
        model(input_ids=phrases[0][0].to(device))
        if bridge is not None:
            bridge(phrases[0][0].to(device))

    # Interleaved per phrase so that load from other processes falls on every path alike.
    t = dict(loop=0.0, b1=0.0, b2=0.0, tl=0.0)
    c = dict(loop=0.0, b1=0.0, b2=0.0, tl=0.0)
    res = dict(loop=[], b1=[], b2=[], tl=[])
    for phrase, one in zip(table.phrase, phrases):
        runs = [("b1", batched, (model, adapter, [one], heads, batch)),
                ("loop", loop, (model, adapter, [one], heads, device))]
        if bridge is not None:
            runs.append(("tl", transformer_lens_loop, (bridge, adapter, [one], heads, device)))
        runs.append(("b2", batched, (model, adapter, [one], heads, batch)))
        line = []
        for key, fn, fn_args in runs:
            x, wall, cpu = timed(fn, device, *fn_args)
            t[key] += wall
            c[key] += cpu
            res[key].append(x)
            line.append(f"{key} {wall:.2f} s")
        print(f"  {phrase:12s} wall: " + ", ".join(line), flush=True)
    lp, b1, b2 = (torch.cat(res[k]) for k in ("loop", "b1", "b2"))
    t_batched, c_batched = (t["b1"] + t["b2"]) / 2, (c["b1"] + c["b2"]) / 2
    agree = batched_vs_loop([({}, b1, lp)], bound, "probability of the expected token, every cut")
    print(f"(i)   one forward per cut (hook):  wall {t['loop']:8.2f} s ({1000 * t['loop'] / n_cuts:.1f} ms per cut); "
          f"CPU {c['loop']:8.2f} s")
    print(f"(ii)  batched (mask, prefix reuse, last-position logits): wall {t_batched:8.2f} s "
          f"(mean of two runs: {t['b1']:.2f} s, {t['b2']:.2f} s; {1000 * t_batched / n_cuts:.2f} ms per cut); "
          f"CPU {c_batched:8.2f} s")
    ratio = t["loop"] / t_batched
    print(f"(i)/(ii), wall: {ratio:.2f}×  (against the slower batched run: "
          f"{t['loop'] / max(t['b1'], t['b2']):.2f}×); CPU time of this process: {c['loop'] / c_batched:.2f}×"
          + (f"   target ≥ 6×: {'met' if ratio >= 6 else 'NOT met'}" if full else
             "   (a subset: the ≥ 6× target is for every cut on every phrase)"))
    print(f"agreement (ii) vs (i): max |Δp| = {agree['max_abs_diff']:.3g} over {lp.numel()} probabilities "
          f"(bound {bound.bound:.3g}): PASS; batched runs identical: {torch.equal(b1, b2)}")
    if bridge is not None:
        tl = torch.cat(res["tl"])
        tl_agree = batched_vs_loop([({}, tl, lp)], bound, "TransformerLens vs the hook loop, every cut")
        print(f"(iii) TransformerLens run_with_hooks loop: wall {t['tl']:8.2f} s "
              f"({1000 * t['tl'] / n_cuts:.1f} ms per cut); CPU {c['tl']:8.2f} s")
        print(f"(iii)/(ii), wall: {t['tl'] / t_batched:.2f}×  (CPU {c['tl'] / c_batched:.2f}×);  "
              f"(iii)/(i), wall: {t['tl'] / t['loop']:.2f}×")
        print(f"agreement (iii) vs (i): max |Δp| = {tl_agree['max_abs_diff']:.3g} (bound {bound.bound:.3g}): PASS")
    peak = peak_rss_gb()
    print(f"peak memory (RSS high-water mark): {peak:.2f} GB"
          f"{' (two copies of the model: TransformerLens has its own)' if bridge is not None else ''}"
          f"   target < 4 GB: {'met' if peak < 4 else 'NOT met'}")
    if device.type == "cuda":
        print(f"peak CUDA memory allocated: {torch.cuda.max_memory_allocated() / 1024 ** 3:.2f} GB")


if __name__ == "__main__":
    main()
