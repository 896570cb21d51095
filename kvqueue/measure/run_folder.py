"""Write one run folder ``data/raw/<host>/<run-id>/``: created once, rewritten atomically,
sealed with the sha256 of its files (format: :mod:`kvqueue.schema`).

Every writer of a run folder uses this module: the runner of bench and history runs
(``run.json`` and ``samples.csv`` after every process), the policy run (``run.json``
and ``policy.csv``: the kind's data file is a :class:`RunTable`) and ``notebook_run``
(the executed ``bench.ipynb``, copied in when the notebook ends). Every rewrite of
``run.json`` records the sha256 and row count of the data file written just before it,
and the notebook's sha256 once it is filed, so that the report can tell an edited, cut
or padded raw file from the one the run wrote. Every kind's first ``run.json`` is built
here too (:func:`start_record`). Standard library only.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import hashlib
import io
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, runrecord, schema
from kvqueue.errors import BenchError
from kvqueue.kernel import STOP_SIGNALS


def now() -> str:
    """The current UTC time as ``run.json`` records it (ISO 8601, whole seconds)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and a rename (never half-written)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


#: The signals that interrupt a run: Ctrl-C, and those taken as Ctrl-C
#: (:data:`kvqueue.kernel.STOP_SIGNALS`).
INTERRUPTS = (signal.SIGINT, *STOP_SIGNALS)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold :data:`INTERRUPTS` while the block runs; each one received is delivered as
    it ends, to the handler it would have reached.

    Held by Python's handlers, not by ``pthread_sigmask``: a mask holds a signal for the
    calling thread only, and in a process with other threads (the notebook's kernel,
    pytest) one of them took the signal and its handler ran in the middle of the block
    all the same. Python runs every handler in the main thread, so outside it nothing
    is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = {
        s: signal.signal(s, lambda signum, _frame: pending.append(signum))
        for s in INTERRUPTS
        if signal.getsignal(s) not in (signal.SIG_IGN, None)
    }
    try:
        yield
    finally:
        for s, previous in held.items():
            signal.signal(s, previous)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


def _cell(value: Any) -> Any:
    # Floats in the schema's one format; the csv module quotes labels (source strings)
    # that hold a comma, a quote or a newline.
    return schema.format_sample_float(value) if isinstance(value, float) else value


def samples_text(rows: list[list[Any]]) -> str:
    """``samples.csv`` as text: the header, then one row per sample (csv module)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(schema.SAMPLE_COLUMNS)
    out.writerows([_cell(v) for v in row] for row in rows)
    return buf.getvalue()


def sample_row(process: int, phase: str, row: Sequence[Any]) -> list[Any]:
    """One ``samples.csv`` row: a worker's sample row after its process and phase."""
    return [process, phase, *row]


@dataclass(frozen=True)
class RunTable:
    """The data file of a run folder: the part of a run folder that depends on its kind.

    Attributes
    ----------
    name
        The file's name in the run folder (``samples.csv``, ``policy.csv``).
    text
        File rows -> the file's text (header included).
    row
        ``(process, phase, worker row)`` -> one file row.
    """

    name: str
    text: Callable[[list[Any]], str]
    row: Callable[[int, str, Any], Any]


#: ``samples.csv``: the data file of bench and history runs.
SAMPLES = RunTable(schema.SAMPLES_CSV, samples_text, sample_row)


