"""Benchmark: the checks every Snakemake command runs before any job (protocol §9), cold and
cached, and `snakemake -n` on an up-to-date tree, cold and cached.

    .venv/bin/python benchmarks/config_check.py                       # builds a tiny tree first
    .venv/bin/python benchmarks/config_check.py --workdir . --configfile config/quick.yaml

Snakemake parses the Snakefile for every command (and on a cluster again inside every job),
and the pre-job checks (headwatch.config.check_config) run in that parse. Measured here:

* the checks alone, each in a fresh Python process (imports included): *cold* = no cached
  verdict (tokenizers read from tokenizer.json, shapes from config.json, every check run),
  *cached* = the verdict found under .snakemake/headwatch/checks/;
* `snakemake -n` on a tree where nothing is to be done: cold (verdict cache emptied first)
  and cached; the command's wall time, best and median of ``--repeat`` runs.

With ``--workdir`` the folder must already be up to date for the given ``--configfile``s
(e.g. the repository after `make quick`). Without it, the tests' tiny Llama (SmolLM2's
tokenizer, 3 layers × 4 heads) is saved and the whole DAG is run on it in a temporary
folder first (a few minutes on 2 cores; not timed). Targets: checks under 1 s cached,
`snakemake -n` under 3 s cached. Times are wall-clock and depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from workflow import deep_merge, make_workdir, snakemake, tiny_config, write_config  # noqa: E402

CHECK = """
import json, sys, time
t0 = time.perf_counter()
from headwatch.config import check_config
check_config(json.loads(sys.argv[1]), sys.argv[2])
print(json.dumps(dict(seconds=time.perf_counter() - t0,
                      torch="torch" in sys.modules, transformers="transformers" in sys.modules)))
"""


def tiny_tree(folder: Path) -> tuple[Path, list[str]]:
    """A tiny model and the whole DAG run on it, in ``folder``."""
    from headwatch.model.load import load_tokenizer
    from tiny import tiny_model

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    tokenizer = load_tokenizer(config["models"]["smollm2-135m"])
    model_dir = folder / "tiny-llama"
    tiny_model("llama", vocab=len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    workdir = make_workdir(folder / "tree")
    configfile = write_config(workdir, tiny_config(model_dir))
    print(f"building the tiny tree in {workdir} (not timed) ...", flush=True)
    result = snakemake(workdir, "--configfile", str(configfile), timeout=3600)
    if result.returncode != 0:
        sys.exit(f"the tiny tree failed to build:\n{result.stderr[-3000:]}")
    return workdir, [str(configfile)]


def merged_config(workdir: Path, configfiles: list[str]) -> dict:
    """config/config.yaml with the overlays, key by key, as Snakemake merges them."""
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    for f in configfiles:
        config = deep_merge(config, yaml.safe_load(Path(f).read_text()) or {})
    return config


def clear_verdicts(workdir: Path) -> None:
    shutil.rmtree(workdir / ".snakemake" / "headwatch" / "checks", ignore_errors=True)


def time_checks(workdir: Path, config: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", CHECK, json.dumps(config), str(workdir)], cwd=workdir,
                         capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if out.returncode != 0:
        sys.exit(f"the checks failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_dry_run(workdir: Path, configfiles: list[str]) -> float:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "2"] + \
          [a for f in configfiles for a in ("--configfile", f)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    seconds = time.perf_counter() - t0
    if out.returncode != 0 or "Nothing to be done" not in out.stdout + out.stderr:
        sys.exit("`snakemake -n` failed or has jobs to run: the tree is not up to date\n"
                 + (out.stdout + out.stderr)[-3000:])
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", help="an up-to-date workflow folder (default: build a tiny one)")
    ap.add_argument("--configfile", nargs="*", default=[], help="the config overlays it was run with")
    ap.add_argument("--repeat", type=int, default=5, help="cached runs to time")
    args = ap.parse_args()
    if args.workdir:
        workdir = Path(args.workdir).resolve()
        configfiles = [str(Path(f).resolve()) for f in args.configfile]
    else:
        workdir, configfiles = tiny_tree(Path(tempfile.mkdtemp(prefix="config_check-")))
    config = merged_config(workdir, configfiles)

    clear_verdicts(workdir)
    cold = time_checks(workdir, config)
    cached = [time_checks(workdir, config) for _ in range(args.repeat)]
    clear_verdicts(workdir)
    dry_cold = time_dry_run(workdir, configfiles)
    dry = [time_dry_run(workdir, configfiles) for _ in range(args.repeat)]

    def imports(r):
        return ", ".join(m for m in ("torch", "transformers") if r[m]) or "neither torch nor transformers"

    load = os.getloadavg()[0]
    print(f"\ntree: {workdir} (config overlays: {configfiles or 'none'}); load average {load:.2f} "
          f"on {os.cpu_count()} cores")
    print("| what | seconds | note |\n|---|---|---|")
    print(f"| pre-job checks, cold (fresh process, no cached verdict) | {cold['seconds']:.2f} | imports "
          f"{imports(cold)} |")
    secs = [r["seconds"] for r in cached]
    print(f"| pre-job checks, cached (best / median of {len(secs)}) | {min(secs):.3f} / "
          f"{statistics.median(secs):.3f} | imports {imports(cached[0])}; target < 1 s |")
    print(f"| `snakemake -n`, up to date, cold | {dry_cold:.2f} | verdict cache emptied first |")
    print(f"| `snakemake -n`, up to date, cached (best / median of {len(dry)}) | {min(dry):.2f} / "
          f"{statistics.median(dry):.2f} | target < 3 s |")


if __name__ == "__main__":
    main()
