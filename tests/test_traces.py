"""Policy traces (issue 28.5): a trace that ends before the run's ``TURNOVERS`` or that
needs more blocks than its pool is refused in one line before the gate and before the
run folder exists; ``TRACE_OUT`` never replaces a file, and a folder, a missing folder
or an unwritable one is one line with no temporary file left. All fast: small synthetic
traces, the gate and the interpreter probe stubbed out (a refusal must come first)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from kvqueue import __main__ as cli
from kvqueue.errors import BenchInputError
from kvqueue.params import policy_params
from kvqueue.policy import age_windows, churn, policies, policy_checks, policy_collect, trace
from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "data" / "traces" / "example.jsonl"
#: A workload small enough to write a trace of in milliseconds.
SMALL_OUT = [
    "--regime", "custom", "--pool", "512", "--prefill-max", "64", "--decode-max", "32",
    "--warmup-turnovers", "0.5", "--turnovers", "1",
]  # fmt: skip


def _write_trace(path: Path, pool: int, events: list[dict[str, Any]], sides=("d",)) -> Path:
    header = {"format": trace.FORMAT, "version": trace.VERSION, "pool": pool}
    lines = [json.dumps({**header, "sides": list(sides)}), *map(json.dumps, events)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cycles(pool: int, turnovers: int, n: int = 16) -> list[dict[str, Any]]:
    """Requests of ``n`` blocks, one at a time: ``turnovers`` pool turnovers."""
    out: list[dict[str, Any]] = []
    for rid in range(turnovers * pool // n):
        out += [{"op": "alloc", "req": rid, "n": n}, {"op": "free", "req": rid}]
    return out


def _temp_entries() -> set[str]:
    """This project's entries in the temp folder (others' tests run beside these)."""
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith(("kvqueue", "kvq-"))}


@pytest.fixture
def no_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter probe stubbed; the gate and the check must never be reached."""

    def reached(*_args: Any) -> None:
        raise AssertionError("the gate ran: the trace was not refused before it")

    monkeypatch.setattr(
        policy_checks, "check_python", lambda python: (sys.executable, {"tag": "t"})
    )
    monkeypatch.setattr(policy_collect, "run_bench_gate", reached)
    monkeypatch.setattr(policy_collect, "run_check", reached)


def _policy(raw: Path, *args: str) -> list[str]:
    return ["policy", "--host", "h", "--raw-dir", str(raw), "--variant", "kvqueue", *args]


# ------------------------------------------------------------------ length


def test_the_example_trace_at_the_default_turnovers_is_refused_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None
) -> None:
    raw = tmp_path / "raw"
    before = _temp_entries()
    code = cli.main(_policy(raw, "--processes", "1", "--trace", str(EXAMPLE)))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("make policy: TRACE: ")
    assert "holds 3.00 turnovers" in err[0]
    assert "WARMUP_TURNOVERS=200 to TURNOVERS=400" in err[0]
    assert "set TURNOVERS=3 WARMUP_TURNOVERS=1.5" in err[0]
    assert not raw.exists() and _temp_entries() <= before


def test_a_trace_that_ends_inside_the_measurement_is_refused(tmp_path: Path) -> None:
    """Past the warm-up but short of TURNOVERS: the second half would be cut short."""
    path = _write_trace(tmp_path / "t.jsonl", 64, _cycles(64, 3))
    p = policy_params.from_text(
        {"host": "h", "trace": str(path), "warmup_turnovers": "1", "turnovers": "4"}
    )
    with pytest.raises(BenchInputError, match=r"holds 3\.00 turnovers") as info:
        policy_collect.trace_info(p)
    assert "set TURNOVERS=3 WARMUP_TURNOVERS=1," in str(info.value)


def test_the_suggested_settings_are_accepted_and_recorded(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "t.jsonl", 64, _cycles(64, 3))
    p = policy_params.from_text(
        {"host": "h", "trace": str(path), "warmup_turnovers": "1.5", "turnovers": "3"}
    )
    info = policy_collect.trace_info(p)
    assert info is not None
    assert info["turnovers"] == 3.0 and info["peak_blocks"] == {"d": 16}


