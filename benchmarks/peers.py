"""headwatch against its peers, every task in one run: TransformerLens 4.3 and nnsight 0.8 on the same
model, prompts, dtype and threads, interleaved, each peer's result checked equal to headwatch's before
its time counts, beside each task's arithmetic bound.

    .venv/bin/python benchmarks/peers.py --quick                 # SmolLM2, a few prompts (< 10 min, 2 cores)
    .venv/bin/python benchmarks/peers.py --record                # the full form; writes benchmarks/records/peers.json
    .venv/bin/python benchmarks/peers.py --quick --tasks maps,cuts --rounds 1

The tasks (SmolLM2-135M, float32, the protocol's phrases and two-names prompts):

* ``maps``        — every head's attention map on the protocol's phrases (the four scores read them);
* ``cuts``        — every head cut (zeroed) alone on each phrase, the expected token's probability;
* ``patch_heads`` — exact activation patching of every head's z (TransformerLens's
                    ``get_act_patch_attn_head_out_all_pos``; nnsight's documented loop);
* ``positions``   — heads patched at one position at a time (TransformerLens's per-position setter;
                    headwatch's cached sweep) on a subset of heads;
* ``attribution`` — attribution patching at every head's z (TransformerLens 4.3's
                    ``attribution_patch``, node granularity; nnsight's gradient recipe);
* ``paths``       — path patching from every head of the layers below into one receiver's q, k, v (no peer
                    has it: the obvious loop of two hooked forward passes per edge, written with
                    TransformerLens's hooks);
* ``edges``       — edge attribution over the whole graph (TransformerLens 4.3's ``attribution_patch``,
                    edge granularity, which refuses grouped keys: both run on SmolLM2's ungrouped twin, the
                    same function with a key and value per head; its gradient is at the corrupted run, so
                    headwatch runs EAP-IG's first step, the gradient at the corrupted embeddings);
* ``direct``      — every head's direct logit attribution, clean and corrupted runs (TransformerLens's
                    ``stack_head_results`` with ``apply_ln``, on a bridge whose weights are processed as
                    HookedTransformer's; ``hw.direct_effects``);
* ``composition`` — the Q-, K- and V-composition scores of every pair of heads of the first layers
                    (TransformerLens's ``composition_scores``, what its ``all_composition_scores`` calls, on
                    the processed weights; headwatch's factored forms, ``headwatch.lens.composition``).

For each task every peer runs once untimed and its result is compared with headwatch's (max |Δ| within
the task's tolerance, else the run stops: a time counts only for the same numbers); then ``--rounds``
rounds, each running every peer once in turn (A B C A B C …), so that load from other work falls on all
alike. Each row: the median wall and CPU time (this process) with their range, the peak memory the
call added (resident set sampled every 5 ms, above its level when the call began), the ratio of the
peer's median wall time to headwatch's, and the arithmetic bound: the multiply-adds of the work the
task needs (each patch from its own layer up, the vocabulary at the last position only) over the
multiply-adds the peer does — so the table says both how far ahead of a peer headwatch is and how much
a peer could gain at most by doing only the needed arithmetic. The machine, the float32 matmul rate
measured in the same run (before and after), the load before and after, the command and the commit
go into the record, and ``benchmarks/page.py`` writes docs/benchmarks.md from it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

PREPARED = ROOT / "results" / "models" / "smollm2-135m"
TASKS = ("maps", "cuts", "patch_heads", "positions", "attribution", "paths", "edges", "direct", "composition")
QUICK = dict(prompts=4, phrases=("names", "noise"), heads=6, position_heads=2, receiver_layers=1, edge_prompts=4,
             rounds=2, composition_layers=8)
FULL = dict(prompts=8, phrases=None, heads=27, position_heads=4, receiver_layers=2, edge_prompts=4, rounds=3,
            composition_layers=12)
"""The two forms: prompts of the two-names task, phrases (None: every phrase of the protocol), heads of
the every-head tasks (None: all 270; 27 is every tenth), heads of the per-position task, the layers below
the receiver whose heads send (None: every earlier layer), prompts of the edges task, rounds, the layers whose
heads' composition scores are compared (None: all; TransformerLens's all-pairs tensor grows with their square). The full
form is sized to take about 20 minutes on 2 cores: TransformerLens's loops grow with every head and
edge, and its edge attribution takes 20 s a prompt — the ratios, not the sizes, are what it measures."""


# ------------------------------------------------------------------ measuring
def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakMemory:
    """The highest resident set while inside, above its level on entry (bytes), sampled every 5 ms."""

    def __enter__(self):
        self.start = self.peak = rss()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss())
        self.added = self.peak - self.start


def measure(fn: Callable):
    """(result, wall s, CPU s of this process, memory added in bytes)."""
    with PeakMemory() as mem:
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return out, wall, cpu, mem.added


def matmul_rate() -> float:
    from headwatch.workflow.run_record import matmul_rate as rate

    return rate()


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return dict(cpu=cpu, cores=len(os.sched_getaffinity(0)), load=[round(x, 2) for x in os.getloadavg()])


@dataclass
class Task:
    """One task: its peers (name → a call returning a comparable array; headwatch's first), the
    tolerance of the comparison, the multiply-adds each peer does and the task needs."""
    name: str
    what: str
    peers: dict[str, Callable]
    tolerance: float
    needed: float
    macs: dict[str, float]
    compared: str
    notes: list[str] = field(default_factory=list)


def compare(task: Task, results: dict) -> dict:
    """Every peer's result against headwatch's: max |Δ| (SystemExit above the task's tolerance)."""
    ref = np.asarray(results["headwatch"], dtype=np.float64)
    out = {}
    for name, got in results.items():
        if name == "headwatch":
            continue
        got = np.asarray(got, dtype=np.float64)
        if got.shape != ref.shape:
            raise SystemExit(f"{task.name}: {name} returned shape {got.shape}, headwatch {ref.shape}")
        missing = np.isnan(got) != np.isnan(ref)
        if missing.any():
            raise SystemExit(f"{task.name}: {name} leaves {int(missing.sum())} of {got.size} values missing where "
                             "headwatch has them, or the other way round: not the same numbers")
        diff = float(np.nanmax(np.abs(got - ref))) if got.size else 0.0
        if not diff <= task.tolerance:
            raise SystemExit(f"{task.name}: {name} differs from headwatch by {diff:g} > {task.tolerance:g} "
                             f"({task.compared}): its time would not be for the same numbers")
        out[name] = diff
    return out


def run_task(task: Task, rounds: int, log=print) -> dict:
    """Each peer once untimed and compared, then ``rounds`` interleaved timed rounds (0: the comparison
    only, no row of times)."""
    results = {name: fn() for name, fn in task.peers.items()}
    diffs = compare(task, results)
    if not rounds:
        return dict(task=task.name, what=task.what, compared=task.compared, tolerance=task.tolerance,
                    peers=list(task.peers), max_diff=diffs, rows=[])
    times = {name: [] for name in task.peers}
    for r in range(rounds):
        for name, fn in task.peers.items():
            _, wall, cpu, added = measure(fn)
            times[name].append((wall, cpu, added))
            log(f"  {task.name} round {r + 1}: {name} {wall:.2f} s wall, {cpu:.2f} s CPU, "
                f"+{added / 2**20:.0f} MiB")
    rows = []
    best = statistics.median(w for w, _, _ in times["headwatch"])
    for name, ts in times.items():
        walls, cpus, mems = zip(*ts)
        rows.append(dict(task=task.name, peer=name, wall_s=statistics.median(walls), wall_range=[min(walls), max(walls)],
                         cpu_s=statistics.median(cpus), cpu_range=[min(cpus), max(cpus)], memory_mib=max(mems) / 2**20,
                         ratio=statistics.median(walls) / best, macs=task.macs[name],
                         bound=task.needed / task.macs[name], max_diff=diffs.get(name, 0.0)))
    return dict(task=task.name, what=task.what, compared=task.compared, tolerance=task.tolerance,
                needed_macs=task.needed, notes=task.notes, rows=rows)


# ------------------------------------------------------------------ the model, its peers, the inputs
class Setup:
    """The model (float32, this process's threads), its TransformerLens bridge and nnsight wrapper,
    the protocol's phrases and prompts, and the multiply-add counts of its parts."""

    def __init__(self, form: dict, folder: Path | None = None):
        import headwatch as hw
        from ablation import compare_bridge_logits, transformer_lens_bridge
        from headwatch.patching.batch import PromptBatch
        from headwatch.scores.sequences import phrases_table

        self.form = form
        self.cfg = hw.load_config()
        if folder is None and PREPARED.exists():
            folder = PREPARED
        if folder is None:                      # the bundled model, written once as a folder the peers can boot
            m = hw.load_model()
            folder = Path(tempfile.mkdtemp(prefix="headwatch-smollm2-"))
            m.model.save_pretrained(folder)
            m.tokenizer.save_pretrained(folder)
        self.folder = Path(folder)
        self.m = hw.load_model(self.folder, "float32", "cpu")
        self.model, self.tokenizer, self.adapter = self.m
        self.device = torch.device("cpu")
        phrase_cfg = self.cfg["phrases"]
        if form["phrases"]:
            phrase_cfg = {k: v for k, v in phrase_cfg.items() if k in form["phrases"]}
        table = phrases_table(self.tokenizer, phrase_cfg, self.cfg["sequences"]["vocab_low"],
                              self.cfg["sequences"]["vocab_high"])
        self.phrases = [(torch.tensor([list(r.token_ids)]), int(r.expected_id)) for r in table.itertuples()]
        self.prompts = hw.prompt_pairs(self.m, n=form["prompts"])
        self.batch = PromptBatch.of(self.prompts)
        self.bridge, self.tl_version = transformer_lens_bridge(folder, self.tokenizer, "float32", self.device)
        compare_bridge_logits(self.bridge, self.model, [(self.batch.clean, None), (self.batch.corrupted, None)], self.device, 1e-4)
        from importlib.metadata import version
        from nnsight import LanguageModel

        self.nns = LanguageModel(self.model, tokenizer=self.tokenizer)
        self.nns_version = version("nnsight")
        a = self.adapter
        self.block = [sum(m.weight.numel() for m in a.block(l).modules() if isinstance(m, torch.nn.Linear))
                      for l in range(a.n_layers)]
        self.vocab = a.embeddings()[1].weight.numel()

    def forward_macs(self, tokens: int, first_layer: int = 0, vocab_rows: int | None = None) -> float:
        """Multiply-adds of the weight products of a forward pass over ``tokens`` tokens from block
        ``first_layer`` up, the vocabulary projection on ``vocab_rows`` of them (default: every one)."""
        return tokens * sum(self.block[first_layer:]) + (tokens if vocab_rows is None else vocab_rows) * self.vocab


def pick(items, n):
    """All of ``items``, or ``n`` spread evenly over them."""
    if not n or n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


# ------------------------------------------------------------------ the tasks
def task_maps(st: Setup) -> Task:
    from headwatch.model.interventions import attention_maps

    L = st.adapter.n_layers

    def headwatch():
        return np.concatenate([attention_maps(st.model, ids, st.adapter)[0].numpy().ravel() for ids, _ in st.phrases])

    @torch.no_grad()
    def transformer_lens():
        out = []
        for ids, _ in st.phrases:
            _, cache = st.bridge.run_with_cache(ids, names_filter=lambda n: n.endswith("attn.hook_pattern"))
            out.append(torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(L)]).numpy().ravel())
        return np.concatenate(out)

    @torch.no_grad()
    def nnsight():
        out = []
        layers = st.nns.model.layers
        for ids, _ in st.phrases:
            saved = []                            # nnsight runs the block apart: fill a list made outside
            with st.nns.trace(ids):
                saved.extend(layers[l].self_attn.output[1].save() for l in range(L))
            out.append(torch.stack([s[0] for s in saved]).numpy().ravel())
        return np.concatenate(out)

    tokens = sum(ids.shape[1] for ids, _ in st.phrases)
    full = st.forward_macs(tokens)
    return Task("maps", f"every head's attention map on {len(st.phrases)} phrases", dict(
        headwatch=headwatch, transformer_lens=transformer_lens, nnsight=nnsight), 1e-5,
        needed=tokens * sum(st.block), macs=dict(headwatch=tokens * sum(st.block), transformer_lens=full, nnsight=full),
        compared="every attention weight of every head, layer and phrase")


