"""Benchmark: every head's z patched clean → corrupted on the two-names prompts (protocol §5d),
TransformerLens's patching loop against headwatch's batched sweep and its one-pass estimate.

    .venv/bin/python benchmarks/patching.py --threads 1                  # the prompts of config/quick.yaml (8)
    .venv/bin/python benchmarks/patching.py --n 16 --threads 1           # the README's measurements
    .venv/bin/python benchmarks/patching.py --n 64 --threads 1           # paper scale
    .venv/bin/python benchmarks/patching.py --heads 18 --no-repeat       # a short smoke run

The prompts are built by ``headwatch.patching.prompts.prompt_set`` from the ``patching`` section of the
config (``--n`` overrides its ``n``; by default quick's, 8) with the model's tokenizer. Every
head's ``z`` (its slice of the attention output projection's input, every position) is
patched from the clean run into the corrupted run, and the score (patched − corrupted) /
(clean − corrupted) of the mean logit difference IO − S at the last position computed

(i)   with TransformerLens 4.3: the same local model booted offline through
      ``TransformerBridge.boot_transformers(..., hf_model=..., tokenizer=...)``, the clean run
      cached with ``run_with_cache``, then
      ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` — one forward pass of
      every corrupted prompt per head, through ``blocks.{layer}.attn.hook_z``
      (``--heads``: the same patch setter over a subset, by ``generic_activation_patch``);
(ii)  with ``headwatch.patching.patcher.Patcher``: both runs captured once, then many (head, prompt)
      rows per forward pass, the blocks below each chunk's first patched layer not run, the
      logits at the last position only (the rule's path);
(iii) the attribution-patching estimate (``headwatch.patching.attribution.attribution_patching``): one
      forward pass over the clean prompts, one forward and one backward over the corrupted.

Before timing, the bridge's logits must equal the model's on the clean and corrupted prompts
(within ``--tl-logit-tolerance``); afterwards (i) and (ii) must give the same scores within
``--tolerance`` (1e-4), or the run ends with an error. The estimate's Pearson and Spearman
correlation with the exact scores and the overlap of the two top-10 lists are printed. Order:
batched, TransformerLens, batched again (the mean of the two batched runs is reported), so
that load from other processes falls on both alike. Printed: each path's wall and CPU time
(this process) and the ratios (i)/(ii), (i)/(iii), (ii)/(iii); compare ratios from one run.

What bounds the ratio on a CPU: TransformerLens runs every block and the vocabulary
projection at every position for every head; the batched path runs a head's rows from its own
layer on (on average half the blocks) and projects the last position only — 2.36× fewer
multiply-adds for SmolLM2-135M (30 blocks of 3.5 M weights, a 28 M vocabulary projection, 14
tokens; printed as "multiply-adds"). On a CPU a forward pass of 16 prompts is compute-bound on
both sides, so that is close to the whole difference; batching can buy more only where the
loop is bound by launches and Python rather than arithmetic (a GPU). For scale, on a shared
2-core machine under heavy load (load average 11–20), 1 thread, 16 prompts: (i) 1,415 s wall /
254 s CPU, (ii) 588 s / 95.6 s, (iii) 13.2 s / 2.2 s; (i)/(ii) 2.4× wall, 2.65× CPU.

``--positions``: the exact per-position head sweep instead (protocol §5d, every head at every
position with the cache), on a subset of heads (``--heads``, default 6, spread over the layers),
each head's ``z`` patched at one position at a time, every position:

(a)   TransformerLens's per-position loop: ``generic_activation_patch`` with
      ``layer_pos_head_vector_patch_setter`` over the (layer, position, head) rows of the subset —
      what ``get_act_patch_attn_head_out_by_pos`` runs for every head, one forward pass each;
(b)   headwatch's one patch per forward pass (:meth:`Patcher.loop`: every block, every position,
      the full logits; the same arithmetic as (a));
(c)   headwatch's cached sweep (:class:`headwatch.patching.positions.CachedPositions`): positions p..
      of the layers from the head's up, the corrupted run's keys and values before p from the
      cache its Patcher's corrupted run filled, the vocabulary projection of many rows at once.

Order: (c), (a), (b), (c) again (the mean of the two is reported; ``--no-repeat``: once), so
that load from other processes falls on both sides alike. Printed: each path's wall and CPU
time, the multiply-adds of (b) and (c)
(:func:`headwatch.patching.positions.multiply_adds`) and their ratio, the measured (b)/(c) against
0.8 × that ratio, and (a)/(c) against 3×; the three must agree within ``--tolerance``.

TransformerLens is a test-only dependency, never a runtime one (pinned in requirements.txt,
installed by `make venv`).
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")           # the model is local; nothing is downloaded
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ablation import compare_bridge_logits, peak_rss_gb, pick_heads, timed, transformer_lens_bridge  # noqa: E402
from headwatch.model.load import load_prepared  # noqa: E402
from headwatch.patching.batch import PromptBatch  # noqa: E402
from headwatch.patching.patcher import Patch, Patcher, position_patches  # noqa: E402
from headwatch.patching.attribution import attribution_patching  # noqa: E402
from headwatch.patching.heads import correlations  # noqa: E402
from headwatch.patching.prompts import prompt_set  # noqa: E402
from headwatch.patching.positions import CachedPositions, multiply_adds as position_multiply_adds  # noqa: E402
from headwatch.settings.patching import PatchingSettings  # noqa: E402


def batched(model, adapter, prompts, batch, heads):
    """(ii): (scores [L, H] by the rule's path — NaN for heads left out —, the Patcher with its
    clean and corrupted baselines)."""
    p = Patcher(model, adapter, prompts, batch)
    out = np.full((adapter.n_layers, adapter.n_heads), np.nan)
    layers, units = zip(*heads)
    out[list(layers), list(units)] = p.score(p.run([Patch("z", l, h) for l, h in heads]).double().mean(dim=1).numpy())
    return out, p


def multiply_adds(adapter, heads, n: int, length: int) -> tuple[float, float]:
    """Multiply-adds of the weight matrices (the bulk of the work; attention's T × T products and
    the norms left out) of (TransformerLens's loop, the batched sweep) over ``heads``: the loop
    runs every block and the vocabulary projection at every position for every head; the batched
    path runs a head's rows from its own block on and projects the last position only."""
    per_block = [sum(m.weight.numel() for m in adapter.block(l).modules() if isinstance(m, torch.nn.Linear)
                     or type(m).__name__ == "Conv1D") for l in range(adapter.n_layers)]
    vocab = adapter.embeddings()[1].weight.numel()
    loop = len(heads) * n * length * (sum(per_block) + vocab)
    batched = sum(n * (length * sum(per_block[l:]) + vocab) for l, _ in heads)
    return float(loop), float(batched)


def estimate(model, adapter, prompts, batch):
    """(iii): the estimated change of the mean logit difference [L, H]."""
    return attribution_patching(model, adapter, prompts, batch).numpy()


@torch.no_grad()
def transformer_lens_loop(bridge, prompts, heads):
    """(i): TransformerLens's patching of hook_z over every position, one forward per head;
    scores [L, H] (NaN where ``heads`` leaves a head out)."""
    from transformer_lens import patching

    def metric(logits):
        return prompts.logit_diff(logits[:, -1]).double().mean()

    clean_logits, cache = bridge.run_with_cache(prompts.clean)
    c, r = float(metric(clean_logits)), float(metric(bridge(prompts.corrupted)))
    L, H = bridge.cfg.n_layers, bridge.cfg.n_heads
    if heads is None:
        out = patching.get_act_patch_attn_head_out_all_pos(bridge, prompts.corrupted, cache, metric).double().cpu().numpy()
    else:
        import pandas as pd

        index = pd.DataFrame(heads, columns=["layer", "head_index"])
        flat = patching.generic_activation_patch(bridge, prompts.corrupted, cache, metric,
                                                 patch_setter=patching.layer_head_vector_patch_setter,
                                                 activation_name="z", index_df=index).double().cpu().numpy()
        out = np.full((L, H), np.nan)
        out[index.layer, index.head_index] = flat
    return (out - r) / (c - r)


@torch.no_grad()
def transformer_lens_by_position(bridge, prompts, patches):
    """(a): TransformerLens's patching of hook_z at one (layer, position, head) per forward pass;
    the mean patched logit difference of each patch."""
    import pandas as pd
    from transformer_lens import patching

    def metric(logits):
        return prompts.logit_diff(logits[:, -1]).double().mean()

    _, cache = bridge.run_with_cache(prompts.clean)
    index = pd.DataFrame([(q.layer, q.position, q.unit) for q in patches], columns=["layer", "pos", "head_index"])
    return patching.generic_activation_patch(bridge, prompts.corrupted, cache, metric,
                                             patch_setter=patching.layer_pos_head_vector_patch_setter,
                                             activation_name="z", index_df=index).double().cpu().numpy()


def loop_by_position(model, adapter, prompts, batch, patches):
    """(b): one patch per forward pass, every block, full logits; mean logit difference per patch."""
    return Patcher(model, adapter, prompts, batch).loop(patches).double().mean(dim=1).numpy()


def cached_by_position(model, adapter, prompts, batch, patches):
    """(c): the cached sweep (both runs captured inside the timing, the corrupted one through the cache)."""
    p = Patcher(model, adapter, prompts, batch, kv_cache=True)
    return CachedPositions(p).run(patches).double().mean(dim=1).numpy()


def positions_benchmark(args, model, adapter, bridge, version, prompts, batch, heads, length):
    device = next(model.parameters()).device
    patches = position_patches(heads, length)
    n = len(prompts)
    print(f"per-position sweep: {len(heads)} heads ({' '.join(f'L{l}H{h}' for l, h in heads)}) × {length} positions "
          f"= {len(patches)} patches × {n} prompts", flush=True)
    t, c, out = {}, {}, {}
    paths = {"c": (cached_by_position, (model, adapter, prompts, batch, patches)),
             "a": (transformer_lens_by_position, (bridge, prompts, patches)),
             "b": (loop_by_position, (model, adapter, prompts, batch, patches))}
    for key in ["c", "a", "b"] + ([] if args.no_repeat else ["c2"]):
        fn, fargs = paths[key[0]]
        out[key], t[key], c[key] = timed(fn, device, *fargs)
        print(f"  ({key}): wall {t[key]:.2f} s", flush=True)
    runs = ["c"] + ([] if args.no_repeat else ["c2"])      # (c) before and after: load falls on both sides alike
    each = "" if args.no_repeat else f" (mean of two runs: {t['c']:.2f} s, {t['c2']:.2f} s)"
    t["c"], c["c"] = np.mean([t[k] for k in runs]), np.mean([c[k] for k in runs])
    diff = max(float(np.abs(out[k] - out["c"]).max()) for k in ["a", "b"] + runs[1:])
    if diff > args.tolerance:
        raise SystemExit(f"the per-position paths differ by up to {diff:g} in the mean logit difference "
                         f"> {args.tolerance:g}")
    loop_macs, cached_macs = position_multiply_adds(adapter, patches, n, length)
    bound = loop_macs / cached_macs
    print(f"(a) TransformerLens {version} per-position loop (get_act_patch_attn_head_out_by_pos semantics, the "
          f"subset): wall {t['a']:8.2f} s; CPU {c['a']:8.2f} s")
    print(f"(b) headwatch one patch per forward pass: wall {t['b']:8.2f} s; CPU {c['b']:8.2f} s")
    print(f"(c) headwatch cached sweep: wall {t['c']:8.2f} s{each}; CPU {c['c']:8.2f} s")
    print(f"multiply-adds of the weight matrices: (b) {loop_macs:.3g}, (c) {cached_macs:.3g}: (b)/(c) = {bound:.2f}×")
    ratio = t["b"] / t["c"]
    print(f"(b)/(c), wall: {ratio:.2f}× (CPU {c['b'] / c['c']:.2f}×) = {ratio / bound:.2f} of the multiply-add "
          f"ratio; target ≥ 0.8: {'met' if ratio >= 0.8 * bound else 'NOT met'}")
    tl = t["a"] / t["c"]
    print(f"(a)/(c), wall: {tl:.2f}× (CPU {c['a'] / c['c']:.2f}×); target ≥ 3×: {'met' if tl >= 3 else 'NOT met'}")
    # A patch at layer 0 and position 0 runs every block at every position: one whole pass over
    # the prompts, with every position's logits (loop) or the last one's (cached).
    full_pass, capture_pass = position_multiply_adds(adapter, [Patch("z", 0, 0, 0)], n, length)
    a_all, c_all = loop_macs + full_pass, cached_macs + 2 * capture_pass
    print(f"with the passes over the prompts each side times (TransformerLens: the clean run cached; headwatch: "
          f"the clean and corrupted runs captured): (a) {a_all:.3g}, (c) {c_all:.3g} multiply-adds: (a)/(c) at most "
          f"{a_all / c_all:.2f}× by arithmetic alone")
    print(f"agreement: max |Δ mean logit difference| over the {len(patches)} patches, (a), (b) and (c)'s rerun vs (c): "
          f"{diff:.3g} (tolerance {args.tolerance:g}): PASS")
    print(f"peak memory (RSS high-water mark): {peak_rss_gb():.2f} GB")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=None, help="prompts (default: config/quick.yaml's patching.n)")
    ap.add_argument("--model", default=str(ROOT / "results/models/smollm2-135m"),
                    help="a prepared model folder (models_prepare output)")
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"), help="patching: from this config")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--batch", type=int, default=None, help="rows per forward (default: patching.batch)")
    ap.add_argument("--device", default="auto", help="auto = CUDA when present")
    ap.add_argument("--tolerance", type=float, default=1e-4, help="max |Δ score| between (i) and (ii)")
    ap.add_argument("--tl-logit-tolerance", type=float, default=1e-5,
                    help="max |Δlogit| allowed between TransformerBridge and the model (default 1e-5)")
    ap.add_argument("--heads", type=int, default=None,
                    help="patch only this many heads, spread over the layers (default: every head)")
    ap.add_argument("--no-repeat", action="store_true",
                    help="run the batched path (with --positions: the cached sweep) once, not before and after")
    ap.add_argument("--positions", action="store_true",
                    help="the per-position head sweep: TransformerLens's loop, headwatch's loop and its cached "
                         "sweep on --heads heads (default 6)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads or torch.get_num_threads())
    configured = PatchingSettings.from_config(yaml.safe_load(open(args.config))["patching"])
    quick = yaml.safe_load(open(ROOT / "config/quick.yaml")).get("patching", {})
    settings = dataclasses.replace(configured, n=args.n or quick.get("n", configured.n))   # the rules' typed settings
    batch = args.batch or settings.batch

    try:
        import transformer_lens  # noqa: F401
    except ImportError:
        raise SystemExit("TransformerLens is not installed; this benchmark compares with it "
                         "(make venv installs requirements.txt's pin)") from None
    model, tokenizer, adapter = load_prepared(args.model, "float32", args.device)
    device = next(model.parameters()).device
    table, note = prompt_set(tokenizer, settings)
    prompts = PromptBatch.of(table).to(device)
    heads = pick_heads(adapter.heads(), args.heads or (6 if args.positions else None))
    n_heads, full = len(heads), len(heads) == len(adapter.heads())
    print(f"model {args.model}: {adapter.n_layers} layers × {adapter.n_heads} heads; {len(prompts)} prompts of "
          f"{note['length']} tokens ({len(settings.templates)} templates, ABBA and BABA, corrupted ABC); "
          f"patching {n_heads} heads{'' if full else ' (a subset)'}, z over every position")
    print(f"device {device.type}, dtype {model.dtype}, torch threads {torch.get_num_threads()}, "
          f"batch {batch} rows per forward (headwatch)")
    bridge, version = transformer_lens_bridge(args.model, tokenizer, "float32", device)
    worst, identical = compare_bridge_logits(bridge, model, [(prompts.clean, None), (prompts.corrupted, None)], device,
                                           args.tl_logit_tolerance)
    print(f"TransformerLens {version}: TransformerBridge.boot_transformers on the same weights; its logits vs "
          f"the model's on the clean and corrupted prompts: max |Δ| = {worst:g} "
          f"({'identical' if identical else 'within ' + format(args.tl_logit_tolerance, 'g')})")
    with torch.no_grad():                                     # warm-up
        model(input_ids=prompts.clean[:2])
        bridge(prompts.clean[:2])
    if args.positions:
        return positions_benchmark(args, model, adapter, bridge, version, prompts, batch, heads,
                                   note["length"])

    t, c = {}, {}
    (b1, base), t["b1"], c["b1"] = timed(batched, device, model, adapter, prompts, batch, heads)
    print(f"  batched (ii): wall {t['b1']:.2f} s", flush=True)
    tl, t["tl"], c["tl"] = timed(transformer_lens_loop, device, bridge, prompts,
                                 None if full else heads)
    print(f"  TransformerLens (i): wall {t['tl']:.2f} s", flush=True)
    if not args.no_repeat:
        (b2, _), t["b2"], c["b2"] = timed(batched, device, model, adapter, prompts, batch, heads)
        print(f"  batched (ii) again: wall {t['b2']:.2f} s", flush=True)
    est, t["est"], c["est"] = timed(estimate, device, model, adapter, prompts, batch)
    runs = ["b1"] + ([] if args.no_repeat else ["b2"])
    t_b, c_b = np.mean([t[k] for k in runs]), np.mean([c[k] for k in runs])

    keep = ~np.isnan(tl)
    diff = float(np.abs(tl[keep] - b1[keep]).max())
    if diff > args.tolerance:
        raise SystemExit(f"TransformerLens's scores differ from headwatch's by up to {diff:g} > {args.tolerance:g}")
    exact, est_score = b1[keep], base.score(base.corrupted_mean + est)[keep]
    cor = correlations(exact, est_score)
    k = min(10, len(exact))
    top = lambda x: set(np.argsort(-x, kind="stable")[:k].tolist())
    print(f"(i)   TransformerLens {version} get_act_patch_attn_head_out_all_pos: wall {t['tl']:8.2f} s "
          f"({1000 * t['tl'] / n_heads:.0f} ms per head); CPU {c['tl']:8.2f} s")
    print(f"(ii)  headwatch batched sweep: wall {t_b:8.2f} s"
          + ("" if args.no_repeat else f" (mean of two runs: {t['b1']:.2f} s, {t['b2']:.2f} s)")
          + f"; CPU {c_b:8.2f} s")
    print(f"(iii) attribution patching (estimate): wall {t['est']:8.2f} s; CPU {c['est']:8.2f} s")
    ratio = t["tl"] / t_b
    print(f"(i)/(ii), wall: {ratio:.2f}×  (CPU {c['tl'] / c_b:.2f}×)"
          + (f"   target ≥ 10×: {'met' if ratio >= 10 else 'NOT met'}" if full else
             f"   (a subset of {n_heads} heads: the ≥ 10× target is for every head)"))
    print(f"(i)/(iii), wall: {t['tl'] / t['est']:.1f}×;  (ii)/(iii), wall: {t_b / t['est']:.1f}×")
    macs = multiply_adds(adapter, heads, len(prompts), note["length"])
    print(f"multiply-adds of the weight matrices: (i) {macs[0]:.3g}, (ii) {macs[1]:.3g}: (i)/(ii) = "
          f"{macs[0] / macs[1]:.2f}×: what the arithmetic alone gives (the rest is either side's overhead)")
    print(f"agreement (i) vs (ii): max |Δ score| = {diff:.3g} over {int(keep.sum())} heads "
          f"(tolerance {args.tolerance:g}): PASS"
          + ("" if args.no_repeat else f"; batched runs identical: {np.array_equal(b1, b2, equal_nan=True)}"))
    print(f"estimate vs exact: Pearson {cor['pearson']:.3f}, Spearman {cor['spearman']:.3f}, top-{k} overlap "
          f"{len(top(exact) & top(est_score))}/{k}; clean logit difference {base.clean_mean:.4f}, corrupted "
          f"{base.corrupted_mean:.4f}")
    print(f"peak memory (RSS high-water mark): {peak_rss_gb():.2f} GB (two copies of the model: "
          "TransformerLens has its own)")
    if device.type == "cuda":
        print(f"peak CUDA memory allocated: {torch.cuda.max_memory_allocated() / 1024 ** 3:.2f} GB")


if __name__ == "__main__":
    main()
