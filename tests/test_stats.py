"""Statistics (kvqueue.stats) on synthetic data with a known truth."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvqueue import stats

CELL = ["case", "pool"]


def make_samples(
    factors: dict[str, float],
    *,
    processes: int = 11,
    samples: int = 9,
    noise: float = 0.02,
    process_noise: float = 0.05,
    order_effect: float = 0.0,
    seed: int = 0,
) -> pd.DataFrame:
    """Tidy samples of one cell: every variant's true time is ``100 * factor``."""
    rng = np.random.default_rng(seed)
    labels = list(factors)
    rows = []
    for p in range(1, processes + 1):
        level = math.exp(rng.normal(0, process_noise))
        for s in range(samples):
            for pos, idx in enumerate(rng.permutation(len(labels))):
                lab = labels[idx]
                ns = 100 * factors[lab] * level * math.exp(rng.normal(0, noise))
                rows.append(("alloc1", 2048, lab, p, s, pos, ns * (1 + order_effect * pos)))
    return pd.DataFrame(
        rows,
        columns=["case", "pool", "variant", "process", "sample", "order_position", "ns_per_cycle"],
    )


def summarize(samples: pd.DataFrame, cand: str, base: str, **kw: object) -> dict:
    med = stats.process_medians(samples, CELL)
    ratios = stats.paired_ratios(med, cand, base, CELL)
    return stats.summarize_pair(ratios, med, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# aggregation


def test_process_medians_and_exact_ratio_without_noise() -> None:
    df = make_samples({"A": 1.0, "B": 0.8}, noise=0.0, process_noise=0.2)
    med = stats.process_medians(df, CELL)
    assert set(med.columns) >= {"median_ns", "mean_ns", "cv", "n_samples"}
    assert (med["n_samples"] == 9).all()
    assert np.allclose(med["cv"], 0.0, atol=1e-12)
    ratios = stats.paired_ratios(med, "B", "A", CELL)
    assert len(ratios) == 11
    assert np.allclose(ratios["ratio"], 0.8)
    row = stats.summarize_pair(ratios, med)
    # Every process has ratio 0.8 exactly: the bootstrap distribution is a point.
    assert row["reduction"] == pytest.approx(0.2)
    assert row["ci_low"] == pytest.approx(0.2) and row["ci_high"] == pytest.approx(0.2)
    assert row["share_faster"] == 1.0
    assert row["verdict"] == stats.FASTER


def test_paired_ratios_pair_inside_processes_only() -> None:
    df = make_samples({"A": 1.0, "B": 0.9}, processes=5)
    df = df[~((df["variant"] == "B") & (df["process"] == 3))]  # B missing in process 3
    med = stats.process_medians(df, CELL)
    ratios = stats.paired_ratios(med, "B", "A", CELL)
    assert list(ratios["process"]) == [1, 2, 4, 5]
    assert list(ratios.columns[:4]) == ["case", "pool", "candidate", "baseline"]


def test_independent_medians_use_all_processes_of_each_variant() -> None:
    df = make_samples({"A": 1.0, "B": 0.5}, noise=0.0, process_noise=0.0, processes=4)
    df = df[~((df["variant"] == "B") & (df["process"] == 4))]
    med = stats.process_medians(df, CELL)
    row = stats.summarize_pair(stats.paired_ratios(med, "B", "A", CELL), med)
    assert row["baseline_ns"] == pytest.approx(100.0)
    assert row["candidate_ns"] == pytest.approx(50.0)
    assert row["n_processes"] == 3


@settings(max_examples=30, deadline=None)
@given(
    levels=st.lists(st.floats(0.2, 5.0), min_size=3, max_size=15),
    ratio=st.floats(0.3, 1.5),
)
def test_process_level_cancels_in_paired_ratio(levels: list[float], ratio: float) -> None:
    # A slow or fast process (frequency, cache) scales both variants: r(p) is unchanged.
    rows = []
    for p, lev in enumerate(levels, start=1):
        for s in range(3):
            rows.append(("x", 1, "A", p, s, 0, 100.0 * lev))
            rows.append(("x", 1, "B", p, s, 1, 100.0 * lev * ratio))
    df = pd.DataFrame(
        rows,
        columns=["case", "pool", "variant", "process", "sample", "order_position", "ns_per_cycle"],
    )
    row = summarize(df, "B", "A", resamples=200)
    assert row["reduction"] == pytest.approx(1 - ratio, abs=1e-9)


# ---------------------------------------------------------------------------------------
# estimate and coverage


def test_estimate_recovers_known_ratio() -> None:
    df = make_samples({"A": 1.0, "B": 0.8, "C": 1.03}, seed=3)
    b = summarize(df, "B", "A")
    assert b["reduction"] == pytest.approx(0.2, abs=0.01)
    assert b["ci_low"] <= 0.2 <= b["ci_high"]
    assert b["ci_method"] == stats.CI_METHOD
    c = summarize(df, "C", "A")
    assert c["reduction"] == pytest.approx(1 - 1.03, abs=0.01)
    assert c["verdict"] == stats.SLOWER


def test_report_defaults_are_at_least_10000_resamples() -> None:
    assert stats.DEFAULT_RESAMPLES >= 10_000
    est = stats.reduction_interval(np.linspace(0.78, 0.82, 11))
    assert est.resamples >= 10_000 and est.method == "percentile"
    assert est.confidence == 0.95


def test_coverage_of_the_95_percent_ci_with_11_processes() -> None:
    """1,000 synthetic experiments: the CI must cover the true reduction >= 92 % of the time.

    Each experiment: 11 processes x 9 samples per variant, lognormal sample noise (sigma
    3 %) and a lognormal per-process level shared by both variants; the true ratio is
    0.8. 2,000 resamples per CI keep this test at a few seconds.
    """
    rng = np.random.default_rng(20261129)
    true_ratio, n_exp, n_proc = 0.8, 1000, 11
    noise = rng.normal(0.0, 0.03, size=(n_exp, n_proc, 2, 9))
    level = rng.normal(0.0, 0.1, size=(n_exp, n_proc, 1, 1))
    ns = 100.0 * np.exp(noise + level) * np.array([1.0, true_ratio])[None, None, :, None]
    med = np.median(ns, axis=3)
    ratios = med[:, :, 1] / med[:, :, 0]
    covered = 0
    for i in range(n_exp):
        est = stats.reduction_interval(ratios[i], resamples=2000, seed=i)
        covered += est.low <= 1 - true_ratio <= est.high
    coverage = covered / n_exp
    print(f"coverage of the {stats.CI_METHOD} 95% CI with 11 processes: {coverage:.3f}")
    assert coverage >= 0.92


def test_bootstrap_is_deterministic_and_handles_small_n() -> None:
    r = np.array([0.81, 0.79, 0.83, 0.8, 0.78, 0.82, 0.8])
    a = stats.reduction_interval(r, seed=5)
    b = stats.reduction_interval(r, seed=5)
    assert a == b
    one = stats.reduction_interval([0.8])
    assert one.estimate == pytest.approx(0.2) and math.isnan(one.low) and math.isnan(one.high)
    assert stats.verdict(one.low, one.high) == stats.INCONCLUSIVE


# ---------------------------------------------------------------------------------------
# verdict


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.05, 0.10, "faster"),  # entirely above 0, beyond the band
        (0.002, 0.015, "faster"),  # above 0, leaves the band on the right
        (-0.10, -0.05, "slower"),
        (-0.015, -0.002, "slower"),
        (-0.004, 0.006, "no change within ±1%"),  # inside [-1%, +1%]
        (0.001, 0.009, "no change within ±1%"),  # above 0 but inside the band
        (-0.009, -0.001, "no change within ±1%"),
        (-0.01, 0.01, "no change within ±1%"),  # band edges are inside
        (-0.02, 0.03, "inconclusive"),  # straddles 0, leaves the band
        (-0.002, 0.05, "inconclusive"),
        (float("nan"), 0.02, "inconclusive"),
    ],
)
def test_verdict_on_constructed_cis(low: float, high: float, expected: str) -> None:
    assert stats.verdict(low, high, delta=0.01) == expected