def task_cuts(st: Setup) -> Task:
    from ablation import batched, transformer_lens_loop

    heads = pick(st.adapter.heads(), st.form["heads"])

    def headwatch():
        return batched(st.model, st.adapter, st.phrases, heads, 64).numpy()

    def transformer_lens():
        return transformer_lens_loop(st.bridge, st.adapter, st.phrases, heads, st.device).numpy()

    @torch.no_grad()
    def nnsight():
        out = []
        layers = st.nns.model.layers
        for ids, expected in st.phrases:
            for l, h in heads:
                with st.nns.trace(ids):
                    z = layers[l].self_attn.o_proj.input
                    z[:, :, _z_slice(st, h)] = 0
                    logits = st.nns.output.logits.save()
                out.append(torch.softmax(logits[0, -1].float(), -1)[expected].item())
        return np.array(out)

    tokens = [ids.shape[1] for ids, _ in st.phrases]
    loop = sum(st.forward_macs(t) for t in tokens) * len(heads)
    needed = sum(st.forward_macs(t, l, 1) for t in tokens for l, _ in heads)
    return Task("cuts", f"{len(heads)} heads each cut alone on {len(st.phrases)} phrases", dict(
        headwatch=headwatch, transformer_lens=transformer_lens, nnsight=nnsight), 1e-5,
        needed=needed, macs=dict(headwatch=needed, transformer_lens=loop, nnsight=loop),
        compared="the expected token's probability at the last position of every (head, phrase)",
        notes=["headwatch's batched path runs each cut from its own layer up with the vocabulary at the last "
               "position; the cuts' random control is headwatch's alone and not timed here"])


