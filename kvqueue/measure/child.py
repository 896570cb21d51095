"""What a gate or worker process does first: die with the runner that started it.

The runner starts each child in a session of its own (so that a timeout can kill the
whole session) and names itself in ``KVQUEUE_PARENT_PID``. On Linux the child then asks
the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), so a
``kill -9`` of the runner or of the notebook's kernel leaves no orphan that keeps timing
on a shared CPU. This runs in the child rather than through ``preexec_fn``: a
``preexec_fn`` makes ``subprocess`` fork with Python's at-fork hooks, and a Ctrl-C that
lands in one of them is swallowed ("Exception ignored in _releaseLock"), so the runner
missed about one interrupt in three.

A child that is not Python code of ours (valgrind, which runs the counted interpreter
in its own process) is started through this module instead: ``python -m
kvqueue.measure.child PROGRAM ARGS...`` asks for the parent-death signal and then
becomes PROGRAM (``exec``, which keeps the request). Without it, a counted process
reached its own request only after the interpreter's start and imports under valgrind
(5-15 s), and a ``kill -9`` of the runner in that time left it running. Standard
library only.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

PARENT_ENV = "KVQUEUE_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Arrange to be killed when the process named in ``KVQUEUE_PARENT_PID`` dies.

    Does nothing when the variable is unset (a child started by hand) or off Linux.
    Exits at once if that parent is already gone (it died before the request).
    """
    text = os.environ.get(PARENT_ENV, "")
    if not text.isdigit() or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(text):  # the parent died before the request took effect
        os._exit(1)


def exec_dying_with_parent(argv: list[str]) -> NoReturn:
    """Ask to die with the parent (:func:`die_with_parent`), then become ``argv``.

    The request survives ``exec`` (it is dropped only for a set-user-ID program), so
    the program is killed with the runner from its first instruction on.
    """
    if not argv:
        print("usage: python -m kvqueue.measure.child PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    die_with_parent()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"kvqueue child: cannot run {argv[0]}: {exc}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    exec_dying_with_parent(sys.argv[1:])
