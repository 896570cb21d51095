"""Signals other than Ctrl-C (issue 28.4): SIGTERM and SIGHUP take Ctrl-C's path, and
children die with their runner even after ``kill -9``.

Each command runs in a fresh interpreter with a temp folder of its own (``TMPDIR``),
which every process it starts inherits: afterwards that folder must be empty and no
process whose command line or environment names it may be left. The in-process tests
check :func:`kvqueue.kernel.stop_signals` itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchutil import REPO_ROOT, VARIANTS, read_run_json, read_samples, rows_per_process, tree
from synthetic import write_fixture

from kvqueue import kernel
from kvqueue.measure import run_folder


@pytest.fixture(autouse=True)
def _stop_signals_at_their_default() -> Iterator[None]:
    """These tests send SIGHUP and SIGTERM as a terminal or a service manager would.

    Under ``nohup make test`` (or a CI runner that ignores SIGHUP) the test process and
    its children start with SIGHUP ignored, and a signal ignored at start stays ignored
    (:func:`kvqueue.kernel.stop_signals`, on purpose): the three hang-up tests failed
    that way. Each test here runs with both at their default; the caller's come back.
    """
    before = {s: signal.getsignal(s) for s in kernel.STOP_SIGNALS}
    for signum, handler in before.items():
        if handler == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")

#: A bench slow enough to be signalled after its first process (0.3-1 s each).
BENCH_ARGS = (
    "--host", "sig", "--precision", "0", "--variants", " ".join(VARIANTS),
    "--processes", "6", "--confirm-processes", "0", "--samples", "3", "--sample-ms", "25",
    "--pools", "64", "--cases", "alloc1", "--gate-ops", "500",
)  # fmt: skip
#: The smallest counts run: 5 counted processes under cachegrind, 2 at a time.
COUNTS_ARGS = (
    "--host", "sig", "--metric", "instructions", "--variants", " ".join(VARIANTS),
    "--pools", "64", "--cases", "alloc1", "--gate-ops", "500",
)  # fmt: skip


# ------------------------------------------------------------------ helpers


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _processes_naming(marker: Path) -> list[int]:
    """Live processes whose command line or environment names ``marker`` (the test's
    temp folder: every process a command starts inherits its TMPDIR)."""
    word = str(marker).encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            named = (
                word in (entry / "cmdline").read_bytes() or word in (entry / "environ").read_bytes()
            )
        except OSError:
            continue
        if named and int(entry.name) != os.getpid() and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _none_left(marker: Path, within: float) -> list[int]:
    """The processes naming ``marker`` still alive after ``within`` seconds (killed then,
    so that a failing test leaves none behind either)."""
    deadline = time.monotonic() + within
    while (left := _processes_naming(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def _environment(tmp: Path, base: Path) -> dict[str, str]:
    env = {**os.environ, "TMPDIR": str(tmp), "KVQUEUE_LOCK_FILE": str(base / "bench.lock")}
    env.pop("KVQUEUE_PARENT_PID", None)
    return env


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the command's temp folder, the raw folder); the temp folder lives outside
    ``tmp_path`` so that no other file of the test is in it."""
    tmp = Path(tempfile.mkdtemp(prefix="kvq-signals-"))
    try:
        yield tmp, tmp_path / "raw"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _start(args: list[str], tmp: Path, base: Path, **popen: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kvqueue", *args],
        cwd=REPO_ROOT,
        env=_environment(tmp, base),
        **popen,  # type: ignore[arg-type]
    )


