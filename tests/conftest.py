"""Shared fixtures: the hand-written fixture queue, a CLI runner, temporary git repos.

Nothing here (nor in ``tests/queues/``) contains vLLM source text: the fixture queues are
written from the contract, i.e. the behaviour of ``kvqueue/subjects/our_queue.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kvqueue.sources.release_cache import MEMBER

# One bench lock per test session (inherited by the CLI subprocesses): the suite's tiny
# benches then never wait for, or refuse because of, a bench running elsewhere.
_LOCK_DIR = Path(tempfile.mkdtemp(prefix="kvq-lock-"))
os.environ["KVQUEUE_LOCK_FILE"] = str(_LOCK_DIR / "bench.lock")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's lock folder (163 of them had piled up in /tmp)."""
    shutil.rmtree(_LOCK_DIR, ignore_errors=True)


TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
GOOD_QUEUE = TESTS_DIR / "queues" / "good.py"


@pytest.fixture
def good_path() -> Path:
    """Path of the correct hand-written fixture queue (``tests/queues/good.py``)."""
    return GOOD_QUEUE


@pytest.fixture
def good_text() -> str:
    """Text of ``tests/queues/good.py``."""
    return GOOD_QUEUE.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def broken_queue(tmp_path_factory) -> Path:
    """Path of ``broken_queue.py``, good.py with one bug (see ``benchutil``)."""
    from benchutil import write_broken_queue

    return write_broken_queue(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture
def run_cli():
    """Run ``python -m kvqueue ARGS`` in a fresh interpreter; return the CompletedProcess."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kvqueue", *args],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            timeout=120,
        )

    return run


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=kvqueue tests",
            "-c",
            "user.email=t@example",
            "-c",
            "commit.gpgsign=false",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path):
    """Factory: a git repo whose commits hold given texts at ``MEMBER``.

    ``make(["text1", "text2"])`` commits each text in turn on branch ``main`` and returns
    ``(repo_path, [sha1, sha2])``; use ``git(repo, ...)`` from the returned helper for more.
    """

    def make(texts: list[str], name: str = "repo") -> tuple[Path, list[str]]:
        repo = tmp_path / name
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        member = repo / MEMBER
        member.parent.mkdir(parents=True)
        shas = []
        for number, text in enumerate(texts, start=1):
            member.write_text(text, encoding="utf-8")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-q", "-m", f"commit {number}")
            shas.append(_git(repo, "rev-parse", "HEAD"))
        return repo, shas

    make.git = _git
    return make


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``XDG_CACHE_HOME`` at an empty folder; return the kvqueue cache dir in it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "kvqueue"


#: Fixtures that start a fresh interpreter: every test using one is marked ``slow``.
_SUBPROCESS_FIXTURES = {"run_cli"}


@pytest.fixture(autouse=True)
def _no_inherited_budget_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without KVQUEUE_BUDGET_START: the bench and history commands set
    it in os.environ, and a command run in-process by an earlier test left it behind, so
    a later bench run counted its MAX_MINUTES from minutes ago (the runner test then
    planned 6 processes instead of 8, "capped by max_minutes", in a full suite)."""
    monkeypatch.delenv("KVQUEUE_BUDGET_START", raising=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests that start a subprocess through a shared fixture as ``slow``, so that
    ``make test-fast`` (``-m "not slow"``) leaves them out without a mark per test."""
    for item in items:
        if _SUBPROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
