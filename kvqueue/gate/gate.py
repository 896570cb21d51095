"""The validation gate (docs/design.md §3): nothing is timed until every variant passes.

1. *Model check*: each variant runs a long seeded sequence of random valid operations
   against a plain Python list model; after EVERY operation the whole structure is
   compared: order, count, forward and backward links, sentinels, detached blocks,
   ``get_all_free_blocks`` and ``iter_blocks_after``. These queues are small (at most
   40 blocks + 12 spares) so that edge cases (empty, one block, popping all) are frequent.
2. *Timed sizes*: the model check again, once per queue size that is timed (by default
   the pools of :data:`kvqueue.schema.POOLS` and the smallest pool ``make bench``
   accepts), starting from the full pool in block-id order as the worker builds it, with
   batches of the timed lengths (1, 2, 8, 32) and up to :data:`MAX_BATCH`. A variant
   whose behaviour depends on queue length, block id or batch length beyond the small
   queues of part 1 is caught here. The whole-structure check is O(size), so it runs only
   every ``size // 20`` operations and at the end (with ``get_all_free_blocks`` and a
   full ``iter_blocks_after``); after each operation the count, the sentinels and the
   links of every block the operation touched (and of their old and new neighbours) are
   compared with the model.
3. *Invalid operations*: a fixed set of invalid or edge-case calls (pops beyond the free
   count, removing detached blocks, corrupted sentinels, ...) must raise the same
   exception type and message in every candidate as in the baseline, return the same
   value, and leave exactly the same links and count behind.

A failure is reported as the first diverging operation, expected vs got.

Standard library only: the runner executes this under the interpreter being measured.
"""

from __future__ import annotations

import itertools
import operator
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvqueue import schema
from kvqueue.schema import MIN_POOL
from kvqueue.sources.loader import QUEUE_METHODS, STRUCTURE_HEAD_TAIL, Variant
from kvqueue.subject import cases

DEFAULT_OPS = 60_000
DEFAULT_SEED = 20261129
# Small pools make edge cases (empty queue, one block, popping everything) frequent.
_MAX_QUEUE = 40
_MAX_SPARE = 12
_EPISODE_OPS = 400

# Timed sizes (part 2). The small queues above never hold more than 52 blocks, so part 1
# never sees a count >= 53 or a block id >= 52, and its batches are mostly 0-3 blocks:
# at the default seed 131 of its 9,157 popleft_n calls pop more than 16 blocks, 7 pop 32,
# and none of its 11,389 append_n calls gives back 32 (the alloc32 batch). The timed
# pools hold 2,048 and 100,000 blocks, so what a variant does differently there would
# go unseen without this part.

#: Queue sizes of part 2 by default: the smallest accepted pool and every timed pool.
DEFAULT_SIZES: tuple[int, ...] = (MIN_POOL, *schema.POOLS)
#: Batch lengths that are timed: the ``allocK`` cases and the batches of ``mix``.
TIMED_BATCHES: tuple[int, ...] = tuple(
    sorted({*cases.MIX_SIZES, *(int(c[5:]) for c in schema.CASES if c.startswith("alloc"))})
)
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
# A whole-structure check every ``size // _WALK_DIVISOR`` operations. A walk costs O(size)
# (33 ms at 100,000 blocks, 0.66 ms at 2,048, with get_all_free_blocks and a full
# iter_blocks_after), so its amortized cost is the same at every size: ~7 us per
# operation (11 us at 64 blocks), against ~14 us for the operation and its cheap check.
# An O(size) check after EVERY operation would cost ~500 s per variant at 100,000.
_WALK_DIVISOR = 20


