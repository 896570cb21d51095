"""One measuring command per machine: the ``flock`` every bench, quick, history, policy,
counts and regress run holds for all of its work.

A second timing job on these 2-vCPU VMs slows a pinned benchmark by up to a third, and
both runs would be recorded as complete, so the second one is refused in one line that
names the holder. :func:`refuse_if_held` gives that line before a command prints
anything else (its parameters, the gate); :func:`hold` takes the lock for the run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from kvqueue.errors import MachineBusy
from kvqueue.kernel import remove_dead_entries, stop_signals
from kvqueue.measure.run_folder import now

#: The lock file's path, for tests and for a user who runs two checkouts side by side.
LOCK_ENV = "KVQUEUE_LOCK_FILE"

#: Whether this process holds the lock (a check inside a held lock must not refuse it).
_held = False


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
        Another bench is running (its pid and run are named; a BenchInputError).
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
    if _held:
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
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise MachineBusy(
                f"another bench is running on this machine ({holder}); two timing jobs at "
                f"once slow each other by up to a third: wait for it (lock {path})"
            ) from None
        if what is not None:
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()}, {what}, since {now()}")
            fh.flush()
        yield
    finally:
        fh.close()
