"""The churn workload (kvqueue/policy/churn.py): seeded, paired across policies, vLLM's free
order, prefix hits from mid-queue, fragmentation after warm-up."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kvqueue.policy import churn, invariants, policies
from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock

SMALL = dataclasses.replace(invariants.CHECK_WORKLOAD, steps=300)


def build(workload: churn.Workload = SMALL, seed: int = 5, name: str = "lru", log=None):
    blocks = [KVCacheBlock(block_id=i) for i in range(workload.pool)]
    queue = FreeKVCacheBlockQueue(blocks)
    chosen = policies.get(name)

    def alloc(n: int) -> list:
        got = chosen(queue, n)
        if log is not None:
            log.append([b.block_id for b in got])
        return got

    return churn.Churn(workload, seed, queue, blocks, alloc), queue


def test_the_request_stream_depends_on_the_seed_only() -> None:
    a = churn.RequestStream(SMALL, 3)
    b = churn.RequestStream(SMALL, 3)
    c = churn.RequestStream(SMALL, 4)
    first = [dataclasses.astuple(a.next()) for _ in range(50)]
    assert first == [dataclasses.astuple(b.next()) for _ in range(50)]
    assert first != [dataclasses.astuple(c.next()) for _ in range(50)]


def test_a_run_is_deterministic_per_seed() -> None:
    logs = [[], []]
    for log in logs:
        sim, _ = build(log=log)
        sim.run(SMALL.steps)
    assert logs[0] == logs[1] and len(logs[0]) > 100


def test_every_policy_sees_the_same_requests() -> None:
    # The stream never sees the queue: drawing it alongside a run changes nothing.
    sims = [build(name=name)[0] for name in ("lru", "contig-inf")]
    for sim in sims:
        sim.run(SMALL.steps)
    assert sims[0].stream.family_prefix == sims[1].stream.family_prefix
    assert sims[0].admitted > 20 and sims[1].admitted > 20


def _side(pool: int = 64, free_order: str = "vllm") -> tuple[churn.Side, FreeKVCacheBlockQueue]:
    blocks = [KVCacheBlock(block_id=i) for i in range(pool)]
    queue = FreeKVCacheBlockQueue(blocks)
    return churn.Side(queue, blocks, queue.popleft_n, free_order), queue


def test_vllms_free_path_prepends_the_unhashed_block_and_appends_the_rest_reversed() -> None:
    side, queue = _side()
    chain = [b.block_id for b in side.allocate("r", 4)]
    side.free("r")
    ids = invariants.free_ids(queue)
    # The last block is the partial, unhashed one: evicted first. The hashed rest is
    # appended in reverse: the tail of the chain is evicted before its head.
    assert ids[0] == chain[-1]
    assert ids[-3:] == chain[-2::-1]
    assert len(ids) == 64


def test_the_append_free_order_appends_everything_reversed() -> None:
    side, queue = _side(free_order="append")
    chain = [b.block_id for b in side.allocate("r", 4)]
    side.free("r")
    assert invariants.free_ids(queue)[-4:] == chain[::-1]


def test_a_shared_block_is_freed_only_when_its_last_holder_frees_it() -> None:
    side, queue = _side()
    side.touch("a", ["k0", "k1"])  # both miss: allocated with a's alloc, then cached
    a = [b.block_id for b in side.allocate("a", 1)]
    assert side.touch("b", ["k0", "k1"]) == 2  # still cached and in use: shared
    side.allocate("b", 1)
    side.free("a")
    free = set(invariants.free_ids(queue))
    assert a[0] not in free and a[1] not in free and a[2] in free
    side.free("b")
    assert set(a) <= set(invariants.free_ids(queue))


def test_an_unpin_sends_blocks_to_the_tail_as_last_resort() -> None:
    side, queue = _side()
    chain = [b.block_id for b in side.allocate("r", 4)]
    side.free("r", unpin=True)
    assert invariants.free_ids(queue)[-4:] == chain[::-1]  # all to the tail, reversed
    assert side.last_resort == set(chain)
    # Allocated again: no longer last-resort.
    again = side.allocate("s", 64)
    assert not side.last_resort and len(again) == 64


def test_a_free_cached_hit_leaves_the_last_resort_set() -> None:
    side, _ = _side()
    side.touch("r", ["k0", "k1"])
    side.allocate("r", 1)
    side.free("r", unpin=True)
    assert len(side.last_resort) == 3
    assert side.touch("s", ["k0", "k1"]) == 2
    assert len(side.last_resort) == 1


def test_prefix_hits_remove_cached_blocks_from_the_middle_of_the_queue() -> None:
    workload = dataclasses.replace(SMALL, prefix_share=1.0, families=1, concurrency=1)
    mid_queue = []

    class Counting(FreeKVCacheBlockQueue):
        def remove(self, block: KVCacheBlock) -> None:
            mid_queue.append(block.prev_free_block is not self.fake_free_list_head)
            super().remove(block)

    blocks = [KVCacheBlock(block_id=i) for i in range(workload.pool)]
    queue = Counting(blocks)
    sim = churn.Churn(workload, 5, queue, blocks, queue.popleft_n)
    sim.run(200)
    assert sim.hit_blocks > 0
    assert any(mid_queue), "a cached free block was never taken out of the middle"


def test_warm_up_fragments_the_queue() -> None:
    sim, queue = build(dataclasses.replace(SMALL, steps=1))
    fresh = policies.ascending_runs(invariants.free_ids(queue))
    sim.run(400)
    after = policies.ascending_runs(invariants.free_ids(queue))
    assert len(fresh) == 1
    assert len(after) > 20


def test_admission_keeps_room_for_decode_growth() -> None:
    # A tight pool: decode allocations must never fail (popleft_n would raise).
    workload = dataclasses.replace(SMALL, pool=256, concurrency=40, prefill_max=64, decode_max=32)
    sim, queue = build(workload)
    sim.run(600)
    assert sim.completed > 10
    assert queue.num_free_blocks >= 0


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"pool": 10}, "pool"),
        ({"prefix_share": 2.0}, "prefix_share"),
        ({"prefill_max": 9000}, "half the pool"),
        ({"steps": 0}, "steps"),
        ({"concurrency": True}, "number"),
    ],
)
def test_bad_workloads_are_named(change: dict, words: str) -> None:
    problem = dataclasses.replace(churn.Workload(), **change).problem()
    assert problem and words in problem


def test_the_default_workload_is_valid() -> None:
    assert churn.Workload().problem() is None


def test_block_descriptors_and_run_sums_match_their_reference() -> None:
    import random

    from kvqueue.policy import age_windows

    rng = random.Random(7)
    for _ in range(3000):
        n = rng.randint(0, 12)
        ids, other = [rng.randint(0, 40)], [rng.randint(0, 40)]
        for _ in range(n):
            ids.append(ids[-1] + rng.choice([1, 1, 1, -1, 2, -2, 0]))
            other.append(other[-1] + rng.choice([1, -1, 1, -1, 3]))
        ids, other = ids[:n], other[:n]
        blocks = [KVCacheBlock(block_id=i) for i in ids]
        runs = policies.ascending_runs(ids)
        assert age_windows.ascending_run_sums(blocks) == (len(runs), sum(r for r in runs if r >= 2))
        other_blocks = [KVCacheBlock(block_id=i) for i in other]
        assert churn.block_descriptors(blocks, other_blocks) == churn.descriptors(ids, other)


def _paired(record: bool) -> tuple[churn.Churn, list, list]:
    """A paired churn under contig-w4, its allocations and its reads; ``record``: every
    event goes through Pools.apply (the trace writer's path)."""
    sides, log, reads = {}, [], []
    for side in (churn.DECODE, churn.PREFILL):
        blocks = [KVCacheBlock(block_id=i) for i in range(SMALL.pool)]
        sides[side] = (FreeKVCacheBlockQueue(blocks), blocks)
    chosen = policies.get("contig-w4")

    def alloc_for(side: str):
        def alloc(n: int) -> list:
            got = chosen(sides[side][0], n)
            log.append((side, [b.block_id for b in got]))
            return got

        return alloc

    sim = churn.Churn(
        SMALL,
        11,
        *sides[churn.DECODE],
        alloc_for(churn.DECODE),
        prefill=(*sides[churn.PREFILL], alloc_for(churn.PREFILL)),
    )
    sim.pools.on_read = lambda rid, count, k: reads.append((rid, count, k))
    if record:
        sim.pools.record = lambda event: None
    sim.run(SMALL.steps)
    return sim, log, reads


def test_the_direct_event_path_runs_what_pools_apply_runs() -> None:
    direct, log, reads = _paired(record=False)
    applied, log2, reads2 = _paired(record=True)
    assert log == log2 and reads == reads2 and reads
    assert (direct.hit_blocks, direct.admitted, direct.completed) == (
        applied.hit_blocks,
        applied.admitted,
        applied.completed,
    )
    for side in (churn.DECODE, churn.PREFILL):
        a, b = direct.pools.sides[side], applied.pools.sides[side]
        assert a.ref == b.ref and a.cache == b.cache and a.last_resort == b.last_resort
        ids = [x.block_id for x in a.queue.get_all_free_blocks()]
        assert ids == [x.block_id for x in b.queue.get_all_free_blocks()]


def _reference_free_order(held: list[int], ref: dict[int, int]) -> list[int]:
    """The count rule written plainly: release in reverse, keep those that drop to 0."""
    out = []
    for i in reversed(held):
        ref[i] -= 1
        if ref[i] == 0:
            out.append(i)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_free_releases_what_the_count_rule_releases_under_any_event_order(seed: int) -> None:
    # A trace may touch a request again after it allocated blocks of its own, so the
    # blocks another request can share are not always a head of its list (free skips the
    # count check only for the tail that nobody can share).
    rng = random.Random(seed)
    side, queue = _side(pool=256)
    held: dict[str, list[int]] = {}
    ref = dict.fromkeys(range(256), 0)
    keys = [f"k{j}" for j in range(24)]
    for _ in range(400):
        rid = f"r{rng.randrange(6)}"
        op = rng.random()
        if op < 0.35:
            start = rng.randrange(len(keys))
            want = keys[start : start + rng.randint(1, 6)]
            hits = side.cached(want)
            if side.room(want, 0, hits) < 8:
                continue
            side.touch(rid, want, hits)
            held.setdefault(rid, []).extend(hits)
            for i in hits:
                ref[i] += 1
        elif op < 0.75:
            n = rng.randint(0, 4)
            if len(side.pending.get(rid, [])) + n > queue.num_free_blocks:
                continue
            got = [b.block_id for b in side.allocate(rid, n)]
            held.setdefault(rid, []).extend(got)
            for i in got:
                ref[i] += 1
        else:
            want_free = _reference_free_order(held.pop(rid, []), ref)
            before = set(invariants.free_ids(queue))
            side.free(rid, unpin=rng.random() < 0.3)
            freed = [i for i in invariants.free_ids(queue) if i not in before]
            assert sorted(freed) == sorted(want_free)
        assert side.ref == [ref[i] for i in range(256)]
        invariants.check_queue(queue, side.blocks, side.ref, f"seed {seed}")
