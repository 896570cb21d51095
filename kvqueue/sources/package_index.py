"""The package index: pip's configuration, the HTTP client, release listings, the wheel
to read.

The release's files are listed through the index's simple API (the one pip uses, so any
mirror pip is configured with works: its configuration files and ``PIP_*`` variables are
read as pip reads them) and one Linux wheel is picked. Nothing is installed and pip is
not needed.

Standard library only: the validation gate and the timing worker import this module
under the interpreter being measured (``python -I -S`` included).
"""

from __future__ import annotations

import base64
import configparser
import html.parser
import http.client
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kvqueue.sources.fetch_errors import FetchError, IndexUnreachable, ReleaseNotFound
from kvqueue.sources.release_cache import cache_dir
from kvqueue.sources.versions import version_key

#: pip's own default index, used when pip is configured with none.
DEFAULT_INDEX_URL = "https://pypi.org/simple/"

_PROJECT = "vllm"
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
SDIST_RE = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)\.(?P<ext>tar\.gz|tgz|tar\.bz2|zip)$")
_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
)
_USER_AGENT = "kvqueue-bench (urllib; fetches one file of a vLLM wheel)"


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


def redact(url: str) -> str:
    """Return ``url`` safe to print: without any ``user:password@``."""
    return _split_userinfo(url)[0] if "@" in url else url


class Net:
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


def _fetch_listing(net: Net, location: str) -> list[IndexFile] | None:
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
        raise _Unreachable(reason_of(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise _Unreachable(f"unreadable listing ({type(exc).__name__}: {exc})") from None


def reason_of(exc: BaseException) -> str:
    """Return a short one-line reason for a network error."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return " ".join(str(text).split())


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def file_version(filename: str) -> str | None:
    """Return the vLLM version of a wheel or sdist file name, None if it is not vLLM's."""
    match = _WHEEL_RE.fullmatch(filename) or SDIST_RE.fullmatch(filename)
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
    net = Net(settings)
    locations = [u.rstrip("/") + f"/{_PROJECT}/" for u in settings.index_urls]
    locations += list(settings.find_links)
    found: list[IndexFile] = []
    unreachable: list[str] = []
    for location in locations:
        try:
            listed = _fetch_listing(net, location)
        except _Unreachable as exc:
            unreachable.append(f"{redact(location)}: {exc}")
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
    net = Net(settings)
    locations = [u.rstrip("/") + f"/{_PROJECT}/" for u in settings.index_urls]
    locations += list(settings.find_links)
    by_version: dict[str, list[IndexFile]] = {}
    unreachable: list[str] = []
    for location in locations:
        try:
            listed = _fetch_listing(net, location)
        except _Unreachable as exc:
            unreachable.append(f"{redact(location)}: {exc}")
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
