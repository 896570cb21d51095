"""One run record (``runrecord.RunRecord``), one run-folder writer (``run_folder.RunWriter``)
and run ids named by kind, for every kind of run: bench, history and policy.

Fast: nothing here starts a process. The committed raw data is the reference for the
record's key order: each committed ``run.json`` is rebuilt from its own values through
:class:`kvqueue.runrecord.RunRecord` and must come out byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import synthetic

from kvqueue import hostinfo, runrecord, schema
from kvqueue.errors import BenchError
from kvqueue.measure import run_folder
from kvqueue.params import policy_params
from kvqueue.policy import policy_collect
from kvqueue.rawdata import raw_reader

RAW = Path(__file__).resolve().parent.parent / "data" / "raw"
#: policy.csv's name and columns, as the policy run's table writes them.
POLICY_CSV = policy_collect.POLICY_TABLE.name
POLICY_COLUMNS = policy_collect.POLICY_TABLE.text([]).strip().split(",")
#: Keys the writer adds or updates after the first record, in the order they arise.
LATER = ("files", "sizing", "error")
COMMITTED = sorted(
    p for p in RAW.glob("*/*/run.json") if "launcher" in json.loads(p.read_text("utf-8"))
)


def _record_of(meta: dict[str, Any]) -> runrecord.RunRecord:
    """The record a committed run started with, from its own values."""
    named = {f for f in runrecord.RunRecord.__dataclass_fields__ if f not in ("kind", "extra")}
    written = {*named, "processes_completed", "process_info", schema.KIND_KEY, *LATER}
    return runrecord.RunRecord(
        kind=schema.run_kind(meta),
        extra={k: v for k, v in meta.items() if k not in written},
        **{k: meta[k] for k in named},
    )


def test_committed_data_covers_every_kind() -> None:
    kinds = {schema.run_kind(json.loads(p.read_text("utf-8"))) for p in COMMITTED}
    assert kinds == set(schema.RUN_KINDS)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_the_record_writes_committed_run_json_byte_for_byte(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    meta = json.loads(text)
    record = _record_of(meta).as_dict()
    # What the writer does as the run goes: counts, then the keys it adds at the end.
    record["processes_completed"] = meta["processes_completed"]
    record["process_info"] = meta["process_info"]
    for key in (k for k in meta if k in LATER):
        record[key] = meta[key]
    assert runrecord.run_json_text(record) == text
    assert _record_of(meta).to_json() == runrecord.run_json_text(_record_of(meta).as_dict())


def _record(kind: str, extra: dict[str, Any] | None = None) -> runrecord.RunRecord:
    return runrecord.RunRecord(
        kind=kind,
        run_id="r1",
        host="h",
        started_at="2026-12-01T12:00:00+00:00",
        machine={"hostname": "m"},
        python={"version": "3.11.7"},
        baseline="a",
        variants=[{"label": "a"}],
        parameters={"processes": 2},
        launcher={"pid": 1},
        seeds={"run": 1},
        project={"commit": "c"},
        processes_planned={"main": 2, "confirm": 0},
        extra=extra or {},
    )


def test_each_kind_puts_its_kind_and_keys_where_its_runs_always_had_them() -> None:
    bench = list(_record(schema.KIND_BENCH).as_dict())
    assert bench[:2] == ["schema_version", "run_id"] and schema.KIND_KEY not in bench
    assert bench[-3:] == ["processes_planned", "processes_completed", "process_info"]
    history = list(_record(schema.KIND_HISTORY, {"history": {}}).as_dict())
    assert history[-3:] == ["process_info", "kind", "history"]
    policy = list(_record(schema.KIND_POLICY, {"workload": {}, "policies": []}).as_dict())
    assert policy[0] == "kind"
    assert policy[policy.index("parameters") :][:4] == [
        "parameters",
        "workload",
        "policies",
        "launcher",
    ]
    assert set(policy) == {*bench, "kind", "workload", "policies"}


def test_the_record_is_copied_and_refuses_what_it_cannot_place() -> None:
    rec = _record(schema.KIND_BENCH)
    out = rec.as_dict()
    out["machine"]["load_avg_end"] = [1.0]
    out["processes_completed"]["main"] += 1
    assert "load_avg_end" not in rec.machine
    assert rec.as_dict()["processes_completed"] == {"main": 0, "confirm": 0}
    with pytest.raises(ValueError, match="clash"):
        _record(schema.KIND_HISTORY, {"status": "x"}).as_dict()
    with pytest.raises(ValueError, match="clash"):
        _record(schema.KIND_BENCH, {"kind": "x"}).as_dict()
    with pytest.raises(ValueError, match="unknown run kind"):
        _record("other").as_dict()


def test_start_record_fills_what_every_kind_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_folder, "now", lambda: "T0")
    monkeypatch.setattr(hostinfo, "machine_info", lambda: {"hostname": "m"})
    monkeypatch.setattr(hostinfo, "project_info", lambda: {"commit": "c"})
    rec = run_folder.start_record(
        schema.KIND_POLICY,
        "r1",
        "h",
        python={"version": "3.11.7"},
        baseline="lru",
        variants=[],
        parameters={},
        launcher_pid=42,
        seeds={},
        processes_planned={"main": 1, "confirm": 0},
        extra={"policies": ["lru"]},
    )
    assert (rec.started_at, rec.machine, rec.project) == ("T0", {"hostname": "m"}, {"commit": "c"})
    assert rec.launcher == {"pid": 42} and rec.status == "running" and rec.ended_at is None
    assert rec.extra == {"policies": ["lru"]}


# ------------------------------------------------------------------ run ids

STAMP = r"\d{8}T\d{6}Z"


def test_bench_run_ids_keep_their_shape_and_other_kinds_are_named() -> None:
    assert re.fullmatch(rf"{STAMP}-cp311-[0-9a-f]{{4}}", schema.new_run_id("cpython-311"))
    for kind in (schema.KIND_HISTORY, schema.KIND_POLICY):
        run_id = schema.new_run_id("cpython-311", kind)
        assert re.fullmatch(rf"{STAMP}-{kind}-cp311-[0-9a-f]{{4}}", run_id), run_id


def test_named_and_old_run_folders_are_both_read(tmp_path: Path) -> None:
    """A reader only compares a run id with its folder's name: both shapes read."""
    for run_id in ("20261201T120000Z-cp311-ab12", "20261201T120000Z-history-cp311-ab12"):
        folder = schema.run_path(tmp_path, "h", run_id)
        folder.mkdir(parents=True)
        (folder / schema.RUN_JSON).write_text(runrecord.run_json_text({"run_id": run_id}))
        assert run_folder.read_run_json(folder) == {"run_id": run_id}
    found = [p.name for p in raw_reader.run_dirs(tmp_path)]
    assert sorted(found) == ["20261201T120000Z-cp311-ab12", "20261201T120000Z-history-cp311-ab12"]


