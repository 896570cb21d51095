"""Stateful property test of this project's queue (and the floor) against a list model."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvqueue.subjects.our_queue import FloorKVCacheBlockQueue, FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock

POOL = 10


class QueueMachine(RuleBasedStateMachine):
    """Random valid operations on the queue and on a plain list, compared throughout."""

    queue_cls: type = FreeKVCacheBlockQueue

    def __init__(self) -> None:
        super().__init__()
        self.blocks = [KVCacheBlock(block_id=i) for i in range(POOL)]
        self.model: list[KVCacheBlock] = []
        self.q = None

    @initialize(data=st.data())
    def build(self, data):
        order = data.draw(st.permutations(self.blocks), label="order")
        size = data.draw(st.integers(0, POOL), label="size")
        self.model = list(order[:size])
        self.q = self.queue_cls(list(self.model))
        self.head = self.q.fake_free_list_head
        self.tail = self.q.fake_free_list_tail

    # ------------------------------------------------------------ helpers

    def detached(self) -> list[KVCacheBlock]:
        inside = {id(b) for b in self.model}
        return [b for b in self.blocks if id(b) not in inside]

    def draw_batch(self, data) -> list[KVCacheBlock]:
        spare = self.detached()
        if not spare:
            return []
        return data.draw(
            st.lists(st.sampled_from(spare), unique_by=id, max_size=len(spare)), label="batch"
        )

    # -------------------------------------------------------------- rules

    @precondition(lambda self: self.model)
    @rule()
    def popleft(self):
        assert self.q.popleft() is self.model.pop(0)

    @rule(data=st.data())
    def popleft_n(self, data):
        k = data.draw(st.integers(0, len(self.model)), label="k")
        got = self.q.popleft_n(k)
        want, self.model[:k] = self.model[:k], []
        assert type(got) is list
        assert [id(b) for b in got] == [id(b) for b in want]

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        block = data.draw(st.sampled_from(self.model), label="block")
        self.q.remove(block)
        self.model.remove(block)

    @precondition(lambda self: len(self.model) < POOL)
    @rule(data=st.data())
    def append(self, data):
        block = data.draw(st.sampled_from(self.detached()), label="block")
        self.q.append(block)
        self.model.append(block)

    @rule(data=st.data())
    def append_n(self, data):
        batch = self.draw_batch(data)
        self.q.append_n(batch)
        self.model.extend(batch)

    @rule(data=st.data())
    def prepend_n(self, data):
        batch = self.draw_batch(data)
        self.q.prepend_n(batch)
        self.model[:0] = batch

    @rule(data=st.data())
    def iter_blocks_after(self, data):
        pos = data.draw(st.integers(-1, len(self.model) - 1), label="cursor position")
        cursor = None if pos < 0 else self.model[pos]
        got = list(self.q.iter_blocks_after(cursor))
        assert [id(b) for b in got] == [id(b) for b in self.model[pos + 1 :]]

    @rule()
    def get_all_free_blocks(self):
        got = self.q.get_all_free_blocks()
        assert type(got) is list
        assert [id(b) for b in got] == [id(b) for b in self.model]

    # ---------------------------------------------------------- invariants

    @invariant()
    def structure_matches_model(self):
        q, model = self.q, self.model
        assert q.fake_free_list_head is self.head and q.fake_free_list_tail is self.tail
        assert type(self.head) is KVCacheBlock and type(self.tail) is KVCacheBlock
        assert self.head.prev_free_block is None
        assert self.tail.next_free_block is None
        chain = [self.head, *model, self.tail]
        for left, right in itertools.pairwise(chain):
            assert left.next_free_block is right, "forward link"
            assert right.prev_free_block is left, "backward link"
        assert q.num_free_blocks == len(model)

    @invariant()
    def detached_blocks_are_cleared(self):
        for block in self.detached():
            assert block.prev_free_block is None
            assert block.next_free_block is None


class CheckedQueueMachine(QueueMachine):
    """The real queue also refuses invalid calls, with no damage done."""

    def snapshot(self):
        links = [
            (id(b.prev_free_block), id(b.next_free_block))
            for b in [self.head, self.tail, *self.blocks]
        ]
        return links, self.q.num_free_blocks

    @precondition(lambda self: not self.model)
    @rule()
    def popleft_on_empty(self):
        before = self.snapshot()
        with pytest.raises(ValueError, match=r"^No free blocks available$"):
            self.q.popleft()
        assert self.snapshot() == before

    @rule(extra=st.integers(1, 3))
    def popleft_n_too_many(self, extra):
        before = self.snapshot()
        with pytest.raises(AssertionError):
            self.q.popleft_n(len(self.model) + extra)
        assert self.snapshot() == before

    @precondition(lambda self: len(self.model) < POOL)
    @rule(data=st.data())
    def remove_detached(self, data):
        block = data.draw(st.sampled_from(self.detached()), label="block")
        before = self.snapshot()
        with pytest.raises(RuntimeError, match=r"^remove\(\) called on an invalid block: "):
            self.q.remove(block)
        assert self.snapshot() == before


class FloorQueueMachine(QueueMachine):
    """The check-free bound does the same link surgery for every valid call."""

    queue_cls = FloorKVCacheBlockQueue


FAST = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestFreeKVCacheBlockQueue = CheckedQueueMachine.TestCase
TestFreeKVCacheBlockQueue.settings = FAST
TestFloorKVCacheBlockQueue = FloorQueueMachine.TestCase
TestFloorKVCacheBlockQueue.settings = FAST


class LeakyQueue(FreeKVCacheBlockQueue):
    """remove() leaves the removed block's next link behind (a deliberate bug)."""

    __slots__ = ()

    def remove(self, block):
        nxt = block.next_free_block
        super().remove(block)
        block.next_free_block = nxt


