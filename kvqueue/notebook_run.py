"""Execute ``notebooks/bench.ipynb`` with papermill and file it in the run folder.

The notebook is the record of a run: its parameters cell holds every parameter as a
literal, and the executed copy (with the runner's progress and a summary table) is
saved as ``data/raw/<host>/<run-id>/bench.ipynb``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

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
            pm.execute_notebook(
                str(BENCH_NOTEBOOK),
                str(out),
                parameters=notebook_parameters(params, raw_dir, run_id),
                progress_bar=False,
                stdout_file=sys.stderr,
                stderr_file=sys.stderr,
                cwd=os.getcwd(),  # relative variant paths resolve where they were checked
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