def test_a_trace_too_short_for_any_run_says_so(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "t.jsonl", 1024, [{"op": "alloc", "req": 1, "n": 4}])
    p = policy_params.from_text({"host": "h", "trace": str(path)})
    with pytest.raises(BenchInputError, match=r"holds 0\.00 turnovers.*replay a longer trace"):
        policy_collect.trace_info(p)


# ------------------------------------------------------------------ size


def test_a_trace_larger_than_its_pool_is_refused_before_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None
) -> None:
    events = [{"op": "alloc", "req": r, "n": 40} for r in (1, 2)]
    events += [{"op": "free", "req": r} for r in (1, 2)]
    path = _write_trace(tmp_path / "big.jsonl", 64, events)
    raw = tmp_path / "raw"
    before = _temp_entries()
    code = cli.main(
        _policy(raw, "--trace", str(path), "--warmup-turnovers", "0.5", "--turnovers", "1")
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"make policy: TRACE: {path}:3: request 2 allocates 40 blocks")
    assert "40 of the pool's 64 in use" in err[0] and "bigger pool" in err[0]
    assert not raw.exists() and _temp_entries() <= before


def test_the_peak_counts_a_shared_prefix_once(tmp_path: Path) -> None:
    """Two live requests touching one cached prefix hold it once (as vLLM does)."""
    keys = [["f", 0], ["f", 1], ["f", 2]]
    events: list[dict[str, Any]] = [
        {"op": "touch", "req": 1, "keys": keys},
        {"op": "alloc", "req": 1, "n": 1},
        {"op": "touch", "req": 2, "keys": keys},
        {"op": "alloc", "req": 2, "n": 1},
        {"op": "free", "req": 1},
        {"op": "free", "req": 2},
    ]
    path = _write_trace(tmp_path / "t.jsonl", 64, events)
    header, read = trace.read_trace(path)
    held = trace.size(path, header, read, FreeKVCacheBlockQueue, KVCacheBlock)
    assert held.peak == {"d": 5}  # 3 shared + 1 each, not 8
    assert held.turnovers == pytest.approx(5 / 64)


def test_the_example_trace_needs_the_same_blocks_under_every_policy() -> None:
    """The size found under lru holds for every policy when the keys are prefix chains:
    a hit on a block in use never depends on what the policy evicted."""
    header, events = trace.read_trace(EXAMPLE)
    lru = trace.size(EXAMPLE, header, events, FreeKVCacheBlockQueue, KVCacheBlock)
    pool = header["pool"]
    for name in ("contig-w1", "contig-inf"):
        meter = age_windows.Meter([0.0, 1.0, 100.0], 8)
        sides = {}
        for s in header["sides"]:
            blocks = [KVCacheBlock(block_id=i) for i in range(pool)]
            sides[s] = churn.Side(FreeKVCacheBlockQueue(blocks), blocks, None, "vllm")
            sides[s].alloc = meter.wrap(policies.get(name), sides[s], s == churn.DECODE)
        pools = churn.Pools(sides["d"], sides["p"])
        peak = dict.fromkeys(sides, 0)
        for event in events:
            pools.apply(event)
            if event["op"] != "read":
                side = event["side"]
                peak[side] = max(peak[side], pool - sides[side].queue.num_free_blocks)
        assert peak == lru.peak, name


# ------------------------------------------------------------------ hostile files (issue 36.6)


