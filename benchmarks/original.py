"""The figures other runs published that the results pages set beside this repository's own, copied here
once, each with its source named in words — and the comparisons read from them.

* :data:`RUN_062` — the original study's head-count sweep, **run-062 on a Kaggle T4**: tiny-shakespeare
  (65 characters), 4 layers, context 128, 2000 steps, 3 seeds, 73 minutes for its 24 models; its
  validation loss per split of width 256 and per width at head size 64, mean ± std over seeds, in nats
  per character, and the figures it drew from them (:data:`RUN_062_REPORTED`). The study's description
  gives the rest of its protocol where the run's record does not (:data:`RUN_062_RECIPE`: a value there
  is the description's, None where neither says).
* :data:`ORIGINAL_STUDIES` — the original study's findings on the studies' questions: run-034 (experts,
  French text, 8 layers, 8,000 steps, a Kaggle P100) and run-063 (Qwen2.5-0.5B's anatomy).
* :data:`NANOGPT` — nanoGPT's character-level Shakespeare recipe and the best validation loss its README
  reports (karpathy/nanoGPT at commit 3adf61e: README.md and config/train_shakespeare_char.py), context
  for the size of a loss on this kind of text; not a run of this study's question.

The numbers are typed from their sources and never tuned to; everything the pages say about them is
computed here or by the page writers (``benchmarks/laptop_tables.py``, ``benchmarks/gpu/paper_tables.py``),
which both read this module.
"""
from __future__ import annotations

import pandas as pd

RUN_062_SOURCE = "the original study's run-062 on a Kaggle T4"
RUN_062 = dict(
    splits=[dict(heads=4, head_size=64, params=3_221_504, loss=1.5144, std=0.0050),
            dict(heads=2, head_size=128, params=3_221_504, loss=1.5176, std=0.0043),
            dict(heads=1, head_size=256, params=3_221_504, loss=1.5188, std=0.0028),
            dict(heads=8, head_size=32, params=3_221_504, loss=1.5210, std=0.0045),
            dict(heads=16, head_size=16, params=3_221_504, loss=1.5270, std=0.0002),
            dict(heads=32, head_size=8, params=3_221_504, loss=1.5443, std=0.0027)],
    split_width=256,
    widths=[dict(width=128, heads=2, params=824_320, loss=1.6470),
            dict(width=256, heads=4, params=3_221_504, loss=1.5144),
            dict(width=512, heads=8, params=12_734_464, loss=1.5396)],
    width_reading="undertrained at 2000 steps: the biggest model (12.7 M weights) the least trained",
    device="a Kaggle T4", minutes=73, models=24,
)
"""run-062's tables, as published (:data:`RUN_062_SOURCE`)."""
RUN_062_REPORTED = dict(spread=0.0299, seed_noise=0.0032, spread_over_noise=9, gain=0.1326, gain_over_spread=4.4)
"""The figures run-062 drew from its tables ("spread best → worst 0.0299 vs seed noise 0.0032 (~9×); width gain
128 → 256 0.1326 = 4.4× the spread"); :func:`run_062_figures` computes them again from the tables (a test
holds the two equal to the published rounding)."""
RUN_062_RECIPE = dict(
    corpus="tiny-shakespeare (65 characters)", characters=65,
    split="the first 90 % for training, the last 10 % for validation",
    layers=4, context=128, positions="learned, one per position of the context", steps=2000, batch=64,
    optimizer="AdamW, warm-up then cosine decay", seeds=3, device="a Kaggle T4",
    reading="the validation loss at the end of training (the description asks for it at the end and every N "
            "steps; whether the table reads the last evaluation or the best is not recorded)",
    precision=None, dropout=None, lr=None, weight_decay=None, eval_every=None, eval_windows=None,
)
"""run-062's recipe as far as its record and the study's description say (None: neither says)."""

NANOGPT_SOURCE = "nanoGPT's README and config/train_shakespeare_char.py (karpathy/nanoGPT at commit 3adf61e)"
NANOGPT = dict(best_val_loss=1.4697, layers=6, heads=6, width=384, context=256, dropout=0.2, batch=64, steps=5000,
               eval_every=250, eval_batches=200, lr=1e-3, min_lr=1e-4, warmup=100, beta1=0.9, beta2=0.99,
               weight_decay=0.1, grad_clip=1.0, device="one A100",
               positions="learned, one per position (wpe); the output head tied to the token embedding; no biases",
               precision="bfloat16 autocast where the GPU has it (train.py's default dtype)",
               corpus="tiny-shakespeare (1,115,394 characters, 65 of them distinct; the first 90 % for training)",
               reading="the best: it evaluates every 250 steps \"because we'll overfit\" and saves a checkpoint only "
                       "when the validation loss improves")
"""nanoGPT's character-level Shakespeare recipe and its reported best validation loss (:data:`NANOGPT_SOURCE`)."""


