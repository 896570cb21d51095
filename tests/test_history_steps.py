"""History steps that are real: the false-discovery control over an answer's step × cell
tests, and the code-cost / time-only kinds from the instruction counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvqueue.history import history_analysis, history_present
from kvqueue.stats import paired_stats

STEPS, CELLS, PROCESSES = 16, 16, 36  # the committed answer: 16 steps x 4 cases x 4 pythons


def _null_answer(rng: np.random.Generator) -> list[dict[str, object]]:
    """Step x cell rows of one synthetic release history where no version differs: each
    process's paired ratio newer/older is noise around 1."""
    rows = []
    for step in range(STEPS):
        for cell in range(CELLS):
            ratios = np.exp(rng.normal(0.0, 0.02, PROCESSES))
            ci = paired_stats.order_statistic_interval(ratios)
            low, high = ci.low - 1.0, ci.high - 1.0
            rows.append(
                {
                    "headline": True,
                    "run_id": "r",
                    "release_range": f"s{step}",
                    "cell": cell,
                    "p_value": history_analysis.sign_test(ratios),
                    "excludes_0": bool(low > 0 or high < 0),
                }
            )
    return rows


@pytest.mark.slow
def test_with_no_version_differing_a_step_is_listed_in_at_most_5_percent_of_histories() -> None:
    rng = np.random.default_rng(20261202)
    seeds = 200
    listed = uncontrolled = 0
    for _ in range(seeds):
        rows = _null_answer(rng)
        uncontrolled += any(r["excludes_0"] for r in rows)
        listed += any(r["significant"] for r in history_analysis.discoveries(rows, 0.05))
    # The rule before the control (a step shown when one of its 256 intervals excludes 0)
    # lists chance steps in nearly every history; the control in at most 5 % of them.
    assert uncontrolled / seeds > 0.9
    assert listed / seeds <= 0.05


def test_a_real_step_survives_the_control() -> None:
    rng = np.random.default_rng(1)
    rows = _null_answer(rng)
    slower = np.exp(rng.normal(0.05, 0.02, PROCESSES))  # 5 % slower in every process
    rows[0].update(p_value=history_analysis.sign_test(slower), excludes_0=True)
    kept = history_analysis.discoveries(rows, 0.05)
    assert kept[0]["significant"]
    assert "excludes_0" not in kept[0]


def test_benjamini_hochberg_rejects_the_step_up_set() -> None:
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, float("nan")]
    # m = 8 tests (NaN is none): thresholds 0.05 k / 8; the largest k with p_k below
    # its threshold is k = 2 (0.008 <= 0.0125; 0.039 > 0.01875).
    assert history_analysis.benjamini_hochberg(p, 0.05) == [True, True] + [False] * 7


def test_sign_test_is_exact_and_two_sided() -> None:
    assert history_analysis.sign_test(np.array([1.1] * 10)) == pytest.approx(2 * 0.5**10)
    assert history_analysis.sign_test(np.array([0.9] * 5 + [1.1] * 5)) == 1.0
    assert np.isnan(history_analysis.sign_test(np.array([1.0, 1.0])))


def _steps(*rows: tuple[str, str, str, bool]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "host": "h",
                "interpreter": "CPython 3.12.1",
                "headline": True,
                "case": case,
                "pool": 2048,
                "from_version": rr.split(">")[0],
                "to_version": rr.split(">")[1],
                "release_range": rr,
                "change": 0.05,
                "significant": sig,
                "run_id": run,
            }
            for rr, case, run, sig in rows
        ]
    )


def test_steps_are_code_cost_or_time_only_by_the_instruction_counts() -> None:
    steps = _steps(
        ("a>b", "alloc1", "r", True),
        ("b>c", "alloc1", "r", True),
        ("c>d", "alloc1", "r", True),
        ("d>e", "alloc1", "r", False),
    )
    counts = pd.DataFrame(
        {
            "interpreter": ["CPython 3.12.1"] * 3,
            "from_version": ["a", "b", "d"],
            "to_version": ["b", "c", "e"],
            "case": ["alloc1"] * 3,
            "instr_change": [0.08, 0.004, 0.2],
        }
    )
    kinds = history_present.step_kinds(steps, counts)
    assert kinds == {
        "a>b": history_present.CODE_COST,
        "b>c": history_present.TIME_ONLY,
        "c>d": history_present.NOT_COUNTED,
    }
    versions = pd.DataFrame({"version": list("abcde"), "order": range(5)})
    # Code-cost and uncounted steps are numbered first, time-only ones after them.
    assert history_present.step_numbers(steps, versions, counts) == {"a>b": 1, "c>d": 2, "b>c": 3}
