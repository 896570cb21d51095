"""Issue 27: the pool subject through the bench's route: its cases keep the pool
consistent at any length, SUBJECT=pool is checked and labelled, and (slow) a pool bench
and its report, and quick by instructions, on our own fixture pool and on releases.

Fast tests use the fixture pool of ``tests/pools`` (our own code, shaped like the
documented ``BlockPool`` API); the slow ones fetch vLLM releases into the cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from poolutil import write_fixture_pool

from kvqueue import schema
from kvqueue.errors import BenchInputError
from kvqueue.measure import interpreter_checks, runner
from kvqueue.params import bench_params
from kvqueue.sources import pool_loader
from kvqueue.subjects import pool_api, pool_cases

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fixture_pool(tmp_path: Path) -> str:
    return str(write_fixture_pool(tmp_path / "pool"))


def _api_and_pool(source: str, size: int) -> tuple[pool_api.PoolAPI, object]:
    variant = pool_loader.load_pool(source)
    api = pool_api.pool_api(variant.pool_cls, variant.utils)
    return api, api.new_pool(size)


def _free_ids(pool: object) -> list[int]:
    q = pool.free_block_queue  # type: ignore[attr-defined]
    out, node = [], q.fake_free_list_head.next_free_block
    while node is not q.fake_free_list_tail:
        out.append(node.block_id)
        node = node.next_free_block
    return out


@pytest.mark.parametrize("case", [c for c in schema.POOL_CASES if c.startswith("loop")])
def test_a_loop_round_gives_every_block_back(fixture_pool: str, case: str) -> None:
    api, pool = _api_and_pool(fixture_pool, 2048)
    run = pool_cases.make_runner(case, api, pool, seed=1)
    assert run(25) > 0
    assert pool.get_num_free_blocks() == 2047  # type: ignore[attr-defined]
    assert all(b.ref_cnt == 0 for b in pool.blocks[1:])  # type: ignore[attr-defined]


def test_churn_hits_touches_and_evicts_and_stays_consistent(fixture_pool: str) -> None:
    """The churn case exercises what it claims: prefix hits, touch of queued blocks,
    eviction of cached blocks, over many passes of its script; after any number of
    requests the pool holds exactly its live requests' blocks."""
    api, pool = _api_and_pool(fixture_pool, 2048)
    script = pool_cases.churn_script(2048, seed=1)
    distinct = {label for labels, _ in script for label in labels}
    assert len(distinct) > 2048  # more hashes than blocks: the cache must evict
    calls = {"touch": 0, "hits": 0}
    touch, lookup = pool.touch, pool.get_cached_block  # type: ignore[attr-defined]

    def counting_touch(blocks: object) -> None:
        calls["touch"] += 1
        touch(blocks)

    def counting_lookup(block_hash: object, groups: object) -> object:
        found = lookup(block_hash, groups)
        calls["hits"] += bool(found)
        return found

    pool.touch, pool.get_cached_block = counting_touch, counting_lookup  # type: ignore[attr-defined]
    run = pool_cases.make_runner("churn", api, pool, seed=1)
    run(3 * len(script))
    assert calls["touch"] > 0 and calls["hits"] > 0
    held = [b for b in pool.blocks[1:] if b.ref_cnt > 0]  # type: ignore[attr-defined]
    assert 0 < len(held) <= pool_cases.CONCURRENCY * pool_cases.MAX_BLOCKS
    assert len(_free_ids(pool)) == pool.get_num_free_blocks() == 2047 - len(held)  # type: ignore[attr-defined]
    cached = api.hash_entries(pool)
    assert len(cached) < len(distinct)  # evicted: not every hash ever cached is still there


def test_churn_needs_room_for_its_live_requests(fixture_pool: str) -> None:
    api, pool = _api_and_pool(fixture_pool, 512)
    with pytest.raises(ValueError, match="at least 577 blocks"):
        pool_cases.make_runner("churn", api, pool, seed=1)


