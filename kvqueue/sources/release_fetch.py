"""Fetch vLLM's ``kv_cache_utils.py`` from a release on the package index, cached.

Only one file of a 240-380 MB wheel is needed. The release's files are listed through the
index's simple API (the one pip uses, so any mirror pip is configured with works) and one
Linux wheel is picked. From an HTTP(S) server that honours ``Range:`` requests (PyPI's
``files.pythonhosted.org`` answers ``206 Partial Content``, suffix ranges included) only
that member is read: the zip's end-of-central-directory record, the central directory,
then the member's local header and compressed bytes, and the same for the wheel's
``*.dist-info/RECORD``; the member is checked against its zip CRC-32 and against the
sha256 the wheel's RECORD lists for it (~0.3 MB instead of 300 MB per release). A range
read cannot check the wheel's own sha256 (that needs every byte), and the digest record
says so. A server that ignores ranges, a ``file:`` location, or a zip the reader does
not handle (zip64) falls back to the full download, checked against the index's sha256,
from which the member is extracted. Nothing is installed and pip is not needed.

A pool subject needs more than one member (:data:`POOL_MEMBERS`: ``block_pool.py``,
``kv_cache_utils.py`` and, from 0.18.0, ``kv_cache_metrics.py``): :func:`fetch_members`
reads every member not yet cached by the same range reads (one central directory and one
RECORD for all), checks each against the RECORD's sha256 and caches each with its own
digest record. ``kv_cache_utils.py`` keeps its path and ``record.json``, so a cache
written by :func:`fetch_release` serves both.

The parts: :mod:`kvqueue.sources.package_index` (pip's configuration, listings, the wheel to
read), :mod:`kvqueue.sources.wheel_ranges` (the range read), :mod:`kvqueue.sources.release_cache`
(the
cache and its digest records); this module puts them together and holds the download
fallback.

Every cached file has a *digest record* beside it (``record.json``, see
:class:`ReleaseRecord`) written at first fetch; every later use checks the file against
it, so a cached release file that was edited is never measured under the release's name.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured (``python -I -S`` included).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tarfile
import tempfile
import time
import urllib.error
import zipfile
from pathlib import Path

from kvqueue.sources.fetch_errors import (
    CacheMismatch,
    FetchError,
    IndexUnreachable,
    ModuleMissing,
    NoReadableWheel,
)
from kvqueue.sources.package_index import (
    SDIST_RE,
    IndexFile,
    Net,
    choose_wheel,
    index_settings,
    reason_of,
    release_files,
)
from kvqueue.sources.release_cache import (
    MEMBER,
    OBTAINED_DOWNLOAD,
    OBTAINED_RANGE,
    OPTIONAL_MEMBERS,
    POOL_MEMBERS,
    ReleaseRecord,
    cache_dir,
    cached_path,
    member_cached_path,
    read_absence,
    read_record,
    sha256_file,
    verify_cached,
    write_absence,
    write_record,
)
from kvqueue.sources.versions import is_version
from kvqueue.sources.wheel_ranges import NoRanges, range_members, ranges_wanted

# An sdist is downloaded only to tell "too old" from "no wheel" when a release has no
# wheel to read (vLLM 0.0.1-0.1.3: under 100 kB each); a large one is not worth it.
_SDIST_PROBE_MAX_BYTES = 20 * 2**20
_CHUNK = 2**20


def _download(net: Net, file: IndexFile, dest: Path) -> str:
    """Download ``file`` to ``dest``; return the sha256 of the bytes written.

    Raises
    ------
    IndexUnreachable
        The download failed part-way or could not start.
    """
    digest = hashlib.sha256()
    try:
        with net.open(file.url) as response, open(dest, "wb") as out:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            why = f"HTTP {exc.code} {exc.reason}"
        else:
            why = reason_of(exc)
        raise IndexUnreachable(
            f"cannot download {file.filename} ({why})", detail=f"{file.filename}: {why}"
        ) from None
    return digest.hexdigest()


def _download_checked(net: Net, file: IndexFile, dest: Path) -> str:
    """Download ``file`` and check it against the index's sha256; return its sha256."""
    got = _download(net, file, dest)
    if file.sha256 and got != file.sha256:
        raise FetchError(
            f"downloaded {file.filename} has sha256 {got} but the index lists "
            f"{file.sha256}: the download is corrupt, run again"
        )
    return got


def _sdist_has_member(path: Path, filename: str) -> bool:
    """Return whether an sdist holds :data:`MEMBER` (below its top-level folder)."""
    if filename.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    else:
        with tarfile.open(path, "r:*") as tf:
            names = tf.getnames()
    return any(n == MEMBER or n.endswith("/" + MEMBER) for n in names)