def _z_slice(st, h):
    d = st.adapter.head_dim
    return slice(h * d, (h + 1) * d)


def task_patch_heads(st: Setup) -> Task:
    from patching import batched, transformer_lens_loop

    heads = pick(st.adapter.heads(), st.form["heads"])
    sel = tuple(zip(*heads))
    all_heads = len(heads) == len(st.adapter.heads())

    def headwatch():
        return batched(st.model, st.adapter, st.batch, 64, heads)[0][sel]

    def transformer_lens():
        return transformer_lens_loop(st.bridge, st.batch,
                                     None if all_heads else heads)[sel]

    @torch.no_grad()
    def nnsight():
        layers = st.nns.model.layers
        L = st.adapter.n_layers
        zs = []
        with st.nns.trace(st.batch.clean):
            zs.extend(layers[l].self_attn.o_proj.input.save() for l in range(L))
            clean_logits = st.nns.output.logits.save()
        with st.nns.trace(st.batch.corrupted):
            corrupted_logits = st.nns.output.logits.save()
        c = float(st.batch.logit_diff(clean_logits[:, -1]).double().mean())
        r = float(st.batch.logit_diff(corrupted_logits[:, -1]).double().mean())
        out = []
        for l, h in heads:
            sl = _z_slice(st, h)
            with st.nns.trace(st.batch.corrupted):
                layers[l].self_attn.o_proj.input[:, :, sl] = zs[l][:, :, sl]
                logits = st.nns.output.logits.save()
            out.append((float(st.batch.logit_diff(logits[:, -1]).double().mean()) - r) / (c - r))
        return np.array(out)

    n, T = st.batch.clean.shape
    loop = len(heads) * st.forward_macs(n * T)
    needed = sum(n * (T * sum(st.block[l:]) + st.vocab) for l, _ in heads)
    return Task("patch_heads", f"{len(heads)} heads' z patched clean → corrupted, {n} prompts", dict(
        headwatch=headwatch, transformer_lens=transformer_lens, nnsight=nnsight), 1e-4,
        needed=needed, macs=dict(headwatch=needed, transformer_lens=loop, nnsight=loop),
        compared="each head's normalized score (patched − corrupted) / (clean − corrupted)")


