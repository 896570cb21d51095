"""The precision target's two-stage design (``kvqueue.measure.process_sizing``) and its use by the
runner."""

from __future__ import annotations

import math
import random
import sys

import pytest
from scipy import stats as sps

from kvqueue.history import history_sizing
from kvqueue.measure import process_sizing, runner
from kvqueue.params import bench_params, report_params
from kvqueue.rawdata import raw_reader


@pytest.mark.parametrize("df", [3, 5, 10, 20, 40, 100])
def test_t_quantile_is_close_to_scipys(df: int) -> None:
    assert process_sizing.t975(df) == pytest.approx(sps.t.ppf(0.975, df), rel=3e-3)


def test_required_n_reaches_the_half_width() -> None:
    sd, half = 0.02, math.log1p(0.005)
    n = process_sizing.required_n(sd, half)
    assert process_sizing.t975(n - 1) * sd / math.sqrt(n) <= half
    assert process_sizing.t975(n - 2) * sd / math.sqrt(n - 1) > half
    assert process_sizing.required_n(0.0, half, floor=11) == 11


def _rows(sd: float, processes: int, seed: int = 1) -> list[list[object]]:
    """Pilot rows of two variants on alloc1/2048 whose per-process log ratio has SD sd."""
    rng = random.Random(seed)
    rows: list[list[object]] = []
    for pr in range(1, processes + 1):
        ratio = math.exp(rng.gauss(-0.2, sd))
        for variant, ns in (("a", 100.0), ("b", 100.0 * ratio)):
            for sample in range(3):
                rows.append([pr, "main", "alloc1", 2048, variant, sample, 0, 1, 1, 1, ns, 0])
    return rows


def _size(rows: list, **caps: float) -> process_sizing.Sizing:
    values = {"max_processes": 41, "max_minutes": 5.0, "seconds_per_process": 1.0}
    values |= caps
    return process_sizing.size_run(
        rows,
        ["a", "b"],
        [],
        pilot=11,
        precision_pp=0.5,
        seconds_spent=10.0,
        seconds_after=5.0,
        **values,
    )


def test_a_tight_pilot_keeps_its_size_and_a_loose_one_asks_for_more() -> None:
    tight = _size(_rows(0.002, 11))
    assert tight.planned == 11 and tight.capped_by is None
    loose = _size(_rows(0.009, 11))
    assert 11 < loose.wanted == loose.planned <= 41
    assert set(loose.required) == {"alloc1/2048 b vs a"}


def test_a_far_out_process_does_not_blow_up_the_request() -> None:
    """Before: the pilot's SD sized the run; one process 30 % off asked for thousands."""
    rows = _rows(0.005, 11)
    calm = _size(rows)
    for row in rows:
        if row[0] == 3 and row[4] == "b":
            row[10] = float(row[10]) * 1.3
    wild = _size(rows)
    key = "alloc1/2048 b vs a"
    assert wild.sd_pp[key] > 5 * calm.sd_pp[key]  # the SD feels the outlier...
    assert wild.required[key] <= 2 * calm.required[key]  # ...the request hardly does
    assert wild.required[key] < 100


def test_only_the_reports_comparisons_are_sized() -> None:
    """An unconfigured pair (c vs b) or a bound never sets the size; A/A copies do."""
    rows = []
    for pr in range(1, 12):
        for variant, ns in (("a", 100.0), ("b", 80.0), ("c", 60.0 + pr), ("a#2", 100.0)):
            rows.append([pr, "main", "alloc1", 2048, variant, 0, 0, 1, 1, 1, ns, 0])
    s = process_sizing.size_run(
        rows,
        ["a", "b", "c", "a#2"],
        ["c"],
        pilot=11,
        precision_pp=0.5,
        max_processes=41,
        max_minutes=5.0,
        seconds_per_process=1.0,
        seconds_spent=0.0,
        seconds_after=0.0,
        pairs=(("b", "a"),),
    )
    assert set(s.required) == {"alloc1/2048 b vs a", "alloc1/2048 a#2 vs a"}


def test_the_caps_bind_and_say_which() -> None:
    wide = _rows(0.05, 11)
    assert _size(wide).capped_by == "max_processes" and _size(wide).planned == 41
    # 30 s: 10 spent, 5 after, 10 kept to finish, 1 s per process
    by_time = _size(wide, max_minutes=0.5)
    assert by_time.capped_by == "max_minutes" and by_time.planned == 11 + 5


