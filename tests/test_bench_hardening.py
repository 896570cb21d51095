"""``make bench`` against a hostile user: interpreters that are not what they claim, a
variant that never returns, killed processes, a colliding run id, two benches at once,
an unwritable cache. Each ends in one line and a run folder that says what happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from benchutil import (
    GOOD_QUEUE,
    REPO_ROOT,
    TINY_ARGS,
    VARIANTS,
    bench_cli,
    only_run_dir,
    read_run_json,
    tree,
)

from kvqueue import schema
from kvqueue.errors import BenchError, BenchInputError
from kvqueue.measure import interpreter_checks, machine_lock, run_notebook, runner
from kvqueue.params import bench_params
from kvqueue.rawdata import raw_reader

pytestmark = pytest.mark.slow
CLI = (sys.executable, "-m", "kvqueue", "bench")
#: A release that is not cached (and does not exist): the cache folder is needed first.
VARIANT = "kvqueue vllm==0.0.9999"


def _one_line(proc: subprocess.CompletedProcess, code: int, words: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("make bench: ") and words in lines[0], (
        proc.stderr
    )
    return lines[0]


def _tiny(**changes: object) -> bench_params.BenchParams:
    values: dict[str, object] = {
        "host": "hard",
        "python": sys.executable,
        "variants": list(VARIANTS),
        "processes": 1,
        "confirm_processes": 0,
        "samples": 2,
        "sample_ms": 1,
        "pools": [64],
        "cases": ["alloc1"],
        "gate_ops": 500,
        "precision": 0.0,
    }
    values.update(changes)
    return bench_params.make_params(**values)


# ------------------------------------------------------------------ interpreters


def test_a_wrapper_running_python_with_O_is_refused(tmp_path: Path) -> None:
    wrapper = tmp_path / "python-O"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -O "$@"\n')
    wrapper.chmod(0o755)
    raw = tmp_path / "raw"
    proc = bench_cli("--host", "h", "--raw-dir", raw, "--python", wrapper, *TINY_ARGS)
    _one_line(proc, 2, "runs with -O (sys.flags.optimize=1")
    assert not raw.exists()


def test_pythonoptimize_in_the_environment_is_refused(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    proc = subprocess.run(
        [*CLI, "--host", "h", "--raw-dir", str(raw), "--python", sys.executable, *TINY_ARGS],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONOPTIMIZE": "1"},
        timeout=120,
    )
    _one_line(proc, 2, "runs with -O")
    assert not raw.exists()


def test_a_program_that_is_not_python_is_named_as_such(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    proc = bench_cli("--host", "h", "--raw-dir", raw, "--python", "/bin/true", *TINY_ARGS)
    _one_line(proc, 2, "did not answer like a Python interpreter")
    assert not raw.exists()


def test_run_json_records_the_interpreters_flags(tmp_path: Path) -> None:
    run_dir = runner.run_bench(_tiny(), tmp_path)
    py = read_run_json(run_dir)["python"]
    assert py["flags"]["optimize"] == 0 and "isolated" in py["flags"]
    assert py["orig_argv"] and py["executable"]


# ------------------------------------------------------------------ odd variant paths


def test_a_variant_path_with_a_quote_and_a_comma_reads_back(tmp_path: Path) -> None:
    odd = tmp_path / 'we"ird, name.py'
    odd.write_text(GOOD_QUEUE.read_text(encoding="utf-8"), encoding="utf-8")
    run_dir = runner.run_bench(_tiny(variants=["kvqueue", str(odd)]), tmp_path / "raw")
    run = raw_reader.read_run(run_dir)
    assert run.samples is not None and str(odd) in set(run.samples["variant"])


# ------------------------------------------------------------------ time limits


def _hanging_queue(tmp_path: Path) -> Path:
    text = GOOD_QUEUE.read_text(encoding="utf-8")
    marker = "        self.num_free_blocks = len(blocks)\n        self.fake_free_list_head"
    assert text.count(marker) == 1
    path = tmp_path / "hangs.py"
    hang = "        import time\n\n        time.sleep(3600)\n"
    path.write_text(text.replace(marker, hang + marker), encoding="utf-8")
    return path


def _processes_mentioning(word: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if word.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [p for p in found if p != os.getpid()]


def test_a_variant_that_never_returns_stops_the_gate_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "GATE_SECONDS_BASE", 3.0)
    monkeypatch.setattr(runner, "GATE_SECONDS_PER_VARIANT", 0.0)
    hangs = _hanging_queue(tmp_path)
    # check() loads the class without building a queue, so the hang shows in the gate.
    with pytest.raises(BenchError, match=r"the validation gate did not finish within 3 s"):
        runner.run_bench(_tiny(variants=["kvqueue", str(hangs)]), tmp_path / "raw")
    assert not (tmp_path / "raw").exists()
    time.sleep(0.2)
    assert _processes_mentioning(str(hangs)) == [], "the gate process outlived its timeout"


def test_a_worker_over_its_time_limit_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "worker_timeout", lambda *_: 0.05)
    with pytest.raises(BenchError, match=r"worker process \(main 1\) did not finish"):
        runner.run_bench(_tiny(), tmp_path)
    record = read_run_json(only_run_dir(tmp_path, "hard"))
    assert record["status"] == "failed" and "did not finish" in record["error"]


# ------------------------------------------------------------------ killed processes


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_kill_9_of_the_kernel_marks_the_run_failed_in_one_line(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    log = tmp_path / "stderr.txt"
    args = ["--host", "kk", "--raw-dir", str(raw), "--variants", " ".join(VARIANTS)]
    args += ["--processes", "6", "--confirm-processes", "0", "--samples", "5", "--precision", "0"]
    args += ["--sample-ms", "20", "--pools", "64", "--cases", "alloc1 remove"]
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvqueue", "bench", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 120
        kernel = None
        while time.monotonic() < deadline and kernel is None:
            assert proc.poll() is None, log.read_text()
            found = list(raw.glob("kk/*/run.json"))
            if found and json.loads(found[0].read_text())["processes_completed"]["main"] >= 1:
                kernel = next(
                    (p for p in _descendants(proc.pid) if "ipykernel" in _cmdline(p)), None
                )
            time.sleep(0.05)
        assert kernel is not None, log.read_text()
        workers = [
            p for p in _descendants(kernel) if "kvqueue.measure.timing_worker" in _cmdline(p)
        ]
        os.kill(kernel, signal.SIGKILL)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    last = text.strip().splitlines()[-1]
    assert code == 1 and last.startswith("make bench: the notebook's kernel died;"), text
    assert "Traceback" not in text, text
    run_dir = only_run_dir(raw, "kk")
    record = read_run_json(run_dir)
    assert record["status"] == "failed" and record["error"] == "the notebook's kernel died"
    time.sleep(0.5)
    assert not [p for p in workers if Path(f"/proc/{p}").exists() and _cmdline(p)], (
        "a worker outlived its killed kernel"
    )


# ------------------------------------------------------------------ run ids, locks


def test_a_colliding_run_id_never_files_its_notebook_into_the_other_run(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    winner = runner.run_bench(_tiny(), raw)
    (winner / schema.RUN_NOTEBOOK).write_text("the winner's record\n")
    before = {p.name: p.read_bytes() for p in winner.iterdir()}
    checked = interpreter_checks.check(_tiny())
    with pytest.raises(BenchError, match="exists already; nothing was written"):
        run_notebook.run_bench_notebook(checked, raw, winner.name)
    assert {p.name: p.read_bytes() for p in winner.iterdir()} == before


def test_a_second_bench_on_the_same_machine_is_refused(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    with machine_lock.hold("a bench of this test"):
        proc = bench_cli("--host", "h", "--raw-dir", raw, "--no-notebook", *TINY_ARGS)
        with pytest.raises(BenchInputError, match="another bench is running"):
            runner.run_bench(_tiny(), raw)
    line = _one_line(proc, 2, "another bench is running on this machine (pid")
    assert "a bench of this test" in line
    assert not raw.exists()
    # Released with its holder: the next bench runs.
    assert runner.run_bench(_tiny(), raw).is_dir()


def test_an_unwritable_release_cache_is_one_line(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder should go\n")
    proc = subprocess.run(
        [*CLI, "--host", "h", "--raw-dir", str(tmp_path / "raw"), "--variants", VARIANT],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(blocked)},
        timeout=120,
    )
    _one_line(proc, 2, "cannot create the release cache")
    assert tree(tmp_path) == ["file"]


@pytest.mark.parametrize("command", ["bench", "policy", "history"])
@pytest.mark.parametrize("where", ["file", "under a file", "where no folder can be made"])
def test_a_raw_dir_that_is_a_file_is_refused_before_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, where: str
) -> None:
    """Issue 28.6: RAW_DIR naming a file ended a whole bench, after its gate, in a raw
    ``NotADirectoryError`` (exit 1); now one line, exit 2, nothing run or written."""
    from kvqueue import __main__ as cli

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    raw = {"file": blocker, "under a file": blocker / "raw"}.get(where, Path("/proc/kvq-raw"))
    code = cli.main([command, "--host", "h", "--raw-dir", str(raw)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith(f"make {command}: RAW_DIR '{raw}'"), err
    assert ("no folder can be made" in err[0]) == (where == "where no folder can be made")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    assert blocker.read_text() == "not a folder\n"


def test_taking_the_machine_lock_removes_what_any_killed_command_left(tmp_path: Path) -> None:
    """Issue 28.4: a kill -9 of a counts run left its kvqueue-counts-* folder until the
    next counts run; now every measuring command removes every kind (a dead pid's)."""
    import tempfile

    dead = 2**22 + 12345  # above the kernel's pid_max default: never alive
    folder = Path(tempfile.gettempdir())
    left = [folder / f"{p}{dead}-x" for p in ("kvqueue-counts-", "kvqueue-bench-", "kvq-ahead-")]
    for path in left:
        path.mkdir()
    kernel = folder / f"kvqueue-kernel-{dead}-0123.json"
    kernel.write_text("{}")
    alive = folder / f"kvqueue-counts-{os.getpid()}-mine"
    alive.mkdir()
    try:
        with machine_lock.hold("a test"):
            pass
        assert not any(p.exists() for p in (*left, kernel))
        assert alive.exists()  # a live process's entry stays
    finally:
        alive.rmdir()