def run_062_splits() -> pd.DataFrame:
    """run-062's splits of width 256, by heads, with each one's rank (1 = lowest loss)."""
    t = pd.DataFrame(RUN_062["splits"]).sort_values("heads", ignore_index=True)
    return t.assign(rank=t["loss"].rank(method="min").astype(int))


def run_062_figures() -> dict:
    """run-062's figures from its tables: the best and worst split, the spread, the seed noise (the mean of
    the splits' seed std), their ratio, the width 128 → 256 gain and its ratio to the spread."""
    s = run_062_splits()
    w = {r["width"]: r["loss"] for r in RUN_062["widths"]}
    best, worst = s.loc[s["loss"].idxmin()], s.loc[s["loss"].idxmax()]
    spread, noise = float(worst["loss"] - best["loss"]), float(s["std"].mean())
    gain = w[128] - w[256]
    return dict(best_heads=int(best["heads"]), best_head_size=int(best["head_size"]), worst_heads=int(worst["heads"]),
                worst_head_size=int(worst["head_size"]), spread=spread, seed_noise=noise,
                spread_over_std=spread / noise, gain=gain, gain_over_spread=gain / spread,
                widest_minus_next=w[512] - w[256])


ORIGINAL = run_062_figures()
"""run-062's findings that the laptop and paper pages test: the best split, the worst, the spread in seed
standard deviations and the width 128 → 256 gain in spreads."""
ORIGINAL_LONG = dict(chars=RUN_062_RECIPE["steps"] * RUN_062_RECIPE["batch"] * RUN_062_RECIPE["context"],
                     loss={r["heads"]: r["loss"] for r in RUN_062["splits"]}, worst_heads=ORIGINAL["worst_heads"],
                     worst_by=ORIGINAL["spread"])
"""run-062's final losses at its characters per model (steps × batch × context), by heads, what laptop-long
is read beside: 4 heads best, 2 and 1 within 0.0044 of it, 32 heads worst by the spread."""


# ------------------------------------------------------------------ the original's findings against a run
def verdict(holds: bool, resolved: bool) -> str:
    return "not resolved" if not resolved else ("holds" if holds else "does not hold")


def magnitude(value: float, lo: float, hi: float, resolved: bool) -> str:
    """A reference value against this run's interval: outside it, the finding does not hold here
    (the interval excludes it); inside, it holds where the effect is resolved."""
    return "does not hold" if not lo <= value <= hi else verdict(True, resolved)


def where(value: float, lo: float, hi: float) -> str:
    """Where a reference value lies against an interval."""
    return "inside the interval" if lo <= value <= hi else ("below the interval" if value < lo else
                                                            "above the interval")


def heads_of(n: int, size: int) -> str:
    return f"{n} head{'s' * (n != 1)} of {size}"


def _against(finals: pd.DataFrame | None, bootstrap, sweep: str, summary: pd.DataFrame, shape: str, heads: int,
             resolved: bool, first: bool) -> tuple[str, str]:
    """(words, verdict) of the run's ``shape`` against its split of ``heads`` heads (the original's pick), paired
    by seed: ``first`` — the split of ``heads`` minus ``shape`` (is the original's optimum worse than ours?),
    else ``shape`` minus it (is our worst worse than the original's?). *does not hold* where the split is
    resolved and the interval lies above 0; *not resolved* otherwise; without ``finals``, the pick alone."""
    other = summary.loc[summary["heads"] == heads]
    if other.empty:
        return f"; this grid has no split of {heads} heads", verdict(False, resolved)
    if finals is None:
        return "", verdict(False, resolved)
    from headwatch.sweep.course import mean_interval

    f = finals[finals["sweep"] == sweep].set_index(["shape", "seed"])["val_loss"]
    a, b = (other.index[0], shape) if first else (shape, other.index[0])
    diff = (f.loc[a].sort_index() - f.loc[b].sort_index()).dropna()
    mean, lo, hi = mean_interval(diff.tolist(), bootstrap)
    words = f"; {a} − {b} paired by seed {mean:+.4f} ({lo:+.4f} to {hi:+.4f}, {len(diff)} seeds; {b} picked from these losses)"
    return words, "does not hold" if resolved and len(diff) >= 3 and lo > 0 else "not resolved"


