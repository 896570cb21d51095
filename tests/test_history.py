"""The release history's plan (kvqueue.history): which releases, which distinct versions,
what is skipped and why, and the bench parameters of a history run.

The releases are stand-ins: ``history._probe`` is replaced by a function that loads
hand-written classes (``tests/queues``) for made-up release numbers, so nothing here
needs the network or contains vLLM text.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from kvqueue import history, loader, params, upstream
from kvqueue.errors import BenchInputError

QUEUES = Path(__file__).resolve().parent / "queues"
GOOD = QUEUES / "good.py"
HEADTAIL = QUEUES / "headtail.py"

# Made-up releases: two with good.py, one with a different block class (a copy of
# good.py with a comment inside its KVCacheBlock), two head-tail, two that predate it.
_SOURCE = {
    "3.2.0": "good",
    "3.1.0": "good",
    "3.0.0": "good-other-block",
    "2.1.0": "headtail",
    "2.0.0": "headtail",
}
_OLD = ["1.9.0", "1.8.0"]


@pytest.fixture
def releases(monkeypatch, tmp_path):
    other = tmp_path / "other_block.py"
    other.write_text(
        GOOD.read_text().replace(
            "class KVCacheBlock:\n", "class KVCacheBlock:\n    # another block class text\n", 1
        )
    )
    paths = {"good": GOOD, "good-other-block": other, "headtail": HEADTAIL}
    probed: list[str] = []

    def probe(release: str, files: object) -> loader.Variant:
        probed.append(release)
        if release in _OLD:
            raise upstream.ModuleMissing(f"vLLM release {release} has no {upstream.MEMBER}")
        if release not in _SOURCE:
            raise upstream.ReleaseNotFound(f"vLLM release {release} does not exist")
        (variant,) = loader.load_variants([str(paths[_SOURCE[release]])], block_mode="own")
        return variant

    monkeypatch.setattr(history, "_probe", probe)
    listing = {v: [] for v in [*_SOURCE, *_OLD, "1.0.0", "3.3.0rc1"]}
    return listing, probed


def test_plan_groups_releases_into_distinct_versions(releases):
    listing, probed = releases
    out = io.StringIO()
    found = history.plan(None, listing=listing, progress=out)
    assert [v.source for v in found.versions] == ["vllm==3.2.0", "vllm==3.0.0", "vllm==2.1.0"]
    assert [v.releases for v in found.versions] == [
        ["3.2.0", "3.1.0"],
        ["3.0.0"],
        ["2.1.0", "2.0.0"],
    ]
    # 3.0.0 differs from 3.1.0 by its block class text only: a version of its own.
    assert found.versions[0].queue_sha256 == found.versions[1].queue_sha256
    assert found.versions[0].block_sha256 != found.versions[1].block_sha256
    old = found.versions[2]
    assert old.adapter == "popleft-loop" and old.structure == "head-tail"
    assert old.missing == ("prepend_n", "iter_blocks_after")
    # The pre-release is never probed; probing stops at the first release without the
    # module, and the older ones are named as not probed.
    assert probed == ["3.2.0", "3.1.0", "3.0.0", "2.1.0", "2.0.0", "1.9.0"]
    assert found.skipped[0]["release"] == "1.9.0"
    assert found.skipped[1] == {
        "release": "1.0.0 .. 1.8.0",
        "reason": f"not probed: older than 1.9.0, which predates {upstream.MEMBER}",
    }
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("history: version ") for line in lines) == 3
    assert "version 3/3: vllm==2.1.0 (releases 2.0.0, 2.1.0;" in out.getvalue()


def test_plan_record_is_json_ready(releases):
    import json

    listing, _ = releases
    record = history.plan(None, listing=listing, progress=io.StringIO()).record()
    assert json.loads(json.dumps(record)) == record
    assert record["versions"][2]["releases"] == ["2.0.0", "2.1.0"]
    assert record["versions"][2]["first_release"] == "2.0.0"
    assert record["releases_listed"][0] == "1.0.0"
    assert record["pairing"] == history.PAIRING


def test_given_releases_are_probed_as_given(releases):
    listing, probed = releases
    found = history.plan(["3.1.0", "2.0.0", "1.9.0"], listing=listing, progress=io.StringIO())
    assert [v.releases for v in found.versions] == [["3.1.0"], ["2.0.0"]]
    assert found.skipped == [
        {"release": "1.9.0", "reason": f"vLLM release 1.9.0 has no {upstream.MEMBER}"}
    ]
    assert probed == ["3.1.0", "2.0.0", "1.9.0"]


def test_unknown_release_is_one_line(releases):
    listing, _ = releases
    with pytest.raises(
        BenchInputError, match=r"^vllm==4\.0\.0: vLLM release 4\.0\.0 does not exist$"
    ):
        history.plan(["4.0.0", "3.2.0"], listing=listing, progress=io.StringIO())


def test_one_version_is_not_a_history(releases):
    listing, _ = releases
    with pytest.raises(BenchInputError, match="at least two distinct versions"):
        history.plan(["3.2.0", "3.1.0"], listing=listing, progress=io.StringIO())


def test_releases_text():
    assert history.releases_from_text("") is None
    assert history.releases_from_text(" 0.9.2 vllm==0.10.0 ") == ["0.9.2", "0.10.0"]
    with pytest.raises(BenchInputError, match="not a vLLM version number"):
        history.releases_from_text("0.9.2 latest")


def test_history_params_take_the_history_defaults():
    texts = {f.name: None for f in params.bench_fields()}
    texts["host"] = "box"
    bench = history.history_params(texts)
    assert bench.cases == ("alloc1", "alloc8", "mix", "remove")
    assert bench.pools == (100_000,)
    assert bench.block_mode == "own"
    assert bench.confirm_processes == 0
    texts["pools"] = "2048"
    assert history.history_params(texts).pools == (2048,)


@pytest.mark.parametrize("name", ["variants", "aa", "block_source"])
def test_history_params_refuse_what_the_history_chooses(name):
    texts = {f.name: None for f in params.bench_fields()}
    texts.update(host="box", **{name: "1"})
    with pytest.raises(BenchInputError, match="chosen by make history"):
        history.history_params(texts)
