"""Queues of the *head-tail* structure, written for the tests from the contract.

No sentinel blocks: the queue keeps its first and last free block in ``free_list_head``
and ``free_list_tail`` (``None`` when empty), the first block's ``prev_free_block`` and
the last block's ``next_free_block`` are ``None``, and a queue cannot be built empty.
It has only ``popleft``, ``remove``, ``append`` and ``get_all_free_blocks`` (the loader
adds ``popleft_n``/``append_n`` as loops; ``prepend_n`` and ``iter_blocks_after`` stay
missing). No upstream text is used here.

Classes:

``KVCacheBlock``
    A plain (not slotted) dataclass block with the two links.
``FreeKVCacheBlockQueue``
    The correct head-tail queue.
``LeakyQueue``
    Its ``remove`` forgets to clear the removed block's links (the gate must refuse it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KVCacheBlock:
    """A block: an id and the two free-list links."""

    block_id: int
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None


class FreeKVCacheBlockQueue:
    """Free list whose ends are two attributes (no sentinel objects)."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.free_list_head: KVCacheBlock | None = blocks[0]
        self.free_list_tail: KVCacheBlock | None = blocks[-1]
        for i in range(1, len(blocks)):  # the loader's module has no itertools
            blocks[i - 1].next_free_block = blocks[i]
            blocks[i].prev_free_block = blocks[i - 1]

    def popleft(self) -> KVCacheBlock:
        """Take the first free block."""
        block = self.free_list_head
        if block is None:
            raise ValueError("the free list is empty")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` wherever it is."""
        before, after = block.prev_free_block, block.next_free_block
        if before is None:
            self.free_list_head = after
        else:
            before.next_free_block = after
        if after is None:
            self.free_list_tail = before
        else:
            after.prev_free_block = before
        block.prev_free_block = None
        block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link ``block`` after the last free block."""
        last = self.free_list_tail
        block.prev_free_block = last
        block.next_free_block = None
        if last is None:
            self.free_list_head = block
        else:
            last.next_free_block = block
        self.free_list_tail = block
        self.num_free_blocks += 1

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """The free blocks, first to last."""
        out = []
        block = self.free_list_head
        while block is not None:
            out.append(block)
            block = block.next_free_block
        return out


class LeakyQueue:
    """Like :class:`FreeKVCacheBlockQueue`, but ``remove`` keeps the block's links."""

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.free_list_head: KVCacheBlock | None = blocks[0]
        self.free_list_tail: KVCacheBlock | None = blocks[-1]
        for i in range(1, len(blocks)):  # the loader's module has no itertools
            blocks[i - 1].next_free_block = blocks[i]
            blocks[i].prev_free_block = blocks[i - 1]

    def popleft(self) -> KVCacheBlock:
        """Take the first free block."""
        block = self.free_list_head
        if block is None:
            raise ValueError("the free list is empty")
        self.remove(block)
        return block

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink ``block`` but leave its own links set (the bug)."""
        before, after = block.prev_free_block, block.next_free_block
        if before is None:
            self.free_list_head = after
        else:
            before.next_free_block = after
        if after is None:
            self.free_list_tail = before
        else:
            after.prev_free_block = before
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link ``block`` after the last free block."""
        last = self.free_list_tail
        block.prev_free_block = last
        block.next_free_block = None
        if last is None:
            self.free_list_head = block
        else:
            last.next_free_block = block
        self.free_list_tail = block
        self.num_free_blocks += 1

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """The free blocks, first to last."""
        out = []
        block = self.free_list_head
        while block is not None:
            out.append(block)
            block = block.next_free_block
        return out
