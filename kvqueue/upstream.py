"""Fetch vLLM's ``kv_cache_utils.py`` from a release on the package index, cached.

Only one file of a ~330 MB wheel is needed. The wheel is downloaded once with pip into a
temporary folder, that one member is extracted into the cache, and the wheel is deleted.
A second use of the same release reads the cache and needs no network.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: Path of the module that defines the queue, inside a vLLM wheel or checkout.
MEMBER = "vllm/v1/core/kv_cache_utils.py"

# Any platform's wheel holds the same pure-Python files; pinning x86_64 tags lets an
# aarch64 host (Grace) fetch the same bytes as everyone else.
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux1_x86_64")
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$")


class FetchError(RuntimeError):
    """A release could not be fetched (unknown version, no network and no cache, ...)."""


def cache_dir() -> Path:
    """Return the cache folder: ``${XDG_CACHE_HOME:-~/.cache}/kvqueue``.

    Returns
    -------
    Path
        The folder (not created here).
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvqueue"


def cached_path(version: str) -> Path:
    """Return where the cached ``kv_cache_utils.py`` of ``version`` lives (may not exist)."""
    return cache_dir() / f"vllm-{version}" / "kv_cache_utils.py"


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_release(version: str, python: str | None = None) -> Path:
    """Return a local copy of ``kv_cache_utils.py`` from vLLM release ``version``.

    Parameters
    ----------
    version
        A release number such as ``"0.32.0"``.
    python
        Interpreter whose pip downloads the wheel; defaults to the running one.

    Returns
    -------
    Path
        The cached file.

    Raises
    ------
    FetchError
        The version string is malformed, the release does not exist on the index, the
        index cannot be reached and nothing is cached, or the wheel lacks the module.
    """
    if not _VERSION_RE.fullmatch(version):
        raise FetchError(f"'{version}' is not a vLLM version number (expected e.g. 0.32.0)")
    target = cached_path(version)
    if target.is_file():
        return target
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvqueue-wheel-", dir=cache_dir()) as tmp:
        cmd = [
            python or sys.executable,
            "-m",
            "pip",
            "download",
            f"vllm=={version}",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            tmp,
        ]
        for platform in _PLATFORMS:
            cmd += ["--platform", platform]
        print(f"kvqueue: downloading vLLM {version} wheel (~330 MB, once) ...", file=sys.stderr)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as exc:
            raise FetchError(f"cannot run {cmd[0]} to download vllm=={version}: {exc}") from None
        if proc.returncode != 0:
            raise FetchError(_explain_pip_failure(version, proc.stderr + proc.stdout))
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise FetchError(f"pip downloaded no wheel for vllm=={version}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        try:
            with (
                zipfile.ZipFile(wheels[0]) as zf,
                zf.open(MEMBER) as src,
                open(partial, "wb") as dst,
            ):
                shutil.copyfileobj(src, dst)
        except KeyError:
            raise FetchError(
                f"vllm=={version} has no {MEMBER}: too old for this benchmark"
            ) from None
        # Rename last, so an interrupted extraction never looks like a valid cache entry.
        os.replace(partial, target)
    return target


def _explain_pip_failure(version: str, output: str) -> str:
    """Turn pip's output into one readable line."""
    low = output.lower()
    # Offline, pip may print connection warnings AND "no matching distribution"; and
    # "(from versions: none)" means the index listed nothing at all for vllm, which only
    # happens when it was not reached. So connection trouble is checked first.
    offline_signs = (
        "connection",
        "network is unreachable",
        "temporary failure",
        "max retries",
        "name resolution",
        "from versions: none",
    )
    if any(sign in low for sign in offline_signs):
        return (
            f"cannot reach the package index to fetch vllm=={version}, "
            f"and it is not cached in {cache_dir()}"
        )
    if "no matching distribution" in low or "could not find a version" in low:
        return f"vLLM release {version} does not exist on the package index"
    if "no module named pip" in low:
        return "pip is not available to download vLLM releases (install pip or pre-fetch)"
    last = [line for line in output.strip().splitlines() if line.strip()]
    return f"pip failed to fetch vllm=={version}: {last[-1] if last else 'unknown error'}"
