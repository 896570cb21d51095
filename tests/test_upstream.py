"""Fetching ``kv_cache_utils.py`` of a vLLM release (kvqueue.sources), and the real thing.

Offline tests build a small package index in ``tmp_path`` (a PEP 503 folder served as a
``file:`` URL, or a local HTTP server for the PEP 691 JSON form) holding small wheels made
with ``zipfile`` around the hand-written fixture queue, so nothing here contains vLLM
source. pip's configuration is isolated (``PIP_CONFIG_FILE=/dev/null``) so the machine's
own index settings never leak in. Tests marked ``network`` need the network: they use the
real package index (as pip is configured here), each with an empty cache of its own or, for
the command-line runs, the cache ``XDG_CACHE_HOME`` names (``.ci/run`` gives the whole suite
a fresh one), so they pass whatever the cache holds and in any order.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import http.server
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import digests
import pytest

from kvqueue.sources import fetch_errors, loader, package_index, release_cache, release_fetch

REPO_ROOT = Path(__file__).resolve().parent.parent
_PIP_VARS = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_PROXY")


def use_index(monkeypatch: pytest.MonkeyPatch, url: str, find_links: str | None = None) -> None:
    """Make ``url`` the only index (and ``find_links`` the only find-links), as pip would."""
    for var in _PIP_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", url)
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "5")
    # A proxy from the environment must not swallow the local test servers.
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    if find_links is not None:
        monkeypatch.setenv("PIP_FIND_LINKS", find_links)


def closed_port_url() -> str:
    """An index URL on a local port that refuses connections (the offline case)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return f"http://127.0.0.1:{sock.getsockname()[1]}/simple/"


