"""The two-names prompt set (protocol §5d; rule patching_prompts): clean prompts from the
templates, each with a corrupted twin of the same length, and a label for every position."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..markup import display_token
from ..scores.sequences import single_token, token_strings
from ..settings.patching import SLOTS, PatchingError, PatchingSettings, fill, layout

ORDERS = ("ABBA", "BABA")
ROLES = {"ABBA": ("IO", "S", "S"), "BABA": ("S", "IO", "S")}
"""Who fills slots A, B, C in each order of the clean prompts."""
MIN_NAMES = 5
"""IO and S, and three other names for the corrupted prompt."""

TASK_NOTE = dict(
    task="two names (indirect object): clean prompts name IO and S, S again as the giver; the answer "
         "is IO. ABBA: A = IO, B = C = S; BABA: A = C = S, B = IO. Corrupted: three other names (ABC)",
    metric="logit difference logit(IO) - logit(S) at the last position, mean over the prompts",
    score="(patched - corrupted) / (clean - corrupted) of the metric: 0 = corrupted run, 1 = clean run",
    patched="the clean run's activation of the same prompt put into the corrupted run (replace at a "
            "site: z = a head's slice of the attention output projection's input; resid_in = a block's "
            "input); a one-position patch keeps the corrupted run's activation at every other position")
TASK_KEYS = ("task", "metric", "score", "patched", "padding")
"""The keys of a prompts table's note that say what its patching measures."""


def carried(note: dict) -> str:
    """What the heads a patching sweep finds carry, in the words of the prompts' task (``note["task"]``): the
    name, on the two-names prompts (the indirect object); the answer, on a researcher's pairs of any kind
    (digits, code, names)."""
    return "the name" if note.get("task") == TASK_NOTE["task"] else "the answer"


def task_note(prompts: pd.DataFrame) -> dict:
    """What patching on ``prompts`` measures (:data:`TASK_KEYS`): the prompts' own note where it says
    (the two-names set's, a pairs file's, a notebook's pairs); else, for a table without one, the
    two-names task's (:data:`TASK_NOTE`) where it has the names' columns (``io``, ``s``), a researcher's
    pairs' (:data:`headwatch.patching.pairs.PAIRS_NOTE`) where it has not."""
    from .pairs import PAIRS_NOTE

    note = prompts.attrs.get("note") or {}
    known = note if "task" in note else TASK_NOTE if {"io", "s"} <= set(prompts.columns) else PAIRS_NOTE
    return {k: known[k] for k in TASK_KEYS if k in known}


# ------------------------------------------------------------------ the prompt set
def draw_prompts(settings: PatchingSettings) -> list[dict]:
    """The prompts' names and templates, without a tokenizer (see the module doc)."""
    settings.need("n", "seed", "templates", "names")
    names, templates = list(settings.names), list(settings.templates)
    if len(names) < MIN_NAMES:
        raise PatchingError(f"patching.names: {len(names)} names; at least {MIN_NAMES} are needed")
    rng = np.random.default_rng(settings.seed)
    rows = []
    for i in range(settings.n):
        order = ORDERS[i % 2]
        t = (i // 2) % len(templates)
        io, s = (names[j] for j in rng.choice(len(names), size=2, replace=False))
        others = [x for x in names if x not in (io, s)]
        corrupted = [others[j] for j in rng.choice(len(others), size=3, replace=False)]
        clean = tuple(io if role == "IO" else s for role in ROLES[order])
        rows.append(dict(prompt=i, template=t, order=order, io=io, s=s, clean_names=list(clean),
                         corrupted_names=corrupted, clean_text=fill(templates[t], clean),
                         corrupted_text=fill(templates[t], corrupted)))
    return rows


def prompt_set(tokenizer, settings: PatchingSettings):
    """``prompts.parquet``: one row per prompt — ``prompt, template, order, io, s, answer_id, distractor_id,
    clean_names, corrupted_names, clean_text, corrupted_text, clean_ids, corrupted_ids, tokens``
    (the clean prompt's tokens) — and its note (slot positions, the templates). Raises
    :class:`PatchingError` if a prompt's length or slots differ from the first's."""
    rows = draw_prompts(settings)
    templates = list(settings.templates)
    shape = None
    for r in rows:
        t = templates[r["template"]]
        clean_ids, slots = layout(tokenizer, t, r["clean_names"])
        corrupted_ids, slots_c = layout(tokenizer, t, r["corrupted_names"])
        if shape is None:
            shape = (len(clean_ids), slots)
        for what, ids, sl in (("clean", clean_ids, slots), ("corrupted", corrupted_ids, slots_c)):
            if (len(ids), sl) != shape:
                raise PatchingError(f"prompt {r['prompt']} ({what}, template {r['template']}): {len(ids)} tokens "
                                    f"with names at {sl}; the first prompt has {shape[0]} with names at "
                                    f"{shape[1]}")
        r.update(answer_id=single_token(tokenizer, " " + r["io"], "IO"), distractor_id=single_token(tokenizer, " " + r["s"], "S"),
                 clean_ids=clean_ids, corrupted_ids=corrupted_ids, tokens=token_strings(tokenizer, clean_ids))
    columns = ["prompt", "template", "order", "io", "s", "answer_id", "distractor_id", "clean_names", "corrupted_names",
               "clean_text", "corrupted_text", "clean_ids", "corrupted_ids", "tokens"]
    note = dict(TASK_NOTE, length=shape[0], slot_positions=dict(zip(SLOTS, shape[1])), templates=templates,
                draw=f"prompt i: template (i // 2) mod {len(templates)}, ABBA for even i and BABA "
                     f"for odd i; IO, S and the three corrupted names drawn without replacement by numpy "
                     f"default_rng({settings.seed})")
    return pd.DataFrame(rows)[columns], note


def position_labels(prompts) -> list[str]:
    """A label for each position of the prompts: the token when every clean prompt has the same
    one there, the slot (``{A}``, ``{B}``, ``{C}``) at a name's position, else the distinct
    tokens joined by ``/``."""
    tokens = np.array([list(t) for t in prompts["tokens"]], dtype=object)
    ids = np.array([list(x) for x in prompts["clean_ids"]])
    corrupted = np.array([list(x) for x in prompts["corrupted_ids"]])
    names = {int(x) for col in ("answer_id", "distractor_id") for x in prompts[col]}
    out = []
    for p in range(tokens.shape[1]):
        seen = list(dict.fromkeys(tokens[:, p]))
        if (ids[:, p] != corrupted[:, p]).any() and set(ids[:, p].tolist()) <= names:
            slot = SLOTS[[c for c in range(ids.shape[1]) if (ids[:, c] != corrupted[:, c]).any()].index(p)]
            out.append("{" + slot + "}")
        elif len(seen) == 1:
            out.append(display_token(str(seen[0])))
        else:
            out.append("/".join(display_token(str(t)) for t in seen[:3]) + ("/…" if len(seen) > 3 else ""))
    return out
