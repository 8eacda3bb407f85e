"""Activation patching on a researcher's own prompt pairs (protocol §5d): the prompt set of a
pairs file, and what prompts of different lengths change in the sweep.

**Prompts** (:func:`pair_prompt_set`). Every row of the file ``patching.pairs`` (read and checked
by :mod:`headwatch.settings.pairs`, before any job too) is one prompt: its clean and corrupted
text tokenized as they are, the answer's and the distractor's ids in the columns ``answer_id`` and
``distractor_id`` (on the template prompts: the IO and the S name's), the metric ``logit(answer) −
logit(distractor)`` at the last token. Rows may differ in length; the two prompts of a row may
not. The note records the file as given, its SHA-256 and the lengths.

**Padding.** :meth:`headwatch.patching.batch.PromptBatch.of` pads prompts of different lengths on the
left to the longest, with the batch's attention mask and the
position ids it implies (:func:`headwatch.model.arch.padded_inputs`): each prompt's last token is the
batch's last position, where the metric is read, and its first token is at position 0 as when
run alone (guard :func:`headwatch.patching.guards.padded_vs_alone`).

**Positions from the end.** In a left-padded batch of width ``T``, column ``p`` is every prompt's
position ``p − T`` counted from its end (−1 = the last token): the residual sweep and the top
heads' sweep by position align the prompts from the end. A prompt shorter than ``T − p`` has no
token there; the score at that column is over the prompts that have one (:func:`position_scores`),
and the tables say how many (``prompts``).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..markup import display_token
from ..scores.sequences import token_strings
from ..settings.pairs import COLUMNS, pair_errors, pairs_path, read_pairs
from ..settings.patching import PatchingError, PatchingSettings

SOURCE_KEYS = ("task", "metric", "score", "patched", "padding", "templates", "pairs", "pairs_sha256", "lengths")
"""The keys of the prompts' note that say where the prompts come from and what they measure,
carried into every patching table's note (the templates, or the pairs file and its SHA-256)."""

PAIRS_NOTE = dict(
    task="a researcher's prompt pairs (patching.pairs): each row a clean prompt, its corrupted twin of the same "
         "length in tokens, the answer the clean prompt points at and a distractor",
    metric="logit difference logit(answer) - logit(distractor) at each prompt's last token, mean over the prompts",
    score="(patched - corrupted) / (clean - corrupted) of the metric: 0 = corrupted run, 1 = clean run",
    patched="the clean run's activation of the same prompt put into the corrupted run (replace at a site: z = a "
            "head's slice of the attention output projection's input; resid_in = a block's input); a one-position "
            "patch keeps the corrupted run's activation at every other position",
    padding="prompts of different lengths padded on the left to the longest, with the attention mask and each "
            "prompt's own position ids; positions counted from the end (-1 = the last token); a position's score "
            "is over the prompts that have a token there")


def pair_prompt_set(tokenizer, settings: PatchingSettings, workdir=".", model: str = "?") -> tuple[pd.DataFrame, dict]:
    """``prompts.parquet`` of a pairs file: one row per row of the file — ``prompt, line, answer,
    distractor, answer_id, distractor_id, clean_text, corrupted_text, clean_ids, corrupted_ids, tokens`` (the
    clean prompt's tokens) — and its note. Raises :class:`PatchingError` naming the file and the
    line where a row does not fit this tokenizer (the pre-job checks find these first)."""
    settings.need("pairs", "pairs_outside_project")
    path = pairs_path(settings.pairs, workdir, bool(settings.pairs_outside_project))
    return pairs_table(tokenizer, read_pairs(path), str(path), model, settings.pairs,
                       hashlib.sha256(Path(path).read_bytes()).hexdigest())


def frame_pairs(frame: pd.DataFrame, name: str = "the pairs table", function: str = "hw.prompt_pairs") -> list[dict]:
    """The rows of a DataFrame of prompt pairs (the columns of a pairs file, :data:`COLUMNS`) as
    :func:`headwatch.settings.pairs.read_pairs` gives a file's: ``line`` is the row's number (1 = the
    first), ``where`` its index label as errors name it (``row 0``), after the table's own check
    (:func:`headwatch.settings.tables.check_table`: the columns, did you mean, non-empty texts; at most a
    pairs file's rows, :data:`headwatch.settings.pairs.MAX_ROWS`), naming ``function`` and ``name``."""
    from ..settings.pairs import MAX_ROWS
    from ..settings.tables import TableError, check_table

    try:
        check_table(frame, "pairs", function, name)
    except TableError as err:
        raise PatchingError(str(err)) from None
    if len(frame) > MAX_ROWS:
        raise PatchingError(f"{function}: {name} holds {len(frame):,} rows, more than {MAX_ROWS} (patching.n's bound: "
                            "the activations of every prompt are kept)")
    return [dict(line=line, where=f"row {label!r}", **dict(zip(COLUMNS, r)))
            for line, (label, r) in enumerate(zip(frame.index, frame[list(COLUMNS)].itertuples(index=False)), start=1)]


