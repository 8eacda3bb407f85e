"""Edge circuits' cost on SmolLM2-135M, and the known circuit's exact reference (protocol §5g).

Cost: each phase in a process of its own (its peak RSS is its own), on N of the protocol's two-names
prompts (``patching.n`` of config/quick.yaml, 8, and of config/config.yaml, 64):

* ``eap``          — every edge's EAP score (two recording passes, one forward and backward pass);
* ``eap-ig``       — EAP-IG with ``edges.ig_steps`` steps; its cost per step is the gradient passes'
                     seconds over the steps;
* ``faithfulness`` — every circuit of the curves (each method's two rankings, AtP over nodes, the
                     random draws, at the benchmark's sizes) run on every prompt, with the guards:
                     the rule edges_faithfulness's work.

The known circuit (``--known``): both models trained as rule circuits_known trains them, each edge's
exact effect (the fall of the logit difference when that edge alone is patched), the rank correlation
of EAP's and EAP-IG's scores with it, and a greedy search for a small faithful circuit (drop the edge
whose removal keeps faithfulness highest while it stays ≥ ``edges.faithful``) — the numbers of
protocol §5g's "What was measured".

    .venv/bin/python benchmarks/edges.py --threads 2                  # quick and paper scale
    .venv/bin/python benchmarks/edges.py --known
    .venv/bin/python benchmarks/edges.py --threads 2 --record         # + benchmarks/records/edges.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PREPARED = ROOT / "results" / "models" / "smollm2-135m"
SCALES = {"quick": 8, "paper": 64}
PHASES = ("eap", "eap-ig", "faithfulness")


def _model_and_prompts(n: int, threads: int):
    import torch

    import headwatch as hw

    torch.set_num_threads(threads)
    m = hw.load_model(PREPARED if PREPARED.exists() else "smollm2-135m", "float32", "cpu")
    return m, hw.prompt_pairs(m, n=n)


def phase(name: str, n: int, threads: int) -> dict:
    """One phase on ``n`` prompts, in this process: its seconds (and the phase's own figures)."""
    import headwatch as hw
    from headwatch.circuits.edges import edge_attribution
    from headwatch.circuits.graph import EdgeGraph
    from headwatch.patching.batch import PromptBatch
    from headwatch.settings.edges import EdgesSettings

    m, prompts = _model_and_prompts(n, threads)
    edges = EdgesSettings.from_config(hw.load_config()["edges"])
    out = dict(phase=name, prompts=n, threads=threads)
    t0 = time.perf_counter()
    if name in ("eap", "eap-ig"):
        got = edge_attribution(m.adapter, EdgeGraph.of(m.adapter), PromptBatch.of(prompts), name, edges.ig_steps,
                               edges.score_batch)
        out.update(seconds=round(time.perf_counter() - t0, 2), steps=got["steps"],
                   per_step=round(got["seconds"]["gradients"] / got["steps"], 2),
                   recording=round(got["seconds"]["outputs"], 2))
    else:
        scores = hw.edge_scores(m, prompts, edges)
        t0 = time.perf_counter()
        curves = hw.edge_faithfulness(m, prompts, scores, edges)
        note = curves.attrs["note"]
        areas = curves.attrs["tables"]["areas"]
        out.update(seconds=round(time.perf_counter() - t0, 2), circuits=note["distinct_circuits"],
                   rows_per_second=note["rows_per_second"], patched_seconds=note["seconds"],
                   areas={r.method: [round(float(r.cpr), 3), round(float(r.cmd), 3)]
                          for r in areas.itertuples() if r.draw == -1})
    out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    return out


def known(threads: int) -> dict:
    """The known circuit's exact reference (module doc)."""
    import numpy as np
    import torch

    import headwatch as hw
    from headwatch.circuits.edges import edge_attribution, patched_metric
    from headwatch.circuits.graph import EdgeGraph, faithfulness, prune
    from headwatch.circuits.known import induction_prompts, train_known
    from headwatch.model.arch import Adapter
    from headwatch.settings.edges import EdgesSettings

    torch.set_num_threads(threads)
    cfg = hw.load_config()
    k, edges = cfg["circuits"]["known"], EdgesSettings.from_config(cfg["edges"])
    model = train_known(k, True)
    a = Adapter(model)
    g = EdgeGraph.of(a)
    names = g.edges()
    prompts = induction_prompts(k["vocab"], k["prompts"], k["half"][1], k["seed"] + 1)
    every = np.ones(g.n_edges, dtype=bool)
    run = lambda circuits: patched_metric(a, g, prompts, np.stack(circuits), 64).mean(dim=1).numpy()
    ends = run([every, ~every])
    single = run([every & (np.arange(g.n_edges) != e) for e in range(g.n_edges)])
    exact = ends[0] - single
    rank = lambda x: np.argsort(np.argsort(x))
    out = dict(gap=round(float(ends[0] - ends[1]), 3), edges=g.n_edges)
    for method in edges.methods:
        sc = edge_attribution(a, g, prompts, method, edges.ig_steps, edges.score_batch)["scores"]
        out[f"pearson_{method}"] = round(float(np.corrcoef(sc, exact)[0, 1]), 2)
        out[f"spearman_{method}"] = round(float(np.corrcoef(rank(sc), rank(exact))[0, 1]), 2)
        out[f"{method}_on"] = {f"{names['sender'][e]} -> {names['receiver'][e]}": [round(float(sc[e]), 3),
                                                                                     round(float(exact[e]), 3)]
                               for e in np.argsort(-exact)[:6]}
    keep, kept_f = every.copy(), 1.0
    while True:                                  # greedy: drop the edge that keeps f highest, while f >= threshold
        trials = [prune(g, keep & (np.arange(g.n_edges) != e)) for e in np.flatnonzero(keep)]
        if not trials:
            break
        f = faithfulness(run(trials), float(ends[0]), float(ends[1]))
        best = int(np.argmax(f))
        if f[best] < edges.faithful:
            break
        keep, kept_f = trials[best], float(f[best])
    out.update(greedy_edges=int(keep.sum()), greedy_faithfulness=round(kept_f, 3),
               greedy=[f"{names['sender'][e]} -> {names['receiver'][e]}" for e in np.flatnonzero(keep)])
    return out


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return dict(cpu=cpu, cores=os.cpu_count(), load=os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scales", default="quick,paper", help="of " + ", ".join(SCALES))
    ap.add_argument("--phase", choices=PHASES, help="run one phase here (the benchmark's own subprocesses)")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--known", action="store_true", help="the known circuit's exact reference instead")
    ap.add_argument("--record", action="store_true", help="write benchmarks/records/edges.json")
    args = ap.parse_args(argv)
    if args.phase:
        print(json.dumps(phase(args.phase, args.prompts, args.threads)))
        return 0
    if args.known:
        print(json.dumps(known(args.threads), indent=1))
        return 0
    before = machine()
    results = []
    for scale in args.scales.split(","):
        for name in PHASES:
            cmd = [sys.executable, __file__, "--phase", name, "--prompts", str(SCALES[scale]), "--threads",
                   str(args.threads)]
            got = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            r = dict(json.loads(got.stdout.strip().splitlines()[-1]), scale=scale)
            results.append(r)
            print(json.dumps(r), flush=True)
    after = machine()
    if args.record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
        load = f"load average {before['load'][0]:.1f} before, {after['load'][0]:.1f} after"
        rows = []
        for r in results:
            if r["phase"] == "faithfulness":
                figures = (f"{r['seconds']} s for {r['circuits']} distinct circuits x {r['prompts']} prompts with the "
                           f"guards ({r['rows_per_second']} circuit-prompt rows/s); peak RSS {r['peak_rss_gb']} GB")
            else:
                figures = (f"{r['seconds']} s ({r['recording']} s recording the senders, {r['per_step']} s per "
                           f"gradient step, {r['steps']} step{'s' if r['steps'] > 1 else ''}); peak RSS "
                           f"{r['peak_rss_gb']} GB")
            rows.append(dict(what=f"{r['phase']}, {r['scale']} scale ({r['prompts']} prompts)", figures=figures,
                             machine=f"{before['cpu']}, {before['cores']} cores, {args.threads} threads", load=load,
                             command=f".venv/bin/python benchmarks/edges.py --threads {args.threads} --record",
                             commit=commit, date=time.strftime("%Y-%m-%d")))
        record = dict(title="Edge circuits on SmolLM2-135M (benchmarks/edges.py)",
                      method="Each phase in a process of its own on N of the protocol's two-names prompts: EAP and "
                             "EAP-IG over all 70,651 edges (EAP-IG's cost per interpolation step is its gradient "
                             "passes' seconds over the steps), and the faithfulness curves — every circuit of each "
                             "method's two rankings, AtP over nodes and the random draws at the benchmark's sizes, "
                             "run on every prompt, with the guards (rule edges_faithfulness's work). Peak RSS is the "
                             "phase's process's.",
                      rows=rows)
        (ROOT / "benchmarks" / "records" / "edges.json").write_text(json.dumps(record, indent=1) + "\n")
        print("wrote benchmarks/records/edges.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