def wheel_bytes(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buffer.getvalue()


def sdist_bytes(version: str, members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeIndex:
    """A PEP 503 simple index in a folder: ``simple/vllm/index.html`` plus ``files/``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.files.mkdir(parents=True)
        self.links: list[str] = []

    @property
    def url(self) -> str:
        return (self.root / "simple").as_uri()

    def add(self, filename: str, data: bytes, sha256: str | None = "auto") -> Path:
        """Add a file; its link carries the true sha256 unless ``sha256`` says otherwise."""
        path = self.files / filename
        path.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest() if sha256 == "auto" else sha256
        fragment = f"#sha256={digest}" if digest else ""
        self.links.append(f'<a href="../../files/{filename}{fragment}">{filename}</a><br/>')
        page = self.root / "simple" / "vllm" / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<html><body>\n" + "\n".join(self.links) + "\n</body></html>\n")
        return path

    def add_wheel(
        self,
        version: str,
        members: dict[str, str],
        platform: str = "manylinux_2_28_x86_64",
        **kwargs: str | None,
    ) -> Path:
        name = f"vllm-{version}-cp38-abi3-{platform}.whl"
        return self.add(name, wheel_bytes(members), **kwargs)


@pytest.fixture
def fake_index(empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    """An empty fake index, made the only one; the cache is empty too."""
    fake = FakeIndex(tmp_path / "index")
    use_index(monkeypatch, fake.url)
    return fake


@pytest.fixture
def release(fake_index: FakeIndex, good_text: str) -> Callable[..., Path]:
    """Factory: put a wheel of ``version`` holding the fixture queue on the fake index."""

    def add(version: str = "9.9.9", **kwargs: str) -> Path:
        return fake_index.add_wheel(version, {release_cache.MEMBER: good_text}, **kwargs)

    return add


def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any listing or download fail the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the network must not be used")

    monkeypatch.setattr(package_index, "_fetch_listing", refuse)
    monkeypatch.setattr(release_fetch, "_download", refuse)


def assert_one_line(exc: BaseException, *fragments: str) -> str:
    message = str(exc)
    assert message and "\n" not in message and message == message.strip(), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def assert_nothing_cached(version: str) -> None:
    folder = release_cache.cached_path(version).parent
    assert not folder.exists() or list(folder.iterdir()) == []
    # No wheel nor temporary folder is left behind either.
    assert glob.glob(str(release_cache.cache_dir() / "kvqueue-wheel-*")) == []


# ------------------------------------------------------------------------ cache


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert release_cache.cache_dir() == tmp_path / "kvqueue"
    assert (
        release_cache.cached_path("0.32.0")
        == tmp_path / "kvqueue" / "vllm-0.32.0" / "kv_cache_utils.py"
    )
    assert (
        release_cache.record_path("0.32.0") == tmp_path / "kvqueue" / "vllm-0.32.0" / "record.json"
    )


@pytest.mark.parametrize("xdg", [None, ""])
def test_cache_dir_defaults_to_home(monkeypatch, tmp_path, xdg):
    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert release_cache.cache_dir() == tmp_path / ".cache" / "kvqueue"


# ---------------------------------------------------------------- fetch (offline)


def test_fetch_extracts_one_member_and_records_it(release, monkeypatch, good_text):
    wheel = release("9.9.9", platform="manylinux_2_35_x86_64")
    path = release_fetch.fetch_release("9.9.9")
    assert path == release_cache.cached_path("9.9.9")
    assert path.read_text() == good_text
    # Only the file and its record are kept: no wheel, no temporary folder, no partial.
    assert sorted(p.name for p in path.parent.iterdir()) == ["kv_cache_utils.py", "record.json"]
    assert sorted(p.name for p in release_cache.cache_dir().iterdir()) == ["vllm-9.9.9"]
    data = json.loads(release_cache.record_path("9.9.9").read_text())
    assert data == {
        "format": 2,
        "member": release_cache.MEMBER,
        "vllm_version": "9.9.9",
        "file_sha256": release_cache.sha256_file(path),
        "file_size": path.stat().st_size,
        "wheel": wheel.name,
        "wheel_sha256": release_cache.sha256_file(wheel),
        "wheel_sha256_from_index": True,
        "fetched_at": data["fetched_at"],
        # A file: location is never read by ranges: the whole wheel was checked.
        "obtained": "download",
        "verified": ["wheel sha256 = the index's"],
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["fetched_at"])
    record = release_cache.read_record("9.9.9")
    assert record is not None and record.to_json() == data
    # The second use reads the cache, checks it and never touches the network.
    no_network(monkeypatch)
    assert release_fetch.fetch_release("9.9.9") == path
    assert loader.read_source("vllm==9.9.9").file_sha256 == data["file_sha256"]


def test_fetch_runs_under_a_bare_interpreter(release, good_text):
    """Standard library only: the gate fetches under ``python -I -S`` of the measured host."""
    release("9.9.9")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); "
        "from kvqueue.sources import release_fetch; print(release_fetch.fetch_release('9.9.9'))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).read_text() == good_text


def test_release_with_only_newer_manylinux_wheels(fake_index, good_text):
    """vLLM 0.12.0-0.21.x have only manylinux_2_31/2_35/2_24 wheels (pip's old tags missed them)."""
    member = {release_cache.MEMBER: good_text}
    fake_index.add_wheel("0.20.0", member, platform="manylinux_2_35_aarch64")
    chosen = fake_index.add_wheel("0.20.0", member, platform="manylinux_2_35_x86_64")
    fake_index.add("vllm-0.20.0.tar.gz", sdist_bytes("0.20.0", member))
    release_fetch.fetch_release("0.20.0")
    record = release_cache.read_record("0.20.0")
    assert record is not None and record.wheel == chosen.name


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        # 0.20.0: manylinux_2_35 only, both architectures, plus the sdist.
        (
            [
                "vllm-0.20.0-cp38-abi3-manylinux_2_35_aarch64.whl",
                "vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl",
                "vllm-0.20.0.tar.gz",
            ],
            "vllm-0.20.0-cp38-abi3-manylinux_2_35_x86_64.whl",
        ),
        # 0.10.2: legacy aliases; aarch64 listed first.
        (
            [
                "vllm-0.10.2-cp38-abi3-manylinux2014_aarch64.whl",
                "vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl",
            ],
            "vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl",
        ),
        # 0.20.1: a rebuilt wheel (build tag 1) supersedes the first, as pip decides.
        (
            [
                "vllm-0.20.1-cp38-abi3-manylinux_2_35_x86_64.whl",
                "vllm-0.20.1-1-cp38-abi3-manylinux_2_35_x86_64.whl",
                "vllm-0.20.1-1-cp38-abi3-manylinux_2_35_aarch64.whl",
            ],
            "vllm-0.20.1-1-cp38-abi3-manylinux_2_35_x86_64.whl",
        ),
        # Only aarch64: still readable.
        (
            ["vllm-1.0-cp38-abi3-manylinux_2_40_aarch64.whl"],
            "vllm-1.0-cp38-abi3-manylinux_2_40_aarch64.whl",
        ),
        # A compound tag counts if any part does.
        (
            ["vllm-1.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"],
            "vllm-1.0-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        ),
        # Per-interpreter wheels (0.4.0): one fixed pick, whatever Python runs the fetch.
        (
            [
                "vllm-0.4.0-cp39-cp39-manylinux1_x86_64.whl",
                "vllm-0.4.0-cp311-cp311-manylinux1_x86_64.whl",
                "vllm-0.4.0-cp310-cp310-manylinux1_x86_64.whl",
            ],
            "vllm-0.4.0-cp310-cp310-manylinux1_x86_64.whl",
        ),
        # Nothing a Linux x86_64/aarch64 host reads.
        (
            [
                "vllm-1.0-cp38-abi3-macosx_11_0_arm64.whl",
                "vllm-1.0-cp38-abi3-win_amd64.whl",
                "vllm-1.0-cp38-abi3-musllinux_1_2_x86_64.whl",
                "vllm-1.0-cp38-abi3-manylinux_2_28_ppc64le.whl",
                "vllm-1.0.tar.gz",
            ],
            None,
        ),
    ],
)
def test_choose_wheel(names, expected):
    files = [package_index.IndexFile(filename=n, url=f"https://example.invalid/{n}") for n in names]
    chosen = package_index.choose_wheel(files)
    assert (chosen.filename if chosen else None) == expected
    # The order of the listing does not matter: every host picks the same file.
    assert package_index.choose_wheel(list(reversed(files))) == chosen


def test_choose_wheel_prefers_not_yanked():
    yanked = package_index.IndexFile(
        "vllm-1.0-cp310-cp310-manylinux1_x86_64.whl", "u1", yanked=True
    )
    kept = package_index.IndexFile("vllm-1.0-cp311-cp311-manylinux1_x86_64.whl", "u2")
    assert package_index.choose_wheel([yanked, kept]) == kept
    assert package_index.choose_wheel([yanked]) == yanked  # an exact pin still takes it


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("vllm-0.20.1-1-cp38-abi3-manylinux_2_35_x86_64.whl", "0.20.1"),
        ("vllm-0.2.1.post1-cp39-cp39-manylinux1_x86_64.whl", "0.2.1.post1"),
        ("vllm-0.2.1.post1.tar.gz", "0.2.1.post1"),
        ("vllm-0.1.0.tar.gz", "0.1.0"),
        ("vllm-1.0.zip", "1.0"),
        ("vllm_flash_attn-2.6.1-cp38-abi3-manylinux1_x86_64.whl", None),
        ("vllm-0.1.0.tar.gz.asc", None),
        ("README", None),
    ],
)
def test_file_version(name, version):
    assert package_index.file_version(name) == version


