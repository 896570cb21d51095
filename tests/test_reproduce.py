"""Reproduce commands repeat a run from what its run.json recorded, every parameter."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from synthetic import write_fixture

from kvqueue.params import bench as bench_params
from kvqueue.params import report as report_params
from kvqueue.params.spec import parse_value, spec_of
from kvqueue.report import processed, prose

FAST = report_params.ReportSettings(resamples=500)


def _unusual() -> bench_params.BenchParams:
    """Parameters with every field away from its default (where the check allows)."""
    return bench_params.make_params(
        host="h",
        python=sys.executable,
        processes=7,
        precision=0.75,
        max_processes=33,
        max_minutes=4.5,
        confirm_processes=3,
        samples=5,
        sample_ms=12.5,
        epochs=3,
        pools=(2048,),
        cases=("alloc1", "mix"),
        confirm_cases=("alloc1",),
        # An allowed CPU: an earlier in-process worker test may have pinned this process.
        cpu=str(min(os.sched_getaffinity(0))),
        gc="enabled",
        seed=9,
        gate_ops=5000,
        quick=True,
        aa=True,
        block_source="kvqueue",
    )


def test_assignments_parse_back_to_the_recorded_values() -> None:
    p = _unusual()
    record = p.record()
    assigned = dict(bench_params.make_assignments(record))
    by_make = {spec_of(f).make: f for f in bench_params.bench_fields()}
    assert set(assigned) == set(by_make) - {"HOST", "PYTHON", "VARIANTS"}
    for var, text in assigned.items():
        f = by_make[var]
        value = parse_value(f.name, spec_of(f), text)
        want = getattr(p, f.name)
        assert value == want, (var, text, want)


def test_a_default_is_written_out_and_a_legacy_run_gets_its_behaviour() -> None:
    record = bench_params.make_params(host="h", python=sys.executable).record()
    assert dict(bench_params.make_assignments(record))["PRECISION"] == "0.5"
    # A schema-1 run recorded neither field: it had no precision target and one layout.
    del record["precision"], record["epochs"], record["max_processes"]
    legacy = dict(bench_params.make_assignments(record))
    assert legacy["PRECISION"] == "0" and legacy["EPOCHS"] == "1"
    assert "MAX_PROCESSES" not in legacy


def test_reproduce_command_names_every_parameter(tmp_path: Path) -> None:
    write_fixture(tmp_path / "raw", tiny=True)
    data = processed.build(tmp_path / "raw", tmp_path / "processed", FAST)
    text = prose.reproduce_commands(data)
    command = text.split("make bench", 1)[1].split("\n```")[0]
    words = shlex.split(command.replace("\\\n", " "))
    found = {w.split("=", 1)[0] for w in words if re.match(r"^[A-Z_]+=", w)}
    # The fixture's runs are of the legacy kind (no precision target recorded): every
    # field but the caps of a target they did not have and the empty BLOCK_SOURCE.
    wanted = {spec_of(f).make for f in bench_params.bench_fields()}
    wanted -= {"BLOCK_SOURCE", "MAX_PROCESSES", "MAX_MINUTES"}
    assert wanted <= found, sorted(wanted - found)
    assert "PRECISION=0" in words and "EPOCHS=1" in words
