"""Evidence you can trust: the reader's integrity checks of raw runs (kvqueue.rawdata.raw_reader),
the headline rule and the flags of the runs table (kvqueue.ab.ab_analysis), git state and the
manifest (kvqueue.report.processed_build).

Runs are written by tests/synthetic.py and then tampered with. ``seal`` adds the digests
that a schema-2 runner records (``files`` in run.json, see kvqueue/measure/run_folder.py);
``as_v1`` turns a run into a schema-1 one (no digests), like the committed runs.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from synthetic import write_fixture, write_run

from kvqueue import schema
from kvqueue.ab import ab_analysis
from kvqueue.params import report_params
from kvqueue.processed import store
from kvqueue.rawdata import git_state, integrity, raw_reader
from kvqueue.report import processed_build

FAST = report_params.ReportSettings(resamples=1000)
REPO_RAW = Path(__file__).resolve().parent.parent / "data" / "raw"
#: 11 + 9 processes like the default protocol, few cases/pools/samples (rows are cheap).
SMALL = {
    "processes": 11,
    "confirm_processes": 9,
    "samples": 3,
    "cases": ("alloc1", "mix"),
    "confirm_cases": ("alloc1",),
    "pools": (2048,),
}
#: The full protocol (every case, both pools, MIN_PROCESSES processes), small otherwise.
FULL = {"processes": 6, "confirm_processes": 0, "samples": 2}
NOT_SEALED = "samples.csv sha256 differs from run.json (edited after the run)"


# ---------------------------------------------------------------------------------------
# helpers


def edit_json(run: Path, change: Callable[[dict], None]) -> None:
    path = run / "run.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    change(meta)
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def seal(run: Path) -> Path:
    """Record the digests of the run's files in its run.json, as the schema-2 runner does."""
    data = (run / "samples.csv").read_bytes()
    files = {
        "samples.csv": {
            "sha256": hashlib.sha256(data).hexdigest(),
            "rows": data.count(b"\n") - 1,
        }
    }
    if (run / "bench.ipynb").is_file():
        files["bench.ipynb"] = {
            "sha256": hashlib.sha256((run / "bench.ipynb").read_bytes()).hexdigest()
        }
    edit_json(run, lambda m: m.update(schema_version=schema.SCHEMA_VERSION, files=files))
    return run


def as_v1(run: Path) -> Path:
    """Make the run a schema-1 run: no digests (like the committed runs)."""

    def change(meta: dict) -> None:
        meta["schema_version"] = 1
        meta.pop("files", None)

    edit_json(run, change)
    # Schema 1 wrote no epoch column.
    path = run / "samples.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].endswith(",epoch")
    path.write_text("".join(ln.rsplit(",", 1)[0] + "\n" for ln in lines), encoding="utf-8")
    return run


