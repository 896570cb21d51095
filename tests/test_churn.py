"""The churn workload (kvqueue/policy/churn.py): seeded, paired across policies, vLLM's free
order, prefix hits from mid-queue, fragmentation after warm-up."""

from __future__ import annotations

import dataclasses

import pytest

from kvqueue.policy import churn, invariants, policies
from kvqueue.subject.block import KVCacheBlock
from kvqueue.subject.ours import FreeKVCacheBlockQueue

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


def test_completion_frees_in_reversed_order_with_one_append() -> None:
    blocks = [KVCacheBlock(block_id=i) for i in range(64)]
    queue = FreeKVCacheBlockQueue(blocks)
    sim = churn.Churn(SMALL, 1, queue, blocks, queue.popleft_n)
    req = churn.Request(4, 1, -1, 1, [])
    assert sim._admit(req)
    chain = [b.block_id for b in req.blocks]
    sim.active.remove(req)
    sim._free(req)
    assert invariants.free_ids(queue)[-4:] == chain[::-1]


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
