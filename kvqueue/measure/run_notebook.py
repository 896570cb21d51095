"""Execute ``notebooks/bench.ipynb`` with papermill and file it in the run folder.

The notebook is the record of a run: its parameters cell holds every parameter as a
literal, and the executed copy (with the runner's progress and a summary table) is
saved as ``data/raw/<host>/<run-id>/bench.ipynb``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchError, BenchInputError, GateRefused
from kvqueue.kernel import Stopped, managed_kernels, remove_dead_entries, stop_signals
from kvqueue.measure import run_folder
from kvqueue.params import bench_params, report_params

BENCH_NOTEBOOK_PATH = hostinfo.PROJECT_DIR / "notebooks" / "bench.ipynb"
REPORT_NOTEBOOK_PATH = hostinfo.PROJECT_DIR / "notebooks" / "report.ipynb"
_ERRORS = {
    "BenchInputError": BenchInputError,
    "GateRefused": GateRefused,
    "BenchError": BenchError,
}
#: The stop signals this launcher forwarded to its kernel during the current run.
_forwarded: list[int] = []


@contextlib.contextmanager
def _interrupts_go_to_the_kernel() -> Iterator[type]:
    """Forward Ctrl-C, SIGTERM and SIGHUP to the kernel while papermill waits for it as
    SIGINT; yield the manager class.

    jupyter_client starts the kernel in a session of its own, so a terminal's Ctrl-C
    (or hang-up) reaches only this process, and so does a ``kill``. Left alone, Ctrl-C
    raises KeyboardInterrupt in papermill's event loop, which tears the kernel down
    while the runner is still saving, and the notebook record may or may not show the
    interruption; SIGTERM and SIGHUP killed this process and left the run ``running``,
    the kernel's files in the temp folder. Forwarding them instead lets the runner
    inside the kernel mark the run ``interrupted`` and end the cell with
    KeyboardInterrupt, which papermill records and reports like any cell error.
    """
    with managed_kernels() as manager:

        def forward(signum: int) -> None:
            started = manager.started
            pgid = getattr(started[-1].provisioner, "pgid", None) if started else None
            if pgid is None:  # no kernel yet (or not a local one): stop here as usual
                raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)
            # The whole group, as a terminal would: the runner and its current worker.
            _forwarded.append(signum)
            os.killpg(pgid, signal.SIGINT)

        try:
            previous = signal.signal(signal.SIGINT, lambda signum, _frame: forward(signum))
        except ValueError:  # not the main thread: leave Ctrl-C handling as it is
            yield manager
            return
        try:
            with stop_signals(forward):
                yield manager
        finally:
            signal.signal(signal.SIGINT, previous)


def run_bench_notebook(checked: bench_params.Checked, raw_dir: Path, run_id: str) -> Path:
    """Run the protocol through the bench notebook; return the run folder.

    Parameters
    ----------
    checked
        Parameters checked once by the CLI; passed to the notebook as literals together
        with the interpreter's identity, so the notebook checks nothing again.
    raw_dir
        Root of the raw data.
    run_id
        The run folder's name (:func:`kvqueue.schema.new_run_id`).

    Raises
    ------
    BenchInputError, GateRefused
        Refused before anything was written (the notebook copy is discarded).
    BenchError
        The run failed; the executed notebook is still filed with the partial run.
    """
    import papermill as pm
    from nbclient.exceptions import DeadKernelError

    run_dir = schema.run_path(raw_dir, checked.params.host, run_id)
    _forwarded.clear()
    remove_dead_entries(_TMP_PREFIX)  # what a launcher killed by kill -9 left
    # Stop signals before the kernel starts or after it ends stop here, as Ctrl-C does
    # (the temp folder removed); while it runs they go to it.
    with (
        stop_signals(),
        tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid()}-") as tmp,
    ):
        out = Path(tmp) / schema.RUN_NOTEBOOK
        try:
            with _interrupts_go_to_the_kernel() as kernel_manager_class, _quiet_kernel_logs():
                pm.execute_notebook(
                    str(BENCH_NOTEBOOK_PATH),
                    str(out),
                    parameters=bench_params.bench_notebook_parameters(
                        checked, raw_dir, run_id, launcher_pid=os.getpid()
                    ),
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
                # The launcher's exit status names the signal it got (143 for SIGTERM).
                last = _forwarded[-1] if _forwarded else signal.SIGINT
                raise (KeyboardInterrupt() if last == signal.SIGINT else Stopped(last)) from None
            raise BenchError(f"{exc.ename}: {exc.evalue or 'no message'}") from None
        except DeadKernelError:
            # kill -9 of the kernel (or the runner in it): nobody else can close the run.
            if run_folder.mark_dead(run_dir, "the notebook's kernel died", run_folder.now()):
                raise BenchError(
                    f"the notebook's kernel died; {run_dir} is marked failed"
                ) from None
            raise BenchError("the notebook's kernel died before the run started") from None
        finally:
            # A run folder that this launcher's run created gets its notebook record,
            # whatever happened; never a folder of another run that took the same id.
            if out.exists() and run_dir.is_dir() and run_folder.owned_by(run_dir, os.getpid()):
                # Held: a second signal would leave the copy without its digest.
                with contextlib.suppress(FileExistsError), run_folder.interrupts_held():
                    run_folder.file_notebook(run_dir, out)
    return run_dir


_TMP_PREFIX = "kvqueue-bench-"


@contextlib.contextmanager
def _quiet_kernel_logs() -> Iterator[None]:
    """Silence jupyter_client's and papermill's log lines that are not about the run.

    Every bench printed jupyter_client's "running over TCP without encryption" warning,
    which says nothing about the run and reads like a problem.
    """
    import logging

    names = ("traitlets", "papermill", "jupyter_client")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


# ------------------------------------------------------------------ parameters cells


def _parameters_cell(nb: dict[str, Any]) -> dict[str, Any]:
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected one cell tagged 'parameters', found {len(cells)}")
    return cells[0]


def expected_parameters_cells() -> dict[Path, str]:
    """Each notebook and the ``parameters`` cell generated for it by :mod:`kvqueue.params`."""
    return {
        BENCH_NOTEBOOK_PATH: bench_params.bench_parameters_cell(),
        REPORT_NOTEBOOK_PATH: report_params.report_parameters_cell(),
    }


def sync_parameters_cells() -> list[Path]:
    """Rewrite each notebook's ``parameters`` cell from the fields; return those changed."""
    changed = []
    for path, text in expected_parameters_cells().items():
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = _parameters_cell(nb)
        lines = text.split("\n")
        new = [line + "\n" for line in lines[:-1]] + [lines[-1]]
        if cell["source"] != new:
            cell["source"] = new
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            changed.append(path)
    return changed