def _wait_for(proc: subprocess.Popen, what: str, ready: object, timeout: float = 180) -> None:
    """Wait until ``ready()`` is true; fail (killing ``proc``) if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        if proc.poll() is not None:
            pytest.fail(f"the command ended ({proc.returncode}) before {what}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    pytest.fail(f"timed out waiting for {what}")


def _completed(raw: Path) -> int:
    """Processes that the run under ``raw`` completed so far (0 before its run.json)."""
    for path in raw.glob("sig/*/run.json"):
        try:
            return int(json.loads(path.read_text())["processes_completed"]["main"])
        except (OSError, ValueError, KeyError):
            return 0
    return 0


def _only_run(raw: Path) -> Path:
    (run_dir,) = (p.parent for p in raw.glob("sig/*/run.json"))
    return run_dir


def _check_interrupted(run_dir: Path, data_file: str = "samples.csv") -> dict:
    """run.json says ``interrupted`` and counts exactly the processes on disk."""
    record = read_run_json(run_dir)
    assert record["status"] == "interrupted", record["status"]
    assert record["ended_at"] is not None
    done = record["processes_completed"]["main"]
    assert done >= 1 and len(record["process_info"]) == done
    if data_file == "samples.csv":
        _, rows = read_samples(run_dir)
        assert sorted(rows_per_process(rows)) == [("main", i) for i in range(1, done + 1)]
    else:
        lines = (run_dir / data_file).read_text().splitlines()
        assert len(lines) == 1 + done
    return record


def _notebook_errors(run_dir: Path) -> list[str]:
    nb = json.loads((run_dir / "bench.ipynb").read_text(encoding="utf-8"))
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    return [o["ename"] for o in outputs if o["output_type"] == "error"]


# ------------------------------------------------------------------ stop_signals itself


@needs_linux
def test_a_stop_signal_raises_a_keyboard_interrupt_and_the_handlers_come_back() -> None:
    before = {s: signal.getsignal(s) for s in kernel.STOP_SIGNALS}
    for signum in kernel.STOP_SIGNALS:
        with pytest.raises(KeyboardInterrupt) as caught, kernel.stop_signals():
            os.kill(os.getpid(), signum)
            time.sleep(1)  # the handler runs at the next bytecode
        assert isinstance(caught.value, kernel.Stopped) and caught.value.signum == signum
    assert {s: signal.getsignal(s) for s in kernel.STOP_SIGNALS} == before


@needs_linux
def test_an_ignored_hangup_stays_ignored() -> None:
    """``nohup make bench``: the run is meant to outlive its terminal."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with kernel.stop_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.1)
    finally:
        signal.signal(signal.SIGHUP, previous)


@needs_linux
def test_a_stop_signal_waits_while_a_process_is_being_saved() -> None:
    saved = False
    with pytest.raises(kernel.Stopped), kernel.stop_signals():
        with run_folder.interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            saved = True  # reached: the signal waits for the end of the block
        time.sleep(1)
    assert saved


@needs_linux
def test_a_forked_copy_dies_by_the_signal_as_without_a_handler() -> None:
    """Pool.terminate() sends SIGTERM to the report's forked workers: they must die at
    once, not raise KeyboardInterrupt (a traceback per worker)."""
    with kernel.stop_signals():
        pid = os.fork()
        if pid == 0:  # the child: wait for the signal, never return into pytest
            try:
                time.sleep(30)
            finally:
                os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


# ------------------------------------------------------------------ bench


