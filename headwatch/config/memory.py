"""Memory a job will need, estimated before any job where it is cheap, and refused when it
cannot fit in this machine's memory, naming the estimate and the key that drives it.

Each estimate is a *lower bound*: it counts only arrays the job certainly holds at once (a
model's weights, a batch's logits, the activations a patching sweep keeps), so a refusal is
never wrong, while a job under its estimate may still need more (Python, the library's own
buffers). The parameter count of a studied model is read from its shape (embedding, q/k/v/o
projections and at least two FFN matrices a layer; the sweep's models are counted exactly by
:meth:`headwatch.charlm.spec.ModelSpec.param_counts`).

The estimates are computed with the other pre-job checks and cached with their verdict;
each run compares them with ``MemTotal`` of ``/proc/meminfo`` (refused above it: the job
cannot fit on this machine at all) and with ``MemAvailable`` (a warning above it: it fits
only once other programs let go). A machine without ``/proc/meminfo`` skips the comparison
with a note. Not raisable: a bound (:mod:`.bounds`) can be raised on purpose, memory not.
"""
from __future__ import annotations

from pathlib import Path

from ..names import BYTES_PER_NUMBER
from ..settings.ablation import AblationSettings
from ..settings.anatomy import AnatomySettings
from ..settings.pairs import pairs_path, read_pairs
from ..settings.sweep import SummarySettings, TrainSettings, active_sweeps, entry_spec, slug, train_of

GiB = 1 << 30
F32 = 4            # bytes of a float32: logits, activations, the prepared model
I64 = 8            # bytes of an int64: token ids, window offsets, bootstrap indices
F64 = 8            # bytes of a float64: the lens's probabilities, the weights' circuits


def model_params(shape: dict) -> int | None:
    """At least how many parameters a studied model of ``shape`` holds (None if its shape does
    not say its width)."""
    L, H, W = shape.get("layers"), shape.get("heads"), shape.get("width")
    if not (L and H and W):
        return None
    D = shape.get("head_dim") or W // H
    K = shape.get("kv_heads") or H
    per_layer = 2 * W * H * D + 2 * W * K * D + 2 * W * (shape.get("ffn") or 0)
    return (shape.get("vocab") or 0) * W + L * per_layer


def estimate(key: str, what: str, parts: dict[str, int], change: str = "lower it") -> dict:
    """One estimate: the key (or a public function's argument) that drives it, what it is, its parts in
    bytes and their sum, and what to change when it is refused."""
    return dict(key=key, what=what, parts={k: int(v) for k, v in parts.items()}, bytes=int(sum(parts.values())),
                change=change)


def maps_estimate(key: str, what: str, rows: int, T: int, shape: dict, weights: int, change: str = "lower it",
                  **more: int) -> dict:
    """A pass that returns every head's attention maps beside the logits (the scores, the attention maps):
    ``rows`` sequences of ``T`` tokens, their logits and every layer's maps at once (the capture returns
    ``[rows, layers, heads, T, T]``), and ``more`` parts (a table made of them)."""
    V, L, H = shape.get("vocab") or 0, shape["layers"], shape["heads"]
    return estimate(key, what, dict(weights=weights, logits=rows * T * V * F32, attention=rows * L * H * T * T * F32,
                                    **more), change)


def logits_estimate(key: str, what: str, rows: int, T: int, shape: dict, weights: int, change: str = "lower it") -> dict:
    """A pass that keeps its logits (the cuts' losses): ``rows`` of ``T`` tokens."""
    return estimate(key, what, dict(weights=weights, logits=rows * T * (shape.get("vocab") or 0) * F32), change)


def patching_estimate(key: str, what: str, prompts: int, length: int, batch: int, shape: dict, weights: int,
                      change: str = "lower it") -> dict:
    """Activation patching: every layer's z and block input of the clean and the corrupted run of
    ``prompts`` prompts of ``length`` tokens, and a batch's last-position logits."""
    L, H, W = shape["layers"], shape["heads"], shape["width"]
    D = shape.get("head_dim") or W // H
    return estimate(key, what, dict(weights=weights, activations=2 * prompts * length * L * (H * D + W) * F32,
                                    logits=batch * (shape.get("vocab") or 0) * F32), change)


