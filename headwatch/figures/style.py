"""The one figure style: journal column sizes, a colour-blind-safe palette,
vector PDF with embedded fonts plus a PNG for screens."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..markup import MATPLOTLIB  # noqa: E402

# Okabe–Ito: distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
SEQUENTIAL = "viridis"   # attention weights, scores (perceptually uniform)
DIVERGING = "RdBu_r"     # signed changes (drops in probability)

ONE_COLUMN = 3.5         # inches, a journal single column
TWO_COLUMNS = 7.2        # inches, full page width

plt.rcParams.update({
    "pdf.fonttype": 42, "ps.fonttype": 42,       # embed TrueType fonts in the PDF
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.spines.top": False, "axes.spines.right": False,
    "figure.dpi": 100, "savefig.dpi": 200, "savefig.bbox": "tight",
    **MATPLOTLIB,        # text from the config (phrases, tokens, names) is drawn as written, never as $math$
})


def figure(width: float = ONE_COLUMN, height: float | None = None, **kw):
    """A new figure of a journal width (inches); height defaults to width × 0.75."""
    return plt.subplots(figsize=(width, height or width * 0.75), **kw)


def save(fig, pdf_path, png_path=None) -> None:
    """Write the figure as PDF (vector, embedded fonts) and PNG, then close it."""
    pdf_path = Path(pdf_path)
    png_path = Path(png_path) if png_path else pdf_path.with_suffix(".png")
    pdf_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(pdf_path)
    fig.savefig(png_path)
    plt.close(fig)