def task_positions(st: Setup) -> Task:
    from patching import cached_by_position, transformer_lens_by_position

    from headwatch.patching.patcher import position_patches
    from headwatch.patching.positions import multiply_adds

    heads = pick(st.adapter.heads(), st.form["position_heads"])
    n, T = st.batch.clean.shape
    patches = position_patches(heads, T)

    def headwatch():
        return cached_by_position(st.model, st.adapter, st.batch, 64, patches)

    def transformer_lens():
        return transformer_lens_by_position(st.bridge, st.batch, patches)

    @torch.no_grad()
    def nnsight():
        layers = st.nns.model.layers
        zs = {}
        with st.nns.trace(st.batch.clean):
            for l in sorted({p.layer for p in patches}):
                zs[l] = layers[l].self_attn.o_proj.input.save()
        out = []
        for p in patches:
            sl = _z_slice(st, p.unit)
            with st.nns.trace(st.batch.corrupted):
                layers[p.layer].self_attn.o_proj.input[:, p.position, sl] = zs[p.layer][:, p.position, sl]
                logits = st.nns.output.logits.save()
            out.append(float(st.batch.logit_diff(logits[:, -1]).double().mean()))
        return np.array(out)

    loop, mine = multiply_adds(st.adapter, patches, n, T)
    return Task("positions", f"{len(heads)} heads patched at each of {T} positions, {n} prompts", dict(
        headwatch=headwatch, transformer_lens=transformer_lens, nnsight=nnsight), 1e-4,
        needed=mine, macs=dict(headwatch=mine, transformer_lens=loop, nnsight=loop),
        compared="the mean patched logit difference of every (head, position)",
        notes=["headwatch's cached sweep runs a patch from its position on, the corrupted run's keys and values "
               "before it from a cache"])