def _refusal(capsys: pytest.CaptureFixture[str], raw: Path, path: Path | str) -> str:
    """Run ``make policy TRACE=path`` in this process within 20 s (an old reader waited
    for a FIFO's writer) and return its one line; nothing may be written."""
    result: list[int] = []
    runner = threading.Thread(
        target=lambda: result.append(cli.main(_policy(raw, "--trace", str(path)))), daemon=True
    )
    runner.start()
    runner.join(20)
    if runner.is_alive():  # open the FIFO's other end, so that the reader ends
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        runner.join(20)
        raise AssertionError(f"TRACE={path} was opened and waited for a writer")
    err = capsys.readouterr().err.strip().splitlines()
    assert result == [2] and len(err) == 1, (result, err)
    assert err[0].startswith(f"make policy: TRACE: {path}")
    assert not raw.exists()
    return err[0]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("folder", "is a folder, not a trace file"),
        ("fifo", "is not a regular file (a FIFO, a device or a socket)"),
        ("device", "is not a regular file (a FIFO, a device or a socket)"),
        ("missing", "does not exist"),
    ],
)
def test_a_trace_that_is_not_a_regular_file_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None, kind: str, words: str
) -> None:
    path: Path = tmp_path / "t.jsonl"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path(os.devnull)  # /dev/zero's kind, without its endless read on a mistake
    line = _refusal(capsys, tmp_path / "raw", path)
    assert line == f"make policy: TRACE: {path} {words}" + (
        ": a trace is a file, read whole" if "regular" in words else ""
    )


def test_dev_zero_is_refused_on_opening(tmp_path: Path) -> None:
    with pytest.raises(trace.TraceError, match="is not a regular file"):
        trace.open_checked("/dev/zero").close()


def test_a_trace_above_the_size_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A sparse file one byte past the bound: refused on its size, not read."""
    path = tmp_path / "big.jsonl"
    with path.open("wb") as fh:
        fh.truncate(trace.MAX_TRACE_BYTES + 1)
    with pytest.raises(trace.TraceError) as info:
        trace.read_header(path)
    assert str(info.value) == (
        f"{path} is 512.0 MiB, above the 512.0 MiB a trace may be (it is held in memory "
        "whole): replay a shorter trace"
    )


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Bounds of 4,000 bytes per trace and 100 per line (the real ones take seconds)."""
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 4000)
    monkeypatch.setattr(trace, "MAX_LINE_BYTES", 100)
    return 4000, 100


def test_a_trace_too_large_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None, small_bounds: Any
) -> None:
    path = _write_trace(tmp_path / "t.jsonl", 64, _cycles(64, 20))
    size = path.stat().st_size
    assert size > 4000
    line = _refusal(capsys, tmp_path / "raw", path)
    assert f"{path} is {size:,} bytes, above the 4,000 bytes a trace may be" in line


def test_a_line_too_long_is_refused_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None, small_bounds: Any
) -> None:
    path = _write_trace(tmp_path / "t.jsonl", 64, _cycles(64, 1))
    text = path.read_text(encoding="utf-8").splitlines()
    text[3] = '{"op": "alloc", "req": 999, "n": 1, "note": "' + "x" * 120 + '"}'
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    line = _refusal(capsys, tmp_path / "raw", path)
    assert line == (
        f"make policy: TRACE: {path}:4: a line longer than 100 bytes, the longest a trace may have"
    )


def test_lines_at_the_bounds_are_read(tmp_path: Path, small_bounds: Any) -> None:
    """A line of exactly MAX_LINE_BYTES (newline excluded) and a file of exactly
    MAX_TRACE_BYTES are within the bounds."""
    path = tmp_path / "t.jsonl"
    body = b"x" * 100 + b"\n"
    path.write_bytes(body * 39 + b"y" * (4000 - 39 * 101))
    with trace.open_checked(path) as fh:
        read = list(trace.lines(fh, path))
    assert len(read) == 40 and read[0] == (1, "x" * 100 + "\n")
    with path.open("ab") as fh:  # one byte more: past the file's bound
        fh.write(b"y")
    with pytest.raises(trace.TraceError, match="above the"):
        trace.open_checked(path)


