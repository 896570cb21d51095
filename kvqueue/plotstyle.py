"""seaborn for the figures: its theme and palettes, and intervals computed elsewhere
drawn by its interval plots (root module: it imports no folder).

The report's figures (:mod:`kvqueue.report.figures`) and the questions' display modules
(``policy_present``, ``history_present``) draw with seaborn, in its ``whitegrid`` style,
``notebook`` context and ``colorblind`` palette. It is imported on first use
(:func:`seaborn`), never at import time: importing it took 2.8 s after the figures
module's own imports (``-X importtime``, best of 5 on 2 busy vCPUs; 0.2 s of it seaborn's
own modules, the rest the ``scipy.stats`` it pulls in), and the modules that draw are
imported by processes that do not: the report's own process (:mod:`kvqueue.report.build`,
before its processed stage) and a notebook kernel whose figures all come from the
figure cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

import pandas as pd


def seaborn() -> ModuleType:
    """The ``seaborn`` module, imported on the first call (see the module's docstring)."""
    import seaborn

    return seaborn


@contextlib.contextmanager
def theme() -> Iterator[None]:
    """seaborn's ``whitegrid`` style and ``notebook`` context while a figure is drawn.

    A context, never a global theme: the rcParams are restored after it, so no figure
    restyles the ones drawn after it in the same process (a notebook's own plots
    included).
    """
    sns = seaborn()
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"):
        yield


def palette(n: int) -> list[tuple[float, float, float]]:
    """``n`` distinct colours: seaborn's ``colorblind`` up to 10, then ``tab20``, then
    evenly spaced ``hls`` hues.

    Parameters
    ----------
    n
        How many colours.

    Returns
    -------
    list of tuple of float
        RGB colours.
    """
    name = "colorblind" if n <= 10 else "tab20" if n <= 20 else "hls"
    return list(seaborn().color_palette(name, max(1, n)))[:n]


def given_intervals(
    df: pd.DataFrame, estimate: str, low: str, high: str, *, scale: float = 1.0
) -> pd.DataFrame:
    """``df`` with three rows per row for seaborn's interval plots: each row's ``low``,
    ``estimate`` and ``high`` (times ``scale``) in the column ``value``, in this order.

    seaborn's point and line plots compute their own estimate and interval from the
    rows of each point; with ``estimator=`` :func:`given_estimate` and ``errorbar=``
    :func:`given_interval` they read these three back instead, so the figures show the
    intervals of the processed tables (bootstrap, order-statistic, t), never another
    computation. Each point must be one row of ``df``.

    Parameters
    ----------
    df
        One row per point.
    estimate, low, high
        Columns of the point estimate and its interval's ends.
    scale
        Factor of every value (100: fractions shown as percent).

    Returns
    -------
    pandas.DataFrame
        ``df``'s columns and ``value``, ``3 × len(df)`` rows.
    """
    # Concatenated blocks: within every group of one point (groupby keeps the order of
    # the rows) the low comes first, the estimate second, the high last.
    parts = [df.assign(value=df[col] * scale) for col in (low, estimate, high)]
    return pd.concat(parts, ignore_index=True)


def given_estimate(values: pd.Series) -> float:
    """The estimate of one point of :func:`given_intervals` (its middle row)."""
    _check_point(values)
    return float(values.iloc[1])


def given_interval(values: pd.Series) -> tuple[float, float]:
    """The interval of one point of :func:`given_intervals` (its first and last row)."""
    _check_point(values)
    return float(values.iloc[0]), float(values.iloc[2])


def _check_point(values: pd.Series) -> None:
    if len(values) != 3:
        raise ValueError(
            f"a plotted point has {len(values)} rows, not the 3 of given_intervals "
            "(is a point in the table twice?)"
        )