def _no_wheel(version: str, files: list[IndexFile], net: Net, tmp: Path) -> FetchError:
    """Return the error for a release with no readable wheel: too old, or just no wheel."""
    sdists = [f for f in files if SDIST_RE.fullmatch(f.filename)]
    small = [f for f in sdists if f.size is None or f.size <= _SDIST_PROBE_MAX_BYTES]
    if small:
        # The sdist cannot supply the cached file (only wheels do, so every host measures
        # bytes from the same kind of file), but it shows whether the module existed yet.
        sdist = small[0]
        dest = tmp / sdist.filename
        _download_checked(net, sdist, dest)
        try:
            has_member = _sdist_has_member(dest, sdist.filename)
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError):
            has_member = True  # unreadable: claim nothing about the release's age
        if not has_member:
            only = ", its only file on the index" if len(files) == 1 else ""
            return ModuleMissing(
                f"vLLM release {version} has no {MEMBER} (not in {sdist.filename}{only}): "
                "it predates the module, too old for this benchmark"
            )
    names = sorted(f.filename for f in files)
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} files)" if len(names) > 4 else "")
    return NoReadableWheel(
        f"vLLM release {version} exists on the package index but has no Linux "
        f"x86_64/aarch64 wheel to read {MEMBER} from (files: {shown})"
    )


def fetch_release(version: str, files: list[IndexFile] | None = None) -> Path:
    """Return a local copy of ``kv_cache_utils.py`` from vLLM release ``version``.

    The first use reads the member from one wheel (see the module docstring) and writes
    the digest record; every later use reads the cache, checks the file against the
    record and needs no network. A file cached before records existed is verified once
    against a fresh read and then gets its record.

    Parameters
    ----------
    version
        A release number such as ``"0.32.0"``.
    files
        The release's files as :func:`list_releases` gave them (saves reading the
        index's listing once per release); by default the index is asked.

    Returns
    -------
    Path
        The cached file.

    Raises
    ------
    FetchError
        One line, in the subclass for the case: the version string is malformed;
        :class:`ReleaseNotFound`; :class:`NoReadableWheel`; :class:`ModuleMissing`
        (the release predates the module); :class:`IndexUnreachable` (and nothing is
        cached); :class:`CacheMismatch` (the cached file is not the one fetched).
    """
    if not is_version(version):
        raise FetchError(f"'{version}' is not a vLLM version number (expected e.g. 0.32.0)")
    target = cached_path(version)
    cached = target.is_file()
    if cached:
        record = read_record(version)
        if record is not None:
            verify_cached(version, target, record)
            return target
        print(
            f"kvqueue: {target} has no digest record (cached by an older kvqueue): "
            "fetching the release once to verify it ...",
            file=sys.stderr,
        )
    try:
        path = _fetch_members(version, (MEMBER,), frozenset(), files)[MEMBER]
        assert path is not None  # a required member is never absent
        return path
    except CacheMismatch:
        raise
    except IndexUnreachable as exc:
        if not cached:
            raise
        raise IndexUnreachable(
            f"cached file {target} has no digest record (cached by an older kvqueue) and "
            f"cannot be verified offline ({exc.detail}): connect once to verify it",
            detail=exc.detail,
        ) from None
    except FetchError as exc:
        if not cached:
            raise
        # Same class, so callers still tell the cases apart; the line says why a cached
        # file is refused.
        raise type(exc)(
            f"cached file {target} has no digest record (cached by an older kvqueue) and "
            f"cannot be verified: {exc}"
        ) from None


def fetch_members(
    version: str,
    members: tuple[str, ...] = POOL_MEMBERS,
    optional: frozenset[str] = OPTIONAL_MEMBERS,
    files: list[IndexFile] | None = None,
) -> dict[str, Path | None]:
    """Return local copies of several members of vLLM release ``version``, cached.

    Each member is cached with its own digest record and checked against it at every
    later use, exactly as :func:`fetch_release` does for ``kv_cache_utils.py`` (which
    keeps its path, its ``record.json`` and, for a file cached before records existed,
    :func:`fetch_release`'s verification). The members not yet cached are read in one
    pass over the wheel: by range requests (each against the RECORD's sha256) or, when
    the server ignores ranges, from one full download checked against the index.

    Parameters
    ----------
    version
        A release number such as ``"0.33.0"``.
    members
        Paths inside the wheel (default: :data:`POOL_MEMBERS`).
    optional
        Members the release may lack (default: ``kv_cache_metrics.py``, new in 0.18.0):
        None is returned for them, and a note that they are absent is cached so an
        offline use later needs no network.
    files
        The release's files as :func:`list_releases` gave them; by default the index is
        asked (only when something is not cached).

    Returns
    -------
    dict
        ``{member: cached Path or None}``, in the order of ``members``.

    Raises
    ------
    FetchError
        One line, as :func:`fetch_release`; :class:`ModuleMissing` names the first
        required member the release lacks (``block_pool.py`` for a release without one).
    """
    if not is_version(version):
        raise FetchError(f"'{version}' is not a vLLM version number (expected e.g. 0.32.0)")
    found: dict[str, Path | None] = {}
    pending: list[str] = []
    for member in members:
        target = member_cached_path(version, member)
        if member == MEMBER and target.is_file():
            # A kv_cache_utils.py cached by fetch_release (perhaps before records
            # existed): its own path verifies it.
            found[member] = fetch_release(version, files=files)
            continue
        record = read_record(version, member)
        if record is not None and target.is_file():
            verify_cached(version, target, record)
            found[member] = target
        elif member in optional and read_absence(version, member):
            found[member] = None
        else:
            pending.append(member)
    if pending:
        found.update(_fetch_members(version, tuple(pending), optional, files))
    return {m: found[m] for m in members}