@needs_linux
@pytest.mark.slow
def test_sigterm_of_a_bench_keeps_the_finished_processes(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """``kill PID`` of ``make bench`` (the notebook path) once a process has finished."""
    tmp, raw = folders
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = _start(["bench", "--raw-dir", str(raw), *BENCH_ARGS], tmp, tmp_path, stderr=err)
    try:
        _wait_for(proc, "a finished process", lambda: _completed(raw) >= 1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signal.SIGTERM, log.read_text()
    run_dir = _only_run(raw)
    _check_interrupted(run_dir)
    assert tree(run_dir) == ["bench.ipynb", "run.json", "samples.csv"]
    assert _notebook_errors(run_dir) == ["KeyboardInterrupt"]
    assert "marked incomplete" in log.read_text()
    assert not _none_left(tmp, within=3), "a process outlived the bench"
    assert tree(tmp) == []


def _controlling_terminal() -> None:
    """In the child (a new session): make its standard input, a pty, the controlling
    terminal, as an ssh login's shell has."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@needs_linux
@pytest.mark.slow
def test_a_terminal_hang_up_during_a_bench_keeps_the_finished_processes(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """An ssh connection drops: the bench's terminal hangs up (SIGHUP to it, and every
    later write to the terminal fails)."""
    tmp, raw = folders
    master, slave = os.openpty()
    try:
        proc = _start(
            ["bench", "--raw-dir", str(raw), *BENCH_ARGS],
            tmp,
            tmp_path,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_controlling_terminal,
        )
    finally:
        os.close(slave)
    shown = bytearray()

    def first_process_done() -> bool:
        # Read what the bench prints, or it blocks once the terminal's buffer is full.
        while select.select([master], [], [], 0)[0]:
            try:
                shown.extend(os.read(master, 65536))
            except OSError:
                break
        return _completed(raw) >= 1

    try:
        _wait_for(proc, "a finished process", first_process_done)
        os.close(master)  # the hang-up
        master = -1
        code = proc.wait(timeout=90)
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signal.SIGHUP, shown.decode(errors="replace")
    run_dir = _only_run(raw)
    _check_interrupted(run_dir)
    assert tree(run_dir) == ["bench.ipynb", "run.json", "samples.csv"]
    assert _notebook_errors(run_dir) == ["KeyboardInterrupt"]
    assert not _none_left(tmp, within=3), "a process outlived the bench"
    assert tree(tmp) == []


# ------------------------------------------------------------------ counts


def _valgrinds(tmp: Path) -> list[int]:
    return [p for p in _processes_naming(tmp) if b"valgrind" in _cmdline(p)]


@needs_linux
@needs_valgrind
@pytest.mark.slow
def test_sigterm_of_a_counts_run_keeps_the_finished_counts(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    tmp, raw = folders
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = _start(["bench", "--raw-dir", str(raw), *COUNTS_ARGS], tmp, tmp_path, stderr=err)
    try:
        _wait_for(proc, "a finished count", lambda: _completed(raw) >= 1, timeout=300)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signal.SIGTERM, log.read_text()
    run_dir = _only_run(raw)
    _check_interrupted(run_dir, "counts.csv")
    assert "keeps the finished counts" in log.read_text()
    assert not _none_left(tmp, within=3), "a counted process outlived the run"
    assert tree(tmp) == [], "the counts' temp folder (or valgrind's FIFOs) stayed"


@needs_linux
@needs_valgrind
@pytest.mark.slow
def test_kill_9_of_a_counts_runner_leaves_no_valgrind_running(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counted processes die with their runner at once, not when their interpreter
    (slowed down by valgrind) reaches its own parent-death request seconds later."""
    tmp, raw = folders
    proc = _start(
        ["bench", "--raw-dir", str(raw), *COUNTS_ARGS],
        tmp,
        tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(proc, "valgrind", lambda: len(_valgrinds(tmp)) >= 1)
        time.sleep(0.3)  # valgrind is starting the measured interpreter
        counting = _valgrinds(tmp)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert counting
    assert not _none_left(tmp, within=3), "valgrind outlived its killed runner"
    # What kill -9 left (the counts' temp folder) goes with the next count's start.
    # (named by the runner's pid, at 7 digits: kvqueue.measure.cachegrind's fixed length)
    assert [int(p.name.split("-")[2]) for p in tmp.iterdir()] == [proc.pid]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    kernel.remove_dead_entries("kvqueue-counts-")
    assert tree(tmp) == []


# ------------------------------------------------------------------ report


def _kernel_running(tmp: Path) -> bool:
    return any(b"ipykernel" in _cmdline(p) for p in _processes_naming(tmp))


def _default_sigint() -> None:
    # A suite started in the background inherits SIGINT ignored (tests/test_bench_cli.py):
    # give the report the disposition a terminal user has.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _busy_notebook(tmp_path: Path) -> tuple[Path, Path]:
    """The report notebook with a last cell that touches a marker file and then runs
    for a minute: a stop then finds the kernel executing a cell, as on the committed
    data (the tiny fixture's cells end in a blink), so the report kills a kernel that
    nbclient still waits on. Returns the notebook and the marker."""
    marker = tmp_path / "busy"
    nb = json.loads((REPO_ROOT / "notebooks" / "report.ipynb").read_text(encoding="utf-8"))
    # SIGINT ignored: like a cell busy in C code (a figure's savefig), it does not end
    # by KeyboardInterrupt before the report kills its kernel.
    source = (
        "import pathlib, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        f"pathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)\n"
    )
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [],
                        "execution_count": None, "source": source})  # fmt: skip
    path = tmp_path / "busy.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path, marker


def _report_in_its_notebook_stage(
    tmp: Path, tmp_path: Path, session: bool = False, busy: bool = False
) -> tuple[subprocess.Popen, Path]:
    """Start ``kvqueue report`` on the tiny fixture (in a session of its own with
    ``session``, as a login shell's job is); return once its kernel runs (the writeups
    are drawn beside it by then; with ``busy``, once it executes a cell that lasts); the
    process and the report folder."""
    raw = tmp_path / "raw"
    write_fixture(raw, tiny=True)
    out = tmp_path / "reports"
    args = ["report", "--raw-dir", str(raw), "--processed-dir", str(tmp_path / "processed")]
    marker = None
    if busy:
        notebook, marker = _busy_notebook(tmp_path)
        args += ["--notebook", str(notebook)]
    with open(tmp_path / "output.txt", "w") as sink:
        proc = _start(
            [*args, "--out", str(out)],
            tmp,
            tmp_path,
            stdout=sink,
            stderr=sink,
            preexec_fn=_default_sigint,
            start_new_session=session,
        )
    _wait_for(proc, "the report's kernel", lambda: _kernel_running(tmp), timeout=300)
    if marker is not None:
        _wait_for(proc, "the notebook's last cell", marker.exists, timeout=300)
    time.sleep(0.5)
    return proc, out


