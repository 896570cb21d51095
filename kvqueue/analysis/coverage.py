"""Coverage of candidate estimators and intervals (docs/design.md §5): pure functions.

Two measurements decide which interval the report uses for a reduction:

*simulation*
    :func:`simulate_log_ratios` draws cells the way the bench produces them: per process,
    the paired log ratio is the true effect plus a *process effect* (the layout luck of
    one process, drawn from a named law: :data:`LAWS`) plus the within-process noise of
    the two per-process medians (``samples`` lognormal samples per variant, each timed
    at a freshly shuffled position among ``variants`` with an order effect). The
    process level shared by both variants cancels in the ratio and is left out.
    :func:`coverage_table` applies every method of :data:`METHODS` to the same
    simulated cells and counts how often the interval covers the method's own
    population value (:func:`population_values`; for a symmetric law every
    estimand is the true effect).
*real A/A cells*
    :func:`aa_intervals` computes, for every A/A comparison of a ``ratios`` table
    (rows of kind ``"aa"``: the same source measured twice), whether the interval
    contains a reduction of 0; :func:`aa_coverage` counts them by any columns.

:func:`choose_method` states and applies the selection rule; ``python -m
kvqueue.analysis.coverage`` prints every table (the only I/O here). ``median_hs`` is the
report's interval (:func:`kvqueue.analysis.stats.order_statistic_interval`).

Every method works on log ratios and returns, per cell, the estimate and the bounds of
the *log ratio* (``reduction = 1 - exp(log ratio)``, so a log-ratio interval
``[lo, hi]`` is the reduction interval ``[1 - exp(hi), 1 - exp(lo)]``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
from scipy import stats as sps

from kvqueue.analysis import stats

#: Process-effect laws of the simulation, each scaled to standard deviation 1.
LAWS: tuple[str, ...] = ("gaussian", "t3", "contaminated", "skewed", "outliers")

#: One line per law (for tables and the report).
LAW_DESCRIPTIONS: dict[str, str] = {
    "gaussian": "normal",
    "t3": "Student t with 3 degrees of freedom",
    "contaminated": "contaminated normal: 10 % of processes with 4x the SD",
    "skewed": "lognormal (sigma 0.5, skewness 1.75), centred",
    "outliers": "one-sided outliers: 10 % of processes shifted by +4 to +8 SD",
}

#: Numbers of processes of the coverage table.
DEFAULT_NS: tuple[int, ...] = (6, 9, 11, 15, 21, 31)


def draw_process_effects(law: str, rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    """Draw process effects with mean 0 and standard deviation 1 from ``law``.

    Parameters
    ----------
    law
        One of :data:`LAWS`.
    rng
        Random generator.
    size
        Output shape.

    Returns
    -------
    numpy.ndarray
        Standardized draws (the skewed laws are centred on their mean, not their median).
    """
    if law == "gaussian":
        return rng.standard_normal(size)
    if law == "t3":
        return rng.standard_t(3, size) / math.sqrt(3.0)
    if law == "contaminated":
        scale = np.where(rng.random(size) < 0.1, 4.0, 1.0)
        return rng.standard_normal(size) * scale / math.sqrt(0.9 + 0.1 * 16.0)
    if law == "skewed":
        sigma = 0.5
        mean = math.exp(sigma**2 / 2)
        sd = math.sqrt((math.exp(sigma**2) - 1) * math.exp(sigma**2))
        return (rng.lognormal(0.0, sigma, size) - mean) / sd
    if law == "outliers":
        # A slow layout in 10 % of the processes: +4 to +8 SD (uniform) on top of N(0, 1).
        shift = np.where(rng.random(size) < 0.1, rng.uniform(4.0, 8.0, size), 0.0)
        x = rng.standard_normal(size) + shift
        mean = 0.1 * 6.0
        var = 1.0 + 0.1 * (36.0 + 16.0 / 12.0) - mean**2
        return (x - mean) / math.sqrt(var)
    raise ValueError(f"unknown law {law!r} (one of {', '.join(LAWS)})")


@dataclass(frozen=True)
class CellModel:
    """How a simulated cell is generated (defaults: the committed runs).

    Attributes
    ----------
    effect
        True log ratio candidate/baseline (``log(0.8)``: a 20 % reduction).
    process_sd
        SD of the process effect on the log ratio (1.5 %: with the within-process noise
        the per-process log ratio has an SD of about 2 %, the median of the committed
        headline cells).
    sample_cv
        SD of the log of one sample (2 %: the within-process CV).
    samples
        Samples per variant and process (their median is the per-process value).
    variants
        Variants timed per round (positions 0..variants-1, shuffled every round).
    order_effect
        Fractional slowdown per position step (0.005: the last of 5 positions is 2 %
        slower than the first, above the largest order effect measured so far).
    """

    effect: float = math.log(0.8)
    process_sd: float = 0.015
    sample_cv: float = 0.02
    samples: int = 9
    variants: int = 5
    order_effect: float = 0.005


def simulate_log_ratios(
    law: str, n: int, reps: int, rng: np.random.Generator, model: CellModel = CellModel()
) -> np.ndarray:
    """Simulate ``reps`` cells of ``n`` processes: per-process paired log ratios.

    Per process: ``effect + process_sd * law draw + log(median_s c_s) - log(median_s b_s)``
    with ``b_s, c_s = exp(N(0, sample_cv)) * (1 + order_effect * position)``, the two
    positions being distinct draws among ``variants`` in every round.

    Returns
    -------
    numpy.ndarray
        Shape ``(reps, n)``.
    """
    shape = (reps, n, model.samples)
    first = rng.integers(0, model.variants, shape)
    second = rng.integers(0, model.variants - 1, shape)
    second = second + (second >= first)
    noise = rng.normal(0.0, model.sample_cv, (2, *shape))
    base = np.exp(noise[0]) * (1.0 + model.order_effect * first)
    cand = np.exp(noise[1]) * (1.0 + model.order_effect * second)
    within = np.log(np.median(cand, axis=-1)) - np.log(np.median(base, axis=-1))
    process = model.process_sd * draw_process_effects(law, rng, (reps, n))
    return model.effect + process + within


# ---------------------------------------------------------------------------------------
# population values (the estimand of each method)


def _trim_count(n: int, proportion: float = 0.2) -> int:
    return math.floor(proportion * n)


@lru_cache(maxsize=64)
def population_values(
    law: str, model: CellModel = CellModel(), draws: int = 2_000_000, seed: int = 1
) -> dict[str, float]:
    """Population mean, median, pseudo-median and 20 % trimmed mean of the log ratio.

    For a symmetric law (``gaussian``, ``t3``, ``contaminated``) all four are
    ``model.effect`` exactly: the within-process noise is symmetric because both
    variants of a pair are timed the same way. For a skewed law they are estimated
    from ``draws`` per-process values (Monte Carlo error below 0.1 % of an SD).

    Returns
    -------
    dict
        Keys ``mean``, ``median``, ``pseudomedian`` (median of the average of two
        independent draws: the Hodges–Lehmann estimand), ``trimmed``.
    """
    if law in ("gaussian", "t3", "contaminated"):
        return dict.fromkeys(("mean", "median", "pseudomedian", "trimmed"), model.effect)
    rng = np.random.default_rng(seed)
    chunks = max(1, draws // 200_000)
    x = np.concatenate(
        [simulate_log_ratios(law, 1000, 200, rng, model).ravel() for _ in range(chunks)]
    )
    lo, hi = np.quantile(x, [0.2, 0.8])
    half = len(x) // 2
    return {
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "pseudomedian": float(np.median((x[:half] + x[half : 2 * half]) / 2.0)),
        "trimmed": float(x[(x >= lo) & (x <= hi)].mean()),
    }


# ---------------------------------------------------------------------------------------
# estimators and intervals (vectorized over rows: x has shape (cells, n))

#: Result of a method: estimate, low, high (log ratios), each of shape (cells,).
Result = tuple[np.ndarray, np.ndarray, np.ndarray]


def binomial_order_interval_ranks(n: int, confidence: float = 0.95) -> int:
    """Largest ``k`` whose interval ``[x_(k), x_(n+1-k)]`` covers the median with
    probability ``>= confidence`` for any continuous law (0 when even ``k = 1`` does
    not: ``n <= 5`` at 95 %)."""
    alpha = 1.0 - confidence
    k = 0
    while k + 1 <= n // 2 and 2.0 * sps.binom.cdf(k, n, 0.5) <= alpha + 1e-12:
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
    :func:`kvqueue.analysis.stats.order_statistic_ranks`)."""
    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    k, lam = stats.order_statistic_ranks(n, confidence)
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
    half = sps.t.ppf(0.5 + confidence / 2, n - 1) * x.std(axis=-1, ddof=1) / math.sqrt(n)
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
    half = sps.t.ppf(0.5 + confidence / 2, n - 2 * g - 1) * se
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


