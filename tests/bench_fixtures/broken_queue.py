"""A free-block queue with ONE deliberate bug, for the bench tests' validation-gate case.

Written for these tests from the queue contract (DESIGN §1); no upstream text. The bug:
``remove`` unlinks the block from its neighbours but leaves the block's own two links
set, so a removed block is not *detached* (both links ``None``) as the contract demands.
The validation gate must refuse this variant, and ``make bench`` must then time nothing
and write nothing.

The loader cuts each class out on its own and binds ``KVCacheBlock`` to the run's shared
block class, so the queue refers to no other module-level name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(slots=True)
class KVCacheBlock:
    """Minimal block: an id and the two intrusive free-list links."""

    block_id: int
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None


class FreeKVCacheBlockQueue:
    """Doubly linked free list through the blocks' links, between two sentinels."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = KVCacheBlock(block_id=-1)
        self.fake_free_list_tail = KVCacheBlock(block_id=-1)
        nodes = [self.fake_free_list_head, *blocks, self.fake_free_list_tail]
        for i in range(len(nodes) - 1):
            nodes[i].next_free_block = nodes[i + 1]
            nodes[i + 1].prev_free_block = nodes[i]

    def popleft(self) -> KVCacheBlock:
        """Detach and return the first free block."""
        block = self.fake_free_list_head.next_free_block
        if block is None or block is self.fake_free_list_tail:
            assert self.num_free_blocks == 0, (
                f"num_free_blocks ({self.num_free_blocks}) is out of sync with the free list."
            )
            raise ValueError("No free blocks available")
        if block.next_free_block is None:
            raise RuntimeError(
                "Invalid block found in popleft() which doesn't have a valid next_free_block"
            )
        self.fake_free_list_head.next_free_block = block.next_free_block
        block.next_free_block.prev_free_block = self.fake_free_list_head
        block.prev_free_block = None
        block.next_free_block = None
        self.num_free_blocks -= 1
        return block

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Detach and return the first ``n`` free blocks."""
        if n == 0:
            return []
        assert self.num_free_blocks >= n
        self.num_free_blocks -= n
        out = []
        block = self.fake_free_list_head.next_free_block
        for _ in range(n):
            assert block is not None
            out.append(block)
            following = block.next_free_block
            block.prev_free_block = None
            block.next_free_block = None
            block = following
        if block is not None:
            self.fake_free_list_head.next_free_block = block
            block.prev_free_block = self.fake_free_list_head
        return out

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` from the middle of the queue.

        BUG (deliberate): the block's own links are not reset to ``None``.
        """
        if block.prev_free_block is None or block.next_free_block is None:
            raise RuntimeError(f"remove() called on an invalid block: {block}")
        block.prev_free_block.next_free_block = block.next_free_block
        block.next_free_block.prev_free_block = block.prev_free_block
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link ``block`` in at the end."""
        last = self.fake_free_list_tail.prev_free_block
        if last is None:
            raise RuntimeError("prev_free_block of fake_free_list_tail should always exist")
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = block
        self.num_free_blocks += 1

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Link ``blocks`` in at the end, in order."""
        if not blocks:
            return
        last = self.fake_free_list_tail.prev_free_block
        assert last is not None, "prev_free_block of fake_free_list_tail should always exist"
        for block in blocks:
            last.next_free_block = block
            block.prev_free_block = last
            last = block
        last.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Link ``blocks`` in at the front, in order."""
        if not blocks:
            return
        first = self.fake_free_list_head.next_free_block
        assert first is not None, "next_free_block of fake_free_list_head should always exist"
        prev = self.fake_free_list_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """All free blocks in queue order."""
        block = self.fake_free_list_head.next_free_block
        if block is None:
            raise RuntimeError("next_free_block of fake_free_list_head should always exist")
        out = []
        while block.next_free_block is not None:
            out.append(block)
            block = block.next_free_block
        return out

    def iter_blocks_after(self, cursor: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
        """Yield the free blocks after ``cursor`` (from the front when ``None``)."""
        block = (cursor or self.fake_free_list_head).next_free_block
        while block is not None and block is not self.fake_free_list_tail:
            yield block
            block = block.next_free_block
