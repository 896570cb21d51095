"""The value checks that every command's parameters share (host label, CPU, garbage
collector, whole numbers, repeated values) and the upper bounds they all obey. Each check
refuses with a one-line :class:`~kvqueue.errors.BenchInputError` and starts no process.

Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kvqueue.errors import BenchInputError

_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Upper bounds that catch a typo (SAMPLE_MS=20000 for 20) before hours are spent: the
#: default run takes ~200 s; these allow runs ~100x longer than that, no more.
MAX_PROCESSES = 1000
MAX_POOL = 10_000_000


def check_host(host: str | None) -> None:
    """Refuse a missing, empty, path-like or space-containing host label."""
    if not host:
        raise BenchInputError("HOST is missing: give a label for this machine, e.g. HOST=grace")
    if ".." in host or "/" in host or not _HOST_RE.match(host):
        raise BenchInputError(
            f"HOST {host!r} is not a valid label: start with a letter or digit, then use "
            "letters, digits, '.', '_' or '-' (no '/', '..' or spaces; at most 64 characters)"
        )


def check_python_given(python: str) -> None:
    """Refuse an empty interpreter (its existence is checked by probing it)."""
    if not python:
        raise BenchInputError("PYTHON is empty: give the interpreter to measure")


def check_cpu(cpu: str) -> None:
    """Refuse a CPU that is neither ``auto`` nor one this process may run on."""
    if cpu != "auto":
        if not str(cpu).isdigit():
            raise BenchInputError(f"cpu must be 'auto' or a CPU number, got {cpu!r}")
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None and int(cpu) not in allowed:
            raise BenchInputError(f"CPU {cpu} is not available here (allowed: {allowed})")


def check_gc(gc: str) -> None:
    """Refuse a garbage-collector mode other than ``disabled`` or ``enabled``."""
    if gc not in ("disabled", "enabled"):
        raise BenchInputError(f"gc must be 'disabled' or 'enabled', got {gc!r}")


def whole(value: Any) -> bool:
    """Whether ``value`` is a whole number (an ``int`` that is not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def no_duplicates(name: str, values: Iterable[Any]) -> None:
    """Refuse a list that names one value twice."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            # Two equal sample keys would make the run unreadable for the report.
            raise BenchInputError(f"{name} lists {value} twice")
        seen.add(value)


def out_file_problem(
    path: Path | str, earlier: Callable[[Path], bool] | None = None, what: str = ""
) -> str | None:
    """Why a command cannot write its output file to ``path`` (one line), or ``None``.

    The one rule of every output file a command names (``TRACE_OUT``, ``make regress``'s
    ``OUT``): a file that exists is never replaced, unless ``earlier`` says it is the
    command's own earlier output (then it is a regular file, not a link); a folder, a
    folder that does not exist and one that cannot be written are refused.

    Parameters
    ----------
    path
        The output file as given.
    earlier
        Whether an existing regular file is the command's own earlier output (``None``:
        no existing file is replaced).
    what
        What ``earlier`` recognises, for the refusal (``"an earlier make regress output"``).
    """
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder: name a file in it"
    if path.exists() or path.is_symlink():
        if earlier is None:
            return f"{path} exists and is not overwritten: remove it or name another file"
        if path.is_symlink() or not path.is_file() or not earlier(path):
            return (
                f"{path} exists and is not {what}: not overwritten; remove it or name another file"
            )
    folder = path.absolute().parent
    if not folder.exists():
        return f"{path}: the folder {folder} does not exist"
    if not folder.is_dir():
        return f"{path}: {folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{path}: the folder {folder} cannot be written"
    return None
