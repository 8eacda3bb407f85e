"""The explorer in a notebook's cell (``hw.explore``): the page of what a notebook computed — the
workflow's own page (:mod:`headwatch.explorer.build`: one builder, one template) — shown in the
cell and saved as one file.

**In the cell.** JupyterLab, the classic Notebook and VS Code each treat a script in a cell's HTML
differently (run in the notebook's own document, run in a sandboxed frame, or not run until the
notebook is trusted). :class:`Explorer` hands the page over as the ``srcdoc`` of an
``<iframe sandbox="allow-scripts">``: a document of its own whatever the notebook does around it,
its script run in an opaque origin that reaches neither the notebook nor the kernel, nothing
fetched (the page is offline: no CDN, no server). Where a notebook shows no frame (opened
untrusted, or a viewer that strips frames), the line under it still says what the page holds;
``.save(path)`` writes the page as one file.

**Size.** A page holds one byte for every cell on and below the diagonal of every head's map: a
text of n tokens is layers × heads × n(n+1)/2 bytes before compression (SmolLM2-135M's 270 heads:
5.4 MB at 200 tokens, 135 MB at 1,000). The page keeps each text's first ``max_tokens`` tokens —
a causal model's attention among them is what it is in the whole text — and, when the page,
compressed (:data:`headwatch.explorer.build.COMPRESSED`), is still larger than its bound, fewer:
:func:`fit_page` shrinks the kept length until the page fits, and the page and the object say how
many tokens of how many it kept.
"""
from __future__ import annotations

import html as _html
import math
from pathlib import Path

import pandas as pd

from .. import markup

FRAME_HEIGHT = 760
"""The cell's frame, in CSS pixels (the page scrolls inside it)."""


def keep_first(maps: pd.DataFrame, tokens: pd.DataFrame, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The maps and tokens of each phrase's first ``n`` tokens (rows below ``n``: their columns are
    too, the maps being causal)."""
    return (maps[maps["row"] < n].reset_index(drop=True), tokens[tokens["pos"] < n].reset_index(drop=True))


def kept_note(lengths: dict, n: int) -> str:
    """What the page keeps of each text (``lengths``: phrase -> its number of tokens) at ``n`` tokens."""
    cut = {k: v for k, v in lengths.items() if v > n}
    if not cut:
        return (f"Every token of {'the text' if len(lengths) == 1 else f'the {len(lengths)} texts'} "
                f"({', '.join(f'{k}: {v}' for k, v in lengths.items())} tokens).")
    return ("This page keeps each text's first " + f"{n:,} tokens (" +
            ", ".join(f"{k}: {min(v, n):,} of {v:,}" for k, v in lengths.items()) +
            "): a causal model's attention among them is what it is in the whole text; the page's "
            "size grows with the square of the tokens kept.")


def code_bytes() -> int:
    """The bytes of the page's own code (template, CSS, JavaScript): a page is never smaller."""
    from .build import _asset

    return sum(len(_asset(name).encode("utf-8")) for name in ("template.html", "explorer.css", "explorer.js"))


def fit_page(build, n: int, max_bytes: int) -> tuple[str, int]:
    """``(html, n)``: ``build(n)``, the page of the first ``n`` tokens, with ``n`` made smaller
    (in proportion to the square root of the excess, the maps' bytes growing with n²) until the
    page is at most ``max_bytes`` bytes in UTF-8. Raises when even one token does not fit (the
    rest of the page — the tables given — is larger than the bound)."""
    while True:
        html = build(n)
        size = len(html.encode("utf-8"))
        if size <= max_bytes:
            return html, n
        if n == 1:
            raise ValueError(f"hw.explore: the page of one token is {size:,} bytes, over max_mb = "
                             f"{max_bytes / 1e6:g} MB: the tables given are larger than the bound; raise max_mb")
        n = max(1, min(n - 1, int(n * math.sqrt(max_bytes / size))))


class Explorer:
    """The explorer page of a notebook's results: shown by the notebook as the cell's output (an
    ``<iframe>`` whose ``srcdoc`` is the page), written as one file by :meth:`save`."""

    def __init__(self, html: str, summary: str):
        self.html = html
        """The page: one self-contained HTML document."""
        self.summary = summary
        """One line: the model, the texts and tokens kept, the sections, the size."""

    @property
    def nbytes(self) -> int:
        """The page's size in bytes (UTF-8)."""
        return len(self.html.encode("utf-8"))

    def save(self, path: str | Path) -> Path:
        """Write the page to ``path`` (one file: open it in any browser, offline); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.html, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        """The page in a frame of its own (its scripts sandboxed away from the notebook), the
        summary under it."""
        return (f'<iframe srcdoc="{_html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
                f'title="headwatch explorer" style="width:100%;height:{FRAME_HEIGHT}px;border:1px solid #d9d9d9">'
                f'</iframe><p style="font-size:12px;color:#5f6368;margin:2px 0">{markup.html(self.summary)}</p>')

    def __repr__(self) -> str:
        return f"<headwatch explorer: {self.summary}>"
