"""The timed workloads (docs/design.md §4): one *cycle* per case, and the loop that times it.

- ``allocN`` (any N >= 1; the defaults 1, 2, 8, 32): ``blocks = q.popleft_n(N);
  q.append_n(blocks)``, both timed; one cycle per loop.
- ``popleftN`` (any N >= 1): ``q.popleft_n(N)`` alone. The blocks must go back (a queue
  holds only so many), so the cycles come in *stretches*: untimed, the blocks the
  stretch will pop are read off the front of the queue (:func:`first_free`); one clock
  read; as many consecutive ``q.popleft_n(N)`` as :func:`popleft_stretch` allows (the
  pool's blocks, at most :data:`STRETCH_BLOCKS` of them, at least one call), each
  returned list dropped at once, as ``allocN`` drops it; one clock read; then, untimed,
  the blocks go back in N-block lists through the variant's own ``append_n`` (so the
  queue's order after a stretch is the one ``allocN`` leaves). What the figure counts:
  per cycle, one ``q.popleft_n(N)`` (attribute look-up, call, building and freeing the
  returned list) and the loop step, plus the stretch's two clock reads shared by its
  calls (a stretch is 1,024 blocks' worth of calls, or the whole pool on a smaller one:
  64 calls of ``popleft1`` at the least); never the put-back. By instructions
  (:mod:`kvqueue.measure.cachegrind`) the same: a counted target run is ONE stretch of
  ``loops`` calls from the full queue (:func:`target_ops` keeps ``loops * N`` within the
  pool) and the process ends before any block goes back (``run(loops, last=True)``), so
  the put-back is in no count either; on a pool of fewer than 100 N blocks that is fewer
  than 100 calls, and a run's own allocator events then move the figure by a few % (the
  count says so: :func:`kvqueue.measure.cachegrind.few_calls_notes`). The popped blocks
  stay detached until the process ends, and the counted worker keeps its layout alive
  to the end, so their teardown is not counted either
  (:data:`kvqueue.measure.counted_worker.KEPT_NAME`).
- ``mix``: a fixed shuffled sequence of 100 allocations (:data:`MIX_SIZES`), each freed.
- ``popappend``: ``q.append(q.popleft())``.
- ``remove``: ``q.remove(b); q.append(b)`` over interior blocks (:func:`remove_walk`).

Each case builds, before any timing, a ``run(loops) -> ns`` function over one queue.
The loop code is identical for every variant (only the queue object differs), so loop
overhead cancels in the paired ratio. Setup (choosing blocks, shuffles) is never timed.
N is parsed by :func:`kvqueue.schema.case_size`, the parser every subject shares.

Standard library only (runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
import types
from collections.abc import Callable, Sequence
from itertools import repeat
from time import perf_counter_ns
from typing import Any

from kvqueue import schema

#: Batch sizes of the ``mix`` workload: 90 singletons, 5 pairs, 4 of 8, 1 of 32.
MIX_SIZES = (1,) * 90 + (2,) * 5 + (8,) * 4 + (32,)
#: Blocks per shuffled order in the ``remove`` case (capped at half the pool).
REMOVE_BLOCKS = 1024

#: Blocks a ``popleftN`` stretch pops at most (at least one call): the held lists stay
#: few, and the queue is popped from near full, as ``allocN`` pops it.
STRETCH_BLOCKS = 1024
#: Counted operations of a sized case move at most as many blocks as ``alloc32``'s
#: (:func:`warmup_ops`, :func:`target_ops`): a larger N counts fewer operations, at
#: least :data:`MIN_COUNTED_OPS`.
COUNTED_BLOCKS_PER_OP = 32
MIN_COUNTED_OPS = 20

Runner = Callable[..., int]


def batch_size(case: str) -> int | None:
    """N of ``allocN`` or ``popleftN`` (the blocks one cycle pops), else None."""
    for family in schema.SIZED_FAMILIES[schema.SUBJECT_QUEUE]:
        n = schema.case_size(case, family)
        if n is not None:
            return n
    return None


def is_case(case: str) -> bool:
    """Whether ``case`` is a queue case (``allocN``, ``popleftN`` of any N >= 1, or fixed)."""
    return schema.is_case(schema.SUBJECT_QUEUE, case)


def case_methods(case: str) -> tuple[str, ...]:
    """Queue methods ``case`` calls (a variant must be able to call them: its own or its
    adapter's, see ``loader.Variant.can``)."""
    if case == "popappend":
        return ("popleft", "append")
    if case == "remove":
        return ("remove", "append")
    return ("popleft_n", "append_n")  # allocN, popleftN (its put-back), mix


def smallest_pool(case: str) -> int:
    """The fewest blocks ``case`` runs on: N for ``allocN`` and ``popleftN``, the largest
    batch of ``mix``, three for ``remove`` (interior blocks), one for ``popappend``
    (every pool is also at least :data:`kvqueue.schema.MIN_POOL`)."""
    n = batch_size(case)
    if n is not None:
        return n
    return {"mix": max(MIX_SIZES), "remove": 3}.get(case, 1)


def timed_batches(cases: Sequence[str]) -> tuple[int, ...]:
    """The batch lengths ``cases`` pop and give back: N of ``allocN``/``popleftN`` and the
    batches of ``mix`` (what the gate's timed-size check must call), sorted."""
    found: set[int] = set()
    for case in cases:
        n = batch_size(case)
        if n is not None:
            found.add(n)
        elif case == "mix":
            found.update(MIX_SIZES)
    return tuple(sorted(found))


def ops_per_loop(case: str, pool: int) -> int:
    """Units timed per loop iteration: ns/cycle = ns_total / (loops * ops_per_loop)."""
    if case == "mix":
        return len(MIX_SIZES)
    if case == "remove":
        return 2 * min(REMOVE_BLOCKS, pool // 2)
    return 1


def _counted(case: str, ops: int) -> int:
    n = batch_size(case)
    if n is None or n <= COUNTED_BLOCKS_PER_OP:
        return ops
    return max(MIN_COUNTED_OPS, ops * COUNTED_BLOCKS_PER_OP // n)


def warmup_ops(case: str, ops: int) -> int:
    """Operations a counted cell of ``case`` is warmed up by, of the ``ops`` every queue
    case gets: fewer for N above :data:`COUNTED_BLOCKS_PER_OP` (``alloc500``: 128 of
    2,000), so that no cell moves more blocks than ``alloc32`` (each call's own loop
    has run N times: CPython has specialized it long before)."""
    return _counted(case, ops)


def target_ops(case: str, pool: int, ops: int) -> int:
    """Operations a counted target run of ``case`` adds, of the ``ops`` of every queue
    case: fewer for a large N (see :func:`warmup_ops`; counts are exact, so fewer
    operations cost no precision), and for ``popleftN`` at most what the full pool holds
    (the target is one stretch, nothing given back: the module docstring)."""
    counted = _counted(case, ops)
    n = schema.case_size(case, "popleft")
    if n is not None:
        counted = min(counted, pool // n)
    return max(1, counted)


def takes_last(case: str) -> bool:
    """Whether ``case``'s runner takes ``last`` (``run(loops, last=True)``: the process's
    last call, nothing given back): ``popleftN``."""
    return schema.case_size(case, "popleft") is not None


def popleft_stretch(n: int, pool: int) -> int:
    """Calls of ``popleft_n(n)`` per timed stretch on a pool of ``pool`` blocks: what the
    pool holds, at most :data:`STRETCH_BLOCKS` blocks' worth, at least one."""
    return max(1, min(pool, STRETCH_BLOCKS) // n)


def mix_composition() -> str:
    """The ``mix`` batch sizes in words, e.g. ``90×1, 5×2, 4×8, 1×32`` (for the report)."""
    counts: dict[int, int] = {}
    for size in MIX_SIZES:
        counts[size] = counts.get(size, 0) + 1
    return ", ".join(f"{n}×{size}" for size, n in counts.items())


def mix_sequence(seed: int) -> list[int]:
    """Return the fixed shuffled sequence of batch sizes of the ``mix`` case."""
    seq = list(MIX_SIZES)
    random.Random(seed).shuffle(seq)
    return seq


def _alloc(q: Any, k: int) -> Runner:
    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in repeat(None, loops):
            blocks = q.popleft_n(k)
            q.append_n(blocks)
        return perf_counter_ns() - t0

    return run


def _mix(q: Any, seq: list[int]) -> Runner:
    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in repeat(None, loops):
            for k in seq:
                blocks = q.popleft_n(k)
                q.append_n(blocks)
        return perf_counter_ns() - t0

    return run


def first_free(q: Any, count: int) -> list[Any]:
    """The first ``count`` free blocks of ``q`` in queue order (at most its free count),
    read through the documented links: the head sentinel's (vLLM 0.10.0 on) or
    ``free_list_head`` (the head-tail queues before)."""
    head = getattr(q, "fake_free_list_head", None)
    node = head.next_free_block if head is not None else q.free_list_head
    out = []
    for _ in range(count):
        out.append(node)
        node = node.next_free_block
    return out


def _popleft(q: Any, n: int, pool: int) -> Runner:
    stretch = popleft_stretch(n, pool)

    def run(loops: int, last: bool = False) -> int:
        # last: nothing runs on this queue after this call (a counted target run, whose
        # process then ends): one stretch of every loop, nothing given back.
        total = 0
        while loops:
            calls = loops if last else min(loops, stretch)
            taken = [] if last else first_free(q, calls * n)
            t0 = perf_counter_ns()
            for _ in repeat(None, calls):
                q.popleft_n(n)
            total += perf_counter_ns() - t0
            loops -= calls
            for start in range(0, len(taken), n):
                q.append_n(taken[start : start + n])
        return total

    return run


def _popappend(q: Any) -> Runner:
    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in repeat(None, loops):
            q.append(q.popleft())
        return perf_counter_ns() - t0

    return run


def _remove(q: Any, walk: list[Any]) -> Runner:
    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in repeat(None, loops):
            for b in walk:
                q.remove(b)
                q.append(b)
        return perf_counter_ns() - t0

    return run


def remove_walk(blocks: list[Any], seed: int) -> list[Any]:
    """Two shuffled orders of the same interior blocks, concatenated (walked alternately).

    Walking one order repeatedly would make every removal hit the block right after the
    previous one (they were appended in that order); a second order breaks the pattern.
    """
    rng = random.Random(seed)
    count = min(REMOVE_BLOCKS, len(blocks) // 2)
    # Interior: never the first or last block of the initial order.
    chosen = rng.sample(blocks[1:-1], count)
    first, second = chosen[:], chosen[:]
    rng.shuffle(first)
    rng.shuffle(second)
    return first + second


def make_runner(case: str, q: Any, blocks: list[Any], seed: int) -> Runner:
    """Build the timed function of ``case`` over queue ``q`` (whose blocks are ``blocks``).

    Parameters
    ----------
    case
        ``allocN``, ``popleftN`` (N >= 1), ``mix``, ``popappend`` or ``remove``.
    q
        A full queue (every block of ``blocks`` free).
    blocks
        The pool's blocks in block-id order.
    seed
        Seed of the case's fixed shuffles; the same for every variant.

    Returns
    -------
    callable
        ``run(loops) -> ns`` timing ``loops`` iterations with ``perf_counter_ns``
        (``popleftN``'s also takes ``last``: see the module docstring).
    """
    if not is_case(case):
        raise ValueError(f"unknown case {case!r}")
    if len(blocks) < smallest_pool(case):
        raise ValueError(f"case {case} needs a pool of at least {smallest_pool(case):,} blocks")
    alloc, popleft = schema.case_size(case, "alloc"), schema.case_size(case, "popleft")
    if alloc is not None:
        run = _alloc(q, alloc)
    elif popleft is not None:
        run = _popleft(q, popleft, len(blocks))
    elif case == "mix":
        run = _mix(q, mix_sequence(seed))
    elif case == "popappend":
        run = _popappend(q)
    elif case == "remove":
        run = _remove(q, remove_walk(blocks, seed))
    else:
        raise ValueError(f"unknown case {case!r}")
    return private_code(run)


def private_code(run: Runner) -> Runner:
    """Return ``run`` rebuilt on a private copy of its code object.

    The closures of one case share one code object, and CPython caches attribute and
    method look-ups per code object (3.10's opcache, 3.11+'s specializing interpreter).
    A call site such as ``q.popleft_n`` shared by all variants is polymorphic: it ends
    up specialized for one queue class (or de-optimized), which favoured some variants
    by up to 15% in an A/A pair. A copy per variant keeps every call site monomorphic.
    """
    code = run.__code__.replace()
    return types.FunctionType(
        code, run.__globals__, run.__name__, run.__defaults__, run.__closure__
    )
