"""Part 2 of the gate: the model check at every timed queue size (docs/design.md §3).

The model check again, once per queue size that is timed (by default the pools of
:data:`kvqueue.schema.POOLS` and the smallest pool ``make bench`` accepts,
:data:`kvqueue.schema.MIN_POOL`), starting from the full pool in block-id order as the
worker builds it, with batches of the timed lengths (1, 2, 8, 32, and N of every
``allocN``/``popleftN`` the run measures: ``batches``) and up to :data:`MAX_BATCH`. A
length above :data:`MAX_BATCH` (``alloc500``) is not drawn at random: a schedule forces
it on the next ``popleft_n`` and the next ``append_n``/``prepend_n`` after it every so many
operations, within a budget of blocks (:func:`long_batch_period`), so the gate pops and
gives back N blocks (as many as the queue holds, on a smaller one) at every size. A
variant whose behaviour depends on queue length, block id or batch length beyond the
small queues of part 1 is caught here. The whole-structure check is
O(size), so it runs only every ``size // 20`` operations and at the end (with
``get_all_free_blocks`` and a full ``iter_blocks_after``); after each operation the
count, the sentinels and the links of every block the operation touched (and of their
old and new neighbours) are compared with the model.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

import itertools
import operator
import random
from collections.abc import Sequence
from typing import Any

from kvqueue import schema
from kvqueue.gate.model_check import DEFAULT_OPS, DEFAULT_SEED
from kvqueue.gate.naming import LINKS, ValidationError, ends, expected_got, first_last, ids, namer
from kvqueue.sources.loader import Variant
from kvqueue.subjects import queue_cases

# Why part 2: the small queues of part 1 (kvqueue.gate.model_check) never hold more than 52
# blocks, so it never sees a count >= 53 or a block id >= 52, and its batches are mostly
# 0-3 blocks: at the default seed 131 of its 9,157 popleft_n calls pop more than 16
# blocks, 7 pop 32, and none of its 11,389 append_n calls gives back 32 (the alloc32
# batch). The timed pools hold 2,048 and 100,000 blocks, so what a variant does
# differently there would go unseen without this part.

#: Queue sizes of part 2 by default: the smallest accepted pool and every timed pool.
DEFAULT_SIZES: tuple[int, ...] = (schema.MIN_POOL, *schema.POOLS)
#: Batch lengths that are timed by default: the ``allocK`` cases and the batches of
#: ``mix`` (a run's own cases add theirs: ``batches``).
TIMED_BATCHES: tuple[int, ...] = queue_cases.timed_batches(schema.CASES)
#: Longest batch of part 2: the longest timed batch and a bit beyond, so a threshold
#: just above it is crossed too.
MAX_BATCH = max(TIMED_BATCHES) + 8
#: Part 2 runs ``ops // SIZE_OPS_DIVISOR`` operations per size (15,000 at the default
#: 60,000), so ``--ops`` scales the whole gate. Measured on the 2-vCPU dev box (CPython
#: 3.11.7, quiet machine): ~0.3 s per variant at 64 blocks, ~0.35 s at 2,048 and ~0.5 s
#: at 100,000 (0.11-0.16 s of it building the pool), i.e. 1.07-1.13 s on top of part 1's
#: ~0.85 s; 1.2-1.9 s on CPython 3.10-3.13 while other jobs shared the machine.
SIZE_OPS_DIVISOR = 4
# Blocks held out of the queue before part 2 stops popping: a few of the longest batches
# (a pop may overshoot by one batch). At 100,000 blocks the count then stays near the
# full pool, as in the timed cases (which pop and give back at most 32); at 64 blocks
# it covers every count from 0 to 64.
_MAX_HELD = 4 * MAX_BATCH
#: Blocks the forced long batches (longer than :data:`MAX_BATCH`) may pop per size at the
#: default 15,000 operations (scaled with the operations): 200,000 is ~0.4 s per
#: variant and size for ``alloc500`` (its pops and give-backs, checked block by block).
LONG_BATCH_BLOCKS = 200_000
#: Forced long pops per size and length at least (a 100,000-block batch still gets them).
MIN_LONG_BATCHES = 8
# A whole-structure check every ``size // _WALK_DIVISOR`` operations. A walk costs O(size)
# (33 ms at 100,000 blocks, 0.66 ms at 2,048, with get_all_free_blocks and a full
# iter_blocks_after), so its amortized cost is the same at every size: ~7 us per
# operation (11 us at 64 blocks), against ~14 us for the operation and its cheap check.
# An O(size) check after EVERY operation would cost ~500 s per variant at 100,000.
_WALK_DIVISOR = 20


class _SizedRun:
    """One variant under the model check at one timed queue size (part 2).

    The model is a doubly linked list of block *indices* kept in two plain lists
    (``prv``/``nxt``; index ``size`` is the head sentinel, ``size + 1`` the tail,
    ``size + 2`` means "no link"), so every model update is O(1) like the queue's and a
    100,000-block queue costs no more per operation than a small one. ``objs`` maps an
    index to the object the queue must hold there, so a link is checked with one ``is``.
    """

    def __init__(
        self,
        variant: Variant,
        size: int,
        rng: random.Random,
        batches: tuple[int, ...] = (),
        ops: int = 0,
    ) -> None:
        self.v = variant
        self.size = size
        self.rng = rng
        # The timed lengths drawn at random (the defaults, then the run's short ones)
        # and the long ones forced by a schedule: every ``long_every`` operations the
        # next pop, and then the next give-back, take the next long length.
        short = [b for b in batches if b <= MAX_BATCH and b not in TIMED_BATCHES]
        self.timed = (*TIMED_BATCHES, *sorted(set(short)))
        self.long = tuple(sorted({b for b in batches if b > MAX_BATCH}))
        self.long_every = long_batch_period(self.long, ops)
        self.long_next = 0
        self.force_pop = self.force_give = 0
        self.head_i, self.tail_i, self.nil = size, size + 1, size + 2
        self.op_index = 0
        self.passed = 0
        self.where = f"__init__({size} blocks)"
        self.count = size
        self.count_before = size  # until the first operation: the pool given to __init__
        self.state = "the pool"  # what ``count_before`` describes
        self.held: list[int] = []  # indices of blocks out of the queue, for random picks
        self.held_pos = [-1] * size  # position of each index in ``held``, -1 when free
        self.dirty: list[int] = []  # indices whose links the last operation changed

    def fail(self, what: str, expected: Any, got: Any, fields: str = "") -> None:
        raise ValidationError(
            self.passed,
            f"size {self.size}: {self.where}: {what}\n"
            + expected_got(expected, got, fields)
            + f"    {self.state}: {self.count_before:,} blocks free, "
            f"{self.size - self.count_before:,} out of the queue",
        )

    def start(self) -> None:
        """Build the full pool in block-id order (as the worker does) and check it."""
        size, nil = self.size, self.nil
        blocks = [self.v.block_cls(block_id=i) for i in range(size)]
        self.q = self.v.queue_cls(list(blocks))
        # Head-tail queues (before vLLM 0.10.0) have no sentinel objects: the model's
        # head and tail indices then stand for None, the first block's prev and the
        # last block's next.
        self.head, self.tail = ends(self.v, self.q)
        self.objs: list[Any] = [*blocks, self.head, self.tail, None]
        self.name = namer(self.q, self.head, self.tail)
        self.prv = [nil] * (size + 3)
        self.nxt = [nil] * (size + 3)
        chain = [self.head_i, *range(size), self.tail_i]
        for a, b in itertools.pairwise(chain):
            self.nxt[a] = b
            self.prv[b] = a
        self.walk()

    # -- the model ---------------------------------------------------------------

    def _unlink(self, i: int) -> None:
        prv, nxt = self.prv, self.nxt
        p, n = prv[i], nxt[i]
        nxt[p], prv[n] = n, p
        prv[i] = nxt[i] = self.nil
        self.dirty += (p, i, n)
        self.held_pos[i] = len(self.held)
        self.held.append(i)
        self.count -= 1

    def _link_before(self, i: int, at: int) -> None:
        prv, nxt = self.prv, self.nxt
        p = prv[at]
        nxt[p], prv[i], nxt[i], prv[at] = i, p, at, i
        self.dirty += (p, i, at)
        # Swap-remove from ``held``: O(1), and ``held`` stays indexable for random picks.
        pos, last = self.held_pos[i], self.held.pop()
        if last != i:
            self.held[pos] = last
            self.held_pos[last] = pos
        self.held_pos[i] = -1
        self.count += 1

    def _batch(self, available: int, forced: int = 0) -> int:
        # A forced long length, else: half the batches have a timed length, half any
        # length up to MAX_BATCH.
        if forced:
            return min(forced, available)
        rng = self.rng
        k = rng.choice(self.timed) if rng.random() < 0.5 else rng.randint(0, MAX_BATCH)
        return min(k, available)

    def _schedule(self) -> None:
        """Every ``long_every`` operations: the next ``popleft_n`` takes the next long
        length (in turn), and the give-back after it the same."""
        if self.long and self.op_index % self.long_every == 0:
            self.force_pop = self.long[self.long_next % len(self.long)]
            self.long_next += 1

    def _random_free(self) -> int:
        # Rejection sampling: at least (size - _MAX_HELD) / size of the blocks are free
        # for the timed pools, so this takes ~1 draw there (<= size draws on average).
        rng, nxt, nil, size = self.rng, self.nxt, self.nil, self.size
        while True:
            i = rng.randrange(size)
            if nxt[i] != nil:
                return i

    # -- one operation -----------------------------------------------------------

    def step(self) -> None:
        """Run one random valid operation on queue and model, then the cheap check."""
        rng, q, objs, nxt = self.rng, self.q, self.objs, self.nxt
        self.count_before, self.state = self.count, "before the operation"
        self.dirty = []
        self._schedule()
        held = len(self.held)
        if rng.random() < 0.1:
            op = "iter" if self.v.can("iter_blocks_after") else "skip"
        elif held and (not self.count or held >= min(_MAX_HELD, self.size) or rng.random() < 0.5):
            op = rng.choice(("append", "append_n", "append_n", "append_n", "prepend_n"))
            if op == "prepend_n" and not self.v.can("prepend_n"):
                op = "append_n"
        else:
            op = rng.choice(("popleft", "popleft_n", "popleft_n", "popleft_n", "remove"))
        if op == "popleft":
            self.where = f"operation #{self.op_index} popleft()"
            want = nxt[self.head_i]
            got = q.popleft()
            if got is not objs[want]:
                self.fail("popleft() returned", want, self.name(got))
            self._unlink(want)
        elif op == "popleft_n":
            forced, self.force_pop = self.force_pop, 0
            k = self._batch(self.count, forced)
            # A forced pop arms the next give-back with its length.
            self.force_give = forced or self.force_give
            self.where = f"operation #{self.op_index} popleft_n({k})"
            want_i, j = [], nxt[self.head_i]
            for _ in range(k):
                want_i.append(j)
                j = nxt[j]
            got = q.popleft_n(k)
            if (
                type(got) is not list
                or len(got) != k
                or any(map(operator.is_not, got, [objs[i] for i in want_i]))
            ):
                self.fail(
                    "popleft_n returned",
                    want_i,
                    got if type(got) is not list else ids(got),
                )
            for i in want_i:
                self._unlink(i)
        elif op == "remove":
            i = self._random_free()
            self.where = f"operation #{self.op_index} remove(block {i})"
            q.remove(objs[i])
            self._unlink(i)
        elif op == "append":
            i = self.held[rng.randrange(held)]
            self.where = f"operation #{self.op_index} append(block {i})"
            q.append(objs[i])
            self._link_before(i, self.tail_i)
        elif op in ("append_n", "prepend_n"):
            k = self._batch(held, self.force_give)
            self.force_give = 0
            batch = [self.held[p] for p in rng.sample(range(held), k)]
            self.where = f"operation #{self.op_index} {op}({batch})"
            getattr(q, op)([objs[i] for i in batch])
            at = self.tail_i if op == "append_n" else nxt[self.head_i]
            for i in batch:
                self._link_before(i, at)
        elif op == "iter":
            self._iter()
        self.check_touched()
        # A skipped draw (no iter_blocks_after) checked nothing: it is not counted.
        if op != "skip":
            self.passed += 1

    def _iter(self) -> None:
        """``iter_blocks_after`` from the start, a random block or one near the tail."""
        rng, nxt, prv = self.rng, self.nxt, self.prv
        where = rng.choice(("start", "random", "end")) if self.count else "start"
        if where == "start":
            cursor = self.head_i
        elif where == "random":
            cursor = self._random_free()
        else:
            cursor = self.tail_i
            for _ in range(min(self.count, rng.randint(1, 3))):
                cursor = prv[cursor]
        cursor_obj = None if cursor == self.head_i else self.objs[cursor]
        self.where = f"operation #{self.op_index} iter_blocks_after({self.name(cursor_obj)})"
        # At most MAX_BATCH blocks are compared, so iterating costs O(1) at any size;
        # two extra are read at the tail so that running past it shows.
        want, j = [], nxt[cursor]
        while j != self.tail_i and len(want) < MAX_BATCH:
            want.append(j)
            j = nxt[j]
        limit = len(want) + 2 if j == self.tail_i else len(want)
        got = list(itertools.islice(self.q.iter_blocks_after(cursor_obj), limit))
        if len(got) != len(want) or any(map(operator.is_not, got, [self.objs[i] for i in want])):
            self.fail("iter_blocks_after yielded", want, ids(got))

    # -- the checks --------------------------------------------------------------

    def check_touched(self) -> None:
        """O(batch): sentinels, count, and the links of every block the op touched."""
        q, objs, prv, nxt, name = self.q, self.objs, self.prv, self.nxt, self.name
        if self.head is None:  # head-tail structure: the ends are two attributes
            first, last = q.free_list_head, q.free_list_tail
            if first is not objs[nxt[self.head_i]] or last is not objs[prv[self.tail_i]]:
                self.fail(
                    "the two ends",
                    (name(objs[nxt[self.head_i]]), name(objs[prv[self.tail_i]])),
                    (name(first), name(last)),
                    "(free_list_head, free_list_tail)",
                )
        elif q.fake_free_list_head is not self.head or q.fake_free_list_tail is not self.tail:
            self.fail("a sentinel object was replaced", "same sentinels", "new objects")
        for i in dict.fromkeys(self.dirty):
            if i >= self.size and self.head is None:
                continue  # no sentinel object: its links were checked as the two ends
            block = objs[i]
            if block.prev_free_block is objs[prv[i]] and block.next_free_block is objs[nxt[i]]:
                continue
            got = (name(block.prev_free_block), name(block.next_free_block))
            if prv[i] == self.nil and i < self.size:
                what = f"block {i} is not in the queue but its links are not cleared"
            else:
                what = f"links of {name(block)}"
            self.fail(what, (name(objs[prv[i]]), name(objs[nxt[i]])), got, LINKS)
        if q.num_free_blocks != self.count:
            self.fail("num_free_blocks", self.count, q.num_free_blocks)

    def walk(self) -> None:
        """O(size): the whole structure, as part 1 checks it after every operation."""
        q, objs, prv, nxt, name = self.q, self.objs, self.prv, self.nxt, self.name
        tail_i = self.tail_i
        self.where = f"whole-structure check after operation #{self.op_index}"
        self.count_before, self.state = self.count, "model at the check"
        if self.head is not None and self.head.prev_free_block is not None:
            self.fail("head sentinel has a prev link", None, name(self.head.prev_free_block))
        if self.tail is not None and self.tail.next_free_block is not None:
            self.fail("tail sentinel has a next link", None, name(self.tail.next_free_block))
        order = []
        first, last = first_last(self.v, q)
        node, j, pos = first, nxt[self.head_i], 0
        while j != tail_i:
            want = objs[j]
            if node is not want:
                self.fail(f"forward links: block at position {pos:,}", j, name(node))
            order.append(want)
            node, j, pos = node.next_free_block, nxt[j], pos + 1
        if node is not self.tail:
            self.fail("forward links: after the last block", "TAIL", name(node))
        node, j, pos = last, prv[tail_i], self.count - 1
        while j != self.head_i:
            if node is not objs[j]:
                self.fail(f"backward links: block at position {pos:,}", j, name(node))
            node, j, pos = node.prev_free_block, prv[j], pos - 1
        if node is not self.head:
            self.fail("backward links: before the first block", "HEAD", name(node))
        if q.num_free_blocks != self.count:
            self.fail("num_free_blocks", self.count, q.num_free_blocks)
        for i in self.held:
            block = objs[i]
            if block.prev_free_block is not None or block.next_free_block is not None:
                self.fail(
                    f"block {i} is not in the queue but its links are not cleared",
                    (None, None),
                    (name(block.prev_free_block), name(block.next_free_block)),
                )
        self.where = f"get_all_free_blocks() after operation #{self.op_index}"
        got = q.get_all_free_blocks()
        if type(got) is not list:
            self.fail("get_all_free_blocks() returned", "a list", type(got).__name__)
        for pos, (a, b) in enumerate(zip(got, order, strict=False)):
            if a is not b:
                self.fail(f"get_all_free_blocks()[{pos:,}]", name(b), name(a))
        if len(got) != len(order):
            self.fail("get_all_free_blocks() returned", f"{len(order):,} blocks", len(got))
        if not self.v.can("iter_blocks_after"):
            return
        # Operations compare at most MAX_BATCH blocks of iter_blocks_after; the whole
        # iteration is compared here (bounded, so a cycle fails instead of hanging).
        self.where = f"iter_blocks_after(None) after operation #{self.op_index}"
        got = list(itertools.islice(q.iter_blocks_after(None), len(order) + 2))
        for pos, (a, b) in enumerate(zip(got, order, strict=False)):
            if a is not b:
                self.fail(f"iter_blocks_after(None) block {pos:,}", name(b), name(a))
        if len(got) != len(order):
            self.fail("iter_blocks_after(None) yielded", f"{len(order):,} blocks", len(got))


def long_batch_period(lengths: Sequence[int], ops: int) -> int:
    """Operations between two forced long batches: the long ``lengths`` share
    :data:`LONG_BATCH_BLOCKS` per 15,000 operations (scaled with ``ops``), each length
    forced at least :data:`MIN_LONG_BATCHES` times, at most every 4th operation."""
    if not lengths:
        return 0
    default = DEFAULT_OPS // SIZE_OPS_DIVISOR
    draws = sum(max(MIN_LONG_BATCHES, LONG_BATCH_BLOCKS * ops // default // n) for n in lengths)
    return max(4, ops // max(1, draws))


def size_check(
    variant: Variant,
    size: int,
    ops: int = DEFAULT_OPS // SIZE_OPS_DIVISOR,
    seed: int = DEFAULT_SEED,
    batches: Sequence[int] = (),
) -> int:
    """Run the model check (part 2) on a queue of ``size`` blocks.

    The queue starts as the worker's pool does: ``size`` blocks with ids 0..size-1, all
    free, in id order. Random operations then pop and give back blocks (batches of the
    timed lengths and up to :data:`MAX_BATCH`; longer ``batches`` forced by a schedule,
    see the module docstring), remove random free blocks and iterate, keeping at most
    ``4 * MAX_BATCH`` blocks out of the queue (a forced long pop may take more: the
    next operations give them back).

    Parameters
    ----------
    variant
        The queue under test.
    size
        Blocks in the pool (>= 1).
    ops
        Number of random operations.
    seed
        Seed of the gate; each size gets its own sequence derived from it.
    batches
        Further batch lengths the run times (N of its ``allocN`` and ``popleftN``:
        :func:`kvqueue.subjects.queue_cases.timed_batches`); the default lengths and a
        default run's (1, 2, 8, 32) draw the same operations as none.

    Returns
    -------
    int
        Operations checked.

    Raises
    ------
    ValidationError
        At the first divergence, with the size, operation index, expected and got.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"queue sizes must be whole numbers >= 1, got {size!r}")
    # A str seed is hashed with SHA-512 by random.seed: stable across runs and versions.
    run = _SizedRun(variant, size, random.Random(f"{seed}/{size}"), tuple(batches), ops)
    every = max(1, size // _WALK_DIVISOR)
    try:
        run.start()
        while run.op_index < ops:
            run.op_index += 1
            run.step()
            if run.op_index % every == 0:
                run.walk()
        if run.op_index % every:
            run.walk()
    except ValidationError:
        raise
    except Exception as exc:
        run.fail("valid operation raised", "no exception", f"{type(exc).__name__}: {exc}")
    return run.passed  # skipped draws excluded
