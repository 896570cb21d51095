"""This project's own free-block queue, and the check-free *floor* bound.

``FreeKVCacheBlockQueue`` is written from the documented contract of vLLM 0.32.0's
class of the same name (DESIGN §1): the same public methods and attributes, the same
final state after every operation, the same exception types and messages on invalid
use (and the same partial state left behind), running on whatever ``KVCacheBlock``
class it is given. The validation gate checks all of that against the real release.

``FloorKVCacheBlockQueue`` does the same link surgery with every check removed. It is
not a candidate (it would hide caller bugs); it is the lower bound any
contract-preserving version could reach, shown in the report as a bound.

The loader executes each class on its own in a fresh namespace whose ``KVCacheBlock``
is the run's shared block class, so the classes must not use other module-level names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NoReturn

from kvqueue.block import KVCacheBlock


class FreeKVCacheBlockQueue:
    """Doubly linked free list of ``KVCacheBlock`` objects, with sentinel head and tail.

    The links live in the blocks themselves (``prev_free_block``/``next_free_block``),
    so no Python object is allocated per operation; a block in the queue has both links
    set, a detached block has both ``None``.

    Why it is faster than upstream while doing the same work:

    - ``__slots__``: attribute reads of the three fields skip the instance dict.
    - batches of one and two blocks (the common case in vLLM's allocator) are handled
      without a loop, an iterator or ``list.append``;
    - every link and sentinel is read once into a local.

    Parameters
    ----------
    blocks
        The blocks, in initial queue order.
    """

    __slots__ = ("fake_free_list_head", "fake_free_list_tail", "num_free_blocks")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        head = KVCacheBlock(block_id=-1)
        tail = KVCacheBlock(block_id=-1)
        prev = head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = tail
        tail.prev_free_block = prev
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail

    def popleft(self) -> KVCacheBlock:
        """Pop the first free block and reduce ``num_free_blocks`` by 1."""
        head = self.fake_free_list_head
        first = head.next_free_block
        if first is self.fake_free_list_tail:
            self._raise_empty()
        try:
            nxt = first.next_free_block
        except AttributeError:
            if first is None:
                self._raise_empty()
            raise
        try:
            # Store into nxt first: when nxt is None this fails before any change.
            nxt.prev_free_block = head
        except AttributeError:
            if nxt is None:
                raise RuntimeError(
                    "Invalid block found in popleft() which doesn't have a valid next_free_block"
                ) from None
            raise
        head.next_free_block = nxt
        first.prev_free_block = first.next_free_block = None
        self.num_free_blocks -= 1
        return first

    def _raise_empty(self) -> NoReturn:
        """Raise what popleft() raises on an empty queue (after checking the count)."""
        assert self.num_free_blocks == 0, (
            f"num_free_blocks ({self.num_free_blocks}) is out of sync with the free list."
        )
        raise ValueError("No free blocks available")

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Pop the first ``n`` free blocks and reduce ``num_free_blocks`` by ``n``."""
        if n == 1:
            num = self.num_free_blocks
            assert num >= 1
            self.num_free_blocks = num - 1
            head = self.fake_free_list_head
            block = head.next_free_block
            # Checks as zero-cost try blocks (CPython >= 3.11): the valid path pays
            # nothing, and the invalid path raises exactly what upstream raises, with or
            # without -O (the assert re-raises only when it is compiled in).
            try:
                nxt = block.next_free_block
            except AttributeError:
                assert block is not None
                raise
            block.prev_free_block = block.next_free_block = None
            try:
                # Store into nxt first: when nxt is None this fails before any change,
                # which is upstream's "skip the relink" outcome.
                nxt.prev_free_block = head
                head.next_free_block = nxt
            except AttributeError:
                if nxt is not None:
                    raise
            return [block]
        if n > 2:
            assert self.num_free_blocks >= n
            self.num_free_blocks -= n
            head = self.fake_free_list_head
            curr = head.next_free_block
            ret = []
            try:
                # No per-block `assert curr is not None`: reading None's link raises
                # AttributeError before this block is touched, and upstream's assert is
                # raised from there, with the same blocks already unlinked.
                for _ in range(n):
                    ret.append(curr)
                    nxt = curr.next_free_block
                    curr.prev_free_block = curr.next_free_block = None
                    curr = nxt
            except AttributeError:
                assert curr is not None
                raise
            if curr is not None:
                head.next_free_block = curr
                curr.prev_free_block = head
            return ret
        if n == 2:
            num = self.num_free_blocks
            assert num >= 2
            self.num_free_blocks = num - 2
            head = self.fake_free_list_head
            first = head.next_free_block
            assert first is not None
            second = first.next_free_block
            first.prev_free_block = first.next_free_block = None
            assert second is not None
            nxt = second.next_free_block
            second.prev_free_block = second.next_free_block = None
            if nxt is not None:
                head.next_free_block = nxt
                nxt.prev_free_block = head
            return [first, second]
        if n == 0:
            return []
        # n < 0 (or a non-integer): upstream's general path pops nothing but still
        # asserts, adds -n to the count and relinks the current first block.
        assert self.num_free_blocks >= n
        self.num_free_blocks -= n
        head = self.fake_free_list_head
        first = head.next_free_block
        for _ in range(n):  # raises TypeError for a non-integer n, like upstream
            break
        if first is not None:
            head.next_free_block = first
            first.prev_free_block = head
        return []

    def remove(self, block: KVCacheBlock) -> None:
        """Remove ``block`` from the middle of the queue and reduce ``num_free_blocks``."""
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        if prev_block is None or next_block is None:
            raise RuntimeError(f"remove() called on an invalid block: {block}")
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the end of the queue and increase ``num_free_blocks`` by 1."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        try:
            # First store into `last`: a corrupted tail (None) fails before any change.
            last.next_free_block = block
        except AttributeError:
            if last is None:
                raise RuntimeError(
                    "prev_free_block of fake_free_list_tail should always exist"
                ) from None
            raise
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put ``blocks`` at the front of the queue, in their order."""
        if len(blocks) == 0:
            return
        head = self.fake_free_list_head
        first = head.next_free_block
        assert first is not None, "next_free_block of fake_free_list_head should always exist"
        prev = head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put ``blocks`` at the end of the queue, in their order."""
        n = len(blocks)
        if n == 1:
            tail = self.fake_free_list_tail
            last = tail.prev_free_block
            block = blocks[0]
            try:
                # First store into `last`: a corrupted tail (None) fails before any change.
                last.next_free_block = block
            except AttributeError:
                assert last is not None, (
                    "prev_free_block of fake_free_list_tail should always exist"
                )
                raise
            block.prev_free_block = last
            block.next_free_block = tail
            tail.prev_free_block = block
            self.num_free_blocks += 1
            return
        if not n:
            return
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        assert last is not None, "prev_free_block of fake_free_list_tail should always exist"
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += n

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Return all free blocks in queue order (mainly for tests)."""
        curr = self.fake_free_list_head.next_free_block
        if curr is None:
            raise RuntimeError("next_free_block of fake_free_list_head should always exist")
        ret = []
        nxt = curr.next_free_block
        # The tail sentinel is the only block in the chain whose next link is None.
        while nxt is not None:
            ret.append(curr)
            curr = nxt
            nxt = curr.next_free_block
        return ret

    def iter_blocks_after(self, cursor: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
        """Yield the free blocks after ``cursor`` (from the front when ``None``)."""
        tail = self.fake_free_list_tail
        if cursor is None:
            curr = self.fake_free_list_head.next_free_block
        else:
            curr = cursor.next_free_block
        while curr is not None and curr is not tail:
            yield curr
            curr = curr.next_free_block


class FloorKVCacheBlockQueue:
    """The same operations as :class:`FreeKVCacheBlockQueue` with every check removed.

    A lower bound for speed, not a candidate: it assumes every call is valid (a
    non-empty queue for pops, attached blocks for ``remove``, intact sentinels).
    """

    __slots__ = ("fake_free_list_head", "fake_free_list_tail", "num_free_blocks")

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        head = KVCacheBlock(block_id=-1)
        tail = KVCacheBlock(block_id=-1)
        prev = head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = tail
        tail.prev_free_block = prev
        self.fake_free_list_head = head
        self.fake_free_list_tail = tail

    def popleft(self) -> KVCacheBlock:
        """Pop the first free block (the queue must not be empty)."""
        head = self.fake_free_list_head
        first = head.next_free_block
        nxt = first.next_free_block
        head.next_free_block = nxt
        nxt.prev_free_block = head
        first.prev_free_block = first.next_free_block = None
        self.num_free_blocks -= 1
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Pop the first ``n`` free blocks (``n`` must not exceed the free count)."""
        head = self.fake_free_list_head
        if n == 1:
            block = head.next_free_block
            nxt = block.next_free_block
            head.next_free_block = nxt
            nxt.prev_free_block = head
            block.prev_free_block = block.next_free_block = None
            self.num_free_blocks -= 1
            return [block]
        if n == 2:
            first = head.next_free_block
            second = first.next_free_block
            nxt = second.next_free_block
            head.next_free_block = nxt
            nxt.prev_free_block = head
            first.prev_free_block = first.next_free_block = None
            second.prev_free_block = second.next_free_block = None
            self.num_free_blocks -= 2
            return [first, second]
        self.num_free_blocks -= n
        curr = head.next_free_block
        ret = []
        for _ in range(n):
            ret.append(curr)
            nxt = curr.next_free_block
            curr.prev_free_block = curr.next_free_block = None
            curr = nxt
        head.next_free_block = curr
        curr.prev_free_block = head
        return ret

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink an attached ``block``."""
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Append a detached ``block``."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        last.next_free_block = block
        block.prev_free_block = last
        block.next_free_block = tail
        tail.prev_free_block = block
        self.num_free_blocks += 1

    def prepend_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put detached ``blocks`` at the front, in their order."""
        head = self.fake_free_list_head
        first = head.next_free_block
        prev = head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def append_n(self, blocks: list[KVCacheBlock]) -> None:
        """Put detached ``blocks`` at the end, in their order."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        if len(blocks) == 1:
            block = blocks[0]
            block.prev_free_block = last
            last.next_free_block = block
            block.next_free_block = tail
            tail.prev_free_block = block
            self.num_free_blocks += 1
            return
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = tail
        tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Return all free blocks in queue order."""
        return list(self.iter_blocks_after(None))

    def iter_blocks_after(self, cursor: KVCacheBlock | None) -> Iterator[KVCacheBlock]:
        """Yield the free blocks after ``cursor`` (from the front when ``None``)."""
        tail = self.fake_free_list_tail
        curr = (self.fake_free_list_head if cursor is None else cursor).next_free_block
        while curr is not None and curr is not tail:
            yield curr
            curr = curr.next_free_block
