"""The timed workloads (docs/design.md §4): one *cycle* per case, and the loop that times it.

Each case builds, before any timing, a ``run(loops) -> ns`` function over one queue.
The loop code is identical for every variant (only the queue object differs), so loop
overhead cancels in the paired ratio. Setup (choosing blocks, shuffles) is never timed.

Standard library only (runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
import types
from collections.abc import Callable
from itertools import repeat
from time import perf_counter_ns
from typing import Any

#: Batch sizes of the ``mix`` workload: 90 singletons, 5 pairs, 4 of 8, 1 of 32.
MIX_SIZES = (1,) * 90 + (2,) * 5 + (8,) * 4 + (32,)
#: Blocks per shuffled order in the ``remove`` case (capped at half the pool).
REMOVE_BLOCKS = 1024

Runner = Callable[[int], int]

#: Queue methods each case calls (a variant must be able to call them: its own or its
#: adapter's, see ``loader.Variant.can``).
CASE_METHODS: dict[str, tuple[str, ...]] = {
    "alloc1": ("popleft_n", "append_n"),
    "alloc2": ("popleft_n", "append_n"),
    "alloc8": ("popleft_n", "append_n"),
    "alloc32": ("popleft_n", "append_n"),
    "mix": ("popleft_n", "append_n"),
    "popappend": ("popleft", "append"),
    "remove": ("remove", "append"),
}


def ops_per_loop(case: str, pool: int) -> int:
    """Units timed per loop iteration: ns/cycle = ns_total / (loops * ops_per_loop)."""
    if case == "mix":
        return len(MIX_SIZES)
    if case == "remove":
        return 2 * min(REMOVE_BLOCKS, pool // 2)
    return 1


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
        One of ``alloc1 alloc2 alloc8 alloc32 mix popappend remove``.
    q
        A full queue (every block of ``blocks`` free).
    blocks
        The pool's blocks in block-id order.
    seed
        Seed of the case's fixed shuffles; the same for every variant.

    Returns
    -------
    callable
        ``run(loops) -> ns`` timing ``loops`` iterations with ``perf_counter_ns``.
    """
    if case.startswith("alloc"):
        run = _alloc(q, int(case[len("alloc") :]))
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
    return types.FunctionType(code, run.__globals__, run.__name__, None, run.__closure__)
