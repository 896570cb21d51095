"""Coverage of the candidate intervals in simulation (docs/design.md §5): pure functions.

:func:`simulate_log_ratios` draws cells the way the bench produces them: per process,
the paired log ratio is the true effect plus a *process effect* (the layout luck of
one process, drawn from a named law: :data:`LAWS`) plus the within-process noise of
the two per-process medians (``samples`` lognormal samples per variant, each timed
at a freshly shuffled position among ``variants`` with an order effect). The
process level shared by both variants cancels in the ratio and is left out.
:func:`coverage_table` applies every method of
:data:`methods.estimators.METHODS` to the same simulated cells and counts how
often the interval covers the method's own population value
(:func:`population_values`; for a symmetric law every estimand is the true effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from methods.estimators import METHODS, apply_methods, reduction_half_width

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
