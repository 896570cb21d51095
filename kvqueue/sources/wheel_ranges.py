"""Reading one member of a remote wheel by HTTP range requests.

From an HTTP(S) server that honours ``Range:`` requests (PyPI's
``files.pythonhosted.org`` answers ``206 Partial Content``, suffix ranges included) only
that member is read: the zip's end-of-central-directory record, the central directory,
then the member's local header and compressed bytes, and the same for the wheel's
``*.dist-info/RECORD``; the member is checked against its zip CRC-32 and against the
sha256 the wheel's RECORD lists for it (~0.3 MB instead of 300 MB per release). A range
read cannot check the wheel's own sha256 (that needs every byte). A server that ignores
ranges, a ``file:`` location, or a zip this reader does not handle (zip64) raises
:class:`NoRanges`: the caller downloads the whole wheel instead.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured (``python -I -S`` included).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import http.client
import io
import os
import re
import struct
import urllib.error
import urllib.parse
import zlib
from dataclasses import dataclass

from kvqueue.sources.fetch_errors import FetchError, IndexUnreachable, ModuleMissing
from kvqueue.sources.package_index import IndexFile, Net, reason_of, redact

#: Set to 1 to always download the whole wheel (no range reads).
FULL_DOWNLOAD_ENV = "KVQUEUE_FULL_DOWNLOAD"


class NoRanges(Exception):
    """A range read is not possible here; the caller downloads the whole wheel."""


# The end-of-central-directory record is 22 bytes plus a comment of at most 65,535.
_EOCD_SEARCH = 22 + 65_535
_EOCD = struct.Struct("<4sHHHHIIH")
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
# Bytes read beyond the central directory's idea of a local header: the local extra
# field may be longer than the central one.
_LOCAL_SLACK = 1024


@dataclass(frozen=True)
class _ZipEntry:
    name: str
    method: int
    crc32: int
    compressed: int
    size: int
    offset: int


def _get_range(net: Net, url: str, byte_range: str) -> tuple[bytes, int]:
    """Return the bytes of ``byte_range`` of ``url`` and the file's total size.

    Raises
    ------
    NoRanges
        The server answered anything but ``206`` with a ``Content-Range`` (a ``200``
        would send the whole 300 MB wheel: the connection is closed unread).
    IndexUnreachable
        The request failed for a network reason.
    """
    try:
        with net.open(url, byte_range=byte_range) as response:
            content_range = response.headers.get("Content-Range") or ""
            match = re.fullmatch(r"bytes ([0-9]+)-([0-9]+)/([0-9]+)", content_range.strip())
            if response.status != 206 or match is None:
                raise NoRanges(f"HTTP {response.status} to a range request")
            first, last, total = (int(g) for g in match.groups())
            data = response.read(last - first + 2)
    except urllib.error.HTTPError as exc:
        if exc.code == 416:
            raise NoRanges("HTTP 416 Range Not Satisfiable") from None
        raise IndexUnreachable(
            f"cannot read {redact(url)} (HTTP {exc.code} {exc.reason})",
            detail=f"HTTP {exc.code} {exc.reason}",
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise IndexUnreachable(
            f"cannot read {redact(url)} ({reason_of(exc)})", detail=reason_of(exc)
        ) from None
    if len(data) != last - first + 1:
        raise NoRanges(f"a range of {last - first + 1} bytes came back as {len(data)}")
    return data, total


def _central_directory(net: Net, url: str) -> tuple[list[_ZipEntry], int]:
    """Read a remote zip's central directory by two range requests (one if it is small)."""
    tail, total = _get_range(net, url, f"-{_EOCD_SEARCH}")
    tail_start = total - len(tail)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise NoRanges("no zip end-of-central-directory record")
    _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        raise NoRanges("a zip64 archive")
    if cd_offset + cd_size > total:
        raise NoRanges("the central directory lies outside the file")
    if cd_offset >= tail_start:
        cd = tail[cd_offset - tail_start : cd_offset - tail_start + cd_size]
    else:
        cd, _ = _get_range(net, url, f"{cd_offset}-{cd_offset + cd_size - 1}")
    entries, pos = [], 0
    while pos + _CENTRAL.size <= len(cd) and len(entries) < count:
        fields_ = _CENTRAL.unpack_from(cd, pos)
        if fields_[0] != b"PK\x01\x02":
            raise NoRanges("a malformed central directory")
        flags, method, crc, csize, usize = (
            fields_[3],
            fields_[4],
            fields_[7],
            fields_[8],
            fields_[9],
        )
        nlen, elen, clen, offset = fields_[10], fields_[11], fields_[12], fields_[16]
        raw = cd[pos + _CENTRAL.size : pos + _CENTRAL.size + nlen]
        name = raw.decode("utf-8" if flags & 0x800 else "cp437")
        if 0xFFFFFFFF in (csize, usize, offset):
            raise NoRanges("a zip64 entry")
        entries.append(_ZipEntry(name, method, crc, csize, usize, offset))
        pos += _CENTRAL.size + nlen + elen + clen
    return entries, total


