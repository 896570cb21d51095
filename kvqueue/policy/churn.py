"""A seeded serving-like churn workload over one or two free-block queues (docs/design.md §12).

It fragments the free queue the way a serving engine does, so that allocation policies
can be compared on a realistic queue state. Two layers:

:class:`Pools` executes *events* on a decode-side pool and, optionally, a prefill-side
pool (a :class:`Side` each); the events are exactly those of a trace
(:mod:`kvqueue.policy.trace` documents the JSON Lines form):

- ``touch`` (request, keys): the request's next blocks hold the cached contents
  ``keys``; the still-cached prefix of them is reused at once (a block in use is
  shared, reference count + 1; a free one is taken out of the middle of the queue with
  ``remove()``); the misses are allocated with the request's next ``alloc``;
- ``alloc`` (request, n): one allocation call of the policy for the pending misses plus
  ``n`` blocks; the misses' blocks are then cached under their keys (an allocated block
  loses the content it held: it is evicted);
- ``free`` (request[, unpin]): the request's blocks are released in vLLM's order:
  reversed (the tail of a chain is evicted first), only those whose reference count
  drops to zero. The request's *last* block is the partially filled one, so it has no
  hash: with ``free_order="vllm"`` (vLLM's free path) it is *prepended* (evicted first,
  ``prepend_n``) and the hashed blocks are *appended* in reverse with one ``append_n``;
  ``free_order="append"`` (the model before) appends them all. ``unpin``: the blocks are
  released by an unpin (vLLM PR #55841): all go to the tail and become *last-resort*
  candidates (:attr:`Side.last_resort`) that the contiguous policy never puts in a
  selected run, until they are allocated again;
- ``read`` (request, k): a transfer of the first ``k`` blocks of the request from the
  prefill side to the decode side; block ``i`` of one side is paired with block ``i``
  of the other, and two neighbours merge into one descriptor only when both sides'
  ids step by the same +1 or -1 (:func:`descriptors`).

:class:`Churn` drives :class:`Pools` with a synthetic request stream:

- a closed loop of ``concurrency`` requests: whenever fewer are active, the next request
  of the stream is admitted if its blocks fit on both pools (first come, first served);
- each request is one *prefill* allocation of ``L`` blocks (lognormal, median
  ``prefill_median``, log-SD ``prefill_sigma``, at most ``prefill_max``), then *decode*
  growth on the decode side of one block every ``decode_every`` steps until it has
  grown by ``D`` blocks (lognormal, median ``decode_median``, log-SD ``decode_sigma``,
  at most ``decode_max``), then ``free``;
- with a prefill side: the same prefill is allocated there too (its own prefix cache),
  ``read`` pairs the whole prefill block lists (prefix hits plus new blocks), and after
  ``hold_steps`` steps the prefill side releases the request (``prefill_release``:
  ``free``, vLLM's free path, or ``unpin``, the PR's last-resort path);
- *prefix-cache hits*: a share ``prefix_share`` of the requests belongs to one of
  ``families`` prompt families (Zipf weights 1/k); each family has a fixed prefix of up
  to ``prefill_median`` blocks, keyed ``(family, index)``; a request touches its
  family's prefix (at most ``L - 1`` blocks: the last token is always recomputed);
- admission keeps room for the decode growth of every active request, so a decode
  allocation never fails.

*Engine age* is counted in pool turnovers: one turnover is allocations totalling the
pool's size in blocks (:attr:`Side.allocated` / pool; blocks reused as prefix hits are
not allocations). The age of a :class:`Churn` is its decode side's.

The request stream depends on the seed only, never on the policy: every policy sees the
same requests in the same order (a paired comparison). What the policy changes is which
blocks are evicted, and so which cached prefixes survive: the prefix hits (and the
admission times that follow from them) may differ between policies, and
:attr:`Churn.hit_blocks` counts them.

Standard library only: it runs in the bare measured interpreter.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import Any

#: Free orders: vLLM's free path (unhashed prepended, hashed appended) or all appended.
FREE_ORDERS = ("vllm", "append")
#: How the prefill side releases a request after its READ: vLLM's free path (the
#: connector frees a finished transfer's blocks like any other), or an unpin (the PR's
#: last-resort path).
PREFILL_RELEASES = ("free", "unpin")
#: The sides of :class:`Pools` (trace field ``side``).
DECODE, PREFILL = "d", "p"
_BLOCK_ID = attrgetter("block_id")


@dataclass(frozen=True)
class Workload:
    """Parameters of the churn workload (recorded in ``run.json``).

    The defaults model a block size of 16 tokens: prefills of ~770 tokens (median),
    decodes of ~130 tokens, 48 concurrent sessions on a 16,384-block pool, half the
    requests sharing one of 32 prompt prefixes. ``warmup_steps`` and ``steps`` drive
    :meth:`Churn.run` in the invariant check; a policy run counts engine age in pool
    turnovers instead (:mod:`kvqueue.policy.age_windows`).
    """

    pool: int = 16_384
    concurrency: int = 48
    prefill_median: float = 48.0
    prefill_sigma: float = 1.0
    prefill_max: int = 512
    decode_median: float = 8.0
    decode_sigma: float = 0.8
    decode_max: int = 128
    decode_every: int = 16
    prefix_share: float = 0.5
    families: int = 32
    warmup_steps: int = 2_000
    steps: int = 3_000
    free_order: str = "vllm"
    hold_steps: int = 2
    prefill_release: str = "free"

    def record(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return asdict(self)

    def problem(self) -> str | None:
        """Why these parameters cannot run (one line), or ``None``."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "free_order":
                if value not in FREE_ORDERS:
                    return f"free_order must be one of {', '.join(FREE_ORDERS)}, got {value!r}"
                continue
            if f.name == "prefill_release":
                if value not in PREFILL_RELEASES:
                    return (
                        f"prefill_release must be one of {', '.join(PREFILL_RELEASES)}, "
                        f"got {value!r}"
                    )
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"{f.name} must be a number, got {value!r}"
            if not math.isfinite(value):
                return f"{f.name} must be finite, got {value!r}"
        if self.pool < 64:
            return f"pool must be at least 64 blocks, got {self.pool}"
        if self.concurrency < 1:
            return f"concurrency must be at least 1, got {self.concurrency}"
        if self.prefill_median < 1 or self.decode_median < 1:
            return "prefill_median and decode_median must be at least 1 block"
        if self.prefill_sigma < 0 or self.decode_sigma < 0:
            return "prefill_sigma and decode_sigma must not be negative"
        if self.prefill_max < 1 or self.decode_max < 1 or self.decode_every < 1:
            return "prefill_max, decode_max and decode_every must be at least 1"
        if self.prefill_max + self.decode_max > self.pool // 2:
            return (
                f"prefill_max + decode_max ({self.prefill_max + self.decode_max}) must be at "
                f"most half the pool ({self.pool // 2}): one request could starve the rest"
            )
        if not 0 <= self.prefix_share <= 1:
            return f"prefix_share must be from 0 to 1, got {self.prefix_share}"
        if self.families < 1:
            return f"families must be at least 1, got {self.families}"
        if self.warmup_steps < 0 or self.steps < 1:
            return "warmup_steps must be >= 0 and steps >= 1"
        if self.hold_steps < 1:
            return f"hold_steps must be at least 1, got {self.hold_steps}"
        return None


