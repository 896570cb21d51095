"""Reproduce commands repeat a run from what its run.json recorded, every parameter."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from synthetic import write_fixture

from kvqueue import schema
from kvqueue.params import bench_params, report_params
from kvqueue.params.spec import parse_value, spec_of
from kvqueue.report import processed_build, prose

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
    data = processed_build.build(tmp_path / "raw", tmp_path / "processed", FAST)
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


def test_policy_assignments_parse_back_to_the_recorded_run() -> None:
    from kvqueue.params import policy_params

    p = policy_params.from_text(
        {
            "host": "h",
            "regime": "agentic",
            "windows": "1 4 inf",
            "processes": "6",
            "warmup_turnovers": "150",
            "turnovers": "300",
            "free_order": "append",
        }
    )
    assigned = policy_params.make_assignments(p.record())
    names = [var for var, _ in assigned]
    assert "HOST" not in names and "PYTHON" not in names and "TRACE_OUT" not in names
    # Every workload variable is written out, the regime's preset values included, so
    # the command repeats the run after a preset changes.
    assert {"POOL", "PREFILL", "CONCURRENCY", "REGIME", "WINDOWS"} <= set(names)
    again = policy_params.from_text(
        {
            "host": "h",
            **{
                f.name: dict(assigned).get(spec_of(f).make)
                for f in policy_params.policy_fields()
                if spec_of(f).make and f.name != "host"
            },
        }
    )
    assert again == p


def test_history_assignments_keep_releases_and_newest_and_leave_what_it_chooses() -> None:
    from kvqueue.params import history_params

    bench = history_params.from_text({"host": "h", "processes": "5"})
    record = bench.record()
    history = {
        "releases_given": True,
        "releases_probed": ["0.32.0", "0.31.0"],
        "versions": [{"label": "mine", "source": "git:/tmp/v@abc123"}, {"label": "x"}],
    }
    assigned = dict(history_params.make_assignments(record, history))
    assert assigned["RELEASES"] == "0.32.0 0.31.0"
    assert assigned["NEWEST"] == "mine=git:/tmp/v@abc123"  # the label kept
    assert assigned["PROCESSES"] == "5"
    assert not {"VARIANTS", "AA", "BLOCK_SOURCE", "QUICK"} & set(assigned)
    plain = dict(history_params.make_assignments(record, {"releases_given": False}))
    assert "RELEASES" not in plain and "NEWEST" not in plain


def test_a_history_runs_newest_git_ref_is_pinned_to_its_commit() -> None:
    from kvqueue.params import history_params
    from kvqueue.rawdata import run_ledger

    bench = history_params.from_text({"host": "h"}).record()
    commit = "c" * 40
    meta = {
        "kind": "history",
        "parameters": bench,
        "history": {"versions": [{"label": "mine", "source": "git:/tmp/v@mine"}]},
        "variants": [
            {"source": "git:/tmp/v@mine", "resolved_path": f"/tmp/v@{commit}:vllm/x.py"},
            {"source": "vllm==0.32.0", "resolved_path": "/cache/vllm-0.32.0.whl:vllm/x.py"},
        ],
    }
    assert dict(run_ledger.make_command(meta)[2])["NEWEST"] == f"mine=git:/tmp/v@{commit}"
    # A class named after the source is kept (the pinned command times the same class).
    pinned = schema.pin_git_ref("git:/tmp/v@mine::MyQueue", commit)
    assert pinned == f"git:/tmp/v@{commit}::MyQueue"
    assert schema.pin_git_ref("vllm==0.32.0::Q", commit) == "vllm==0.32.0::Q"
    # Without a recorded commit the ref stays as given.
    meta["variants"] = meta["variants"][1:]
    assert dict(run_ledger.make_command(meta)[2])["NEWEST"] == "mine=git:/tmp/v@mine"


def test_ledger_names_the_command_of_every_kind() -> None:
    from kvqueue.params import policy_params
    from kvqueue.rawdata import run_ledger

    exe = {"executable": "/opt/py/bin/python3"}
    policy = policy_params.from_text({"host": "h"}).record()
    steady = {"kind": "policy", "protocol": "steady-state-1", "python": exe}
    target, python, args = run_ledger.make_command({**steady, "parameters": policy})
    assert (target, python) == ("policy", "/opt/py/bin/python3")
    assert dict(args)["REGIME"] == "chat"
    bench = bench_params.make_params(host="h", python=sys.executable).record()
    assert run_ledger.make_command({"python": exe, "parameters": bench})[0] == "bench"
    counted = {
        "kind": "counts",
        "question": "history",
        "python": exe,
        "parameters": bench,
        "history": {"releases_given": False},
    }
    assert run_ledger.make_command(counted)[0] == "history"
    assert run_ledger.make_command({"kind": "policy"}) == ("", "", [])
    # A run of the older policy protocol cannot be repeated by today's make policy.
    assert run_ledger.make_command({"kind": "policy", "parameters": policy})[0] == ""