def test_subject_pool_takes_the_pool_cases_and_labels() -> None:
    p = bench_params.make_params(
        host="h", variants=["vllm==0.31.0", "vllm==0.33.0"], subject="pool"
    )
    assert p.cases == schema.POOL_CASES and p.confirm_cases == schema.POOL_CONFIRM_CASES
    assert p.labels == ["pool:vllm==0.31.0", "pool:vllm==0.33.0"]
    queue = bench_params.make_params(host="h", variants=["vllm==0.31.0", "vllm==0.33.0"])
    assert queue.cases == schema.CASES and queue.labels == ["vllm==0.31.0", "vllm==0.33.0"]


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"subject": "pools"}, "subject must be one of queue | pool"),
        ({"subject": "pool", "cases": ["alloc1"]}, "unknown case(s) alloc1 of subject pool"),
        ({"cases": ["loop10"]}, "unknown case(s) loop10 of subject queue"),
        ({"subject": "pool", "block_mode": "own"}, "a pool uses its own"),
    ],
)
def test_bad_subject_input_is_one_line(given: dict, words: str) -> None:
    with pytest.raises(BenchInputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        bench_params.make_params(host="h", variants=["a.py", "b.py"], **given)


def test_a_pool_too_small_for_a_case_and_an_unloadable_pool_are_refused(
    fixture_pool: str, tmp_path: Path
) -> None:
    # Refused with the values, before any source is loaded or anything written.
    with pytest.raises(
        BenchInputError, match=r"case loop1000 needs pools of at least 1,001 blocks \(N = 1,000\)"
    ):
        bench_params.make_params(
            host="h",
            variants=[f"a={fixture_pool}", f"b={fixture_pool}"],
            subject="pool",
            pools=[512],
        )
    broken = write_fixture_pool(tmp_path / "broken", pool_text="import torch\n")
    bad = bench_params.make_params(host="h", variants=[fixture_pool, str(broken)], subject="pool")
    with pytest.raises(BenchInputError, match=f"pool variant '{broken}': "):
        interpreter_checks.check_sources(bad)


def test_a_pool_run_is_sized_for_its_own_comparisons_on_its_cases() -> None:
    from kvqueue.stats import comparisons

    record = {"parameters": {"subject": "pool", "cases": ["loop100", "churn"]}}
    pairs, cases = runner.bench_sizing_targets(record)
    assert cases == ("loop100", "churn")
    # The pools' default pairs where a run has them, else every candidate vs its baseline.
    mine = comparisons.comparisons_for_run(["pool:a", "pool:b"], "pool:a", (), pairs)
    assert mine == [("pool:b", "pool:a", "pair")]
    labels = ["pool:vllm==0.31.0", "pool:vllm==0.33.0", "pool:vllm==0.33.0+queue=kvqueue"]
    found = comparisons.comparisons_for_run(labels, labels[0], (), pairs)
    assert [c[:2] for c in found] == [(labels[1], labels[0]), (labels[2], labels[1])]


@pytest.mark.slow
def test_a_pool_bench_is_gated_timed_and_reported_on_its_own(
    fixture_pool: str, tmp_path: Path
) -> None:
    """End to end on the fixture pool and the same pool running our queue: the pool gate
    runs first, the run records subject pool, and the report gives the pools their own
    writeup, shaped like the queue's, with the pool cases and the pool gate's wording."""
    raw, out = tmp_path / "raw", tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "bench", "--host", "h", "--raw-dir", str(raw),
         "--subject", "pool",
         "--variants", f"mine={fixture_pool} ours={fixture_pool}+queue=kvqueue",
         "--processes", "6", "--samples", "2", "--sample-ms", "2", "--pools", "2048",
         "--confirm-processes", "0", "--precision", "0", "--no-notebook"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "gate PASS pool:ours" in proc.stderr and "calls compared at 64 2048 blocks" in proc.stderr
    )
    (run_dir,) = (raw / "h").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["parameters"]["subject"] == "pool"
    assert [v["label"] for v in meta["variants"]] == ["pool:mine", "pool:ours"]
    assert meta["variants"][1]["queue_source"] == "kvqueue"
    proc = subprocess.run(
        [sys.executable, "-m", "kvqueue", "report", "--raw-dir", str(raw),
         "--processed-dir", str(tmp_path / "processed"), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = (out / "writeups" / "pool-ours-vs-pool-mine.md").read_text()
    for case in schema.POOL_CASES:
        assert f"| {case} |" in text
    assert "forest_pool.png" in text and "lockstep" in text and "only the queue code" not in text
    assert "vLLM's BlockPool" in (out / "report.html").read_text()
