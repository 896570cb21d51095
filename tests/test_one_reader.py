"""One raw reader (issue 25): :func:`kvqueue.rawdata.raw_reader.read_run` reads and checks
every recorded file of a policy or counts run once, and the policy and counts analyses
parse the bytes it hands on (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`): no second
read, no second hash. What the reader and the analyses refuse still reaches the ledger
with its reason: an edited file, a missing file, a bad header, a row count that differs
from run.json.

Built from copies of committed policy and counts runs (no simulation, no valgrind).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvqueue import schema
from kvqueue.params.report_params import ReportSettings
from kvqueue.policy import policy_analysis
from kvqueue.rawdata import integrity, raw_reader
from kvqueue.report import processed_build
from kvqueue.stats import count_figures

RAW = Path(__file__).resolve().parent.parent / "data" / "raw"
HOST = "xeon-vm-2core"
#: A committed steady-state policy run and an A/B counts run.
POLICY_RUN = "20261201T195852Z-policy-cp311-bef4"
COUNTS_RUN = "20261201T180338Z-counts-cp311-ce4b"
FAST = ReportSettings(resamples=2000)


def _copy(tmp_path: Path, *run_ids: str) -> Path:
    raw = tmp_path / "raw"
    for run_id in run_ids:
        shutil.copytree(RAW / HOST / run_id, raw / HOST / run_id)
    return raw


def _reseal(run_dir: Path, name: str, text: str, rows: int | None = None) -> None:
    """Write ``name`` and record its new sha256 (and ``rows``) in run.json, as if the run
    had written it: the digests match, so only the file's own checks can refuse it."""
    (run_dir / name).write_text(text, encoding="utf-8")
    meta = json.loads((run_dir / schema.RUN_JSON).read_text(encoding="utf-8"))
    entry = meta[schema.FILES_KEY][name]
    entry["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    if rows is not None:
        entry["rows"] = rows
    (run_dir / schema.RUN_JSON).write_text(json.dumps(meta, indent=1), encoding="utf-8")


def _ledger(raw: Path, tmp_path: Path) -> dict[str, tuple[str, str]]:
    data = processed_build.build(raw, tmp_path / "processed", FAST)
    return {r.run_id: (r.use, r.reason) for r in data.ledger.itertuples()}


# ---------------------------------------------------------------------------------------
# read once


def test_the_reader_hands_on_the_checked_bytes_of_every_recorded_file(tmp_path: Path) -> None:
    raw = _copy(tmp_path, POLICY_RUN, COUNTS_RUN)
    runs = {r.run_id: r for r in raw_reader.read_raw(raw).runs}
    for run_id, name in ((POLICY_RUN, schema.POLICY_AGE_CSV), (COUNTS_RUN, schema.COUNTS_CSV)):
        run = runs[run_id]
        assert run.included and run.integrity == integrity.SEALED
        assert set(run.recorded) == set(run.meta[schema.FILES_KEY])
        assert run.recorded[name] == (raw / HOST / run_id / name).read_bytes()


def test_the_analyses_do_not_read_the_files_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read once: after read_raw the files may go, the analyses still give every row;
    and while they run, nothing is read from disk or hashed."""
    raw = _copy(tmp_path, POLICY_RUN, COUNTS_RUN)
    found = raw_reader.read_raw(raw)
    policy_from_disk = policy_analysis.read_policy_run(
        raw / HOST / POLICY_RUN, found.of_kind(schema.KIND_POLICY).runs[0].meta
    )
    for run in found.runs:
        for name in run.recorded:
            (run.path / name).unlink()
    reads: list[str] = []
    hashes: list[int] = []
    real_read_bytes = Path.read_bytes
    real_sha256 = hashlib.sha256

    def counted_read(path: Path) -> bytes:
        if path.is_relative_to(raw):  # not what importing scipy reads
            reads.append(str(path))
        return real_read_bytes(path)

    def counted_sha256(*args: Any) -> Any:
        hashes.append(1)
        return real_sha256(*args)

    monkeypatch.setattr(Path, "read_bytes", counted_read)
    monkeypatch.setattr(hashlib, "sha256", counted_sha256)
    runs, problems = policy_analysis.read_runs(found.of_kind(schema.KIND_POLICY).included)
    table = policy_analysis.analyze(runs, FAST)
    counts, left = count_figures.analyze(found.of_kind(schema.KIND_COUNTS).included, FAST.pairs)
    assert reads == [] and hashes == []
    assert not problems and not left
    assert len(table) and set(table["run_id"]) == {POLICY_RUN}
    assert runs[0]["rows"].equals(policy_from_disk["rows"])
    assert len(counts["counts"]) and set(counts["counts"]["run_id"]) == {COUNTS_RUN}


def test_a_run_looked_at_alone_is_read_and_checked_by_the_same_rule(tmp_path: Path) -> None:
    raw = _copy(tmp_path, POLICY_RUN, COUNTS_RUN)
    (run,) = raw_reader.read_raw(raw, run_ids=(COUNTS_RUN,)).runs
    got = count_figures.read_count_run(run.path, run.meta)
    assert isinstance(got, count_figures.CountRun) and got.rows
    csv_path = run.path / schema.COUNTS_CSV
    csv_path.write_text(csv_path.read_text() + "\n")
    assert count_figures.read_count_run(run.path, run.meta) == (
        "counts.csv sha256 differs from run.json (edited after the run)"
    )


# ---------------------------------------------------------------------------------------
# every refusal still named


def _edit(name: str) -> Callable[[Path], None]:
    def edit(run_dir: Path) -> None:
        path = run_dir / name
        path.write_text(path.read_text().replace("\n", "\r\n", 1))

    return edit


def _drop(name: str) -> Callable[[Path], None]:
    return lambda run_dir: (run_dir / name).unlink()


def _bad_policy_header(run_dir: Path) -> None:
    text = (run_dir / schema.POLICY_AGE_CSV).read_text()
    _reseal(run_dir, schema.POLICY_AGE_CSV, "x" + text)


def _policy_rows_off_by_one(run_dir: Path) -> None:
    text = (run_dir / schema.POLICY_AGE_CSV).read_text()
    rows = text.count("\n") - 1
    _reseal(run_dir, schema.POLICY_AGE_CSV, text, rows=rows + 1)


def _policy_row_lost(run_dir: Path) -> None:
    lines = (run_dir / schema.POLICY_AGE_CSV).read_text().splitlines(keepends=True)
    _reseal(run_dir, schema.POLICY_AGE_CSV, "".join(lines[:-1]), rows=len(lines) - 2)


def _bad_counts_header(run_dir: Path) -> None:
    text = (run_dir / schema.COUNTS_CSV).read_text()
    _reseal(run_dir, schema.COUNTS_CSV, "x" + text)


@pytest.mark.parametrize(
    ("run_id", "change", "reason"),
    [
        (
            POLICY_RUN,
            _edit(schema.POLICY_AGE_CSV),
            "altered: policy_age.csv sha256 differs from run.json (edited after the run)",
        ),
        (
            POLICY_RUN,
            _drop(schema.POLICY_AGE_CSV),
            "altered: policy_age.csv is missing, run.json records its sha256",
        ),
        (
            POLICY_RUN,
            _bad_policy_header,
            "unreadable: policy_age.csv: header must be " + ",".join(schema.POLICY_AGE_COLUMNS),
        ),
        (
            POLICY_RUN,
            _policy_rows_off_by_one,
            "altered: policy_age.csv does not hold every process × policy × window once",
        ),
        (
            POLICY_RUN,
            _policy_row_lost,
            "altered: policy_age.csv does not hold every process × policy × window once",
        ),
        (
            COUNTS_RUN,
            _edit(schema.COUNTS_CSV),
            "altered: counts.csv sha256 differs from run.json (edited after the run)",
        ),
        (
            COUNTS_RUN,
            _drop(schema.COUNTS_CSV),
            "altered: counts.csv is missing, run.json records its sha256",
        ),
        (
            COUNTS_RUN,
            _bad_counts_header,
            f"counts.csv columns are not {', '.join(schema.COUNT_COLUMNS)}",
        ),
    ],
    ids=[
        "policy-edited",
        "policy-missing",
        "policy-header",
        "policy-row-count",
        "policy-row-lost",
        "counts-edited",
        "counts-missing",
        "counts-header",
    ],
)
def test_a_refused_file_is_left_out_and_named(
    tmp_path: Path, run_id: str, change: Callable[[Path], None], reason: str
) -> None:
    raw = _copy(tmp_path, run_id)
    assert _ledger(raw, tmp_path / "before")[run_id][0] == "headline"
    change(raw / HOST / run_id)
    assert _ledger(raw, tmp_path / "after")[run_id] == ("left out", reason)