def test_verdict_band_is_a_parameter() -> None:
    assert stats.verdict(0.002, 0.015, delta=0.02) == "no change within ±2%"
    assert stats.verdict(0.001, 0.004, delta=0.005) == "no change within ±0.5%"


def test_verdict_never_from_the_point_estimate_alone() -> None:
    # Large point estimate, wide noisy CI through 0: not "faster".
    ratios = np.array([0.6, 0.65, 0.7, 1.2, 1.3, 0.62, 1.25, 0.68, 1.22, 0.66, 1.28])
    est = stats.reduction_interval(ratios)
    assert est.estimate > 0.25
    assert est.low < 0 < est.high
    assert stats.verdict(est.low, est.high) == stats.INCONCLUSIVE


# ---------------------------------------------------------------------------------------
# noise floor and order effect


def test_aa_pair_ci_contains_zero() -> None:
    df = make_samples({"X": 1.0, "X#2": 1.0}, seed=11)
    row = summarize(df, "X#2", "X")
    assert row["ci_low"] <= 0.0 <= row["ci_high"]
    assert row["verdict"] == "no change within ±1%"


def test_aa_ci_contains_zero_in_most_experiments() -> None:
    hits = 0
    for seed in range(100):
        df = make_samples({"X": 1.0, "X#2": 1.0}, processes=11, samples=5, seed=seed)
        row = summarize(df, "X#2", "X", resamples=1000)
        hits += row["ci_low"] <= 0.0 <= row["ci_high"]
    assert hits >= 90


