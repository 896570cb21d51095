"""``WAIT=1`` (issue 36.9): a measuring command queues behind a running measurement with
a line saying what it waits for and since when, instead of refusing; Ctrl-C while it
waits writes nothing. The holder is another process holding the lock file, as a
running bench does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

import pytest
from benchutil import REPO_ROOT, TINY_ARGS

from kvqueue.errors import BenchInputError
from kvqueue.measure import machine_lock
from kvqueue.params import lock_params
from kvqueue.params.bench_params import BUDGET_START_ENV

#: A process that holds the lock file (argv[1]) as a running bench does, says so on
#: stdout, and lets it go when its stdin closes.
_HOLDER = """
import fcntl, sys
fh = open(sys.argv[1], "a+")
fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
fh.seek(0); fh.truncate(); fh.write("pid 1, the other measurement, since then"); fh.flush()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lock file of this test's own (the session's is shared by its other tests)."""
    path = tmp_path / "bench.lock"
    monkeypatch.setenv(machine_lock.LOCK_ENV, str(path))
    return path


def _hold(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _release_after(proc: subprocess.Popen[str], seconds: float) -> threading.Timer:
    """End the holder after ``seconds`` (its lock goes with it)."""
    timer = threading.Timer(seconds, proc.terminate)
    timer.start()
    return timer


def test_without_wait_a_held_lock_is_refused_naming_wait(lock: Path) -> None:
    holder = _hold(lock)
    try:
        with pytest.raises(BenchInputError) as info, machine_lock.hold("mine"):
            pass
        with pytest.raises(BenchInputError):
            machine_lock.refuse_if_held()  # the probe refuses too
    finally:
        holder.kill()
        holder.wait()
    assert str(info.value).startswith(
        "another bench is running on this machine (pid 1, the other measurement, since then)"
    )
    assert "or WAIT=1 queues behind it" in str(info.value)


def test_wait_queues_behind_the_holder_saying_what_and_since_when(
    lock: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(lock_params.WAIT_ENV, "1")
    monkeypatch.setattr(machine_lock, "POLL_SECONDS", 0.05)
    monkeypatch.setenv(BUDGET_START_ENV, "1000.0")
    monkeypatch.setattr(machine_lock, "_waited", [0.0])
    holder = _hold(lock)
    machine_lock.refuse_if_held()  # the probe lets a waiting command through
    _release_after(holder, 1.0)
    start = time.monotonic()
    try:
        with machine_lock.hold("mine"):
            waited = time.monotonic() - start
            assert lock.read_text().startswith(f"pid {os.getpid()}, mine, since ")
    finally:
        holder.kill()
        holder.wait()
    assert waited >= 0.8
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("waiting for the machine lock since ")
    assert err[0].endswith(
        f": pid 1, the other measurement, since then (lock {lock}); Ctrl-C stops the wait "
        "and writes nothing"
    )
    assert err[1].startswith("machine lock taken after ")
    # MAX_MINUTES counts the run, not the queue; so does a command's "counted in N s".
    assert float(os.environ[BUDGET_START_ENV]) >= 1000.0 + waited - 0.2
    assert waited - 0.2 <= machine_lock.waited_seconds() <= waited


def test_a_new_holder_while_waiting_gets_a_line(
    lock: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line says what the command waits for: when another measurement takes the lock
    first, a line names it."""
    monkeypatch.setenv(lock_params.WAIT_ENV, "1")
    monkeypatch.setattr(machine_lock, "POLL_SECONDS", 0.05)
    holder = _hold(lock)
    real = machine_lock._holder
    reads: list[str] = []

    def holder_text(fh: TextIO) -> str:
        """The lock file as the holder wrote it, then as a third command rewrote it."""
        reads.append(real(fh))
        return reads[0] if len(reads) == 1 else "pid 2, a third one, since now"

    monkeypatch.setattr(machine_lock, "_holder", holder_text)
    _release_after(holder, 0.5)
    try:
        with machine_lock.hold("mine"):
            pass
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("waiting for the machine lock since ")
    assert ": pid 1, the other measurement, since then (lock " in err[0]
    assert len(err) == 3, err
    assert err[1].startswith("still waiting for the machine lock (since ")
    assert err[1].endswith(" min): pid 2, a third one, since now")


@pytest.mark.slow
def test_ctrl_c_while_a_bench_waits_writes_nothing(lock: Path, tmp_path: Path) -> None:
    holder = _hold(lock)
    raw = tmp_path / "raw"
    args = ["--host", "w", "--raw-dir", str(raw), "--no-notebook", "--wait", *TINY_ARGS]
    bench = subprocess.Popen(
        [sys.executable, "-m", "kvqueue", "bench", *args],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert bench.stderr is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines.append(bench.stderr.readline())
            if lines[-1].startswith("waiting for the machine lock since "):
                break
        else:
            raise AssertionError(lines)
        bench.send_signal(signal.SIGINT)
        code = bench.wait(timeout=60)
        rest = bench.stderr.read().strip().splitlines()
    finally:
        if bench.poll() is None:
            bench.kill()
        holder.kill()
        holder.wait()
    assert code == 130, (lines, rest)
    assert "pid 1, the other measurement, since then" in lines[-1]
    assert len(rest) == 1 and rest[0].startswith("stopped while waiting for the machine lock (")
    assert rest[0].endswith(" s): nothing was written"), rest
    assert not raw.exists() or not any(raw.rglob("run.json"))