class ValidationError(AssertionError):
    """A variant broke the contract; the message says where and how.

    ``passed`` counts the model-check operations that passed before the failure.
    """

    def __init__(self, passed: int, message: str) -> None:
        super().__init__(message)
        self.passed = passed

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class GateResult:
    """Outcome of the gate for one variant."""

    label: str
    ok: bool
    ops_checked: int
    invalid_compared: int
    sha256: str
    seconds: float
    error: str | None = None
    role: str = "candidate"
    #: Queue sizes whose timed-size run (part 2) passed completely, in the order run.
    sizes: tuple[int, ...] = ()
    #: Operations of part 2 that passed, over all sizes.
    size_ops_checked: int = 0
    #: Seconds spent in part 2 (included in ``seconds``).
    size_seconds: float = 0.0
    #: The variant's adapter (``loader.ADAPTER_POPLEFT_LOOP``) or None.
    adapter: str | None = None
    #: Invalid-operation scenarios not compared (no variant shares them).
    invalid_skipped: int = 0
    #: Labels of the variants the compared scenarios were compared with (empty when
    #: that was the baseline alone).
    invalid_references: tuple[str, ...] = ()
    #: What the gate skipped or ran through an adapter, one sentence each.
    skipped: tuple[str, ...] = ()
    #: With ``invalid="record"``: the first line of each differing scenario.
    invalid_differs: tuple[str, ...] = ()

    def line(self) -> str:
        """One human-readable line, as printed by ``python -m kvqueue validate``."""
        status = "PASS" if self.ok else "FAIL"
        invalid = {
            "baseline": f"{self.invalid_compared} invalid ops (reference)",
            "bound": "invalid ops skipped (bound)",
        }.get(self.role, f"{self.invalid_compared} invalid ops compared")

        sized = f"+{self.size_ops_checked:,} at sizes {'/'.join(map(str, self.sizes)) or '-'}"
        return (
            f"{status}  {self.label:<16} {self.ops_checked:>7,} ops checked  {sized:<34} "
            f"{invalid:<32} sha256 {self.sha256}  {self.seconds:5.1f} s"
        )

    def notes(self) -> list[str]:
        """What was skipped or adapted (printed under :meth:`line`), one line each."""
        notes = [f"note: {n}" for n in self.skipped]
        if self.role == "candidate" and self.invalid_references:
            notes.append(f"note: invalid ops compared with {', '.join(self.invalid_references)}")
        notes += [f"differs (recorded, not refused): {d}" for d in self.invalid_differs]
        return notes


# --------------------------------------------------------------------------- naming


def ends(variant: Variant, q: Any) -> tuple[Any, Any]:
    """The queue's two end markers: its sentinel blocks, or ``(None, None)`` for the
    head-tail structure (whose first block's ``prev`` and last block's ``next`` are None)."""
    if variant.structure == STRUCTURE_HEAD_TAIL:
        return None, None
    return q.fake_free_list_head, q.fake_free_list_tail


def first_last(variant: Variant, q: Any) -> tuple[Any, Any]:
    """The first and last free block (the end markers themselves when empty)."""
    if variant.structure == STRUCTURE_HEAD_TAIL:
        return q.free_list_head, q.free_list_tail
    return q.fake_free_list_head.next_free_block, q.fake_free_list_tail.prev_free_block


def _namer(q: Any, head: Any = "sentinels", tail: Any = None) -> Callable[[Any], Any]:
    """Return a function naming a block: its id, 'HEAD'/'TAIL' for sentinels, None."""
    if head == "sentinels":
        head, tail = q.fake_free_list_head, q.fake_free_list_tail

    def name(block: Any) -> Any:
        if block is None:
            return None
        if block is head:
            return "HEAD"
        if block is tail:
            return "TAIL"
        return getattr(block, "block_id", repr(block))

    return name


def _ids(blocks: Any) -> list[Any]:
    return [getattr(b, "block_id", repr(b)) for b in blocks]


# --------------------------------------------------------------------- model check