def pairs_table(tokenizer, rows: list[dict], name: str, model: str | None = None, given: str | None = None,
                sha256: str | None = None, context: int | None = None) -> tuple[pd.DataFrame, dict]:
    """The prompts table and its note of prompt pairs ``rows`` (a file's, :func:`read_pairs`, or a
    DataFrame's, :func:`frame_pairs`); ``name`` names them in errors, ``given`` and ``sha256`` the
    file in the note; a prompt longer than ``context`` (the model's) is refused."""
    errors = pair_errors(rows, tokenizer, name, model, context)
    if errors:
        raise PatchingError("; ".join(errors))
    out = []
    for i, r in enumerate(rows):
        clean_ids, corrupted_ids = (list(tokenizer(r[c]).input_ids) for c in ("clean", "corrupted"))
        out.append(dict(prompt=i, line=r["line"], answer=r["answer"], distractor=r["distractor"],
                        answer_id=tokenizer(r["answer"], add_special_tokens=False).input_ids[0],
                        distractor_id=tokenizer(r["distractor"], add_special_tokens=False).input_ids[0],
                        clean_text=r["clean"], corrupted_text=r["corrupted"], clean_ids=clean_ids,
                        corrupted_ids=corrupted_ids, tokens=token_strings(tokenizer, clean_ids)))
    table = pd.DataFrame(out)
    lengths = table["clean_ids"].map(len)
    source = dict(pairs=name if given is None else given, **({} if sha256 is None else dict(pairs_sha256=sha256)))
    note = dict(PAIRS_NOTE, **source, rows=len(table), length=int(lengths.max()), shortest=int(lengths.min()),
                lengths=sorted({int(x) for x in lengths}))
    return table, note


def from_pairs(prompts: pd.DataFrame) -> bool:
    """Whether ``prompts.parquet`` was made from a pairs file (its rows name their ``line``)."""
    return "line" in prompts.columns


def source_note(note: dict) -> dict:
    """The keys of a prompts note that say where the prompts come from (:data:`SOURCE_KEYS`)."""
    return {k: note[k] for k in SOURCE_KEYS if k in note}


def one_length(prompts: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The prompts of the first prompt's length, and a note saying so ({} and every prompt when
    they all have one length, as templates do). The key/value sweep and the cached per-position
    sweep patch every position of prompts that line up token by token, with no padding (protocol
    §5d): on a pairs file of several lengths they run on its first row's length."""
    lengths = prompts["clean_ids"].map(len)
    keep = prompts[lengths == lengths.iloc[0]].reset_index(drop=True)
    if len(keep) == len(prompts):
        return prompts, {}
    return keep, dict(prompts_of_one_length=f"the {len(keep)} prompts of {lengths.iloc[0]} tokens (the first "
                                            f"prompt's length) of the {len(prompts)} prompts of the pairs file",
                      prompt_lines=[int(x) for x in keep["line"]] if "line" in keep else None)


def labels_from_end(prompts: pd.DataFrame) -> list[str]:
    """A label for each column of the left-padded batch: ``−k`` (position from the end), with the
    token after it where every prompt that has a token there has the same one."""
    tokens = [list(t) for t in prompts["tokens"]]
    T = max(len(t) for t in tokens)
    out = []
    for p in range(T):
        k = T - p
        seen = list(dict.fromkeys(str(t[-k]) for t in tokens if len(t) >= k))
        out.append(f"−{k}" + (f" {display_token(seen[0])}" if len(seen) == 1 else ""))
    return out


def position_scores(ld: torch.Tensor, columns, mask: torch.Tensor, clean_ld, corrupted_ld) -> pd.DataFrame:
    """Each patch's ``logit_diff``, ``score`` and ``prompts`` when patch ``i`` sits at column
    ``columns[i]`` of a left-padded batch: the means over the prompts that have a token there
    (``mask``), patched, clean and corrupted alike, so that a prompt without the position adds
    nothing to either side of the score."""
    has = mask.cpu().bool()[:, list(columns)].T.double()                      # [patches, prompts]
    count = has.sum(dim=1)
    mean = lambda x: ((x.double() * has).sum(dim=1) / count).numpy()
    patched = mean(ld.cpu())
    clean = mean(clean_ld.cpu().expand_as(has))
    corrupted = mean(corrupted_ld.cpu().expand_as(has))
    return pd.DataFrame(dict(logit_diff=patched, score=(patched - corrupted) / (clean - corrupted),
                             prompts=count.numpy().astype(np.int64)))
