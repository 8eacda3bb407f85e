"""Text from a config is data, never markup: one escaping function per format it lands in.

A phrase, a model key, an expected token, a file name reaches pages of five kinds; each
writer passes such text through the function of its format, and nothing else:

* :func:`rst` — reStructuredText, the report's captions (``report/*.rst``, Jinja templates that
  Snakemake renders). Templates cannot call Python, so :mod:`headwatch.run_record` hands them
  the config with every string value already escaped (``snakemake.config.report_run.rst``,
  :func:`escaped`); mapping keys and wildcards, which the schema holds to safe names
  (:data:`headwatch.names.SAFE_NAME`), are shown as inline literals (````name````), where
  nothing is markup.
* :func:`html` — HTML text and attribute values (the report's table pages, the explorer's
  title); :func:`script_json` — JSON inside a ``<script>`` element (the explorer's data).
* :func:`markdown` — Markdown text and table cells (``docs/results/*.md``).
* figures — matplotlib reads ``$...$`` as mathematics: :data:`MATPLOTLIB` turns that off for
  every text of every figure (:mod:`headwatch.figures.style`).

Control characters (a newline, a tab, ...) are shown as ``\\xNN`` escapes by each of them
(:func:`visible`); the schema refuses them in phrase text before any job.

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

_RST_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")            # every ASCII punctuation character
_MARKDOWN_OPENERS = re.compile(r"([\\`*_\[\]<>&|~#$!])")    # what can open Markdown/GFM markup

MATPLOTLIB = {"text.parse_math": False, "text.usetex": False}
"""rcParams under which a figure's text is shown as written (no ``$...$`` mathematics, no TeX)."""


def visible(text) -> str:
    """``text`` as a string, each control character written as its escape (``\\n`` -> ``\\x0a``)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", str(text))


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
    line separators JavaScript once refused) as ``\\uXXXX`` escapes, so that no string in it can
    close the element or open a comment."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda m: f"\\u{ord(m.group()):04x}", text)


def escaped(obj, escape=rst):
    """A copy of ``obj`` (dicts, lists, scalars) with every string value passed through
    ``escape``; mapping keys are kept as they are, so that lookups by a wildcard still work."""
    if isinstance(obj, dict):
        return {k: escaped(v, escape) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [escaped(v, escape) for v in obj]
    return escape(obj) if isinstance(obj, str) else obj