def _read_entry(net: Net, url: str, entry: _ZipEntry, total: int) -> bytes:
    """Read and inflate one member: its local header and compressed bytes by range."""
    want = _LOCAL.size + len(entry.name.encode()) + _LOCAL_SLACK + entry.compressed
    last = min(total - 1, entry.offset + want - 1)
    data, _ = _get_range(net, url, f"{entry.offset}-{last}")
    head = _LOCAL.unpack_from(data, 0)
    if head[0] != b"PK\x03\x04":
        raise NoRanges(f"no local header for {entry.name}")
    start = _LOCAL.size + head[9] + head[10]
    if start + entry.compressed > len(data):
        more, _ = _get_range(
            net, url, f"{entry.offset + start}-{entry.offset + start + entry.compressed - 1}"
        )
        body = more
    else:
        body = data[start : start + entry.compressed]
    if entry.method == 0:
        out = body
    elif entry.method == 8:
        inflate = zlib.decompressobj(-15)
        out = inflate.decompress(body) + inflate.flush()
    else:
        raise NoRanges(f"compression method {entry.method}")
    if len(out) != entry.size or zlib.crc32(out) != entry.crc32:
        raise FetchError(
            f"{entry.name} read by range requests fails its zip CRC-32 check: "
            "the server sent other bytes than its listing describes, run again"
        )
    return out


def _record_sha256(record_text: str, member: str) -> str | None:
    """Return the hex sha256 a wheel's RECORD lists for ``member``, None if it lists none."""
    for row in csv.reader(io.StringIO(record_text)):
        if len(row) >= 2 and row[0] == member and row[1].startswith("sha256="):
            b64 = row[1][len("sha256=") :]
            try:
                raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            except (ValueError, TypeError):
                return None
            return raw.hex()
    return None


def range_members(
    net: Net,
    wheel: IndexFile,
    version: str,
    members: tuple[str, ...],
    optional: frozenset[str] = frozenset(),
) -> tuple[dict[str, bytes | None], tuple[str, ...]]:
    """Read several members of a remote wheel by range requests, each checked.

    The central directory and the RECORD are read once for all of them; each member is
    checked against its zip CRC-32 and the sha256 the RECORD lists for it.

    Parameters
    ----------
    net, wheel, version
        The connection, the wheel to read and its release (for messages).
    members
        Paths inside the wheel, e.g. ``("vllm/v1/core/block_pool.py", ...)``.
    optional
        Members the wheel may lack: they come back as None instead of raising.

    Returns
    -------
    tuple
        ``{member: bytes or None}`` and the checks made, in words.

    Raises
    ------
    NoRanges
        Fall back to the full download.
    ModuleMissing
        The wheel's central directory lacks a member not in ``optional`` (the first
        missing one is named).
    FetchError
        A member fails its CRC-32 or its RECORD sha256.
    """
    entries, total = _central_directory(net, wheel.url)
    if wheel.size is not None and wheel.size != total:
        raise NoRanges(f"the server's size {total} is not the index's {wheel.size}")
    by_name = {e.name: e for e in entries}
    for member in members:
        if member not in by_name and member not in optional:
            raise ModuleMissing(
                f"vLLM release {version} has no {member} (not in {wheel.filename}): "
                "it predates the module, too old for this benchmark"
            )
    records = [e for e in entries if re.fullmatch(r"[^/]+\.dist-info/RECORD", e.name)]
    if len(records) != 1:
        raise NoRanges("no single .dist-info/RECORD")
    found: dict[str, bytes | None] = {
        m: _read_entry(net, wheel.url, by_name[m], total) if m in by_name else None for m in members
    }
    record_text = _read_entry(net, wheel.url, records[0], total).decode("utf-8", "replace")
    for member, data in found.items():
        if data is None:
            continue
        listed = _record_sha256(record_text, member)
        if listed is None:
            raise NoRanges(f"the wheel's RECORD lists no sha256 for {member}")
        got = hashlib.sha256(data).hexdigest()
        if got != listed:
            raise FetchError(
                f"{member} of {wheel.filename} has sha256 {got} but the wheel's RECORD lists "
                f"{listed}: the wheel is inconsistent, run again"
            )
    return found, (
        "member zip CRC-32",
        "member sha256 = the wheel's RECORD",
        "wheel sha256 NOT checked (range read)",
    )


def ranges_wanted(wheel: IndexFile) -> bool:
    """Whether to try a range read: remote HTTP(S) file and not disabled by the user."""
    if os.environ.get(FULL_DOWNLOAD_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    return urllib.parse.urlsplit(wheel.url).scheme in ("http", "https")
