"""Write one run folder ``data/raw/<host>/<run-id>/``: created once, rewritten atomically,
sealed with the sha256 of its files (format: :mod:`kvqueue.schema`).

Both writers of a run folder use this module: the runner (``run.json`` and
``samples.csv`` after every process) and ``notebook_run`` (the executed
``bench.ipynb``, copied in when the notebook ends). Every rewrite of ``run.json``
records the sha256 and row count of the ``samples.csv`` written just before it, and the
notebook's sha256 once it is filed, so that the report can tell an edited, cut or
padded raw file from the one the run wrote. Standard library only.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema


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


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Delay SIGINT (delivered on exit) where the platform allows it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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


class RunWriter:
    """Owns one run folder: creates it once, then rewrites its files atomically.

    Parameters
    ----------
    run_dir
        The folder to create; it must not exist (a run folder is never reused).
    record
        The ``run.json`` object; this writer keeps its ``files`` entry up to date.

    Raises
    ------
    FileExistsError
        The folder exists already (another run took the id).
    """

    def __init__(self, run_dir: Path, record: dict[str, Any]) -> None:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(exist_ok=False)
        self.dir = run_dir
        self.record = record
        self.record.setdefault(schema.FILES_KEY, {})
        self.rows: list[list[Any]] = []
        self.save()

    def add_process(self, phase: str, process: int, rows: list[list[Any]], info: dict) -> None:
        """Append one finished process's samples and count it, as one atomic step."""
        # Ctrl-C between these updates would let the interrupt handler save rows of a
        # process that run.json does not count: hold SIGINT until both are on disk.
        with sigint_held():
            self.rows.extend([process, phase, *row] for row in rows)
            self.record["processes_completed"][phase] += 1
            self.record["process_info"].append(info)
            self.save()

    def save(self, status: str | None = None) -> None:
        """Rewrite ``samples.csv``, then ``run.json`` with its digest (and ``status``)."""
        if status:
            self.record["status"] = status
        # samples first: run.json must never count a process whose samples are not on disk.
        text = samples_text(self.rows).encode("utf-8")
        write_atomic(self.dir / schema.SAMPLES_CSV, text)
        self.record[schema.FILES_KEY][schema.SAMPLES_CSV] = {
            "sha256": sha256_bytes(text),
            "rows": len(self.rows),
        }
        write_run_json(self.dir, self.record)


@contextlib.contextmanager
def closing_run(writer: RunWriter, interrupted: str) -> Iterator[None]:
    """Close ``writer``'s run as the body ends, the one way every kind of run ends.

    Ctrl-C: ``interrupted`` (printing ``interrupted`` to stderr); any other exception:
    ``failed`` with the error; else ``complete`` with the load average at the end. Each
    records ``ended_at``; the exception is raised again.
    """
    try:
        yield
    except KeyboardInterrupt:
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
    write_atomic(run_dir / schema.RUN_JSON, json.dumps(record, indent=2) + "\n")


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
