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
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvqueue import hostinfo
from kvqueue.errors import BenchInputError
from kvqueue.measure import machine_lock
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


def check_python(python: str) -> tuple[str, dict[str, Any]]:
    """Return the interpreter's path and identity if it exists, runs and is >= 3.10.

    A bare name (``python3``) is looked up on ``PATH`` like a shell would. The
    interpreter is started once here; everything later uses the returned identity.
    """
    found = shutil.which(python) if os.sep not in python else python
    if not found or not Path(found).exists():
        raise BenchInputError(f"PYTHON '{python}' does not exist")
    try:
        info = hostinfo.python_info(found)
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"PYTHON '{found}' does not run: {exc}") from None
    if tuple(info["version_info"][:2]) < MIN_PYTHON:
        raise BenchInputError(
            f"PYTHON '{found}' is {info['version']}; the worker needs Python >= 3.10"
        )
    optimize = (info.get("flags") or {}).get("optimize", 0)
    if optimize:
        raise BenchInputError(
            f"PYTHON '{found}' runs with -O (sys.flags.optimize={optimize}; PYTHONOPTIMIZE or "
            "a wrapper?): it strips every assert of the gate and the queues, so nothing "
            "would be measured as written"
        )
    return found, info


def check_sources(p: BenchParams) -> None:
    """Resolve and load every variant (fetching releases into the cache) or refuse.

    Loading (not just reading) catches a class that lacks a queue method up front.
    """
    for source in p.variants:
        try:
            if p.block_mode == "own":
                (variant,) = loader.load_variants([source], block_mode="own")
            else:
                block = p.block_source or p.variants[0]
                (variant,) = loader.load_variants([source], block_source=block)
        except loader.SourceError as exc:
            raise BenchInputError(f"variant '{source}': {exc}") from None
        # A case must be callable on every variant (its own method or its adapter's).
        for case in dict.fromkeys([*p.cases, *p.confirm_cases]):
            lacking = [m for m in queue_cases.CASE_METHODS[case] if not variant.can(m)]
            if lacking:
                raise BenchInputError(
                    f"variant '{source}' has no {', '.join(lacking)} (and no adapter for it): "
                    f"case {case} cannot be timed on it"
                )
