"""`make diffs`: the releases whose class text the history's step diffs show, fetched
without a timing job (issue 26.2: on a fresh machine every diff read "release not cached
here; `make history` fetches it", a 17-minute timing job). Fast: the fetch is a stand-in."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from benchutil import run_make

from kvqueue import __main__ as cli
from kvqueue.history import history_collect, history_diffs
from kvqueue.report import build
from kvqueue.sources import cache_paths
from kvqueue.sources.fetch_errors import IndexUnreachable

RAW = Path(__file__).resolve().parent.parent / "data" / "raw"


#: A committed history run, whose run.json the fixtures copy with other versions.
_HISTORY_JSON = next(
    p for p in sorted(RAW.glob("*/*/run.json")) if '"question": "history"' in p.read_text()
)


def _history_run(raw: Path, name: str, versions: list[dict]) -> None:
    """A run folder whose run.json is a committed history run's with ``versions``."""
    meta = json.loads(_HISTORY_JSON.read_text())
    meta["history"]["versions"] = versions
    run = raw / "h" / name
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(meta))


def test_the_committed_history_names_one_release_per_distinct_version() -> None:
    releases = history_collect.history_releases(RAW)
    pools = history_collect.history_releases(RAW, pool=True)
    # The queue's history (17 versions, 0.6.4 to 0.32.0), the BlockPool's (29 versions,
    # 0.9.1 to 0.34.0, in the counts history that starts at the 0.9.x pools) and the
    # manager's (36 versions, 0.9.0.1 to 0.34.0): one release per version, each once.
    assert len(pools) == 29 and pools[0] == "0.9.1" and pools[-1] == "0.34.0"
    assert set(pools) <= set(releases) and releases[0] == "0.6.4"
    assert "0.9.0" in releases  # the manager floor's version (0.9.0 and 0.9.0.1)
    assert len(releases) == len(set(releases)) == 40


def test_only_missing_releases_are_fetched_and_an_offline_fetch_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    raw = tmp_path / "raw"
    _history_run(
        raw,
        "r1",
        [{"label": "vllm==0.2.0", "releases": ["0.2.0", "0.2.1"]},
         {"label": "mine", "releases": []},
         {"label": "vllm==0.1.0", "releases": ["0.1.0"]}],
    )  # fmt: skip
    fetched: list[str] = []

    def fake_fetch(version: str) -> Path:
        fetched.append(version)
        path = cache_paths.cached_path(version)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("class KVCacheBlock:\n    pass\n")
        return path

    monkeypatch.setattr(history_collect, "fetch_release", fake_fetch)
    assert cli.main(["diffs", "--raw-dir", str(raw)]) == 0
    assert fetched == ["0.1.0", "0.2.0"]  # oldest first, one per version, not "mine"
    assert "2 releases of the history runs" in capsys.readouterr().out
    assert cli.main(["diffs", "--raw-dir", str(raw)]) == 0
    assert fetched == ["0.1.0", "0.2.0"]  # cached: nothing fetched again

    def offline(version: str) -> Path:
        raise IndexUnreachable(f"vLLM {version}: the package index is unreachable")

    _history_run(raw, "r2", [{"label": "vllm==0.3.0", "releases": ["0.3.0"]}])
    monkeypatch.setattr(history_collect, "fetch_release", offline)
    capsys.readouterr()
    assert cli.main(["diffs", "--raw-dir", str(raw)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("make diffs: vLLM 0.3.0: the package index is unreachable")
    assert "package index that pip is configured with" in line


# ------------------------------------------------------------- make report fetches (issue 36.8)


@pytest.fixture
def report_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``build.report`` stubbed (the report's own build is tested elsewhere; here only
    what runs before it) and an empty release cache. Returns the calls' raw folders."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls: list[str] = []

    def report(*, raw_dir: Path, **_kw: object) -> int:
        calls.append(str(raw_dir))
        return 0

    monkeypatch.setattr(build, "report", report)
    return calls


def test_report_fetches_the_releases_its_step_diffs_need_before_the_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report_stub: list[str],
) -> None:
    """A fresh clone's history.md read "not cached here" for every step diff."""
    raw = tmp_path / "raw"
    _history_run(raw, "r1", [{"label": "vllm==0.1.0", "releases": ["0.1.0"]},
                             {"label": "vllm==0.2.0", "releases": ["0.2.0"]}])  # fmt: skip
    fetched: list[str] = []
    builds_before: list[int] = []

    def fake_fetch(version: str) -> Path:
        builds_before.append(len(report_stub))
        fetched.append(version)
        path = cache_paths.cached_path(version)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"class FreeKVCacheBlockQueue:\n    v = {version!r}\n")
        return path

    monkeypatch.setattr(history_collect, "fetch_release", fake_fetch)
    args = ["report", "--raw-dir", str(raw), "--out", str(tmp_path / "out")]
    assert cli.main(args) == 0 and fetched == []  # python -m kvqueue report: no fetch
    assert cli.main([*args, "--fetch-diffs"]) == 0
    assert fetched == ["0.1.0", "0.2.0"] and report_stub == [str(raw)] * 2
    assert builds_before == [1, 1]  # fetched before its own build
    out = capsys.readouterr().out.splitlines()
    assert out == ["report: diffs: 0.1.0 cached (1/2)", "report: diffs: 0.2.0 cached (2/2)"]
    diff = history_diffs.step_diff(["0.1.0"], ["0.2.0"])
    assert history_diffs.NOT_CACHED not in diff and "+    v = '0.2.0'" in diff
    assert cli.main([*args, "--fetch-diffs"]) == 0  # all cached: silent, nothing fetched
    assert fetched == ["0.1.0", "0.2.0"] and capsys.readouterr().out == ""


def test_report_with_the_index_unreachable_says_so_once_and_builds(
    report_stub: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = Path(os.environ["XDG_CACHE_HOME"]).parent / "raw"  # beside report_stub's cache
    _history_run(raw, "r1", [{"label": "vllm==0.3.0", "releases": ["0.3.0"]}])

    def offline(version: str) -> Path:
        raise IndexUnreachable(f"vLLM {version}: the package index is unreachable")

    monkeypatch.setattr(history_collect, "fetch_release", offline)
    assert cli.main(["report", "--raw-dir", str(raw), "--fetch-diffs"]) == 0
    assert report_stub == [str(raw)]
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "kvqueue report: step diffs not fetched: vLLM 0.3.0: the package index is "
        "unreachable; they read 'not cached here' (`make diffs` fetches them when the "
        "index is reachable)\n"
    )
    assert history_diffs.NOT_CACHED in history_diffs.step_diff(["0.2.0"], ["0.3.0"])


def test_make_report_passes_fetch_diffs() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    proc = run_make("-n", "report")
    assert proc.returncode == 0, proc.stderr
    assert "kvqueue report --from-env" in proc.stdout and "--fetch-diffs" in proc.stdout