def model_estimates(config: dict, facts, workdir: str | Path = ".") -> list[dict]:
    """The jobs that run studied model ``facts.key``: its preparation, the attention maps, the
    cuts, activation patching, the edge circuits, the lens (direct effects and the logit lens, the
    weights' circuits) and the ungrouped key/value control."""
    shape, key = facts.shape, facts.key
    params = model_params(shape)
    if params is None:
        return []
    H = shape["heads"]
    weights = params * BYTES_PER_NUMBER.get(config["models"][key].get("dtype", "float32"), F32)
    T = 2 * config["sequences"]["half_length"] + 1
    out = [estimate(f"models.{key}", f"model {key}'s preparation (float32 weights)", dict(weights=params * F32))]
    b = config["attention"]["batch"]
    out.append(maps_estimate("attention.batch", f"model {key}'s attention maps ({b} sequences of {T} tokens a pass)",
                             b, T, shape, weights))
    b = AblationSettings.from_config(config["ablation"]).batch
    out.append(logits_estimate("ablation.batch", f"model {key}'s cuts ({b} rows of {T} tokens a pass)", b, T, shape,
                               weights))
    p = config["patching"]
    names = list(p["names"]) + ["A", "B", "C"]
    if p.get("pairs"):         # every row a prompt, padded to the longest (checked before this estimate)
        rows = read_pairs(pairs_path(p["pairs"], workdir, bool(p.get("pairs_outside_project"))))
        n, length = len(rows), max(len(facts.tokenizer(r[c]).input_ids) for r in rows for c in ("clean", "corrupted"))
    else:
        n = p["n"]
        length = len(facts.tokenizer(p["templates"][0].format(A=names[0], B=names[1], C=names[2])).input_ids)
    out.append(patching_estimate("patching.n", f"model {key}'s activation patching ({n} prompts of {length} tokens, "
                                               "every layer's z and block input of the clean and the corrupted run)",
                                 n, length, p["batch"], shape, weights))
    if config.get("edges"):
        out += edge_estimates(config["edges"], shape, key, weights, n, length)
    if config.get("lens"):
        rows = min(config["lens"]["batch"], n)
        out.append(lens_estimate(f"model {key}'s direct effects and logit lens ({n} prompts of {length} tokens, {rows} "
                                 "a pass)", rows, length, shape, weights, True, n,
                                 dict(batch=("lens.batch", "lower it"), prompts=("patching.n", "lower it"))))
        out.append(weights_estimate(f"models.{key}", f"model {key}'s weights' circuits (every pair of heads)", shape,
                                    weights))
    layers = AnatomySettings.from_config(config["anatomy"]).need("kv_control").kv_control.layers
    control = model_params(dict(shape, layers=layers, kv_heads=H))
    out.append(estimate("anatomy.kv_control.layers", f"model {key}'s ungrouped control (kv_control.layers = {layers})",
                        dict(weights=control * F32)))
    return out


def edge_graph_size(shape: dict) -> tuple[int, int]:
    """(senders, receivers) of a model's edge graph (:mod:`headwatch.circuits.graph`): the embeddings,
    every head and every feed-forward network send; every head's query, every key/value group's key
    and value, every feed-forward network and the logits receive."""
    L, H = shape["layers"], shape["heads"]
    K = shape.get("kv_heads") or H
    return 1 + L * (H + 1), L * (H + 2 * K + 1) + 1


