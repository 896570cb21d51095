"""A stand-in KV-cache block class for runs whose baseline is not a vLLM source.

Every variant of a run links objects of ONE block class. Normally that is the
baseline source's own ``KVCacheBlock`` (a vLLM release's); when the baseline is
``kvqueue`` (this project's queue), this class is used instead. It has the fields
the queue contract relies on: ``block_id`` and the two free-list links, and is a
slotted dataclass like upstream's so attribute access costs the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class KVCacheBlock:
    """KV-cache block metadata: an id, a reference count and the two free-list links."""

    block_id: int
    ref_cnt: int = 0
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None

    def __repr__(self) -> str:
        # Print neighbour ids, not neighbours: a repr of a linked block must not recurse.
        prev_id = self.prev_free_block.block_id if self.prev_free_block else None
        next_id = self.next_free_block.block_id if self.next_free_block else None
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"prev_free_block={prev_id}, next_free_block={next_id})"
        )
