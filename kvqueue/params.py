"""Parameters of a bench run, their defaults, and the checks that refuse bad input.

Every check runs before anything is written: a bad HOST, case, count, interpreter or
variant source gets a one-line :class:`BenchInputError` and leaves no trace on disk.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, loader, schema

DEFAULT_VARIANTS = ("vllm==0.31.0", "vllm==0.32.0", "kvqueue", "kvqueue:floor")
_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MIN_POOL = 64  # alloc32 pops 32 blocks; remove needs interior blocks
MIN_PYTHON = (3, 10)


class BenchInputError(ValueError):
    """Bad input to ``make bench``; the message is one line."""


@dataclass(frozen=True)
class BenchParams:
    """Everything that defines a bench run (recorded in ``run.json``)."""

    host: str
    python: str
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    processes: int = 11
    confirm_processes: int = 9
    samples: int = 9
    sample_ms: float = 20.0
    pools: tuple[int, ...] = schema.POOLS
    cases: tuple[str, ...] = schema.CASES
    confirm_cases: tuple[str, ...] = schema.CONFIRM_CASES
    cpu: str = "auto"
    gc: str = "disabled"
    seed: int = 1
    gate_ops: int = 60_000
    quick: bool = False
    aa: bool = False
    block_source: str | None = None

    @property
    def sources(self) -> list[str]:
        """Variant sources in run order; ``aa`` adds a second copy of the baseline."""
        return [*self.variants, self.variants[0]] if self.aa else list(self.variants)

    @property
    def labels(self) -> list[str]:
        """Unique variant labels (the A/A copy is ``SOURCE#2``)."""
        return loader.variant_labels(self.sources)

    def record(self) -> dict[str, Any]:
        """JSON-ready copy for ``run.json``."""
        data = asdict(self)
        for key in ("variants", "pools", "cases", "confirm_cases"):
            data[key] = list(data[key])
        return data


#: What QUICK=1 changes, unless a value was given explicitly: a smoke run in seconds.
QUICK_OVERRIDES: dict[str, Any] = {
    "processes": 2,
    "confirm_processes": 1,
    "samples": 3,
    "sample_ms": 5.0,
    "pools": (2048,),
}


def make_params(host: str | None, python: str | None, **given: Any) -> BenchParams:
    """Build and check :class:`BenchParams`; ``None`` values mean "use the default".

    Parameters
    ----------
    host
        Host label (a folder name under ``data/raw``).
    python
        Interpreter to measure.
    **given
        Any other :class:`BenchParams` field; ``None`` = default (or QUICK default).

    Raises
    ------
    BenchInputError
        On the first bad value, with a one-line reason.
    """
    given = {k: v for k, v in given.items() if v is not None}
    quick = bool(given.get("quick", False))
    values = {**(QUICK_OVERRIDES if quick else {}), **given}
    check_host(host)
    if not python:
        raise BenchInputError("PYTHON is empty: give the interpreter to measure")
    for key in ("variants", "pools", "cases", "confirm_cases"):
        if key in values:
            values[key] = tuple(values[key])
    params = BenchParams(host=host or "", python=python, **values)
    check_counts(params)
    check_cases(params)
    return replace(params, python=check_python(params.python))


def check_host(host: str | None) -> None:
    """Refuse a missing, empty, path-like or space-containing host label."""
    if not host:
        raise BenchInputError("HOST is missing: give a label for this machine, e.g. HOST=grace")
    if ".." in host or "/" in host or not _HOST_RE.match(host):
        raise BenchInputError(
            f"HOST '{host}' is not a valid label: use letters, digits, '.', '_' or '-' "
            "(no '/', '..' or spaces; at most 64 characters)"
        )


def check_counts(p: BenchParams) -> None:
    """Refuse non-positive counts and pools too small for the cases."""
    for name in ("processes", "samples", "gate_ops"):
        value = getattr(p, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BenchInputError(f"{name} must be a positive whole number, got {value!r}")
    if not isinstance(p.confirm_processes, int) or p.confirm_processes < 0:
        raise BenchInputError(
            "confirm_processes must be 0 (no confirmation run) or more, "
            f"got {p.confirm_processes!r}"
        )
    if not isinstance(p.sample_ms, (int, float)) or not p.sample_ms > 0:
        raise BenchInputError(f"sample_ms must be a positive number, got {p.sample_ms!r}")
    if not p.pools:
        raise BenchInputError("pools is empty")
    for pool in p.pools:
        if isinstance(pool, bool) or not isinstance(pool, int) or pool < MIN_POOL:
            raise BenchInputError(f"pool sizes must be whole numbers >= {MIN_POOL}, got {pool!r}")
    if p.cpu != "auto":
        if not str(p.cpu).isdigit():
            raise BenchInputError(f"cpu must be 'auto' or a CPU number, got {p.cpu!r}")
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if allowed is not None and int(p.cpu) not in allowed:
            raise BenchInputError(f"CPU {p.cpu} is not available here (allowed: {allowed})")
    if p.gc not in ("disabled", "enabled"):
        raise BenchInputError(f"gc must be 'disabled' or 'enabled', got {p.gc!r}")
    if len(p.variants) < 2:
        raise BenchInputError("give at least two variants: a baseline and a candidate")


def check_cases(p: BenchParams) -> None:
    """Refuse unknown or empty case lists."""
    for name in ("cases", "confirm_cases"):
        chosen = getattr(p, name)
        unknown = [c for c in chosen if c not in schema.CASES]
        if unknown:
            raise BenchInputError(
                f"unknown case(s) {', '.join(unknown)}: choose from {' '.join(schema.CASES)}"
            )
    if not p.cases:
        raise BenchInputError("cases is empty")


def check_python(python: str) -> str:
    """Return the interpreter's path if it exists, runs and is Python >= 3.10.

    A bare name (``python3``) is looked up on ``PATH`` like a shell would.
    """
    found = shutil.which(python) if os.sep not in python else python
    if not found or not Path(found).exists():
        raise BenchInputError(f"PYTHON '{python}' does not exist")
    python = found
    try:
        info = hostinfo.python_info(python)
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"PYTHON '{python}' does not run: {exc}") from None
    if tuple(info["version_info"][:2]) < MIN_PYTHON:
        raise BenchInputError(
            f"PYTHON '{python}' is {info['version']}; the worker needs Python >= 3.10"
        )
    return python


def check_sources(p: BenchParams) -> None:
    """Resolve and load every variant (fetching releases into the cache) or refuse.

    Loading (not just reading) catches a class that lacks a queue method up front.
    """
    for source in p.variants:
        try:
            loader.load_variants([source], block_source=p.block_source or p.variants[0])
        except loader.SourceError as exc:
            raise BenchInputError(f"variant '{source}': {exc}") from None
