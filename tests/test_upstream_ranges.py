"""Reading one member of a remote wheel by HTTP range requests (kvqueue.sources.wheel_ranges), the
fallback to the full download, and the release listing of a history.

A local HTTP server serves small wheels made with ``zipfile`` around the hand-written
fixture queue (no vLLM text), with or without honouring ``Range:``.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import re
import threading
import zipfile
from collections.abc import Iterator
from typing import ClassVar

import pytest
from test_upstream import use_index

from kvqueue.sources import fetch_errors, package_index, release_cache, release_fetch, versions
from kvqueue.sources.wheel_ranges import FULL_DOWNLOAD_ENV

VERSION = "9.9.9"
WHEEL = f"vllm-{VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel(members: dict[str, bytes], record: dict[str, bytes] | None = None) -> bytes:
    """A wheel: the members, padding, and a RECORD listing ``record`` (default: them)."""
    buffer = io.BytesIO()
    listed = members if record is None else record
    lines = [record_line(n, d) for n, d in listed.items()]
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        # Incompressible padding, so the member lies far from the central directory.
        zf.writestr("vllm/_big.bin", hashlib.shake_256(b"x").digest(300_000), zipfile.ZIP_STORED)
        zf.writestr(f"vllm-{VERSION}.dist-info/RECORD", "\n".join(lines) + "\n")
    return buffer.getvalue()


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[str, bytes]]] = {}
    seen: ClassVar[list[tuple[str, str | None]]] = []
    ranges: ClassVar[bool] = True

    def do_GET(self) -> None:
        header = self.headers.get("Range")
        type(self).seen.append((self.path, header))
        if self.path not in self.routes:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        ctype, body = self.routes[self.path]
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
        if self.ranges and match:
            first, last = match.groups()
            if first == "":
                start, end = max(0, len(body) - int(last)), len(body) - 1
            else:
                start, end = int(first), min(len(body) - 1, int(last or len(body) - 1))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
            body = body[start : end + 1]
        else:
            self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(empty_cache, monkeypatch) -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"routes": {}, "seen": [], "ranges": True})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    use_index(monkeypatch, f"{base}/simple/")
    monkeypatch.delenv(FULL_DOWNLOAD_ENV, raising=False)
    try:
        yield base, handler
    finally:
        httpd.shutdown()
        httpd.server_close()


def serve(handler: type[_Handler], files: dict[str, bytes]) -> None:
    page = {
        "meta": {"api-version": "1.1"},
        "name": "vllm",
        "files": [
            {
                "filename": name,
                "url": f"/files/{name}",
                "hashes": {"sha256": hashlib.sha256(data).hexdigest()},
                "size": len(data),
            }
            for name, data in files.items()
        ],
    }
    handler.routes = {
        "/simple/vllm/": ("application/vnd.pypi.simple.v1+json", json.dumps(page).encode()),
        **{f"/files/{name}": ("application/octet-stream", data) for name, data in files.items()},
    }


def test_range_read_reads_only_the_member(server, good_text):
    _, handler = server
    data = wheel({release_cache.MEMBER: good_text.encode()})
    serve(handler, {WHEEL: data})
    path = release_fetch.fetch_release(VERSION)
    assert path.read_text() == good_text
    record = release_cache.read_record(VERSION)
    assert record is not None
    assert record.obtained == "range"
    assert record.wheel == WHEEL and record.wheel_sha256 is None
    assert record.wheel_sha256_from_index is False
    assert "member sha256 = the wheel's RECORD" in record.verified
    assert any("NOT checked" in v for v in record.verified)
    ranged = [h for p, h in handler.seen if p == f"/files/{WHEEL}"]
    assert ranged and all(h and h.startswith("bytes=") for h in ranged)
    # Far less than the wheel was read: the padding alone is 300 kB.
    assert len(ranged) <= 5


def test_server_without_ranges_falls_back_to_the_download(server, good_text, capsys):
    _, handler = server
    handler.ranges = False
    data = wheel({release_cache.MEMBER: good_text.encode()})
    serve(handler, {WHEEL: data})
    assert release_fetch.fetch_release(VERSION).read_text() == good_text
    record = release_cache.read_record(VERSION)
    assert record is not None and record.obtained == "download"
    assert record.wheel_sha256 == hashlib.sha256(data).hexdigest()
    assert "no range read (HTTP 200 to a range request)" in capsys.readouterr().err


def test_full_download_can_be_forced(server, good_text, monkeypatch):
    _, handler = server
    serve(handler, {WHEEL: wheel({release_cache.MEMBER: good_text.encode()})})
    monkeypatch.setenv(FULL_DOWNLOAD_ENV, "1")
    release_fetch.fetch_release(VERSION)
    assert release_cache.read_record(VERSION).obtained == "download"  # type: ignore[union-attr]
    assert all(h is None for _, h in handler.seen)


def test_member_that_disagrees_with_the_record_is_refused(server, good_text):
    _, handler = server
    member = good_text.encode()
    data = wheel({release_cache.MEMBER: member}, record={release_cache.MEMBER: member + b"#"})
    serve(handler, {WHEEL: data})
    with pytest.raises(fetch_errors.FetchError, match="the wheel's RECORD lists"):
        release_fetch.fetch_release(VERSION)
    assert not release_cache.cached_path(VERSION).exists()


def test_range_read_of_a_wheel_without_the_module(server):
    _, handler = server
    serve(handler, {WHEEL: wheel({"vllm/other.py": b"x = 1\n"})})
    with pytest.raises(fetch_errors.ModuleMissing, match="predates the module"):
        release_fetch.fetch_release(VERSION)


def test_list_releases_sorts_versions(server):
    _, handler = server
    names = ["0.10.0", "0.9.2", "0.10.1.1", "0.10.1", "0.2.1.post1", "0.2.1", "0.33.0rc1"]
    serve(handler, {f"vllm-{v}.tar.gz": b"" for v in names})
    assert list(package_index.list_releases()) == [
        "0.2.1",
        "0.2.1.post1",
        "0.9.2",
        "0.10.0",
        "0.10.1",
        "0.10.1.1",
        "0.33.0rc1",
    ]


def test_version_key_orders_prereleases_before_the_release():
    key = versions.version_key
    assert key("0.33.0rc1") < key("0.33.0") < key("0.33.0.post1") < key("0.33.1")
    assert key("0.9.0") < key("0.9.0.1") < key("0.10.0")
    assert key("1.0") == key("1.0.0")


@pytest.mark.network
def test_real_range_read_matches_the_full_download(tmp_path, monkeypatch):
    """Needs the network: PyPI answers ranges, and 0.9.2's member read by ranges (into an
    empty cache of its own) has the sha256 of the file extracted from the whole wheel
    (recorded in the project's notes: ab20eb7d...)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(FULL_DOWNLOAD_ENV, raising=False)
    path = release_fetch.fetch_release("0.9.2")
    record = release_cache.read_record("0.9.2")
    assert record is not None and record.obtained == "range"
    assert release_cache.sha256_file(path).startswith("ab20eb7d03a6")
