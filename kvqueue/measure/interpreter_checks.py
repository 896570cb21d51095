"""The checks of a bench run that start processes or fetch: the interpreter is probed
once, every variant source is loaded once (releases are fetched into the cache), and
:func:`check` returns :class:`~kvqueue.params.bench_params.Checked`, which the rest of the
bench route passes along instead of checking again. The value checks that start nothing
are :func:`kvqueue.params.bench_params.check_values`'.

Standard library only: ``python -m kvqueue bench`` runs these under a bare interpreter.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchInputError
from kvqueue.measure import machine_lock, stack_layout
from kvqueue.params.bench_params import BenchParams, Checked, check_values
from kvqueue.sources import loader
from kvqueue.subjects import queue_cases

MIN_PYTHON = (3, 10)


def check(p: BenchParams, announce: str = "") -> Checked:
    """Run every check of a bench run once: values, interpreter, variant sources, and
    that no other bench holds the machine; then print ``announce`` (the parameters not
    at their defaults) to stderr, so that the line comes before the gate and any
    measuring and never beside a refusal of the input.

    Raises
    ------
    BenchInputError
        On the first problem, before anything is written.
    """
    check_values(p)
    path, info = check_python(p.python)
    p = replace(p, python=path)
    check_sources(p)
    machine_lock.refuse_if_held()
    if announce:
        print(announce, file=sys.stderr, flush=True)
    return Checked(p, info)


def check_python(
    python: str, role: str = "PYTHON", worker: str = "the worker", cpython_only: bool = False
) -> tuple[str, dict[str, Any]]:
    """Return the interpreter's path and identity if it exists, runs and is >= 3.10.

    A bare name (``python3``) is looked up on ``PATH`` like a shell would. The
    interpreter is started once here; everything later uses the returned identity.

    Parameters
    ----------
    python
        The name or path given.
    role
        The variable that named it, for the one-line refusal (``PYTHON``, ``PYTHONS``).
    worker
        What needs the interpreter, for the refusal (the timing or the counted worker).
    cpython_only
        Refuse another implementation (the counts are of CPython's interpreter loop).

    Raises
    ------
    BenchInputError
        It does not exist, is a folder, does not run as a Python, is older than 3.10 (or
        not CPython, with ``cpython_only``), or runs with ``-O``.
    """
    found = shutil.which(python) if os.sep not in python else python
    if Path(found or python).is_dir():  # which() skips folders: a bare name may be one here
        raise BenchInputError(f"{role} '{python}' is a folder, not an interpreter")
    if not found or not Path(found).is_file():
        raise BenchInputError(f"{role} '{python}' does not exist")
    try:
        info = hostinfo.python_info(found)
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"{role} '{found}' does not run as a Python: {exc}") from None
    impl = str(info.get("implementation", "Python"))
    least = ".".join(map(str, MIN_PYTHON))
    if tuple(info["version_info"][:2]) < MIN_PYTHON or (cpython_only and impl != "CPython"):
        needs = "CPython" if cpython_only else "Python"
        raise BenchInputError(
            f"{role} '{found}' is {impl} {info['version']}; {worker} needs {needs} >= {least}"
        )
    optimize = (info.get("flags") or {}).get("optimize", 0)
    if optimize:
        raise BenchInputError(
            f"{role} '{found}' runs with -O (sys.flags.optimize={optimize}; PYTHONOPTIMIZE or "
            "a wrapper?): it strips every assert of the gate and the queues, so nothing "
            "would be measured as written"
        )
    return found, info


def check_sources(p: BenchParams) -> None:
    """Resolve and load every variant (fetching releases into the cache) or refuse.

    Loading (not just reading) catches a class that lacks a queue method up front.
    """
    cases = tuple(dict.fromkeys([*p.cases, *p.confirm_cases]))
    if p.subject in stack_layout.KINDS:
        # A pool too small for a case was refused with the values
        # (kvqueue.params.bench_params.check_pools_hold).
        for source in p.variants:
            check_stack_source(source, p.subject)
        return
    for source in p.variants:
        if p.block_mode == "own":
            check_source(source, cases, block_mode="own")
        else:
            check_source(source, cases, block_source=p.block_source or p.variants[0])


def check_source(
    source: str,
    cases: Sequence[str],
    *,
    block_source: str | None = None,
    block_mode: str = "shared",
    role: str = "variant",
    done: str = "timed",
) -> loader.Variant:
    """Load one queue source and check that every case can run on it (its own method
    or its adapter's); return the loaded variant.

    Parameters
    ----------
    source, block_source, block_mode
        As for :func:`kvqueue.sources.loader.load_variants`.
    cases
        The cases that will run on it.
    role, done
        How the refusal names the source (``variant``, ``QUEUE``) and what a case is
        (``timed``, ``counted``).

    Raises
    ------
    BenchInputError
        The source does not resolve or load, or lacks a case's method (one line).
    """
    try:
        (variant,) = loader.load_variants([source], block_source, block_mode)
    except loader.SourceError as exc:
        raise BenchInputError(f"{role} '{source}': {exc}") from None
    for case in cases:
        lacking = [m for m in queue_cases.case_methods(case) if not variant.can(m)]
        if lacking:
            raise BenchInputError(
                f"{role} '{source}' has no {', '.join(lacking)} (and no adapter for it): "
                f"case {case} cannot be {done} on it"
            )
    return variant


def check_stack_source(source: str, subject: str = schema.SUBJECT_POOL) -> Any:
    """Load one source of a stack subject (a pool, a manager; fetching a release's
    members) and read its API: a release or branch that cannot be loaded or called is
    refused in one line naming the import or signature that failed.

    Raises
    ------
    BenchInputError
        The source does not resolve or load, or its API is not one the adapter knows.
    """
    kind = stack_layout.KINDS[subject]
    try:
        variant = kind.load(source, source)
        api = kind.api(variant)
    except kind.errors as exc:
        raise BenchInputError(f"{subject} variant '{source}': {exc}") from None
    try:
        # A swap the release cannot take (a pool whose constructor the manager does not
        # call that way) fails here, in one line, before any gate or count.
        kind.new(api, 64)
    except Exception as exc:
        message = str(exc).splitlines()[0] if str(exc) else ""
        raise BenchInputError(
            f"{subject} variant '{source}' cannot be built: {type(exc).__name__}: {message}"
        ) from None
    return variant
