"""The head of the "where the cost moved" demo (issue 36): ``tests/queues/append_base.py``
with a rewrite of ``popleft_n``'s loop that binds ``append = taken.append`` first.

Only those lines differ from the base (``tests/test_where_moved.py`` checks it); see the
base's docstring for why this costs more instructions on CPython 3.11.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class KVCacheBlock:
    """Test block: an id and the two intrusive free-list links."""

    block_id: int
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        prev_id = None if self.prev_free_block is None else self.prev_free_block.block_id
        next_id = None if self.next_free_block is None else self.next_free_block.block_id
        return f"Block({self.block_id}, prev={prev_id}, next={next_id})"


class FreeKVCacheBlockQueue:
    """Doubly linked free list through the blocks' own links, with two sentinels."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = KVCacheBlock(block_id=-1)
        self.fake_free_list_tail = KVCacheBlock(block_id=-1)
        chain = [self.fake_free_list_head, *blocks, self.fake_free_list_tail]
        for i in range(1, len(chain)):
            chain[i - 1].next_free_block = chain[i]
            chain[i].prev_free_block = chain[i - 1]

    def popleft(self) -> KVCacheBlock:
        """Detach and return the first block."""
        first = self.fake_free_list_head.next_free_block
        if first is None or first is self.fake_free_list_tail:
            assert self.num_free_blocks == 0, (
                f"num_free_blocks ({self.num_free_blocks}) is out of sync with the free list."
            )
            raise ValueError("No free blocks available")
        second = first.next_free_block
        if second is None:
            raise RuntimeError(
                "Invalid block found in popleft() which doesn't have a valid next_free_block"
            )
        self.fake_free_list_head.next_free_block = second
        second.prev_free_block = self.fake_free_list_head
        first.prev_free_block = None
        first.next_free_block = None
        self.num_free_blocks -= 1
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Detach and return the first ``n`` blocks."""
        if n == 0:
            return []
        if n == 1:
            assert self.num_free_blocks >= 1
            self.num_free_blocks -= 1
            only = self.fake_free_list_head.next_free_block
            assert only is not None
            after = only.next_free_block
            only.prev_free_block = None
            only.next_free_block = None
            if after is not None:
                self.fake_free_list_head.next_free_block = after
                after.prev_free_block = self.fake_free_list_head
            return [only]
        assert self.num_free_blocks >= n
        self.num_free_blocks -= n
        taken = []
        append = taken.append
        curr = self.fake_free_list_head.next_free_block
        for _ in range(n):
            assert curr is not None
            append(curr)
            following = curr.next_free_block
            curr.prev_free_block = None
            curr.next_free_block = None
            curr = following
        if curr is not None:
            self.fake_free_list_head.next_free_block = curr
            curr.prev_free_block = self.fake_free_list_head
        return taken

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from wherever it is in the queue."""
        before, after = block.prev_free_block, block.next_free_block
        if before is None or after is None:
            raise RuntimeError(f"remove() called on an invalid block: {block}")
        before.next_free_block = after
        after.prev_free_block = before
        block.prev_free_block = None
        block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link a detached ``block`` in front of the tail sentinel."""
        last = self.fake_free_list_tail.prev_free_block
        if last is None:
            raise RuntimeError("prev_free_block of fake_free_list_tail should always exist")
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = block
        self.num_free_blocks += 1

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Link detached ``blocks`` in front of the tail sentinel, in order."""
        if not blocks:
            return
        if len(blocks) == 1:
            last = self.fake_free_list_tail.prev_free_block
            assert last is not None, "prev_free_block of fake_free_list_tail should always exist"
            block = blocks[0]
            last.next_free_block = block
            block.prev_free_block = last
            block.next_free_block = self.fake_free_list_tail
            self.fake_free_list_tail.prev_free_block = block
            self.num_free_blocks += 1
            return
        last = self.fake_free_list_tail.prev_free_block
        assert last is not None, "prev_free_block of fake_free_list_tail should always exist"
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Link detached ``blocks`` right after the head sentinel, in order."""
        if not blocks:
            return
        old_first = self.fake_free_list_head.next_free_block
        assert old_first is not None, "next_free_block of fake_free_list_head should always exist"
        prev = self.fake_free_list_head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = old_first
        old_first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Return the free blocks in order (the tail is the only block without next)."""
        curr = self.fake_free_list_head.next_free_block
        if curr is None:
            raise RuntimeError("next_free_block of fake_free_list_head should always exist")
        found = []
        while curr.next_free_block is not None:
            found.append(curr)
            curr = curr.next_free_block
        return found

    def iter_blocks_after(self, cursor: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
        """Yield the blocks after ``cursor`` (all of them when ``cursor`` is None)."""
        start = self.fake_free_list_head if cursor is None else cursor
        curr = start.next_free_block
        while curr is not None and curr is not self.fake_free_list_tail:
            yield curr
            curr = curr.next_free_block
