"""Environment metadata recorded in ``run.json``: machine, interpreter, project commit.

Standard library only. Everything is best effort: a field that cannot be read on this
platform is ``None``, never a guess.
"""

from __future__ import annotations

import hashlib
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


#: Keys of ``machine.cpu`` in ``run.json`` that say which CPU a run was measured on (what
#: the report compares to keep one host label to one CPU); ``processor`` is what a
#: platform without ``/proc/cpuinfo`` says instead.
CPU_IDENTITY_FIELDS = (
    "vendor",
    "family",
    "model",
    "stepping",
    "flags_sha256",
    "cache_size",
    "caches",
    "processor",
)

# /proc/cpuinfo key -> machine.cpu key. x86 names first; Arm kernels give the
# implementer, architecture and part instead (and "Features" for the flags).
_CPUINFO_KEYS = {
    "vendor_id": "vendor",
    "cpu family": "family",
    "model": "model",
    "stepping": "stepping",
    "cache size": "cache_size",
    "CPU implementer": "vendor",
    "CPU architecture": "family",
    "CPU part": "model",
}


def _number(text: str) -> int | str:
    # x86 reports family/model/stepping in decimal; keep anything else (Arm's hex part
    # numbers, a joined list) as reported rather than guess a base.
    return int(text) if text.isdigit() else text


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The CPU identity in a ``/proc/cpuinfo`` text.

    One value per field over all processor blocks: a field that differs between cores
    (an Arm big.LITTLE part number) is the distinct values joined by ``,`` in order of
    appearance, so that two such machines are not mistaken for their first core.

    Parameters
    ----------
    text
        The content of ``/proc/cpuinfo``.

    Returns
    -------
    dict
        ``vendor``, ``family``, ``model``, ``stepping`` (x86: integers; Arm: the
        implementer, architecture, part and ``r<variant>p<revision>``), ``cache_size``
        (as reported, e.g. ``"512 KB"``) and ``flags_sha256`` (sha256 of the sorted
        distinct flags, space-separated); a field the text lacks is absent.
    """
    seen: dict[str, list[str]] = {}
    flags: set[str] = set()
    variant: dict[str, str] = {}

    def add(key: str, value: str) -> None:
        values = seen.setdefault(key, [])
        if value not in values:
            values.append(value)

    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if key == "processor":
            variant = {}  # a new core's block
        elif key in ("flags", "Features"):
            flags.update(value.split())
        elif key in ("CPU variant", "CPU revision"):
            variant[key] = value.removeprefix("0x")
            if len(variant) == 2:
                # Arm's stepping is rNpM: variant N, revision M (per core).
                add("stepping", f"r{variant['CPU variant']}p{variant['CPU revision']}")
                variant = {}
        elif key in _CPUINFO_KEYS and value:
            add(_CPUINFO_KEYS[key], value)
    out: dict[str, Any] = {}
    for key, values in seen.items():
        joined = ",".join(values)
        out[key] = joined if key in ("vendor", "cache_size") else _number(joined)
    if flags:
        out["flags_sha256"] = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()
    return out


def cache_sizes(cpu_dir: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, str] | None:
    """The caches of the first CPU from sysfs: ``{"L1d": "48K", "L1i": "32K", "L2": ...}``.

    Returns
    -------
    dict or None
        Sizes as sysfs reports them, by level and type (``d`` data, ``i`` instruction,
        nothing for a unified cache); ``None`` where sysfs has no cache description.
    """
    suffix = {"Data": "d", "Instruction": "i", "Unified": ""}
    out = {}
    for index in sorted(Path(cpu_dir).glob("index[0-9]*")):
        level, kind = _read(str(index / "level")), _read(str(index / "type"))
        size = _read(str(index / "size"))
        if level and kind and size:
            out[f"L{level}{suffix.get(kind, kind)}"] = size
    return dict(sorted(out.items())) or None


def cpu_identity() -> dict[str, Any]:
    """Which CPU this is, beyond its model name: see :data:`CPU_IDENTITY_FIELDS`.

    Two CPUs can share a model name ("Intel(R) Xeon(R) Processor" in many VMs) while
    differing in model number, stepping, instruction set or caches, all of which move
    timings; the report keeps runs of different identities apart.

    Returns
    -------
    dict
        On Linux what ``/proc/cpuinfo`` (:func:`parse_cpuinfo`) and sysfs
        (:func:`cache_sizes`, as ``caches``) say; elsewhere ``processor``
        (:func:`platform.processor`) where it is not empty. Unreadable fields are absent.
    """
    info = _read("/proc/cpuinfo")
    if info is None:
        return {"processor": platform.processor()} if platform.processor() else {}
    out = parse_cpuinfo(info)
    caches = cache_sizes()
    if caches is not None:
        out["caches"] = caches
    return out


def cpu_record() -> dict[str, Any]:
    """This machine's CPU as ``run.json`` ``machine`` records it: ``cpu_model`` and
    ``cpu`` (:func:`cpu_identity`); the key :func:`kvqueue.rawdata.host_keys.cpu_identity`
    compares."""
    return {"cpu_model": cpu_model(), "cpu": cpu_identity()}


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
    """Describe the machine: hostname, CPU model, identity and count, kernel, governor, load."""
    return {
        "hostname": socket.gethostname(),
        **cpu_record(),
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
#: Runs under any interpreter it may be given, Python 2.7 included (no f-string, no
#: ``sys.implementation``), so that an old one is refused by its version, not by a
#: probe that failed. ``sys_version`` and ``machine`` name a build (check-queue's key).
_PY_PROBE = (
    "import json, platform, sys; print(json.dumps({"
    "'executable': sys.executable, 'version': platform.python_version(), "
    "'implementation': platform.python_implementation(), "
    "'build': ' '.join(platform.python_build()), 'compiler': platform.python_compiler(), "
    "'sys_version': sys.version.replace(chr(10), ' '), 'machine': platform.machine(), "
    "'tag': getattr(getattr(sys, 'implementation', None), 'cache_tag', None), "
    "'version_info': list(sys.version_info[:3]), "
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
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        # A Python's traceback ends with its error; a wrapper's message (pyenv's shim:
        # "pyenv: python2.7: command not found", then 5 lines of advice) starts with it.
        said = lines[-1] if any(ln.startswith("Traceback") for ln in lines) else lines[:1]
        raise ValueError(said if isinstance(said, str) else (said or ["no answer"])[0])
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