class _ModelRun:
    """One variant under the randomized differential check."""

    def __init__(self, variant: Variant, rng: random.Random) -> None:
        self.v = variant
        self.rng = rng
        self.op_index = 0
        self.op_desc = ""

    def fail(self, what: str, expected: Any, got: Any) -> None:
        raise ValidationError(
            self.op_index - 1,
            f"operation #{self.op_index} {self.op_desc}: {what}\n"
            f"    expected: {expected!r}\n"
            f"    got:      {got!r}\n"
            f"    model before the operation: {self.model_before}",
        )

    def new_episode(self) -> None:
        rng, block_cls, v = self.rng, self.v.block_cls, self.v
        size = rng.choice([0, 1, 2, 3, rng.randint(4, _MAX_QUEUE)])
        total = size + rng.randint(0, _MAX_SPARE)
        head_tail = v.structure == STRUCTURE_HEAD_TAIL
        if head_tail and size == 0:
            total = max(total, 1)  # the empty queue is made from a one-block queue
        self.blocks = [block_cls(block_id=i) for i in range(total)]
        self.model = rng.sample(self.blocks, size)
        self.model_before = _ids(self.model)
        self.op_desc = f"__init__({len(self.model)} blocks)"
        if head_tail and size == 0:
            # Before 0.10.0 __init__ reads blocks[0]: vLLM never built an empty queue,
            # it emptied one. The empty state is reached the same way here.
            self.op_desc = "__init__(1 block), popleft()"
            self.q = v.queue_cls([self.blocks[0]])
            self.q.popleft()
        else:
            self.q = v.queue_cls(list(self.model))
        self.head, self.tail = ends(v, self.q)
        self.check()

    def detached(self) -> list[Any]:
        free = {id(b) for b in self.model}
        return [b for b in self.blocks if id(b) not in free]

    def check(self) -> None:
        """Compare the whole structure with the model."""
        q, model = self.q, self.model
        if self.head is not None:  # sentinels
            if q.fake_free_list_head is not self.head or q.fake_free_list_tail is not self.tail:
                self.fail("a sentinel object was replaced", "same sentinels", "new objects")
            if self.head.prev_free_block is not None:
                self.fail("head sentinel has a prev link", None, self.head.prev_free_block)
            if self.tail.next_free_block is not None:
                self.fail("tail sentinel has a next link", None, self.tail.next_free_block)
        name = _namer(q, self.head, self.tail)
        node, last = first_last(self.v, q)
        for pos, want in enumerate(model):
            if node is not want:
                self.fail(f"forward links: block at position {pos}", name(want), name(node))
            node = node.next_free_block
        if node is not self.tail:
            self.fail("forward links: after the last block", "TAIL", name(node))
        node = last
        for pos in range(len(model) - 1, -1, -1):
            if node is not model[pos]:
                self.fail(f"backward links: block at position {pos}", name(model[pos]), name(node))
            node = node.prev_free_block
        if node is not self.head:
            self.fail("backward links: before the first block", "HEAD", name(node))
        if q.num_free_blocks != len(model):
            self.fail("num_free_blocks", len(model), q.num_free_blocks)
        for b in self.detached():
            if b.prev_free_block is not None or b.next_free_block is not None:
                self.fail(
                    f"block {b.block_id} is not in the queue but its links are not cleared",
                    (None, None),
                    (name(b.prev_free_block), name(b.next_free_block)),
                )

    def step(self) -> None:
        """Run one random valid operation on queue and model, then check."""
        rng, q, model = self.rng, self.q, self.model
        self.model_before = _ids(model)
        spare = self.detached()
        choices = ["get_all", "iter"] if self.v.can("iter_blocks_after") else ["get_all"]
        if model:
            choices += ["popleft", "popleft_n", "popleft_n", "remove", "remove"]
        if spare:
            choices += ["append", "append_n", "append_n"]
            choices += ["prepend_n"] if self.v.can("prepend_n") else []
        op = rng.choice(choices)
        self.op_desc = op
        if op == "popleft":
            self.op_desc = "popleft()"
            got = q.popleft()
            want = model.pop(0)
            if got is not want:
                self.fail("popleft() returned", want.block_id, _namer(q, self.head, self.tail)(got))
        elif op == "popleft_n":
            # Mostly small batches (the hot path), sometimes everything, sometimes 0.
            k = rng.choice([0, 1, 1, 2, 2, 3, rng.randint(0, len(model)), len(model)])
            k = min(k, len(model))
            self.op_desc = f"popleft_n({k})"
            got = q.popleft_n(k)
            want, model[:k] = model[:k], []
            if (
                type(got) is not list
                or len(got) != k
                or any(a is not b for a, b in zip(got, want, strict=True))
            ):
                self.fail(
                    "popleft_n returned", _ids(want), got if type(got) is not list else _ids(got)
                )
        elif op == "remove":
            block = rng.choice(model)
            self.op_desc = f"remove(block {block.block_id})"
            q.remove(block)
            model.remove(block)
        elif op == "append":
            block = rng.choice(spare)
            self.op_desc = f"append(block {block.block_id})"
            q.append(block)
            model.append(block)
        elif op in ("append_n", "prepend_n"):
            k = min(len(spare), rng.choice([0, 1, 1, 2, 2, rng.randint(0, len(spare))]))
            batch = rng.sample(spare, k)
            self.op_desc = f"{op}({_ids(batch)})"
            getattr(q, op)(batch)
            if op == "append_n":
                model.extend(batch)
            else:
                model[:0] = batch
        elif op == "get_all":
            self.op_desc = "get_all_free_blocks()"
            got = q.get_all_free_blocks()
            if (
                type(got) is not list
                or len(got) != len(model)
                or any(a is not b for a, b in zip(got, model, strict=True))
            ):
                self.fail("get_all_free_blocks() returned", _ids(model), _ids(got))
        else:
            pos = rng.randint(-1, len(model) - 1)
            cursor = None if pos < 0 else model[pos]
            self.op_desc = f"iter_blocks_after({_namer(q, self.head, self.tail)(cursor)})"
            want = model[pos + 1 :]
            # Bounded: a variant whose iteration never ends must fail, not hang the gate.
            got = list(itertools.islice(q.iter_blocks_after(cursor), len(want) + 2))
            if len(got) != len(want) or any(a is not b for a, b in zip(got, want, strict=True)):
                self.fail("iter_blocks_after yielded", _ids(want), _ids(got))
        self.check()