def test_no_such_release(fake_index, release):
    release("9.9.8")
    with pytest.raises(fetch_errors.ReleaseNotFound) as info:
        release_fetch.fetch_release("9.9.9")
    assert str(info.value) == "vLLM release 9.9.9 does not exist on the package index"
    assert_nothing_cached("9.9.9")


def test_index_without_the_project(fake_index):
    (fake_index.root / "simple").mkdir()
    with pytest.raises(fetch_errors.ReleaseNotFound):
        release_fetch.fetch_release("9.9.9")


def test_release_without_a_readable_wheel(fake_index, good_text):
    member = {release_cache.MEMBER: good_text}
    fake_index.add_wheel("9.9.9", member, platform="macosx_11_0_arm64")
    fake_index.add_wheel("9.9.9", member, platform="win_amd64")
    # Its sdist has the module, so the release is not "too old": it just has no wheel.
    fake_index.add("vllm-9.9.9.tar.gz", sdist_bytes("9.9.9", member))
    with pytest.raises(fetch_errors.NoReadableWheel) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(
        info.value,
        "vLLM release 9.9.9 exists on the package index but has no Linux x86_64/aarch64 wheel",
        "vllm-9.9.9-cp38-abi3-win_amd64.whl",
    )
    assert_nothing_cached("9.9.9")


def test_sdist_only_release_predates_the_module(fake_index):
    """vLLM 0.0.1-0.1.3 have only an sdist (< 100 kB): it shows the module is missing."""
    fake_index.add("vllm-0.1.0.tar.gz", sdist_bytes("0.1.0", {"vllm/__init__.py": ""}))
    with pytest.raises(fetch_errors.ModuleMissing) as info:
        release_fetch.fetch_release("0.1.0")
    assert str(info.value) == (
        f"vLLM release 0.1.0 has no {release_cache.MEMBER} (not in vllm-0.1.0.tar.gz, its only "
        "file on the index): it predates the module, too old for this benchmark"
    )
    assert_nothing_cached("0.1.0")