def read_rows(run: Path) -> tuple[list[str], list[list[str]]]:
    with (run / "samples.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def write_rows(run: Path, header: list[str], rows: list[list[str]]) -> None:
    with (run / "samples.csv").open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(header)
        out.writerows(rows)


def edit_rows(run: Path, change: Callable[[list[str], list[list[str]]], list[list[str]]]) -> None:
    header, rows = read_rows(run)
    write_rows(run, header, change(header, rows))


def runs_of(raw: Path, git: dict[str, str] | None = None) -> pd.DataFrame:
    checked = git_state.with_git_state(raw_reader.read_raw(raw), git)
    return ab_analysis.runs_table(checked, git).set_index("run_id")


def scale_kvqueue(header: list[str], rows: list[list[str]]) -> list[list[str]]:
    """The issue's edit: kvqueue's ns_total and ns_per_cycle times 0.7 (consistently)."""
    col = {c: i for i, c in enumerate(header)}
    for row in rows:
        if row[col["variant"]] == "kvqueue":
            total = round(int(row[col["ns_total"]]) * 0.7)
            units = int(row[col["loops"]]) * int(row[col["ops_per_loop"]])
            row[col["ns_total"]] = str(total)
            row[col["ns_per_cycle"]] = f"{total / units:.4f}"
    return rows


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------------------------------
# 1. edited raw data: digests


def test_scaled_samples_of_a_sealed_run_are_altered_and_left_out(tmp_path: Path) -> None:
    """ns_total (and ns_per_cycle) of kvqueue x 0.7 in the newest run: before, that run
    was the headline (reduction ~0.39 instead of the true 0.125), without a warning."""
    raw = tmp_path / "raw"
    older = seal(write_run(raw, run_id="20261128T090000Z-cp312-aaaa", seed=1, **FULL))
    newer = seal(
        write_run(
            raw,
            run_id="20261129T090000Z-cp312-bbbb",
            started_at="2026-11-29T11:00:00+00:00",
            seed=2,
            **FULL,
        )
    )
    edit_rows(newer, scale_kvqueue)
    data = processed_build.build(raw, tmp_path / "p", FAST)
    runs = data.runs.set_index("run_id")
    bad = runs.loc[newer.name]
    assert not bool(bad["included"]) and not bool(bad["headline"])
    assert bad["note"] == f"left out: altered: {NOT_SEALED}"
    assert bad["integrity"] == f"altered: {NOT_SEALED}"
    assert runs.loc[older.name, "integrity"] == "sealed"
    assert bool(runs.loc[older.name, "headline"])
    for name in ("process_medians", "ratios", "summary", "order_effects"):
        assert newer.name not in set(data.table(name)["run_id"]), name
    s = data.summary
    head = s[
        s["headline"]
        & (s["phase"] == "main")
        & (s["case"] == "alloc1")
        & (s["pool"] == 2048)
        & (s["candidate"] == "kvqueue")
    ]
    assert len(head) == 1 and abs(float(head["reduction"].iloc[0]) - 0.125) < 0.03


def test_samples_cut_at_a_row_boundary(tmp_path: Path) -> None:
    """58 % of the rows gone: before, accepted as complete ("8/8 processes")."""
    raw = tmp_path / "raw"
    sealed = seal(write_run(raw, run_id="20261129T090000Z-cp312-0001", seed=1, **SMALL))
    v1 = as_v1(write_run(raw, run_id="20261129T090000Z-cp312-0002", seed=2, **SMALL))
    resealed = write_run(raw, run_id="20261129T090000Z-cp312-0003", seed=3, **SMALL)
    for run in (sealed, v1, resealed):
        edit_rows(run, lambda h, rows: rows[: round(len(rows) * 0.42)])
    seal(resealed)  # digests recomputed after the cut: the plan check still sees it
    runs = runs_of(raw)
    assert not runs["included"].any()
    assert runs.loc[sealed.name, "note"] == f"left out: altered: {NOT_SEALED}"
    cut = "samples.csv has 7 main process(es) (1-7), run.json counts 11 completed"
    assert runs.loc[v1.name, "note"] == f"left out: altered: {cut}"
    assert runs.loc[resealed.name, "note"] == f"left out: altered: {cut}"


def test_process_appended_again_as_process_12(tmp_path: Path) -> None:
    """Process 1's rows again as process 12: before, n_processes 12 (run.json: 11)."""
    raw = tmp_path / "raw"
    run = as_v1(write_run(raw, **SMALL))

    def append(header: list[str], rows: list[list[str]]) -> list[list[str]]:
        again = [["12", *r[1:]] for r in rows if r[0] == "1" and r[1] == "main"]
        return rows + again

    edit_rows(run, append)
    runs = runs_of(raw)
    assert runs.loc[run.name, "note"] == (
        "left out: altered: samples.csv has 12 main process(es) (1-12), run.json counts "
        "11 completed"
    )
    assert runs.loc[run.name, "integrity"].startswith("altered: ")


def test_rows_recorded_in_run_json_must_match(tmp_path: Path) -> None:
    run = seal(write_run(tmp_path, **SMALL))
    edit_json(run, lambda m: m["files"]["samples.csv"].update(rows=999))
    note = runs_of(tmp_path).loc[run.name, "note"]
    assert note == "left out: altered: samples.csv has 372 rows, run.json records 999"


def test_notebook_digest(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    names = [f"20261129T0900{i:02d}Z-cp312-000{i}" for i in range(4)]
    runs = [write_run(raw, run_id=n, seed=i + 1, **SMALL) for i, n in enumerate(names)]
    for run in runs:
        (run / "bench.ipynb").write_text('{"cells": []}\n', encoding="utf-8")
    unsealed_nb = runs[0]
    seal(unsealed_nb)
    edit_json(unsealed_nb, lambda m: m["files"].pop("bench.ipynb"))
    ok, edited, removed = (seal(r) for r in runs[1:])
    (edited / "bench.ipynb").write_text('{"cells": [1]}\n', encoding="utf-8")
    (removed / "bench.ipynb").unlink()
    table = runs_of(raw)
    # A notebook without a recorded digest is noted, not held against the run.
    assert table.loc[unsealed_nb.name, "integrity"] == "sealed (notebook not sealed)"
    assert bool(table.loc[unsealed_nb.name, "included"])
    assert table.loc[ok.name, "integrity"] == "sealed" and bool(table.loc[ok.name, "included"])
    assert table.loc[edited.name, "note"] == (
        "left out: altered: bench.ipynb sha256 differs from run.json (edited after the run)"
    )
    assert table.loc[removed.name, "note"] == (
        "left out: altered: bench.ipynb is missing, run.json records its sha256"
    )


def test_unsealed_runs_are_marked_and_kept(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    v1 = as_v1(write_run(raw, run_id="20261129T090000Z-cp312-0001", **SMALL))
    v2 = write_run(raw, run_id="20261129T090000Z-cp312-0002", seed=2, **SMALL)  # no files
    table = runs_of(raw)
    assert table.loc[v1.name, "integrity"] == "unsealed (schema 1)"
    assert table.loc[v2.name, "integrity"] == "unsealed (run.json records no digests)"
    assert table["included"].all()


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ([1], "files must be an object"),
        ({"samples.csv": {"sha256": "xyz", "rows": 1}}, "files.samples.csv.sha256 must be"),
        ({"samples.csv": {"sha256": "0" * 64, "rows": "1"}}, "files.samples.csv.rows must be"),
        ({"bench.ipynb": "abc"}, "files.bench.ipynb must be an object"),
    ],
)
def test_malformed_digest_record_is_one_line_naming_run_json(
    tmp_path: Path, files: object, needle: str
) -> None:
    run = write_run(tmp_path, **SMALL)
    edit_json(run, lambda m: m.update(files=files))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    msg = one_line(err.value)
    assert msg.startswith(str(run / "run.json")) and needle in msg


# ---------------------------------------------------------------------------------------
# 1. the samples against the run's own plan


def _set(col: str, value: str, where: Callable[[dict[str, str]], bool]):
    def change(header: list[str], rows: list[list[str]]) -> list[list[str]]:
        idx = header.index(col)
        for row in rows:
            if where(dict(zip(header, row, strict=True))):
                row[idx] = value
                break
        return rows

    return change


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda h, rows: rows[:50] + rows[51:],
            "samples.csv lacks 1 of the 264 main samples of the run's plan (11 processes x "
            "2 cases x 1 pools x 4 variants x 3 samples) (first incomplete: process 3)",
        ),
        (
            _set("case", "mix", lambda r: r["phase"] == "confirm"),
            "samples.csv has confirm rows with a case that its plan does not time (alloc1): "
            "case mix",
        ),
        (
            _set("sample", "7", lambda r: r["sample"] == "2"),
            "samples.csv has main rows with a sample outside 0-2: sample 7",
        ),
        (
            _set("order_position", "1", lambda r: r["order_position"] == "0"),
            "samples.csv: order positions of the round main process 1, alloc1, pool 2048, "
            "sample 0 are not a permutation of 0-3",
        ),
    ],
)
def test_samples_that_break_the_plan_are_altered(tmp_path: Path, change, problem: str) -> None:
    run = write_run(tmp_path, **SMALL)
    edit_rows(run, change)
    seal(run)  # even with matching digests
    table = runs_of(tmp_path)
    assert table.loc[run.name, "note"] == f"left out: altered: {problem}"
    assert not bool(table.loc[run.name, "included"])