def descriptors(prefill_ids: Sequence[int], decode_ids: Sequence[int]) -> int:
    """Descriptors of one READ pairing ``prefill_ids[i]`` with ``decode_ids[i]``.

    Neighbours ``i-1, i`` merge only when both sides step by the same +1 or -1 (both
    ends adjacent in the same direction); every other boundary starts a descriptor.
    """
    if len(prefill_ids) != len(decode_ids):
        raise ValueError("a READ pairs lists of equal length")
    if not prefill_ids:
        return 0
    count = 1
    p0, d0 = prefill_ids[0], decode_ids[0]
    for p1, d1 in zip(prefill_ids[1:], decode_ids[1:], strict=True):
        step = p1 - p0
        if (step != 1 and step != -1) or d1 - d0 != step:
            count += 1
        p0, d0 = p1, d1
    return count


def block_descriptors(prefill_blocks: Sequence[Any], decode_blocks: Sequence[Any]) -> int:
    """:func:`descriptors` of the blocks' ids, in one loop over the blocks (no lists of
    ids: the hot path of every READ)."""
    if len(prefill_blocks) != len(decode_blocks):
        raise ValueError("a READ pairs lists of equal length")
    if not prefill_blocks:
        return 0
    count = 1
    p0, d0 = prefill_blocks[0].block_id, decode_blocks[0].block_id
    for pb, db in zip(prefill_blocks, decode_blocks, strict=True):
        p1, d1 = pb.block_id, db.block_id
        step = p1 - p0
        if (step != 1 and step != -1) or d1 - d0 != step:
            count += 1
        p0, d0 = p1, d1
    return count - 1  # the first pair was counted as a boundary with itself


