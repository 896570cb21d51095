"""Charts of the report (seaborn, through :mod:`kvqueue.plotstyle`), drawn from the
processed tables.

Figures are built as :class:`matplotlib.figure.Figure` objects (no pyplot state, so
nothing is shown twice in a notebook) and saved as PNG under ``reports/figures/``,
where both the HTML report (embedded) and the Markdown writeup (linked) use them.
Panels are drawn with seaborn's axes-level functions on the figure's subplots: its
figure-level ones (``catplot``, ``FacetGrid``) make pyplot figures, which a notebook's
inline backend shows a second time. Where seaborn made one artist per category and
series, and drawing took twice as long, the panel is drawn by hand (each function says
which, with the times measured on the committed data). seaborn is imported only when a
figure is drawn (:func:`kvqueue.plotstyle.seaborn`).
"""

from __future__ import annotations

import importlib.metadata
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from kvqueue import plotstyle, schema
from kvqueue.ab import ab_analysis
from kvqueue.ab.ab_tables import HEADLINE_CASES, subject_cases
from kvqueue.formatting import ci_header, fmt_pool
from kvqueue.history import history_present
from kvqueue.policy import policy_present
from kvqueue.processed import store
from kvqueue.report import build_cache
from kvqueue.stats import paired_stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes

DPI = 100
WIDTH_IN = 13.0
_LEGEND_COLS = 6


def _series_label(host: str, interpreter: str) -> str:
    return f"{host} · {interpreter}"


def _case_pool_label(case: str, pool: int) -> str:
    return f"{case} · {fmt_pool(pool)}"


def _ordered_cells(df: pd.DataFrame) -> list[tuple[str, int]]:
    cells = {(c, int(p)) for c, p in zip(df["case"], df["pool"], strict=True)}
    return sorted(cells, key=lambda cp: (schema.case_rank(cp[0]), cp[1]))


def _dodge(k: Any, n: int) -> tuple[Any, float]:
    """Where the ``k``-th of ``n`` items side by side in a category sits (its centre's
    offset from the category's, 0 for one item; ``k`` may be an array) and how wide
    each is: together they fill 0.8 of the category."""
    width = 0.8 / max(1, n)
    return -0.4 + width * (k + 0.5), width


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _series_style(
    series: Sequence[tuple[str, str]],
) -> dict[tuple[str, str], tuple[tuple[float, float, float], str]]:
    """Colour by interpreter and marker by host, so that many series stay apart."""
    pythons = sorted({i for _, i in series})
    hosts = sorted({h for h, _ in series})
    colors = dict(zip(pythons, plotstyle.palette(len(pythons)), strict=True))
    return {(h, i): (colors[i], _MARKERS[hosts.index(h) % len(_MARKERS)]) for h, i in series}


