"""The pool's release history (``make history SUBJECT=pool``): versions keyed by the code
a pool runs, releases before the pool loader's first named, and the two subjects'
histories kept apart in the analysis and the report.

The releases are our own fixture pool (``tests/pools/``) under release numbers: the
release fetch is replaced by a function that hands out copies of it, some edited.
"""

from __future__ import annotations

import io
from pathlib import Path

import poolutil
import pytest

from kvqueue.errors import BenchInputError
from kvqueue.history import history_analysis, history_collect, history_present
from kvqueue.params import history_params
from kvqueue.report import questions
from kvqueue.sources import module_graph, pool_loader
from kvqueue.sources.release_cache import MEMBER, METRICS_MEMBER, POOL_MEMBER

POOLS = Path(__file__).parent / "pools"


@pytest.fixture
def pool_releases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[str]]:
    """Releases 0.8.5 (before the pool loader's first), 1.0.0, 1.1.0 (kv_cache_utils.py
    changed outside what the pool runs: the same version) and 2.0.0 (block_pool.py
    changed: a new version)."""
    pool_text = (POOLS / "block_pool.py").read_text()
    utils_text = (POOLS / "kv_cache_utils.py").read_text() + "\n\n" + poolutil.queue_text()
    texts = {
        "1.0.0": (pool_text, utils_text),
        "1.1.0": (
            pool_text,
            utils_text + "\n\ndef helper_the_pool_never_runs() -> int:\n    return 1\n",
        ),
        "2.0.0": (
            pool_text.replace("class BlockPool:", "class BlockPool:  # 2.0.0", 1),
            utils_text,
        ),
    }
    probed: list[str] = []

    def fetch(
        version: str, members: object = None, *_: object, **__: object
    ) -> dict[str, Path | None]:
        if isinstance(members, tuple) and POOL_MEMBER not in members:
            return {m: None for m in members}  # the helpers: none in these releases
        probed.append(version)
        folder = tmp_path / version
        folder.mkdir(exist_ok=True)
        pool, utils = texts[version]
        (folder / "block_pool.py").write_text(pool)
        (folder / "kv_cache_utils.py").write_text(utils)
        return {
            POOL_MEMBER: folder / "block_pool.py",
            MEMBER: folder / "kv_cache_utils.py",
            METRICS_MEMBER: None,
        }

    monkeypatch.setattr(history_collect, "fetch_members", fetch)
    monkeypatch.setattr(pool_loader, "fetch_members", fetch)
    monkeypatch.setattr(module_graph, "fetch_members", fetch)
    listing = {v: [] for v in ["0.8.5", *texts]}
    return {"listing": listing, "probed": probed}  # type: ignore[dict-item]


def test_pool_versions_are_the_code_the_pool_runs(pool_releases: dict) -> None:
    out = io.StringIO()
    found = history_collect.plan(
        None, listing=pool_releases["listing"], progress=out, subject="pool"
    )
    # 1.1.0 changed kv_cache_utils.py only where the pool does not run: one version.
    assert [v.releases for v in found.versions] == [["2.0.0"], ["1.1.0", "1.0.0"]]
    assert [v.label for v in found.versions] == ["pool:vllm==2.0.0", "pool:vllm==1.1.0"]
    assert [v["label"] for v in found.record()["versions"]] == [
        "pool:vllm==2.0.0",
        "pool:vllm==1.1.0",
    ]
    # Releases before the pool loader's first are named, never probed.
    assert "0.8.5" not in pool_releases["probed"]
    assert found.skipped == [
        {
            "release": "0.8.5 .. 0.8.5",
            "reason": f"not probed: older than {pool_loader.FIRST_POOL_RELEASE}, the first "
            "release the pool loader reads",
        }
    ]
    assert "history: version 1/2: pool:vllm==2.0.0 (releases 2.0.0; pool code" in out.getvalue()


def test_a_given_release_before_the_pool_loader_is_refused(pool_releases: dict) -> None:
    with pytest.raises(
        BenchInputError, match=r"^vllm==0\.8\.5: the pool loader reads releases from 0\.9\.1 on$"
    ):
        history_collect.plan(
            ["2.0.0", "0.8.5"],
            listing=pool_releases["listing"],
            progress=io.StringIO(),
            subject="pool",
        )


def _step(from_version: str, p: float) -> dict[str, object]:
    return {
        "headline": True,
        "run_id": "r",
        "from_version": from_version,
        "p_value": p,
        "excludes_0": True,
    }


def test_the_queue_history_and_the_pool_history_are_two_false_discovery_families() -> None:
    """One queue step at p = 0.03 is a discovery of its own answer; 20 pool steps at
    p = 0.5 must not raise its threshold (in one family it would be 0.05 / 21)."""
    rows = [_step("vllm==1.0.0", 0.03)] + [_step("pool:vllm==1.0.0", 0.5) for _ in range(20)]
    kept = history_analysis.discoveries(rows, 0.05)
    assert kept[0]["significant"]
    assert not any(r["significant"] for r in kept[1:])


def test_a_pool_history_is_its_own_question() -> None:
    assert questions._history_title("pool:vllm==0.34.0") == (
        "history-pool",
        "BlockPool release history",
    )
    assert questions._history_title("vllm==0.34.0") == ("history", "Release history")


def test_headline_runs_are_per_subject() -> None:
    """A queue history and a pool history of one host x interpreter are both headline."""

    class Run:
        def __init__(self, run_id: str, subject: str, started: str) -> None:
            self.host, self.interpreter, self.run_id = "h", "CPython 3.11.7", run_id
            self.meta = {"parameters": {"subject": subject}, "started_at": started}

    runs = [Run("q1", "queue", "1"), Run("q2", "queue", "2"), Run("p1", "pool", "3")]
    assert history_analysis._headline_ids(runs) == {"q2", "p1"}  # type: ignore[arg-type]


def test_of_subject_splits_every_history_table() -> None:
    import pandas as pd

    versions = pd.DataFrame({"version": ["vllm==1.0.0", "pool:vllm==1.0.0"]})
    steps = pd.DataFrame({"from_version": ["vllm==1.0.0", "pool:vllm==1.0.0"]})
    assert list(history_present.of_subject(versions, "pool")["version"]) == ["pool:vllm==1.0.0"]
    assert list(history_present.of_subject(steps, "queue")["from_version"]) == ["vllm==1.0.0"]


def test_a_pool_history_takes_the_pool_defaults_and_its_recorded_block_mode() -> None:
    """The Reproduce block writes every recorded field, BLOCK_MODE=shared included: it
    must parse back; a block mode a pool cannot run is refused in one line."""
    params = history_params.from_text({"host": "h", "subject": "pool", "block_mode": "shared"})
    assert params.cases == history_params.POOL_HISTORY_DEFAULTS["cases"]
    assert params.pools == (100_000,)
    with pytest.raises(BenchInputError, match="block_source and block_mode are the queue's"):
        history_params.from_text({"host": "h", "subject": "pool", "block_mode": "own"})