class PoolExhausted(RuntimeError):
    """An ``alloc`` event asked for more blocks than the pool has free (trace replay)."""


class Side:
    """One pool: its queue, reference counts, prefix cache and last-resort set.

    Parameters
    ----------
    queue
        A fresh ``FreeKVCacheBlockQueue`` over ``blocks`` (all free, in id order).
    blocks
        The pool's blocks; ``blocks[i].block_id == i``.
    alloc
        ``alloc(n) -> n blocks`` taken out of ``queue`` (the policy, possibly wrapped; it
        may read :attr:`last_resort`). It may be replaced between events.
    free_order
        One of :data:`FREE_ORDERS`.
    """

    def __init__(
        self, queue: Any, blocks: list[Any], alloc: Callable[[int], list], free_order: str
    ) -> None:
        self.queue = queue
        self.blocks = blocks
        self.alloc = alloc
        self.free_order = free_order
        self.ref = [0] * len(blocks)
        self.key_of: list[Hashable | None] = [None] * len(blocks)
        self.cache: dict[Hashable, int] = {}
        #: Ids of free blocks released by an unpin, until they are allocated again.
        self.last_resort: set[int] = set()
        #: Blocks taken by allocation calls: ``allocated / pool`` is the age in turnovers.
        self.allocated = 0
        self.held: dict[Hashable, list[Any]] = {}
        #: Per request, where the tail of its held blocks that nobody else can hold
        #: starts: blocks allocated past its misses are never cached while it holds them,
        #: so no touch can share them and their count is exactly 1 (``free`` skips the
        #: check for them: it was 18 % of a policy process's time).
        self.private_from: dict[Hashable, int] = {}
        #: Ids of blocks that hold a cached content (``key_of[i] is not None``): an
        #: allocation looks up which of its blocks it evicts by one set intersection.
        self.keyed: set[int] = set()
        self.pending: dict[Hashable, list[Hashable]] = {}

    def cached(self, keys: Sequence[Hashable]) -> list[int]:
        """Ids of the still-cached prefix of ``keys``."""
        out = []
        get = self.cache.get
        for key in keys:
            block_id = get(key)
            if block_id is None:
                break
            out.append(block_id)
        return out

    def room(self, keys: Sequence[Hashable], n: int, hits: list[int] | None = None) -> int:
        """Free blocks left after touching ``keys`` and allocating the misses plus ``n``
        (``hits``: ``cached(keys)`` if the caller has it)."""
        if hits is None:
            hits = self.cached(keys)
        ref = self.ref
        free_hits = [ref[i] for i in hits].count(0)
        return self.queue.num_free_blocks - free_hits - (len(keys) - len(hits)) - n

    def touch(self, rid: Hashable, keys: Sequence[Hashable], hits: list[int] | None = None) -> int:
        """The ``touch`` event; returns the number of hits (``hits``: ``cached(keys)`` if
        the caller has it, unchanged since)."""
        if hits is None:
            hits = self.cached(keys)
        held = self.held.setdefault(rid, [])
        ref, blocks, resort, remove = self.ref, self.blocks, self.last_resort, self.queue.remove
        for i in hits:
            if ref[i] == 0:
                remove(blocks[i])  # a cached block from mid-queue
                if resort:
                    resort.discard(i)
            ref[i] += 1
        held.extend(map(blocks.__getitem__, hits))
        if hits:
            self.private_from[rid] = len(held)
        self.pending[rid] = list(keys[len(hits) :])
        return len(hits)

    def allocate(self, rid: Hashable, n: int) -> list[Any]:
        """The ``alloc`` event: one policy call for the pending misses plus ``n`` blocks."""
        misses = self.pending.pop(rid, [])
        want = len(misses) + n
        if want > self.queue.num_free_blocks:
            raise PoolExhausted(
                f"request {rid!r} needs {want} blocks, {self.queue.num_free_blocks} are free"
            )
        got = self.alloc(want)
        ref, key_of, cache, keyed = self.ref, self.key_of, self.cache, self.keyed
        ids = list(map(_BLOCK_ID, got))
        for i in ids:
            ref[i] += 1
        evicted = keyed.intersection(ids)
        if evicted:  # their cached contents are overwritten
            for i in evicted:
                key = key_of[i]
                if cache.get(key) == i:
                    del cache[key]
                key_of[i] = None
            keyed.difference_update(evicted)
        if self.last_resort:
            self.last_resort.difference_update(ids)
        held = self.held.setdefault(rid, [])
        if misses:
            for key, i in zip(misses, ids, strict=False):
                key_of[i] = key
                cache[key] = i
            keyed.update(ids[: len(misses)])
            self.private_from[rid] = len(held) + len(misses)
        self.allocated += want
        held.extend(got)
        return got

    def free(self, rid: Hashable, unpin: bool = False) -> None:
        """The ``free`` event (vLLM's free path, or an unpin: see the module docstring)."""
        blocks = self.held.pop(rid, [])
        self.pending.pop(rid, None)
        shared = self.private_from.pop(rid, 0)
        if not blocks:
            return
        ref = self.ref
        last = blocks[-1]  # the partially filled block: no hash
        # Released in reverse: first the private tail (each count 1 -> 0), then those of
        # the shared head whose count drops to zero.
        freed = blocks[shared:]
        for block in freed:
            ref[block.block_id] = 0
        freed.reverse()
        keep = freed.append
        for block in reversed(blocks[:shared]):
            i = block.block_id
            left = ref[i] - 1
            ref[i] = left
            if not left:
                keep(block)
        if unpin:
            self.queue.append_n(freed)
            self.last_resort.update(map(_BLOCK_ID, freed))
        elif self.free_order == "append" or not freed or freed[0] is not last:
            self.queue.append_n(freed)
        else:
            self.queue.prepend_n([last])
            self.queue.append_n(freed[1:])