@needs_linux
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_in_the_reports_notebook_stage_leaves_nothing_behind(
    folders: tuple[Path, Path], tmp_path: Path, signum: int
) -> None:
    """The report's kernel runs: SIGTERM (or Ctrl-C) stops it, removes the kernel's
    files, and leaves no half-executed report.ipynb."""
    tmp, _ = folders
    proc, out = _report_in_its_notebook_stage(tmp, tmp_path)
    try:
        proc.send_signal(signum)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signum, (tmp_path / "output.txt").read_text()
    assert not _none_left(tmp, within=3), "the kernel outlived the report"
    assert tree(tmp) == []
    assert not [p for p in out.iterdir() if p.suffix == ".ipynb"], sorted(out.iterdir())
    assert not list(out.rglob("*.tmp"))


@needs_linux
@pytest.mark.slow
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"]
)
def test_a_stop_of_the_reports_whole_process_group_ends_it_cleanly(
    folders: tuple[Path, Path], tmp_path: Path, signum: int
) -> None:
    """Issue 28.4: an ssh drop signals the whole process group, the kernel included
    (when the writeups were drawn in a forked pool, a killed worker held the task
    queue's lock and the report hung forever); the kernel's teardown printed
    ipykernel's traceback. Ctrl-C in a terminal signals the group too: the
    kernel died first, and nbclient's log line and an unawaited task's DeadKernelError
    traceback were printed. The previous build's notebook goes too: the processed
    tables it showed were rewritten."""
    tmp, _ = folders
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.ipynb").write_text("{}\n")  # the previous build's
    proc, out = _report_in_its_notebook_stage(tmp, tmp_path, session=True, busy=True)
    try:
        os.killpg(proc.pid, signum)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    shown = (tmp_path / "output.txt").read_text()
    assert code == 128 + signum, shown
    assert "Traceback" not in shown and "ZMQError" not in shown, shown
    assert "Kernel died" not in shown and "never retrieved" not in shown, shown
    (removed,) = [ln for ln in shown.splitlines() if "removed the previous" in ln]
    assert "report.ipynb" in removed, shown
    assert not _none_left(tmp, within=3), "the kernel outlived the report"
    assert tree(tmp) == []
    assert not [p for p in out.iterdir() if p.suffix == ".ipynb"], sorted(out.iterdir())


@needs_linux
@pytest.mark.slow
def test_kill_9_of_the_report_leaves_no_kernel_running(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel exits when it sees its parent gone; what it left in the temp folder
    goes with the next report's start."""
    tmp, _ = folders
    proc, _out = _report_in_its_notebook_stage(tmp, tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    # ipykernel looks for its parent every second.
    assert not _none_left(tmp, within=5), "the kernel outlived the report"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    kernel.remove_dead_entries(kernel.KERNEL_PREFIX)
    assert tree(tmp) == []


@needs_linux
@pytest.mark.slow
def test_the_report_stops_cleanly_when_its_parent_dies(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """Issue 28.4 (probe): SIGHUP to make's pid alone ended make, and the report's python
    ran on and wrote report.html. The report now gets SIGTERM when its parent dies."""
    tmp, _ = folders
    raw = tmp_path / "raw"
    write_fixture(raw, tiny=True)
    out = tmp_path / "reports"
    command = [
        sys.executable, "-m", "kvqueue", "report", "--raw-dir", str(raw),
        "--processed-dir", str(tmp_path / "processed"), "--out", str(out),
    ]  # fmt: skip
    # A parent that starts the report, as make does, and waits for it.
    parent = subprocess.Popen(
        ["sh", "-c", '"$@" > "$0" 2>&1; :', str(tmp_path / "output.txt"), *command],
        cwd=REPO_ROOT,
        env=_environment(tmp, tmp_path),
        preexec_fn=_default_sigint,
    )
    try:
        _wait_for(parent, "the report's kernel", lambda: _kernel_running(tmp), timeout=300)
        parent.kill()
        parent.wait()
        assert not _none_left(tmp, within=30), "the report outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert not (out / "report.html").exists(), (tmp_path / "output.txt").read_text()
    assert tree(tmp) == []