def test_complete_run_must_count_every_planned_process(tmp_path: Path) -> None:
    run = write_run(tmp_path, **SMALL)
    edit_json(run, lambda m: m["processes_completed"].update(main=10))
    assert runs_of(tmp_path).loc[run.name, "note"] == (
        "left out: altered: status complete, but run.json counts 10 of 11 planned main "
        "processes as completed"
    )


def test_confirm_cases_by_schema_version(tmp_path: Path) -> None:
    """v2 records the confirm cases as timed; v1 recorded them as given (runner rule)."""
    raw = tmp_path / "raw"
    design = {**SMALL, "cases": ("alloc1", "mix"), "confirm_cases": ("alloc1",)}
    v1 = write_run(raw, run_id="20261129T090000Z-cp312-0001", **design)
    v2 = write_run(raw, run_id="20261129T090000Z-cp312-0002", seed=2, **design)
    for run in (v1, v2):  # given as alloc1 remove; remove is not a case of the run
        edit_json(run, lambda m: m["parameters"].update(confirm_cases=["alloc1", "remove"]))
    as_v1(v1)
    # none of the confirm cases measured: the v1 rule times all of them
    v1_none = write_run(
        raw,
        run_id="20261129T090000Z-cp312-0003",
        seed=3,
        **{**SMALL, "cases": ("alloc1",), "confirm_cases": ("remove",)},
    )
    as_v1(v1_none)
    table = runs_of(raw)
    assert bool(table.loc[v1.name, "included"]), table.loc[v1.name, "note"]
    assert bool(table.loc[v1_none.name, "included"]), table.loc[v1_none.name, "note"]
    assert table.loc[v2.name, "note"].startswith(
        "left out: altered: samples.csv lacks 108 of the 216 confirm samples"
    )


