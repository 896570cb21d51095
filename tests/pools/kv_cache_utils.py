"""Our own stand-in for a release's ``kv_cache_utils.py``, for the pool tests.

Written for these tests from the documented contract of vLLM's block and block hash (a
block id, a reference count, an optional hash key, two free-list links, a null flag;
``BlockHash`` is bytes and a hash key is the hash followed by the group id in 4 bytes).
No vLLM text is used. The loader cuts what ``block_pool.py`` imports out of this file with
``ast``, as it does a release's file; the tests append the fixture queue of
``tests/queues/good.py`` as ``FreeKVCacheBlockQueue`` (see ``tests/test_pool_loader.py``).
"""

from dataclasses import dataclass
from typing import NewType

from vllm.logger import init_logger

logger = init_logger(__name__)

BlockHash = NewType("BlockHash", bytes)
BlockHashWithGroupId = NewType("BlockHashWithGroupId", bytes)
#: Read by a vLLM import that nothing stands in for; never used by the pool.
from vllm.config import VllmConfig  # noqa: E402


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    """Key of a hash in one KV cache group: the hash, then the group id (4 bytes)."""
    return BlockHashWithGroupId(block_hash + group_id.to_bytes(4, "big"))


def unused_config_reader(config: VllmConfig) -> int:
    """Names a vLLM type in its annotation and body: cut only if the pool imports it."""
    return VllmConfig.block_size


@dataclass(slots=True)
class KVCacheBlock:
    """One block's metadata."""

    block_id: int
    ref_cnt: int = 0
    _block_hash: BlockHashWithGroupId | None = None
    prev_free_block: "KVCacheBlock | None" = None
    next_free_block: "KVCacheBlock | None" = None
    is_null: bool = False

    @property
    def block_hash(self) -> BlockHashWithGroupId | None:
        return self._block_hash

    @block_hash.setter
    def block_hash(self, value: BlockHashWithGroupId) -> None:
        if self._block_hash is not None:
            raise AssertionError("block already hashed")
        self._block_hash = value

    def reset_hash(self) -> None:
        self._block_hash = None
