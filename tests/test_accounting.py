"""Every run folder is accounted for (kvqueue.rawdata.run_ledger, kvqueue.report.processed_build):
the silent cases of issue 18 each give one named line, the rest still builds, and
``make report``'s scope (RAW_DIR, HOSTS, RUNS) and per-run cache behave.

Runs are tmp_path copies of committed runs (data/raw is never edited) or written by
tests/synthetic.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from synthetic import write_run

from kvqueue.params import report_params
from kvqueue.processed import store
from kvqueue.rawdata import raw_reader, run_ledger
from kvqueue.report import build, build_cache, processed_build, provenance

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "data" / "raw"
HOST = "epyc-vm-2core"
HISTORY = "20261201T125150Z-cp312-7f08"
POLICY = "20261201T130745Z-cp312-8cc1"
FAST = report_params.ReportSettings(resamples=2000)


def _copy(raw: Path, run_id: str, host: str = HOST) -> Path:
    dest = raw / host / run_id
    shutil.copytree(RAW / host / run_id, dest)
    return dest


def _flip_one_byte(path: Path) -> None:
    """Change one digit of the file's last line (one byte, same length)."""
    data = bytearray(path.read_bytes())
    at = max(i for i, b in enumerate(data) if chr(b).isdigit())
    data[at] = ord("1") if data[at] != ord("1") else ord("2")
    path.write_bytes(bytes(data))


def _set_status(run: Path, status: str) -> None:
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    meta["status"] = status
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")


@pytest.fixture
def question_runs(tmp_path: Path) -> Path:
    """A raw folder with one committed history run and one committed policy run."""
    raw = tmp_path / "raw"
    _copy(raw, HISTORY)
    _copy(raw, POLICY)
    return raw


def _row(data: store.Processed, run_id: str) -> dict[str, object]:
    rows = data.ledger[data.ledger["run_id"] == run_id].to_dict("records")
    assert len(rows) == 1, rows
    return rows[0]


def test_history_and_policy_runs_build_without_any_bench_run(
    question_runs: Path, tmp_path: Path
) -> None:
    data = processed_build.build(question_runs, tmp_path / "p", FAST)
    assert data.runs.empty
    assert len(data.history) and len(data.policy)
    assert _row(data, HISTORY)["use"] == run_ledger.HEADLINE
    assert _row(data, POLICY)["use"] == run_ledger.HEADLINE
    assert run_ledger.left_out_lines(data.ledger) == []
    table = provenance.runs_table(data)
    assert set(table["Kind"]) == {"history", "policy"}
    assert "History and policy runs" in provenance.runs_note(data)


@pytest.mark.parametrize(
    ("run_id", "file", "reason"),
    [
        (HISTORY, "samples.csv", "altered: samples.csv sha256 differs from run.json"),
        (POLICY, "policy.csv", "altered: policy.csv sha256 differs from run.json"),
    ],
)
def test_one_byte_edited_is_left_out_and_named(
    question_runs: Path, tmp_path: Path, run_id: str, file: str, reason: str
) -> None:
    _flip_one_byte(question_runs / HOST / run_id / file)
    data = processed_build.build(question_runs, tmp_path / "p", FAST)
    row = _row(data, run_id)
    assert row["use"] == run_ledger.LEFT_OUT
    assert str(row["reason"]).startswith(reason)
    (line,) = run_ledger.left_out_lines(data.ledger)
    assert line.startswith(f"left out {HOST}/{run_id} (")
    assert reason in line
    # The other run still counts, and the edited one is out of its table.
    other = POLICY if run_id == HISTORY else HISTORY
    assert _row(data, other)["use"] == run_ledger.HEADLINE
    assert run_id not in set(data.history["run_id"]) | set(data.policy["run_id"])
    assert f"{HOST}/{run_id} (" in provenance.runs_note(data)


@pytest.mark.parametrize("status", ["interrupted", "running", "failed"])
@pytest.mark.parametrize("run_id", [HISTORY, POLICY])
def test_interrupted_run_is_left_out_and_named(
    question_runs: Path, tmp_path: Path, run_id: str, status: str
) -> None:
    _set_status(question_runs / HOST / run_id, status)
    data = processed_build.build(question_runs, tmp_path / "p", FAST)
    row = _row(data, run_id)
    assert (row["use"], row["status"]) == (run_ledger.LEFT_OUT, status)
    assert run_ledger.left_out_lines(data.ledger) == [
        f"left out {HOST}/{run_id} ({row['kind']}): status {status} (the run did not finish)"
    ]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda run: (run / "run.json").unlink(), "run.json: missing"),
        (
            lambda run: (run / "run.json").write_text("{not json", encoding="utf-8"),
            "run.json: invalid JSON at line 1",
        ),
    ],
)
def test_unreadable_folder_is_named_and_the_rest_builds(
    question_runs: Path, tmp_path: Path, damage, reason: str
) -> None:
    bad = write_run(question_runs, host="synth", processes=5, confirm_processes=0)
    damage(bad)
    data = processed_build.build(question_runs, tmp_path / "p", FAST)
    row = _row(data, bad.name)
    assert (row["kind"], row["use"]) == (run_ledger.UNREADABLE, run_ledger.LEFT_OUT)
    assert str(row["reason"]).startswith(reason)
    assert _row(data, HISTORY)["use"] == run_ledger.HEADLINE
    (line,) = run_ledger.left_out_lines(data.ledger)
    assert line.startswith(f"left out synth/{bad.name} (unreadable): {reason}")