def task_attribution(st: Setup) -> Task:
    from headwatch.patching.attribution import attribution_patching

    L, H = st.adapter.n_layers, st.adapter.n_heads

    def headwatch():
        return attribution_patching(st.model, st.adapter, st.batch, 64).numpy().ravel()

    def transformer_lens():
        from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

        out = np.zeros((L, H))
        for i in range(len(st.batch.clean)):      # its metric reads one example's logits: one pair at a time
            metric = lambda logits, i=i: st.batch.logit_diff(logits[:, -1], slice(i, i + 1)).mean()
            got = attribution_patch(st.bridge, st.batch.clean[i:i + 1], st.batch.corrupted[i:i + 1], metric,
                                    EdgeAttributionConfig(granularity="node"))
            for node, score in got.node_scores.items():
                if node.kind == "attn_head_out":
                    out[node.layer, node.head] += score / len(st.batch.clean)
        return out.ravel()

    def nnsight():
        layers = st.nns.model.layers
        zc, zk, grads = [], [], []
        with torch.no_grad(), st.nns.trace(st.batch.clean):
            zc.extend(layers[l].self_attn.o_proj.input.save() for l in range(L))
        with st.nns.trace(st.batch.corrupted):            # nnsight 0.8's recipe: .grad inside `with loss.backward()`
            zk.extend(layers[l].self_attn.o_proj.input.save() for l in range(L))
            metric = st.batch.logit_diff(st.nns.output.logits[:, -1]).mean()
            with metric.backward():                  # gradients arrive in reverse order of the forward
                grads.extend(zk[l].grad.save() for l in reversed(range(L)))
        grads = grads[::-1]
        d = st.adapter.head_dim
        out = np.zeros((L, H))
        for l in range(L):
            prod = ((zc[l] - zk[l]) * grads[l]).sum(dim=(0, 1)).view(H, d).sum(-1)
            out[l] = prod.detach().double().numpy()
        return out.ravel()

    n, T = st.batch.clean.shape
    work = 3 * st.forward_macs(n * T)            # a clean forward, a corrupted forward and its backward (2 x)
    return Task("attribution", f"attribution patching at every head's z, {n} prompts", dict(
        headwatch=headwatch, transformer_lens=transformer_lens, nnsight=nnsight), 1e-4,
        needed=work, macs=dict(headwatch=work, transformer_lens=work, nnsight=work),
        compared="each head's estimate (z_clean − z_corrupted) · ∂metric/∂z at the corrupted run",
        notes=["AtP* (the QK fix and GradDrop) is headwatch's alone: no peer computes it"])


def task_paths(st: Setup) -> Task:
    from headwatch.circuits.path_patching import PathPatcher, edges_into
    from headwatch.patching.patcher import Patcher

    receiver = (st.adapter.n_layers - 7, 3) if st.adapter.n_layers > 7 else (st.adapter.n_layers - 1, 0)
    below = st.form["receiver_layers"]
    edges = edges_into(st.adapter, [receiver], ("q", "k", "v"), None, below)
    a = st.adapter
    g = a.group_size

    def headwatch():
        p = Patcher(st.model, a, st.batch, 64, extra_sites=("q", "k", "v", "mlp_out"))
        return PathPatcher(p).run(edges).double().mean(dim=1).numpy()

    @torch.no_grad()
    def transformer_lens():
        b = st.bridge
        _, clean_cache = b.run_with_cache(st.batch.clean, names_filter=lambda n: n.endswith("hook_z"))
        _, corr_cache = b.run_with_cache(st.batch.corrupted, names_filter=lambda n: n.endswith(("hook_z", "hook_mlp_out")))
        out = []
        for e in edges:
            def freeze(layer, name):                 # the bridge calls a hook by its own name: bind ours
                def hook_fn(act, hook):
                    if name.endswith("hook_mlp_out"):
                        return corr_cache[name]
                    new = corr_cache[name].clone()
                    if layer == e.sender_layer:
                        new[:, :, e.sender_head] = clean_cache[name][:, :, e.sender_head]
                    return new
                return hook_fn
            site = f"blocks.{e.receiver_layer}.attn.hook_{e.input}"
            unit = e.receiver_head if e.input == "q" else e.receiver_head // g
            kept = {}
            hooks = [(f"blocks.{l}.attn.hook_z", freeze(l, f"blocks.{l}.attn.hook_z"))
                     for l in range(e.sender_layer, a.n_layers)]
            hooks += [(f"blocks.{l}.hook_mlp_out", freeze(l, f"blocks.{l}.hook_mlp_out"))
                      for l in range(e.sender_layer, a.n_layers)]
            hooks.append((site, lambda act, hook: kept.__setitem__("x", act[:, :, unit].clone())))
            b.run_with_hooks(st.batch.corrupted, fwd_hooks=hooks)

            def put(act, hook):
                act = act.clone()
                act[:, :, unit] = kept["x"]
                return act
            logits = b.run_with_hooks(st.batch.corrupted, fwd_hooks=[(site, put)])
            out.append(float(st.batch.logit_diff(logits[:, -1]).double().mean()))
        return np.array(out)

    n, T = st.batch.clean.shape
    loop = 2 * len(edges) * st.forward_macs(n * T)
    needed = sum(n * T * sum(st.block[e.sender_layer:e.receiver_layer + 1]) + n * (T * sum(st.block[e.receiver_layer:])
                                                                                   + st.vocab) for e in edges)
    return Task("paths", f"{len(edges)} edges into L{receiver[0]}H{receiver[1]}'s q, k and v, {n} prompts", dict(
        headwatch=headwatch, transformer_lens=transformer_lens), 1e-4,
        needed=needed, macs=dict(headwatch=needed, transformer_lens=loop),
        compared="each edge's path-patched mean logit difference",
        notes=["no peer has path patching: the TransformerLens row is the obvious loop of two hooked forward "
               "passes per edge, written with its hooks (pass A: the sender clean, everything from its layer up "
               "frozen at the corrupted run; pass B: the receiver's input from pass A)"])