def test_wheel_without_the_module(fake_index):
    wheel = fake_index.add_wheel("0.5.0", {"vllm/__init__.py": ""})
    with pytest.raises(fetch_errors.ModuleMissing) as info:
        release_fetch.fetch_release("0.5.0")
    assert str(info.value) == (
        f"vLLM release 0.5.0 has no {release_cache.MEMBER} (not in {wheel.name}): "
        "it predates the module, too old for this benchmark"
    )
    assert_nothing_cached("0.5.0")


def test_release_file_without_the_class(fake_index):
    """Fetching succeeds; the loader then says the release's file lacks the class."""
    fake_index.add_wheel("0.6.0", {release_cache.MEMBER: "class SomethingElse:\n    pass\n"})
    path = release_fetch.fetch_release("0.6.0")
    with pytest.raises(loader.SourceError) as info:
        loader.read_source("vllm==0.6.0")
    assert str(info.value) == f"class FreeKVCacheBlockQueue not found in {path}"


def test_corrupt_download_is_refused(release):
    wheel = release("9.9.9", sha256="0" * 64)
    with pytest.raises(fetch_errors.FetchError) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(
        info.value,
        f"downloaded {wheel.name} has sha256 {release_cache.sha256_file(wheel)}",
        f"the index lists {'0' * 64}: the download is corrupt",
    )
    assert_nothing_cached("9.9.9")


def test_unreadable_wheel(fake_index):
    wheel = fake_index.add("vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl", b"not a zip")
    with pytest.raises(fetch_errors.NoReadableWheel) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(info.value, f"vLLM release 9.9.9's wheel {wheel.name} cannot be read")
    assert_nothing_cached("9.9.9")


def test_download_failing_part_way(release, monkeypatch):
    release("9.9.9")

    def broken(net, file, dest):
        dest.write_bytes(b"PK\x03\x04 half a wheel")
        raise fetch_errors.IndexUnreachable(f"cannot download {file.filename} (Connection reset)")

    monkeypatch.setattr(release_fetch, "_download", broken)
    with pytest.raises(fetch_errors.IndexUnreachable) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(info.value, "cannot download vllm-9.9.9-", "(Connection reset)")
    assert_nothing_cached("9.9.9")


def test_unreachable_index(empty_cache, monkeypatch):
    url = closed_port_url()
    use_index(monkeypatch, url)
    with pytest.raises(fetch_errors.IndexUnreachable) as info:
        release_fetch.fetch_release("0.32.7")
    assert str(info.value) == (
        f"cannot reach the package index to fetch vllm==0.32.7 ({url}vllm/: Connection "
        f"refused), and it is not cached in {empty_cache}"
    )
    assert_nothing_cached("0.32.7")


