"""How often the sweep's contrast calls the head split resolved when it is not, and when it is:
simulated sweeps through headwatch.sweep.summary's own code (protocol §7, "Their uncertainty").

    .venv/bin/python benchmarks/contrast_null.py [--sweeps 200] [--configs 6] [--seeds 3] \\
        [--effects 0,2,4] [--resamples 2000]

Each simulated sweep: ``--configs`` split configurations whose means lie evenly from 0 to
``effect`` seed standard deviations, ``--seeds`` seeds each (normal noise of std 1), and a capacity
sweep 10 seed std apart. For each effect it prints the share of sweeps in which (a) the interval of
spread / seed std lies above 1, (b) the best-vs-worst paired interval excludes 0, (c) the
relabelling test passes (``split_p`` < 1 - level), (d) ``split_resolved`` holds, and the median
spread / seed std. With effect 0, (c) should be near 1 - level; (a) and (b) are not.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from headwatch.settings.sweep import CapacitySettings, SummarySettings  # noqa: E402
from headwatch.sweep.summary import summarize  # noqa: E402


def sweep(rng, configs: int, seeds: int, effect: float) -> pd.DataFrame:
    rows = []
    means = {("split", 8 * configs, 2 ** i): effect * i / max(configs - 1, 1) for i in range(configs)}
    means.update({("width", 4, 1): 10.0, ("width", 8, 2): 0.0})
    for (name, width, heads), mean in means.items():
        for seed, v in enumerate(rng.normal(mean, 1.0, seeds)):
            rows.append(dict(sweep=name, shape=f"w{width}-h{heads}", seed=seed, width=width, heads=heads,
                             trained_under=name, head_size=width // heads, params=width * 100 if name == "width"
                             else 1000, steps=1, val_loss=10 + v, train_loss=10 + v, tokens_per_s=1.0))
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--configs", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--effects", default="0,2,4", help="range of the configurations' means, in seed std")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    paper = SummarySettings.from_config(
        yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["sweep"]["summary"])
    boot = replace(paper.bootstrap, resamples=args.resamples)
    cap = CapacitySettings(sweep="width", from_width=4, to_width=8)
    rng = np.random.default_rng(args.seed)
    print(f"{args.sweeps} sweeps of {args.configs} configurations x {args.seeds} seeds; level {boot.level}, "
          f"{args.resamples} resamples")
    for effect in (float(e) for e in args.effects.split(",")):
        c = pd.concat([summarize(sweep(rng, args.configs, args.seeds, effect), "split", cap, boot)[1]
                       for _ in range(args.sweeps)])
        print(f"means spread over {effect:g} seed std: interval above 1 {np.mean(c['spread_over_std_lo'] > 1):.0%}, "
              f"paired interval excludes 0 {np.mean(c['paired_diff_lo'] > 0):.0%}, "
              f"test passes {np.mean(c['split_p'] < 1 - boot.level):.0%}, resolved "
              f"{np.mean(c['split_resolved']):.0%}; median spread / seed std {c['spread_over_std'].median():.2f}")


if __name__ == "__main__":
    main()