def test_order_effect_recovers_known_slope() -> None:
    df = make_samples({"A": 1.0, "B": 0.8, "C": 0.7, "D": 0.6}, order_effect=0.01, seed=4)
    est = stats.order_effect(df)
    # Time grows 1 % per position: last (3) vs first (0) is about +3 %.
    assert est.estimate == pytest.approx(0.03, abs=0.006)
    assert est.low > 0


def test_order_effect_absent() -> None:
    df = make_samples({"A": 1.0, "B": 0.8, "C": 0.7}, seed=9)
    est = stats.order_effect(df)
    assert est.low <= 0.0 <= est.high
    assert abs(est.estimate) < 0.01


def test_position_slopes_ignore_variant_levels() -> None:
    # Variant B is always slower and always runs second: no order effect within a variant.
    rows = []
    for p in (1, 2, 3):
        for s in range(4):
            rows.append((p, "A", 0, 100.0 + s * 0.0))
            rows.append((p, "B", 1, 200.0))
    df = pd.DataFrame(rows, columns=["process", "variant", "order_position", "ns_per_cycle"])
    assert stats.position_slopes(df).empty  # positions never vary within a variant


def test_gap_closed_known_value() -> None:
    df = make_samples({"old": 1.0, "new": 0.8, "ours": 0.7, "floor": 0.6}, seed=2)
    med = stats.process_medians(df, CELL)
    rc = stats.paired_ratios(med, "ours", "new", CELL)["ratio"].to_numpy()
    rf = stats.paired_ratios(med, "floor", "new", CELL)["ratio"].to_numpy()
    est = stats.gap_closed(rc, rf)
    # (0.8 - 0.7) / (0.8 - 0.6) = 0.5
    assert est.estimate == pytest.approx(0.5, abs=0.05)
    assert est.low <= 0.5 <= est.high


def test_no_interval_below_the_minimum_number_of_processes() -> None:
    # 5 processes: even [min, max] covers the median only 1 - 2/2**5 = 93.75 % of the time.
    few = stats.reduction_interval([0.80, 0.81, 0.79, 0.82, 0.78])
    assert few.estimate == pytest.approx(0.2)
    assert math.isnan(few.low) and math.isnan(few.high)
    assert stats.verdict(few.low, few.high) == stats.INCONCLUSIVE
    enough = stats.reduction_interval([0.80, 0.81, 0.79, 0.82, 0.78, 0.80])
    assert enough.low <= 0.2 <= enough.high