def test_find_links_folder_serves_when_the_index_is_unreachable(
    empty_cache, tmp_path, monkeypatch, good_text
):
    """pip's find-links (a folder of wheels, e.g. pre-fetched for an offline host) counts."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel = folder / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(wheel_bytes({release_cache.MEMBER: good_text}))
    (folder / "other-1.0-py3-none-any.whl").write_bytes(b"")
    use_index(monkeypatch, closed_port_url(), find_links=str(folder))
    assert release_fetch.fetch_release("9.9.9").read_text() == good_text
    record = release_cache.read_record("9.9.9")
    assert record is not None
    assert (record.wheel, record.wheel_sha256) == (wheel.name, release_cache.sha256_file(wheel))
    assert record.wheel_sha256_from_index is False  # a folder lists no digests
    assert wheel.exists()  # a find-links file is read, never moved or deleted


# ------------------------------------------------- an HTTP index (JSON and HTML)


class _Handler(http.server.BaseHTTPRequestHandler):
    # Replaced by a fresh dict and list per test (see the http_index fixture).
    routes: ClassVar[dict[str, tuple[int, str, bytes]]] = {}
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append({"path": self.path, **dict(self.headers)})
        status, ctype, body = self.routes.get(self.path, (404, "text/plain", b"not found"))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_index(empty_cache, monkeypatch) -> Iterator[tuple[str, type[_Handler]]]:
    """A local HTTP server; set ``handler.routes``; the index URL is ``<base>/simple/``."""
    handler = type("Handler", (_Handler,), {"routes": {}, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    use_index(monkeypatch, f"{base}/simple/")
    try:
        yield base, handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("form", ["json", "html"])
def test_http_index_in_both_forms(http_index, good_text, form):
    _, handler = http_index
    data = wheel_bytes({release_cache.MEMBER: good_text})
    name = "vllm-9.9.9-cp38-abi3-manylinux_2_35_x86_64.whl"
    digest = hashlib.sha256(data).hexdigest()
    if form == "json":  # PEP 691, relative URL, as a mirror may serve it
        page = {
            "meta": {"api-version": "1.1"},
            "name": "vllm",
            "files": [
                {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": digest}},
                {"filename": "vllm-9.9.9.tar.gz", "url": "/files/x.tar.gz", "hashes": {}},
            ],
        }
        listing = (200, "application/vnd.pypi.simple.v1+json", json.dumps(page).encode())
    else:
        link = f'<a href="/files/{name}#sha256={digest}">{name}</a>'
        listing = (200, "text/html", link.encode())
    handler.routes = {"/simple/vllm/": listing, f"/files/{name}": (200, "x", data)}
    assert release_fetch.fetch_release("9.9.9").read_text() == good_text
    record = release_cache.read_record("9.9.9")
    assert record is not None and (record.wheel, record.wheel_sha256) == (name, digest)
    assert "application/vnd.pypi.simple.v1+json" in handler.seen[0]["Accept"]


def test_http_error_of_the_index(http_index):
    base, handler = http_index
    handler.routes = {"/simple/vllm/": (503, "text/plain", b"busy")}
    with pytest.raises(fetch_errors.IndexUnreachable) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(info.value, f"({base}/simple/vllm/: HTTP 503 Service Unavailable)")


def test_index_credentials_are_sent_but_never_printed(http_index, monkeypatch):
    base, handler = http_index
    monkeypatch.setenv("PIP_INDEX_URL", base.replace("//", "//kv:s3cret@") + "/simple/")
    handler.routes = {"/simple/vllm/": (503, "text/plain", b"busy")}
    with pytest.raises(fetch_errors.IndexUnreachable) as info:
        release_fetch.fetch_release("9.9.9")
    assert "s3cret" not in str(info.value)
    assert handler.seen[0]["Authorization"] == "Basic " + base64.b64encode(b"kv:s3cret").decode()


# ----------------------------------------------------------- pip's configuration


def test_index_settings_read_like_pip(tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url =\n    https://extra1.example/simple\n    file:///srv/simple\n"
        "find_links = /srv/wheels\n"
        "cert = /srv/ca.pem\n"
        "proxy = http://proxy.example:3128\n"
        "timeout = 42\n"
        "[download]\n"
        "index-url = https://download.example/simple\n"
    )
    user = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    user.parent.mkdir(parents=True)
    user.write_text("[global]\nindex-url = https://user.example/simple\n")
    env = {"PIP_CONFIG_FILE": str(config), "HOME": str(tmp_path / "home")}
    env["XDG_CONFIG_DIRS"] = str(tmp_path / "no-such-dir")
    settings = package_index.index_settings(env)
    # [download] overrides [global]; the user's file is skipped beside PIP_CONFIG_FILE.
    assert settings.index_urls == (
        "https://download.example/simple",
        "https://extra1.example/simple",
        "file:///srv/simple",
    )
    assert settings.find_links == ("/srv/wheels",)
    assert (settings.cert, settings.proxy, settings.timeout) == (
        "/srv/ca.pem",
        "http://proxy.example:3128",
        42.0,
    )
    # Environment variables win over every file.
    env |= {"PIP_INDEX_URL": "https://env.example/simple", "PIP_DEFAULT_TIMEOUT": "7"}
    settings = package_index.index_settings(env)
    assert settings.index_urls[0] == "https://env.example/simple"
    assert settings.timeout == 7.0
    assert package_index.index_settings({**env, "PIP_NO_INDEX": "yes"}).index_urls == ()


def test_no_pip_configuration_means_pips_default_index():
    settings = package_index.index_settings({"PIP_CONFIG_FILE": os.devnull})
    assert settings.index_urls == (package_index.DEFAULT_INDEX_URL,)
    assert (settings.find_links, settings.cert, settings.proxy) == ((), None, None)
    assert settings.timeout == 15.0
    env = {"PIP_CONFIG_FILE": os.devnull, "REQUESTS_CA_BUNDLE": "/srv/bundle.pem"}
    assert package_index.index_settings(env).cert == "/srv/bundle.pem"


def test_broken_pip_configuration_is_one_line(tmp_path, empty_cache, monkeypatch):
    config = tmp_path / "pip.conf"
    config.write_text("index-url = no section header\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    with pytest.raises(fetch_errors.FetchError) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(info.value, f"cannot read pip configuration {config}")


# ---------------------------------------------------- the digest record (task: A)


def test_modified_cached_file_is_refused(release, monkeypatch, good_text):
    """The incident: a loop added to the cached file was measured under the release name."""
    wheel = release("9.9.9")
    path = release_fetch.fetch_release("9.9.9")
    expected = release_cache.sha256_file(path)
    path.write_text(good_text + "\nfor _ in range(10):\n    pass\n")
    got = release_cache.sha256_file(path)
    real = [
        (package_index, "_fetch_listing", package_index._fetch_listing),
        (release_fetch, "_download", release_fetch._download),
    ]
    no_network(monkeypatch)
    message = (
        f"cached file {path} is not the one fetched for vllm==9.9.9 (from {wheel.name}): "
        f"sha256 expected {expected}, got {got}; delete {path} to re-fetch the release"
    )
    with pytest.raises(fetch_errors.CacheMismatch) as info:
        release_fetch.fetch_release("9.9.9")
    assert str(info.value) == message
    with pytest.raises(loader.SourceError) as source_info:
        loader.read_source("vllm==9.9.9")
    assert str(source_info.value) == message
    # The recovery the message names works.
    for module, name, function in real:
        monkeypatch.setattr(module, name, function)
    path.unlink()
    assert release_cache.sha256_file(release_fetch.fetch_release("9.9.9")) == expected


def test_record_without_file_is_fetched_again(release, good_text):
    """A stop between writing the record and the file leaves just the record."""
    release("9.9.9")
    path = release_fetch.fetch_release("9.9.9")
    path.unlink()
    assert release_fetch.fetch_release("9.9.9").read_text() == good_text


def cache_without_record(version: str, text: str) -> Path:
    """A cached file as kvqueue wrote it before digest records existed."""
    path = release_cache.cached_path(version)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_file_cached_before_records_is_verified_once(release, monkeypatch, good_text, capsys):
    release("9.9.9")
    path = cache_without_record("9.9.9", good_text)
    assert release_fetch.fetch_release("9.9.9") == path
    assert "has no digest record" in capsys.readouterr().err
    record = release_cache.read_record("9.9.9")
    assert record is not None and record.file_sha256 == release_cache.sha256_file(path)
    no_network(monkeypatch)
    assert release_fetch.fetch_release("9.9.9") == path


def test_file_cached_before_records_that_differs_is_refused(release, good_text):
    release("9.9.9")
    path = cache_without_record("9.9.9", good_text + "# edited\n")
    before = path.read_bytes()
    with pytest.raises(fetch_errors.CacheMismatch) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(
        info.value,
        f"cached file {path} is not vllm==9.9.9's (from vllm-9.9.9-",
        f"sha256 expected {hashlib.sha256(good_text.encode()).hexdigest()}, "
        f"got {hashlib.sha256(before).hexdigest()}; delete {path} to re-fetch",
    )
    assert path.read_bytes() == before  # left as it was, for whoever edited it
    assert not release_cache.record_path("9.9.9").exists()


def test_file_cached_before_records_offline(empty_cache, monkeypatch, good_text):
    path = cache_without_record("9.9.9", good_text)
    use_index(monkeypatch, closed_port_url())
    with pytest.raises(fetch_errors.IndexUnreachable) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(
        info.value,
        f"cached file {path} has no digest record (cached by an older kvqueue) and cannot "
        "be verified offline (",
        "Connection refused): connect once to verify it",
    )


def test_file_cached_before_records_of_an_unknown_release(fake_index, good_text):
    path = cache_without_record("9.9.9", good_text)
    with pytest.raises(fetch_errors.ReleaseNotFound) as info:
        release_fetch.fetch_release("9.9.9")
    assert_one_line(info.value, f"cached file {path} has no digest record", "9.9.9 does not exist")


def _valid_record() -> dict[str, object]:
    return release_cache.ReleaseRecord("9.9.9", "a" * 64, 1, "w.whl", "b" * 64, True, "t").to_json()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "is not JSON"),
        ("[]", "is not a format-2 (or 1) digest record"),
        (json.dumps({**_valid_record(), "format": 3}), "is not a format-2 (or 1) digest record"),
        (json.dumps({**_valid_record(), "obtained": "magic"}), "has no valid 'obtained'"),
        (json.dumps({**_valid_record(), "verified": "all"}), "has no valid 'verified'"),
        (json.dumps({**_valid_record(), "wheel_sha256": None}), "has no valid 'wheel_sha256'"),
        (json.dumps({**_valid_record(), "vllm_version": "9.9.8"}), "is not the record of"),
        (json.dumps({**_valid_record(), "file_sha256": "A" * 64}), "'file_sha256' is not a hex"),
        (json.dumps({**_valid_record(), "file_size": True}), "has no valid 'file_size'"),
        (json.dumps({k: v for k, v in _valid_record().items() if k != "wheel"}), "'wheel'"),
    ],
)
def test_broken_record_is_one_line(empty_cache, monkeypatch, good_text, text, why):
    cache_without_record("9.9.9", good_text)
    release_cache.record_path("9.9.9").write_text(text)
    no_network(monkeypatch)
    with pytest.raises(fetch_errors.CacheMismatch) as info:
        release_fetch.fetch_release("9.9.9")
    folder = release_cache.cached_path("9.9.9").parent
    assert_one_line(info.value, why, f"delete the folder {folder} to re-fetch the release")


def test_version_with_trailing_newline_is_malformed(empty_cache, monkeypatch):
    no_network(monkeypatch)
    with pytest.raises(fetch_errors.FetchError, match="is not a vLLM version number"):
        release_fetch.fetch_release("0.32.0\n")


# ----------------------------------------------------------- for the report side


def test_check_run_digests_against_given_records():
    variants = [
        {"label": "vllm==0.31.0", "vllm_version": "0.31.0", "file_sha256": "a" * 64},
        {"label": "vllm==0.32.0", "vllm_version": "0.32.0", "file_sha256": "c" * 64},
        {"label": "kvqueue", "vllm_version": None, "file_sha256": "d" * 64},
        {"label": "vllm==0.33.0#2", "vllm_version": "0.33.0", "file_sha256": "e" * 64},
    ]
    checks = digests.check_run_digests(variants, {"0.31.0": "a" * 64, "0.32.0": "b" * 64})
    assert [(c.label, c.status) for c in checks] == [
        ("vllm==0.31.0", "match"),
        ("vllm==0.32.0", "mismatch"),
        ("vllm==0.33.0#2", "unrecorded"),
    ]
    assert checks[1].message == (
        "vllm==0.32.0: measured a file that is not vllm==0.32.0's: "
        f"sha256 expected {'b' * 64}, got {'c' * 64}"
    )
    assert all("\n" not in c.message for c in checks)


def test_check_run_digests_reads_this_hosts_records(release):
    release("9.9.9")
    sha = release_cache.sha256_file(release_fetch.fetch_release("9.9.9"))
    ok = {"label": "vllm==9.9.9", "vllm_version": "9.9.9", "file_sha256": sha}
    edited = {**ok, "label": "edited", "file_sha256": "f" * 64}
    never = {"label": "vllm==1.2.3", "vllm_version": "1.2.3", "file_sha256": sha}
    statuses = [c.status for c in digests.check_run_digests([ok, edited, never])]
    assert statuses == ["match", "mismatch", "unrecorded"]
    # A broken record must not stop a report from being built: it reads as unrecorded.
    release_cache.record_path("9.9.9").write_text("{")
    assert digests.check_run_digests([ok])[0].status == "unrecorded"


def test_check_run_digests_accepts_committed_runs():
    runs = sorted(REPO_ROOT.glob("data/raw/*/*/run.json"))
    if not runs:
        pytest.skip("no committed runs")
    variants = [v for run in runs for v in json.loads(run.read_text())["variants"]]
    # Each release measured in the committed data with one file: make that the record.
    records = {v["vllm_version"]: v["file_sha256"] for v in variants if v["vllm_version"]}
    checks = digests.check_run_digests(variants, records)
    assert checks and all(c.status == "match" for c in checks)


# -------------------------------------------------------------- the real releases


REAL = ["vllm==0.31.0", "vllm==0.32.0", "kvqueue"]


@pytest.mark.network
def test_validate_real_releases_end_to_end(run_cli):
    """Needs the network (unless cached): the gate on two real releases and ours."""
    proc = run_cli("validate", *REAL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "baseline vllm==0.31.0, block class from vllm==0.31.0" in lines[0]
    results = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert [line.split()[:2] for line in results] == [["PASS", src] for src in REAL]
    shas = re.findall(r"sha256 ([0-9a-f]{64})", proc.stdout)
    assert len(shas) == 3
    assert len(set(shas)) == 3
    assert all("60,000 ops checked" in line for line in results)


@pytest.mark.network
def test_real_release_is_cached_recorded_and_reused(empty_cache, monkeypatch):
    """Needs the network: fetches 0.32.0 from the package index into an empty cache of its
    own, then reuses it offline. The record holds what was checked for either way of
    obtaining the file: a range read (PyPI honours ranges) or the whole wheel (a server
    that does not, or ``KVQUEUE_FULL_DOWNLOAD=1``)."""
    path = release_fetch.fetch_release("0.32.0")
    assert path == release_cache.cached_path("0.32.0") and path.is_relative_to(empty_cache)
    record = release_cache.read_record("0.32.0")
    assert record is not None and record.file_sha256 == release_cache.sha256_file(path)
    assert record.wheel.startswith("vllm-0.32.0-")
    if record.obtained == release_cache.OBTAINED_RANGE:
        assert record.wheel_sha256 is None and not record.wheel_sha256_from_index
        assert "member sha256 = the wheel's RECORD" in record.verified
    else:
        assert record.obtained == release_cache.OBTAINED_DOWNLOAD
        assert record.wheel_sha256 is not None and record.wheel_sha256_from_index
        assert record.verified == ("wheel sha256 = the index's",)
    no_network(monkeypatch)
    start = time.perf_counter()
    assert release_fetch.fetch_release("0.32.0") == path
    assert time.perf_counter() - start < 0.5
    src = loader.read_source("vllm==0.32.0")
    assert src.vllm_version == "0.32.0"
    assert src.path == str(path)
    assert src.file_sha256 == release_cache.sha256_file(path)
    assert src.text.startswith("class FreeKVCacheBlockQueue")
    block = loader.read_source("vllm==0.32.0", loader.BLOCK_CLASS)
    assert block.text.startswith("@dataclass")


@pytest.mark.network
@pytest.mark.parametrize(
    ("version", "platform"),
    [
        ("0.9.2", "manylinux1_x86_64"),
        ("0.12.0", "manylinux_2_31_x86_64"),
        ("0.20.0", "manylinux_2_35_x86_64"),
        ("0.21.0", "manylinux_2_24_x86_64"),
        ("0.32.0", "manylinux_2_28_x86_64"),
    ],
)
def test_real_listing_picks_a_wheel(version, platform):
    """Needs the network; a listing only (no download): each release era's tag is found,
    with its sha256."""
    wheel = package_index.choose_wheel(package_index.release_files(version))
    assert wheel is not None
    # A rebuilt wheel (build tag, as 0.20.1 and 0.21.0 have) is preferred, as pip does.
    pattern = rf"vllm-{re.escape(version)}(-[0-9]+)?-cp38-abi3-{platform}\.whl"
    assert re.fullmatch(pattern, wheel.filename), wheel.filename
    assert wheel.sha256 is not None and re.fullmatch(r"[0-9a-f]{64}", wheel.sha256)


@pytest.mark.network
def test_real_release_that_predates_the_module(empty_cache):
    """Needs the network: vLLM 0.1.0 has only an 83 kB sdist, read to tell "too old" from
    "no wheel"."""
    with pytest.raises(fetch_errors.ModuleMissing) as info:
        release_fetch.fetch_release("0.1.0")
    assert str(info.value) == (
        f"vLLM release 0.1.0 has no {release_cache.MEMBER} (not in vllm-0.1.0.tar.gz, its only "
        "file on the index): it predates the module, too old for this benchmark"
    )
    assert_nothing_cached("0.1.0")


@pytest.mark.network
def test_real_unknown_release(empty_cache):
    """Needs the network: the index is read and lists no such release."""
    with pytest.raises(fetch_errors.ReleaseNotFound) as info:
        release_fetch.fetch_release("0.0.999")
    assert str(info.value) == "vLLM release 0.0.999 does not exist on the package index"
    assert not release_cache.cached_path("0.0.999").exists()


@pytest.mark.network
def test_real_unknown_release_via_cli(run_cli, tmp_path):
    """Needs the network: the same, as the command line says it."""
    proc = run_cli("validate", "vllm==0.0.999", "kvqueue", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        "kvqueue validate: vLLM release 0.0.999 does not exist on the package index"
    )