def test_report_with_only_left_out_runs_names_each_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = tmp_path / "raw"
    run = _copy(raw, HISTORY)
    _set_status(run, "interrupted")
    empty = write_run(raw, host="synth", processes=5, confirm_processes=0)
    (empty / "run.json").unlink()
    code = build.report(raw, tmp_path / "p", tmp_path / "out", FAST)
    out, err = capsys.readouterr()
    assert code == 2
    assert f"report: left out {HOST}/{HISTORY} (history): status interrupted" in out
    assert f"report: left out synth/{empty.name} (unreadable): run.json: missing" in out
    assert "no usable run (2 left out, named above)" in err
    assert not (tmp_path / "out").exists()


def test_a_scope_entry_that_names_nothing_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HOSTS="alpha typo" or a RUNS list with one typo: refused in one line naming the
    entry and the nearest name, nothing written (it used to drop the typo silently)."""
    raw = tmp_path / "raw"
    a = write_run(raw, host="alpha", run_id="20261129T100000Z-cp312-000a", processes=5)
    for settings, words in (
        (report_params.ReportSettings(hosts=("alpha", "alpah")), "HOSTS names alpah"),
        (report_params.ReportSettings(runs=(a.name, a.name[:-1] + "b")), "did you mean"),
    ):
        with pytest.raises(raw_reader.RawDataError, match=words):
            processed_build.build(raw, tmp_path / "p", settings)
        code = build.report(raw, tmp_path / "p", tmp_path / "out", settings)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and words in err[0], err
        assert not (tmp_path / "out").exists()


def test_scope_hosts_and_runs(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    a = write_run(raw, host="alpha", run_id="20261129T100000Z-cp312-000a", processes=5)
    b = write_run(raw, host="beta", run_id="20261129T100000Z-cp312-000b", processes=5, seed=2)
    only_beta = report_params.ReportSettings(resamples=2000, hosts=("beta",))
    data = processed_build.build(raw, tmp_path / "p", only_beta)
    assert list(data.ledger["run_id"]) == [b.name]
    only_a = report_params.ReportSettings(resamples=2000, runs=(a.name,))
    data = processed_build.build(raw, tmp_path / "p", only_a)
    assert list(data.ledger["run_id"]) == [a.name]
    assert list(data.runs["run_id"]) == [a.name]
    # The manifest records the scope: the other scope rebuilds, the same one is reused.
    assert processed_build.ensure(raw, tmp_path / "p", only_a).manifest == data.manifest
    assert processed_build.ensure(raw, tmp_path / "p", only_beta).ledger["run_id"].tolist() == [
        b.name
    ]


def test_per_run_cache_is_reused_and_byte_identical(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_run(raw, host="synth", run_id="20261129T100000Z-cp312-0001", processes=5)
    lines: list[str] = []
    processed_build.build(raw, tmp_path / "cold", FAST, progress=lines.append)
    assert any(line.startswith("processed: analysed synth/") for line in lines)
    write_run(raw, host="synth", run_id="20261129T110000Z-cp312-0002", processes=5, seed=3)
    lines.clear()
    warm = tmp_path / "cold"
    processed_build.build(raw, warm, FAST, progress=lines.append)
    assert "processed: reused synth/20261129T100000Z-cp312-0001" in lines
    assert any(line.startswith("processed: analysed synth/20261129T110000Z") for line in lines)
    fresh = tmp_path / "fresh"
    processed_build.build(raw, fresh, FAST)
    for name in store.TABLES:
        assert (warm / f"{name}.csv").read_bytes() == (fresh / f"{name}.csv").read_bytes(), name
    # Other analysis settings are another key: the run is analysed again.
    lines.clear()
    other = report_params.ReportSettings(resamples=2000, confidence=0.9)
    processed_build.build(raw, warm, other, progress=lines.append)
    assert not any(line.startswith("processed: reused") for line in lines)


def test_truncated_cache_file_is_recomputed(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    run = write_run(raw, host="synth", processes=5)
    out = tmp_path / "p"
    first = processed_build.build(raw, out, FAST)
    (cache,) = (out / build_cache.FOLDER).glob(f"run-synth-{run.name}-*.pkl")
    cache.write_bytes(cache.read_bytes()[:100])
    lines: list[str] = []
    again = processed_build.build(raw, out, FAST, progress=lines.append)
    assert any(line.startswith(f"processed: analysed synth/{run.name}") for line in lines)
    assert again.summary.equals(first.summary)


@pytest.mark.slow
def test_report_renders_history_and_policy_runs_without_bench_runs(
    question_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = question_runs / "synth" / "20261129T100000Z-cp312-dead"
    bad.mkdir(parents=True)  # a folder without run.json: named, not fatal
    out = tmp_path / "out"
    code = build.report(question_runs, tmp_path / "p", out, FAST)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"report: left out synth/{bad.name} (unreadable): run.json: missing" in printed
    page = (out / "report.html").read_text(encoding="utf-8")
    for run_id in (HISTORY, POLICY, bad.name):
        assert run_id in page
    assert "report: done in" in printed


def test_the_per_run_cache_of_older_builds_is_removed(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_run(raw, host="synth", processes=5)
    old = tmp_path / "p" / "runs" / "synth" / "x" / "samples.pkl"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an older build's cache")
    processed_build.build(raw, tmp_path / "p", FAST)
    assert not (tmp_path / "p" / "runs").exists()
    assert list((tmp_path / "p" / build_cache.FOLDER).glob("run-synth-*.pkl"))