def findings(c: pd.Series, summary: pd.DataFrame, finals: pd.DataFrame | None = None, bootstrap=None) -> pd.DataFrame:
    """run-062's findings, point by point, against a run's contrast ``c`` and summary (one reading). With the run's
    ``finals`` at that reading (``val_loss``) and ``sweep.summary.bootstrap``, a best or worst split other than
    the original's is weighed against the original's, paired by seed: the finding does not hold only where that
    difference is resolved too."""
    split = summary[summary["sweep"] == c["split_sweep"]].set_index("shape")
    best, worst = split.loc[c["best_shape"]], split.loc[c["worst_shape"]]
    pct = f"{100 * c['level']:g} %"
    o = ORIGINAL
    resolved = bool(c["split_resolved"])
    ratio = (c["spread_over_std"], c["spread_over_std_lo"], c["spread_over_std_hi"])
    g = 1 / c["spread_over_gain"], 1 / c["spread_over_gain_hi"], 1 / c["spread_over_gain_lo"]
    gain_defined = c["spread_over_gain_lo"] > 0          # an interval through 0: its inverse is unbounded
    opt = ("", verdict(True, resolved)) if int(best["heads"]) == o["best_heads"] else _against(
        finals, bootstrap, c["split_sweep"], split, c["best_shape"], o["best_heads"], resolved, first=True)
    bad = ("", verdict(True, resolved)) if int(worst["heads"]) == o["worst_heads"] else _against(
        finals, bootstrap, c["split_sweep"], split, c["worst_shape"], o["worst_heads"], resolved, first=False)
    rows = [
        dict(finding=f"optimum at {heads_of(o['best_heads'], o['best_head_size'])}",
             here=f"best: {heads_of(int(best['heads']), int(best['head_size']))} ({c['best_shape']})" + opt[0],
             verdict=opt[1]),
        dict(finding=f"{heads_of(o['worst_heads'], o['worst_head_size'])} worst",
             here=f"worst: {heads_of(int(worst['heads']), int(worst['head_size']))} ({c['worst_shape']}); "
                  f"worst − best paired by seed {c['paired_diff']:.4f} ({pct}: {c['paired_diff_lo']:.4f}–"
                  f"{c['paired_diff_hi']:.4f})" + bad[0],
             verdict=bad[1]),
        dict(finding=f"spread ~{o['spread_over_std']:.1f}× seed noise",
             here=f"{ratio[0]:.2f}× ({pct}: {ratio[1]:.2f}–{ratio[2]:.2f}); {o['spread_over_std']:.1f}× lies "
                  f"{where(o['spread_over_std'], ratio[1], ratio[2])}; p = {c['split_p']:.3g}",
             verdict=magnitude(o["spread_over_std"], ratio[1], ratio[2], resolved)),
        dict(finding=f"width {c['capacity_from']} → {c['capacity_to']} gain {o['gain_over_spread']:.1f}× the spread",
             here=(f"{g[0]:.2f}× ({pct}: {g[1]:.2f}–{g[2]:.2f}); {o['gain_over_spread']:.1f}× lies "
                   f"{where(o['gain_over_spread'], g[1], g[2])}" if gain_defined else
                   f"spread / gain {c['spread_over_gain']:.2f} ({pct}: {c['spread_over_gain_lo']:.2f}–"
                   f"{c['spread_over_gain_hi']:.2f}, through 0: the ratio is unbounded)"),
             verdict=magnitude(o["gain_over_spread"], g[1], g[2],
                               bool(c["width_resolved"] and c["split_resolved"])) if gain_defined
             else "not resolved"),
    ]
    return pd.DataFrame(rows)


# The original study's findings on the studies' questions, by study, each set beside this run's contrast
# of its arm and reference (shapes). ``claim``: on the loss, "arm better" / "arm worse" (against this run's
# interval); on the training throughput, "arm slower" / "arm faster" (one figure per arm, no interval);
# on the KV cache, "arm smaller cache" (bytes per token, by arithmetic) (laptop_tables.original_verdict).
# Typed from the original runs (not computed here): run-034 trained on French text (8 layers, 8,000 steps,
# a P100), run-063 read Qwen2.5-0.5B's anatomy; neither is this corpus or this scale.
ORIGINAL_STUDIES: dict[str, list[dict]] = {
    "experts": [
        dict(finding="run-034: 8 experts, top 2, balancing 0.01 at the dense FFN's active width: 1.590 bits/char "
                     "against the dense model's 1.649 (experts better)",
             arm="w256-h4-e8k2-b0.01", reference="w256-h4", claim="arm better"),
        dict(finding="run-034: the same without balancing: 1.597 against 1.649 (experts better)",
             arm="w256-h4-e8k2-b0", reference="w256-h4", claim="arm better"),
        dict(finding="run-034: balancing 0.01 against none: 1.590 against 1.597 (balancing better; the busiest "
                     "expert 12.3–12.8 % of tokens with it, 9.2–18.1 % without)",
             arm="w256-h4-e8k2-b0.01", reference="w256-h4-e8k2-b0", claim="arm better"),
        dict(finding="run-034: routing cost 25 % of the training speed: 37,900 against 50,400 characters/s "
                     "(experts slower)",
             arm="w256-h4-e8k2-b0.01", reference="w256-h4", claim="arm slower"),
    ],
    "kv_sharing": [
        dict(finding="run-063 (Qwen2.5-0.5B's anatomy): key/value sharing shrinks the KV cache by the ratio of "
                     "query to key/value heads, 12,288 against 86,016 bytes per token (×7); its loss cost unmeasured",
             arm="w256-h4-kv2", reference="w256-h4", claim="arm smaller cache"),
        dict(finding="run-063: the same, one key/value head",
             arm="w256-h4-kv1", reference="w256-h4", claim="arm smaller cache"),
    ],
}