class LeakyQueueMachine(QueueMachine):
    queue_cls = LeakyQueue


def test_the_machine_catches_a_broken_queue():
    quick = settings(FAST, max_examples=200, phases=[Phase.generate], report_multiple_bugs=False)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(LeakyQueueMachine, settings=quick)


# ------------------------------------------------------------ a few fixed cases


def ids(blocks):
    return [b.block_id for b in blocks]


@pytest.mark.parametrize("cls", [FreeKVCacheBlockQueue, FloorKVCacheBlockQueue])
def test_empty_queue_links_the_sentinels(cls):
    q = cls([])
    assert q.num_free_blocks == 0
    assert q.fake_free_list_head.next_free_block is q.fake_free_list_tail
    assert q.fake_free_list_tail.prev_free_block is q.fake_free_list_head
    assert q.fake_free_list_head.block_id == q.fake_free_list_tail.block_id == -1
    assert q.get_all_free_blocks() == []
    assert list(q.iter_blocks_after(None)) == []


@pytest.mark.parametrize("cls", [FreeKVCacheBlockQueue, FloorKVCacheBlockQueue])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_pop_everything_then_refill(cls, k):
    blocks = [KVCacheBlock(block_id=i) for i in range(k)]
    q = cls(blocks)
    popped = q.popleft_n(k)
    assert ids(popped) == list(range(k))
    assert q.num_free_blocks == 0
    assert q.fake_free_list_head.next_free_block is q.fake_free_list_tail
    assert q.fake_free_list_tail.prev_free_block is q.fake_free_list_head
    assert all(b.prev_free_block is None and b.next_free_block is None for b in blocks)
    q.append_n(popped[::-1])
    assert ids(q.get_all_free_blocks()) == list(range(k))[::-1]


def test_invalid_calls_of_the_checked_queue():
    blocks = [KVCacheBlock(block_id=i) for i in range(3)]
    q = FreeKVCacheBlockQueue(blocks[:2])
    with pytest.raises(AssertionError):
        q.popleft_n(3)
    assert q.num_free_blocks == 2
    q.fake_free_list_tail.prev_free_block = None
    with pytest.raises(RuntimeError, match="prev_free_block of fake_free_list_tail"):
        q.append(blocks[2])
    with pytest.raises(AssertionError, match="prev_free_block of fake_free_list_tail"):
        q.append_n([blocks[2]])
    q.append_n([])  # an empty batch does not look at the tail
    q.fake_free_list_head.next_free_block = None
    with pytest.raises(AssertionError, match="next_free_block of fake_free_list_head"):
        q.prepend_n([blocks[2]])
    with pytest.raises(RuntimeError, match="next_free_block of fake_free_list_head"):
        q.get_all_free_blocks()
