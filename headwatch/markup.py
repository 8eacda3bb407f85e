"""Text from a config is data, never markup: one escaping function per format it lands in.

A phrase, a model key, an expected token, a file name reaches pages of five kinds; each
writer passes such text through the function of its format, and nothing else:

* :func:`rst` — reStructuredText, the report's captions (``report/*.rst``, Jinja templates that
  Snakemake renders). Templates cannot call Python, so :mod:`headwatch.workflow.run_record` hands them
  the config with every string value already escaped (``snakemake.config.report_run.rst``,
  :func:`escaped`); mapping keys and wildcards, which the schema holds to safe names
  (:data:`headwatch.names.SAFE_NAME`), are shown as inline literals (````name````), where
  nothing is markup.
* :func:`html` — HTML text and attribute values (the report's table pages, the explorer's
  title); :func:`script_json` — JSON inside a ``<script>`` element (the explorer's data).
* :func:`markdown` — Markdown text and table cells (``docs/results/*.md``).
* figures — matplotlib reads ``$...$`` as mathematics: :data:`MATPLOTLIB` turns that off for
  every text of every figure (:mod:`headwatch.figures.style`).

Characters that are invisible or that rearrange the text around them are never shown as
they are, in any of these formats: control characters (a newline, a tab, ...) as ``\\xNN``
escapes, bidirectional marks, embeddings, overrides and isolates (U+202E turns the rest of a
caption around) and zero-width characters as ``\\uNNNN`` (:func:`visible`, used by each
function below; a figure's tokens and labels pass through it too, by
:func:`display_token` or ``repr``). The schema refuses control
characters in phrase text before any job; the others are accepted there (the model reads
them: right-to-left marks and zero-width joiners are part of Arabic, Hebrew, Persian and
Indic text) and shown as escapes.

Using it elsewhere (a new page, a new stage's captions): escape at the point where text
meets the format, with the function of that format; in a caption, read config text from
``snakemake.config.report_run.rst`` and show keys and wildcards as ````{{ name }}````.
"""
from __future__ import annotations

import html as _html
import json
import re

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters that break a line or are invisible (C0, DEL, C1, the Unicode line/paragraph
separators): never shown as they are."""
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""The bidirectional controls: the Arabic letter mark, left-to-right and right-to-left marks,
embeddings and overrides (U+202A–U+202E), isolates (U+2066–U+2069)."""
ZERO_WIDTH = "\u180e\u200b-\u200d\u2060-\u2064\ufeff"
"""Characters of no width: the zero-width space, non-joiner and joiner, the word joiner and the
invisible operators, the byte order mark (zero-width no-break space), the Mongolian vowel
separator."""
INVISIBLE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{BIDI}{ZERO_WIDTH}]")
"""Every character :func:`visible` writes as its escape: :data:`CONTROL`, :data:`BIDI`,
:data:`ZERO_WIDTH`."""

_RST_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")            # every ASCII punctuation character
_MARKDOWN_OPENERS = re.compile(r"([\\`*_\[\]<>&|~#$!])")    # what can open Markdown/GFM markup

MATPLOTLIB = {"text.parse_math": False, "text.usetex": False}
"""rcParams under which a figure's text is shown as written (no ``$...$`` mathematics, no TeX)."""


def visible(text) -> str:
    """``text`` as a string, each invisible character (:data:`INVISIBLE`) written as its escape
    (``\\n`` -> ``\\x0a``, U+202E -> ``\\u202e``)."""
    return INVISIBLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                         else f"\\u{ord(m.group()):04x}", str(text))


def display_token(token: str) -> str:
    """How a token is written on a page or a figure's axis: spaces as ␣, newlines as ↵, tabs as ⇥,
    empty as ∅, and every other invisible or reordering character as its escape (:func:`visible`:
    a right-to-left override as ``\\u202e``)."""
    if token == "":
        return "∅"
    return visible(token.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍"))


def rst(text) -> str:
    """``text`` as literal reStructuredText: a backslash before every ASCII punctuation
    character (nothing can open a directive, a role, a link, a reference or emphasis)."""
    return _RST_PUNCTUATION.sub(r"\\\1", visible(text))


def html(text) -> str:
    """``text`` as HTML text or a quoted attribute value (``<>&"'`` as entities)."""
    return _html.escape(visible(text), quote=True)


def markdown(text) -> str:
    """``text`` as literal Markdown (CommonMark and GitHub's: emphasis, code, links, images,
    HTML, entities, tables, strike-through, headings' closing #, math)."""
    return _MARKDOWN_OPENERS.sub(r"\\\1", visible(text))


def script_json(obj) -> str:
    """``obj`` as JSON to inline in an HTML ``<script>`` element: ``<``, ``>`` and ``&`` (and the
    line separators JavaScript once refused, and the bidirectional and zero-width characters,
    so that the page's source shows them) as ``\\uXXXX`` escapes, so that no string in it can
    close the element or open a comment. The strings are the data as they are: what the page
    shows of them passes through :func:`visible` (a token through :func:`display_token`)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return re.sub(f"[<>&\u2028\u2029{BIDI}{ZERO_WIDTH}]", lambda m: f"\\u{ord(m.group()):04x}", text)


def escaped(obj, escape=rst):
    """A copy of ``obj`` (dicts, lists, scalars) with every string value passed through
    ``escape``; mapping keys are kept as they are, so that lookups by a wildcard still work."""
    if isinstance(obj, dict):
        return {k: escaped(v, escape) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [escaped(v, escape) for v in obj]
    return escape(obj) if isinstance(obj, str) else obj