def test_no_target_means_the_pilot_is_the_run() -> None:
    s = process_sizing.size_run(
        _rows(0.05, 11),
        ["a", "b"],
        [],
        pilot=11,
        precision_pp=0.0,
        max_processes=41,
        max_minutes=5.0,
        seconds_per_process=1.0,
        seconds_spent=0.0,
        seconds_after=0.0,
    )
    assert s.planned == 11 and s.capped_by == "no precision target"


@pytest.mark.slow
def test_the_runner_runs_the_second_stage_and_records_it(tmp_path) -> None:
    p = bench_params.make_params(
        host="sized",
        python=sys.executable,
        variants=["kvqueue", "kvqueue:floor"],
        aa=True,
        processes=6,
        max_processes=8,
        confirm_processes=1,
        samples=2,
        sample_ms=1,
        pools=[64],
        cases=["alloc1"],
        gate_ops=500,
        precision=0.01,  # unreachable with 1 ms samples: capped at max_processes
    )
    run_dir = runner.run_bench(p, tmp_path)
    run = raw_reader.read_run(run_dir)
    meta = run.meta
    assert meta["sizing"]["pilot"] == 6 and meta["sizing"]["planned"] == 8
    assert meta["sizing"]["capped_by"] == "max_processes"
    assert meta["processes_planned"] == {"main": 8, "confirm": 1}
    assert meta["processes_completed"] == {"main": 8, "confirm": 1}
    assert len(meta["seeds"]["processes"]["main"]) == 8
    assert run.included, run.altered  # the reader's plan check accepts the sized run


def test_the_budget_counts_from_the_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_MINUTES covers the whole command: the CLI leaves its start time behind."""
    from kvqueue.measure import runner

    monkeypatch.setenv(bench_params.BUDGET_START_ENV, "1000.0")
    assert runner._seconds_since_launch(now=1025.5) == 25.5
    # Not this launch's: in the future, over an hour old, or not a number.
    assert runner._seconds_since_launch(now=900.0) == 0.0
    assert runner._seconds_since_launch(now=1000.0 + 7200) == 0.0
    monkeypatch.setenv(bench_params.BUDGET_START_ENV, "soon")
    assert runner._seconds_since_launch(now=1025.5) == 0.0
    monkeypatch.delenv(bench_params.BUDGET_START_ENV)
    assert runner._seconds_since_launch(now=1025.5) == 0.0


def test_a_history_is_sized_for_its_steps_on_its_cases() -> None:
    """Consecutive versions (newer, older) on alloc8 too; the bench pairs fall back to
    every version against the newest on the headline cases only (on the run's own
    cases when it measured none of them: issue 36, any batch size)."""
    record = {
        "kind": "history",
        "history": {"versions": [{"label": "c"}, {"label": "b"}, {"label": "a"}]},
        "parameters": {"cases": ["alloc1", "alloc8"]},
    }
    pairs, cases = history_sizing.sizing_targets(record)
    assert pairs == (("c", "b"), ("b", "a")) and cases == ("alloc1", "alloc8")
    assert history_sizing.sizing_targets({"parameters": {"cases": ["alloc8", "mix"]}}) == (
        report_params.DEFAULT_PAIRS,
        process_sizing.HEADLINE_CASES,
    )
    assert history_sizing.sizing_targets({"parameters": {"cases": ["alloc8"]}}) == (
        report_params.DEFAULT_PAIRS,
        ("alloc8",),
    )
    # The runner sniffs no kind: a bench run is sized for the bench's targets whatever
    # its record says; a history passes its own (kvqueue.history.history_collect.run_history).
    assert runner.BENCH.sizing_targets(record) == (
        report_params.DEFAULT_PAIRS,
        process_sizing.HEADLINE_CASES,
    )
    rows = []
    for pr in range(1, 12):
        for variant, ns in (("c", 50.0 + pr), ("b", 80.0), ("a", 100.0)):
            rows.append([pr, "main", "alloc8", 2048, variant, 0, 0, 1, 1, 1, ns, 0])
    s = process_sizing.size_run(
        rows,
        ["c", "b", "a"],
        [],
        pilot=11,
        precision_pp=0.5,
        max_processes=41,
        max_minutes=5.0,
        seconds_per_process=1.0,
        seconds_spent=0.0,
        seconds_after=0.0,
        pairs=pairs,
        cases=cases,
    )
    assert set(s.required) == {"alloc8/2048 c vs b", "alloc8/2048 b vs a"}
    assert s.record()["cases"] == ["alloc1", "alloc8"]