# ---------------------------------------------------------------------------------------
# 1. copies


def test_run_copied_under_a_second_host_is_one_line_naming_both(tmp_path: Path) -> None:
    """Before: counted as an independent machine in every headline table."""
    run = write_run(tmp_path, host="host-a", **SMALL)
    copy = tmp_path / "host-b" / run.name
    shutil.copytree(run, copy)
    edit_json(copy, lambda m: m.update(host="host-b"))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    msg = one_line(err.value)
    assert f"run id {run.name} appears twice" in msg
    assert str(run) in msg and str(copy) in msg


def test_run_copied_under_a_new_run_id_is_one_line_naming_both(tmp_path: Path) -> None:
    run = write_run(tmp_path, host="host-a", **SMALL)
    copy = tmp_path / "host-b" / "20261129T100000Z-cp312-9999"
    shutil.copytree(run, copy)
    edit_json(copy, lambda m: m.update(host="host-b", run_id=copy.name))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    msg = one_line(err.value)
    assert "byte-identical" in msg and str(run) in msg and str(copy) in msg


# ---------------------------------------------------------------------------------------
# 1. the committed data (schema 1): plan checks pass, no digests


@pytest.mark.skipif(not REPO_RAW.is_dir(), reason="no committed raw data")
def test_committed_runs_pass_every_check_and_keep_their_headlines(tmp_path: Path) -> None:
    # The runs committed on 2026-11-29 only: a user's own new runs in data/raw (after a
    # `make bench`) must not fail the suite.
    for run in sorted((REPO_RAW / "xeon-vm-2core").glob("20261129T*")):
        shutil.copytree(run, tmp_path / "xeon-vm-2core" / run.name)
    raw = raw_reader.read_raw(tmp_path)
    assert len(raw.runs) == 16
    assert raw.runs and raw.included == raw.runs
    assert {r.integrity for r in raw.runs} == {"unsealed (schema 1)"}
    runs = ab_analysis.runs_table(raw)
    assert set(runs["protocol"]) == {"full"}
    assert runs["warnings"].isna().all()
    assert set(runs.loc[runs["headline"], "run_id"]) == {
        "20261129T114009Z-cp310-706b",
        "20261129T114326Z-cp311-f56a",
        "20261129T114644Z-cp312-c268",
        "20261129T115003Z-cp313-3052",
    }
    variants = ab_analysis.variants_table(raw)
    releases = variants[variants["vllm_version"].notna()]
    assert set(releases["release_check"]) == {"consistent"}


# ---------------------------------------------------------------------------------------
# 4. the headline rule


def _quick(run: Path) -> Path:
    edit_json(run, lambda m: m["parameters"].update(quick=True))
    return run


def test_quick_run_is_never_the_headline(tmp_path: Path) -> None:
    """Before: a newer QUICK=1 run became the headline ("[95% CI nan, nan]")."""
    full = write_run(
        tmp_path, run_id="20261128T090000Z-cp311-aaaa", python_version="3.11.7", **FULL
    )
    quick = _quick(
        write_run(
            tmp_path,
            run_id="20261129T090000Z-cp311-bbbb",
            started_at="2026-11-30T09:00:00+00:00",
            python_version="3.11.7",
            processes=2,
            confirm_processes=1,
            samples=3,
            pools=(2048,),
            seed=2,
        )
    )
    table = runs_of(tmp_path)
    assert bool(table.loc[full.name, "headline"])
    assert table.loc[full.name, "protocol"] == "full"
    assert bool(table.loc[quick.name, "included"]) and not bool(table.loc[quick.name, "headline"])
    assert table.loc[quick.name, "protocol"] == "quick (smoke run)"
    assert table.loc[quick.name, "note"] == "not in the headline tables: quick (smoke run)"


