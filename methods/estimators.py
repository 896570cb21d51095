"""The candidate estimators and intervals of a reduction, vectorized over cells: pure
functions (docs/design.md §5).

Every method works on log ratios and returns, per cell, the estimate and the bounds of
the *log ratio* (``reduction = 1 - exp(log ratio)``, so a log-ratio interval
``[lo, hi]`` is the reduction interval ``[1 - exp(hi), 1 - exp(lo)]``). :data:`METHODS`
names them all (with the estimand each targets, see
:func:`methods.simulation.population_values`) and :func:`apply_methods` applies
any of them to the same cells. ``median_hs`` is the report's interval
(:func:`kvqueue.stats.paired_stats.order_statistic_interval`); the others are what its
coverage was measured against (:mod:`methods.simulation`,
:mod:`methods.coverage`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import lru_cache

import numpy as np

from kvqueue.stats import paired_stats

# ---------------------------------------------------------------------------------------
# estimators and intervals (vectorized over rows: x has shape (cells, n))


def _trim_count(n: int, proportion: float = 0.2) -> int:
    return math.floor(proportion * n)


#: Result of a method: estimate, low, high (log ratios), each of shape (cells,).
Result = tuple[np.ndarray, np.ndarray, np.ndarray]


def binomial_order_interval_ranks(n: int, confidence: float = 0.95) -> int:
    """Largest ``k`` whose interval ``[x_(k), x_(n+1-k)]`` covers the median with
    probability ``>= confidence`` for any continuous law (0 when even ``k = 1`` does
    not: ``n <= 5`` at 95 %)."""
    alpha = 1.0 - confidence
    k = 0
    while (
        k + 1 <= n // 2 and 2.0 * paired_stats.scipy_stats().binom.cdf(k, n, 0.5) <= alpha + 1e-12
    ):
        k += 1
    return k


def median_binomial(x: np.ndarray, confidence: float = 0.95) -> Result:
    """Median with the distribution-free order-statistic (binomial) interval.

    The interval ``[x_(k), x_(n+1-k)]`` with the largest ``k`` of guaranteed coverage
    (:func:`binomial_order_interval_ranks`): exact for any continuous law, but
    conservative because ``k`` is discrete (n = 11: 98.8 %).
    """
    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    k = binomial_order_interval_ranks(n, confidence)
    est = np.median(s, axis=-1)
    if k == 0:
        nan = np.full(est.shape, np.nan)
        return est, nan, nan.copy()
    return est, s[..., k - 1], s[..., n - k]


def median_hs(x: np.ndarray, confidence: float = 0.95) -> Result:
    """Median with the Hettmansperger–Sheather interpolated order-statistic interval
    (the report's interval: the ranks and weight of
    :func:`kvqueue.stats.paired_stats.order_statistic_ranks`)."""
    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    k, lam = paired_stats.order_statistic_ranks(n, confidence)
    est = np.median(s, axis=-1)
    if k == 0:
        nan = np.full(est.shape, np.nan)
        return est, nan, nan.copy()
    low = (1 - lam) * s[..., k - 1] + lam * s[..., k]
    high = lam * s[..., n - k - 1] + (1 - lam) * s[..., n - k]
    return est, low, high


def mean_t(x: np.ndarray, confidence: float = 0.95) -> Result:
    """Mean of log ratios with the Student t interval (n - 1 degrees of freedom)."""
    n = x.shape[-1]
    est = x.mean(axis=-1)
    t = paired_stats.scipy_stats().t.ppf(0.5 + confidence / 2, n - 1)
    half = t * x.std(axis=-1, ddof=1) / math.sqrt(n)
    return est, est - half, est + half


def trimmed_t(x: np.ndarray, confidence: float = 0.95, proportion: float = 0.2) -> Result:
    """20 % trimmed mean with the Tukey–McLaughlin interval (winsorized SD, t with
    ``n - 2g - 1`` degrees of freedom, ``g = floor(0.2 n)``)."""
    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    g = _trim_count(n, proportion)
    est = s[..., g : n - g].mean(axis=-1)
    w = np.clip(s, s[..., g : g + 1], s[..., n - g - 1 : n - g])
    se = w.std(axis=-1, ddof=1) / ((1 - 2 * g / n) * math.sqrt(n))
    half = paired_stats.scipy_stats().t.ppf(0.5 + confidence / 2, n - 2 * g - 1) * se
    return est, est - half, est + half


@lru_cache(maxsize=256)
def signed_rank_cdf(n: int) -> np.ndarray:
    """Exact null distribution of the Wilcoxon signed-rank statistic: ``P(T <= t)`` for
    ``t = 0 .. n(n+1)/2`` (counts of subsets of ``{1..n}`` by their sum)."""
    total = n * (n + 1) // 2
    counts = np.zeros(total + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return np.cumsum(counts) / 2.0**n


def signed_rank_rank(n: int, confidence: float = 0.95) -> int:
    """Largest ``k`` such that ``[W_(k), W_(M+1-k)]`` (sorted Walsh averages,
    ``M = n(n+1)/2``) covers the centre of any continuous symmetric law with probability
    ``1 - 2 P(T <= k-1) >= confidence``; 0 when even ``k = 1`` does not (``n <= 5``)."""
    cdf = signed_rank_cdf(n)
    alpha = 1.0 - confidence
    ok = np.nonzero(2.0 * cdf <= alpha + 1e-12)[0]  # k - 1 candidates
    return int(ok[-1]) + 1 if len(ok) else 0


def walsh_averages(x: np.ndarray) -> np.ndarray:
    """All ``(x_i + x_j) / 2`` with ``i <= j`` along the last axis, sorted."""
    n = x.shape[-1]
    i, j = np.triu_indices(n)
    return np.sort((x[..., i] + x[..., j]) / 2.0, axis=-1)


def hodges_lehmann(x: np.ndarray, confidence: float = 0.95) -> Result:
    """Hodges–Lehmann estimate (median of the Walsh averages) with the exact
    Wilcoxon signed-rank interval ``[W_(k), W_(M+1-k)]``: distribution-free for any
    continuous law symmetric about its centre (an A/A log ratio is, by exchangeability)."""
    w = walsh_averages(x)
    n = x.shape[-1]
    m = w.shape[-1]
    k = signed_rank_rank(n, confidence)
    est = np.median(w, axis=-1)
    if k == 0:
        nan = np.full(est.shape, np.nan)
        return est, nan, nan.copy()
    return est, w[..., k - 1], w[..., m - k]


def _resample(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    n = x.shape[-1]
    idx = rng.integers(0, n, (x.shape[0], resamples, n))
    return np.take_along_axis(x[:, None, :], idx, axis=-1)


def bootstrap_family(
    x: np.ndarray,
    confidence: float,
    resamples: int,
    rng: np.random.Generator,
    which: Iterable[str] = ("median_percentile", "mean_boot_t", "mean_bca"),
) -> dict[str, Result]:
    """The bootstrap methods on the same resamples (chunked to bound memory).

    Returns
    -------
    dict
        The methods of ``which``: ``median_percentile`` (the former report interval:
        percentile bootstrap of the median), ``mean_boot_t`` (studentized bootstrap of
        the mean), ``mean_bca`` (BCa of the mean, jackknife acceleration).
    """
    which = set(which)
    alpha = 1.0 - confidence
    n = x.shape[-1]
    chunk = max(1, int(4_000_000 // (resamples * n)))
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("mp_lo", "mp_hi", "bt_lo", "bt_hi", "bca_lo", "bca_hi")
    }
    for start in range(0, x.shape[0], chunk):
        xc = x[start : start + chunk]
        b = _resample(xc, resamples, rng)
        if "median_percentile" in which:
            med = np.median(b, axis=-1)
            out["mp_lo"].append(np.quantile(med, alpha / 2, axis=-1))
            out["mp_hi"].append(np.quantile(med, 1 - alpha / 2, axis=-1))
        if not which & {"mean_boot_t", "mean_bca"}:
            continue
        mean = xc.mean(axis=-1)
        se = xc.std(axis=-1, ddof=1) / math.sqrt(n)
        bmean = b.mean(axis=-1)
        bse = b.std(axis=-1, ddof=1) / math.sqrt(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            tstar = (bmean - mean[:, None]) / bse
        tstar = np.where(np.isfinite(tstar), tstar, np.nan)
        q_lo = np.nanquantile(tstar, alpha / 2, axis=-1)
        q_hi = np.nanquantile(tstar, 1 - alpha / 2, axis=-1)
        out["bt_lo"].append(mean - q_hi * se)
        out["bt_hi"].append(mean - q_lo * se)
        # BCa of the mean
        share = (bmean < mean[:, None]).mean(axis=-1) + 0.5 * (bmean == mean[:, None]).mean(axis=-1)
        z0 = paired_stats.scipy_stats().norm.ppf(
            np.clip(share, 1.0 / resamples, 1 - 1.0 / resamples)
        )
        jack = (xc.sum(axis=-1, keepdims=True) - xc) / (n - 1)
        d = jack.mean(axis=-1, keepdims=True) - jack
        with np.errstate(divide="ignore", invalid="ignore"):
            acc = (d**3).sum(axis=-1) / (6.0 * ((d**2).sum(axis=-1)) ** 1.5)
        acc = np.nan_to_num(acc)
        za = paired_stats.scipy_stats().norm.ppf([alpha / 2, 1 - alpha / 2])
        levels = [
            paired_stats.scipy_stats().norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z))) for z in za
        ]
        sb = np.sort(bmean, axis=-1)
        for key, lev in zip(("bca_lo", "bca_hi"), levels, strict=True):
            pos = np.clip(lev * (resamples - 1), 0, resamples - 1)
            lo_i = np.floor(pos).astype(int)
            hi_i = np.minimum(lo_i + 1, resamples - 1)
            frac = pos - lo_i
            rows = np.arange(len(xc))
            out[key].append(sb[rows, lo_i] * (1 - frac) + sb[rows, hi_i] * frac)
    cat = {k: np.concatenate(v) for k, v in out.items() if v}
    med_est = np.median(x, axis=-1)
    mean_est = x.mean(axis=-1)
    res: dict[str, Result] = {}
    if "median_percentile" in which:
        res["median_percentile"] = (med_est, cat["mp_lo"], cat["mp_hi"])
    if "mean_boot_t" in which:
        res["mean_boot_t"] = (mean_est, cat["bt_lo"], cat["bt_hi"])
    if "mean_bca" in which:
        res["mean_bca"] = (mean_est, cat["bca_lo"], cat["bca_hi"])
    return res


#: Closed-form methods: name -> function(x, confidence) -> Result.
CLOSED_FORM: dict[str, Callable[..., Result]] = {
    "median_binomial": median_binomial,
    "median_hs": median_hs,
    "mean_t": mean_t,
    "trimmed_t": trimmed_t,
    "hodges_lehmann": hodges_lehmann,
}

#: Bootstrap methods (computed together by :func:`bootstrap_family`).
BOOTSTRAP: tuple[str, ...] = ("median_percentile", "mean_boot_t", "mean_bca")

#: Every method: name -> (estimand of
#: :func:`methods.simulation.population_values`, one-line description).
METHODS: dict[str, tuple[str, str]] = {
    "median_percentile": ("median", "median, percentile bootstrap (the former report CI)"),
    "median_binomial": ("median", "median, distribution-free order-statistic interval"),
    "median_hs": ("median", "median, Hettmansperger–Sheather interpolated order statistics"),
    "mean_t": ("mean", "mean of log ratios, t interval"),
    "mean_boot_t": ("mean", "mean of log ratios, bootstrap-t"),
    "mean_bca": ("mean", "mean of log ratios, BCa bootstrap"),
    "trimmed_t": ("trimmed", "20 % trimmed mean, Tukey–McLaughlin t"),
    "hodges_lehmann": ("pseudomedian", "Hodges–Lehmann, exact Wilcoxon signed-rank interval"),
}


def apply_methods(
    x: np.ndarray,
    methods: Iterable[str] = tuple(METHODS),
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> dict[str, Result]:
    """Apply ``methods`` to every row of ``x`` (cells x processes, log ratios)."""
    methods = list(methods)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown} (known: {', '.join(METHODS)})")
    x = np.atleast_2d(np.asarray(x, dtype=float))
    out: dict[str, Result] = {}
    wanted = [m for m in methods if m in BOOTSTRAP]
    if wanted:
        rng = rng or np.random.default_rng(0)
        out.update(bootstrap_family(x, confidence, resamples, rng, wanted))
    for m in methods:
        if m in CLOSED_FORM:
            out[m] = CLOSED_FORM[m](x, confidence)
    return {m: out[m] for m in methods}


def reduction_half_width(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Half-width of the reduction interval ``[1 - exp(high), 1 - exp(low)]``."""
    return (np.exp(high) - np.exp(low)) / 2.0