def edge_estimates(edges: dict, shape: dict, key: str, weights: int, prompts: int, length: int) -> list[dict]:
    """The edge circuits' two kinds of pass (:mod:`headwatch.circuits.edges`): an attribution pass
    holds every sender's output of the clean and the corrupted run and every receiver's gradient
    for ``edges.score_batch`` prompts; a patched pass holds, for ``edges.batch`` circuit × prompt rows,
    every sender's difference from the corrupted run and each row's edge weights (each where ``edges``,
    a rule's slice, has its key)."""
    S, R = edge_graph_size(shape)
    W, T = shape["width"], length
    out = []
    if edges.get("score_batch") is not None:
        b = min(edges["score_batch"], edges.get("prompts") or prompts)
        out.append(estimate("edges.score_batch", f"model {key}'s edge attribution ({b} prompts of {T} tokens a pass, "
                                                 f"{S} senders, {R} receivers)",
                            dict(weights=weights, **{"senders' outputs": 2 * S * b * T * W * F32,
                                                     "receivers' gradients": R * b * T * W * F32})))
    if edges.get("batch") is not None:
        rows = edges["batch"]
        out.append(estimate("edges.batch", f"model {key}'s patched circuits ({rows} circuit × prompt rows of {T} "
                                           "tokens a pass)",
                            dict(weights=weights, **{"senders' differences": rows * S * T * W * F32,
                                                     "edge weights": rows * S * R * F32})))
    return out


def induction_estimates(config: dict) -> list[dict]:
    """The induction sweep's largest training job: every seed's model stacked (weights, gradients and
    Adam's moments), a step's logits and block inputs, and an evaluation's attention maps."""
    from ..settings.induction import LAYERS, InductionSettings, shapes

    cfg = config.get("induction")
    if not cfg:
        return []
    s = InductionSettings.from_config(cfg)
    M, B, C, n = max(len(s.seeds), len(s.control_seeds)), s.batch, s.context, s.eval_rows
    V = max([t.vocab or t.states or 0 for t in s.tasks.values()] or [0])
    best = None
    for shape, width, heads in shapes(s):
        if width > (1 << 20):      # past any bound: the bound's own error names it
            continue
        params = V * width * 2 + LAYERS * (4 * width * width + 2 * s.ffn_mult * width * width)
        e = estimate("induction.seeds", f"training {shape} of the induction sweep ({M} seeds in one stack, batch "
                                        f"{B} of {C} tokens; {n} evaluation rows)",
                     {"weights, gradients and Adam's moments": 4 * M * params * F32,
                      "logits and block inputs": M * B * C * (V + LAYERS * width * (4 + 2 * s.ffn_mult)) * F32,
                      "attention maps": n * LAYERS * heads * C * C * F32})
        best = e if best is None or e["bytes"] > best["bytes"] else best
    return [best] if best else []


def sweep_estimates(sweep_cfg: dict) -> list[dict]:
    """Each planned training job's model, optimizer and batch (the largest of each sweep), and
    the summary's bootstrap."""
    out = []
    target = (sweep_cfg.get("corpus") or {}).get("target_chars") or 0
    for name, sw in active_sweeps(sweep_cfg).items():
        t = TrainSettings.from_config(train_of(sweep_cfg, name))
        B, steps, best = t.batch, t.steps, None
        for i, entry in enumerate(sw["grid"]):
            spec = entry_spec(sweep_cfg, entry)     # a character vocabulary: counted as 0
            C = spec.context
            e = estimate(f"sweep.sweeps.{name}.grid[{i}]",
                         f"training {slug(entry)} of sweep {name} (train.batch = {B}, train.steps = {steps})",
                         {"weights, gradients and Adam's moments": 4 * spec.param_counts()["total"] * F32,
                          "logits and their gradient": 2 * B * C * spec.vocab_size * F32,
                          "block inputs": spec.layers * B * C * spec.width * F32,
                          "window offsets": steps * B * I64, "corpus ids": target * I64})
            best = e if best is None or e["bytes"] > best["bytes"] else best
        if best:
            out.append(best)
    summ = SummarySettings.from_config(sweep_cfg["summary"])
    resamples = summ.bootstrap.resamples
    sweeps = active_sweeps(sweep_cfg)
    seeds = max(sum(len(sweeps[s]["seeds"]) * len(sweeps[s]["grid"])       # the largest pair's summary job
                    for s in {p.split_sweep, p.capacity.sweep} if s in sweeps)
                for p in [summ, *(summ.pairs or {}).values()])
    out.append(estimate("sweep.summary.bootstrap.resamples",
                        f"the summary's bootstrap ({resamples} resamples of {seeds} final losses)",
                        {"indices and values": resamples * seeds * 2 * I64}))
    return out