def _legend_cols(labels: Sequence[str]) -> int:
    """As many legend columns as fit across the figure (about 7.5 px per character)."""
    longest = max((len(s) for s in labels), default=1)
    fit = int(WIDTH_IN * DPI * 0.95 // (longest * 7.5 + 50))
    return max(1, min(len(labels), fit, _LEGEND_COLS))


def _no_data(message: str) -> Figure:
    fig = Figure(figsize=(WIDTH_IN, 1.2), dpi=DPI)
    fig.text(0.5, 0.5, message, ha="center", va="center", fontsize=12)
    return fig


def _headline(df: pd.DataFrame, phase: str = "main") -> pd.DataFrame:
    return df[(df["phase"] == phase) & df["headline"].fillna(False)]


def _comparisons(data: store.Processed, df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """Comparisons present in ``df``, configured pairs first, A/A pairs last."""
    present = {
        (c, b, k) for c, b, k in zip(df["candidate"], df["baseline"], df["kind"], strict=True)
    }
    order = {p: i for i, p in enumerate(data.settings.pairs)}
    return sorted(
        present, key=lambda t: (t[2] == ab_analysis.AA, order.get((t[0], t[1]), 99), t[0], t[1])
    )


def _panel_title(cand: str, base: str, kind: str) -> str:
    prefix = "A/A noise floor: " if kind == ab_analysis.AA else ""
    return f"{prefix}{cand}\nvs {base}"


# ---------------------------------------------------------------------------------------
# forest plot


def forest(
    data: store.Processed, *, phase: str = "main", cases: Sequence[str] | None = None
) -> Figure:
    """Forest plot: reduction with its CI per case x pool, one panel per comparison.

    Parameters
    ----------
    data
        Processed tables (headline runs are plotted).
    phase
        ``"main"`` or ``"confirm"``.
    cases
        Cases to plot (default: all).

    Returns
    -------
    matplotlib.figure.Figure
        Points are reductions in %, bars the bootstrap CIs; the grey band is the
        ``±delta`` no-change band of the verdict.
    """
    df = _headline(data.summary, phase)
    if cases is not None:
        df = df[df["case"].isin(list(cases))]
    if df.empty:
        return _no_data("No comparison in the headline runs.")
    comps = _comparisons(data, df)
    cells = _ordered_cells(df)
    series = sorted({(h, i) for h, i in zip(df["host"], df["interpreter"], strict=True)})
    style = _series_style(series)
    df = df.assign(
        cell=[_case_pool_label(c, int(p)) for c, p in zip(df["case"], df["pool"], strict=True)],
        series=[_series_label(h, i) for h, i in zip(df["host"], df["interpreter"], strict=True)],
    )
    n_rows = len(cells) * max(1, len(series))
    # 0.15 in per plotted row, so that the headline forest fits on the report's first
    # screen under the summary; title, legend (on top, where it is read first) and axis
    # labels take ~1.1 in plus 0.25 in per further legend row.
    legend_cols = _legend_cols([_series_label(*s) for s in series])
    legend_rows = -(-len(series) // legend_cols)
    height = max(2.6, 1.1 + 0.25 * legend_rows + 0.15 * n_rows)
    with plotstyle.theme():
        fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
        axes = np.atleast_1d(fig.subplots(1, len(comps), sharey=True, squeeze=False)[0])
        delta = data.settings.delta * 100
        missing_ci = False
        for ax, (cand, base, kind) in zip(axes, comps, strict=True):
            sub = df[(df["candidate"] == cand) & (df["baseline"] == base) & (df["kind"] == kind)]
            ax.axvspan(-delta, delta, color="0.85", zorder=0, lw=0)
            ax.axvline(0, color="0.3", lw=1, zorder=1)
            missing_ci |= _points_and_intervals(ax, sub, cells, series, style)
            ax.set_title(_panel_title(cand, base, kind), fontsize=11)
            ax.set_xlabel("")
            ax.set_ylabel("")
            # Each case · pool is a band of dodged series, between the separators
            # below: a grid line through its middle would run between two series.
            ax.yaxis.grid(False)
        # One label under all panels: per panel it overlaps its neighbours' when there
        # are three comparisons and an A/A pair.
        fig.supxlabel("time reduction, % (> 0: candidate faster)", fontsize=12)
        axes[0].set_yticks(range(len(cells)), [_case_pool_label(c, p) for c, p in cells])
        axes[0].set_ylim(len(cells) - 0.5, -0.5)  # first case on top
        axes[0].set_ylabel("case · pool (blocks)")
        for k in range(len(cells) - 1):
            for ax in axes:
                ax.axhline(k + 0.5, color="0.9", lw=0.8, zorder=0)
        ci = ci_header(data.settings.confidence)
        handles = [
            Line2D([], [], marker=style[s][1], ms=5, color=style[s][0], linestyle="none")
            for s in series
        ]
        hollow = (
            f"; hollow: no CI (fewer than {paired_stats.MIN_PROCESSES} processes)"
            if missing_ci
            else ""
        )
        # The title is the legend's title: a suptitle and an "outside" legend overlap.
        fig.legend(
            handles,
            [_series_label(*s) for s in series],
            loc="outside upper center",
            ncols=legend_cols,
            fontsize=10,
            frameon=False,
            title=(
                f"Time reduction with {ci} ({phase} phase); grey band: no-change band "
                f"±{data.settings.delta * 100:g}%{hollow}"
            ),
            title_fontsize=12,
        )
    return fig


def _points_and_intervals(
    ax: Axes,
    sub: pd.DataFrame,
    cells: Sequence[tuple[str, int]],
    series: Sequence[tuple[str, str]],
    style: Mapping[tuple[str, str], tuple[Any, str]],
) -> bool:
    """One panel of :func:`forest`: per cell, each series' reduction and CI (a
    ``pointplot`` of the given intervals, series dodged), hollow where there is no CI.

    ``pointplot`` makes one line per interval: the headline forest took 0.86 s against
    0.71 s with one ``errorbar`` per series, the forest of every case 1.40 s against
    0.83 s (draw and save, committed data, best of 6): kept, at most 0.6 s more.
    Returns whether a point without a CI was drawn.
    """
    sns = plotstyle.seaborn()
    names = [_series_label(*s) for s in series]
    common: dict[str, Any] = {
        "x": "value",
        "y": "cell",
        "hue": "series",
        "order": [_case_pool_label(c, p) for c, p in cells],
        "hue_order": names,
        "palette": {name: style[s][0] for name, s in zip(names, series, strict=True)},
        "markers": [style[s][1] for s in series],
        "linestyle": "none",
        # The centres of _dodge: side by side over 0.8 of the category.
        "dodge": 0.8 - _dodge(0, len(series))[1] if len(series) > 1 else False,
        "markersize": 5,
        "markeredgewidth": 1,
        "legend": False,
        "zorder": 3,
        "ax": ax,
    }
    has_ci = sub["ci_low"].notna() & sub["ci_high"].notna()
    if has_ci.any():
        sns.pointplot(
            data=plotstyle.given_intervals(
                sub[has_ci], "reduction", "ci_low", "ci_high", scale=100
            ),
            estimator=plotstyle.given_estimate,
            errorbar=plotstyle.given_interval,
            # Caps of ~6 pt, as matplotlib's errorbar(capsize=3) drew them.
            capsize=0.75 * _dodge(0, len(series))[1],
            # errorbar's width (pointplot's default is 1.8 times it).
            linewidth=rcParams["lines.linewidth"],
            **common,
        )
    no_ci = sub[~has_ci]
    if len(no_ci):
        # Hollow: a point estimate without a CI (too few processes).
        sns.pointplot(
            data=plotstyle.given_intervals(no_ci, "reduction", "reduction", "reduction", scale=100),
            estimator=plotstyle.given_estimate,
            errorbar=None,
            markerfacecolor="white",
            **{**common, "markersize": 6},
        )
    return bool(len(no_ci))


# ---------------------------------------------------------------------------------------
# per-process ratios


def process_ratios(data: store.Processed, *, phase: str = "main") -> Figure:
    """Per-process reductions ``1 - r(p)`` with the median, one panel row per comparison.

    Parameters
    ----------
    data
        Processed tables (headline runs).
    phase
        ``"main"`` or ``"confirm"``.

    Returns
    -------
    matplotlib.figure.Figure
        Each dot is one worker process; the black bar is the median (the headline
        estimate).
    """
    df = data.in_headline_runs(data.ratios, phase)
    if df.empty:
        return _no_data("No per-process ratios in the headline runs.")
    rng = np.random.default_rng(data.settings.seed)  # the same jitter on every rebuild
    df = df.assign(
        reduction_pct=(1.0 - df["ratio"]) * 100,
        cell=[_case_pool_label(c, p) for c, p in zip(df["case"], df["pool"], strict=True)],
        series=[_series_label(h, i) for h, i in zip(df["host"], df["interpreter"], strict=True)],
    )
    comps = _comparisons(data, df)
    order = [_case_pool_label(c, p) for c, p in _ordered_cells(df)]
    series = sorted(df["series"].unique())
    palette = dict(zip(series, plotstyle.palette(len(series)), strict=True))
    with plotstyle.theme():
        fig = Figure(figsize=(WIDTH_IN, 3.6 * len(comps) + 1.0), dpi=DPI, layout="constrained")
        axes = fig.subplots(len(comps), 1, squeeze=False)[:, 0]
        for ax, (cand, base, kind) in zip(axes, comps, strict=True):
            sub = df[(df["candidate"] == cand) & (df["baseline"] == base) & (df["kind"] == kind)]
            ax.axhline(0, color="0.3", lw=1)
            _dots_and_medians(ax, sub, order, series, palette, rng, legend=ax is axes[0])
            # Zoom on the processes (the spread is the point); 0 shows when it is near.
            lo, hi = sub["reduction_pct"].min(), sub["reduction_pct"].max()
            pad = max(0.5, 0.12 * (hi - lo))
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_title(_panel_title(cand, base, kind).replace("\n", " "), fontsize=11)
            ax.set_xlabel("")
            ax.set_ylabel("per-process reduction, %")
            ax.tick_params(axis="x", labelrotation=30)
            for lab in ax.get_xticklabels():
                lab.set_horizontalalignment("right")
        fig.suptitle(
            f"Per-process reduction 1 − candidate/baseline ({phase} phase); "
            "dots: processes, black bars: median",
            fontsize=12,
        )
    return fig


def _dots_and_medians(
    ax: Axes,
    sub: pd.DataFrame,
    order: Sequence[str],
    series: Sequence[str],
    palette: Mapping[str, Any],
    rng: np.random.Generator,
    *,
    legend: bool,
) -> None:
    """One panel of :func:`process_ratios`: per cell, each series' processes as jittered
    dots (dodged side by side when there are several series) and their median as a
    black bar.

    Drawn by hand, one ``scatter`` per series: seaborn's ``stripplot`` makes one per
    cell × series (336 for the committed data) and, with a median ``pointplot``, took
    the figure from 2.3 s to 5.0 s (draw and save); its jitter also draws from numpy's
    global random state, not the seeded ``rng``.
    """
    cell_x = {c: i for i, c in enumerate(order)}
    for k, ser in enumerate(series):
        rows = sub[sub["series"] == ser]
        offset, width = _dodge(k, len(series))
        centre = np.array([cell_x[c] for c in rows["cell"]], dtype=float) + offset
        jitter = rng.uniform(-0.3, 0.3, len(rows)) * width
        ax.scatter(
            centre + jitter,
            rows["reduction_pct"],
            s=16,
            color=palette[ser],
            alpha=0.75,
            linewidths=0,
            zorder=3,
            label=ser,
        )
        for cell, value in rows.groupby("cell")["reduction_pct"].median().items():
            x = cell_x[cell] + offset
            ax.hlines(value, x - width * 0.4, x + width * 0.4, color="black", lw=2, zorder=4)
    ax.set_xticks(range(len(order)), list(order))
    ax.set_xlim(-0.5, len(order) - 0.5)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


# ---------------------------------------------------------------------------------------
# ns per cycle per variant


def ns_per_variant(data: store.Processed, *, phase: str = "main") -> Figure:
    """Median ns/cycle per variant and case; dots are per-process medians (log scale).

    Parameters
    ----------
    data
        Processed tables (headline runs).
    phase
        ``"main"`` or ``"confirm"``.

    Returns
    -------
    matplotlib.figure.Figure
        One panel per host x interpreter (rows) and pool (columns).
    """
    df = data.in_headline_runs(data.process_medians, phase)
    if df.empty:
        return _no_data("No samples in the headline runs.")
    var_rank: dict[str, int] = {}
    for lab in data.variants.sort_values("position", kind="stable")["label"]:
        var_rank.setdefault(lab, len(var_rank))
    variants = sorted(df["variant"].unique(), key=lambda v: (var_rank.get(v, 99), v))
    palette = dict(zip(variants, plotstyle.palette(len(variants)), strict=True))
    series = sorted({(h, i) for h, i in zip(df["host"], df["interpreter"], strict=True)})
    pools = sorted(df["pool"].unique())
    cases = sorted(df["case"].unique(), key=schema.case_key)
    rng = np.random.default_rng(data.settings.seed)  # the same jitter on every rebuild
    with plotstyle.theme():
        fig = Figure(figsize=(WIDTH_IN, 3.4 * len(series) + 1.2), dpi=DPI, layout="constrained")
        axes = fig.subplots(len(series), len(pools), squeeze=False, sharey=True)
        shown = df["median_ns"][df["median_ns"] > 0]
        ticks: list[float] = []
        if len(shown):
            low, high = shown.min() / 1.3, shown.max() * 1.3
            axes[0, 0].set_ylim(low, high)  # shared by every panel
            decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
            ticks = [m * 10.0**d for d in decades for m in (1, 2, 5) if low <= m * 10.0**d <= high]
        for i, ser in enumerate(series):
            row = df[(df["host"] == ser[0]) & (df["interpreter"] == ser[1])]
            # The row's own cases and variants: the queue's and the pool's cases on one
            # axis were 13 labels that ran into each other, most of them without a bar,
            # and 8 variants side by side made bars a hair wide.
            row_cases = [c for c in cases if c in set(row["case"])]
            row_variants = [v for v in variants if v in set(row["variant"])]
            for j, pool in enumerate(pools):
                ax = axes[i, j]
                sub = row[row["pool"] == pool]
                _bars_and_dots(ax, sub, row_cases, row_variants, palette, rng)
                ax.set_yscale("log")
                # Label 1-2-5 steps: decades alone are too coarse to read values off. One
                # fixed list for the shared axis: a LogLocator per panel computed its
                # ticks again for each of the 20 panels (2.4 s of a 4 s figure, profiled).
                ax.yaxis.set_major_locator(FixedLocator(ticks))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
                ax.yaxis.set_minor_locator(NullLocator())
                ax.set_title(f"{_series_label(*ser)} · pool {fmt_pool(pool)}", fontsize=11)
                ax.set_xlabel("")
                ax.set_ylabel("ns per cycle (log)" if j == 0 else "")
        bounds = set(data.variants.loc[data.variants["is_bound"].fillna(False), "label"])
        handles = [
            Patch(color=palette[v], label=f"{v} (bound)" if v in bounds else v) for v in variants
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(variants)))
        fig.suptitle(
            f"ns per cycle by variant ({phase} phase); bars: median over processes, "
            "dots: per-process medians; mix is per allocation/free",
            fontsize=12,
        )
    return fig


def _bars_and_dots(
    ax: Axes,
    sub: pd.DataFrame,
    cases: Sequence[str],
    variants: Sequence[str],
    palette: Mapping[str, Any],
    rng: np.random.Generator,
) -> None:
    """One panel of :func:`ns_per_variant`: per case, one bar per variant (the median of
    its per-process medians), dodged, and every process as a jittered dot.

    Drawn by hand, one ``bar`` per variant and one ``scatter`` for the dots: seaborn's
    ``stripplot`` makes one artist per case × variant (560 for the committed data), and
    its ``barplot`` (one ``bar`` per variant plus a pandas ``groupby`` each) cost 1.1 s
    of the figure's 6.1 s (draw and save, committed data, best of 6). It was kept while
    the figure was drawn beside the report's kernel; the report now draws it in line,
    after a new bench run, whose report took 20.5 s against a 20 s target.
    """
    case_x = {c: i for i, c in enumerate(cases)}
    var_k = {v: k for k, v in enumerate(variants)}
    sub = sub[sub["case"].isin(case_x) & sub["variant"].isin(var_k)]
    med = sub.groupby(["case", "variant"], sort=False)["median_ns"].median()
    for v in variants:
        cells = [(c, m) for (c, var), m in med.items() if var == v]
        if cells:
            shift, wide = _dodge(var_k[v], len(variants))
            xs = [case_x[c] + shift for c, _ in cells]
            ax.bar(xs, [m for _, m in cells], wide, color=palette[v], alpha=0.85, zorder=2)
    offset, width = _dodge(np.array([var_k[v] for v in sub["variant"]], dtype=float), len(variants))
    x = np.array([case_x[c] for c in sub["case"]], dtype=float) + offset
    jitter = rng.uniform(-0.1, 0.1, len(x)) * width * 2
    ax.scatter(x + jitter, sub["median_ns"], s=6, color="black", linewidths=0, zorder=3)
    ax.set_xticks(range(len(cases)), list(cases))  # also in a panel without data
    ax.set_xlim(-0.5, len(cases) - 0.5)


# ---------------------------------------------------------------------------------------
# files


@dataclass(frozen=True)
class FigureSpec:
    """A figure of the report: its title, its alt text, how it is drawn and the
    processed tables it reads (its cache key: :func:`draw`; ``tests/test_figures.py``
    checks that a figure drawn with every other table emptied is the same PNG)."""

    title: str
    alt: str
    draw: Callable[[store.Processed], Figure]
    tables: tuple[str, ...]


#: name -> figure of the report (the PNG is ``<name>.png``).
FIGURES: dict[str, FigureSpec] = {
    "forest": FigureSpec(
        "Forest plot of the headline cycles",
        "Forest plot: time reduction in percent with its confidence interval for alloc1, "
        "alloc2 and mix at each pool size, one panel per comparison (and per A/A noise "
        "floor, where measured), one colour per interpreter and one marker per host; the "
        "grey band is the no-change band.",
        lambda data: forest(data, cases=HEADLINE_CASES),
        ("summary",),
    ),
    "forest_pool": FigureSpec(
        "Forest plot of vLLM's BlockPool",
        "Forest plot: time reduction in percent with its confidence interval for every "
        "pool case (vLLM's own benchmark loop at each size measured, and a prefix-caching "
        "churn of requests) at each pool size, one panel per comparison of pools, one colour per "
        "interpreter and one marker per host.",
        lambda data: forest(data, cases=subject_cases(data, schema.SUBJECT_POOL)),
        ("summary",),
    ),
    "forest_manager": FigureSpec(
        "Forest plot of vLLM's KVCacheManager",
        "Forest plot: time reduction in percent with its confidence interval for every "
        "manager case (one request of N blocks admitted and freed, each N measured, and one "
        "scheduler step of a serving stream) at each pool size, one panel per comparison "
        "of managers, one colour per interpreter and one marker per host.",
        lambda data: forest(data, cases=subject_cases(data, schema.SUBJECT_MANAGER)),
        ("summary",),
    ),
    "forest_all": FigureSpec(
        "Forest plot of every case",
        "Forest plot: time reduction in percent with its confidence interval for every "
        "case and pool size, one panel per comparison, one colour per interpreter and one "
        "marker per host.",
        forest,
        ("summary",),
    ),
    "process_ratios": FigureSpec(
        "Per-process ratios",
        "Strip plot: the reduction of every worker process per case and pool, one row of "
        "panels per comparison; black bars mark the medians.",
        process_ratios,
        ("ratios", "runs"),
    ),
    "ns_per_variant": FigureSpec(
        "ns per cycle per variant",
        "Bar chart on a log scale: median ns per cycle of every variant per case, one panel "
        "per host, interpreter and pool; dots are the per-process medians.",
        ns_per_variant,
        ("process_medians", "runs", "variants"),
    ),
    "policy": FigureSpec(
        "Allocation policies against engine age",
        "Each contiguous policy's descriptors per READ, lru's divided by the policy's, "
        "against engine age in pool turnovers (log axes), with confidence bands; the "
        "steady-state measurement shaded, the widest window's one-side runs ratio dotted, "
        "1 (lru) dashed, and PR #55841's 2.3-2.6x hatched over the ages at which this "
        "workload has admitted as many requests as the PR's hour; one panel per host, "
        "interpreter and regime.",
        lambda data: policy_present.figure(data.policy),
        ("policy",),
    ),
    "history": FigureSpec(
        "Each release step's change in time, paired",
        "Per interpreter (rows) and case (columns): each step between two distinct queue "
        "versions, oldest to newest, labelled by the first release of the newer one, as the "
        "median per-process ratio newer/older with its 95% interval on a log axis in percent, "
        "and (x) its change in instructions per operation where counted; steps that hold up "
        "under the false-discovery control are filled and numbered, red where the "
        "instruction counts moved too and grey where only the time did, with a key of their "
        "release ranges.",
        lambda data: _history(data, schema.SUBJECT_QUEUE),
        ("history", "history_steps", "count_steps"),
    ),
    "history_pool": FigureSpec(
        "Each BlockPool release step's change in time, paired",
        "As the queue's release history, for vLLM's BlockPool: per interpreter (rows) and "
        "case (columns), each step between two distinct pool versions (block_pool.py and "
        "what it runs of kv_cache_utils.py) as the median per-process ratio newer/older "
        "with its 95% interval on a log axis in percent, (x) its instruction change where "
        "counted; filled and numbered where the step holds up under the false-discovery "
        "control (red: the instruction counts moved too; grey: time only).",
        lambda data: _history(data, schema.SUBJECT_POOL),
        ("history", "history_steps", "count_steps"),
    ),
    "history_manager": FigureSpec(
        "Each KVCacheManager release step's change in time, paired",
        "As the queue's release history, for vLLM's KVCacheManager stack: per interpreter "
        "(rows) and case (columns), each step between two distinct manager versions (the "
        "manager, coordinator, single-type managers and pool of a release) as the median "
        "per-process ratio newer/older with its 95% interval on a log axis in percent, (x) "
        "its instruction change where counted; filled and numbered where the step holds up "
        "under the false-discovery control (red: the instruction counts moved too; grey: "
        "time only).",
        lambda data: _history(data, schema.SUBJECT_MANAGER),
        ("history", "history_steps", "count_steps"),
    ),
}

#: The history figure of each subject (a key of :data:`FIGURES`).
HISTORY_FIGURES = {
    schema.SUBJECT_QUEUE: "history",
    schema.SUBJECT_POOL: "history_pool",
    schema.SUBJECT_MANAGER: "history_manager",
}
#: The forest figure of each subject's comparisons.
FOREST_FIGURES = {
    schema.SUBJECT_QUEUE: "forest",
    schema.SUBJECT_POOL: "forest_pool",
    schema.SUBJECT_MANAGER: "forest_manager",
}


def _history(data: store.Processed, subject: str) -> Figure:
    """The release-history figure of one subject (:data:`kvqueue.schema.SUBJECTS`)."""
    return history_present.figure(
        *(
            history_present.of_subject(t, subject)
            for t in (data.history, data.history_steps, data.count_steps)
        )
    )


def save(fig: Figure, folder: Path | str, name: str) -> Path:
    """Save a figure as ``<folder>/<name>.png`` and return the path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    _write_png(fig, path)
    return path


def _write_png(fig: Figure, path: Path) -> None:
    # zlib level 1, not the default 6: the PNGs are ~1.3x larger and written ~3x faster
    # (savefig's compression was 13 s of a loaded 87 s report build).
    fig.savefig(
        path, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": 1}
    )


def figure_key(data: store.Processed, name: str, tables: Sequence[str], extra: str = "") -> str:
    """The build cache's key of a figure (:func:`kvqueue.report.build_cache.key`): its
    name, the content of the tables it reads, the report settings but the scope (as a
    run's key: :func:`kvqueue.report.build_cache.settings_part`), ``extra`` (what else it
    is drawn from) and the plotting libraries' versions."""
    import matplotlib

    parts: list[str | bytes] = [extra, build_cache.settings_part(data.settings)]
    # seaborn's version from its metadata: importing it would cost the 2.8 s that a
    # process whose figures all come from the cache does not pay (kvqueue.plotstyle).
    parts += [matplotlib.__version__, importlib.metadata.version("seaborn"), str(DPI)]
    for table in tables:
        df = data.table(table)
        parts.append(f"{table}:{list(df.columns)}:{len(df)}")
        parts.append(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return build_cache.key(name, parts)


def cached(
    data: store.Processed,
    name: str,
    tables: Sequence[str],
    folder: Path | str,
    make: Callable[[], Figure],
    extra: str = "",
) -> Path:
    """``<folder>/<name>.png``, copied from the build cache when a figure of the same key
    (:func:`figure_key`) was drawn before, else drawn by ``make`` into the cache first.

    Drawing is deterministic (seeded jitter, no timestamps), so a cached PNG is the PNG a
    redraw gives. Tables not read from a processed folder (``data.folder`` is None) are
    drawn every time.
    """
    out = Path(folder)
    if data.folder is None:
        return save(make(), out, name)
    home = Path(data.folder) / build_cache.FOLDER
    entry = build_cache.stored(
        home,
        name,
        figure_key(data, name, tables, extra),
        ".png",
        lambda path: _write_png(make(), path),
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    shutil.copyfile(entry, path)
    return path


def draw(data: store.Processed, name: str, folder: Path | str) -> Path:
    """Draw figure ``name`` (a key of :data:`FIGURES`), save it as PNG, return the path
    (from the build cache when its tables, settings and code are unchanged:
    :func:`cached`).

    Parameters
    ----------
    data
        Processed tables.
    name
        A key of :data:`FIGURES`.
    folder
        Output folder (``reports/figures``).

    Returns
    -------
    pathlib.Path
    """
    spec = FIGURES[name]
    return cached(data, name, spec.tables, folder, lambda: spec.draw(data))
