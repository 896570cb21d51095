"""Environment metadata recorded in ``run.json``: machine, interpreter, project commit.

Standard library only. Everything is best effort: a field that cannot be read on this
platform is ``None``, never a guess.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str | None:
    """Return the CPU model name (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    info = _read("/proc/cpuinfo") or ""
    for line in info.splitlines():
        # x86 says "model name"; Arm (e.g. Grace) kernels may only say "CPU part".
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return platform.processor() or platform.machine() or None


def governor() -> str | None:
    """Return the cpufreq scaling governor(s) where readable (often not in VMs)."""
    found = set()
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        value = _read(str(path))
        if value:
            found.add(value)
    return ",".join(sorted(found)) or None


def load_average() -> list[float] | None:
    """Return the 1/5/15-minute load averages, or None where unsupported."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def machine_info() -> dict[str, Any]:
    """Describe the machine: hostname, CPU model and count, kernel, governor, load."""
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else None,
        "kernel": platform.release(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "governor": governor(),
        "load_avg_start": load_average(),
    }


# sys.flags and orig_argv tell a wrapper script (`python3 -O "$@"`) or PYTHONOPTIMIZE
# apart from a plain interpreter: -O strips every assert of the gate and the queues.
_PY_PROBE = (
    "import json, platform, sys; print(json.dumps({"
    "'executable': sys.executable, 'version': platform.python_version(), "
    "'implementation': platform.python_implementation(), "
    "'build': ' '.join(platform.python_build()), 'compiler': platform.python_compiler(), "
    "'tag': sys.implementation.cache_tag, 'version_info': list(sys.version_info[:3]), "
    "'flags': {k: getattr(sys.flags, k) for k in dir(sys.flags) "
    "if not k.startswith('_') and isinstance(getattr(sys.flags, k), int)}, "
    "'orig_argv': list(getattr(sys, 'orig_argv', [])), 'prefix': sys.prefix}))"
)


def python_info(python: str) -> dict[str, Any]:
    """Describe an interpreter by running it (so it may differ from the running one).

    Raises
    ------
    OSError
        The interpreter cannot be executed.
    ValueError
        It ran but did not answer the probe (not a Python?).
    """
    try:
        proc = subprocess.run([python, "-c", _PY_PROBE], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise ValueError("no answer within 60 s") from None
    if proc.returncode != 0:
        raise ValueError(proc.stderr.strip().splitlines()[-1] if proc.stderr else "no answer")
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = None
    if not isinstance(info, dict) or "version_info" not in info:
        raise ValueError("it ran but did not answer like a Python interpreter")
    return info


def project_info() -> dict[str, Any]:
    """Return the project's git commit and whether the work tree has changes."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", "-C", str(PROJECT_DIR), *args], capture_output=True, text=True
            )
        except OSError:
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # Raw data folders are written during the run itself, so they do not count as dirt.
    # "dirty" means tracked files differ from the commit; untracked files are reported
    # apart (a variant file among them is identified by its sha256 anyway).
    tracked = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!data/raw")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", ".", ":!data/raw")
    return {
        "commit": commit,
        "dirty": bool(tracked) if tracked is not None else None,
        "untracked_files": len(untracked.splitlines()) if untracked is not None else None,
    }