def read_meminfo(path: str | Path = "/proc/meminfo") -> dict | None:
    """``MemTotal`` and ``MemAvailable`` in bytes, or None where the file does not exist."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable") and rest.split():
            out[name] = int(rest.split()[0]) * 1024
    return out if "MemTotal" in out else None


def _gib(n: int) -> str:
    return f"{n / GiB:,.1f} GiB" if n >= GiB else f"{n / (1 << 20):,.1f} MiB"


def _said(e: dict) -> str:
    parts = ", ".join(f"{k} {_gib(v)}" for k, v in e["parts"].items() if v)
    return f"{e['key']}: {e['what']} needs at least {_gib(e['bytes'])} ({parts})"


def memory_errors(estimates: list[dict], meminfo: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings): estimates above ``MemTotal``; those above ``MemAvailable``."""
    total, available = meminfo["MemTotal"], meminfo.get("MemAvailable")
    errors = [f"{_said(e)}, more than this machine's memory ({_gib(total)}, MemTotal in /proc/meminfo); "
              f"{e.get('change', 'lower it')}" for e in estimates if e["bytes"] > total]
    warnings = [f"{_said(e)}, more than the {_gib(available)} free now (MemAvailable in /proc/meminfo)"
                for e in estimates if available is not None and available < e["bytes"] <= total]
    return errors, warnings


def lens_estimate(what: str, rows: int, T: int, shape: dict, weights: int, lens: bool, prompts: int,
                  keys: dict) -> dict:
    """Direct effects (and with ``lens`` the logit lens) on ``prompts`` prompts of ``T`` tokens, ``rows`` a pass:
    a pass's both runs' every block's output and ``z`` (every position) and the lens's peak at a depth (every
    position, the vocabulary: the logits in float32, their float64 copy and its softmax at once, 20 bytes a logit;
    measured: 8 prompts × 64 positions × 32,768 tokens, this estimate 326 MiB, the peak resident memory 361 MiB
    above the pass's start); and every prompt's logits at the last position of both runs, kept for the sum guard
    (and with ``lens`` the lens's at the last depth beside them, for its guard). Its key is the one that drives
    the larger part: ``keys["batch"]`` (the pass's) or ``keys["prompts"]`` (every prompt's), each ``(key, what to
    change)``."""
    L, H, W, V = shape["layers"], shape["heads"], shape["width"], shape.get("vocab") or 0
    D = shape.get("head_dim") or W // H
    batch = {"activations": 2 * rows * T * L * (H * D + 2 * W) * F32,
             "the lens's logits at a depth": rows * T * V * (F32 + 2 * F64) if lens else 0}
    every = (2 + 2 * lens) * prompts * V * F32
    key, change = keys["prompts" if every > sum(batch.values()) else "batch"]
    return estimate(key, what, {"weights": weights, **batch, "every prompt's last logits": every}, change)


def weights_estimate(key: str, what: str, shape: dict, weights: int, change: str = "lower it") -> dict:
    """The weights' circuits (:mod:`headwatch.lens.composition`): the model's ``weights``, and in float64 every
    layer's query, key, value and output matrices, each layer's factored forms (a head's ``P`` and ``Sq``) and
    the receivers' stack of them (``Sq``, the keys and values again), and the composition table (3 inputs ×
    every pair of heads in different layers, at least 12 numbers of 8 bytes a row: the four heads' addresses,
    the input's and the labels' pointers, the group, the head's and the path's score, the null's mean and
    spread, z). The nulls are scored a chunk at a time (:data:`headwatch.lens.composition.NULL_CHUNK_BYTES`),
    whatever ``lens.null_draws`` is."""
    L, H, W = shape["layers"], shape["heads"], shape["width"]
    D, K = shape.get("head_dim") or W // H, shape.get("kv_heads") or H
    return estimate(key, what, {"weights": weights, "matrices": L * (2 * H + 2 * K) * W * D * F64,
                                "factored forms": L * (3 * H + 2 * K) * W * D * F64,
                                "composition table": 3 * H * H * L * (L - 1) // 2 * 12 * F64}, change)
