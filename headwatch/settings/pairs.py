"""A researcher's own prompt pairs for activation patching (protocol §5d): the file
``patching.pairs`` names, read and checked before any job.

The file is CSV (with a header line) or JSON Lines (one object a line), by its suffix
(:data:`FORMATS`), with the columns :data:`COLUMNS`: the ``clean`` prompt, its ``corrupted``
twin, the ``answer`` the clean prompt points at and the ``distractor`` (the metric is
``logit(answer) − logit(distractor)`` at each prompt's last token). The answer and the
distractor are tokens written as the tokenizer reads them, with their leading space
(" Mary"). Each row is one prompt; rows may differ in length, but the clean and corrupted
prompts of one row must give the same number of tokens (a head patched over every position
is defined per pair).

The file is data from outside: its path must lie inside the project directory (after symlinks
are resolved), unless it is absolute and ``patching.pairs_outside_project`` is true
(:func:`pairs_path`); it is read by :func:`headwatch.model.sources.files.read_text`, as a model's files are: a regular
file of at most 64 MiB (``CAPS["pairs file"]``; a FIFO or a device is refused before a byte is read), decoded
as UTF-8 and parsed by Python's ``csv`` or ``json`` module (:func:`read_pairs`). Every error
names the file and the row (its line), and a tokenizer's error the model too
(:func:`pairs_errors`).

Like every settings module it imports only the standard library at its top, so that the
pre-job checks read it without torch.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..scores.sequences import single_token

COLUMNS = ("clean", "corrupted", "answer", "distractor")
FORMATS = {".csv": "CSV", ".jsonl": "JSON Lines"}
MAX_ROWS = 4096
"""The most rows a pairs file may hold: every layer's activations of every prompt are kept for
the clean and the corrupted run, as for ``patching.n`` prompts (whose bound this is too)."""


class PairsError(ValueError):
    """A pairs file that cannot be read as prompt pairs; the message names the file and the row."""


def pairs_path(value: str, workdir: str | Path = ".", outside: bool = False) -> Path:
    """The pairs file ``value`` (relative to the project directory ``workdir``), resolved; a
    :class:`PairsError` when it lies outside the project directory, unless ``value`` is absolute
    and ``outside`` (``patching.pairs_outside_project``) allows it."""
    from ..model.sources.errors import ModelFileError
    from ..model.sources.files import project_file

    try:
        return project_file(value, "patching.pairs", workdir, outside, "patching.pairs_outside_project",
                            tuple(FORMATS))
    except ModelFileError as err:
        raise PairsError(f"{err} (CSV with a header line, or JSON Lines)" if "must end in" in str(err)
                         else str(err)) from err


def _lacks(have, what: str) -> str:
    """``what`` (the header line, a line's keys) lacks the columns it does: each with the name it has that most
    likely misspells it (``'corupted': did you mean 'corrupted'?``), and the columns."""
    from ..names import did_you_mean

    missing = [c for c in COLUMNS if c not in have]
    said = []
    for c in missing:
        typo = next((h for h in have if h not in COLUMNS and did_you_mean(h, [c])), None)
        said.append(f"{c!r}" + (f" (it has {typo!r}: {did_you_mean(typo, [c])})" if typo else ""))
    return f"{what} lacks the column(s) {', '.join(said)}; the columns are {list(COLUMNS)}" if missing else ""


def _rows_csv(text: str, name: str):
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    header = [h.strip() for h in reader.fieldnames or []]      # "clean, corrupted, …": the names, not the spaces
    reader.fieldnames = header
    lacks = _lacks(header, f"the header line {header}")
    if lacks:
        raise PairsError(f"{name}: {lacks}")
    try:
        for row in reader:
            extra = row.get(None)
            if extra:
                raise PairsError(f"{name}, line {reader.line_num}: {len(extra)} value(s) more than the header's "
                                 f"{len(header)} columns")
            yield reader.line_num, row
    except csv.Error as err:
        raise PairsError(f"{name}, line {reader.line_num}: not CSV ({err})") from err


def _rows_jsonl(text: str, name: str):
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as err:
            raise PairsError(f"{name}, line {line}: not JSON ({err})") from err
        if not isinstance(row, dict):
            raise PairsError(f"{name}, line {line}: a JSON {type(row).__name__}, not an object with the keys "
                             f"{list(COLUMNS)}")
        lacks = _lacks(list(row), f"its keys {list(row)}")
        if lacks:
            raise PairsError(f"{name}, line {line}: {lacks}")
        yield line, row


def read_pairs(path: str | Path, max_rows: int = MAX_ROWS) -> list[dict]:
    """The rows of a pairs file: ``{line, clean, corrupted, answer, distractor}`` each (``line``:
    where the row starts in the file, 1 = the first line). :class:`PairsError` naming the file
    and the line for anything but a regular UTF-8 file of at most the bytes
    :data:`headwatch.model.sources.files.CAPS` allows a ``"pairs file"`` with
    every column, texts that are not strings or are empty (blank), or more than ``max_rows``
    rows or none."""
    from ..model.sources.errors import ModelFileError
    from ..model.sources.files import read_text

    path = Path(path)
    name = str(path)
    try:
        text = read_text(path, "pairs file")
    except ModelFileError as err:
        raise PairsError(f"patching.pairs: {err}") from err
    rows = []
    parse = _rows_csv if path.suffix.lower() == ".csv" else _rows_jsonl
    for line, row in parse(text, name):
        if len(rows) == max_rows:
            raise PairsError(f"{name}: more than {max_rows} rows (patching.n's bound: the activations of every prompt are kept)")
        for col in COLUMNS:
            value = row[col]
            if not isinstance(value, str):
                raise PairsError(f"{name}, line {line}: {col} is a {type(value).__name__}, not text")
            if not value.strip():
                raise PairsError(f"{name}, line {line}: {col} is empty")
        rows.append(dict(line=line, **{c: row[c] for c in COLUMNS}))
    if not rows:
        raise PairsError(f"{name}: no rows; each row is a prompt pair {list(COLUMNS)}")
    return rows


def _space_fix(tokenizer, r: dict, col: str) -> str:
    """The fix for an answer (``col`` of row ``r``) whose leading space the tokenizer keeps as a token of its own
    (SmolLM2's digits: ``" 7"`` is ``" "`` and ``"7"``): the space goes to the end of both prompts, and the answer
    is the token after it."""
    text = r[col]
    bare = text.lstrip(" ")
    if bare == text or not bare:
        return ""
    ids = tokenizer(bare, add_special_tokens=False).input_ids
    spaced = tokenizer(text, add_special_tokens=False).input_ids
    if spaced[len(spaced) - len(ids):] != ids:
        return ""
    other = "distractor" if col == "answer" else "answer"
    fix = (f"give the {col} as {bare!r}, one token" if len(ids) == 1 else
           f"choose a {col} of one token after it ({bare!r} is {len(ids)})")
    clean = r["clean"].rstrip(" ")
    shown = clean if len(clean) <= 40 else "…" + clean[-39:]
    return (f". The leading space is a token of its own here: end the clean and the corrupted prompt with it "
            f"({shown + ' '!r}, not {shown!r}) and {fix}; the {other} likewise")


def pair_errors(rows: list[dict], tokenizer, name: str, model: str, context: int | None = None) -> list[str]:
    """Each row's tokens for one model: the answer and the distractor one token each (and not the
    same), the clean and corrupted prompts of the same number of tokens, within the context."""
    errors, spaced = [], []
    of = "" if model is None else f" (model {model})"
    for r in rows:
        where = f"{name}, {r.get('where') or 'line ' + str(r['line'])}"
        ids = {}
        for col in ("answer", "distractor"):
            try:
                ids[col] = single_token(tokenizer, r[col], f"{where}: {col}")
            except ValueError as err:
                fix = _space_fix(tokenizer, r, col)
                said = any(s.endswith(f" {col}") for s in spaced)   # the fix said once a column: the same mistake
                if not (fix and said):
                    errors.append(f"{err}{of}{fix}")
                if fix:
                    spaced.append(f"{r.get('where') or 'line ' + str(r['line'])} {col}")
        if r["clean"] == r["corrupted"]:
            errors.append(f"{where}: the clean and the corrupted prompt are the same text{of}; patching "
                          "one run into the other changes nothing, and every score would divide by a gap of 0")
        if len(ids) == 2 and ids["answer"] == ids["distractor"]:
            errors.append(f"{where}: the answer and the distractor are the same token {r['answer']!r}{of}; "
                          "their logit difference would be 0")
        n = {col: len(tokenizer(r[col]).input_ids) for col in ("clean", "corrupted")}
        if n["clean"] != n["corrupted"]:
            errors.append(f"{where}: the clean prompt gives {n['clean']} tokens and the corrupted one "
                          f"{n['corrupted']}{of}; the two prompts of a pair must give the same number "
                          "of tokens (a head is patched over every position of its pair)")
        if context and max(n.values()) > context:
            errors.append(f"{where}: {max(n.values())} tokens, longer than the context{of} ({context})")
    if len(spaced) > 2:
        errors.append(f"{name}: the same for each of the {len(spaced)} answers and distractors whose leading space is a "
                      f"token of its own: {', '.join(spaced)}")
    return errors
