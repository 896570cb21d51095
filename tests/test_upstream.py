"""Fetching ``kv_cache_utils.py`` of a vLLM release (kvqueue.upstream), and the real thing.

Offline tests replace pip with a stand-in (``upstream.subprocess``) that writes a small
wheel holding the hand-written fixture queue, so nothing here contains vLLM source.
Tests marked ``network`` use the real package index and the real cache.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest

from kvqueue import loader, upstream


class FakePip:
    """Stand-in for upstream's ``subprocess`` module: records the pip command and acts.

    ``wheel`` maps wheel member names to texts (None: download nothing); ``output`` and
    ``returncode`` are what pip "prints" and returns.
    """

    def __init__(self, wheel=None, output="", returncode=0):
        self.wheel, self.output, self.returncode = wheel, output, returncode
        self.calls = []

    def run(self, cmd, **kwargs):
        self.calls.append(cmd)
        if self.wheel is not None:
            dest = Path(cmd[cmd.index("-d") + 1])
            version = next(a for a in cmd if a.startswith("vllm==")).split("==")[1]
            with zipfile.ZipFile(
                dest / f"vllm-{version}-cp38-abi3-manylinux1_x86_64.whl", "w"
            ) as z:
                for name, text in self.wheel.items():
                    z.writestr(name, text)
        return types.SimpleNamespace(returncode=self.returncode, stdout="", stderr=self.output)


@pytest.fixture
def fake_pip(monkeypatch):
    def install(**kwargs) -> FakePip:
        pip = FakePip(**kwargs)
        monkeypatch.setattr(upstream, "subprocess", pip)
        return pip

    return install


def no_pip(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pip must not run")

    monkeypatch.setattr(upstream, "subprocess", types.SimpleNamespace(run=refuse))


# ------------------------------------------------------------------------ cache


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert upstream.cache_dir() == tmp_path / "kvqueue"
    assert (
        upstream.cached_path("0.32.0") == tmp_path / "kvqueue" / "vllm-0.32.0" / "kv_cache_utils.py"
    )


@pytest.mark.parametrize("xdg", [None, ""])
def test_cache_dir_defaults_to_home(monkeypatch, tmp_path, xdg):
    monkeypatch.setenv("HOME", str(tmp_path))
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert upstream.cache_dir() == tmp_path / ".cache" / "kvqueue"


# ---------------------------------------------------------------- fetch (offline)


def test_fetch_extracts_one_member_into_the_cache(empty_cache, fake_pip, good_text):
    pip = fake_pip(wheel={upstream.MEMBER: good_text, "vllm/other.py": "x = 1\n"})
    path = upstream.fetch_release("9.9.9")
    assert path == upstream.cached_path("9.9.9")
    assert path.read_text() == good_text
    # Only the one file is kept: no wheel, no temporary folder, no partial file.
    assert sorted(p.name for p in path.parent.iterdir()) == ["kv_cache_utils.py"]
    (cmd,) = pip.calls
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "vllm==9.9.9" in cmd
    assert {"--no-deps", "--only-binary", ":all:"} <= set(cmd)
    assert cmd.count("--platform") >= 1
    # The second use reads the cache and never calls pip.
    assert upstream.fetch_release("9.9.9") == path
    assert len(pip.calls) == 1


def test_fetch_uses_the_given_interpreter(empty_cache, fake_pip, good_text):
    pip = fake_pip(wheel={upstream.MEMBER: good_text})
    upstream.fetch_release("9.9.9", python="/opt/python3.12/bin/python3")
    assert pip.calls[0][0] == "/opt/python3.12/bin/python3"


def test_cached_release_needs_no_pip(empty_cache, monkeypatch, good_text):
    cached = upstream.cached_path("9.9.9")
    cached.parent.mkdir(parents=True)
    cached.write_text(good_text)
    no_pip(monkeypatch)
    assert upstream.fetch_release("9.9.9") == cached
    assert upstream.sha256_file(cached) == loader.read_source("vllm==9.9.9").file_sha256


def test_wheel_without_the_module(empty_cache, fake_pip):
    fake_pip(wheel={"vllm/__init__.py": ""})
    with pytest.raises(upstream.FetchError, match=re.escape(f"has no {upstream.MEMBER}")):
        upstream.fetch_release("0.1.0")
    target = upstream.cached_path("0.1.0")
    assert not target.exists()
    assert not target.with_suffix(".part").exists()


def test_pip_downloads_nothing(empty_cache, fake_pip):
    fake_pip()
    with pytest.raises(
        upstream.FetchError, match=re.escape("pip downloaded no wheel for vllm==9.9.9")
    ):
        upstream.fetch_release("9.9.9")


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "ERROR: Could not find a version that satisfies the requirement vllm==9.9.9 "
            "(from versions: 0.1.0, 0.2.0)\n"
            "ERROR: No matching distribution found for vllm==9.9.9\n",
            "vLLM release 9.9.9 does not exist on the package index",
        ),
        (
            "WARNING: Retrying ... after connection broken by 'NewConnectionError(...)'\n"
            "ERROR: Max retries exceeded with url: /simple/vllm/\n",
            "cannot reach the package index to fetch vllm==9.9.9, and it is not cached in",
        ),
        ("/usr/bin/python3: No module named pip\n", "pip is not available"),
        (
            "ERROR: something odd\n\nERROR: disk is full\n  \n",
            "pip failed to fetch vllm==9.9.9: ERROR: disk is full",
        ),
        ("", "pip failed to fetch vllm==9.9.9: unknown error"),
    ],
)
def test_pip_failures_become_one_line(empty_cache, fake_pip, output, expected):
    fake_pip(output=output, returncode=1)
    with pytest.raises(upstream.FetchError) as info:
        upstream.fetch_release("9.9.9")
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
    assert not upstream.cached_path("9.9.9").exists()


def test_version_with_trailing_newline_is_malformed(empty_cache, monkeypatch):
    no_pip(monkeypatch)
    with pytest.raises(upstream.FetchError, match="is not a vLLM version number"):
        upstream.fetch_release("0.32.0\n")


def test_missing_interpreter_is_a_fetch_error(empty_cache, tmp_path):
    with pytest.raises(upstream.FetchError):
        upstream.fetch_release("9.9.9", python=str(tmp_path / "no-such-python"))


def test_unreachable_index_with_real_pip(empty_cache, monkeypatch):
    """Real pip against a closed local port: the offline case, without any network."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        port = closed.getsockname()[1]
        for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple/")
        monkeypatch.setenv("PIP_RETRIES", "0")
        monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "5")
        with pytest.raises(upstream.FetchError) as info:
            upstream.fetch_release("0.32.7")
    assert "cannot reach the package index" in str(info.value)