def test_too_few_processes_is_never_the_headline(tmp_path: Path) -> None:
    few = write_run(tmp_path, **{**FULL, "processes": 5})
    table = runs_of(tmp_path)
    assert not bool(table.loc[few.name, "headline"])
    assert table.loc[few.name, "note"] == "not in the headline tables: too few processes (5 < 6)"


def test_reduced_run_does_not_displace_a_full_run(tmp_path: Path) -> None:
    """Before: a newer POOLS=2048 run took the headline and its pool-100,000 rows vanished."""
    full = write_run(tmp_path, run_id="20261128T090000Z-cp312-aaaa", **FULL)
    reduced = write_run(
        tmp_path,
        run_id="20261129T090000Z-cp312-bbbb",
        started_at="2026-11-30T09:00:00+00:00",
        seed=2,
        **{**FULL, "pools": (2048,)},
    )
    table = runs_of(tmp_path)
    assert bool(table.loc[full.name, "headline"])
    assert not bool(table.loc[reduced.name, "headline"])
    assert table.loc[reduced.name, "note"] == (
        "not in the headline tables: reduced (pools 2048 only)"
    )


def test_without_a_full_run_the_newest_reduced_run_is_the_flagged_headline(
    tmp_path: Path,
) -> None:
    roles = write_fixture(tmp_path, tiny=True)
    table = runs_of(tmp_path)
    newer = table.loc[roles["newer"].name]
    assert bool(newer["headline"])
    assert newer["protocol"] == "reduced (pools 2048 only; cases alloc1 alloc2 mix remove only)"
    assert newer["note"] == (
        "headline (reduced protocol: this host × interpreter has no full-protocol run)"
    )
    assert table.loc[roles["older"].name, "note"] == "older run (not in the headline tables)"


def test_altered_newest_run_hands_the_headline_to_the_previous_one(tmp_path: Path) -> None:
    older = write_run(tmp_path, run_id="20261128T090000Z-cp312-aaaa", **FULL)
    newer = seal(
        write_run(
            tmp_path,
            run_id="20261129T090000Z-cp312-bbbb",
            started_at="2026-11-30T09:00:00+00:00",
            seed=2,
            **FULL,
        )
    )
    edit_rows(newer, lambda h, rows: rows[:-1])
    table = runs_of(tmp_path)
    assert bool(table.loc[older.name, "headline"]) and not bool(table.loc[newer.name, "headline"])


def test_host_label_on_two_cpu_models_is_flagged(tmp_path: Path) -> None:
    a = write_run(tmp_path, host="box", run_id="20261128T090000Z-cp312-aaaa", **SMALL)
    b = write_run(
        tmp_path,
        host="box",
        run_id="20261129T090000Z-cp312-bbbb",
        cpu_model="Other CPU @ 3.00GHz",
        seed=2,
        **SMALL,
    )
    other = write_run(tmp_path, host="calm", run_id="20261129T090000Z-cp312-cccc", seed=3, **SMALL)
    table = runs_of(tmp_path)
    warning = (
        "host label box has runs on 2 CPU models: Other CPU @ 3.00GHz (1 run), "
        "Synthetic CPU @ 1.00GHz (1 run)"
    )
    assert table.loc[a.name, "warnings"] == warning
    assert table.loc[b.name, "warnings"] == warning
    assert pd.isna(table.loc[other.name, "warnings"])


# ---------------------------------------------------------------------------------------
# 6. one release, two file digests