def model_check(variant: Variant, ops: int = DEFAULT_OPS, seed: int = DEFAULT_SEED) -> int:
    """Run the randomized differential check against a list model.

    Parameters
    ----------
    variant
        The queue under test.
    ops
        Number of random operations (each followed by a full structure check).
    seed
        Seed of the operation sequence (recorded; the same seed gives the same sequence).

    Returns
    -------
    int
        Operations checked.

    Raises
    ------
    ValidationError
        At the first divergence, with the operation index, expected and got.
    """
    run = _ModelRun(variant, random.Random(seed))
    run.model_before = []
    while run.op_index < ops:
        try:
            run.new_episode()
            for _ in range(min(_EPISODE_OPS, ops - run.op_index)):
                run.op_index += 1
                run.step()
        except ValidationError:
            raise
        except Exception as exc:
            # A crash of the variant (e.g. in __init__ or on a missing sentinel) is a
            # refusal like any other divergence, not a crash of the gate.
            run.fail("valid operation raised", "no exception", f"{type(exc).__name__}: {exc}")
    return run.op_index


# ------------------------------------------------------------------ timed sizes


class _SizedRun:
    """One variant under the model check at one timed queue size (part 2).

    The model is a doubly linked list of block *indices* kept in two plain lists
    (``prv``/``nxt``; index ``size`` is the head sentinel, ``size + 1`` the tail,
    ``size + 2`` means "no link"), so every model update is O(1) like the queue's and a
    100,000-block queue costs no more per operation than a small one. ``objs`` maps an
    index to the object the queue must hold there, so a link is checked with one ``is``.
    """

    def __init__(self, variant: Variant, size: int, rng: random.Random) -> None:
        self.v = variant
        self.size = size
        self.rng = rng
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

    def fail(self, what: str, expected: Any, got: Any) -> None:
        raise ValidationError(
            self.passed,
            f"size {self.size}: {self.where}: {what}\n"
            f"    expected: {expected!r}\n"
            f"    got:      {got!r}\n"
            f"    {self.state}: {self.count_before:,} blocks free, "
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
        self.name = _namer(self.q, self.head, self.tail)
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

    def _batch(self, available: int) -> int:
        # Half the batches have a timed length, half any length up to MAX_BATCH.
        rng = self.rng
        k = rng.choice(TIMED_BATCHES) if rng.random() < 0.5 else rng.randint(0, MAX_BATCH)
        return min(k, available)

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
            k = self._batch(self.count)
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
                    got if type(got) is not list else _ids(got),
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
            k = self._batch(held)
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
            self.fail("iter_blocks_after yielded", want, _ids(got))

    # -- the checks --------------------------------------------------------------

    def check_touched(self) -> None:
        """O(batch): sentinels, count, and the links of every block the op touched."""
        q, objs, prv, nxt, name = self.q, self.objs, self.prv, self.nxt, self.name
        if self.head is None:  # head-tail structure: the ends are two attributes
            first, last = q.free_list_head, q.free_list_tail
            if first is not objs[nxt[self.head_i]] or last is not objs[prv[self.tail_i]]:
                self.fail(
                    "free_list_head, free_list_tail",
                    (name(objs[nxt[self.head_i]]), name(objs[prv[self.tail_i]])),
                    (name(first), name(last)),
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
                what = f"links of {name(block)} (prev, next)"
            self.fail(what, (name(objs[prv[i]]), name(objs[nxt[i]])), got)
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


def size_check(
    variant: Variant,
    size: int,
    ops: int = DEFAULT_OPS // SIZE_OPS_DIVISOR,
    seed: int = DEFAULT_SEED,
) -> int:
    """Run the model check (part 2) on a queue of ``size`` blocks.

    The queue starts as the worker's pool does: ``size`` blocks with ids 0..size-1, all
    free, in id order. Random operations then pop and give back blocks (batches of the
    timed lengths and up to :data:`MAX_BATCH`), remove random free blocks and iterate,
    keeping at most ``4 * MAX_BATCH`` blocks out of the queue.

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
    run = _SizedRun(variant, size, random.Random(f"{seed}/{size}"))
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


# ----------------------------------------------------------------- invalid ops


def _scenario_queue(variant: Variant, size: int = 4, spare: int = 2) -> tuple[Any, list[Any]]:
    blocks = [variant.block_cls(block_id=i) for i in range(size + spare)]
    return variant.queue_cls(blocks[:size]), blocks


# Each scenario: (name, queue size, corruption applied before the call, the call).
# ``b`` is the list of all blocks of the scenario: b[:size] start in the queue.
_Scenario = tuple[
    str, int, Callable[[Any, list[Any]], None] | None, Callable[[Any, list[Any]], Any]
]

INVALID_SCENARIOS: list[_Scenario] = [
    ("popleft() on an empty queue", 0, None, lambda q, b: q.popleft()),
    ("popleft_n(5) with 4 free", 4, None, lambda q, b: q.popleft_n(5)),
    ("popleft_n(1) on an empty queue", 0, None, lambda q, b: q.popleft_n(1)),
    ("popleft_n(2) with 1 free", 1, None, lambda q, b: q.popleft_n(2)),
    ("popleft_n(0) on an empty queue", 0, None, lambda q, b: q.popleft_n(0)),
    ("popleft_n(-1)", 3, None, lambda q, b: q.popleft_n(-1)),
    ("remove() of a detached block", 4, None, lambda q, b: q.remove(b[4])),
    (
        "remove() of a half-linked block",
        4,
        lambda q, b: setattr(b[4], "prev_free_block", b[0]),
        lambda q, b: q.remove(b[4]),
    ),
    ("remove() of the head sentinel", 4, None, lambda q, b: q.remove(q.fake_free_list_head)),
    (
        "append() with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append(b[4]),
    ),
    (
        "append_n([1 block]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([b[4]]),
    ),
    (
        "append_n([2 blocks]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([b[4], b[5]]),
    ),
    (
        "append_n([]) with a corrupted tail sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_tail, "prev_free_block", None),
        lambda q, b: q.append_n([]),
    ),
    (
        "prepend_n([1 block]) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.prepend_n([b[4]]),
    ),
    (
        "prepend_n([]) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.prepend_n([]),
    ),
    (
        "popleft() with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft() on an empty queue whose count says 2",
        0,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft() of a first block without next link",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft_n(1) with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(1) of a first block without next link",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) over a broken chain",
        4,
        lambda q, b: setattr(b[0], "next_free_block", None),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) over a broken chain",
        4,
        lambda q, b: setattr(b[1], "next_free_block", None),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft_n(1) with 4 linked but 0 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 0),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) with 4 linked but 1 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 1),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) with 4 linked but 2 counted",
        4,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft_n(1) on an empty queue whose count says 2",
        0,
        lambda q, b: setattr(q, "num_free_blocks", 2),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) with 1 linked but 3 counted",
        1,
        lambda q, b: setattr(q, "num_free_blocks", 3),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(4) with 2 linked but 5 counted",
        2,
        lambda q, b: setattr(q, "num_free_blocks", 5),
        lambda q, b: q.popleft_n(4),
    ),
    ("popleft_n(3.0), not an integer", 4, None, lambda q, b: q.popleft_n(3.0)),
    (
        "popleft() on an empty queue with a corrupted head sentinel",
        0,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.popleft(),
    ),
    # Aliasing: corrupted chains whose links point back into themselves, and blocks
    # appended while still attached. The outcome depends on the order of the stores.
    (
        "popleft_n(1) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(2) whose second block links to itself",
        4,
        lambda q, b: setattr(b[1], "next_free_block", b[1]),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "popleft_n(3) of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft_n(3),
    ),
    (
        "popleft() of a block linked to itself",
        4,
        lambda q, b: setattr(b[0], "next_free_block", b[0]),
        lambda q, b: q.popleft(),
    ),
    (
        "popleft_n(1) with a head sentinel linked to itself",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", q.fake_free_list_head),
        lambda q, b: q.popleft_n(1),
    ),
    (
        "popleft_n(2) whose first block links back to the head",
        4,
        lambda q, b: setattr(b[0], "next_free_block", q.fake_free_list_head),
        lambda q, b: q.popleft_n(2),
    ),
    (
        "append_n() of the last free block",
        4,
        None,
        lambda q, b: q.append_n([b[3]]),
    ),
    (
        "append_n() of the tail sentinel",
        4,
        None,
        lambda q, b: q.append_n([q.fake_free_list_tail]),
    ),
    (
        "append() of the last free block",
        4,
        None,
        lambda q, b: q.append(b[3]),
    ),
    (
        "append_n() of the last free block and another",
        4,
        None,
        lambda q, b: q.append_n([b[3], b[4]]),
    ),
    (
        "remove() of a block linked to itself",
        4,
        lambda q, b: setattr(b[1], "next_free_block", b[1]),
        lambda q, b: q.remove(b[1]),
    ),
    (
        "get_all_free_blocks() with a corrupted head sentinel",
        4,
        lambda q, b: setattr(q.fake_free_list_head, "next_free_block", None),
        lambda q, b: q.get_all_free_blocks(),
    ),
    (
        "iter_blocks_after() a detached cursor",
        4,
        None,
        lambda q, b: list(q.iter_blocks_after(b[4])),
    ),
]


QUEUE_METHOD_NAMES = frozenset(QUEUE_METHODS)
_SENTINEL_ATTRS = frozenset({"fake_free_list_head", "fake_free_list_tail"})


#: A scenario that starts from ``__init__([])``: a head-tail queue cannot be built empty,
#: so it would only compare two identical setup errors.
EMPTY_INIT = "empty-init"


def scenario_needs(scenario: _Scenario) -> frozenset[str]:
    """What a scenario uses: the queue methods it calls (read from the names its two
    functions' code refers to), ``sentinels`` if it touches one, and :data:`EMPTY_INIT`
    if its queue starts empty."""
    names: set[str] = set()
    for fn in scenario[2:]:
        if fn is not None:
            names |= set(fn.__code__.co_names)
    needs = {n for n in names if n in QUEUE_METHOD_NAMES}
    if names & _SENTINEL_ATTRS:
        needs.add("sentinels")
    if scenario[1] == 0:
        needs.add(EMPTY_INIT)
    return frozenset(needs)


def _runs_natively(variant: Variant, needs: frozenset[str]) -> bool:
    """Whether ``variant`` has every method of ``needs`` itself (not adapted) and, if
    ``needs`` holds ``sentinels``, sentinel blocks."""
    if variant.structure == STRUCTURE_HEAD_TAIL and needs & {"sentinels", EMPTY_INIT}:
        return False
    return all(variant.has(m) for m in needs if m not in ("sentinels", EMPTY_INIT))


def _shares(reference: Variant, candidate: Variant, needs: frozenset[str]) -> bool:
    """Whether the two can be compared on a scenario: same structure, both native."""
    return (
        reference.structure == candidate.structure
        and _runs_natively(reference, needs)
        and _runs_natively(candidate, needs)
    )


def observe(variant: Variant, scenario: _Scenario) -> dict[str, Any]:
    """Run one invalid-operation scenario; return what happened and the state after.

    The state is every link of every block (sentinels included) and the count, so a
    variant that raises the right error but leaves different partial damage differs.
    A head-tail queue has no sentinels: its ``free_list_head`` / ``free_list_tail``
    take their place in the state.
    """
    _, size, corrupt, call = scenario
    try:
        q, blocks = _scenario_queue(variant, size)
        if corrupt is not None:
            corrupt(q, blocks)
        head, tail = ends(variant, q)
        name = _namer(q, head, tail)
    except Exception as exc:
        return {"outcome": ("__init__ or setup raised", type(exc).__name__, str(exc))}
    try:
        ret = call(q, blocks)
        outcome: Any = ("returned", [name(r) for r in ret] if isinstance(ret, list) else name(ret))
    except Exception as exc:
        outcome = ("raised", type(exc).__name__, str(exc))
    try:
        links = {
            name(b): (name(b.prev_free_block), name(b.next_free_block))
            for b in [x for x in (head, tail) if x is not None] + blocks
        }
        if head is None:
            links["free_list_head, free_list_tail"] = (
                name(q.free_list_head),
                name(q.free_list_tail),
            )
        count = q.num_free_blocks
    except Exception as exc:
        links, count = {"unreadable": f"{type(exc).__name__}: {exc}"}, None
    return {"outcome": outcome, "num_free_blocks": count, "links": links}


@dataclass(frozen=True)
class InvalidComparison:
    """What part 3 did for one candidate.

    Attributes
    ----------
    compared
        Scenarios compared.
    references
        Label of the variant each compared scenario was compared with, deduplicated.
    skipped
        ``needs -> count`` of the scenarios skipped, e.g. ``{"prepend_n": 2}``:
        the candidate or every possible reference lacks that (or has it only
        through an adapter).
    """

    compared: int
    references: tuple[str, ...]
    skipped: dict[str, int]
    differs: tuple[str, ...] = ()


def compare_invalid_shared(
    candidate: Variant, references: Sequence[Variant], record: bool = False
) -> InvalidComparison:
    """Compare every scenario ``candidate`` shares with a reference (docs/design.md §3).

    Each scenario is compared with the first of ``references`` (the baseline first)
    that shares it with ``candidate``: the same link structure, and every method the
    scenario calls present in both classes themselves (an adapter's loop is not the
    release's operation). A scenario no reference shares is skipped and counted.
    With ``record`` (a release history: releases differ in their contract on invalid
    use, by design) a difference is recorded in ``differs`` instead of raised.

    Raises
    ------
    ValidationError
        At the first compared scenario whose exception, return value or after-state
        differs.
    """
    compared, used, skipped, differs = 0, [], {}, []
    for index, scenario in enumerate(INVALID_SCENARIOS, start=1):
        needs = scenario_needs(scenario)
        reference = next((r for r in references if _shares(r, candidate, needs)), None)
        if reference is None:
            lacking = [
                n
                for n in sorted(needs)
                if not _runs_natively(candidate, frozenset({n}))
                or not any(_runs_natively(r, frozenset({n})) for r in references)
            ] or ["structure"]
            key = "/".join(lacking)
            skipped[key] = skipped.get(key, 0) + 1
            continue
        versus = "the baseline" if reference is references[0] else reference.label
        try:
            _compare_one(index, scenario, reference, candidate, versus)
        except ValidationError as exc:
            if not record:
                raise
            differs.append(str(exc).splitlines()[0])
        compared += 1
        if reference.label not in used:
            used.append(reference.label)
    return InvalidComparison(compared, tuple(used), skipped, tuple(differs))


def compare_invalid(baseline: Variant, candidate: Variant) -> int:
    """Compare every invalid-operation scenario of ``candidate`` with ``baseline``.

    Returns
    -------
    int
        Number of scenarios compared.

    Raises
    ------
    ValidationError
        At the first scenario whose exception, return value or after-state differs.
    """
    for index, scenario in enumerate(INVALID_SCENARIOS, start=1):
        _compare_one(index, scenario, baseline, candidate)
    return len(INVALID_SCENARIOS)


def _compare_one(
    index: int,
    scenario: _Scenario,
    reference: Variant,
    candidate: Variant,
    versus: str = "the baseline",
) -> None:
    """Raise :class:`ValidationError` unless both give the same outcome and state."""
    want, got = observe(reference, scenario), observe(candidate, scenario)
    for key in ("outcome", "num_free_blocks", "links"):
        if want.get(key) == got.get(key):
            continue
        detail = key
        if key == "links":
            keys = list(dict.fromkeys([*want[key], *got[key]]))
            diff = [k for k in keys if want[key].get(k) != got[key].get(k)]
            detail = f"links of block(s) {diff} (prev, next)"
            want_v = {k: want[key].get(k) for k in diff}
            got_v = {k: got[key].get(k) for k in diff}
        else:
            want_v, got_v = want.get(key), got.get(key)
        raise ValidationError(
            0,
            f"invalid operation {index} '{scenario[0]}': {detail} differs from "
            f"{versus}\n    expected: {want_v!r}\n    got:      {got_v!r}",
        )


# ----------------------------------------------------------------------- gate


def gate(
    variants: list[Variant],
    ops: int = DEFAULT_OPS,
    seed: int = DEFAULT_SEED,
    sizes: Sequence[int] = DEFAULT_SIZES,
    size_ops: int | None = None,
    invalid: str = "refuse",
) -> list[GateResult]:
    """Run the whole gate; the first variant is the baseline.

    Per variant: the small-queue model check, the invalid-operation comparison
    (candidates only), then the model check at every size of ``sizes``. The cheap parts
    run first, so a variant they refuse costs no time at 100,000 blocks.

    Parameters
    ----------
    variants
        Loaded variants, baseline first.
    ops
        Random operations per variant in the small-queue model check.
    seed
        Seed of the model checks.
    sizes
        Queue sizes of the timed-size model check (each >= 1); the default covers every
        timed pool and the smallest accepted one. Empty skips that part.
    size_ops
        Random operations per size; None means ``ops // SIZE_OPS_DIVISOR``.
    invalid
        ``"refuse"`` (a candidate that differs on an invalid operation is refused) or
        ``"record"`` (a release history: the differences are recorded in
        ``GateResult.invalid_differs``; releases changed their contract on invalid
        use, e.g. 0.10.0 and 0.20.0 leave different counts after ``append_n`` on a
        corrupted tail sentinel).

    Returns
    -------
    list of GateResult
        One per variant, in order; ``ok`` is False for a refused variant, and ``sizes``
        lists the sizes it passed.

    Raises
    ------
    ValueError
        A size is not a whole number >= 1 (before anything runs).
    """
    sizes = tuple(sizes)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"queue sizes must be whole numbers >= 1, got {size!r}")
    per_size = ops // SIZE_OPS_DIVISOR if size_ops is None else size_ops
    results = []
    baseline = variants[0]
    for index, variant in enumerate(variants):
        role = "baseline" if index == 0 else "bound" if variant.is_bound else "candidate"
        start = time.perf_counter()
        checked = compared = sized_ops = invalid_skipped = 0
        references: tuple[str, ...] = ()
        differs: tuple[str, ...] = ()
        skipped_by: dict[str, int] = {}
        sized_seconds = 0.0
        covered: list[int] = []
        error = None
        phase = "model"
        try:
            checked = model_check(variant, ops, seed)
            phase = "invalid"
            if role == "baseline":
                needs = [scenario_needs(sc) for sc in INVALID_SCENARIOS]
                compared = sum(_runs_natively(variant, n) for n in needs)
                invalid_skipped = len(INVALID_SCENARIOS) - compared
            elif role == "candidate":
                # The baseline first, then every earlier candidate: a scenario the
                # baseline cannot run (another structure, a method it lacks) is compared
                # with the first earlier variant that shares it.
                refs = [baseline, *(v for v in variants[1:index] if not v.is_bound)]
                comparison = compare_invalid_shared(variant, refs, record=invalid == "record")
                compared, references = comparison.compared, comparison.references
                if references == (baseline.label,):
                    references = ()  # the usual case: not worth a note
                differs = comparison.differs
                invalid_skipped = sum(comparison.skipped.values())
                skipped_by = comparison.skipped
            phase = "sizes"
            sized_start = time.perf_counter()
            for size in sizes:
                sized_ops += size_check(variant, size, per_size, seed)
                covered.append(size)
        except ValidationError as exc:
            error = str(exc)
            if phase == "model":
                checked = exc.passed
            elif phase == "sizes":
                sized_ops += exc.passed
        if phase == "sizes":
            sized_seconds = time.perf_counter() - sized_start
        results.append(
            GateResult(
                label=variant.label,
                ok=error is None,
                ops_checked=checked,
                invalid_compared=compared,
                sha256=variant.queue_src.sha256,
                seconds=time.perf_counter() - start,
                error=error,
                role=role,
                sizes=tuple(covered),
                size_ops_checked=sized_ops,
                size_seconds=sized_seconds,
                adapter=variant.adapter,
                invalid_skipped=invalid_skipped,
                invalid_references=references,
                invalid_differs=differs,
                skipped=_skipped_notes(variant, role, invalid_skipped, skipped_by),
            )
        )
    return results


def _skipped_notes(
    variant: Variant, role: str, invalid_skipped: int, skipped_by: dict[str, int]
) -> tuple[str, ...]:
    """The gate's parts that did not run, or ran through an adapter, in words."""
    notes = []
    if variant.adapter:
        notes.append(
            f"adapter {variant.adapter}: {', '.join(variant.adapted)} checked as loops of "
            "popleft()/append() (as BlockPool drove the queue before vLLM 0.10.0)"
        )
    if variant.missing:
        notes.append(
            f"the class has no {', '.join(variant.missing)}: the model checks never call "
            "them (no timed case does)"
        )
    if variant.structure == STRUCTURE_HEAD_TAIL:
        notes.append(
            "head-tail structure (free_list_head/free_list_tail, no sentinels): the empty "
            "queue is reached by popping a one-block queue"
        )
    if invalid_skipped and role == "baseline":
        notes.append(
            f"{invalid_skipped} of {len(INVALID_SCENARIOS)} invalid ops cannot run on the "
            "reference itself (no such method, or no sentinels): skipped for every variant"
        )
    elif invalid_skipped:
        why = ", ".join(f"{n} need {k}" for k, n in sorted(skipped_by.items()))
        notes.append(
            f"{invalid_skipped} of {len(INVALID_SCENARIOS)} invalid ops skipped: no "
            f"reference shares them ({why})"
        )
    return tuple(notes)
