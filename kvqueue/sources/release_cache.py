"""The release cache: where each release's ``kv_cache_utils.py`` is kept, and its digest
record.

Every cached file has a *digest record* beside it (``record.json``, see
:class:`ReleaseRecord`) written at first fetch; every later use checks the file against
it, so a cached release file that was edited is never measured under the release's name.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured (``python -I -S`` included).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The path rule lives in the root module kvqueue.sources.cache_paths (the history writeup reads
# cached files without importing the measuring side); its names are used from here too.
from kvqueue.sources.cache_paths import (  # noqa: F401
    RECORD_NAME,
    cache_dir,
    cached_path,
    member_absence_path,
    member_cached_path,
    member_record_path,
    record_path,
)
from kvqueue.sources.fetch_errors import CacheMismatch

#: Path of the module that defines the queue, inside a vLLM wheel or checkout.
MEMBER = "vllm/v1/core/kv_cache_utils.py"
#: The module that defines ``BlockPool`` (vLLM 0.10.0 on as loaded here).
POOL_MEMBER = "vllm/v1/core/block_pool.py"
#: The pool's metrics collector: imported by ``block_pool.py`` from 0.18.0, absent in 0.10.0.
METRICS_MEMBER = "vllm/v1/core/kv_cache_metrics.py"
#: What a pool subject reads from a release, in fetch order; only the metrics may be absent.
POOL_MEMBERS = (POOL_MEMBER, MEMBER, METRICS_MEMBER)
OPTIONAL_MEMBERS = frozenset({METRICS_MEMBER})
#: Value of the record's ``format`` field; bump it when the fields change meaning.
#: Format 2 adds ``obtained`` and ``verified`` and allows a null ``wheel_sha256`` (a
#: range read never sees the whole wheel); format-1 records are still read.
RECORD_FORMAT = 2
_RECORD_FORMATS = (1, 2)
#: How the member was obtained (``ReleaseRecord.obtained``).
OBTAINED_RANGE = "range"
OBTAINED_DOWNLOAD = "download"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class ReleaseRecord:
    """What was fetched for one release: the sidecar ``record.json`` beside the file.

    Attributes
    ----------
    vllm_version
        The release, e.g. ``"0.32.0"``.
    file_sha256
        sha256 of the extracted ``kv_cache_utils.py`` (what ``run.json`` calls
        ``file_sha256``).
    file_size
        Its size in bytes.
    wheel
        File name of the wheel it was extracted from.
    wheel_sha256
        sha256 of that wheel's bytes as downloaded; None after a range read (the wheel's
        bytes were never all read, so its digest is unknown).
    wheel_sha256_from_index
        True when the index listed a sha256 for the wheel and the download matched it;
        False when the index listed none (a plain folder of wheels, say) or after a
        range read.
    fetched_at
        UTC time of the fetch, ISO 8601.
    obtained
        ``"download"`` (the whole wheel) or ``"range"`` (only the member, by HTTP range
        requests); format-1 records are downloads.
    verified
        What was checked, in words (e.g. the member's CRC-32 and its sha256 against the
        wheel's RECORD, or the wheel's sha256 against the index).
    member
        The member's path inside the wheel; :data:`MEMBER` (``kv_cache_utils.py``) unless
        a pool's other members were fetched (:data:`POOL_MEMBERS`).
    """

    vllm_version: str
    file_sha256: str
    file_size: int
    wheel: str
    wheel_sha256: str | None
    wheel_sha256_from_index: bool
    fetched_at: str
    obtained: str = OBTAINED_DOWNLOAD
    verified: tuple[str, ...] = ()
    member: str = MEMBER

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object written to ``record.json``."""
        return {
            "format": RECORD_FORMAT,
            "member": self.member,
            "vllm_version": self.vllm_version,
            "file_sha256": self.file_sha256,
            "file_size": self.file_size,
            "wheel": self.wheel,
            "wheel_sha256": self.wheel_sha256,
            "wheel_sha256_from_index": self.wheel_sha256_from_index,
            "fetched_at": self.fetched_at,
            "obtained": self.obtained,
            "verified": list(self.verified),
        }


