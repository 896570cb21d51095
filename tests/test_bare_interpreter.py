"""The standard-library-only promise: what runs under the MEASURED interpreter (the gate,
the loader, the release fetch, the worker and the cases) must work on a bare CPython
with nothing installed — ``python -I -S`` (no site-packages, no environment, no user
folders) of every CPython >= 3.10 found on this machine, outside the project's venv.

A stray ``import numpy`` in ``worker.py`` would pass every other test (they run inside
the venv, which has numpy) and break ``make bench PYTHON=/usr/bin/python3.12``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Modules that run under the measured interpreter (and what they import).
BARE_MODULES = (
    "kvqueue.measure.timing_worker",
    "kvqueue.measure.counted_worker",
    "kvqueue.measure.profiled_worker",
    "kvqueue.subjects.queue_cases",
    "kvqueue.sources.versions",
    "kvqueue.sources.loader",
    "kvqueue.sources.fetch_errors",
    "kvqueue.sources.release_cache",
    "kvqueue.sources.package_index",
    "kvqueue.sources.wheel_ranges",
    "kvqueue.sources.release_fetch",
    "kvqueue.gate.naming",
    "kvqueue.gate.model_check",
    "kvqueue.gate.size_check",
    "kvqueue.gate.invalid_ops",
    "kvqueue.gate.gate",
    "kvqueue.__main__",
    "kvqueue.params.spec",
    "kvqueue.params.value_checks",
    "kvqueue.params.bench_params",
    "kvqueue.params.history_params",
    "kvqueue.params.policy_params",
    "kvqueue.params.report_params",
    "kvqueue.measure.interpreter_checks",
    "kvqueue.policy.policy_checks",
    "kvqueue.measure.runner",
    "kvqueue.measure.run_folder",
    "kvqueue.measure.child",
    "kvqueue.policy.policies",
    "kvqueue.policy.churn",
    "kvqueue.policy.invariants",
    "kvqueue.policy.policy_worker",
    "kvqueue.policy.policy_collect",
)


def _candidates() -> list[Path]:
    found: list[Path] = []
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"]
    for root in roots:
        if root.is_dir():
            found += sorted(root.glob("3.*/bin/python3"))
    found += sorted(Path("/usr/bin").glob("python3.[0-9]*"))
    found.append(Path(sys.base_prefix) / "bin" / "python3")
    out: list[Path] = []
    seen: set[tuple[int, ...]] = set()
    for path in found:
        if not path.is_file() or path.name.endswith("-config"):
            continue
        proc = subprocess.run(
            [str(path), "-I", "-S", "-c", "import sys; print(list(sys.version_info[:2]))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if proc.returncode != 0:
            continue
        version = tuple(json.loads(proc.stdout))
        if version >= (3, 10) and version not in seen:
            seen.add(version)
            out.append(path)
    return out


INTERPRETERS = _candidates()

_PRELUDE = (
    "import sys; sys.path.insert(0, {root!r}); "
    "assert 'numpy' not in sys.modules and 'pandas' not in sys.modules; "
)


def _bare(python: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    env["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
    return subprocess.run(
        [str(python), "-I", "-S", "-c", _PRELUDE.format(root=str(REPO_ROOT)) + code, *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=300,
    )


def test_at_least_one_bare_interpreter_found() -> None:
    assert INTERPRETERS, "no CPython >= 3.10 outside the venv: the check below ran nowhere"


@pytest.mark.slow
@pytest.mark.parametrize("python", INTERPRETERS, ids=[str(p) for p in INTERPRETERS])
def test_measured_side_imports_on_a_bare_interpreter(python: Path) -> None:
    code = (
        "import importlib; "
        + "; ".join(f"importlib.import_module({m!r})" for m in BARE_MODULES)
        + "; bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'pandas', 'scipy', 'matplotlib', 'seaborn', 'papermill', 'IPython')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = _bare(python, code)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("python", INTERPRETERS, ids=[str(p) for p in INTERPRETERS])
def test_gate_runs_on_a_bare_interpreter(python: Path) -> None:
    code = (
        "import runpy; sys.argv = ['kvqueue'] + sys.argv[1:]; "
        "runpy.run_module('kvqueue', run_name='__main__', alter_sys=True)"
    )
    proc = _bare(
        python, code, "validate", "--ops", "300", "--sizes", "64", "kvqueue", "kvqueue:floor"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASS") == 2, proc.stdout
