"""What the long commands' launchers share: the Jupyter kernel manager papermill runs
notebooks with (bench and report), SIGTERM and SIGHUP taken as Ctrl-C, and the temp
entries named after the process that made them.

Root module: the bench's notebook launcher, its runner and the report's build all use
it, and neither side may import the other. Standard library only at import (the kernel
manager imports jupyter_client when it is asked for).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

#: The signals that stop a long command the way Ctrl-C does: ``kill`` or a supervisor
#: (SIGTERM) and a closed terminal or ssh connection (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Prefix of the kernel's temp files (IPC sockets, connection file): ``<prefix><pid>-*``.
KERNEL_PREFIX = "kvqueue-kernel-"


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt.

    A subclass, so that every path that handles Ctrl-C (the run marked ``interrupted``,
    children killed, temp files removed, exit status 130) handles these too.

    Parameters
    ----------
    signum
        The signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int) -> None:
    raise Stopped(signum)


def stop_with_parent() -> None:
    """Get SIGTERM (the path of Ctrl-C: :func:`stop_signals`) when the parent dies.

    ``make report`` sent SIGHUP (its own pid only: a closed terminal's job control)
    exited 129 while the report's python ran on and wrote report.html. Linux only, and
    only with a parent that is not init (a command started by hand in a shell stops
    with the shell).
    """
    if not sys.platform.startswith("linux") or os.getppid() == 1:
        return
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _was_a_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


@contextlib.contextmanager
def stop_signals(on_stop: Callable[[int], None] | None = None) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP take the path of Ctrl-C.

    Parameters
    ----------
    on_stop
        Called with the signal number in the main thread (default: raise
        :class:`Stopped`); the bench's launcher forwards it to its kernel instead.

    Notes
    -----
    - A signal that is ignored when the block starts stays ignored: ``nohup make bench``
      asks for a run that outlives its terminal.
    - On SIGHUP, standard output and error that were a terminal are pointed at
      ``/dev/null`` first: a hung-up terminal fails every write (EIO), and the lines
      that say the run was interrupted would raise in the middle of closing it.
    - A process forked inside the block inherits the handler; there it dies by the
      signal as if no handler were set, so that a SIGTERM to a forked worker (a
      ``multiprocessing`` pool's ``terminate()``) still ends it at once and silently.
    - The previous handlers come back when the block ends; outside the main thread
      (where no handler can be set) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stop = on_stop or _raise_stopped
    owner = os.getpid()
    terminals = [fd for fd in (1, 2) if _was_a_terminal(fd)]

    def handler(signum: int, _frame: Any) -> None:
        if os.getpid() != owner:  # a forked copy: behave as the default disposition
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if signum == signal.SIGHUP and terminals:
            with contextlib.suppress(OSError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                for fd in terminals:
                    os.dup2(devnull, fd)
                os.close(devnull)
        stop(signum)

    previous = {
        s: signal.signal(s, handler) for s in STOP_SIGNALS if signal.getsignal(s) != signal.SIG_IGN
    }
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


#: Every temp entry of this project is ``<prefix><pid>-...``, its prefix one of these
#: words (``kvqueue-counts-``, ``kvqueue-bench-``, ``kvqueue-kernel-``; ``kvq-ahead-``: the
#: figures an older report drew beside its kernel).
_OUR_TEMP = re.compile(r"^(?:kvqueue|kvq)-[a-z]+-(\d+)-")


def remove_dead_entries(prefix: str = "", folder: Path | None = None) -> None:
    """Remove the temp folder's ``<prefix><pid>-*`` entries of processes that are gone
    (``prefix`` empty: every entry of this project's, :data:`_OUR_TEMP`; ``folder``:
    another folder than the temp folder, e.g. the report's build cache).

    What a ``kill -9`` left behind (nothing else runs to remove it): the next command
    removes it; every measuring command removes every kind (a counts run's were left
    until the next counts run). An entry of a live process, or of another user's, stays.
    """
    folder = Path(tempfile.gettempdir()) if folder is None else folder
    for entry in folder.glob(f"{prefix}*-*" if prefix else "kv*-*-*"):
        if prefix:
            pid_text = entry.name[len(prefix) :].split("-", 1)[0]
        else:
            found = _OUR_TEMP.match(entry.name)
            pid_text = found.group(1) if found else ""
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, somebody else's


def quiet_kernel_manager_class() -> type:
    """A jupyter_client kernel manager that keeps the kernel's log lines out of a run.

    - IPC transport instead of TCP: ipykernel warns on every start that TCP runs
      "without encryption", a line that says nothing about the run.
    - No interrupt on shutdown: jupyter_client sends SIGINT to a kernel it shuts down,
      and an idle kernel then logs "KeyboardInterrupt caught in kernel." after a
      successful run. The kernel is asked to shut down (and killed if it does not).
    - Its standard error goes to a log beside its connection file, removed with it:
      ipykernel logs a traceback to it when it is torn down by a stop.
    - Its temp files (IPC sockets, connection file, log) are named after this process
      (:data:`KERNEL_PREFIX`), so that those a ``kill -9`` left are removed by the
      next kernel started (:func:`remove_dead_entries`).
    """
    from jupyter_client import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            remove_dead_entries(KERNEL_PREFIX)
            named = os.path.join(tempfile.gettempdir(), f"{KERNEL_PREFIX}{os.getpid()}")
            kwargs.setdefault("transport", "ipc")
            # The IPC socket files go to the temp folder, not the current one (a killed
            # kernel leaves five behind).
            kwargs.setdefault("ip", named)
            # jupyter_client's default is an anonymous tmp*.json in the temp folder.
            kwargs.setdefault("connection_file", f"{named}-{uuid.uuid4().hex[:12]}.json")
            super().__init__(**kwargs)

        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            # The kernel's own standard error (ipykernel's log, never a cell's output,
            # which comes over its sockets) goes to a file beside its connection file: a
            # Ctrl-C of the report printed ipykernel's 20-line "ZMQError: Socket operation
            # on non-socket" traceback as the kernel was torn down (3 of 5 tries).
            self.kernel_log = Path(self.connection_file).with_suffix(".log")
            with open(self.kernel_log, "ab") as log:  # the child keeps its own copy
                kw["stderr"] = log
                await super()._async_launch_kernel(kernel_cmd, **kw)

        def cleanup_connection_file(self) -> None:
            super().cleanup_connection_file()
            log = getattr(self, "kernel_log", None)
            if log is not None:
                log.unlink(missing_ok=True)

    return QuietKernelManager


@contextlib.contextmanager
def managed_kernels() -> Iterator[type]:
    """The kernel manager class of one papermill run (:func:`quiet_kernel_manager_class`);
    a kernel still running when the block is left by an exception is killed and its
    temp files removed.

    Ctrl-C (or :class:`Stopped`) in papermill's event loop leaves the coroutine that
    would shut the kernel down suspended for good: the kernel lived on until it noticed
    its parent gone, and its IPC sockets and connection file stayed in the temp folder.
    The class lists the managers whose kernel is ready in ``started`` (the bench's
    launcher forwards interrupts to the last one).
    """
    quiet = quiet_kernel_manager_class()
    launched: list[Any] = []

    class ManagedKernelManager(quiet):  # type: ignore[misc,valid-type]
        started: ClassVar[list[Any]] = []  # one list per class, shared by its managers

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            await super()._async_launch_kernel(kernel_cmd, **kw)
            launched.append(self)

        async def _async_post_start_kernel(self, **kw: Any) -> None:
            await super()._async_post_start_kernel(**kw)
            self.started.append(self)

    try:
        yield ManagedKernelManager
    except BaseException:
        for manager in launched:
            _kill_kernel(manager)
        raise


def _kill_kernel(manager: Any) -> None:
    """Kill ``manager``'s kernel if it still runs, and remove its temp files."""
    process = getattr(manager.provisioner, "process", None) if manager.provisioner else None
    # Only a process not yet reaped: its group id cannot belong to anybody else.
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)  # its own session: pgid == pid
        with contextlib.suppress(Exception):
            process.wait(timeout=5)
    manager.cleanup_connection_file()
    manager.cleanup_ipc_files()