# ------------------------------------------------------------------ the writer


def _sealed(run_dir: Path, name: str) -> dict[str, Any]:
    record = json.loads((run_dir / schema.RUN_JSON).read_text("utf-8"))
    data = (run_dir / name).read_bytes()
    assert record[schema.FILES_KEY][name]["sha256"] == run_folder.sha256_bytes(data)
    return record


def test_one_writer_serves_samples_and_policy_rows(tmp_path: Path) -> None:
    bench = run_folder.create_run(tmp_path, _record(schema.KIND_BENCH), run_folder.SAMPLES)
    sample = ["alloc1", 64, "a", 0, 0, 10, 1, 1000, 100.0, 0]
    bench.add_process("main", 1, [sample], {"process": 1})
    record = _sealed(bench.dir, schema.SAMPLES_CSV)
    assert record[schema.FILES_KEY][schema.SAMPLES_CSV]["rows"] == 1
    assert record["processes_completed"] == {"main": 1, "confirm": 0}
    lines = (bench.dir / schema.SAMPLES_CSV).read_text("utf-8").splitlines()
    assert lines == [",".join(schema.SAMPLE_COLUMNS), "1,main,alloc1,64,a,0,0,10,1,1000,100.000,0"]

    policy_rec = _record(schema.KIND_POLICY, {"workload": {}, "policies": ["lru"]})
    policy = run_folder.create_run(
        tmp_path,
        runrecord.RunRecord(**{**policy_rec.__dict__, "host": "p"}),
        policy_collect.POLICY_TABLE,
    )
    row = dict.fromkeys(POLICY_COLUMNS[1:], 0) | {"policy": "lru", "age_to": 0.5}
    policy.add_process("main", 1, [row], {"process": 1})
    policy.add_process("main", 2, [row], {"process": 2})
    record = _sealed(policy.dir, POLICY_CSV)
    assert record[schema.FILES_KEY][POLICY_CSV]["rows"] == 2
    assert not (policy.dir / schema.SAMPLES_CSV).exists()
    text = (policy.dir / POLICY_CSV).read_text("utf-8").splitlines()
    assert text[0].split(",") == POLICY_COLUMNS
    assert [line.split(",")[0] for line in text[1:]] == ["1", "2"]
    assert "0.500000" in text[1]


def test_a_run_folder_is_created_once(tmp_path: Path) -> None:
    first = run_folder.create_run(tmp_path, _record(schema.KIND_BENCH), run_folder.SAMPLES)
    before = {p.name: p.read_bytes() for p in first.dir.iterdir()}
    with pytest.raises(BenchError, match="exists already"):
        run_folder.create_run(tmp_path, _record(schema.KIND_BENCH), run_folder.SAMPLES)
    assert {p.name: p.read_bytes() for p in first.dir.iterdir()} == before


def test_a_policy_run_writes_a_named_sealed_folder_the_report_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policy run through the shared writer, its worker faked: kind first, the run id
    named by kind, ``policy.csv`` sealed, read back as complete by the policy report."""
    monkeypatch.setenv("KVQUEUE_LOCK_FILE", str(tmp_path / "lock"))
    p = policy_params.from_text({"host": "h", "processes": "2", "variant": "kvqueue"})

    def fake_child(python: str, args: list[str], spec: dict, timeout: float, what: str) -> dict:
        if args == ["--check"]:
            return {"ok": True, "provenance": {"label": "kvqueue"}, "sha256": "s"}
        rows = [
            dict.fromkeys(POLICY_COLUMNS[1:], 1) | {"policy": n, "window": "1"}
            for n in spec["policies"]
        ]
        return {"rows": rows, "cpu": 0, "pinned": True, "note": "", "seconds": 0.1}

    monkeypatch.setattr(policy_collect, "_child", fake_child)
    py = {"executable": "python3", "version": "3.11.7"}
    run_id = schema.new_run_id("cpython-311", schema.KIND_POLICY)
    run_dir = policy_collect.run_policy(p, py, tmp_path / "raw", run_id)
    assert run_dir.name == run_id and "-policy-" in run_id
    record = _sealed(run_dir, POLICY_CSV)
    assert next(iter(record)) == "kind" and record["status"] == "complete"
    assert record["processes_completed"] == {"main": 2, "confirm": 0}
    (run,) = synthetic.policy_runs(tmp_path / "raw")
    assert run["altered"] is None and run["rows"] is not None
