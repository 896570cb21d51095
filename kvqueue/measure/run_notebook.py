"""Execute ``notebooks/bench.ipynb`` with papermill and file it in the run folder.

The notebook is the record of a run: its parameters cell holds every parameter as a
literal, and the executed copy (with the runner's progress and a summary table) is
saved as ``data/raw/<host>/<run-id>/bench.ipynb``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchError, BenchInputError, GateRefused
from kvqueue.kernel import quiet_kernel_manager_class
from kvqueue.measure import run_folder
from kvqueue.params import bench_params, report_params

BENCH_NOTEBOOK_PATH = hostinfo.PROJECT_DIR / "notebooks" / "bench.ipynb"
REPORT_NOTEBOOK_PATH = hostinfo.PROJECT_DIR / "notebooks" / "report.ipynb"
_ERRORS = {
    "BenchInputError": BenchInputError,
    "GateRefused": GateRefused,
    "BenchError": BenchError,
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
    quiet = quiet_kernel_manager_class()
    started: list[Any] = []

    class ForwardingKernelManager(quiet):  # type: ignore[misc,valid-type]
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
        yield quiet
        return
    try:
        yield ForwardingKernelManager
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
    _remove_stale_temp_folders()
    with tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid()}-") as tmp:
        out = Path(tmp) / schema.RUN_NOTEBOOK
        try:
            with _sigint_goes_to_the_kernel() as kernel_manager_class, _quiet_kernel_logs():
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
                raise KeyboardInterrupt from None
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
                with contextlib.suppress(FileExistsError):
                    run_folder.file_notebook(run_dir, out)
    return run_dir


_TMP_PREFIX = "kvqueue-bench-"


def _remove_stale_temp_folders() -> None:
    """Remove temp folders of launchers that died (``kill -9``) before cleaning up."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_TMP_PREFIX}*-*"):
        pid_text = folder.name[len(_TMP_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or not folder.is_dir():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # alive, somebody else's


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