def signed_rank_coverage(n: int, confidence: float = 0.95) -> float:
    """Exact coverage of the signed-rank interval of :func:`signed_rank_rank` under any
    continuous symmetric law (NaN when there is no interval)."""
    k = signed_rank_rank(n, confidence)
    return float(1.0 - 2.0 * signed_rank_cdf(n)[k - 1]) if k else math.nan


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
        z0 = sps.norm.ppf(np.clip(share, 1.0 / resamples, 1 - 1.0 / resamples))
        jack = (xc.sum(axis=-1, keepdims=True) - xc) / (n - 1)
        d = jack.mean(axis=-1, keepdims=True) - jack
        with np.errstate(divide="ignore", invalid="ignore"):
            acc = (d**3).sum(axis=-1) / (6.0 * ((d**2).sum(axis=-1)) ** 1.5)
        acc = np.nan_to_num(acc)
        za = sps.norm.ppf([alpha / 2, 1 - alpha / 2])
        levels = [sps.norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z))) for z in za]
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

#: Every method: name -> (estimand of :func:`population_values`, one-line description).
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


# ---------------------------------------------------------------------------------------
# coverage in simulation


def coverage_table(
    *,
    laws: Sequence[str] = LAWS,
    ns: Sequence[int] = DEFAULT_NS,
    methods: Sequence[str] = tuple(METHODS),
    reps: int = 4000,
    confidence: float = 0.95,
    resamples: int = 2000,
    model: CellModel = CellModel(),
    seed: int = 20261129,
    scenario: str = "default",
) -> pd.DataFrame:
    """Coverage and precision of every method on simulated cells.

    All methods see the same ``reps`` cells per (law, n) (common random numbers), so
    their differences are not simulation noise.

    Parameters
    ----------
    laws, ns, methods
        What to simulate and measure (:data:`LAWS`, :data:`DEFAULT_NS`, :data:`METHODS`).
    reps
        Simulated cells per (law, n); the standard error of a coverage near 95 % is
        ``sqrt(0.95 * 0.05 / reps)`` (4,000: 0.34 points).
    confidence, resamples
        Nominal level; resamples of the bootstrap methods.
    model
        How a cell is generated.
    seed
        Root seed; each (law, n) has its own stream.
    scenario
        Label written in the ``scenario`` column (to stack tables of several models).

    Returns
    -------
    pandas.DataFrame
        One row per (method, law, n): ``scenario``, ``process_sd``, ``reps``,
        ``coverage`` (share of intervals that contain the method's population value),
        ``se`` (binomial standard error of
        ``coverage``), ``miss_low``/``miss_high`` (share of intervals entirely below /
        above it), ``half_width`` and ``median_half_width`` (of the reduction interval,
        as a fraction), ``bias`` (mean estimate minus the population value, log units).
    """
    rows = []
    for li, law in enumerate(laws):
        truth = population_values(law, model)
        for n in ns:
            rng = np.random.default_rng([seed, li, n])
            x = simulate_log_ratios(law, n, reps, rng, model)
            results = apply_methods(x, methods, confidence=confidence, resamples=resamples, rng=rng)
            for m, (est, low, high) in results.items():
                target = truth[METHODS[m][0]]
                hw = reduction_half_width(low, high)
                cov = float(np.mean((low <= target) & (target <= high)))
                rows.append(
                    {
                        "scenario": scenario,
                        "process_sd": model.process_sd,
                        "method": m,
                        "law": law,
                        "n": n,
                        "reps": reps,
                        "coverage": cov,
                        "se": math.sqrt(cov * (1 - cov) / reps),
                        "miss_low": float(np.mean(high < target)),
                        "miss_high": float(np.mean(low > target)),
                        "half_width": float(np.nanmean(hw)),
                        "median_half_width": float(np.nanmedian(hw)),
                        "bias": float(np.mean(est) - target),
                    }
                )
    return pd.DataFrame(rows)