def task_edges(st: Setup) -> Task:
    from ablation import transformer_lens_bridge

    from headwatch.circuits.edges import edge_attribution
    from headwatch.circuits.graph import EdgeGraph, node_name
    from headwatch.patching.kv import ungrouped_twin

    twin, tw = ungrouped_twin(st.model, st.adapter)
    folder = Path(tempfile.mkdtemp(prefix="headwatch-twin-"))
    twin.save_pretrained(folder)
    st.tokenizer.save_pretrained(folder)
    bridge, _ = transformer_lens_bridge(folder, st.tokenizer, "float32", st.device)
    graph = EdgeGraph.of(tw)
    names = graph.edges()
    index = {(s, r): i for i, (s, r) in enumerate(zip(names["sender"], names["receiver"]))}

    def reader(node) -> str:           # TransformerLens's receiver kinds, by the graph's names (its head: a group)
        kind = {"q_input": "q", "k_input": "k", "v_input": "v", "mlp_in": "mlp"}.get(node.kind, "logits")
        return node_name(kind, node.layer, node.head)

    def writer(node) -> str:
        return node_name({"embed": "input", "attn_head_out": "head", "mlp_out": "mlp"}[node.kind], node.layer,
                         node.head)

    k = st.form["edge_prompts"]
    part = st.batch.rows(slice(None, k))

    def headwatch():
        return edge_attribution(tw, graph, part, "eap-ig", steps=1, batch=16)["scores"]

    def transformer_lens():
        from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

        out = np.full(graph.n_edges, np.nan)
        total = np.zeros(graph.n_edges)
        for i in range(k):
            metric = lambda logits, i=i: part.logit_diff(logits[:, -1], slice(i, i + 1)).mean()
            got = attribution_patch(bridge, part.clean[i:i + 1], part.corrupted[i:i + 1], metric,
                                    EdgeAttributionConfig(granularity="edge"))
            for (w, r), score in got.edge_scores.items():
                total[index[(writer(w), reader(r))]] += score / k
                out[index[(writer(w), reader(r))]] = 0.0
        return out + total

    n, T = part.clean.shape
    work = 3 * st.forward_macs(n * T) + len(graph.senders) * len(graph.receivers) * n * T * st.adapter.width
    return Task("edges", f"EAP over all {graph.n_edges:,} edges of SmolLM2's ungrouped twin, {n} prompts", dict(
        headwatch=headwatch, transformer_lens=transformer_lens), 1e-4,
        needed=work, macs=dict(headwatch=work, transformer_lens=work),
        compared="every edge's score (clean − corrupted sender output) · ∂metric/∂(receiver input) at the corrupted "
                 "run",
        notes=["TransformerLens 4.3 refuses grouped keys (GQA) at edge granularity and takes its gradient at the "
               "corrupted run: both run on the ungrouped twin (the same function, a key and value per head), "
               "headwatch with EAP-IG's first step (the gradient at the corrupted embeddings)"])


def _processed_bridge(st: Setup):
    """A second TransformerLens bridge of the model, its weights processed as HookedTransformer processes them
    (``enable_compatibility_mode``: the norms' weights folded, centring): the coordinates its direct logit
    attribution and composition scores are read in (made once, apart from the raw bridge the other tasks hook)."""
    from ablation import transformer_lens_bridge

    if getattr(st, "processed", None) is None:
        st.processed, _ = transformer_lens_bridge(st.folder, st.tokenizer, "float32", st.device)
        st.processed.enable_compatibility_mode(disable_warnings=True)
    return st.processed


