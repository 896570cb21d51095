"""The allocation policies (kvqueue/policy/policies.py) and their invariant check
(kvqueue/policy/check.py): one test per rule of the description on hand-made queues, a
hypothesis state machine on small queues, and the workload check on every variant."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvqueue.policy import invariants, policies
from kvqueue.sources import loader
from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock


def make_queue(order: list[int], pool: int | None = None) -> tuple[FreeKVCacheBlockQueue, dict]:
    """A queue whose free blocks are ``order`` (ids, eviction order); others held."""
    pool = pool if pool is not None else max(order, default=-1) + 1
    blocks = [KVCacheBlock(block_id=i) for i in range(pool)]
    queue = FreeKVCacheBlockQueue([blocks[i] for i in order])
    return queue, {b.block_id: b for b in blocks}


def ids_of(blocks: list) -> list[int]:
    return [b.block_id for b in blocks]


def remaining(queue: FreeKVCacheBlockQueue) -> list[int]:
    return invariants.free_ids(queue)


# ------------------------------------------------------------------ rules, hand-made


def test_small_allocations_are_popleft_n() -> None:
    order = [5, 6, 7, 1, 2, 3, 4, 9]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 7, window_factor=None, threshold=8)
    assert ids_of(got) == order[:7]
    assert remaining(queue) == order[7:]


def test_lru_is_popleft_n() -> None:
    order = [3, 2, 1, 0, 9, 8]
    queue, _ = make_queue(order)
    assert ids_of(policies.lru(queue, 4)) == [3, 2, 1, 0]


def test_runs_are_ascending_and_longest_first() -> None:
    # Descending run 13..10 (length 4), ascending 20..25 (length 6), singles around.
    order = [40, 13, 12, 11, 10, 41, 20, 21, 22, 23, 24, 25, 42, 43]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 10, window_factor=None, threshold=8)
    assert ids_of(got) == [20, 21, 22, 23, 24, 25, 10, 11, 12, 13]
    assert remaining(queue) == [40, 41, 42, 43]


def test_remainder_comes_from_the_head_in_eviction_order() -> None:
    order = [50, 30, 31, 60, 61, 62, 70, 80, 90]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 8, window_factor=None, threshold=8)
    # Runs 60-62 then 30-31, then the head: 50, 70, 80 (not 90).
    assert ids_of(got) == [60, 61, 62, 30, 31, 50, 70, 80]
    assert remaining(queue) == [90]


def test_a_run_longer_than_needed_gives_its_oldest_blocks() -> None:
    order = [1, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 2]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 8, window_factor=None, threshold=8)
    # The oldest eight of the descending run 20..10 are 20..13, returned ascending.
    assert ids_of(got) == [13, 14, 15, 16, 17, 18, 19, 20]
    assert remaining(queue) == [1, 12, 11, 10, 2]


def test_one_missing_block_is_not_cut_from_a_run() -> None:
    order = [50, 1, 2, 3, 4, 5, 6, 7, 90, 20, 21]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 8, window_factor=None, threshold=8)
    assert ids_of(got) == [1, 2, 3, 4, 5, 6, 7, 50]
    assert remaining(queue) == [90, 20, 21]


def test_ties_prefer_the_run_nearer_the_head() -> None:
    order = [7, 8, 100, 3, 4, 101, 102 + 5, 200, 201, 300, 400, 500, 600, 700]
    queue, _ = make_queue(order)
    got = policies.contiguous(queue, 8, window_factor=None, threshold=8)
    assert ids_of(got)[:6] == [7, 8, 3, 4, 200, 201]


def test_the_search_is_bounded_by_its_window() -> None:
    # A long run sits just beyond a window of 1 x 8 blocks: it must not be found.
    singles = [100, 102, 104, 106, 108, 110, 112, 114]
    order = [*singles, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    queue, _ = make_queue(order)
    watched = invariants.WatchedQueue(queue)
    got = policies.contiguous(watched, 8, window_factor=1, threshold=8)
    assert ids_of(got) == singles
    assert watched.scanned == 8
    queue, _ = make_queue(order)
    watched = invariants.WatchedQueue(queue)
    got = policies.contiguous(watched, 8, window_factor=2, threshold=8)
    assert ids_of(got) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert watched.scanned == 16


def test_too_large_a_request_fails_like_popleft_n_and_changes_nothing() -> None:
    queue, _ = make_queue([1, 2, 3, 4, 5, 6, 7, 8])
    with pytest.raises(Exception) as want:  # whatever popleft_n raises
        FreeKVCacheBlockQueue([KVCacheBlock(block_id=i) for i in range(8)]).popleft_n(9)
    with pytest.raises(type(want.value)):
        policies.contiguous(queue, 9, window_factor=None, threshold=8)
    assert remaining(queue) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_only_the_public_api_is_used() -> None:
    queue, _ = make_queue(list(range(40)))
    watched = invariants.WatchedQueue(queue)
    with pytest.raises(AttributeError):
        _ = watched.prepend_n
    assert len(policies.contiguous(watched, 16, window_factor=4, threshold=8)) == 16


def test_split_runs_and_ascending_runs() -> None:
    assert policies.split_runs([1, 2, 3, 9, 8, 7, 20]) == [(0, 3), (3, 3), (6, 1)]
    assert policies.split_runs([]) == []
    # Descending segments do not merge into descriptors.
    assert policies.ascending_runs([7, 8, 9, 3, 2, 1]) == [3, 1, 1, 1]


def test_registry_names_and_windows() -> None:
    assert policies.NAMES == (
        "lru",
        "contig-w1",
        "contig-w2",
        "contig-w4",
        "contig-w8",
        "contig-inf",
    )
    assert [policies.window_of(n) for n in policies.NAMES] == [0, 1, 2, 4, 8, None]
    # Any whole window a run may choose (WINDOWS=3) resolves, not only the registry's.
    order = [20, 30, 40, 50, 60, 70, 3, 2, 1, 10, 11]
    for name, want in (("contig-w2", [20, 30, 40]), ("contig-w3", [1, 2, 3])):
        queue, _ = make_queue(order)
        # n=3: window 2 sees 6 singles (popleft_n's result), window 3 reaches the run.
        assert ids_of(policies.get(name, threshold=2)(queue, 3)) == want, name
    for bad in ("contig-w01", "contig-w0", "contig-w", "contig-wx", "contig-w²", "mru"):
        with pytest.raises(KeyError):
            policies.get(bad)


def test_variants_without_the_api_the_policy_needs_are_named() -> None:
    assert policies.STRUCTURE_SENTINELS == loader.STRUCTURE_SENTINELS
    for source in ("kvqueue", "vllm==0.26.0", "vllm==0.32.0"):
        assert policies.unsupported(loader.load_variants([source])[0]) is None, source
    no_iter = policies.unsupported(loader.load_variants(["vllm==0.25.0"])[0])
    assert no_iter and "lacks iter_blocks_after" in no_iter
    head_tail = policies.unsupported(loader.load_variants(["vllm==0.9.2"])[0])
    assert head_tail and "popleft_n" in head_tail and "head-tail" in head_tail


def test_the_check_refuses_to_pass_without_testing_the_search() -> None:
    variant = loader.load_variants(["kvqueue"])[0]
    largest = invariants.CHECK_WORKLOAD.prefill_max
    with pytest.raises(invariants.PolicyCheckError, match="would not test the contiguous"):
        invariants.run_check(
            variant.queue_cls,
            variant.block_cls,
            ["lru", "contig-w4"],
            largest + 1,
            seed=3,
            workload=invariants.CHECK_WORKLOAD,
        )
    # lru alone has no search to test: a threshold beyond every allocation is fine for it.
    result = invariants.run_check(
        variant.queue_cls,
        variant.block_cls,
        ["lru"],
        largest + 1,
        seed=3,
        workload=invariants.CHECK_WORKLOAD,
    )
    assert result["policies"]["lru"]["big"] == 0


def test_the_check_workload_scales_with_the_threshold() -> None:
    base = invariants.CHECK_WORKLOAD
    assert invariants.check_workload(1) == base == invariants.check_workload(8)
    w = invariants.check_workload(24)
    assert (w.pool, w.prefill_max, w.prefill_median) == (3 * 768, 3 * 96, 3 * 12.0)
    assert w.problem() is None and w.steps == base.steps and w.decode_max == base.decode_max
    capped = invariants.check_workload(10_000)
    assert capped.pool == invariants.MAX_CHECK_SCALE * base.pool


def test_a_larger_threshold_is_checked_on_larger_allocations() -> None:
    # Threshold 24 on the unscaled check workload would leave few allocations >= 24; the
    # scaled one gives the search as much to do as 8 does on the base workload.
    variant = loader.load_variants(["kvqueue"])[0]
    result = invariants.run_check(variant.queue_cls, variant.block_cls, ["contig-w2"], 24, 5)
    counts = result["policies"]["contig-w2"]
    assert counts["big"] >= invariants.MIN_BIG_ALLOCATIONS and counts["largest"] >= 24
    assert result["workload"]["pool"] == 3 * invariants.CHECK_WORKLOAD.pool


def test_model_agrees_with_the_hand_made_cases() -> None:
    order = [40, 13, 12, 11, 10, 41, 20, 21, 22, 23, 24, 25, 42, 43]
    assert invariants.model(order, 10, None, 8) == [20, 21, 22, 23, 24, 25, 10, 11, 12, 13]


def test_the_check_catches_a_policy_that_breaks_a_rule(monkeypatch) -> None:
    # A broken policy (descending runs kept descending) must be refused by the check.
    original = policies.contiguous

    def broken(queue, n, window_factor=4, threshold=8, last_resort=()):
        got = original(queue, n, window_factor, threshold, last_resort)
        return got[::-1] if n >= threshold else got

    monkeypatch.setattr(policies, "contiguous", broken)
    variant = loader.load_variants(["kvqueue"])[0]
    with pytest.raises(invariants.PolicyCheckError, match="description gives"):
        invariants.run_check(variant.queue_cls, variant.block_cls, ["contig-w4"], 8, seed=3)


# ------------------------------------------------------------------ state machine


class PolicyMachine(RuleBasedStateMachine):
    """Random allocations (every policy), reversed frees and mid-queue removals on a
    small queue; every allocation is checked by the rules, the queue after every step."""

    @initialize(pool=st.integers(min_value=1, max_value=48), data=st.data())
    def build(self, pool: int, data: st.DataObject) -> None:
        self.blocks = [KVCacheBlock(block_id=i) for i in range(pool)]
        order = data.draw(st.permutations(range(pool)))
        self.queue = FreeKVCacheBlockQueue([self.blocks[i] for i in order])
        self.held: list[list[int]] = []
        self.ref = [0] * pool

    @rule(
        name=st.sampled_from(policies.NAMES),
        threshold=st.integers(min_value=1, max_value=10),
        data=st.data(),
    )
    def allocate(self, name: str, threshold: int, data: st.DataObject) -> None:
        free = self.queue.num_free_blocks
        if free == 0:
            return
        n = data.draw(st.integers(min_value=1, max_value=free))
        before = invariants.free_ids(self.queue)
        watched = invariants.WatchedQueue(self.queue)
        got = policies.get(name, threshold)(watched, n)
        after = invariants.free_ids(self.queue)
        invariants.check_allocation(
            name, n, threshold, before, got, after, watched.scanned, f"{name} n={n}"
        )
        for b in got:
            self.ref[b.block_id] += 1
        self.held.append([b.block_id for b in got])

    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        if not self.held:
            return
        chain = self.held.pop(data.draw(st.integers(min_value=0, max_value=len(self.held) - 1)))
        for i in chain:
            self.ref[i] -= 1
        self.queue.append_n([self.blocks[i] for i in reversed(chain)])

    @rule(data=st.data())
    def remove_cached(self, data: st.DataObject) -> None:
        free = invariants.free_ids(self.queue)
        if not free:
            return
        i = data.draw(st.sampled_from(free))
        self.queue.remove(self.blocks[i])
        self.ref[i] += 1
        self.held.append([i])

    @invariant()
    def intact(self) -> None:
        if hasattr(self, "queue"):
            invariants.check_queue(self.queue, self.blocks, self.ref, "state machine")


TestPolicyMachine = PolicyMachine.TestCase
TestPolicyMachine.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)


# ------------------------------------------------------------------ the workload check


@pytest.mark.parametrize("source", ["kvqueue", "vllm==0.32.0", "vllm==0.31.0"])
def test_workload_check_passes_on_every_variant(source: str) -> None:
    variant = loader.load_variants([source])[0]
    result = invariants.run_check(
        variant.queue_cls, variant.block_cls, list(policies.NAMES), 8, seed=11
    )
    assert result["ok"]
    for name, counts in result["policies"].items():
        assert counts["steps"] == invariants.CHECK_WORKLOAD.steps
        assert counts["big"] > 50, name  # the rules were exercised on large allocations
