"""One measuring command per machine: the ``flock`` every bench, quick, history, policy,
counts and regress run holds for all of its work.

A second timing job on these 2-vCPU VMs slows a pinned benchmark by up to a third, and
both runs would be recorded as complete, so the second one is refused in one line that
names the holder. :func:`refuse_if_held` gives that line before a command prints
anything else (its parameters, the gate); :func:`hold` takes the lock for the run.

With ``WAIT=1`` (:mod:`kvqueue.params.lock_params`) the command queues instead: the probe
lets it through, and :func:`hold` prints what it waits for and since when, a line again
when another measurement takes the lock first and every :data:`REPEAT_SECONDS`, and
takes the lock once it is free. The wait comes before anything is written, so Ctrl-C
(or SIGTERM, SIGHUP) while waiting writes nothing; ``MAX_MINUTES`` counts from the end
of the wait.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from kvqueue.errors import MachineBusy
from kvqueue.kernel import remove_dead_entries, stop_signals
from kvqueue.measure.run_folder import now
from kvqueue.params.bench_params import BUDGET_START_ENV
from kvqueue.params.lock_params import WAIT_ENV

#: The lock file's path, for tests and for a user who runs two checkouts side by side.
LOCK_ENV = "KVQUEUE_LOCK_FILE"

#: Whether this process holds the lock (a check inside a held lock must not refuse it).
_held = False
#: Seconds this process has waited for the lock (``WAIT=1``), all waits together.
_waited = [0.0]
#: Seconds between two tries of a held lock while waiting (``WAIT=1``).
POLL_SECONDS = 0.5
#: Seconds between two progress lines of a wait whose holder stays the same.
REPEAT_SECONDS = 600.0


def waits() -> bool:
    """Whether this command waits for a held lock (``WAIT=1``) instead of refusing."""
    return os.environ.get(WAIT_ENV) == "1"


def lock_path() -> Path:
    """The machine-wide bench lock (``$KVQUEUE_LOCK_FILE``, else ``/tmp/kvqueue-bench.lock``).

    A fixed folder, not ``tempfile.gettempdir()``: with another ``TMPDIR`` two benches
    took two locks and ran at once.
    """
    import tempfile

    folder = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    return Path(os.environ.get(LOCK_ENV) or folder / "kvqueue-bench.lock")


@contextlib.contextmanager
def hold(what: str) -> Iterator[None]:
    """Hold the one-bench-per-machine lock, or refuse in one line if another holds it;
    while it is held, SIGTERM and SIGHUP take the path of Ctrl-C.

    Every measuring command holds the lock for all of its work, so this is the one place
    where they all get the stop signals (:func:`kvqueue.kernel.stop_signals`): a ``kill``
    or a dropped ssh connection keeps the finished processes, marks the run
    ``interrupted`` and stops the children.

    Raises
    ------
    MachineBusy
        Another bench is running (its pid and run are named; a MachineBusy).
    """
    global _held
    with stop_signals(), _lock_file(what):
        remove_dead_entries()  # what a kill -9 of any earlier command left in the temp folder
        _held = True
        try:
            yield
        finally:
            _held = False


def refuse_if_held() -> None:
    """Refuse now, in one line, if another process holds the lock (a probe: the lock is
    taken and let go at once; :func:`hold` takes it for the run).

    Raises
    ------
    MachineBusy
        Another bench is running.
    """
    if _held or waits():
        return
    with _lock_file(None):
        pass


@contextlib.contextmanager
def _lock_file(what: str | None) -> Iterator[None]:
    """``flock`` on :func:`lock_path`; with ``what``, name this process as its holder."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, as before
        yield
        return
    path = lock_path()
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole run
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if what is None or not waits():
                raise MachineBusy(
                    f"another bench is running on this machine ({_holder(fh)}); two timing "
                    f"jobs at once slow each other by up to a third: wait for it, or WAIT=1 "
                    f"queues behind it (lock {path})"
                ) from None
            _wait(fh, path)
        if what is not None:
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()}, {what}, since {now()}")
            fh.flush()
        yield
    finally:
        fh.close()


def waited_seconds() -> float:
    """Seconds this process has waited for the lock so far: a command's "counted in N s"
    leaves them out (a quick that queued 1,352 s said 1,480 s for 128 s of counting)."""
    return _waited[0]


def _holder(fh: TextIO) -> str:
    """What the lock file says of its holder (``unknown`` when it says nothing)."""
    fh.seek(0)
    return fh.read().strip() or "unknown"


def _wait(fh: TextIO, path: Path) -> None:
    """Take the lock on ``fh`` once its holder lets it go, saying on stderr what this
    command waits for and since when; the wait's length is added to the budget's start
    (``MAX_MINUTES`` counts the run, not the queue)."""
    import fcntl

    started, since = time.monotonic(), now()
    holder = _holder(fh)
    said, last = holder, started
    try:  # from the first line on, a stop says that it stopped the wait
        print(
            f"waiting for the machine lock since {since}: {holder} (lock {path}); Ctrl-C "
            "stops the wait and writes nothing",
            file=sys.stderr,
            flush=True,
        )
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            time.sleep(POLL_SECONDS)
            holder, clock = _holder(fh), time.monotonic()
            if holder != said or clock - last >= REPEAT_SECONDS:
                minutes = (clock - started) / 60
                print(
                    f"still waiting for the machine lock (since {since}, {minutes:.0f} "
                    f"min): {holder}",
                    file=sys.stderr,
                    flush=True,
                )
                said, last = holder, clock
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: nothing was started yet
        seconds = time.monotonic() - started
        print(
            f"stopped while waiting for the machine lock ({seconds:.0f} s): nothing was written",
            file=sys.stderr,
            flush=True,
        )
        raise
    waited = time.monotonic() - started
    _waited[0] += waited
    with contextlib.suppress(KeyError, ValueError):  # no budget here, or none readable
        os.environ[BUDGET_START_ENV] = repr(float(os.environ[BUDGET_START_ENV]) + waited)
    print(f"machine lock taken after {waited:.0f} s of waiting", file=sys.stderr, flush=True)
