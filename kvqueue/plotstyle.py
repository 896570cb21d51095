"""The figures' look: one style context and the palettes, for the report and the
questions' display modules (root module: it imports no folder).

The values are seaborn 0.13's ``axes_style("whitegrid")`` and
``plotting_context("notebook")`` and its ``colorblind`` palette, written out as
matplotlib settings: the figures used seaborn for nothing else, and importing it (with
the ``scipy.stats`` it pulls in) took 1.8 s of every process that draws, the report
notebook's kernel included. The one key left out is ``image.cmap`` ("rocket", a colour
map that only importing seaborn registers); no figure draws an image.
"""

from __future__ import annotations

import colorsys
import contextlib
from collections.abc import Iterator

#: seaborn's "whitegrid" axes style.
WHITEGRID: dict[str, object] = {
    "figure.facecolor": "white",
    "axes.labelcolor": ".15",
    "xtick.direction": "out",
    "ytick.direction": "out",
    "xtick.color": ".15",
    "ytick.color": ".15",
    "axes.axisbelow": True,
    "grid.linestyle": "-",
    "text.color": ".15",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans",
                        "sans-serif"],
    "lines.solid_capstyle": "round",
    "patch.edgecolor": "w",
    "patch.force_edgecolor": True,
    "xtick.top": False,
    "ytick.right": False,
    "axes.grid": True,
    "axes.facecolor": "white",
    "axes.edgecolor": ".8",
    "grid.color": ".8",
    "axes.spines.left": True,
    "axes.spines.bottom": True,
    "axes.spines.right": True,
    "axes.spines.top": True,
    "xtick.bottom": False,
    "ytick.left": False,
}  # fmt: skip

#: seaborn's "notebook" plotting context (sizes of lines, ticks and fonts).
NOTEBOOK: dict[str, object] = {
    "axes.linewidth": 1.25,
    "grid.linewidth": 1,
    "lines.linewidth": 1.5,
    "lines.markersize": 6,
    "patch.linewidth": 1,
    "xtick.major.width": 1.25,
    "ytick.major.width": 1.25,
    "xtick.minor.width": 1,
    "ytick.minor.width": 1,
    "xtick.major.size": 6,
    "ytick.major.size": 6,
    "xtick.minor.size": 4,
    "ytick.minor.size": 4,
    "font.size": 12,
    "axes.labelsize": 12,
    "axes.titlesize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "legend.title_fontsize": 12,
}

#: seaborn's "colorblind" palette (10 colours, distinguishable with colour blindness).
COLORBLIND = (
    "#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc",
    "#ca9161", "#fbafe4", "#949494", "#ece133", "#56b4e9",
)  # fmt: skip


@contextlib.contextmanager
def whitegrid() -> Iterator[None]:
    """The style while a figure is drawn, as a context: the global rcParams are restored
    after it, so no figure restyles the ones drawn after it in the same process."""
    import matplotlib

    with matplotlib.rc_context({**WHITEGRID, **NOTEBOOK}):
        yield


def colorblind(n: int) -> list[str]:
    """``n`` colours of :data:`COLORBLIND`, repeated after 10."""
    return [COLORBLIND[k % len(COLORBLIND)] for k in range(n)]


def palette(n: int) -> list[str] | list[tuple[float, float, float]]:
    """``n`` distinct colours: colour-blind safe up to 10, then matplotlib's tab20, then
    evenly spaced hues."""
    if n <= len(COLORBLIND):
        return colorblind(n)
    if n <= 20:
        import matplotlib

        return [tuple(c) for c in matplotlib.colormaps["tab20"].colors[:n]]  # type: ignore[attr-defined]
    return [colorsys.hls_to_rgb(k / n, 0.6, 0.65) for k in range(n)]
