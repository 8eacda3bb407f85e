"""A sweep vocabulary's name, what it means, and the one comparison of arms scored on the same
validation text, without a tokenizer library or numpy: the Snakefile's parse and the sweep's
pre-job checks read a grid entry's ``vocab`` through this module, and so does the vocab study's
summary (a table-only job). Building and reading the vocabularies is :mod:`.tokenizer`'s.

Vocabularies are named by a slug usable as a workflow wildcard (:data:`VOCAB_PATTERN`):
``char`` (the corpus's characters) or ``bpe{size}`` (byte-level BPE of ``size`` >= 256 tokens).
"""
from __future__ import annotations

import re

VOCAB_PATTERN = r"char|bpe[1-9][0-9]*"
KINDS = ("char", "bpe")
BYTES = 256                        # the byte alphabet every byte-level vocabulary starts with


class VocabError(ValueError):
    """A vocabulary that cannot be built, encoded or compared as asked."""


def vocab_name(kind: str, size: int | None = None) -> str:
    """The slug of a vocabulary: ``char`` or ``bpe{size}`` (e.g. ``bpe512``)."""
    if kind == "char":
        if size is not None:
            raise VocabError(f"the char vocabulary takes no size (got {size!r}): it is the "
                             "training split's characters")
        return "char"
    if kind == "bpe":
        if not (isinstance(size, int) and not isinstance(size, bool) and size >= BYTES):
            raise VocabError(f"a byte-level BPE vocabulary needs an integer size >= {BYTES} "
                             f"(the byte alphabet), got {size!r}")
        return f"bpe{size}"
    raise VocabError(f"vocabulary kind {kind!r} is not one of {list(KINDS)}")


def parse_vocab_name(name: str) -> tuple[str, int | None]:
    """``char`` -> (``char``, None); ``bpe512`` -> (``bpe``, 512)."""
    if not re.fullmatch(VOCAB_PATTERN, name):
        raise VocabError(f"{name!r} is not a vocabulary name (char or bpe<size>, e.g. bpe512)")
    kind, size = ("char", None) if name == "char" else ("bpe", int(name[3:]))
    vocab_name(kind, size)   # the same checks as building the name
    return kind, size


def assert_same_validation(metas: dict) -> str:
    """The validation text's hash shared by every arm; :class:`VocabError` naming the arms
    when they were encoded from different validation text (or lengths).

    ``metas``: arm name -> a split meta (``split.json``,
    :func:`headwatch.charlm.tokenizer.load_split_ids`'s meta, or anything carrying
    ``val_sha256`` and ``val_chars``)."""
    if not metas:
        raise VocabError("no arms to compare")
    seen = {}
    for arm, m in metas.items():
        if "val_sha256" not in m or "val_chars" not in m:
            raise VocabError(f"arm {arm!r} records no validation text (val_sha256, val_chars)")
        seen.setdefault((m["val_sha256"], m["val_chars"]), []).append(arm)
    if len(seen) > 1:
        groups = "; ".join(f"{arms} on {n} chars sha256 {h[:12]}" for (h, n), arms in seen.items())
        raise VocabError(f"arms were evaluated on different validation text: {groups}. Bits per "
                         "character are comparable only on the same characters")
    return next(iter(seen))[0]