class Pools:
    """A decode-side :class:`Side` and an optional prefill-side one, driven by events.

    ``on_read(rid, descriptors, k)`` is called after each ``read``; ``record(event)``
    (if set) receives every event as a dict before it runs (the trace writer).
    """

    def __init__(self, decode: Side, prefill: Side | None = None) -> None:
        self.sides = {DECODE: decode}
        if prefill is not None:
            self.sides[PREFILL] = prefill
        self.decode = decode
        self.prefill = prefill
        self.on_read: Callable[[Hashable, int, int], None] | None = None
        self.record: Callable[[dict[str, Any]], None] | None = None

    def apply(self, event: dict[str, Any]) -> None:
        """Run one event (the trace form: ``op``, ``req``, ``side``, ``keys``, ``n``,
        ``unpin``)."""
        if self.record is not None:
            self.record(event)
        op = event["op"]
        rid = event["req"]
        if op == "read":
            self.read(rid, event["n"])
            return
        side = self.sides[event.get("side", DECODE)]
        if op == "touch":
            side.touch(rid, event["keys"])
        elif op == "alloc":
            side.allocate(rid, event["n"])
        elif op == "free":
            side.free(rid, bool(event.get("unpin", False)))
        else:
            raise ValueError(f"unknown event op {op!r}")

    def read(self, rid: Hashable, k: int) -> int:
        """The ``read`` event: descriptors of the first ``k`` blocks on both sides."""
        if self.prefill is None:
            raise ValueError("a read needs a prefill side")
        p = self.prefill.held.get(rid, [])
        d = self.decode.held.get(rid, [])
        if len(p) > k:  # (a copy only when something is cut off)
            p = p[:k]
        if len(d) > k:
            d = d[:k]
        k = min(len(p), len(d))
        count = block_descriptors(p[:k] if len(p) > k else p, d[:k] if len(d) > k else d)
        if self.on_read is not None:
            self.on_read(rid, count, k)
        return count


