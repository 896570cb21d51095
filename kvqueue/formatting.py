"""Number and interval formatters of every display text (report, history, policy, quick).

One interval formatter, :func:`fmt_interval`: every table, sentence and terminal line
that shows an interval goes through it, so a missing bound reads ``n/a`` everywhere;
the callers differ only in how they write one number (a percentage with or without a
sign, a count with thousands separators). Root module: the report, the questions'
display modules and the bench's quick loop share it, and it imports no folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd


def is_na(value: object) -> bool:
    """Whether a processed-table value is missing (``None``, ``pd.NA`` or a float NaN)."""
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _finite(x: object) -> bool:
    return not is_na(x) and bool(np.isfinite(float(x)))  # type: ignore[arg-type]


def _num(x: float, digits: int) -> str:
    # round first so that -0.04 shows as "0.0", not "-0.0"
    value = round(x, digits) + 0.0
    return f"{value:.{digits}f}"


def fmt_interval(low: float, high: float, number: Callable[[float], str]) -> str:
    """Format an interval ``[low, high]`` with ``number`` for each bound.

    Parameters
    ----------
    low, high
        The bounds (fractions, counts, ...: ``number`` decides how they read).
    number
        Formats one finite bound, e.g. ``lambda x: f"{x * 100:+.1f}"``.

    Returns
    -------
    str
        ``[<low>, <high>]``, or ``n/a`` when either bound is missing or not finite.
    """
    if not (_finite(low) and _finite(high)):
        return "n/a"
    return f"[{number(low)}, {number(high)}]"


def fmt_pct(x: float, digits: int = 1) -> str:
    """Format a fraction as a percentage (``0.201`` -> ``20.1%``); NaN -> ``n/a``."""
    return f"{_num(x * 100, digits)}%" if _finite(x) else "n/a"


def fmt_signed_pct(x: float, digits: int = 1) -> str:
    """Format a fraction as a signed percentage (``0.012`` -> ``+1.2%``); NaN -> ``n/a``."""
    return f"{x * 100:+.{digits}f}%" if _finite(x) else "n/a"


def fmt_ci(low: float, high: float, digits: int = 1) -> str:
    """Format a CI of fractions as percentages: ``[18.9, 21.0]``; NaN -> ``n/a``.

    The report's tables and sentences show their intervals this way (directly or
    through :func:`fmt_estimate`).
    """
    return fmt_interval(low, high, lambda x: _num(x * 100, digits))


def fmt_signed_ci(low: float, high: float, digits: int = 1) -> str:
    """Format a CI of fractions as signed percentages: ``[+10.1, +14.0]``; NaN -> ``n/a``."""
    return fmt_interval(low, high, lambda x: f"{x * 100:+.{digits}f}")


#: What an interval that cannot be formed from too few processes reads (issue 18: "1.53×
#: fewer [nan, nan]" with 2 processes).
TOO_FEW = "n/a (too few processes)"


def fmt_estimate(
    x: float, low: float, high: float, digits: int = 1, *, too_few: bool = False
) -> str:
    """An estimate with its CI: ``20.3% [19.5, 21.3]``, ``20.3% (CI n/a)`` or ``n/a``;
    with ``too_few`` (fewer processes than an interval needs) a missing CI reads
    ``20.3% [n/a (too few processes)]``."""
    if not _finite(x):
        return "n/a"
    ci = fmt_ci(low, high, digits)
    if ci != "n/a":
        return f"{fmt_pct(x, digits)} {ci}"
    return f"{fmt_pct(x, digits)} " + (f"[{TOO_FEW}]" if too_few else "(CI n/a)")


def fmt_number(x: float, digits: int) -> str:
    """Format a number with thousands separators (``12345.6``, 1 -> ``12,345.6``)."""
    return f"{x:,.{digits}f}" if _finite(x) else "n/a"


def clip_interval(
    low: float, high: float, bounds: tuple[float, float] | None
) -> tuple[float, float]:
    """An interval clipped to its metric's range (a share cannot fall below 0: a Student
    t interval of a mean of shares near 0 can, "prefix hits % 9.31 [-7.18, 25.81]");
    ``bounds`` ``None``: unchanged. Callers say in their notes that bounds are clipped."""
    if bounds is None:
        return low, high
    lo, hi = bounds
    if _finite(low):
        low = min(max(float(low), lo), hi)
    if _finite(high):
        high = min(max(float(high), lo), hi)
    return low, high


def fmt_number_estimate(
    x: float,
    low: float,
    high: float,
    digits: int,
    *,
    bounds: tuple[float, float] | None = None,
    too_few: bool = False,
) -> str:
    """A number with its interval: ``1.23 [1.10, 1.40]``, ``1.23`` without one, or ``n/a``;
    the interval clipped to ``bounds`` (:func:`clip_interval`), and with ``too_few`` a
    missing one reads ``1.23 [n/a (too few processes)]``."""
    if not _finite(x):
        return "n/a"
    low, high = clip_interval(low, high, bounds)
    if _finite(low) and high == math.inf:
        # Unbounded above is a result, not a missing interval: a break-even region count
        # whose saving's interval reaches 0 is "at least low, perhaps never".
        return f"{fmt_number(x, digits)} [{fmt_number(low, digits)}, ∞]"
    ci = fmt_interval(low, high, lambda v: fmt_number(v, digits))
    if ci == "n/a" and too_few:
        return f"{fmt_number(x, digits)} [{TOO_FEW}]"
    return fmt_number(x, digits) if ci == "n/a" else f"{fmt_number(x, digits)} {ci}"


def fmt_ns(x: float) -> str:
    """Format nanoseconds with one decimal and thousands separators."""
    return f"{x:,.1f}" if _finite(x) else "n/a"


def fmt_pool(pool: int) -> str:
    """Format a pool size (``100000`` -> ``100,000``)."""
    return f"{int(pool):,}"


def comparison(candidate: str, baseline: str) -> str:
    """Label of a comparison: ``candidate vs baseline``."""
    return f"{candidate} vs {baseline}"


def ci_header(confidence: float) -> str:
    """Header of a CI column, e.g. ``95% CI``."""
    return f"{confidence * 100:g}% CI"