# -------------------------------------------------------------- the real releases


REAL = ["vllm==0.31.0", "vllm==0.32.0", "kvqueue"]


@pytest.mark.network
def test_validate_real_releases_end_to_end(run_cli):
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
def test_real_release_is_cached_and_reused(monkeypatch):
    path = upstream.fetch_release("0.32.0")  # downloads once if this host has no cache
    assert path == upstream.cached_path("0.32.0")
    no_pip(monkeypatch)
    start = time.perf_counter()
    assert upstream.fetch_release("0.32.0") == path
    assert time.perf_counter() - start < 0.5
    src = loader.read_source("vllm==0.32.0")
    assert src.vllm_version == "0.32.0"
    assert src.path == str(path)
    assert src.file_sha256 == upstream.sha256_file(path)
    assert src.text.startswith("class FreeKVCacheBlockQueue")
    block = loader.read_source("vllm==0.32.0", loader.BLOCK_CLASS)
    assert block.text.startswith("@dataclass")


@pytest.mark.network
def test_real_unknown_release(empty_cache):
    with pytest.raises(upstream.FetchError) as info:
        upstream.fetch_release("0.0.999")
    assert str(info.value) == "vLLM release 0.0.999 does not exist on the package index"
    assert not upstream.cached_path("0.0.999").exists()


@pytest.mark.network
def test_real_unknown_release_via_cli(run_cli, tmp_path):
    proc = run_cli("validate", "vllm==0.0.999", "kvqueue", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        "kvqueue validate: vLLM release 0.0.999 does not exist on the package index"
    )


def test_subprocess_module_is_restored():
    """Guard: the stand-ins above never leak into later tests."""
    assert upstream.subprocess is subprocess
