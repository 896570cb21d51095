"""What a gate or worker process does first: die with the runner that started it.

The runner starts each child in a session of its own (so that a timeout can kill the
whole session) and names itself in ``KVQUEUE_PARENT_PID``. On Linux the child then asks
the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), so a
``kill -9`` of the runner or of the notebook's kernel leaves no orphan that keeps timing
on a shared CPU. This runs in the child rather than through ``preexec_fn``: a
``preexec_fn`` makes ``subprocess`` fork with Python's at-fork hooks, and a Ctrl-C that
lands in one of them is swallowed ("Exception ignored in _releaseLock"), so the runner
missed about one interrupt in three. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys

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
