"""Coverage measurement: the estimators (methods.estimators), the simulation
(methods.simulation) and real A/A counting (methods.coverage)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvqueue.stats import paired_stats
from methods import coverage, estimators, simulation

# ---------------------------------------------------------------------------------------
# simulation


@pytest.mark.parametrize("law", simulation.LAWS)
def test_process_effect_laws_are_standardized(law: str) -> None:
    x = simulation.draw_process_effects(law, np.random.default_rng(1), (400_000,))
    assert abs(x.mean()) < 0.01
    assert x.std() == pytest.approx(1.0, abs=0.03 if law == "t3" else 0.01)


def test_unknown_law_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown law"):
        simulation.draw_process_effects("cauchy", np.random.default_rng(0), (3,))


def test_simulated_cells_have_the_set_effect_and_spread() -> None:
    model = simulation.CellModel(effect=math.log(0.9), process_sd=0.015, order_effect=0.0)
    x = simulation.simulate_log_ratios("gaussian", 11, 4000, np.random.default_rng(2), model)
    assert x.shape == (4000, 11)
    assert np.median(x) == pytest.approx(math.log(0.9), abs=0.001)
    # process SD 1.5 % plus two medians of 9 samples at 2 % (about 0.83 % each)
    assert x.std() == pytest.approx(math.hypot(0.015, 0.0118), rel=0.05)


def test_order_effect_adds_noise_not_bias() -> None:
    model = simulation.CellModel(process_sd=0.0, order_effect=0.02)
    x = simulation.simulate_log_ratios("gaussian", 11, 4000, np.random.default_rng(3), model)
    quiet = simulation.simulate_log_ratios(
        "gaussian", 11, 4000, np.random.default_rng(3), simulation.CellModel(process_sd=0.0)
    )
    assert np.mean(x) == pytest.approx(model.effect, abs=0.001)
    assert x.std() > 1.2 * quiet.std()


def test_population_values_of_symmetric_and_skewed_laws() -> None:
    assert set(simulation.population_values("t3").values()) == {simulation.CellModel().effect}
    skew = simulation.population_values("skewed", draws=200_000)
    # The lognormal is right-skewed: median < pseudo-median < mean.
    assert skew["median"] < skew["pseudomedian"] < skew["mean"]


def test_exact_ranks_and_coverages() -> None:
    # Signed-rank interval: exact coverage 1 - 2 P(T <= k - 1) (n = 11: 95.80 %).
    assert estimators.signed_rank_rank(11) == 11
    # Exact coverage of the signed-rank interval under any continuous symmetric law.
    k = estimators.signed_rank_rank(11)
    coverage = 1.0 - 2.0 * estimators.signed_rank_cdf(11)[k - 1]
    assert coverage == pytest.approx(0.958008, abs=1e-6)
    assert estimators.signed_rank_rank(5) == 0
    assert estimators.binomial_order_interval_ranks(11) == 2
    assert estimators.binomial_order_interval_ranks(5) == 0


def test_vectorized_methods_agree_with_references() -> None:
    from scipy import stats as sps

    rng = np.random.default_rng(4)
    x = rng.standard_t(3, size=(5, 11))
    _, low, high = estimators.mean_t(x)
    for i in range(5):
        lo, hi = sps.t.interval(0.95, 10, loc=x[i].mean(), scale=sps.sem(x[i]))
        assert (low[i], high[i]) == pytest.approx((lo, hi))
    _, tl, _ = estimators.trimmed_t(x)
    assert estimators.trimmed_t(x)[0] == pytest.approx(sps.trim_mean(x, 0.2, axis=1))
    assert np.all(tl < estimators.trimmed_t(x)[0])
    # median_hs is the report's interval on the same values.
    e, lo, hi = estimators.median_hs(x)
    for i in range(5):
        ref = paired_stats.order_statistic_interval(x[i])
        assert (e[i], lo[i], hi[i]) == pytest.approx((ref.estimate, ref.low, ref.high))
    # Hodges-Lehmann: the median of the 66 Walsh averages.
    hl = estimators.hodges_lehmann(x)[0]
    i, j = np.triu_indices(11)
    assert hl[0] == pytest.approx(np.median((x[0, i] + x[0, j]) / 2))


def test_bootstrap_family_matches_scipy() -> None:
    from scipy import stats as sps

    x = np.random.default_rng(5).standard_t(3, size=(1, 11))
    fam = estimators.bootstrap_family(x, 0.95, 20_000, np.random.default_rng(1))
    for name, stat, method in [
        ("median_percentile", np.median, "percentile"),
        ("mean_bca", np.mean, "BCa"),
    ]:
        ref = sps.bootstrap((x[0],), stat, method=method, n_resamples=20_000, rng=7)
        lo, hi = ref.confidence_interval
        assert fam[name][1][0] == pytest.approx(lo, abs=0.05)
        assert fam[name][2][0] == pytest.approx(hi, abs=0.05)


def test_coverage_table_and_selection_rule() -> None:
    table = simulation.coverage_table(
        laws=["gaussian", "contaminated"], ns=[9, 11], reps=600, resamples=300
    )
    assert set(table["method"]) == set(estimators.METHODS)
    assert len(table) == len(estimators.METHODS) * 2 * 2
    assert table["coverage"].between(0, 1).all() and (table["half_width"] > 0).all()
    # The binomial interval never covers less than its guarantee (n = 11: 98.8 %).
    binom = table[(table["method"] == "median_binomial") & (table["n"] == 11)]
    assert (binom["coverage"] >= 0.97).all()
    choice = coverage.choose_method(table)
    assert choice.loc["median_binomial", "eligible"] == False  # noqa: E712 (too wide)
    assert choice["rank"].min() == 1


def test_selection_rule_on_a_constructed_table() -> None:
    rows = []
    for method, cov, hw in [("a", 0.95, 0.010), ("b", 0.93, 0.008), ("c", 0.96, 0.012)]:
        for law in ("gaussian", "t3"):
            for n in (6, 11):
                c = 0.90 if n == 6 else cov  # n = 6 is not judged (min_n = 9)
                rows.append(
                    {"method": method, "law": law, "n": n, "coverage": c, "se": 0.003,
                     "half_width": hw}
                )  # fmt: skip
    choice = coverage.choose_method(pd.DataFrame(rows))
    assert list(choice.index[:2]) == ["a", "c"]  # b undercovers
    assert not choice.loc["b", "eligible"]
    assert choice.loc["c", "relative_width"] == pytest.approx(1.2)
    assert not choice.loc["c", "not_much_wider"]
    # With real widths the real data decide among the eligible methods.
    real = pd.DataFrame({"method": ["a", "a", "c", "c"], "half_width": [0.02, 0.02, 0.01, 0.01]})
    assert coverage.choose_method(pd.DataFrame(rows), real).index[0] == "c"


# ---------------------------------------------------------------------------------------
# real A/A coverage


def _ratios(cells: dict[tuple[str, str, str], list[float]], kind: str = "aa") -> pd.DataFrame:
    rows = []
    for (interp, run, case), values in cells.items():
        for p, r in enumerate(values, start=1):
            rows.append(
                {
                    "host": "h",
                    "interpreter": interp,
                    "run_id": run,
                    "phase": "main",
                    "case": case,
                    "pool": 2048,
                    "candidate": "X#2",
                    "baseline": "X",
                    "kind": kind,
                    "process": p,
                    "ratio": r,
                }
            )
    return pd.DataFrame(rows)


CENTRED = [0.99, 1.0, 1.01, 0.995, 1.005, 0.98, 1.02, 1.0, 0.99, 1.01, 1.0]
SLOWER = [1.02, 1.03, 1.025, 1.021, 1.035, 1.028, 1.03, 1.022, 1.04, 1.027, 1.031]
FASTER = [2 - r for r in SLOWER]


def test_aa_intervals_count_what_contains_zero() -> None:
    aa = _ratios(
        {
            ("3.11", "r1", "alloc1"): CENTRED,
            ("3.11", "r1", "alloc2"): SLOWER,  # the copy is slower: interval below 0
            ("3.12", "r2", "alloc1"): CENTRED,
            ("3.12", "r2", "alloc2"): FASTER,
            ("3.12", "r2", "mix"): CENTRED[:5],  # too few processes: not counted
        }
    )
    pairs = _ratios({("3.11", "r1", "alloc8"): SLOWER}, kind="pair")  # not an A/A row
    ratios = pd.concat([aa, pairs], ignore_index=True)
    iv = coverage.aa_intervals(ratios)
    assert len(iv) == 4
    assert list(iv["contains_zero"]) == [True, False, True, False]
    assert (iv["ci_low"] <= iv["reduction"]).all() and (iv["reduction"] <= iv["ci_high"]).all()
    # The report's own path gives the same verdicts (and nearly the same bounds).
    own = coverage.aa_intervals(ratios, coverage.interval_function())
    assert list(own["contains_zero"]) == list(iv["contains_zero"])
    assert own["ci_low"].to_numpy() == pytest.approx(iv["ci_low"].to_numpy(), abs=2e-4)

    total = coverage.aa_coverage(iv)
    assert total.loc[0, "intervals"] == 4 and total.loc[0, "contain_zero"] == 2
    assert total.loc[0, "coverage"] == 0.5
    assert total.loc[0, "exclude_below"] == 1 and total.loc[0, "exclude_above"] == 1
    assert total.loc[0, "clusters"] == 2
    by = coverage.aa_coverage(iv, ["interpreter"]).set_index("interpreter")
    assert by.loc["3.11", "coverage"] == 0.5 and by.loc["3.12", "intervals"] == 2

    every = coverage.aa_coverage_all(ratios, ["median_hs", "mean_t", "hodges_lehmann"])
    assert list(every["method"]) == ["median_hs", "mean_t", "hodges_lehmann"]
    assert (every["intervals"] == 4).all()


def test_aa_intervals_of_an_empty_table() -> None:
    iv = coverage.aa_intervals(_ratios({("3.11", "r1", "a"): SLOWER}, kind="pair"))
    assert iv.empty and "contains_zero" in iv.columns
    assert coverage.aa_coverage(iv).loc[0, "intervals"] == 0
