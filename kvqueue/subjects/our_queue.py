"""This project's own free-block queue, and the check-free *floor* bound.

``FreeKVCacheBlockQueue`` is written from the documented contract of vLLM 0.32.0's
class of the same name (docs/design.md §1): the same public methods and attributes, the same
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

from kvqueue.subjects.stand_in_block import KVCacheBlock


class FreeKVCacheBlockQueue:
    """Doubly linked free list of ``KVCacheBlock`` objects, with sentinel head and tail.

    The links live in the blocks themselves (``prev_free_block``/``next_free_block``),
    so no Python object is allocated per operation; a block in the queue has both links
    set, a detached block has both ``None``.

    Why it is faster than upstream while doing the same work (each measured with the
    project's harness; see the issue 5 notes in the README):

    - ``popleft_n`` and ``append_n`` have straight-line paths for batches of one and
      two blocks (the common case in vLLM's allocator): no loop, iterator or
      ``list.append``, and every link read once into a local.
    - Upstream's ``is not None`` checks on links become *one* ``try`` around each fast
      path. Every read and the first store of a fast path fail with AttributeError on a
      ``None`` link before anything is changed, so on failure the state is untouched
      and the call is redone by :meth:`_popleft_n_exact`, which follows upstream step
      by step (same exceptions, same partial state). The valid path pays nothing for
      the checks on CPython >= 3.11 (zero-cost ``try``), and a ``try`` whose body ends
      in ``return`` needs no jump over the handler either.
    - The batch loop has no per-block assert (a ``None`` link raises AttributeError at
      the same point, and the handler turns it into upstream's AssertionError).
    - ``__slots__`` for the queue's three fields, and two separate ``= None`` stores
      rather than a chained assignment (CPython 3.11/3.12 fuse ``LOAD_CONST None;
      LOAD_FAST`` into one instruction, ``COPY`` is not fused).

    The count check ``num_free_blocks >= n`` of upstream's ``popleft_n`` is kept (an
    assertion that must fire without ``-O``); it is the main cost over the check-free
    :class:`FloorKVCacheBlockQueue`.

    One deliberate difference: ``popleft_n(1.0)`` (a non-int equal to 1) leaves an
    ``int`` count where upstream leaves a ``float`` of the same value, because the fast
    path subtracts the literal 1 (cheaper than subtracting ``n`` on CPython 3.11).

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
        if first is not self.fake_free_list_tail:
            try:
                # Fails on a None link before any change (first None, or its next None).
                nxt = first.next_free_block
                nxt.prev_free_block = head
                head.next_free_block = nxt
                first.prev_free_block = None
                first.next_free_block = None
                self.num_free_blocks -= 1
                return first
            except AttributeError:
                if first is not None and first.next_free_block is not None:
                    raise
        if first is self.fake_free_list_tail or first is None:
            assert self.num_free_blocks == 0, (
                f"num_free_blocks ({self.num_free_blocks}) is out of sync with the free list."
            )
            raise ValueError("No free blocks available")
        raise RuntimeError(
            "Invalid block found in popleft() which doesn't have a valid next_free_block"
        )

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Pop the first ``n`` free blocks and reduce ``num_free_blocks`` by ``n``."""
        if n == 1 and self.num_free_blocks >= 1:
            head = self.fake_free_list_head
            block = head.next_free_block
            try:
                # Upstream's order of stores (clear, then relink), so even a corrupted
                # chain (a block linked to itself) ends in upstream's state. A None block
                # fails before any change; a None next link fails after the clearing,
                # which upstream does too. Either way the call is redone upstream's way.
                nxt = block.next_free_block
                block.prev_free_block = None
                block.next_free_block = None
                nxt.prev_free_block = head
                head.next_free_block = nxt
                self.num_free_blocks -= 1
                return [block]
            except AttributeError:
                pass
            return self._popleft_n_exact(n)
        if n > 2 and (num := self.num_free_blocks) >= n:
            # Before the n == 2 test: one comparison less for every larger batch. The
            # count is read once (walrus), two instructions fewer than `-= n`.
            self.num_free_blocks = num - n
            head = self.fake_free_list_head
            curr = head.next_free_block
            ret = []
            try:
                for _ in range(n):
                    ret.append(curr)
                    last = curr
                    curr = curr.next_free_block
                    last.prev_free_block = None
                    last.next_free_block = None
            except AttributeError:
                # A None link, read where upstream asserts that it is not None, with the
                # same blocks already unlinked and the same count.
                assert curr is not None
                raise
            if curr is not None:
                head.next_free_block = curr
                curr.prev_free_block = head
            return ret
        if n == 2 and self.num_free_blocks >= 2:
            head = self.fake_free_list_head
            first = head.next_free_block
            try:
                # Reads and stores interleaved in upstream's loop order (see n == 1).
                second = first.next_free_block
                first.prev_free_block = None
                first.next_free_block = None
                nxt = second.next_free_block
                second.prev_free_block = None
                second.next_free_block = None
                nxt.prev_free_block = head
                head.next_free_block = nxt
                self.num_free_blocks -= 2
                return [first, second]
            except AttributeError:
                if first is not None and second is not None:
                    # The chain ends after these two (a None link): upstream pops both
                    # and skips the relink.
                    self.num_free_blocks -= 2
                    return [first, second]
            # A None first or second block: redo it upstream's way (clearing the first
            # block again changes nothing).
            return self._popleft_n_exact(n)
        return self._popleft_n_exact(n)

    def _popleft_n_exact(self, n: int) -> list[KVCacheBlock]:
        """``popleft_n`` step by step as the contract states it, for the rare cases.

        Reached when no fast path applies or one found a ``None`` link before changing
        anything: ``n <= 0`` or not an integer, too few free blocks counted, a broken
        chain. Every assertion, partial change and exception happens here in upstream's
        order, so the state afterwards is the one upstream leaves.
        """
        if n == 0:
            return []
        assert self.num_free_blocks >= n
        self.num_free_blocks -= n
        head = self.fake_free_list_head
        curr = head.next_free_block
        if n == 1:
            assert curr is not None
            nxt = curr.next_free_block
            curr.prev_free_block = None
            curr.next_free_block = None
            if nxt is not None:
                head.next_free_block = nxt
                nxt.prev_free_block = head
            return [curr]
        ret = []
        for _ in range(n):  # pops nothing for n < 0, raises TypeError for a non-integer
            assert curr is not None
            ret.append(curr)
            last = curr
            curr = curr.next_free_block
            last.prev_free_block = None
            last.next_free_block = None
        if curr is not None:
            head.next_free_block = curr
            curr.prev_free_block = head
        return ret

    def remove(self, block: KVCacheBlock) -> None:
        """Remove ``block`` from the middle of the queue and reduce ``num_free_blocks``."""
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        if prev_block is None or next_block is None:
            raise RuntimeError(f"remove() called on an invalid block: {block}")
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = None
        block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Put ``block`` at the end of the queue and increase ``num_free_blocks`` by 1."""
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        try:
            # The first store fails on a corrupted tail (None) before any change.
            last.next_free_block = block
            block.prev_free_block = last
            block.next_free_block = tail
            tail.prev_free_block = block
            self.num_free_blocks += 1
            return
        except AttributeError:
            if last is not None:
                raise
        raise RuntimeError("prev_free_block of fake_free_list_tail should always exist")

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
        tail = self.fake_free_list_tail
        last = tail.prev_free_block
        n = len(blocks)
        if n == 1:
            (block,) = blocks  # one UNPACK_SEQUENCE, cheaper than blocks[0]
            try:
                # The first store fails on a corrupted tail (None) before any change.
                last.next_free_block = block
                block.prev_free_block = last
                block.next_free_block = tail
                tail.prev_free_block = block
                self.num_free_blocks += 1
                return
            except AttributeError:
                assert last is not None, (
                    "prev_free_block of fake_free_list_tail should always exist"
                )
                raise
        if not n:
            return
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
        first.prev_free_block = None
        first.next_free_block = None
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
            block.prev_free_block = None
            block.next_free_block = None
            self.num_free_blocks -= 1
            return [block]
        if n == 2:
            first = head.next_free_block
            second = first.next_free_block
            nxt = second.next_free_block
            head.next_free_block = nxt
            nxt.prev_free_block = head
            first.prev_free_block = None
            first.next_free_block = None
            second.prev_free_block = None
            second.next_free_block = None
            self.num_free_blocks -= 2
            return [first, second]
        self.num_free_blocks -= n
        curr = head.next_free_block
        ret = []
        for _ in range(n):
            ret.append(curr)
            last = curr
            curr = curr.next_free_block
            last.prev_free_block = None
            last.next_free_block = None
        head.next_free_block = curr
        curr.prev_free_block = head
        return ret

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink an attached ``block``."""
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        prev_block.next_free_block = next_block
        next_block.prev_free_block = prev_block
        block.prev_free_block = None
        block.next_free_block = None
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
            (block,) = blocks
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
