"""Statistics over tidy sample tables (docs/design.md §5): pure functions, no I/O.

Vocabulary
----------
*cell*
    One comparison context: the columns passed as ``by`` (in the report: host,
    interpreter, run, phase, case and pool).
*per-process median*
    ``m(p, v)``: the median ns/cycle of the samples of variant ``v`` in worker process
    ``p`` of a cell.
*ratio*
    ``r(p) = m(p, candidate) / m(p, baseline)``, paired inside one process, so the
    process-to-process drift (CPU frequency, cache state, neighbours) cancels.
*reduction*
    ``1 - median_p r(p)``: the fraction of time the candidate saves; positive means
    the candidate is faster.

The interval of a reduction is :data:`CI_METHOD` (``"hettmansperger-sheather"``): the
order-statistic interval for the median of the ``n`` per-process ratios, interpolated
between adjacent order statistics (Hettmansperger & Sheather 1986) so that its coverage
is close to the nominal level instead of the conservative steps of the exact binomial
interval (n = 11: 98.8 %); the interpolation makes it nearly, not exactly,
distribution-free. It uses no resampling and no seed. The choice was
measured (:mod:`methods.coverage`): with a nominal 95 % it covers 94–96 % in simulation
at every n from 6 to 31 under Gaussian, Student-t(3), contaminated, skewed and
one-sided-outlier process effects, where the former default, the percentile
bootstrap of the median, covers 92–94 % at n >= 11 (its intervals are too short).

A :func:`scipy.stats.bootstrap` method name (``"percentile"``: the former interval,
``"basic"``, ``"BCa"``) as ``method`` bootstraps the median over *processes* (the
independent unit), never samples, instead. The order-effect and floor-gap
intervals always bootstrap over processes (percentile method unless a bootstrap method
is named: :func:`bootstrap_method`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

import numpy as np
import pandas as pd


def scipy_stats() -> ModuleType:
    """``scipy.stats``, imported on first use: importing it took 1.3 s of every process
    that imports this module, the report notebook's kernel included, which reads the
    processed tables and never computes an interval."""
    import scipy.stats

    return scipy.stats


#: Interval of a reduction: the interpolated order-statistic interval of the median.
ORDER_STATISTIC = "hettmansperger-sheather"
#: :func:`scipy.stats.bootstrap` methods accepted as ``method`` (a bootstrap of the median).
BOOTSTRAP_METHODS: tuple[str, ...] = ("percentile", "basic", "BCa")
#: Every accepted ``method``.
METHODS: tuple[str, ...] = (ORDER_STATISTIC, *BOOTSTRAP_METHODS)
#: Default interval of a reduction (``ReportSettings.method`` should name it).
CI_METHOD = ORDER_STATISTIC
#: Bootstrap method of the order-effect and floor-gap intervals when ``method`` names no
#: bootstrap method.
BOOTSTRAP_METHOD = "percentile"
#: Defaults of the keyword arguments: those of :class:`kvqueue.params.report_params.ReportSettings`
#: (the report passes its settings; ``tests/test_params.py`` checks that they agree).
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 10_000
DEFAULT_BOOTSTRAP_SEED = 20261129
DEFAULT_DELTA = 0.01
#: Fewest processes for which a CI is reported. An interval for a median from n values
#: (order statistics or a percentile bootstrap) lies within [min, max], and the true
#: median falls outside that range with probability 2 / 2**n: below 6 processes
#: (5: 6.25 %) no such interval can reach 95 % coverage, so the CI is left undefined and
#: the verdict is "inconclusive".
MIN_PROCESSES = 6

#: Verdict labels (``no change`` carries the band, see :func:`verdict`).
FASTER = "faster"
SLOWER = "slower"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval.

    Attributes
    ----------
    estimate
        The statistic on the observed data.
    low, high
        Confidence bounds (NaN when fewer than :data:`MIN_PROCESSES` processes exist).
    n
        Number of processes the estimate is based on.
    method, confidence, resamples
        How the interval was obtained (named in the report); ``resamples`` is 0 for
        the order-statistic interval, which does not resample.
    """

    estimate: float
    low: float
    high: float
    n: int
    method: str = CI_METHOD
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_RESAMPLES


# ---------------------------------------------------------------------------------------
# per-process aggregation


