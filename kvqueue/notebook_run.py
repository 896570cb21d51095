"""Execute ``notebooks/bench.ipynb`` with papermill and file it in the run folder.

The notebook is the record of a run: its parameters cell holds every parameter as a
literal, and the executed copy (with the runner's progress and a summary table) is
saved as ``data/raw/<host>/<run-id>/bench.ipynb``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvqueue import hostinfo
from kvqueue.params import BenchInputError, BenchParams
from kvqueue.runner import BenchError, GateRefused, new_run_id

BENCH_NOTEBOOK = hostinfo.PROJECT_DIR / "notebooks" / "bench.ipynb"
_ERRORS = {"BenchInputError": BenchInputError, "GateRefused": GateRefused}


def notebook_parameters(params: BenchParams, raw_dir: Path, run_id: str) -> dict:
    """Map :class:`BenchParams` onto the notebook's ``parameters`` cell."""
    return {
        "host": params.host,
        "python": params.python,
        "variants": list(params.variants),
        "processes": params.processes,
        "confirm_processes": params.confirm_processes,
        "samples": params.samples,
        "sample_ms": params.sample_ms,
        "pools": list(params.pools),
        "cases": list(params.cases),
        "cpu": params.cpu,
        "gc": params.gc,
        "seed": params.seed,
        "quick": params.quick,
        "aa": params.aa,
        "raw_dir": str(raw_dir),
        "run_id": run_id,
    }


@contextlib.contextmanager
def _sigint_goes_to_the_kernel() -> Iterator[type]:
    """Forward Ctrl-C to the kernel while papermill waits for it; yield the manager class.

    jupyter_client starts the kernel in a session of its own, so a terminal's Ctrl-C
    reaches only this process. Left alone, it raises KeyboardInterrupt in papermill's
    event loop, which tears the kernel down while the runner is still saving, and the
    notebook record may or may not show the interruption. Forwarding it instead lets
    the runner inside the kernel mark the run ``interrupted`` and end the cell with
    KeyboardInterrupt, which papermill records and reports like any cell error.
    """
    from jupyter_client import AsyncKernelManager

    started: list[Any] = []

    class ForwardingKernelManager(AsyncKernelManager):  # type: ignore[misc]
        async def _async_post_start_kernel(self, **kw: Any) -> None:
            await super()._async_post_start_kernel(**kw)
            started.append(self)

    def forward(_signum: int, _frame: Any) -> None:
        pgid = getattr(started[-1].provisioner, "pgid", None) if started else None
        if pgid is None:  # no kernel yet (or not a local one): stop here as usual
            raise KeyboardInterrupt
        # The whole group, as a terminal would: the runner and its current worker.
        os.killpg(pgid, signal.SIGINT)

    try:
        previous = signal.signal(signal.SIGINT, forward)
    except ValueError:  # not the main thread: leave Ctrl-C handling as it is
        yield AsyncKernelManager
        return
    try:
        yield ForwardingKernelManager
    finally:
        signal.signal(signal.SIGINT, previous)


def run_bench_notebook(params: BenchParams, raw_dir: Path) -> Path:
    """Run the protocol through the bench notebook; return the run folder.

    Raises
    ------
    BenchInputError, GateRefused
        Refused before anything was written (the notebook copy is discarded).
    BenchError
        The run failed; the executed notebook is still filed with the partial run.
    """
    import papermill as pm

    run_id = new_run_id(hostinfo.python_info(params.python)["tag"])
    run_dir = Path(raw_dir) / params.host / run_id
    with tempfile.TemporaryDirectory(prefix="kvqueue-bench-") as tmp:
        out = Path(tmp) / "bench.ipynb"
        try:
            with _sigint_goes_to_the_kernel() as kernel_manager_class:
                pm.execute_notebook(
                    str(BENCH_NOTEBOOK),
                    str(out),
                    parameters=notebook_parameters(params, raw_dir, run_id),
                    progress_bar=False,
                    stdout_file=sys.stderr,
                    stderr_file=sys.stderr,
                    cwd=os.getcwd(),  # relative variant paths resolve where they were checked
                    kernel_manager_class=kernel_manager_class,
                )
        except pm.PapermillExecutionError as exc:
            if exc.ename in _ERRORS:
                raise _ERRORS[exc.ename](exc.evalue) from None
            if exc.ename == "KeyboardInterrupt":
                raise KeyboardInterrupt from None
            raise BenchError(f"{exc.ename}: {exc.evalue}") from None
        finally:
            # Whatever happened, a run folder that exists gets its notebook record.
            if run_dir.is_dir() and out.exists():
                shutil.copyfile(out, run_dir / "bench.ipynb")
    return run_dir