def test_a_trace_that_grows_while_it_is_read_stops_at_the_bound(
    tmp_path: Path, small_bounds: Any
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x\n" * 1000)  # 2,000 bytes: within the bound when opened
    with trace.open_checked(path) as fh:
        path.write_bytes(b"x\n" * 3000)
        with pytest.raises(trace.TraceError, match="grew past"):
            list(trace.lines(fh, path))


# ------------------------------------------------------------------ TRACE_OUT


def test_trace_out_never_overwrites_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    out.write_text("mine\n", encoding="utf-8")
    code = cli.main(["policy", "--trace-out", str(out), *SMALL_OUT])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == (
        f"make policy: TRACE_OUT: {out} exists and is not overwritten: remove it or name "
        "another file"
    )
    assert out.read_text(encoding="utf-8") == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_trace_out_writes_a_new_file_then_refuses_to_replace_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    assert cli.main(["policy", "--trace-out", str(out), *SMALL_OUT]) == 0
    written = out.read_bytes()
    assert trace.read_trace(out)[0]["pool"] == 512
    capsys.readouterr()
    assert cli.main(["policy", "--trace-out", str(out), *SMALL_OUT]) == 2
    assert "exists and is not overwritten" in capsys.readouterr().err
    assert out.read_bytes() == written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("adir", "is a folder: name a file in it"),
        ("nope/t.jsonl", "does not exist"),
        ("afile/t.jsonl", "is not a folder"),
    ],
)
def test_a_trace_out_that_cannot_be_a_file_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, words: str
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code = cli.main(["policy", "--trace-out", str(tmp_path / name), *SMALL_OUT])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("make policy: TRACE_OUT: ") and words in err[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no .adir.tmpNNN


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_trace_out_in_a_read_only_folder_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code = cli.main(["policy", "--trace-out", str(folder / "t.jsonl"), *SMALL_OUT])
    finally:
        folder.chmod(0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cannot be written" in err[0]
    assert list(folder.iterdir()) == []


def test_the_writer_keeps_a_file_that_appears_while_it_writes(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    writer = trace.TraceWriter(out, 64, ("d",))
    writer({"op": "alloc", "req": 1, "side": "d", "n": 1})
    out.write_text("theirs\n", encoding="utf-8")
    with pytest.raises(trace.TraceError, match="appeared while the trace was written"):
        writer.close()
    assert out.read_text(encoding="utf-8") == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_the_writer_refuses_a_path_it_cannot_create(tmp_path: Path) -> None:
    with pytest.raises(trace.TraceError, match="does not exist"):
        trace.TraceWriter(tmp_path / "nope" / "t.jsonl", 64, ("d",))
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ variables a trace does not read


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (["--trace", "t.jsonl", "--pool", "4096", "--regime", "agentic"],
         "TRACE replays its own workload: POOL, REGIME would not be used; leave them out"),
        (["--trace-out", "x.jsonl", "--processes", "3", "--windows", "1"],
         "TRACE_OUT writes a workload's events and runs nothing: HOST, VARIANT, WINDOWS, "
         "PROCESSES would not be used"),
    ],
)  # fmt: skip
def test_a_variable_a_trace_does_not_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_gate: None, given: list, words: str
) -> None:
    """Issue 28.1: with TRACE the workload variables, with TRACE_OUT the run's, were
    ignored without a word (a replay recorded the ignored POOL in run.json)."""
    raw = tmp_path / "raw"
    code = cli.main(
        _policy(raw, *(str(tmp_path / g) if g.endswith(".jsonl") else g for g in given))
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith("make policy: ") and words in line, line
    assert not raw.exists() and not list(tmp_path.glob("*.jsonl"))


def test_a_replay_records_the_trace_s_own_workload(tmp_path: Path) -> None:
    events = _cycles(64, 3)
    path = _write_trace(tmp_path / "t.jsonl", 64, events)
    text = path.read_text().splitlines()
    header = json.loads(text[0])
    header["workload"] = {"pool": 64, "concurrency": 3}
    path.write_text("\n".join([json.dumps(header), *text[1:]]) + "\n")
    p = policy_params.from_text(
        {"host": "h", "trace": str(path), "warmup_turnovers": "1.5", "turnovers": "3"}
    )
    recorded = policy_collect.recorded_workload(p, policy_collect.trace_info(p))
    assert recorded["pool"] == 64 and recorded["concurrency"] == 3
    assert recorded["families"] == p.families  # not in the trace's header: the parameter