def process_medians(samples: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Aggregate samples to one row per (cell, variant, process).

    Parameters
    ----------
    samples
        Tidy samples with columns ``by``, ``variant``, ``process`` and ``ns_per_cycle``.
    by
        Columns identifying a cell.

    Returns
    -------
    pandas.DataFrame
        Columns ``by + [variant, process, n_samples, median_ns, mean_ns, cv]``, where
        ``cv`` is the sample coefficient of variation (std with ddof=1 over the mean):
        the within-process noise.
    """
    keys = [*by, "variant", "process"]
    grouped = samples.groupby(keys, sort=True, observed=True)["ns_per_cycle"]
    out = grouped.agg(n_samples="count", median_ns="median", mean_ns="mean", std_ns="std")
    out["cv"] = out["std_ns"] / out["mean_ns"]
    return out.drop(columns="std_ns").reset_index()


def paired_ratios(
    medians: pd.DataFrame, candidate: str, baseline: str, by: Sequence[str]
) -> pd.DataFrame:
    """Pair candidate and baseline per-process medians inside each process.

    Parameters
    ----------
    medians
        Output of :func:`process_medians`.
    candidate, baseline
        Variant labels.
    by
        Cell columns.

    Returns
    -------
    pandas.DataFrame
        Columns ``by + [candidate, baseline, process, baseline_ns, candidate_ns, ratio]``;
        only processes that measured both variants (inner join).
    """
    keys = [*by, "process"]
    cand = medians.loc[medians["variant"] == candidate, [*keys, "median_ns"]]
    base = medians.loc[medians["variant"] == baseline, [*keys, "median_ns"]]
    pairs = base.merge(cand, on=keys, suffixes=("_b", "_c"), how="inner")
    pairs = pairs.rename(columns={"median_ns_b": "baseline_ns", "median_ns_c": "candidate_ns"})
    pairs.insert(len(by), "candidate", candidate)
    pairs.insert(len(by) + 1, "baseline", baseline)
    pairs["ratio"] = pairs["candidate_ns"] / pairs["baseline_ns"]
    return pairs.sort_values(keys, kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------
# order-statistic interval of a median


@lru_cache(maxsize=1024)
def order_statistic_ranks(n: int, confidence: float = DEFAULT_CONFIDENCE) -> tuple[int, float]:
    """Rank ``k`` and weight ``lam`` of the interpolated order-statistic interval.

    With ``x_(1) <= ... <= x_(n)`` and ``B ~ Binomial(n, 1/2)``, the interval
    ``[x_(k), x_(n+1-k)]`` contains the median of any continuous law with probability
    ``g(k) = P(k <= B <= n - k)``. ``k`` is the largest rank with ``g(k) >= confidence``
    and the Hettmansperger–Sheather (1986) weight

    ``lam = (n - k) I / (k + (n - 2k) I)``, ``I = (g(k) - confidence) / (g(k) - g(k+1))``

    moves each bound from ``x_(k)`` towards ``x_(k+1)`` (and from ``x_(n+1-k)`` towards
    ``x_(n-k)``) so that the coverage is close to ``confidence`` rather than ``g(k)``.

    Parameters
    ----------
    n
        Number of values.
    confidence
        Nominal coverage.

    Returns
    -------
    tuple
        ``(k, lam)``; ``(0, 0.0)`` when even ``[x_(1), x_(n)]`` (coverage
        ``1 - 2 / 2**n``) falls short of ``confidence``.
    """
    alpha = 1.0 - confidence
    k = 0
    while k + 1 <= n // 2 and 2.0 * scipy_stats().binom.cdf(k, n, 0.5) <= alpha + 1e-12:
        k += 1
    if k == 0:
        return 0, 0.0
    g_k = 1.0 - 2.0 * scipy_stats().binom.cdf(k - 1, n, 0.5)
    g_next = 1.0 - 2.0 * scipy_stats().binom.cdf(k, n, 0.5)
    if k + 1 > n - k or g_k == g_next:
        return k, 0.0
    share = (g_k - confidence) / (g_k - g_next)
    return k, float((n - k) * share / (k + (n - 2 * k) * share))


def order_statistic_interval(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    min_n: int = MIN_PROCESSES,
) -> Interval:
    """Median of ``values`` with its interpolated order-statistic interval.

    See :func:`order_statistic_ranks`. The interval needs no resampling and no seed;
    it is equivariant (a monotone transform of the values moves the bounds with them,
    up to the interpolation), and identical values give a point interval.

    Parameters
    ----------
    values
        One value per process.
    confidence
        Nominal coverage.
    min_n
        Fewest values for an interval (see :data:`MIN_PROCESSES`).

    Returns
    -------
    Interval
        ``method`` :data:`ORDER_STATISTIC`, ``resamples`` 0; NaN bounds below ``min_n``
        values or when no interval reaches ``confidence``.
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    estimate = float(np.median(x)) if n else math.nan
    info = {"method": ORDER_STATISTIC, "confidence": confidence, "resamples": 0}
    k, lam = order_statistic_ranks(n, confidence) if n >= max(2, min_n) else (0, 0.0)
    if k == 0:
        return Interval(estimate, math.nan, math.nan, n, **info)
    low = (1.0 - lam) * x[k - 1] + lam * x[k]
    high = lam * x[n - k - 1] + (1.0 - lam) * x[n - k]
    return Interval(estimate, float(low), float(high), n, **info)


# ---------------------------------------------------------------------------------------
# bootstrap


def bootstrap_method(method: str) -> str:
    """The :func:`scipy.stats.bootstrap` method for a ``method`` setting.

    A bootstrap method name is returned as is; any other accepted method (the
    order-statistic interval of the reductions) maps to :data:`BOOTSTRAP_METHOD`, so the
    order-effect and floor-gap intervals keep bootstrapping over processes.

    Raises
    ------
    ValueError
        For a name that is not in :data:`METHODS`.
    """
    if method in BOOTSTRAP_METHODS:
        return method
    if method in METHODS:
        return BOOTSTRAP_METHOD
    raise ValueError(f"unknown CI method {method!r} (one of {', '.join(METHODS)})")


def bootstrap_interval(
    data: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray] | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    method: str = BOOTSTRAP_METHOD,
    min_n: int = MIN_PROCESSES,
    of_medians: Callable[..., np.ndarray] | None = None,
) -> Interval:
    """Bootstrap a statistic over processes.

    Parameters
    ----------
    data
        One or more 1-D arrays of equal length (one value per process); several arrays
        are resampled *paired* (the same processes in every array).
    statistic
        Vectorized statistic ``f(*arrays, axis) -> array`` (None: ``of_medians`` of the
        arrays' medians).
    confidence, resamples, seed, method
        Passed to :func:`scipy.stats.bootstrap` (``method`` through
        :func:`bootstrap_method`). A fresh generator is seeded for every call, so one
        cell's interval does not depend on which other cells exist.
    min_n
        Fewest processes for an interval (see :data:`MIN_PROCESSES`).
    of_medians
        The statistic as a function of each array's median (``f(*medians)``), when it
        is one: the percentile bootstrap then takes each resample's median from
        :func:`_resample_medians`, the same bits in half the time. Give one of
        ``statistic`` and ``of_medians``.

    Returns
    -------
    Interval
        NaN bounds when fewer than ``min_n`` processes exist; ``low == high == estimate``
        when every process gave the same value (the bootstrap distribution is a point
        and scipy would warn).
    """
    method = bootstrap_method(method)
    if statistic is None:
        if of_medians is None:
            raise TypeError("bootstrap_interval needs statistic or of_medians")
        statistic = _of_array_medians(of_medians)
    arrays = [np.asarray(a, dtype=float) for a in data]
    n = len(arrays[0])
    estimate = float(statistic(*arrays, axis=-1)) if n else math.nan
    info = {"method": method, "confidence": confidence, "resamples": resamples}
    if n < max(2, min_n):
        return Interval(estimate, math.nan, math.nan, n, **info)
    if all(np.ptp(a) == 0 for a in arrays):
        return Interval(estimate, estimate, estimate, n, **info)
    if method == "percentile":
        # scipy.stats.bootstrap's percentile interval, computed directly: the same draws
        # (one rng.integers(0, n, (resamples, n)) from the fresh seeded generator, the
        # same for paired and single samples), the same quantile call. Its wrapper
        # (input checks, the paired-index indirection) was 5.7 of the 17.4 s of five
        # runs' analysis, and every cell of a run draws the same table (one seed, one n).
        if of_medians is not None and all(_countable(a) for a in arrays):
            theta = of_medians(*(_resample_medians(a, resamples, seed) for a in arrays))
        else:
            index = _resample_index(n, resamples, seed)
            theta = statistic(*(a[index] for a in arrays), axis=-1)
        alpha = np.asarray((1 - confidence) / 2, dtype=theta.dtype)
        low, high = scipy_stats().quantile(theta, np.stack((alpha, 1 - alpha)), axis=-1)
        return Interval(estimate, float(low), float(high), n, **info)
    res = scipy_stats().bootstrap(
        tuple(arrays),
        statistic,
        n_resamples=resamples,
        vectorized=True,
        paired=len(arrays) > 1,
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(seed),
    )
    low, high = res.confidence_interval
    return Interval(estimate, float(low), float(high), n, **info)