def choose_method(
    table: pd.DataFrame,
    real: pd.DataFrame | None = None,
    *,
    band: tuple[float, float] = (0.94, 0.97),
    min_n: int = 9,
    allowance: float = 0.0,
    width_tolerance: float = 1.10,
) -> pd.DataFrame:
    """Apply the selection rule to one or more stacked :func:`coverage_table` results.

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
    min_n: int = stats.MIN_PROCESSES,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 20261129,
) -> pd.DataFrame:
    """One interval per A/A comparison of a ratios table, and whether it contains 0.

    Parameters
    ----------
    ratios
        Rows of ``data/processed/ratios.csv`` (or :func:`kvqueue.analysis.stats.paired_ratios`
        with a ``kind`` column): only rows of kind ``"aa"`` are used.
    interval
        A method name of :data:`METHODS` (applied to the log ratios), or a function
        ``ratios -> (reduction, low, high)`` such as :func:`interval_function` (the
        report's own path, :func:`kvqueue.analysis.stats.reduction_interval`).
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
    """The report's own interval (:func:`kvqueue.analysis.stats.reduction_interval`) as an
    ``interval`` argument of :func:`aa_intervals`; ``settings`` are its keyword
    arguments (e.g. ``ReportSettings().bootstrap()``)."""
    kw = dict(settings or {})

    def _f(r: np.ndarray) -> tuple[float, float, float]:
        est = stats.reduction_interval(r, **kw)  # type: ignore[arg-type]
        return est.estimate, est.low, est.high

    return _f


# ---------------------------------------------------------------------------------------
# command line (the only I/O of this module)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvqueue.analysis.coverage``: print the simulation and real A/A tables."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kvqueue.analysis.coverage", description=__doc__)
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
        from pathlib import Path

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        sims.to_csv(out / "coverage_sim.csv", index=False)
        real.to_csv(out / "coverage_aa.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
