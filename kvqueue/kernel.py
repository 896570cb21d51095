"""The Jupyter kernel manager that papermill runs notebooks with (bench and report).

Root module: the bench's notebook launcher and the report's build both execute a
notebook through it, and neither may import the other.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any


def quiet_kernel_manager_class() -> type:
    """A jupyter_client kernel manager that keeps the kernel's log lines out of a run.

    - IPC transport instead of TCP: ipykernel warns on every start that TCP runs
      "without encryption", a line that says nothing about the run.
    - No interrupt on shutdown: jupyter_client sends SIGINT to a kernel it shuts down,
      and an idle kernel then logs "KeyboardInterrupt caught in kernel." after a
      successful run. The kernel is asked to shut down (and killed if it does not).
    """
    from jupyter_client import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", "ipc")
            # The IPC socket files go to the temp folder, not the current one (a killed
            # kernel leaves five behind).
            kwargs.setdefault(
                "ip", os.path.join(tempfile.gettempdir(), f"kvqueue-kernel-{os.getpid()}")
            )
            super().__init__(**kwargs)

        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietKernelManager
