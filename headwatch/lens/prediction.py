"""The weights against the activations (protocol §5h; rules lens_verdict, lens_known): do the weights'
circuits predict what patching measures?

* **Composition against path patching**: on the edges path patching measured (sender head → receiver
  head's q, k or v), the composition score of the same input (:mod:`.composition`: its distance from its
  null in spreads, ``z``, so that the three inputs' scores are on one scale; a key or value path's score
  the receiver's group's) against the path's size ``|score|``, each measurement once
  (:func:`measurements`: a key or value path per key/value group, a query path per head): Spearman's
  rank correlation, its
  bootstrap interval over the edges (``scipy.stats.bootstrap``, paired, percentile; ``lens.bootstrap``
  resamples at ``lens.confidence``) and **the null's**: the correlation that random matrices of the same
  shapes would give. Their scores are independent of the paths and identically distributed edge by
  edge, so their ranks meet the paths' in a random pairing: the null's range is the permutation
  distribution's central ``confidence`` (``scipy.stats.permutation_test``, pairings; ``lens.null_draws``
  pairings, ``lens.seed``).
* **The copying score against the induction score** (:mod:`headwatch.scores`): the same over the heads.
* **The verdict** (:func:`verdict`): *yes* when the interval lies above the null's range, *no* (the
  weights rank the paths backwards) when below it, else *not resolved* — the interval meets the null's
  range — and *not resolved* with fewer than :data:`MIN_PAIRS` pairs or a side that does not vary.
* **The known circuit** (§5f): the previous-token head → induction head's key, named by attention before
  looking, must be the first of every edge between the two layers by the weights.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.arch import head_label
from ..settings.lens import LensError, LensSettings, stream_seed

RESAMPLE_NUMBERS = 1 << 22
"""The most numbers of one array a batch of resamples or pairings holds (each a pair's index or rank, 32 MiB in
float64): ``scipy.stats``' ``batch`` is this over the pairs, so that an interval's memory does not grow with
``lens.bootstrap`` or ``lens.null_draws`` (all at once, a million resamples raised a MemoryError). Drawn batch
after batch from one generator, the resamples are those drawn at once: the same interval, the same null."""
MIN_PAIRS = 3
"""Fewer pairs than this have no rank correlation worth an interval: the verdict is *not resolved*."""
KEYS = ["sender_layer", "sender_head", "receiver_layer", "receiver_head", "input"]
VERDICT_COLUMNS = ["comparison", "weights", "activations", "n", "rho", "low", "high", "null_low", "null_high",
                   "p_null", "resolved", "verdict"]


def _ranks(x: np.ndarray, axis: int = -1) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=axis)


def spearman(x, y, axis: int = -1) -> np.ndarray:
    """Spearman's rank correlation of ``x`` and ``y`` along ``axis`` (vectorized for scipy's resampling):
    Pearson's of their average ranks."""
    rx, ry = _ranks(np.asarray(x, float), axis), _ranks(np.asarray(y, float), axis)
    rx = rx - rx.mean(axis, keepdims=True)
    ry = ry - ry.mean(axis, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis) * (ry * ry).sum(axis))
    return np.divide((rx * ry).sum(axis), den, out=np.zeros_like(den, dtype=float), where=den > 0)


