"""``runner.run_bench`` called directly (no notebook) on tiny parameters: the run folder,
``run.json`` and ``samples.csv`` (docs/design.md §6), refusals before writing, failure marking.

The gate and the workers run as subprocesses of the measured interpreter (here: the
test interpreter); the gate runs a reduced number of operations to stay fast.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import sys
from pathlib import Path

import pytest
from benchutil import (
    VARIANTS,
    check_orders,
    expected_rows,
    only_run_dir,
    read_run_json,
    read_samples,
    rows_per_process,
    run_dirs,
    tree,
)

from kvqueue import schema
from kvqueue.errors import BenchError, BenchInputError
from kvqueue.measure import runner
from kvqueue.params import bench_params

#: Every test here starts worker, gate or CLI processes.
pytestmark = pytest.mark.slow

HOST = "unit"
GATE_OPS = 2_000


def tiny_params(**changes) -> bench_params.BenchParams:
    values = {
        "variants": list(VARIANTS),
        "processes": 2,
        "confirm_processes": 1,
        "samples": 2,
        "sample_ms": 1,
        "pools": [64],
        "cases": ["alloc1", "mix", "remove"],
        "seed": 7,
        "gate_ops": GATE_OPS,
        "precision": 0.0,
    }
    values.update(changes)
    return bench_params.make_params(host=HOST, python=sys.executable, **values)


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> tuple[bench_params.BenchParams, Path]:
    """(params, run folder) of one complete tiny run."""
    raw = tmp_path_factory.mktemp("raw")
    params = tiny_params()
    run_dir = runner.run_bench(params, raw)
    return params, run_dir


# ------------------------------------------------------------------ run.json


def test_run_folder_layout(complete_run):
    _, run_dir = complete_run
    assert run_dir.parent.name == HOST
    assert re.fullmatch(r"\d{8}T\d{6}Z-cp\d+-[0-9a-f]{4}", run_dir.name), run_dir.name
    # No temp files left behind; the notebook record only exists on the notebook path.
    assert tree(run_dir) == ["run.json", "samples.csv"]


def test_run_json_keys_and_status(complete_run):
    _, run_dir = complete_run
    record = read_run_json(run_dir)
    assert set(schema.RUN_KEYS) <= set(record)
    assert set(schema.RUN_KEYS_V2) <= set(record)
    extra = set(record) - set(schema.RUN_KEYS) - set(schema.RUN_KEYS_V2)
    assert extra <= set(schema.RUN_KEYS_OPTIONAL)
    assert record["sizing"]["capped_by"] == "no precision target"
    assert "error" not in record
    assert record["schema_version"] == schema.SCHEMA_VERSION
    assert record["run_id"] == run_dir.name
    assert record["host"] == HOST
    assert record["status"] == "complete"
    started = dt.datetime.fromisoformat(record["started_at"])
    ended = dt.datetime.fromisoformat(record["ended_at"])
    assert started <= ended


def test_run_json_processes(complete_run):
    params, run_dir = complete_run
    record = read_run_json(run_dir)
    planned = {"main": params.processes, "confirm": params.confirm_processes}
    assert record["processes_planned"] == planned
    assert record["processes_completed"] == planned
    info = record["process_info"]
    assert [(p["phase"], p["process"]) for p in info] == [
        ("main", 1),
        ("main", 2),
        ("confirm", 1),
    ]
    for p in info:
        assert {"phase", "process", "cpu", "pinned", "note", "seconds", "loops", "seed"} <= set(p)
        if hasattr(os, "sched_getaffinity"):
            assert isinstance(p["cpu"], int) and p["cpu"] in os.sched_getaffinity(0)
            assert p["pinned"] is True


def test_run_json_variants_with_provenance_and_gate(complete_run):
    params, run_dir = complete_run
    record = read_run_json(run_dir)
    assert record["baseline"] == params.labels[0] == "kvqueue"
    assert [v["label"] for v in record["variants"]] == params.labels
    for v, role in zip(record["variants"], ["baseline", "bound"], strict=True):
        assert re.fullmatch(r"[0-9a-f]{64}", v["class_sha256"])
        assert re.fullmatch(r"[0-9a-f]{64}", v["file_sha256"])
        assert v["source"] == v["label"]
        assert v["block_source"] == "kvqueue"  # one shared block class: the baseline's
        assert v["gate"]["ok"] is True
        assert v["gate"]["ops_checked"] == GATE_OPS
        assert v["gate"]["role"] == role
    assert record["variants"][1]["is_bound"] is True


def test_run_json_parameters_and_seeds(complete_run):
    params, run_dir = complete_run
    record = read_run_json(run_dir)
    # confirm_cases is recorded as the confirmation phase timed it (the run's cases
    # alloc1, mix, remove meet the defaults alloc1, alloc2, remove in alloc1 and remove).
    expected = {**json.loads(json.dumps(params.record())), "confirm_cases": ["alloc1", "remove"]}
    assert record["parameters"] == expected
    _, rows = read_samples(run_dir)
    timed = sorted({r["case"] for r in rows if r["phase"] == "confirm"})
    assert timed == sorted(record["parameters"]["confirm_cases"])
    assert record["parameters"]["samples"] == 2
    assert record["parameters"]["pools"] == [64]
    seeds = record["seeds"]
    assert seeds["run"] == 7
    assert isinstance(seeds["gate"], int)
    main, confirm = seeds["processes"]["main"], seeds["processes"]["confirm"]
    assert len(main) == 2 and len(confirm) == 1
    assert len(set(main + confirm)) == 3  # every process shuffles with its own seed
    by_process = {(p["phase"], p["process"]): p["seed"] for p in record["process_info"]}
    assert by_process == {("main", 1): main[0], ("main", 2): main[1], ("confirm", 1): confirm[0]}
    # Seeded by the run seed: the same seed plans the same process seeds.
    plan = runner.process_plan(params)
    assert [s for _, _, s in plan] == main + confirm


def test_run_json_environment(complete_run):
    _, run_dir = complete_run
    record = read_run_json(run_dir)
    machine = record["machine"]
    for key in ("hostname", "cpu_model", "cpu_count", "kernel", "platform", "load_avg_start"):
        assert key in machine
    assert "load_avg_end" in machine
    py = record["python"]
    assert py["version_info"][:2] == list(sys.version_info[:2])
    assert py["implementation"] == platform.python_implementation()
    assert set(record["project"]) == {"commit", "dirty", "untracked_files"}


# ------------------------------------------------------------------ samples.csv


def test_samples_csv_columns_and_row_count(complete_run):
    params, run_dir = complete_run
    header, rows = read_samples(run_dir)
    assert header == list(schema.SAMPLE_COLUMNS)
    confirm_cases = [c for c in schema.CONFIRM_CASES if c in params.cases]
    assert confirm_cases == ["alloc1", "remove"]
    n_main = expected_rows(processes=2, cases=3, pools=1, variants=2, samples=2)
    n_confirm = expected_rows(processes=1, cases=2, pools=1, variants=2, samples=2)
    assert len(rows) == n_main + n_confirm
    assert rows_per_process(rows) == {
        ("main", 1): n_main // 2,
        ("main", 2): n_main // 2,
        ("confirm", 1): n_confirm,
    }
    assert {r["case"] for r in rows if r["phase"] == "confirm"} == set(confirm_cases)
    assert {r["phase"] for r in rows} == set(schema.PHASES)


def test_samples_csv_values(complete_run):
    params, run_dir = complete_run
    _, rows = read_samples(run_dir)
    record = read_run_json(run_dir)
    loops = {(p["phase"], p["process"]): p["loops"] for p in record["process_info"]}
    for r in rows:
        assert r["variant"] in params.labels
        assert r["pool"] == 64
        assert r["loops"] == loops[r["phase"], r["process"]][f"{r['case']}/{r['pool']}"]
        # samples.csv keeps 3 decimals of ns_per_cycle: off by at most half a unit of
        # the last decimal (plus float error: 124.1125 is written as 124.112).
        exact = r["ns_total"] / (r["loops"] * r["ops_per_loop"])
        assert r["ns_per_cycle"] == pytest.approx(exact, abs=5e-4 + 1e-9)
    orders = check_orders(rows, params.labels, ("phase", "process", "case", "pool", "sample"))
    assert len(orders) == 2 * 3 * 2 + 1 * 2 * 2


def test_summarize_reads_the_run(complete_run):
    pytest.importorskip("pandas")
    params, run_dir = complete_run
    table = runner.summarize(run_dir)
    assert list(table.columns) == sorted(params.labels)
    assert len(table) == 3 + 2  # main cases + confirm cases, one pool


# ------------------------------------------------------------------ write-once, refusals


def test_a_second_run_gets_a_new_folder(tmp_path):
    params = tiny_params(processes=1, confirm_processes=0, cases=["alloc1"])
    first = runner.run_bench(params, tmp_path)
    before = {p: p.read_bytes() for p in first.iterdir()}
    second = runner.run_bench(params, tmp_path)
    assert first != second
    assert run_dirs(tmp_path, HOST) == sorted([first, second])
    assert {p: p.read_bytes() for p in first.iterdir()} == before
    assert read_run_json(second)["processes_planned"] == {"main": 1, "confirm": 0}
    assert read_run_json(second)["processes_completed"] == {"main": 1, "confirm": 0}
    assert {r["phase"] for r in read_samples(second)[1]} == {"main"}


def test_an_existing_run_id_is_never_reused(tmp_path):
    params = tiny_params(processes=1, confirm_processes=0, cases=["alloc1"])
    first = runner.run_bench(params, tmp_path)
    before = {p: p.read_bytes() for p in first.iterdir()}
    # One line for the user (it was a bare FileExistsError traceback), nothing touched.
    with pytest.raises(BenchError, match="exists already; nothing was written"):
        runner.run_bench(params, tmp_path, run_id=first.name)
    assert {p: p.read_bytes() for p in first.iterdir()} == before


def test_gate_refusal_writes_nothing(tmp_path, capsys, broken_queue):
    raw = tmp_path / "raw"
    params = tiny_params(variants=["kvqueue", str(broken_queue)])
    with pytest.raises(runner.GateRefused) as info:
        runner.run_bench(params, raw)
    message = str(info.value)
    assert "nothing was timed" in message
    assert "gate FAIL" in message and "broken_queue.py" in message
    assert "links are not cleared" in message
    assert not raw.exists()


def test_unknown_source_refused_before_the_gate(tmp_path):
    raw = tmp_path / "raw"
    params = tiny_params(variants=["kvqueue", str(tmp_path / "missing.py")])
    with pytest.raises(BenchInputError, match=r"missing\.py"):
        runner.run_bench(params, raw)
    assert not raw.exists()


def test_aa_run_records_the_duplicate(tmp_path):
    params = tiny_params(
        processes=1,
        confirm_processes=0,
        cases=["alloc1"],
        aa=True,
        variants=["kvqueue", "kvqueue:floor"],
    )
    run_dir = runner.run_bench(params, tmp_path)
    record = read_run_json(run_dir)
    labels = ["kvqueue", "kvqueue:floor", "kvqueue#2"]
    assert [v["label"] for v in record["variants"]] == labels
    assert record["variants"][2]["class_sha256"] == record["variants"][0]["class_sha256"]
    assert record["parameters"]["aa"] is True
    _, rows = read_samples(run_dir)
    assert sorted({r["variant"] for r in rows}) == sorted(labels)
    check_orders(rows, labels, ("phase", "process", "case", "pool", "sample"))


def test_failed_worker_marks_the_run_failed(tmp_path, monkeypatch):
    """A worker that refuses (here: a sha256 that changed since the gate) fails the run;
    the folder stays, marked ``failed`` with the reason, holding only whole processes."""
    real_gate = runner.run_gate

    def gate_with_wrong_sha(params, **kwargs):
        results = real_gate(params, **kwargs)
        return [{**r, "sha256": "0" * 64} if r["label"] != "kvqueue" else r for r in results]

    monkeypatch.setattr(runner, "run_gate", gate_with_wrong_sha)
    params = tiny_params(processes=2, confirm_processes=0, cases=["alloc1"])
    with pytest.raises(runner.BenchError, match="changed since the validation gate"):
        runner.run_bench(params, tmp_path)
    run_dir = only_run_dir(tmp_path, HOST)
    record = read_run_json(run_dir)
    assert record["status"] == "failed"
    assert "changed since the validation gate" in record["error"]
    assert record["ended_at"] is not None
    assert record["processes_completed"] == {"main": 0, "confirm": 0}
    header, rows = read_samples(run_dir)
    assert header == list(schema.SAMPLE_COLUMNS) and rows == []


def test_interrupt_marks_the_run_interrupted(tmp_path, monkeypatch):
    """Ctrl-C during the second process: the first stays, the run says ``interrupted``."""
    real_worker = runner._run_worker
    calls = []

    def worker_then_ctrl_c(python, spec, timeout):
        calls.append(spec)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_worker(python, spec, timeout)

    monkeypatch.setattr(runner, "_run_worker", worker_then_ctrl_c)
    params = tiny_params(processes=3, confirm_processes=1, cases=["alloc1"])
    with pytest.raises(KeyboardInterrupt):
        runner.run_bench(params, tmp_path)
    run_dir = only_run_dir(tmp_path, HOST)
    record = read_run_json(run_dir)
    assert record["status"] == "interrupted"
    assert record["processes_completed"] == {"main": 1, "confirm": 0}
    assert record["processes_planned"] == {"main": 3, "confirm": 1}
    _, rows = read_samples(run_dir)
    assert rows_per_process(rows) == {("main", 1): 1 * 1 * 2 * 2}