def task_direct(st: Setup) -> Task:
    import headwatch as hw

    b = _processed_bridge(st)
    H = st.adapter.n_heads
    heads = len(st.adapter.heads())
    settings = dict(hw.load_config()["lens"])
    checked = hw.direct_effects(st.m, st.prompts, settings=settings)        # untimed: the guard's bound
    bound = checked.attrs["guards"]["sum_is_logit_diff"]["bound"]

    def headwatch():
        t = hw.direct_effects(st.m, st.prompts, settings=settings)
        t = t[t["kind"] == "head"]
        return np.concatenate([t["clean"].to_numpy(), t["corrupted"].to_numpy()])

    @torch.no_grad()
    def transformer_lens():
        out = []
        direction = b.tokens_to_residual_directions(st.batch.answer) - b.tokens_to_residual_directions(st.batch.distractor)
        for ids in (st.batch.clean, st.batch.corrupted):
            _, cache = b.run_with_cache(ids)
            stack = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True)    # [heads, prompts, width]
            out.append((stack * direction).sum(-1).double().mean(-1).numpy())
        return np.concatenate(out)

    n, T = st.batch.clean.shape
    needed = 2 * st.forward_macs(n * T, 0, n) + 2 * n * heads * st.adapter.head_dim * st.adapter.width
    full = 2 * st.forward_macs(n * T) + 2 * n * heads * st.adapter.head_dim * st.adapter.width
    return Task("direct", f"every head's direct logit attribution on {n} prompts, clean and corrupted", dict(
        headwatch=headwatch, transformer_lens=transformer_lens), bound,
        needed=needed, macs=dict(headwatch=needed, transformer_lens=full),
        compared=f"each of the {H * st.adapter.n_layers} heads' term of the logit difference answer − distractor at the "
                 "last position (the final norm's scale frozen: TransformerLens's stack_head_results with apply_ln), "
                 "mean over the prompts, both runs; tolerance: the sum guard's bound (float32 rounding of every "
                 "component's products)",
        notes=["direct effects: TransformerLens on a bridge in compatibility mode (its weights processed as "
               "HookedTransformer's: the final norm's weight folded into W_U), which runs and caches every hook; "
               "headwatch captures z, the feed-forward outputs and the stream at the last position, its call with "
               "the sum guard"])


def task_composition(st: Setup) -> Task:
    from types import SimpleNamespace

    from transformer_lens.utilities.matrix import composition_scores

    from headwatch.guards import Rounding
    from headwatch.lens import composition as C

    b = _processed_bridge(st)
    a = st.adapter
    k = min(st.form["composition_layers"] or a.n_layers, a.n_layers)
    H, W, d, g = a.n_heads, a.width, a.head_dim, a.group_size
    first = SimpleNamespace(n_layers=k, n_heads=H, group_size=g)          # the first k layers, as an adapter says them

    def headwatch():
        made = [C.factors(C.layer_weights(a, l)) for l in range(k)]
        c = C.composition_table(first, made)
        return np.concatenate([c.loc[c["input"] == i, "head_score"].to_numpy() for i in ("q", "k", "v")])

    @torch.no_grad()
    def transformer_lens():
        later = torch.tensor([(l, h, m, j) for l in range(k) for h in range(H) for m in range(l + 1, k)
                              for j in range(H)])
        OV, QK = b.OV[:k], b.QK[:k]
        out = []
        for right in (QK, QK.T, OV):                  # what all_composition_scores pairs with OV for Q, K, V
            scores = composition_scores(OV, right, broadcast_dims=True)
            out.append(scores[later[:, 0], later[:, 1], later[:, 2], later[:, 3]].double().numpy())
        return np.concatenate(out)

    pairs = H * H * k * (k - 1) // 2
    mine = pairs * W * d * d * (1 + 2 / g) + 2 * pairs * d ** 3 * (1 + 1 / g)
    theirs = 3 * (k * H) ** 2 * W * d * d
    bound = Rounding(1.0, "float32", 1.0, 3, W * d, of="a composition score's largest value, 1").bound
    return Task("composition", f"Q-, K- and V-composition scores of all {pairs:,} pairs of heads in different layers "
                               f"among the first {k} of {a.n_layers} layers",
                dict(headwatch=headwatch, transformer_lens=transformer_lens), bound,
                needed=3 * pairs * W * d * d, macs=dict(headwatch=mine, transformer_lens=theirs),
                compared="every pair's per-head composition score ||W_OV^A W^B||_F / (||W_OV^A||_F ||W^B||_F) (W^B the "
                         "receiver's QK, its transpose or its OV): TransformerLens's composition_scores (the function "
                         "its all_composition_scores calls) on its processed weights, headwatch's head_score; "
                         "tolerance: float32 rounding of a ratio of three norms of products over width x head size terms",
                notes=["composition: the first layers only, for both: TransformerLens pairs every head with every head "
                       "as one [layers, heads, layers, heads, head_dim, head_dim] tensor and more, whose all_composition_"
                       "scores on all 30 of SmolLM2's layers passed 22 GB of memory and was killed on a 23 GB machine; "
                       "headwatch's hw.weight_circuits scores all 30 layers (105,705 scores with their nulls) in "
                       "1.5 GB (docs/protocol.md, §5h)"])


BUILDERS = dict(maps=task_maps, cuts=task_cuts, patch_heads=task_patch_heads, positions=task_positions,
                attribution=task_attribution, paths=task_paths, edges=task_edges, direct=task_direct,
                composition=task_composition)