def verdict(x, y, settings: LensSettings, comparison: str, weights: str, activations: str,
            numbers: int = RESAMPLE_NUMBERS) -> dict:
    """One row of the verdict table: ``x`` (the weights' scores) against ``y`` (what the activations
    measured), paired: ρ, its bootstrap interval, the null's range, the permutation p-value, and the
    verdict in words (module doc); resamples and pairings ``numbers`` numbers at a time
    (:data:`RESAMPLE_NUMBERS`)."""
    from scipy.stats import bootstrap, permutation_test

    settings.need("bootstrap", "confidence", "null_draws", "seed")
    x, y = np.asarray(x, float), np.asarray(y, float)
    row = dict(comparison=comparison, weights=weights, activations=activations, n=len(x))
    if len(x) < MIN_PAIRS or np.ptp(x) == 0 or np.ptp(y) == 0:
        why = f"{len(x)} pairs (fewer than {MIN_PAIRS})" if len(x) < MIN_PAIRS else "one side does not vary"
        return dict(row, rho=0.0, low=0.0, high=0.0, null_low=0.0, null_high=0.0, p_null=1.0, resolved=False,
                    verdict=f"not resolved: {why}")
    rho = float(spearman(x, y))
    batch = max(1, numbers // len(x))
    boot = bootstrap((x, y), spearman, paired=True, vectorized=True, n_resamples=settings.bootstrap,
                     confidence_level=settings.confidence, method="percentile", batch=batch,
                     random_state=stream_seed(settings.seed, 0))
    low, high = (float(v) for v in boot.confidence_interval)
    null = permutation_test((x, y), lambda a, b, axis=-1: spearman(a, b, axis), permutation_type="pairings",
                            vectorized=True, n_resamples=settings.null_draws, batch=batch,
                            random_state=stream_seed(settings.seed, 2))
    tail = (1 - settings.confidence) / 2
    null_low, null_high = (float(v) for v in np.quantile(null.null_distribution, [tail, 1 - tail]))
    shown = f"ρ = {rho:.2f} [{low:.2f}, {high:.2f}] ({settings.confidence:.0%} interval), the null's " \
            f"[{null_low:.2f}, {null_high:.2f}]"
    if low > null_high:
        said, resolved = f"yes: the {weights} rank the {activations} in their order; {shown}", True
    elif high < null_low:
        said, resolved = f"no: the {weights} rank the {activations} backwards; {shown}", True
    else:
        said, resolved = f"not resolved: the interval meets the null's range; {shown}", False
    return dict(row, rho=rho, low=low, high=high, null_low=null_low, null_high=null_high,
                p_null=float(null.pvalue), resolved=resolved, verdict=said)


def matched(composition: pd.DataFrame, paths: pd.DataFrame) -> pd.DataFrame:
    """Path patching's edges with the composition scores of the same (sender, receiver, input): every
    path must have its pair in ``composition`` (a path of another model, or of a head it lacks, is refused)."""
    comp = composition.assign(**{k: composition[k].astype(int) for k in KEYS if k != "input"})
    mine = paths.assign(**{k: paths[k].astype(int) for k in KEYS if k != "input"})
    both = mine.merge(comp[KEYS + ["group", "score", "head_score", "z"]].rename(
        columns=dict(group="weights_group", score="weights", head_score="weights_head", z="weights_z")), on=KEYS,
        how="left")
    missing = both["weights"].isna()
    if missing.any():
        r = both[missing].iloc[0]
        raise LensError(f"paths holds {int(missing.sum())} edges with no composition score, the first "
                        f"L{r.sender_layer}H{r.sender_head} -> L{r.receiver_layer}H{r.receiver_head} ({r.input}): "
                        "the paths and the composition scores are of different models")
    labels = {k: [head_label(int(l), int(h)) for l, h in zip(both[f"{k}_layer"], both[f"{k}_head"])]
              for k in ("sender", "receiver")}          # named from the keys, never from the table's own labels
    return both.assign(path=both["score"].abs(), **labels)


def same_groups(composition: pd.DataFrame, heads: pd.DataFrame) -> None:
    """Refuse ``composition`` (:func:`headwatch.weight_circuits`' scores) unless every sender and receiver is
    a head of ``heads`` (its table) and every key or value row's ``group`` is its receiver's ``kv_group``
    there: what a key or value path patches is that group's, and :func:`measurements` counts by it."""
    known = heads.assign(layer=heads["layer"].astype(int), head=heads["head"].astype(int)).set_index(
        ["layer", "head"])["kv_group"]
    for side in ("sender", "receiver"):
        at = pd.MultiIndex.from_arrays([composition[f"{side}_layer"].astype(int), composition[f"{side}_head"].astype(int)])
        outside = ~at.isin(known.index)
        if outside.any():
            layer, head = at[outside][0]
            raise LensError(f"circuits.attrs['tables']['composition'] has a {side} L{layer}H{head}, no head of the "
                            "circuits' table: pass the table hw.weight_circuits(m) returned")
    kv = composition[composition["input"] != "q"]
    want = known.reindex(pd.MultiIndex.from_arrays([kv["receiver_layer"].astype(int), kv["receiver_head"].astype(int)]))
    wrong = kv["group"].to_numpy(dtype=float) != want.to_numpy(dtype=float)
    if wrong.any():
        r = kv[wrong].iloc[0]
        raise LensError(f"circuits.attrs['tables']['composition'] gives L{int(r.receiver_layer)}H{int(r.receiver_head)}'s "
                        f"{r.input} the key/value group {r.group}, its kv_group in the circuits' table is "
                        f"{want[wrong].iloc[0]}: pass the table hw.weight_circuits(m) returned")


def measurements(both: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`matched` that are measurements of their own: a query path per receiving head, a key or
    value path once per (sender, receiver's key/value group, input) — the composition table's ``group``, whose
    ``score`` is the group's. The heads of a group read one key and one value: path patching patches the group's
    for each of them, the same measurement under each head's name, and counting it once per head would count
    one pair of numbers as several, narrowing the intervals. The first head's row of each group is kept."""
    kv = both["input"] != "q"
    lost = kv & both["weights_group"].isna()
    if lost.any():
        r = both[lost].iloc[0]
        raise LensError(f"circuits.attrs['tables']['composition'] holds no key/value group for L{r.sender_layer}"
                        f"H{r.sender_head} -> L{r.receiver_layer}H{r.receiver_head} ({r.input}) (column 'group'): "
                        "pass the table hw.weight_circuits(m) returned")
    framed = both.assign(unit=np.where(kv, both["weights_group"].fillna(-1).to_numpy(dtype=np.int64),
                                       both["receiver_head"].to_numpy()))
    keys = ["sender_layer", "sender_head", "receiver_layer", "input", "unit"]
    score = framed.groupby(keys)["score"]
    spread = score.max() - score.min()
    # One patch: its heads' rows are one computation (equal bit for bit on the CPU); the bound leaves room
    # only for the rounding of another row of a batch on a GPU.
    apart = spread > 1e-6 * np.maximum(np.maximum(score.max().abs(), score.min().abs()), 1.0)
    if apart.any():
        sl, sh, rl, i, g = apart[apart].index[0]
        raise LensError(f"paths gives the heads of L{rl}'s key/value group {g} different {i} scores from L{sl}H{sh} "
                        f"({spread[apart].iloc[0]:.3g} apart): a key or value path patches the group's, one measurement "
                        "under each head's name; pass the table hw.path_patching returned")
    return both[~framed.duplicated(keys).to_numpy()]


def same_heads(circuits: pd.DataFrame, scores: pd.DataFrame) -> None:
    """Refuse ``circuits`` unless it holds one row per head of its model (its layers × heads), and ``scores``
    unless it holds one row for each of those heads and no other (a table of another model)."""
    L, H = int(circuits["layer"].max()) + 1, int(circuits["head"].max()) + 1
    every = {(l, h) for l in range(L) for h in range(H)}
    for name, table in (("circuits", circuits), ("scores", scores)):
        got = set(zip(table["layer"].astype(int), table["head"].astype(int)))
        if len(table) != L * H or got != every:
            outside = sorted(got - every)
            raise LensError(f"{name} has {len(table):,} rows" + (f", L{outside[0][0]}H{outside[0][1]} among them"
                                                                 if outside else "")
                            + f", not one per head of the circuits' model ({L} layers × {H} heads): pass "
                            + ("the table hw.weight_circuits(m) returned" if name == "circuits" else
                               "hw.head_scores(m)'s table of the same model"))


def weights_vs_activations(composition: pd.DataFrame, paths: pd.DataFrame, settings: LensSettings,
                           heads: pd.DataFrame | None = None, scores: pd.DataFrame | None = None):
    """(the verdict table — composition against path patching over every input and per input, and the
    copying score against the induction score where ``heads`` and ``scores`` are given —, each receiver's
    strongest path with its rank by the weights, the note)."""
    if heads is not None:
        same_groups(composition, heads)
    both = matched(composition, paths)
    if heads is not None and scores is not None:
        same_heads(heads, scores)
    read = measurements(both)
    inputs = [i for i in ("q", "k", "v") if i in set(read["input"])]        # the inputs the paths hold, named
    rows = [verdict(read["weights_z"], read["path"], settings, f"composition vs path patching ({', '.join(inputs)})",
                    "composition scores", "paths")]
    for i in sorted(inputs) if len(inputs) > 1 else []:
        part = read[read["input"] == i]
        rows.append(verdict(part["weights_z"], part["path"], settings, f"composition vs path patching ({i})",
                            f"{i}-composition scores", f"paths into {i}"))
    if heads is not None and scores is not None:
        h = heads.merge(scores[["layer", "head", "induction"]].astype({"layer": int, "head": int}), on=["layer", "head"])
        rows.append(verdict(h["ov_copying"], h["induction"], settings, "OV copying vs induction score",
                            "copying scores", "induction scores"))
    table = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    both["rank_by_weights"] = both.groupby(["receiver_layer", "receiver_head"])["weights_z"].rank(
        ascending=False, method="min").astype(int)
    both["rank_by_path"] = both.groupby(["receiver_layer", "receiver_head"])["path"].rank(
        ascending=False, method="min").astype(int)
    top = both[both["rank_by_path"] == 1].sort_values(["receiver_layer", "receiver_head"])
    top = top[["sender", "receiver", "input", "score", "weights", "weights_z", "rank_by_weights"]].rename(
        columns=dict(score="path_score")).assign(edges_into=[int((both["receiver"] == r).sum()) for r in top["receiver"]])
    first = table.iloc[0]
    note = dict(model_verdict=first["verdict"], resolved=bool(first["resolved"]), edges=len(both),
                paths_read=len(read),
                counted=f"{len(read)} of the {len(both)} paths read: a query path per receiving head, a key or value "
                        "path once per (sender, receiver's key/value group) — the heads of a group read one patched "
                        "key and value, one measurement under each head's name",
                weights="each edge's composition score as z = (score - null_mean) / null_sd (the three inputs on one "
                        "scale); a key or value path's the receiver's group's",
                activations="each path's |score| (path patching: a path that lowers the answer matters as one that "
                            "raises it)",
                interval=f"bootstrap over the pairs (scipy.stats.bootstrap, paired, percentile), {settings.bootstrap} "
                         f"resamples, {settings.confidence:g}",
                null=f"the correlation of scores independent of the paths: the permutation distribution "
                     f"(scipy.stats.permutation_test, pairings), {settings.null_draws} pairings, its central "
                     f"{settings.confidence:g}",
                rule=f"yes: the interval above the null's range; no: below it; otherwise not resolved (also with "
                     f"fewer than {MIN_PAIRS} pairs or a side that does not vary)")
    return table, top.reset_index(drop=True), note


def known_ranking(composition: pd.DataFrame, previous: list[str], induction: str) -> dict:
    """The known circuit by the weights: the edges between the two layers ranked by ``z``; the rank of the
    best previous-token head → ``induction``'s key edge (``previous``: the heads attention names), the
    first edge, and whether the known edge is it."""
    ranked = composition.sort_values("z", ascending=False, kind="stable").reset_index(drop=True)
    ranked["rank"] = np.arange(1, len(ranked) + 1)
    known = ranked[ranked["sender"].isin(previous) & (ranked["receiver"] == induction) & (ranked["input"] == "k")]
    first = ranked.iloc[0]
    rank = int(known["rank"].min()) if len(known) else 0
    return dict(edges=len(ranked), first=f"{first.sender} -> {first.receiver} ({first.input})",
                first_z=float(first.z), known=(f"{known.iloc[0].sender} -> {induction} (k)" if len(known) else "none"),
                known_rank=rank, known_z=float(known["z"].max()) if len(known) else 0.0,
                recovered=rank == 1)


KNOWN_CLAIM = ("the previous-token head -> induction head's key edge (heads named by attention, §5f) is the first "
               "of every edge between the two layers by composition score (z)")


def run_known_weights(models: dict, known: dict, settings: LensSettings) -> tuple[pd.DataFrame, dict]:
    """Rule lens_known: (one row per known-circuit model — the edges between its two layers, the first by
    the weights, the known edge and its rank, whether it is the first —, the note). ``models``: name →
    (model, adapter); ``known``: the known circuit's note (rule circuits_known), which names each model's
    previous-token heads and induction head by attention."""
    from .composition import weight_circuits

    rows, note = [], dict(claim=KNOWN_CLAIM, qk_offset=settings.qk_offset, null_draws=settings.null_draws)
    for name, (_, adapter) in models.items():
        _, composition, _, n = weight_circuits(adapter, settings)
        said = known[name]
        previous = [] if said["previous_token_heads"] == "none" else said["previous_token_heads"].split()
        got = known_ranking(composition, previous, said["induction_head"])
        rows.append(dict(model=name, previous_token_heads=said["previous_token_heads"],
                         induction_head=said["induction_head"], **got))
        note[name] = composition.sort_values("z", ascending=False)[
            ["sender", "receiver", "input", "head_score", "score", "z"]].to_dict("records")
    return pd.DataFrame(rows), note


def explorer_panel(circuits: pd.DataFrame, composition: pd.DataFrame, direct_heads: pd.DataFrame | None = None,
                   paths: pd.DataFrame | None = None) -> pd.DataFrame:
    """The explorer's panel as a plain table, one row per head: what it writes (its OV copying score and
    its z; with ``direct_heads``, its direct and total effect, the indirect share with its range and whether
    it acts mostly through others, resolved or not), what it matches (its QK same-token score), whom it reads (the earlier head
    and input of the highest composition score into it) and whom it feeds (the later head and input of
    the highest from it), and with ``paths`` the strongest path patching measured into it. Labels
    computed from the tables; a head of layer 0 reads from no head (``reads`` empty), one of the last
    layer feeds none."""
    out = circuits[["layer", "head", "label", "ov_copying", "ov_copying_z", "qk_same_token"]].copy()
    comp = composition.sort_values("z", ascending=False, kind="stable")
    into = comp.drop_duplicates(["receiver_layer", "receiver_head"]).set_index(["receiver_layer", "receiver_head"])
    out_of = comp.drop_duplicates(["sender_layer", "sender_head"]).set_index(["sender_layer", "sender_head"])
    keys = list(zip(out["layer"].astype(int), out["head"].astype(int)))
    out["reads"] = [f"{into.loc[k, 'sender']} ({into.loc[k, 'input']})" if k in into.index else "" for k in keys]
    out["reads_z"] = [float(into.loc[k, "z"]) if k in into.index else 0.0 for k in keys]
    out["feeds"] = [f"{out_of.loc[k, 'receiver']} ({out_of.loc[k, 'input']})" if k in out_of.index else ""
                    for k in keys]
    out["feeds_z"] = [float(out_of.loc[k, "z"]) if k in out_of.index else 0.0 for k in keys]
    if direct_heads is not None:
        d = direct_heads.set_index(["layer", "head"])
        for col in ("direct", "total", "indirect_share", "share_low", "share_high", "through_others", "resolved"):
            out[col] = [d.loc[k, col] if k in d.index else None for k in keys]
    if paths is not None:
        strongest = paths.reindex(paths["score"].abs().sort_values(ascending=False).index).drop_duplicates(
            ["receiver_layer", "receiver_head"]).set_index(["receiver_layer", "receiver_head"])
        out["strongest_path"] = [f"{strongest.loc[k, 'sender']} ({strongest.loc[k, 'input']})"
                                 if k in strongest.index else "" for k in keys]
        out["strongest_path_score"] = [float(strongest.loc[k, "score"]) if k in strongest.index else 0.0 for k in keys]
    return out