@dataclass
class Request:
    """One request of the stream and its state once admitted."""

    prefill: int
    decode: int
    family: int  # -1: no shared prefix
    phase: int  # steps until its first decode block, 1..decode_every
    rid: int = 0
    next_step: int = 0
    decode_left: int = 0


def _rid(req: Request) -> int:
    return req.rid


def _lognormal(rng: random.Random, median: float, sigma: float, top: int) -> int:
    return max(1, min(top, round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))))


class RequestStream:
    """The seeded request stream: the same for every policy (it never sees the queue)."""

    def __init__(self, workload: Workload, seed: int) -> None:
        self.w = workload
        self.rng = random.Random(f"churn:{seed}")
        top = max(1, round(workload.prefill_median))
        self.family_prefix = [self.rng.randint(1, top) for _ in range(workload.families)]
        self.family_weights = [1.0 / (k + 1) for k in range(workload.families)]
        self.count = 0

    def next(self) -> Request:
        """The next request."""
        w, rng = self.w, self.rng
        prefill = _lognormal(rng, w.prefill_median, w.prefill_sigma, w.prefill_max)
        decode = _lognormal(rng, w.decode_median, w.decode_sigma, w.decode_max)
        family = -1
        if rng.random() < w.prefix_share:
            family = rng.choices(range(w.families), self.family_weights)[0]
        self.count += 1
        return Request(prefill, decode, family, rng.randint(1, w.decode_every), self.count)


