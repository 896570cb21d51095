"""Our own small ``BlockPool`` for the pool tests, shaped like vLLM's documented API.

Written for these tests from the contract the pool gate checks (docs/appendix-pool.md):
the null block is block 0, taken at construction and never queued; ``get_new_blocks``
takes from the front of the free queue, evicting a cached block's hash; ``free_blocks``
puts blocks whose count drops to 0 back, uncached ones at the front and cached ones at
the back; ``touch`` takes a flat sequence; ``cache_full_blocks`` reads the request's
``block_hashes``. No vLLM text is used.
"""

from collections.abc import Iterable, Sequence

from vllm.distributed.kv_events import BlockRemoved
from vllm.logger import init_logger
from vllm.v1.core.kv_cache_utils import (
    BlockHash,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    make_block_hash_with_group_id,
)
from vllm.v1.request import Request

logger = init_logger(__name__)


class BlockPool:
    """A free-block pool with a prefix-cache hash map."""

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool,
        hash_block_size: int,
        enable_kv_cache_events: bool = False,
    ) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        # hash key -> {block id: block}
        self.cached_block_hash_to_block: dict[bytes, dict[int, KVCacheBlock]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.enable_kv_cache_events = enable_kv_cache_events
        self.events: list[BlockRemoved] = []

    def get_cached_block(
        self, block_hash: BlockHash, kv_cache_group_ids: list[int]
    ) -> list[KVCacheBlock] | None:
        found = []
        for group in kv_cache_group_ids:
            by_id = self.cached_block_hash_to_block.get(
                make_block_hash_with_group_id(block_hash, group)
            )
            if not by_id:
                return None
            found.append(next(iter(by_id.values())))
        return found

    def cache_full_blocks(
        self,
        request: Request,
        blocks: list[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        block_size: int,
        kv_cache_group_id: int,
    ) -> None:
        for index in range(num_cached_blocks, num_full_blocks):
            block = blocks[index]
            if block.is_null:
                continue
            key = make_block_hash_with_group_id(request.block_hashes[index], kv_cache_group_id)
            block.block_hash = key
            self.cached_block_hash_to_block.setdefault(key, {})[block.block_id] = block

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        if num_blocks > self.get_num_free_blocks():
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        taken = self.free_block_queue.popleft_n(num_blocks)
        for block in taken:
            if self.enable_caching:
                self._maybe_evict_cached_block(block)
            block.ref_cnt += 1
        return taken

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        key = block.block_hash
        if key is None:
            return False
        by_id = self.cached_block_hash_to_block.get(key)
        if by_id is None:
            return False
        block.reset_hash()
        by_id.pop(block.block_id, None)
        if not by_id:
            del self.cached_block_hash_to_block[key]
        return True

    def touch(self, blocks: Sequence[KVCacheBlock]) -> None:
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                self.free_block_queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        first, last = [], []
        for block in ordered_blocks:
            if block.is_null:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                (first if block.block_hash is None else last).append(block)
        self.free_block_queue.prepend_n(first)
        self.free_block_queue.append_n(last)

    def reset_prefix_cache(self) -> bool:
        if self.num_gpu_blocks - self.get_num_free_blocks() != 1:
            logger.warning("blocks still in use: prefix cache not reset")
            return False
        self.cached_block_hash_to_block = {}
        for block in self.blocks:
            block.reset_hash()
        return True

    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        return 1.0 - self.get_num_free_blocks() / (self.num_gpu_blocks - 1)