# ------------------------------------------------------------------ the run and its record
def table(results: list[dict]) -> str:
    out = ["| task | peer | wall s (median, range) | CPU s | memory added | × headwatch's wall | arithmetic bound "
           "(needed / done) | max \\|Δ\\| |", "|---|---|---|---|---|---|---|---|"]
    for t in results:
        for r in t["rows"]:
            out.append(f"| {t['task']}: {t['what']} | {r['peer']} | {r['wall_s']:.2f} ({r['wall_range'][0]:.2f}–"
                       f"{r['wall_range'][1]:.2f}) | {r['cpu_s']:.2f} | {r['memory_mib']:.0f} MiB | "
                       f"{r['ratio']:.2f} | {r['bound']:.2f} | {r['max_diff']:.1e} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SmolLM2 on a few prompts, phrases and heads")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--rounds", type=int, help="timed rounds (default: 2 quick, 3 full)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--check", action="store_true", help="compare every peer with headwatch, time nothing")
    ap.add_argument("--model", help="a model folder (default: results/models/smollm2-135m, else the bundled model)")
    ap.add_argument("--record", action="store_true", help="write benchmarks/records/peers.json")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    form = dict(QUICK if args.quick else FULL)
    rounds = 0 if args.check else (args.rounds or form["rounds"])
    torch.set_num_threads(args.threads)
    unknown = sorted(set(args.tasks.split(",")) - set(TASKS))
    if unknown:
        raise SystemExit(f"--tasks: {unknown} are not tasks; the tasks are {list(TASKS)}")
    before = dict(machine(), matmul_macs_per_s=matmul_rate())
    st = Setup(form, Path(args.model) if args.model else None)
    results = []
    for name in args.tasks.split(","):
        print(f"{name}: building", flush=True)
        task = BUILDERS[name](st)
        print(f"{name}: {task.what}; every peer equal within {task.tolerance:g}, then {rounds} rounds", flush=True)
        results.append(run_task(task, rounds))
    after = dict(machine(), matmul_macs_per_s=matmul_rate())
    if not args.check:
        print(table(results))
    for t in results:
        print(f"{t['task']}: " + ", ".join(f"{peer} max |Δ| {d:.1e}" for peer, d in
                                          (t.get("max_diff") or {r['peer']: r['max_diff'] for r in t["rows"]
                                                                  if r["peer"] != "headwatch"}).items()))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    command = "benchmarks/peers.py " + " ".join(argv if argv is not None else sys.argv[1:])
    run = dict(form="quick" if args.quick else "full", rounds=rounds, threads=args.threads, before=before, after=after,
               commit=commit, command=f".venv/bin/python {command.strip()}", date=time.strftime("%Y-%m-%d"),
               transformer_lens=st.tl_version, nnsight=st.nns_version, torch=torch.__version__, tasks=results)
    if args.json:
        Path(args.json).write_text(json.dumps(run, indent=1) + "\n")
    if args.record:
        if args.check or args.quick:
            raise SystemExit("--record: the page shows the full form's times (not --quick, not --check)")
        write_record(run, None if set(args.tasks.split(",")) == set(TASKS) else args.tasks.split(","))
    return 0


def write_record(run: dict, tasks: list[str] | None = None) -> None:
    """benchmarks/records/peers.json: the table of this run with its machine, rate, load, command, commit;
    a run of some ``tasks`` only, ``peers-<tasks>.json`` beside it (the full run's record stays whole)."""
    b, a = run["before"], run["after"]
    rate = f"{b['matmul_macs_per_s'] / 1e9:.1f} / {a['matmul_macs_per_s'] / 1e9:.1f} G multiply-adds/s before / after"
    head = (f"Measured {run['date']} at commit `{run['commit']}`: `{run['command']}` ({run['form']} form, "
            f"{run['rounds']} rounds, {run['threads']} threads); {b['cpu']}, {b['cores']} cores; float32 matmul "
            f"{rate}; load average {b['load'][0]:.2f} before, {a['load'][0]:.2f} after; torch {run['torch']}, "
            f"TransformerLens {run['transformer_lens']}, nnsight {run['nnsight']}.")
    notes = [f"- {t['task']}: compared {t['compared']} (tolerance {t['tolerance']:g})"
             + ("; " + "; ".join(t["notes"]) if t["notes"] else "") for t in run["tasks"]]
    which = "every task" if tasks is None else f"the tasks {', '.join(tasks)}"
    record = dict(title=f"headwatch against TransformerLens and nnsight, {which} in one run (benchmarks/peers.py)",
                  method=__doc__.split("\n\n")[2].replace("\n", " ").strip(),
                  table="\n".join([head, "", table(run["tasks"]), "", *notes]), run=run)
    path = ROOT / "benchmarks" / "records" / ("peers.json" if tasks is None else f"peers-{'-'.join(tasks)}.json")
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
