"""The timed workloads of the pool subject: vLLM's ``BlockPool`` as the KV-cache manager
drives it, one *operation* per case, and the loop that times it.

- ``loopN`` (N in 10, 50, 100, 500, 1000 by default; any N >= 1, parsed by
  :func:`kvqueue.schema.case_size`): vLLM's own benchmark loop
  (``benchmarks/kv_cache/benchmark_block_pool.py``): ``get_new_blocks(N)`` then
  ``free_blocks`` of those blocks; one operation is one round (both calls), so a reader
  can set the figure beside the sum of upstream's two per-call times. Upstream times
  1,000 rounds once, in one process, without warm-up or repeats; here the paired
  per-process protocol applies. Freed blocks are unhashed, so from 0.24.0 on they go
  back to the front and the same blocks return every round (as upstream's loop does).
- ``churn``: the allocation path of one request under prefix caching, with eviction:
  one operation is one request finished (its blocks freed last block first, as
  ``KVCacheManager.free`` orders them) and one admitted (its cached prefix looked up
  block by block with ``get_cached_block``, the hits ``touch``-ed, which takes them out
  of the middle of the free queue, the rest allocated with ``get_new_blocks``, which
  evicts cached blocks once the pool is full of them, and its full blocks cached with
  ``cache_full_blocks``). The requests are a fixed seeded script, the same for every
  variant, cycled: about half of each request's blocks are a prefix shared with the
  other requests of its family, and the script holds about twice as many distinct block
  hashes as the pool has blocks, so the cache fills, hits and evicts at any pool size.

Each case builds, before any timing, a ``run(loops) -> ns`` function over one pool; the
loop code is the same for every variant (only the pool object differs) and is a private
copy per variant (:func:`kvqueue.subjects.queue_cases.private_code`). Setup (the request
script, its hashes and request objects) is never timed. Events are off, no metrics
collector.

Standard library only (runs inside the worker under the measured interpreter).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

from kvqueue import schema
from kvqueue.subjects.pool_api import PoolAPI, PoolRequest, no_hash_fn
from kvqueue.subjects.queue_cases import Runner, private_code

#: Tokens per block (vLLM's default ``block_size``).
BLOCK_SIZE = 16
#: Live requests of the churn workload, and the range of a request's blocks: at most
#: ``CONCURRENCY * MAX_BLOCKS`` = 512 blocks are held, a quarter of the smallest pool
#: it runs on (2,048); the rest of the pool is free, mostly holding cached blocks.
CONCURRENCY = 8
MIN_BLOCKS, MAX_BLOCKS = 4, 64
#: Requests per prefix family; about half of a request's full blocks are its family's.
FAMILY_SIZE = 16
#: Distinct block hashes of the script per block of the pool (see the module docstring).
HASHES_PER_BLOCK = 2


def loop_size(case: str) -> int | None:
    """N of ``loopN`` (any N >= 1), or None for another case."""
    return schema.case_size(case, "loop")


def is_case(case: str) -> bool:
    """Whether ``case`` is a pool case (``loopN`` of any N >= 1, or ``churn``)."""
    return schema.is_case(schema.SUBJECT_POOL, case)


def ops_per_loop(case: str, pool: int) -> int:
    """Operations per loop iteration: one round of ``loopN``, one request of ``churn``."""
    return 1


def warmup_ops(case: str) -> int:
    """Operations a counted cell is warmed up by (the queue's 2,000 would be 2 million
    block allocations of ``loop1000``): enough executions of every call for CPython to
    specialize them, at least 20."""
    n = loop_size(case)
    return max(20, 2_000 // n) if n is not None else 50


def target_ops(case: str) -> int:
    """Operations a counted target run adds: about as many blocks allocated as the
    queue's 20,000 operations of ``alloc1`` pop (40,000 for ``loopN``, at least 40
    rounds), 400 requests of ``churn``."""
    n = loop_size(case)
    return max(40, 40_000 // n) if n is not None else 400


def smallest_pool(case: str) -> int:
    """The fewest blocks ``case`` runs on: ``loopN`` allocates N blocks (the null block
    is one more); ``churn`` holds up to ``CONCURRENCY * MAX_BLOCKS`` and admits one more
    request before it frees one."""
    n = loop_size(case)
    if n is not None:
        return n + 1
    return (CONCURRENCY + 1) * MAX_BLOCKS + 1


def _loop(pool: Any, n: int) -> Runner:
    get_new_blocks, free_blocks = pool.get_new_blocks, pool.free_blocks

    def run(loops: int) -> int:
        t0 = perf_counter_ns()
        for _ in range(loops):
            free_blocks(get_new_blocks(n))
        return perf_counter_ns() - t0

    return run


def churn_script(pool: int, seed: int) -> list[tuple[tuple[int, ...], int]]:
    """The churn workload's requests: ``(block labels, full blocks)`` each, seeded.

    A request of ``n`` blocks (uniform in ``MIN_BLOCKS .. MAX_BLOCKS``) has ``n - 1``
    full blocks (the last is partial, as a request that is still decoding has): the
    first half of them carry its family's prefix labels, the rest labels of its own.
    """
    rng = random.Random(seed)
    mean_own = (MIN_BLOCKS + MAX_BLOCKS) / 2 / 2 + 1
    requests = max(4 * FAMILY_SIZE, round(HASHES_PER_BLOCK * pool / mean_own))
    families = max(1, requests // FAMILY_SIZE)
    prefixes = [
        tuple(range((f + 1) << 40, ((f + 1) << 40) + MAX_BLOCKS // 2)) for f in range(families)
    ]
    out = []
    label = 1
    for _ in range(requests):
        n = rng.randint(MIN_BLOCKS, MAX_BLOCKS)
        full = n - 1
        shared = prefixes[rng.randrange(families)][: full // 2]
        own = tuple(range(label, label + n - len(shared)))
        label += len(own)
        out.append((shared + own, full))
    return out


def _churn(api: PoolAPI, pool: Any, script: list[tuple[tuple[int, ...], int]]) -> Runner:
    """The churn runner over ``pool`` (the script's hashes and requests built here).

    The pool's methods are called directly, with the arguments its release takes
    decided here (untimed): through :class:`~kvqueue.subjects.pool_api.PoolAPI` every
    call would build a keyword dict and pass one shared call site for every variant.
    """
    hashes = {lab: api.block_hash(lab) for labels, _ in script for lab in labels}
    requests = [
        PoolRequest(f"r{k}", [hashes[lab] for lab in labels], [0] * (BLOCK_SIZE * len(labels)))
        for k, (labels, _full) in enumerate(script)
    ]
    sizes = [len(labels) for labels, _full in script]
    fulls = [full for _labels, full in script]
    prefix = [request.block_hashes[:full] for request, full in zip(requests, fulls, strict=True)]
    lookup: Callable[[Any, Any], Any] = pool.get_cached_block
    get_new_blocks, free_blocks = pool.get_new_blocks, pool.free_blocks
    pool_touch, cache = pool.touch, pool.cache_full_blocks
    groups = [0]
    live: deque[list[Any]] = deque()
    if api.touch_groups:  # 0.10.x: one list per KV cache group

        def touch(blocks: list[Any]) -> None:
            pool_touch((blocks,))

    else:
        touch = pool_touch
    if "hash_fn" in api.cache_params:  # 0.10.0-0.10.1: the hashes are passed in

        def admit(k: int) -> None:
            request = requests[k]
            hits = []
            for block_hash in prefix[k]:
                found = lookup(block_hash, groups)
                if not found:
                    break
                hits.append(found[0])
            if hits:
                touch(hits)
            blocks = hits + get_new_blocks(sizes[k] - len(hits))
            cache(
                request=request,
                blocks=blocks,
                block_hashes=request.block_hashes,
                num_cached_blocks=len(hits),
                num_full_blocks=fulls[k],
                block_size=BLOCK_SIZE,
                hash_fn=no_hash_fn,
                kv_cache_group_id=0,
            )
            live.append(blocks)

    else:

        def admit(k: int) -> None:
            request = requests[k]
            hits = []
            for block_hash in prefix[k]:
                found = lookup(block_hash, groups)
                if not found:
                    break
                hits.append(found[0])
            if hits:
                touch(hits)
            blocks = hits + get_new_blocks(sizes[k] - len(hits))
            cache(
                request=request,
                blocks=blocks,
                num_cached_blocks=len(hits),
                num_full_blocks=fulls[k],
                block_size=BLOCK_SIZE,
                kv_cache_group_id=0,
            )
            live.append(blocks)

    # A private code object per variant, as for the timed loop (its call sites stay
    # monomorphic): ``run`` calls it through the closure cell rebound here.
    admit = private_code(admit)
    count = len(requests)
    # The pool starts with CONCURRENCY live requests (setup: untimed).
    for k in range(CONCURRENCY):
        admit(k % count)
    position = [CONCURRENCY % count]

    def run(loops: int) -> int:
        k = position[0]
        t0 = perf_counter_ns()
        for _ in range(loops):
            free_blocks(reversed(live.popleft()))
            admit(k)
            k += 1
            if k == count:
                k = 0
        elapsed = perf_counter_ns() - t0
        position[0] = k
        return elapsed

    return run


def make_runner(case: str, api: PoolAPI, pool: Any, seed: int) -> Runner:
    """Build the timed function of ``case`` over ``pool`` (made by ``api.new_pool``).

    Parameters
    ----------
    case
        ``loopN`` (N >= 1) or ``churn`` (:func:`is_case`).
    api
        How to call the pool's release (:func:`kvqueue.subjects.pool_api.pool_api`).
    pool
        A fresh pool, every block free.
    seed
        Seed of the churn script; the same for every variant.

    Returns
    -------
    callable
        ``run(loops) -> ns`` timing ``loops`` operations with ``perf_counter_ns``.
    """
    size = len(pool.blocks)
    if size < smallest_pool(case):
        raise ValueError(f"case {case} needs a pool of at least {smallest_pool(case):,} blocks")
    n = loop_size(case)
    if n is not None:
        run = _loop(pool, n)
    elif case == "churn":
        run = _churn(api, pool, churn_script(size, seed))
    else:
        raise ValueError(f"unknown pool case {case!r}")
    return private_code(run)