class Churn:
    """The synthetic workload on :class:`Pools`.

    Parameters
    ----------
    workload
        The parameters.
    seed
        Seed of the request stream.
    queue, blocks, alloc
        The decode side (:class:`Side`).
    prefill
        ``(queue, blocks, alloc)`` of a prefill side, or ``None``: one pool, no reads.
    """

    def __init__(
        self,
        workload: Workload,
        seed: int,
        queue: Any,
        blocks: list[Any],
        alloc: Callable[[int], list],
        prefill: tuple[Any, list[Any], Callable[[int], list]] | None = None,
    ) -> None:
        self.w = workload
        decode = Side(queue, blocks, alloc, workload.free_order)
        pside = None if prefill is None else Side(*prefill, workload.free_order)
        self.pools = Pools(decode, pside)
        self.stream = RequestStream(workload, seed)
        self.pending: Request | None = None
        self.active: list[Request] = []
        #: The active requests by the step of their next decode block, each list in
        #: admission order (a step looks up its own instead of scanning ``active``).
        self._due: dict[int, list[Request]] = {}
        self.releases: deque[tuple[int, int]] = deque()  # (step, rid) of prefill holds
        self.step_no = 0
        self.committed = 0  # decode blocks still to come for the active requests
        self.hit_blocks = 0
        self.prefill_blocks = 0
        self.admitted = 0
        self.completed = 0
        #: Each family's prefix keys, built once (a request's keys are a slice of them).
        self._family_keys = [
            [(family, i) for i in range(prefix)]
            for family, prefix in enumerate(self.stream.family_prefix)
        ]

    @property
    def age(self) -> float:
        """Engine age in pool turnovers (the decode side's)."""
        return self.pools.decode.allocated / self.w.pool

    def _keys(self, req: Request) -> list[tuple[int, int]]:
        if req.family < 0:
            return []
        prefix = min(self.stream.family_prefix[req.family], req.prefill - 1)
        return self._family_keys[req.family][:prefix]

    def _admit(self, req: Request) -> bool:
        keys = self._keys(req)
        rest = req.prefill - len(keys)
        pools = self.pools
        decode = pools.decode
        # Each side's cached prefix of ``keys`` is looked up once: nothing changes a
        # side's cache between its room check and its touch (the decode side's touch and
        # alloc do not touch the prefill side's).
        d_hits = decode.cached(keys)
        if decode.room(keys, rest, d_hits) < self.committed + req.decode:
            return False
        pside = pools.prefill
        p_hits = None
        if pside is not None:
            p_hits = pside.cached(keys)
            if pside.room(keys, rest, p_hits) < 0:
                return False
        self.hit_blocks += len(d_hits)  # what the touch below reuses
        if pools.record is None:
            # The events of the branch below, run directly (what Pools.apply would run).
            if keys:
                decode.touch(req.rid, keys, d_hits)
            decode.allocate(req.rid, rest)
            if pside is not None:
                if keys:
                    pside.touch(req.rid, keys, p_hits)
                pside.allocate(req.rid, rest)
                pools.read(req.rid, req.prefill)
        else:  # a trace writer sees every event
            apply = pools.apply
            for side in (DECODE, PREFILL) if pside is not None else (DECODE,):
                if keys:
                    apply({"op": "touch", "req": req.rid, "side": side, "keys": keys})
                apply({"op": "alloc", "req": req.rid, "side": side, "n": rest})
            if pside is not None:
                apply({"op": "read", "req": req.rid, "n": req.prefill})
        if pside is not None:
            self.releases.append((self.step_no + self.w.hold_steps, req.rid))
        req.next_step = self.step_no + req.phase
        self._due.setdefault(req.next_step, []).append(req)
        req.decode_left = req.decode
        self.committed += req.decode
        self.prefill_blocks += req.prefill
        self.admitted += 1
        self.active.append(req)
        return True

    def step(self) -> None:
        """One engine step: decode growth and completions, prefill-side releases, then
        admissions."""
        now = self.step_no
        pools = self.pools
        apply = pools.apply
        direct = pools.record is None  # no trace writer: run the events without dicts
        decode = pools.decode
        every = self.w.decode_every
        done = []
        # The requests whose next decode block is due now, in the order of ``active``
        # (admission order, so rid order): every active request is due at exactly its
        # ``next_step`` (each step serves all that are due), never later.
        due = self._due.pop(now, ())
        if len(due) > 1:
            due.sort(key=_rid)
        for req in due:
            if direct:
                decode.allocate(req.rid, 1)
            else:
                apply({"op": "alloc", "req": req.rid, "n": 1})
            req.decode_left -= 1
            self.committed -= 1
            req.next_step += every
            if req.decode_left == 0:
                done.append(req)
            else:
                self._due.setdefault(req.next_step, []).append(req)
        if done:
            # What removing each one did (rids are unique): the rest, in their order.
            self.active = [req for req in self.active if req.decode_left != 0]
        for req in done:
            if direct:
                decode.free(req.rid)
            else:
                apply({"op": "free", "req": req.rid})
            self.completed += 1
        unpin = self.w.prefill_release == "unpin"
        while self.releases and self.releases[0][0] <= now:
            _, rid = self.releases.popleft()
            apply({"op": "free", "req": rid, "side": PREFILL, "unpin": unpin})
        while len(self.active) < self.w.concurrency:
            if self.pending is None:
                self.pending = self.stream.next()
            if not self._admit(self.pending):
                break
            self.pending = None
        self.step_no += 1

    def run(self, steps: int) -> None:
        """Run ``steps`` steps."""
        for _ in range(steps):
            self.step()

    def run_until(self, turnovers: float) -> None:
        """Run steps until the engine age reaches ``turnovers``."""
        while self.age < turnovers:
            self.step()
