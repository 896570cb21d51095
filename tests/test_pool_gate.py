"""The pool gate (kvqueue.gate.pool_gate) on our own fixture pool and broken variants of it.

Each broken pool is a subclass of the fixture pool (``tests/pools/block_pool.py``, our own
code) with one bug a reviewer could miss; the gate must refuse it in one line naming the
first call that differed or broke an invariant. Tests marked ``network`` read real
releases (fetched once into the cache).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from poolutil import write_fixture_pool

from kvqueue.gate import pool_gate
from kvqueue.sources.pool_loader import PoolVariant, load_pool

SIZES = (64, 512)


@pytest.fixture(scope="module")
def fixture_pool(tmp_path_factory: pytest.TempPathFactory) -> PoolVariant:
    return load_pool(str(write_fixture_pool(tmp_path_factory.mktemp("pool"))), label="base")


def variant(base: PoolVariant, label: str, **methods: object) -> PoolVariant:
    """The base pool with some methods replaced (a subclass), labelled."""
    broken = type("BlockPool", (base.pool_cls,), dict(methods))
    return dataclasses.replace(base, pool_cls=broken, label=label)


def refusal(base: PoolVariant, cand: PoolVariant, sizes: tuple[int, ...] = SIZES) -> str:
    result = pool_gate.pool_gate(base, cand, sizes=sizes)
    assert not result.ok
    assert result.error is not None and "\n" not in result.error
    return result.error


def test_the_fixture_pool_passes_against_itself(fixture_pool):
    result = pool_gate.pool_gate(fixture_pool, fixture_pool, sizes=SIZES)
    assert result.ok, result.error
    assert result.calls > 1000 and result.differences == () and result.exempt == ()


def test_a_free_path_that_forgets_the_null_block(fixture_pool):
    def free_blocks(self, ordered_blocks):
        first, last = [], []
        for block in ordered_blocks:
            if not block.is_null:
                block.ref_cnt -= 1
            if block.is_null or block.ref_cnt == 0:  # the null block is queued too
                (first if block.block_hash is None else last).append(block)
        self.free_block_queue.prepend_n(first)
        self.free_block_queue.append_n(last)

    error = refusal(fixture_pool, variant(fixture_pool, "null-freed", free_blocks=free_blocks))
    assert error.startswith("null-freed breaks an invariant after call ")
    assert " free_blocks(r" in error and "the null block is linked into the free queue" in error


def _touch_counting_null(self, blocks: list) -> None:
    """A touch that counts the null block too, never queued (vLLM 0.10.0's rule: the
    null block's ref_cnt rises with each touch and falls with each free)."""
    for block in blocks:
        if block.ref_cnt == 0 and not block.is_null:
            self.free_block_queue.remove(block)
        block.ref_cnt += 1


def _free_like_any_other(self, ordered_blocks):
    """The fixture's free path without its null-block check."""
    first, last = [], []
    for block in ordered_blocks:
        block.ref_cnt -= 1
        if block.ref_cnt == 0:
            (first if block.block_hash is None else last).append(block)
    self.free_block_queue.prepend_n(first)
    self.free_block_queue.append_n(last)


def test_a_free_path_that_queues_the_null_block_like_any_other(fixture_pool):
    """Issue 36.7. With a touch that counts the null block, a free path without the
    null-block check queues it when its count falls to 0. Touched null blocks alone
    rarely get there (every request holding one must end first: at 64 blocks, never in
    300 intents); the null blocks a sliding window leaves in a block table untouched,
    freed with the request as vLLM's callers do, bring it there within the first
    intents. (With the fixture's touch, which skips the null block, its count only
    falls from 0, and the same free path never queues it: nothing to refuse.)"""
    counting = variant(fixture_pool, "counting", touch=_touch_counting_null)
    assert pool_gate.pool_gate(fixture_pool, counting, sizes=(64,)).ok  # 0.10.0's rule
    broken = variant(
        fixture_pool, "null-queued", touch=_touch_counting_null, free_blocks=_free_like_any_other
    )
    error = refusal(fixture_pool, broken, sizes=(64,))
    assert error.startswith("null-queued breaks an invariant after call ")
    assert " free_blocks(r" in error and error.endswith(
        "(64 blocks, seed 20270): the null block is linked into the free queue"
    )


def test_a_free_path_that_needs_a_block_is_refused_at_a_window_slide(fixture_pool):
    """A sliding window that slides over nothing frees an empty list (vLLM's managers
    before 0.34 call free_blocks with whatever they removed)."""

    def free_blocks(self, ordered_blocks):
        blocks = list(ordered_blocks)
        assert blocks[0] is not None  # the bug: a block is assumed
        fixture_pool.pool_cls.free_blocks(self, blocks)

    error = refusal(fixture_pool, variant(fixture_pool, "needs-one", free_blocks=free_blocks))
    assert error.startswith("needs-one differs from base at call ")
    assert " slid out) " in error and "exception expected None got 'IndexError: " in error


def test_a_touch_that_double_counts(fixture_pool):
    def touch(self, blocks: list):
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            else:
                block.ref_cnt += 1  # a block already in use is counted twice
            block.ref_cnt += 1

    error = refusal(fixture_pool, variant(fixture_pool, "touch2", touch=touch))
    assert error.startswith("touch2 breaks an invariant after call ")
    assert " touch(r" in error and "live request(s) hold it" in error


def test_an_eviction_that_leaves_the_hash_behind(fixture_pool):
    def evict(self, block):
        if block.block_hash is None:
            return False
        block.reset_hash()  # the hash map still lists the block under its old hash
        return True

    error = refusal(fixture_pool, variant(fixture_pool, "stale", _maybe_evict_cached_block=evict))
    assert error.startswith("stale breaks an invariant after call ")
    assert " get_new_blocks(" in error and "hash map entry" in error


def test_an_allocation_that_leaks_one_ref_cnt(fixture_pool):
    base_get = fixture_pool.pool_cls.get_new_blocks

    def get_new_blocks(self, num_blocks):
        blocks = base_get(self, num_blocks)
        if num_blocks == 7:  # one size in the middle of the script's range
            blocks[-1].ref_cnt += 1
        return blocks

    error = refusal(fixture_pool, variant(fixture_pool, "leak", get_new_blocks=get_new_blocks))
    assert error.startswith("leak breaks an invariant after call ")
    assert " get_new_blocks(r" in error and "has ref_cnt 2 but 1 live request(s) hold it" in error


def test_a_pool_that_appends_uncached_frees_is_caught_by_the_comparison(fixture_pool):
    """Every invariant holds (the queue is consistent); only the order differs."""

    def free_blocks(self, ordered_blocks):
        freed = []
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                freed.append(block)
        self.free_block_queue.append_n(freed)

    error = refusal(fixture_pool, variant(fixture_pool, "fifo", free_blocks=free_blocks))
    assert error.startswith("fifo differs from base at call ")
    assert " free_blocks(r" in error and ": queue expected [" in error


def test_a_different_exception_message_is_refused(fixture_pool):
    base_get = fixture_pool.pool_cls.get_new_blocks

    def get_new_blocks(self, num_blocks):
        if num_blocks > self.get_num_free_blocks():
            raise ValueError("out of blocks")
        return base_get(self, num_blocks)

    error = refusal(fixture_pool, variant(fixture_pool, "msg", get_new_blocks=get_new_blocks))
    assert (
        "get_new_blocks(free + 1)" in error
        and "exception expected 'ValueError: Cannot get" in error
    )


def test_gate_records_keep_every_pool_and_a_refusal_in_one_line(fixture_pool):
    broken = variant(fixture_pool, "usage", get_usage=lambda self: 0.5)
    base, refused, after = pool_gate.gate_records([fixture_pool, broken, fixture_pool], (64,))
    assert base["ok"] and base["role"] == "baseline" and after["ok"]
    assert not refused["ok"] and refused["sizes"] == []
    assert refused["error"].startswith("usage differs from base at call 1 ")
    assert "\n" not in refused["error"]


def test_a_named_difference_that_does_not_show_is_refused(fixture_pool):
    result = pool_gate.pool_gate(
        fixture_pool, fixture_pool, sizes=(64,), differences=("usage-excludes-null",)
    )
    assert not result.ok
    assert result.error == (
        "named difference usage-excludes-null is listed for base -> base but does not show "
        "(both give 0.0): the list is stale"
    )


def test_unknown_named_difference(fixture_pool):
    result = pool_gate.pool_gate(fixture_pool, fixture_pool, sizes=(64,), differences=("x",))
    assert result.error is not None and result.error.startswith("x is not a named difference")


def test_design_differences_by_release():
    assert pool_gate.design_differences("0.10.0", "0.18.0") == ("usage-excludes-null",)
    assert pool_gate.design_differences("0.25.0", "0.18.0") == ("freed-uncached-to-front",)
    assert pool_gate.design_differences("0.10.0", "0.33.0") == (
        "freed-uncached-to-front",
        "usage-excludes-null",
    )
    assert pool_gate.design_differences("0.31.0", "0.33.0") == ()
    assert pool_gate.design_differences(None, "0.33.0") == ()


def test_large_sizes_cut_the_intents_and_still_compare(fixture_pool, monkeypatch):
    """Above FULL_EVERY_CALL_MAX the whole structure is compared once per intent."""
    monkeypatch.setattr(pool_gate, "FULL_EVERY_CALL_MAX", 100)
    broken = variant(fixture_pool, "usage", get_usage=lambda self: 0.5)
    result = pool_gate.pool_gate(fixture_pool, broken, sizes=(256,))
    assert result.error is not None and "usage expected" in result.error
    assert pool_gate.pool_gate(fixture_pool, fixture_pool, sizes=(256,)).ok


# ---------------------------------------------------------------- real releases

RELEASES = ["0.10.0", "0.18.0", "0.25.0", "0.31.0", "0.32.0", "0.33.0"]


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_a_release_passes_against_itself(version):
    pool = load_pool(f"vllm=={version}")
    result = pool_gate.pool_gate(pool, pool, sizes=(64,))
    assert result.ok, result.error


@pytest.mark.network
@pytest.mark.slow
def test_consecutive_releases_pass_with_their_named_differences():
    pools = [load_pool(f"vllm=={v}") for v in RELEASES]
    seen = []
    for base, cand in itertools.pairwise(pools):
        result = pool_gate.pool_gate(base, cand, sizes=(64,))
        assert result.ok, result.error
        seen.append(result.differences)
    assert seen == [("usage-excludes-null",), ("freed-uncached-to-front",), (), (), ()]


@pytest.mark.network
@pytest.mark.slow
def test_a_release_difference_that_is_not_named_is_refused():
    base, cand = load_pool("vllm==0.18.0"), load_pool("vllm==0.25.0")
    result = pool_gate.pool_gate(base, cand, sizes=(64,), differences=())
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("vllm==0.25.0 differs from vllm==0.18.0 at call ")
    assert " free_blocks(r" in result.error


@pytest.mark.network
@pytest.mark.slow
def test_our_queue_inside_a_release_pool_passes_at_a_timed_size():
    base = load_pool("vllm==0.33.0")
    swapped = load_pool("vllm==0.33.0+queue=kvqueue")
    result = pool_gate.pool_gate(base, swapped, sizes=(2_048,))
    assert result.ok, result.error


@pytest.mark.network
@pytest.mark.slow
def test_the_release_that_first_frees_uncached_blocks_to_the_front_passes_with_its_name():
    """0.24.0 runs the same pool code as 0.25.x: the difference begins there (the pool
    history's probe of every release found it; named from 0.25.0, 0.23.0 -> 0.24.0
    was refused)."""
    base, cand = load_pool("vllm==0.23.0"), load_pool("vllm==0.24.0")
    result = pool_gate.pool_gate(base, cand, sizes=(64,))
    assert result.ok, result.error
    assert result.differences == ("freed-uncached-to-front",)