def _fetch_members(
    version: str,
    members: tuple[str, ...],
    optional: frozenset[str],
    files: list[IndexFile] | None,
) -> dict[str, Path | None]:
    """Read ``members`` from one wheel, check and cache each (see fetch_members)."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(
            f"cannot create the release cache {cache_dir()} ({exc.strerror or exc}): "
            "set XDG_CACHE_HOME to a writable folder"
        ) from None
    settings = index_settings()
    files = files if files is not None else release_files(version, settings)
    net = Net(settings)
    start = time.monotonic()
    out: dict[str, Path | None] = {}
    sha12: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="kvqueue-wheel-", dir=cache_dir()) as tmp:
        wheel = choose_wheel(files)
        if wheel is None:
            raise _no_wheel(version, files, net, Path(tmp))
        datas: dict[str, bytes | None] | None = None
        if ranges_wanted(wheel):
            try:
                datas, verified = range_members(net, wheel, version, members, optional)
            except NoRanges as exc:
                print(
                    f"kvqueue: {wheel.filename}: no range read ({exc}); downloading the "
                    "whole wheel instead",
                    file=sys.stderr,
                )
        if datas is not None:
            obtained, wheel_sha256, from_index = OBTAINED_RANGE, None, False
            how = "read by range requests"
        else:
            obtained, how = OBTAINED_DOWNLOAD, "wheel deleted"
            wheel_sha256, datas = _download_wheel_members(
                version, wheel, net, Path(tmp), members, optional
            )
            from_index = wheel.sha256 is not None
            verified = ("wheel sha256 = the index's",) if from_index else ()
        fetched_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for member in members:
            data = datas[member]
            if data is None:
                write_absence(version, member, wheel.filename)
                out[member] = None
                continue
            target = member_cached_path(version, member)
            file_sha256 = hashlib.sha256(data).hexdigest()
            if target.is_file() and sha256_file(target) != file_sha256:
                # A file without its record was not written by kvqueue (the record goes
                # first): never replace it silently.
                raise CacheMismatch(
                    f"cached file {target} is not vllm=={version}'s (from {wheel.filename}): "
                    f"sha256 expected {file_sha256}, got {sha256_file(target)}; delete "
                    f"{target} to re-fetch the release"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            partial.write_bytes(data)
            record = ReleaseRecord(
                vllm_version=version,
                file_sha256=file_sha256,
                file_size=len(data),
                wheel=wheel.filename,
                wheel_sha256=wheel_sha256,
                wheel_sha256_from_index=from_index,
                fetched_at=fetched_at,
                obtained=obtained,
                verified=verified,
                member=member,
            )
            # Record first, file last: a stop in between leaves a record without a file,
            # which reads as "not cached" and is simply fetched again, never as a file
            # without a record (which would need a download to verify).
            write_record(version, record)
            os.replace(partial, target)
            out[member] = target
            sha12[member] = file_sha256[:12]
    names = ", ".join(
        f"{m.rsplit('/', 1)[-1]} (sha256 {sha12[m]}...)" for m in members if out[m] is not None
    )
    absent = [m.rsplit("/", 1)[-1] for m in members if out[m] is None]
    print(
        f"kvqueue: cached vLLM {version} {names}"
        + (f" (no {', '.join(absent)} in this release)" if absent else "")
        + f" in {time.monotonic() - start:.0f} s; {how}",
        file=sys.stderr,
    )
    return out


def _download_wheel_members(
    version: str,
    wheel: IndexFile,
    net: Net,
    tmp: Path,
    members: tuple[str, ...],
    optional: frozenset[str],
) -> tuple[str, dict[str, bytes | None]]:
    """Download the whole wheel, check it against the index, read ``members`` from it.

    Returns
    -------
    tuple
        The wheel's sha256 and ``{member: bytes or None (absent and optional)}``.
    """
    size = f"{wheel.size / 1e6:.0f} MB" if wheel.size else "size not listed"
    print(
        f"kvqueue: downloading vLLM {version} wheel {wheel.filename} ({size}, once) ...",
        file=sys.stderr,
    )
    dest = tmp / wheel.filename
    wheel_sha256 = _download_checked(net, wheel, dest)
    out: dict[str, bytes | None] = {}
    try:
        with zipfile.ZipFile(dest) as zf:
            names = set(zf.namelist())
            for member in members:
                if member in names:
                    out[member] = zf.read(member)
                elif member in optional:
                    out[member] = None
                else:
                    raise ModuleMissing(
                        f"vLLM release {version} has no {member} (not in {wheel.filename}): "
                        "it predates the module, too old for this benchmark"
                    )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise NoReadableWheel(
            f"vLLM release {version}'s wheel {wheel.filename} cannot be read "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return wheel_sha256, out
