"""Raw-data checks (kvqueue.rawdata.raw_reader) and the processed tables
(kvqueue.report.processed_build)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import write_fixture, write_run

from kvqueue import __main__ as cli
from kvqueue.ab import ab_analysis, ab_tables, validation_tables
from kvqueue.params import report_params
from kvqueue.processed import store
from kvqueue.rawdata import raw_reader
from kvqueue.report import processed_build, provenance

FAST = report_params.ReportSettings(resamples=2000)


@pytest.fixture(scope="module")
def fixture_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("raw")
    write_fixture(raw, tiny=True)
    return raw


def _files(folder: Path) -> dict[str, bytes]:
    # The tables and the manifest (cache/ holds the build cache).
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# ---------------------------------------------------------------------------------------
# determinism


def test_processed_files_byte_identical_on_rebuild(fixture_raw: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    processed_build.build(fixture_raw, a, FAST)
    processed_build.build(fixture_raw, b, FAST)
    first = _files(a)
    assert first == _files(b)
    processed_build.build(fixture_raw, a, FAST)  # rebuilding in place changes nothing either
    assert first == _files(a)
    assert {f"{n}.csv" for n in store.TABLES} | {store.MANIFEST} == set(first)
    for name, content in first.items():
        assert b"\r\n" not in content, name


def test_processed_files_do_not_depend_on_raw_location(fixture_raw: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "raw"
    copy.parent.mkdir()
    shutil.copytree(fixture_raw, copy)
    processed_build.build(fixture_raw, tmp_path / "a", FAST)
    processed_build.build(copy, tmp_path / "b", FAST)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_load_round_trip(fixture_raw: Path, tmp_path: Path) -> None:
    built = processed_build.build(fixture_raw, tmp_path, FAST)
    loaded = store.load(tmp_path)
    assert loaded.settings == FAST
    for name, spec in store.TABLES.items():
        df = loaded.table(name)
        assert list(df.columns) == list(spec), name
        assert len(df) == len(built.table(name)), name
    assert (loaded.summary["pool"] == built.summary["pool"]).all()


def test_ensure_reuses_then_rebuilds_on_change(fixture_raw: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(fixture_raw, raw)
    out = tmp_path / "proc"
    processed_build.build(raw, out, FAST)
    stamp = (out / "summary.csv").stat().st_mtime_ns
    processed_build.ensure(raw, out, FAST)
    assert (out / "summary.csv").stat().st_mtime_ns == stamp  # reused
    data = processed_build.ensure(
        raw, out, report_params.ReportSettings(resamples=2000, delta=0.02)
    )
    assert data.settings.delta == 0.02
    assert json.loads((out / store.MANIFEST).read_text())["settings"]["delta"] == 0.02


# ---------------------------------------------------------------------------------------
# content


def test_headline_is_newest_full_run_and_incomplete_run_is_named(
    fixture_raw: Path, tmp_path: Path
) -> None:
    data = processed_build.build(fixture_raw, tmp_path, FAST)
    runs = data.runs.set_index("run_id")
    assert bool(runs.loc["20261129T090000Z-cp312-bbbb", "headline"])
    assert not bool(runs.loc["20261128T090000Z-cp312-aaaa", "headline"])
    interrupted = runs.loc["20261129T120000Z-cp312-cccc"]
    assert not bool(interrupted["included"]) and not bool(interrupted["headline"])
    assert interrupted["note"] == "left out: status interrupted"
    # ...and left out of every statistic.
    for name in ("process_medians", "ratios", "summary", "order_effects"):
        assert "20261129T120000Z-cp312-cccc" not in set(data.table(name)["run_id"]), name
    note = provenance.runs_note(data)
    assert "synth-a/20261129T120000Z-cp312-cccc (status interrupted)" in note
    assert "Other included runs" in note and "20261128T090000Z-cp312-aaaa (older run" in note


def test_summary_recovers_synthetic_truth(fixture_raw: Path, tmp_path: Path) -> None:
    data = processed_build.build(fixture_raw, tmp_path, FAST)
    s = data.summary[(data.summary["phase"] == "main") & (data.summary["kind"] == "pair")]
    up = s[(s["candidate"] == "vllm==0.32.0") & (s["baseline"] == "vllm==0.31.0")]
    ours = s[(s["candidate"] == "kvqueue") & (s["baseline"] == "vllm==0.32.0")]
    assert (abs(up["reduction"] - 0.2) < 0.02).all()
    assert (abs(ours["reduction"] - 0.125) < 0.02).all()
    assert set(s["verdict"]) == {"faster"}
    gap = data.floor_gap[data.floor_gap["candidate"] == "kvqueue"]
    assert len(gap) and (abs(gap["gap_closed"] - 0.5) < 0.1).all()
    # The A/A pair exists only in synth-b and is reported beside the real rows there.
    aa = data.summary[data.summary["kind"] == "aa"]
    assert set(aa["host"]) == {"synth-b"}
    assert set(aa["candidate"]) == {"vllm==0.32.0#2"}
    b_rows = s[s["host"] == "synth-b"]
    assert b_rows["aa_half_width"].notna().all()
    assert s[s["host"] == "synth-a"]["aa_half_width"].isna().all()


def test_order_effect_warning(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_run(
        raw,
        processes=9,
        confirm_processes=0,
        samples=7,
        cases=("alloc1",),
        pools=(2048,),
        noise=0.005,
        order_effect=0.02,
    )
    data = processed_build.build(raw, tmp_path / "p", FAST)
    row = data.order_effects.iloc[0]
    assert row["effect"] == pytest.approx((1.02**3) - 1, abs=0.01)
    assert bool(row["warn"])
    assert "WARNING" in validation_tables.order_summary(data)


def test_comparisons_for_run() -> None:
    pairs = report_params.DEFAULT_PAIRS
    labels = ["vllm==0.31.0", "vllm==0.32.0", "kvqueue", "kvqueue:floor", "vllm==0.32.0#2"]
    got = ab_analysis.comparisons_for_run(labels, "vllm==0.31.0", ["kvqueue:floor"], pairs)
    assert got == [
        ("vllm==0.32.0", "vllm==0.31.0", "pair"),
        ("kvqueue", "vllm==0.32.0", "pair"),
        ("vllm==0.32.0#2", "vllm==0.32.0", "aa"),
    ]
    # No configured pair present: every candidate (not bounds, not A/A copies) vs baseline.
    other = ["a.py", "b.py", "kvqueue:floor", "a.py#2"]
    got = ab_analysis.comparisons_for_run(other, "a.py", ["kvqueue:floor"], pairs)
    assert got == [("b.py", "a.py", "pair"), ("a.py#2", "a.py", "aa")]
    assert ab_analysis.aa_original("x#2") == "x"
    assert ab_analysis.aa_original("x#1") is None
    assert ab_analysis.aa_original("git:repo@abc#def") is None


def test_runs_without_configured_pairs_are_still_compared(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    write_run(
        raw,
        sources=("a.py", "b.py"),
        factors={"a.py": 1.0, "b.py": 0.9},
        processes=5,
        confirm_processes=0,
        cases=("alloc1",),
        pools=(2048,),
    )
    data = processed_build.build(raw, tmp_path / "p", FAST)
    assert list(zip(data.summary["candidate"], data.summary["baseline"], strict=True)) == [
        ("b.py", "a.py")
    ]


# ---------------------------------------------------------------------------------------
# malformed input: one line naming the file


def _tiny_run(raw: Path) -> Path:
    return write_run(
        raw, processes=3, confirm_processes=0, samples=3, cases=("alloc1",), pools=(2048,)
    )


def _assert_names(exc: raw_reader.RawDataError, path: Path) -> None:
    msg = str(exc)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t.replace("ns_total", "ns_sum", 1), "header mismatch"),
        (lambda t: t.replace("\n1,main,alloc1,2048,", "\nx,main,alloc1,2048,", 1), "line 2"),
        (lambda t: t.replace(",main,", ",warmup,", 1), "phase not in"),
        (lambda t: t.replace(",kvqueue,", ",mystery,", 1), "not listed in run.json"),
        (lambda t: t + "1,main,alloc1\n", "not a valid CSV"),
        (lambda t: t.split("\n", 1)[0] + "\n", "no samples"),
        (lambda t: "", "empty file"),
    ],
)
def test_malformed_samples_csv_names_the_file(tmp_path: Path, mutate, needle: str) -> None:
    run = _tiny_run(tmp_path)
    path = run / "samples.csv"
    path.write_text(mutate(path.read_text()))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    _assert_names(err.value, path)
    assert needle in str(err.value)


def test_inconsistent_ns_per_cycle_and_duplicates(tmp_path: Path) -> None:
    run = _tiny_run(tmp_path)
    path = run / "samples.csv"
    lines = path.read_text().splitlines()
    fields = lines[1].split(",")
    at = lines[0].split(",").index("ns_per_cycle")
    fields[at] = str(float(fields[at]) * 2)
    path.write_text("\n".join([lines[0], ",".join(fields), *lines[2:]]) + "\n")
    with pytest.raises(raw_reader.RawDataError, match="ns_per_cycle != ns_total"):
        raw_reader.read_raw(tmp_path)
    path.write_text("\n".join([*lines, lines[1]]) + "\n")
    with pytest.raises(raw_reader.RawDataError, match="duplicate sample"):
        raw_reader.read_raw(tmp_path)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t[:-10], "invalid JSON"),
        (lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "seeds"}), "seeds"),
        (lambda t: json.dumps({**json.loads(t), "schema_version": 99}), "schema_version"),
        (lambda t: json.dumps({**json.loads(t), "baseline": "nope"}), "baseline"),
        (lambda t: json.dumps({**json.loads(t), "run_id": "other"}), "do not match the folder"),
        (lambda t: "[1, 2]", "one JSON object"),
        (
            lambda t: json.dumps({**json.loads(t), "processes_planned": {"main": "11"}}),
            "processes_planned.main must be int",
        ),
        (
            lambda t: json.dumps({**json.loads(t), "project": {"commit": "x", "dirty": "no"}}),
            "project.dirty must be bool",
        ),
    ],
)
def test_malformed_run_json_names_the_file(tmp_path: Path, mutate, needle: str) -> None:
    run = _tiny_run(tmp_path)
    path = run / "run.json"
    path.write_text(mutate(path.read_text()))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    _assert_names(err.value, path)
    assert needle in str(err.value)


def test_missing_files(tmp_path: Path) -> None:
    run = _tiny_run(tmp_path)
    (run / "samples.csv").unlink()
    with pytest.raises(raw_reader.RawDataError, match="missing") as err:
        raw_reader.read_raw(tmp_path)
    _assert_names(err.value, run / "samples.csv")
    (run / "run.json").unlink()
    with pytest.raises(raw_reader.RawDataError, match="missing") as err:
        raw_reader.read_raw(tmp_path)
    _assert_names(err.value, run / "run.json")


def test_incomplete_run_samples_are_not_read(tmp_path: Path) -> None:
    write_run(tmp_path, status="running", processes=2, confirm_processes=0, cases=("alloc1",))
    run = next(tmp_path.glob("*/*"))
    (run / "samples.csv").write_text("garbage, cut short")
    raw = raw_reader.read_raw(tmp_path)
    assert (
        not [r for r in raw.runs if r.complete]
        and len([r for r in raw.runs if not r.included]) == 1
    )


def test_cli_malformed_file_one_line_nonzero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _tiny_run(tmp_path / "raw")
    (run / "run.json").write_text("{not json")
    code = cli.main(
        [
            "report",
            "--raw-dir",
            str(tmp_path / "raw"),
            "--processed-dir",
            str(tmp_path / "p"),
            "--out",
            str(tmp_path / "r"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 2  # the only run is left out: nothing to render
    left = [line for line in out.splitlines() if line.startswith("report: left out")]
    assert left == [
        f"report: left out synth/{run.name} (unreadable): run.json: invalid JSON at line 1 "
        "column 2: Expecting property name enclosed in double quotes"
    ]
    assert err.count("\n") == 1 and "no usable run (1 left out, named above)" in err


def test_cli_no_complete_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "raw", status="failed", write_samples=False, cases=("alloc1",))
    args = ["--raw-dir", str(tmp_path / "raw"), "--processed-dir", str(tmp_path / "p")]
    code = cli.main(["report", *args, "--out", str(tmp_path / "r")])
    assert code == 2
    out, err = capsys.readouterr()
    assert "no usable run (1 left out, named above)" in err
    assert "(bench): status failed (the run did not finish)" in out


@pytest.mark.parametrize("text", ["0", "-3"])
def test_kv_regions_below_one_is_refused_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """``make report KV_REGIONS=0`` priced every run at 64 and said 64 (issue 36.6): the
    field's unset value given by hand. Refused in one line, nothing built."""
    write_run(tmp_path / "raw", cases=("alloc1",))
    monkeypatch.setenv("KVQUEUE_KV_REGIONS", text)
    args = ["--raw-dir", str(tmp_path / "raw"), "--processed-dir", str(tmp_path / "p")]
    code = cli.main(["report", "--from-env", *args, "--out", str(tmp_path / "r")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == (
        "kvqueue report: KV_REGIONS must be a whole number >= 1 (leave it unset to price each "
        f"run at the value it recorded), got {int(text)}\n"
    )
    assert not (tmp_path / "p").exists() and not (tmp_path / "r").exists()


def test_kv_regions_given_prices_every_run_and_unset_keeps_the_recorded() -> None:
    assert report_params.from_text({"kv_regions": "1"}).kv_regions == 1
    assert report_params.from_text({"kv_regions": None}).kv_regions == 0  # as recorded


# ---------------------------------------------------------------------------------------
# the real harness's output format


def test_tables_from_a_real_quick_harness_run(tmp_path: Path) -> None:
    """A real QUICK run (this project's queue and floor only: no download) goes through."""
    raw = tmp_path / "raw"
    repo = Path(__file__).resolve().parent.parent
    args = ["--host", "itest", "--quick", "--aa", "--variants", "kvqueue kvqueue:floor"]
    args += ["--cases", "alloc1", "--raw-dir", str(raw), "--no-notebook"]
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "bench", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    settings = report_params.ReportSettings(pairs=(("kvqueue:floor", "kvqueue"),), resamples=2000)
    data = processed_build.build(raw, tmp_path / "p", settings)
    assert data.runs["included"].all()
    assert set(data.summary["kind"]) == {"pair", "aa"}
    assert set(data.summary["candidate"]) == {"kvqueue:floor", "kvqueue#2"}
    # QUICK = 2 processes: far too few for a CI, so no verdict is claimed.
    assert set(data.summary["verdict"]) == {"inconclusive"}
    # A QUICK run is never a headline run (kvqueue.ab.ab_analysis.headline_runs): it stays in
    # the processed tables, named in the runs table, outside the headline tables.
    run = data.runs.iloc[0]
    assert run["protocol"] == "quick (smoke run)" and not bool(run["headline"])
    assert run["note"] == "not in the headline tables: quick (smoke run)"
    assert not ab_tables.results_table(data, ["alloc1"], headline_only=False).empty
    assert not provenance.runs_table(data).empty