def read_record(version: str, member: str = MEMBER) -> ReleaseRecord | None:
    """Return the digest record of ``version``'s cached file, or None if there is none.

    Parameters
    ----------
    version
        A release number such as ``"0.32.0"``.
    member
        Which cached member's record (default: ``kv_cache_utils.py``'s ``record.json``).

    Returns
    -------
    ReleaseRecord or None
        None when no record file exists (never fetched here, or fetched by a kvqueue
        that predates records).

    Raises
    ------
    CacheMismatch
        The record exists but is not valid JSON of the expected shape or names another
        release.
    """
    path = member_record_path(version, member)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _bad_record(path, f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _bad_record(path, f"is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") not in _RECORD_FORMATS:
        raise _bad_record(path, f"is not a format-{RECORD_FORMAT} (or 1) digest record")
    if data.get("vllm_version") != version or data.get("member") != member:
        raise _bad_record(path, f"is not the record of {member} of vllm=={version}")
    fields = {
        "file_sha256": str,
        "file_size": int,
        "wheel": str,
        "wheel_sha256": str,
        "wheel_sha256_from_index": bool,
        "fetched_at": str,
    }
    obtained = data.get("obtained", OBTAINED_DOWNLOAD) if data["format"] >= 2 else None
    if obtained == OBTAINED_RANGE and data.get("wheel_sha256") is None:
        fields.pop("wheel_sha256")  # a range read never saw the whole wheel
    for key, kind in fields.items():
        # bool is an int subclass: a size of true must not pass as 1.
        if not isinstance(data.get(key), kind) or (kind is int and isinstance(data[key], bool)):
            raise _bad_record(path, f"has no valid '{key}'")
    for key in ("file_sha256", "wheel_sha256"):
        if key in fields and not _SHA256_RE.fullmatch(data[key]):
            raise _bad_record(path, f"'{key}' is not a hex sha256")
    verified: tuple[str, ...] = ()
    if data["format"] >= 2:
        if obtained not in (OBTAINED_RANGE, OBTAINED_DOWNLOAD):
            raise _bad_record(path, "has no valid 'obtained'")
        checks = data.get("verified")
        if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
            raise _bad_record(path, "has no valid 'verified'")
        verified = tuple(checks)
    elif data["wheel_sha256_from_index"]:
        verified = ("wheel sha256 = the index's",)
    return ReleaseRecord(
        vllm_version=version,
        file_sha256=data["file_sha256"],
        file_size=data["file_size"],
        wheel=data["wheel"],
        wheel_sha256=data.get("wheel_sha256"),
        wheel_sha256_from_index=data["wheel_sha256_from_index"],
        fetched_at=data["fetched_at"],
        obtained=obtained or OBTAINED_DOWNLOAD,
        verified=verified,
        member=member,
    )


def _bad_record(path: Path, why: str) -> CacheMismatch:
    return CacheMismatch(
        f"digest record {path} {why}; delete the folder {path.parent} to re-fetch the release"
    )


def write_record(version: str, record: ReleaseRecord) -> None:
    """Write ``record.json`` atomically (a torn record would block every later use).

    The record of a member other than ``kv_cache_utils.py`` goes to its own file
    (:func:`kvqueue.sources.cache_paths.member_record_path`).
    """
    path = member_record_path(version, record.member)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def write_absence(version: str, member: str, wheel: str) -> None:
    """Note that ``version``'s wheel ``wheel`` has no ``member`` (read, not guessed).

    Written only for a member of :data:`OPTIONAL_MEMBERS` after the wheel's listing was
    read, so an offline use later tells "absent from the release" from "not fetched".
    """
    path = member_absence_path(version, member)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    note = {"format": RECORD_FORMAT, "member": member, "vllm_version": version, "wheel": wheel}
    partial.write_text(json.dumps(note, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def read_absence(version: str, member: str) -> bool:
    """Whether a note says ``version``'s wheel has no ``member``.

    Raises
    ------
    CacheMismatch
        The note exists but is not one for this release and member.
    """
    path = member_absence_path(version, member)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        raise _bad_record(path, f"cannot be read ({exc})") from None
    if not isinstance(data, dict) or (data.get("vllm_version"), data.get("member")) != (
        version,
        member,
    ):
        raise _bad_record(path, f"is not the absence note of {member} of vllm=={version}")
    return True


def verify_cached(version: str, target: Path, record: ReleaseRecord) -> None:
    """Raise :class:`CacheMismatch` unless ``target`` still has the recorded sha256."""
    got = sha256_file(target)
    if got != record.file_sha256:
        raise CacheMismatch(
            f"cached file {target} is not the one fetched for vllm=={version} "
            f"(from {record.wheel}): sha256 expected {record.file_sha256}, got {got}; "
            f"delete {target} to re-fetch the release"
        )