class RunWriter:
    """Owns one run folder: creates it once, then rewrites its files atomically.

    Parameters
    ----------
    run_dir
        The folder to create; it must not exist (a run folder is never reused).
    record
        The ``run.json`` object; this writer keeps its ``files`` entry up to date.
    table
        The run's data file (:data:`SAMPLES`, or a policy run's ``policy.csv``).

    Raises
    ------
    FileExistsError
        The folder exists already (another run took the id).
    """

    def __init__(self, run_dir: Path, record: dict[str, Any], table: RunTable) -> None:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(exist_ok=False)
        self.dir = run_dir
        self.record = record
        self.table = table
        self.record.setdefault(schema.FILES_KEY, {})
        self.rows: list[Any] = []
        self.save()

    def add_process(self, phase: str, process: int, rows: list[Any], info: dict) -> None:
        """Append one finished process's rows and count it, as one atomic step."""
        # Ctrl-C (or SIGTERM, SIGHUP) between these updates would let the interrupt
        # handler save rows of a process that run.json does not count: hold them until
        # both are on disk.
        with interrupts_held():
            self.rows.extend(self.table.row(process, phase, row) for row in rows)
            self.record["processes_completed"][phase] += 1
            self.record["process_info"].append(info)
            self.save()

    def add_file(self, name: str, text: str, rows: int) -> None:
        """Write a second data file once (it must not exist) and seal its sha256 and row
        count in ``run.json``, as one atomic step (a counts run's ``where.csv``)."""
        data = text.encode("utf-8")
        with interrupts_held():
            with open(self.dir / name, "xb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            self.record[schema.FILES_KEY][name] = {"sha256": sha256_bytes(data), "rows": rows}
            write_run_json(self.dir, self.record)

    def save(self, status: str | None = None) -> None:
        """Rewrite the data file, then ``run.json`` with its digest (and ``status``)."""
        if status:
            self.record["status"] = status
        # Rows first: run.json must never count a process whose rows are not on disk.
        text = self.table.text(self.rows).encode("utf-8")
        write_atomic(self.dir / self.table.name, text)
        self.record[schema.FILES_KEY][self.table.name] = {
            "sha256": sha256_bytes(text),
            "rows": len(self.rows),
        }
        write_run_json(self.dir, self.record)


def start_record(
    kind: str,
    run_id: str,
    host: str,
    *,
    python: Mapping[str, Any],
    baseline: str,
    variants: Sequence[Mapping[str, Any]],
    parameters: Mapping[str, Any],
    launcher_pid: int,
    seeds: Mapping[str, Any],
    processes_planned: Mapping[str, int],
    extra: Mapping[str, Any] | None = None,
) -> runrecord.RunRecord:
    """The record a run of any kind starts with: status ``running``, started now, on this
    machine, at the project's current state.

    Parameters
    ----------
    kind
        What the run measures (:data:`kvqueue.schema.RUN_KINDS`).
    run_id, host
        The run folder's name and host label.
    python
        The measured interpreter's identity.
    baseline, variants
        The baseline's label; every variant's provenance and check result.
    parameters
        The run's parameters as recorded.
    launcher_pid
        The process that started the run (the CLI, when a notebook runs it).
    seeds, processes_planned
        The run's seeds; the processes planned per phase.
    extra
        The kind's own ``run.json`` keys (:attr:`kvqueue.runrecord.RunRecord.extra`).
    """
    return runrecord.RunRecord(
        kind=kind,
        run_id=run_id,
        host=host,
        started_at=now(),
        machine=hostinfo.machine_info(),
        python=python,
        baseline=baseline,
        variants=variants,
        parameters=parameters,
        launcher={"pid": launcher_pid},
        seeds=seeds,
        project=hostinfo.project_info(),
        processes_planned=processes_planned,
        extra=dict(extra or {}),
    )


def create_run(raw_dir: Path, record: runrecord.RunRecord, table: RunTable) -> RunWriter:
    """Create the run folder of ``record`` under ``raw_dir`` and write its first files.

    Raises
    ------
    BenchError
        The folder exists already: nothing was written.
    """
    run_dir = schema.run_path(raw_dir, record.host, record.run_id)
    try:
        return RunWriter(run_dir, record.as_dict(), table)
    except FileExistsError:
        raise BenchError(f"run folder {run_dir} exists already; nothing was written") from None


@contextlib.contextmanager
def closing_run(writer: RunWriter, interrupted: str) -> Iterator[None]:
    """Close ``writer``'s run as the body ends, the one way every kind of run ends.

    Ctrl-C, SIGTERM or SIGHUP (:class:`kvqueue.kernel.Stopped`, a KeyboardInterrupt):
    ``interrupted`` (printing ``interrupted`` to stderr); any other exception:
    ``failed`` with the error; else ``complete`` with the load average at the end. Each
    records ``ended_at``; the exception is raised again.
    """
    try:
        yield
    except KeyboardInterrupt:
        with interrupts_held():  # a second SIGTERM must not cut the last save short
            writer.record["ended_at"] = now()
            writer.save("interrupted")
        print(interrupted, file=sys.stderr)
        raise
    except BaseException as exc:
        writer.record["ended_at"] = now()
        writer.record["error"] = f"{type(exc).__name__}: {exc}"
        writer.save("failed")
        raise
    writer.record["ended_at"] = now()
    writer.record["machine"]["load_avg_end"] = hostinfo.load_average()
    writer.save("complete")


def write_run_json(run_dir: Path, record: dict[str, Any]) -> None:
    """Write ``run.json`` atomically."""
    write_atomic(run_dir / schema.RUN_JSON, runrecord.run_json_text(record))


def read_run_json(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``run.json`` as written, or ``None`` if it is missing or unreadable."""
    try:
        data = json.loads((run_dir / schema.RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def owned_by(run_dir: Path, launcher_pid: int) -> bool:
    """Whether the run in ``run_dir`` was started by the process ``launcher_pid``.

    The runner records the pid of the process that launched it (the CLI, parent of the
    notebook's kernel), so that a CLI whose run id collided with another run's never
    files its notebook into the other run's folder.
    """
    record = read_run_json(run_dir)
    return bool(record) and (record.get("launcher") or {}).get("pid") == launcher_pid


def file_notebook(run_dir: Path, notebook: Path) -> None:
    """Copy the executed notebook into the run folder and seal its digest in ``run.json``.

    The copy never replaces an existing ``bench.ipynb`` (write-once).
    """
    data = notebook.read_bytes()
    dest = run_dir / schema.RUN_NOTEBOOK
    with open(dest, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    record = read_run_json(run_dir)
    if record is None:
        return
    record.setdefault(schema.FILES_KEY, {})[schema.RUN_NOTEBOOK] = {"sha256": sha256_bytes(data)}
    write_run_json(run_dir, record)


def mark_dead(run_dir: Path, reason: str, ended_at: str) -> bool:
    """Mark a run that is still ``running`` as ``failed`` (its process died); True if so.

    A run whose runner was killed (``kill -9`` of the kernel) stays ``running`` on disk;
    the launcher, which outlives it, records why instead.
    """
    record = read_run_json(run_dir)
    if not record or record.get("status") != "running":
        return False
    record["status"] = "failed"
    record["ended_at"] = ended_at
    record["error"] = reason
    write_run_json(run_dir, record)
    return True