def test_release_measured_as_two_different_files_is_flagged(tmp_path: Path) -> None:
    a = write_run(tmp_path, run_id="20261128T090000Z-cp312-aaaa", **SMALL)
    b = write_run(tmp_path, run_id="20261129T090000Z-cp312-bbbb", seed=2, **SMALL)

    def modify(meta: dict) -> None:
        var = next(v for v in meta["variants"] if v["label"] == "vllm==0.32.0")
        var["file_sha256"] = "f" * 64

    edit_json(b, modify)
    raw = raw_reader.read_raw(tmp_path)
    table = ab_analysis.runs_table(raw).set_index("run_id")
    good = hashlib.sha256(b"synthetic:file:vllm==0.32.0").hexdigest()
    for run, digest in ((a, good), (b, "f" * 64)):
        warning = table.loc[run.name, "warnings"]
        assert warning.startswith(f"vllm==0.32.0 measured as {digest[:12]} here, but the raw")
        assert "2 different files under that release" in warning
    variants = ab_analysis.variants_table(raw)
    keys = zip(variants["run_id"], variants["label"], strict=True)
    checks = dict(zip(keys, variants["release_check"], strict=True))
    assert checks[(b.name, "vllm==0.32.0")].startswith("conflict: vllm==0.32.0 measured as ffff")
    assert checks[(b.name, "vllm==0.31.0")] == "consistent"
    assert pd.isna(checks[(b.name, "kvqueue")])


# ---------------------------------------------------------------------------------------
# git state, manifest, byte-identical rebuilds


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        [
            *("git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example"),
            *("-c", "commit.gpgsign=false", *args),
        ],
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_per_run_and_the_manifest_notices_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    raw = repo / "data" / "raw"
    a = write_run(raw, run_id="20261128T090000Z-cp312-aaaa", **SMALL)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "a")
    b = write_run(raw, run_id="20261129T090000Z-cp312-bbbb", seed=2, **SMALL)
    ka, kb = (f"synth/{r.name}" for r in (a, b))
    assert git_state.git_states(raw) == {ka: "committed", kb: "untracked"}

    out = tmp_path / "proc"
    processed_build.build(raw, out, FAST)
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    processed_build.build(raw, out, FAST)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == first  # byte-identical
    runs = store.load(out).runs.set_index("run_id")
    assert runs.loc[a.name, "git_state"] == "committed"
    assert runs.loc[b.name, "git_state"] == "untracked"

    # Committing b changes no raw file, but the manifest: ensure() rebuilds.
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "b")
    data = processed_build.ensure(raw, out, FAST)
    assert data.runs.set_index("run_id").loc[b.name, "git_state"] == "committed"

    samples = a / "samples.csv"
    samples.write_bytes(samples.read_bytes() + b"\n")  # an edit git sees
    assert git_state.git_states(raw)[ka] == "modified"
    _git(repo, "checkout", "--", ".")
    (a / "extra.txt").write_text("x")
    assert git_state.git_states(raw)[ka] == "modified"
    (a / "extra.txt").unlink()
    _git(repo, "rm", "-q", "--cached", "data/raw/synth/" + b.name + "/run.json")
    assert git_state.git_states(raw) == {ka: "committed", kb: "modified"}


def test_git_state_outside_a_repository_is_no_git(tmp_path: Path) -> None:
    run = write_run(tmp_path / "raw", **SMALL)
    assert git_state.git_states(tmp_path / "raw") == {f"synth/{run.name}": "no git"}


def test_notebook_is_part_of_the_manifest(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    run = write_run(raw, **SMALL)
    (run / "bench.ipynb").write_text('{"cells": []}\n', encoding="utf-8")
    seal(run)
    out = tmp_path / "proc"
    assert processed_build.build(raw, out, FAST).runs["included"].all()
    (run / "bench.ipynb").write_text('{"cells": [1]}\n', encoding="utf-8")
    data = processed_build.ensure(raw, out, FAST)  # rebuilt: the notebook no longer matches
    assert not data.runs["included"].any()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_edited_committed_schema1_run_is_left_out_by_its_git_state(tmp_path: Path) -> None:
    """A schema-1 run records no digests: the issue's 0.7 edit of a committed run cannot be
    told from the samples, but its git state shows it, and the run is left out as altered
    (before: included, no warning at all)."""
    repo = tmp_path / "repo"
    raw = repo / "data" / "raw"
    run = as_v1(write_run(raw, **SMALL))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "run")
    edit_rows(run, scale_kvqueue)
    row = runs_of(raw, git_state.git_states(raw)).loc[run.name]
    assert row["git_state"] == "modified" and not bool(row["included"])
    assert row["note"] == "left out: altered: raw files differ from their git commit"


# ---------------------------------------------------------------------------------------
# kinds of runs


