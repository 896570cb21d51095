"""Coverage of the candidate intervals on real A/A cells, and the rule that picks the
report's interval (docs/design.md §5): pure functions, plus the command line.

Two measurements decide which interval the report uses for a reduction:

*simulation*
    :func:`methods.simulation.coverage_table`: every method of
    :data:`methods.estimators.METHODS` on simulated cells, against its own
    population value.
*real A/A cells*
    :func:`aa_intervals` computes, for every A/A comparison of a ``ratios`` table
    (rows of kind ``"aa"``: the same source measured twice), whether the interval
    contains a reduction of 0; :func:`aa_coverage` counts them by any columns.

:func:`choose_method` states and applies the selection rule; ``python -m
methods.coverage`` prints every table (the only I/O here). ``median_hs`` is the
report's interval (:func:`kvqueue.stats.paired_stats.order_statistic_interval`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kvqueue.stats import paired_stats
from methods.estimators import METHODS, apply_methods
from methods.simulation import CellModel, coverage_table


def choose_method(
    table: pd.DataFrame,
    real: pd.DataFrame | None = None,
    *,
    band: tuple[float, float] = (0.94, 0.97),
    min_n: int = 9,
    allowance: float = 0.0,
    width_tolerance: float = 1.10,
) -> pd.DataFrame:
    """Apply the selection rule to one or more stacked
    :func:`methods.simulation.coverage_table` results.

    Rule: a method is *eligible* when its simulated coverage lies in ``band`` for every
    law, every scenario and every ``n >= min_n`` (``allowance`` standard errors of
    slack; 0 = the point estimate must be inside). Eligible methods are ranked by
    precision: the mean half-width at ``n = 11`` over laws and scenarios, relative to
    the narrowest eligible method; with ``real`` (the per-interval rows of
    :func:`aa_intervals` of every method, a ``method`` column added) the geometric
    mean half-width on the real cells decides instead, because the real process effects
    are heavier-tailed than any simulated law. "Not much wider" means within
    ``width_tolerance`` of the narrowest.

    Returns
    -------
    pandas.DataFrame
        Indexed by method: ``eligible``, ``worst_low``/``worst_high`` (extreme coverage
        at ``n >= min_n``), ``width_n11``, ``real_width`` (geometric mean half-width of
        the real intervals, when given), ``relative_width``, ``not_much_wider`` and
        ``rank`` (1 = chosen; NaN when not eligible), sorted by rank.
    """
    sub = table[table["n"] >= min_n]
    lo, hi = band
    slack = allowance * sub["se"]
    inside = (sub["coverage"] + slack >= lo) & (sub["coverage"] - slack <= hi)
    per = pd.DataFrame(
        {
            "eligible": inside.groupby(sub["method"]).all(),
            "worst_low": sub.groupby("method")["coverage"].min(),
            "worst_high": sub.groupby("method")["coverage"].max(),
            "width_n11": table[table["n"] == 11].groupby("method")["half_width"].mean(),
        }
    )
    key = "width_n11"
    if real is not None:
        positive = real[real["half_width"] > 0]
        per["real_width"] = np.exp(
            np.log(positive["half_width"]).groupby(positive["method"]).mean()
        )
        key = "real_width"
    best = per.loc[per["eligible"], key].min()
    per["relative_width"] = per[key] / best if np.isfinite(best) else np.nan
    per["not_much_wider"] = per["eligible"] & (per["relative_width"] <= width_tolerance)
    per["rank"] = per.loc[per["eligible"], key].rank(method="first").reindex(per.index)
    return per.sort_values(["rank", key], na_position="last").rename_axis("method")


# ---------------------------------------------------------------------------------------
# coverage on real A/A cells

#: Columns that identify one comparison of a ratios table.
COMPARISON_KEYS: tuple[str, ...] = (
    "host",
    "interpreter",
    "run_id",
    "phase",
    "case",
    "pool",
    "candidate",
    "baseline",
)


def aa_intervals(
    ratios: pd.DataFrame,
    interval: Callable[[np.ndarray], tuple[float, float, float]] | str = "median_hs",
    *,
    keys: Sequence[str] | None = None,
    min_n: int = paired_stats.MIN_PROCESSES,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 20261129,
) -> pd.DataFrame:
    """One interval per A/A comparison of a ratios table, and whether it contains 0.

    Parameters
    ----------
    ratios
        Rows of ``data/processed/ratios.csv`` (or :func:`kvqueue.stats.paired_stats.paired_ratios`
        with a ``kind`` column): only rows of kind ``"aa"`` are used.
    interval
        A method name of :data:`METHODS` (applied to the log ratios), or a function
        ``ratios -> (reduction, low, high)`` such as :func:`interval_function` (the
        report's own path, :func:`kvqueue.stats.paired_stats.reduction_interval`).
    keys
        Columns of one comparison (default: those of :data:`COMPARISON_KEYS` present).
    min_n
        Comparisons with fewer processes get no interval and are not counted.
    confidence, resamples, seed
        For a method name (``resamples``/``seed`` only matter for bootstrap methods).

    Returns
    -------
    pandas.DataFrame
        ``keys + [n_processes, reduction, ci_low, ci_high, half_width, contains_zero]``
        (reduction units: a fraction, positive = candidate faster).
    """
    aa = ratios[ratios["kind"] == "aa"]
    keys = [k for k in (keys or COMPARISON_KEYS) if k in aa.columns]
    rows = []
    for key, grp in aa.groupby(keys, sort=True, observed=True):
        r = grp["ratio"].to_numpy(dtype=float)
        if len(r) < min_n:
            continue
        if callable(interval):
            est, low, high = (float(v) for v in interval(r))
        else:
            res = apply_methods(
                np.log(r)[None, :],
                [interval],
                confidence=confidence,
                resamples=resamples,
                rng=np.random.default_rng(seed),
            )[interval]
            e, lo, hi = (float(v[0]) for v in res)
            est, low, high = -math.expm1(e), -math.expm1(hi), -math.expm1(lo)
        rows.append(
            {
                **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                "n_processes": len(r),
                "reduction": est,
                "ci_low": low,
                "ci_high": high,
                "half_width": (high - low) / 2.0,
                "contains_zero": bool(low <= 0.0 <= high),
            }
        )
    cols = [*keys, "n_processes", "reduction", "ci_low", "ci_high", "half_width"]
    return pd.DataFrame(rows, columns=[*cols, "contains_zero"])


def aa_coverage(
    intervals: pd.DataFrame,
    by: Sequence[str] = (),
    *,
    clusters: Sequence[str] = ("host", "run_id", "phase"),
) -> pd.DataFrame:
    """Share of A/A intervals that contain 0, overall or by ``by`` columns.

    Parameters
    ----------
    intervals
        Output of :func:`aa_intervals`.
    by
        Grouping columns (none: one row for all intervals).
    clusters
        Columns of the independent unit: the cells of one run and phase share their
        processes, so their intervals are not independent. ``se_cluster`` is the
        cluster-robust standard error of the share (the columns present are used).

    Returns
    -------
    pandas.DataFrame
        ``by + [intervals, contain_zero, coverage, se, clusters, se_cluster,
        exclude_above, exclude_below, median_half_width]``: ``se`` treats the intervals
        as independent; ``exclude_above``/``exclude_below`` count intervals entirely
        above 0 (the copy faster) / below 0 (the copy slower).
    """
    clusters = [c for c in clusters if c in intervals.columns]
    if not len(by):
        groups: Iterable[tuple[object, pd.DataFrame]] = [((), intervals)]
    else:
        groups = intervals.groupby(list(by), sort=True, observed=True)
    rows = []
    for key, grp in groups:
        k = len(grp)
        hits = int(grp["contains_zero"].sum())
        cov = hits / k if k else math.nan
        se_cluster, n_clusters = math.nan, 0
        if k and clusters:
            per = grp.groupby(clusters, sort=True, observed=True)["contains_zero"].agg(
                ["sum", "count"]
            )
            n_clusters = len(per)
            if n_clusters > 1:
                resid = per["sum"] - cov * per["count"]
                var = n_clusters / (n_clusters - 1) * float((resid**2).sum()) / k**2
                se_cluster = math.sqrt(var)
        rows.append(
            {
                **dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                "intervals": k,
                "contain_zero": hits,
                "coverage": cov,
                "se": math.sqrt(cov * (1 - cov) / k) if k else math.nan,
                "clusters": n_clusters,
                "se_cluster": se_cluster,
                "exclude_above": int((grp["ci_low"] > 0).sum()),
                "exclude_below": int((grp["ci_high"] < 0).sum()),
                "median_half_width": float(grp["half_width"].median()) if k else math.nan,
            }
        )
    return pd.DataFrame(rows)


def aa_coverage_all(
    ratios: pd.DataFrame,
    methods: Iterable[str] = tuple(METHODS),
    *,
    by: Sequence[str] = (),
    **kw: object,
) -> pd.DataFrame:
    """:func:`aa_coverage` of every method in ``methods`` (one block of rows each)."""
    frames = []
    for m in methods:
        cov = aa_coverage(aa_intervals(ratios, m, **kw), by)  # type: ignore[arg-type]
        cov.insert(0, "method", m)
        frames.append(cov)
    return pd.concat(frames, ignore_index=True)


def interval_function(
    settings: Mapping[str, object] | None = None,
) -> Callable[[np.ndarray], tuple[float, float, float]]:
    """The report's own interval (:func:`kvqueue.stats.paired_stats.reduction_interval`) as an
    ``interval`` argument of :func:`aa_intervals`; ``settings`` are its keyword
    arguments (e.g. ``ReportSettings().bootstrap()``)."""
    kw = dict(settings or {})

    def _f(r: np.ndarray) -> tuple[float, float, float]:
        est = paired_stats.reduction_interval(r, **kw)  # type: ignore[arg-type]
        return est.estimate, est.low, est.high

    return _f


# ---------------------------------------------------------------------------------------
# command line (the only I/O of this module)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m methods.coverage``: print the simulation and real A/A tables."""
    ap = argparse.ArgumentParser(prog="python -m methods.coverage", description=__doc__)
    ap.add_argument("--reps", type=int, default=4000, help="simulated cells per (law, n)")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (sim)")
    ap.add_argument("--ratios", default="data/processed/ratios.csv", help="ratios table")
    ap.add_argument("--out", default="", help="folder for coverage_sim.csv, coverage_aa.csv")
    args = ap.parse_args(argv)
    sims = pd.concat(
        [
            coverage_table(reps=args.reps, resamples=args.resamples, scenario="sd 1.5%"),
            coverage_table(
                reps=args.reps,
                resamples=args.resamples,
                model=CellModel(process_sd=0.04),
                seed=20261130,
                scenario="sd 4%",
            ),
        ],
        ignore_index=True,
    )
    ratios = pd.read_csv(args.ratios)
    real = pd.concat(
        [aa_intervals(ratios, m, resamples=args.resamples).assign(method=m) for m in METHODS],
        ignore_index=True,
    )
    with pd.option_context("display.width", 250, "display.max_columns", 80):
        cov = sims.pivot_table(index="method", columns=["scenario", "law", "n"], values="coverage")
        print((cov * 100).round(1).to_string(), end="\n\n")
        hw = sims.pivot_table(index="method", columns=["scenario", "law", "n"], values="half_width")
        print((hw * 100).round(2).to_string(), end="\n\n")
        print(aa_coverage_all(ratios, by=["interpreter"], resamples=args.resamples), end="\n\n")
        print(aa_coverage_all(ratios, resamples=args.resamples), end="\n\n")
        print(choose_method(sims, real))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        sims.to_csv(out / "coverage_sim.csv", index=False)
        real.to_csv(out / "coverage_aa.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
