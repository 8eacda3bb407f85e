"""The one figure style: journal column sizes, a colour-blind-safe palette,
vector PDF with embedded fonts plus a PNG for screens.

Text from the config (phrases, tokens, names) is drawn as written: math text is off for every
text of every figure (:data:`headwatch.markup.MATPLOTLIB`), so a ``$`` in a token is a dollar
sign. Matplotlib's own labels of a log axis are math text (``$\\mathdefault{10^{2}}$``), which
would then be drawn as that source; :func:`save` gives every log axis and log colour bar
:class:`PlainLogFormatter` instead, whose labels are plain text (10², 2×10⁻¹). Why there and not
math text back on with each config text escaped: math off is the safe default for every text,
wherever it comes from (a text that an escape forgets is still drawn as written), and the tick
labels of a log scale are the one place that needs exponents; why at :func:`save` and not by a
registered scale: a colour bar of a ``LogNorm`` takes its scale from the norm, not from
matplotlib's registry of scales, and every figure passes through :func:`save`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
from pathlib import Path

import matplotlib

if getattr(sys.modules.get("__main__"), "snakemake", None) is not None:   # a workflow job: figures are files
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import LogFormatter

from ..markup import MATPLOTLIB
from ..tableio import read_parquet
from ..jobs import log_to

# Okabe–Ito: distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
SEQUENTIAL = "viridis"   # attention weights, scores (perceptually uniform)
DIVERGING = "RdBu_r"     # signed changes (drops in probability)

ONE_COLUMN = 3.5         # inches, a journal single column
TWO_COLUMNS = 7.2        # inches, full page width

STYLE = {
    "pdf.fonttype": 42, "ps.fonttype": 42,       # embed TrueType fonts in the PDF
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.spines.top": False, "axes.spines.right": False,
    "figure.dpi": 100, "savefig.dpi": 200, "savefig.bbox": "tight",
    **MATPLOTLIB,        # text from the config (phrases, tokens, names) is drawn as written, never as $math$
}
"""The house style: applied only while a figure is drawn or saved (:func:`house_style`), never to
matplotlib's global settings — importing headwatch changes nothing of a user's own plots."""


@contextlib.contextmanager
def house_style():
    """Matplotlib's settings of :data:`STYLE` while inside, the caller's own back on exit."""
    with plt.rc_context(STYLE):
        yield


def styled(draw):
    """A drawing function run in the house style (:func:`house_style`), its figure's log axes labelled
    in plain text (:func:`plain_log_ticks`), so that a plain ``fig.savefig`` saves it as drawn."""
    @functools.wraps(draw)
    def run(*args, **kwargs):
        with house_style():
            fig = draw(*args, **kwargs)
            plain_log_ticks(fig)
        return fig
    return run

SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


class PlainLogFormatter(LogFormatter):
    """Tick labels of a log axis as plain text: a power of the base as the base with its exponent
    in superscript (10⁰, 10², 2⁵, 10⁻³), another labelled tick as coefficient × power (2×10⁻¹).
    Which ticks get a label is :class:`~matplotlib.ticker.LogFormatter`'s choice, as for
    matplotlib's own (math text) labels."""

    def __init__(self, base: float = 10.0, label_only_base: bool = False):
        super().__init__(base, labelOnlyBase=label_only_base)
        self.plain_base = float(base)

    def __call__(self, x, pos=None) -> str:
        if x == 0 or not super().__call__(x, pos):      # a tick matplotlib leaves without a label
            return "0" if x == 0 else ""
        base = self.plain_base
        exponent = math.floor(math.log(abs(x), base) + 1e-10)
        coefficient = abs(x) / base ** exponent
        power = f"{base:g}{str(exponent).translate(SUPERSCRIPT)}"
        sign = "−" if x < 0 else ""
        return sign + (power if abs(coefficient - 1) < 1e-9 else f"{coefficient:.3g}×{power}")


def plain_log_ticks(fig) -> None:
    """Every log axis of ``fig`` (colour bars' included) labelled by :class:`PlainLogFormatter`,
    major and minor ticks, keeping matplotlib's choice of which ticks carry a label."""
    for ax in fig.get_axes():
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            base = axis.get_transform().base
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                old = get()
                if isinstance(old, LogFormatter) and not isinstance(old, PlainLogFormatter):
                    put(PlainLogFormatter(base, label_only_base=old.labelOnlyBase))


def figure(width: float = ONE_COLUMN, height: float | None = None, **kw):
    """A new figure of a journal width (inches); height defaults to width × 0.75."""
    return plt.subplots(figsize=(width, height or width * 0.75), **kw)


def save(fig, pdf_path, png_path=None) -> None:
    """Write the figure as PDF (vector, embedded fonts) and PNG, its log axes labelled in plain
    text (:func:`plain_log_ticks`), then close it."""
    pdf_path = Path(pdf_path)
    png_path = Path(png_path) if png_path else pdf_path.with_suffix(".png")
    pdf_path.parent.mkdir(parents=True, exist_ok=True)
    plain_log_ticks(fig)
    with house_style():
        fig.savefig(pdf_path)
        fig.savefig(png_path)
    plt.close(fig)


def table_figure(snakemake, draw, *args) -> None:
    """The job of a figure rule that draws one table: ``draw(table, *args)`` of the rule's one
    input table, saved as its ``pdf`` and ``png`` outputs, logged to the rule's log."""
    with log_to(snakemake.log[0]):
        save(draw(read_parquet(snakemake.input[0]), *args), snakemake.output.pdf, snakemake.output.png)