def test_a_history_run_stays_out_of_the_bench_tables(tmp_path: Path) -> None:
    """A bench-format run of kind history is read and checked, but never a headline."""
    bench = seal(write_run(tmp_path, **FULL))
    history = seal(write_run(tmp_path, run_id="20261129T110000Z-cp312-0002", seed=2, **FULL))
    edit_json(history, lambda m: m.update(kind=schema.KIND_HISTORY))
    raw = raw_reader.read_raw(tmp_path)
    kinds = {r.run_id: r.kind for r in raw.runs}
    assert kinds == {bench.name: "bench", history.name: "history"}
    assert all(r.included for r in raw.runs)  # both pass every check
    tables = ab_analysis.analyze(raw, FAST)
    assert set(tables["runs"]["run_id"]) == {bench.name}
    assert set(tables["summary"]["run_id"]) == {bench.name}
    assert [r.run_id for r in raw.of_kind(schema.KIND_HISTORY).runs] == [history.name]


def _policy_run(raw: Path, payload: bytes = b"policy,metric\nlru,1\n") -> Path:
    run = raw / "synth" / "20261129T120000Z-cp312-0003"
    run.mkdir(parents=True)
    (run / "policy.csv").write_bytes(payload)
    meta = {
        "schema_version": schema.SCHEMA_VERSION,
        "kind": schema.KIND_POLICY,
        "run_id": run.name,
        "host": "synth",
        "status": "complete",
        "started_at": "2026-11-29T12:00:00+00:00",
        "ended_at": "2026-11-29T12:05:00+00:00",
        "machine": {},
        "python": {"implementation": "CPython", "version": "3.12.1"},
        "parameters": {},
        "seeds": {},
        "project": {},
        "files": {"policy.csv": {"sha256": hashlib.sha256(payload).hexdigest()}},
    }
    (run / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return run


def test_a_policy_run_needs_only_the_common_keys_and_its_digests(tmp_path: Path) -> None:
    run = _policy_run(tmp_path)
    seal(write_run(tmp_path, **FULL))
    raw = raw_reader.read_raw(tmp_path)
    policy = raw.of_kind(schema.KIND_POLICY).runs
    assert [(r.run_id, r.included, r.integrity) for r in policy] == [
        (run.name, True, integrity.SEALED)
    ]
    tables = ab_analysis.analyze(raw, FAST)
    assert run.name not in set(tables["runs"]["run_id"])


def test_an_edited_policy_file_alters_the_run(tmp_path: Path) -> None:
    run = _policy_run(tmp_path)
    (run / "policy.csv").write_bytes(b"policy,metric\nlru,0.5\n")
    (only,) = raw_reader.read_raw(tmp_path).runs
    assert not only.included
    assert only.altered == "policy.csv sha256 differs from run.json (edited after the run)"
    (run / "policy.csv").unlink()
    (only,) = raw_reader.read_raw(tmp_path).runs
    assert only.altered == "policy.csv is missing, run.json records its sha256"


def test_an_unknown_kind_is_one_line_naming_run_json(tmp_path: Path) -> None:
    run = _policy_run(tmp_path)
    edit_json(run, lambda m: m.update(kind="benchmark"))
    with pytest.raises(raw_reader.RawDataError) as err:
        raw_reader.read_raw(tmp_path)
    assert one_line(err.value).startswith(str(run / "run.json"))
    assert "kind 'benchmark' is not one of bench, history, policy" in str(err.value)


def test_aa_only_run_is_never_the_headline(tmp_path: Path) -> None:
    """Before: a newer A/A-only run (VARIANTS=X AA=1) displaced the A/B headline run."""
    ab_run = write_run(
        tmp_path, run_id="20261128T090000Z-cp311-aaaa", python_version="3.11.7", **FULL
    )
    aa = write_run(
        tmp_path,
        run_id="20261129T090000Z-cp311-bbbb",
        started_at="2026-11-30T09:00:00+00:00",
        python_version="3.11.7",
        sources=("vllm==0.32.0", "vllm==0.32.0"),
        seed=2,
        **FULL,
    )
    table = runs_of(tmp_path)
    assert bool(table.loc[ab_run.name, "headline"])
    assert not bool(table.loc[aa.name, "headline"])
    assert table.loc[aa.name, "protocol"] == ab_analysis.AA_ONLY
    assert table.loc[aa.name, "note"] == f"not in the headline tables: {ab_analysis.AA_ONLY}"