@lru_cache(maxsize=32)
def _resample_index(n: int, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap's resampling table: row ``b`` holds the processes of resample ``b``
    (read-only: it is shared by every cell with ``n`` processes)."""
    index = np.random.default_rng(seed).integers(0, n, (resamples, n))
    index.setflags(write=False)
    return index


@lru_cache(maxsize=32)
def _resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """How often each process is drawn in each resample of :func:`_resample_index`
    (read-only, shared like the index)."""
    index = _resample_index(n, resamples, seed)
    rows = np.repeat(np.arange(resamples) * n, n)
    counts = np.bincount(rows + index.ravel(), minlength=resamples * n).reshape(resamples, n)
    counts.setflags(write=False)
    return counts


def _countable(a: np.ndarray) -> bool:
    """Whether :func:`_resample_medians` gives numpy's bits for ``a``: no NaN, and no
    -0.0 (it equals 0.0, and which of the two numpy's partition picks is its own)."""
    return not (np.isnan(a).any() or (np.signbit(a) & (a == 0)).any())


def _resample_medians(a: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``np.median(a[_resample_index(len(a), resamples, seed)], axis=-1)`` (``a``
    :func:`_countable`) from the resamples' counts: a resample's median is the order
    statistic of ``a`` where the cumulative count of its ranks passes half (the mean of
    two for an even count). Bit-identical (``tests/test_stats.py``); a partition per
    resample was 3.7 of the 14.5 s of the committed runs' analysis, profiled, and this
    takes about half."""
    n = len(a)
    order = np.argsort(a, kind="stable")
    ranked = a[order]
    cum = np.cumsum(_resample_counts(n, resamples, seed)[:, order], axis=1)
    high = ranked[(cum > n // 2).argmax(axis=1)]
    if n % 2:
        return high
    low = ranked[(cum > n // 2 - 1).argmax(axis=1)]
    return (low + high) / 2


def _of_array_medians(of_medians: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``f(*medians)`` as the vectorized statistic ``g(*arrays, axis)`` of the arrays."""

    def statistic(*arrays: np.ndarray, axis: int = -1) -> np.ndarray:
        return of_medians(*(np.median(a, axis=axis) for a in arrays))

    return statistic


def reduction_interval(
    ratios: Sequence[float] | np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    method: str = CI_METHOD,
) -> Interval:
    """Headline estimate: ``1 - median_p r(p)`` with its CI over processes.

    Parameters
    ----------
    ratios
        Per-process paired ratios candidate/baseline.
    confidence
        Nominal coverage.
    resamples, seed
        Only used by a bootstrap ``method``.
    method
        :data:`ORDER_STATISTIC` (default): the interpolated order-statistic interval of
        the median ratio (:func:`order_statistic_interval`), mapped through
        ``1 - r``; or a :data:`BOOTSTRAP_METHODS` name: that bootstrap of the median
        over processes (:func:`bootstrap_interval`).

    Returns
    -------
    Interval
        Reduction as a fraction (0.2 = the candidate takes 20 % less time); NaN bounds
        below :data:`MIN_PROCESSES` processes.

    Raises
    ------
    ValueError
        For a ``method`` not in :data:`METHODS`.
    """
    r = np.asarray(ratios, dtype=float)
    if method == ORDER_STATISTIC:
        med = order_statistic_interval(r, confidence=confidence)
        return Interval(
            1.0 - med.estimate,
            1.0 - med.high,
            1.0 - med.low,
            med.n,
            method=med.method,
            confidence=confidence,
            resamples=0,
        )
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"unknown CI method {method!r} (one of {', '.join(METHODS)})")
    return bootstrap_interval(
        [r],
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        method=method,
        of_medians=lambda m: 1.0 - m,
    )


# ---------------------------------------------------------------------------------------
# verdict


def no_change_label(delta: float) -> str:
    """Return the verdict text for an equivalence within ``±delta`` (e.g. ``±1%``)."""
    return f"no change within ±{delta * 100:g}%"


def verdict(low: float, high: float, delta: float = DEFAULT_DELTA) -> str:
    """Classify a reduction CI; the point estimate alone never decides.

    Rules, checked in this order, for the CI ``[low, high]`` of the reduction:

    1. undefined CI (NaN) -> ``"inconclusive"``;
    2. ``-delta <= low`` and ``high <= delta`` (the CI lies inside the equivalence band)
       -> ``"no change within ±δ"``;
    3. ``low > 0`` (the whole CI shows less time, and it is not inside the band)
       -> ``"faster"``;
    4. ``high < 0`` -> ``"slower"``;
    5. otherwise (the CI straddles 0 and leaves the band) -> ``"inconclusive"``.

    Parameters
    ----------
    low, high
        CI bounds of the reduction (fractions; positive = candidate faster).
    delta
        Half-width of the equivalence band, as a fraction (0.01 = ±1 %).

    Returns
    -------
    str
        ``"faster"``, ``"slower"``, ``"no change within ±1%"`` or ``"inconclusive"``.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE
    if -delta <= low and high <= delta:
        return no_change_label(delta)
    if low > 0:
        return FASTER
    if high < 0:
        return SLOWER
    return INCONCLUSIVE


# ---------------------------------------------------------------------------------------
# one comparison


def summarize_pair(
    ratios: pd.DataFrame,
    medians: pd.DataFrame,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    method: str = CI_METHOD,
    delta: float = DEFAULT_DELTA,
) -> dict[str, object]:
    """Summarize one (cell, candidate, baseline) comparison.

    Parameters
    ----------
    ratios
        Rows of :func:`paired_ratios` for ONE cell and pair.
    medians
        Rows of :func:`process_medians` for the same cell (all variants).
    confidence, resamples, seed, method
        Interval settings (see :func:`reduction_interval`).
    delta
        Equivalence band of the verdict.

    Returns
    -------
    dict
        ``n_processes``, ``baseline_ns`` and ``candidate_ns`` (independently aggregated:
        median over processes of each variant's per-process medians), ``reduction``,
        ``ci_low``, ``ci_high``, ``ci_method``, ``share_faster`` (fraction of paired
        processes with ``r < 1``), ``cv_baseline``/``cv_candidate`` (median over
        processes of the sample CV) and ``verdict``.
    """
    candidate = ratios["candidate"].iloc[0]
    baseline = ratios["baseline"].iloc[0]
    est = reduction_interval(
        ratios["ratio"].to_numpy(),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        method=method,
    )
    base_m = medians.loc[medians["variant"] == baseline]
    cand_m = medians.loc[medians["variant"] == candidate]
    return {
        "n_processes": est.n,
        "baseline_ns": float(base_m["median_ns"].median()),
        "candidate_ns": float(cand_m["median_ns"].median()),
        "reduction": est.estimate,
        "ci_low": est.low,
        "ci_high": est.high,
        "ci_method": est.method,
        "share_faster": float((ratios["ratio"] < 1.0).mean()),
        "cv_baseline": float(base_m["cv"].median()),
        "cv_candidate": float(cand_m["cv"].median()),
        "verdict": verdict(est.low, est.high, delta),
    }


# ---------------------------------------------------------------------------------------
# order effect


def position_slopes(samples: pd.DataFrame, by: Sequence[str] = ()) -> pd.Series:
    """Per-process slope of log time against the variant's position in its round.

    Within one process each variant has its own level, so the slope is the
    fixed-effects estimate: positions and log times are centred per variant before
    the least-squares slope is pooled over variants. A positive slope means a variant
    gets slower the later it runs in a round.

    Parameters
    ----------
    samples
        Samples of one cell, or of several told apart by the columns ``by``: columns
        ``process``, ``variant``, ``order_position``, ``ns_per_cycle`` (and ``by``).
    by
        Columns of the cell (empty: ``samples`` is one cell). Every group's sums run
        over its own rows in their order, so a cell's slopes are the same bits whether
        it is computed alone or with others (one groupby for a run's 20-odd cells was
        3.1 of its 16.4 s of analysis, profiled, as one per cell).

    Returns
    -------
    pandas.Series
        Slope (log units per position step) indexed by process (by ``by`` and process);
        processes whose positions never vary are dropped.
    """
    keys = [*by, "process", "variant"]
    x = samples["order_position"].astype(float)
    y = np.log(samples["ns_per_cycle"].astype(float))
    frame = pd.DataFrame({k: samples[k] for k in keys})
    groups = [samples[k] for k in keys]
    frame["xc"] = x - x.groupby(groups).transform("mean")
    frame["yc"] = y - y.groupby(groups).transform("mean")
    frame["xy"] = frame["xc"] * frame["yc"]
    frame["xx"] = frame["xc"] * frame["xc"]
    sums = frame.groupby([*by, "process"], sort=True)[["xy", "xx"]].sum()
    sums = sums[sums["xx"] > 0]
    return (sums["xy"] / sums["xx"]).rename("slope")


def order_effect(
    samples: pd.DataFrame,
    *,
    slopes: np.ndarray | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    method: str = CI_METHOD,
) -> Interval:
    """Order-effect check: time at the last position of a round relative to the first.

    The effect is ``exp((P - 1) * median_p slope(p)) - 1`` with ``P`` positions per
    round and ``slope(p)`` from :func:`position_slopes`, bootstrapped over processes
    (the transform is monotone, so the interval maps exactly). Because the order is
    shuffled every round, an order effect adds noise but no bias to the ratios; the
    report warns when its CI excludes 0 and it is larger than the headline CI half-width.

    Parameters
    ----------
    samples
        Samples of ONE cell (all variants).
    slopes
        Its :func:`position_slopes`, if the caller computed them (for many cells at once).
    confidence, resamples, seed, method
        Bootstrap settings; ``method`` passes through :func:`bootstrap_method` (the
        report's :data:`ORDER_STATISTIC` setting gives a percentile bootstrap here).

    Returns
    -------
    Interval
        Fractional change in time (0.01 = the last position is 1 % slower).
    """
    if slopes is None:
        slopes = position_slopes(samples).to_numpy()
    steps = int(samples["order_position"].max()) if len(samples) else 0

    return bootstrap_interval(
        [slopes],
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        method=method,
        of_medians=lambda m: np.expm1(steps * m),
    )


# ---------------------------------------------------------------------------------------
# gap to the lower bound


def gap_closed(
    candidate_ratios: Sequence[float] | np.ndarray,
    bound_ratios: Sequence[float] | np.ndarray,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_BOOTSTRAP_SEED,
    method: str = CI_METHOD,
) -> Interval:
    """Share of the baseline-to-bound gap that the candidate closes.

    ``(m_baseline - m_candidate) / (m_baseline - m_bound)`` written with paired
    per-process ratios to the baseline: ``(1 - median r_c) / (1 - median r_bound)``,
    i.e. the candidate's reduction over the bound's reduction. Processes are resampled
    jointly for both ratios.

    Parameters
    ----------
    candidate_ratios, bound_ratios
        Per-process ratios to the same baseline, aligned by process.
    confidence, resamples, seed, method
        Bootstrap settings; ``method`` passes through :func:`bootstrap_method` (the
        report's :data:`ORDER_STATISTIC` setting gives a percentile bootstrap here: the
        estimate is the ratio of the two median reductions of
        :func:`reduction_interval`, whatever its interval).

    Returns
    -------
    Interval
        1.0 = the candidate is as fast as the bound; 0.0 = no faster than the baseline.
        Only meaningful when the bound is clearly faster than the baseline (the caller
        checks that).
    """

    def _gap(mc: np.ndarray, mf: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (1.0 - mc) / (1.0 - mf)

    return bootstrap_interval(
        [np.asarray(candidate_ratios, dtype=float), np.asarray(bound_ratios, dtype=float)],
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        method=method,
        of_medians=_gap,
    )
