"""Allocation policies over a ``FreeKVCacheBlockQueue`` (docs/design.md §12).

A *policy* is ``policy(queue, n) -> list of n blocks``: it takes ``n`` free blocks out of
the queue and returns them in the order the caller maps them to logical positions.

``lru``
    The baseline: ``queue.popleft_n(n)``, the n least recently freed blocks, in eviction
    order. This is what vLLM does.
``contiguous``
    The contiguous-run policy proposed as an opt-in in vLLM PR #55841, written here from
    its description (not from its code): for ``n >= threshold`` blocks, look at the first
    ``window_factor * n`` blocks of the free queue (all of it when ``window_factor`` is
    ``None``), split that prefix into maximal runs of queue-adjacent blocks whose ids step
    by +1 or by -1, take the longest runs first, each returned ascending, then fill what
    is still missing with ``popleft_n`` (normal eviction order). Smaller allocations are
    ``popleft_n`` unchanged.

Choices the description leaves open, made here:

- Only runs of two or more blocks are taken out of the window; single blocks are left to
  the ``popleft_n`` remainder, which takes the oldest remaining blocks first, so a
  window of singles gives exactly what ``popleft_n`` gives.
- Ties between runs of equal length: the run nearer the head (older) first, so that the
  policy bends eviction order as little as it can for the contiguity it gets.
- A run longer than what is still needed: its first ``need`` blocks in queue order (the
  oldest part) are taken, ascending; the rest stays in the queue. When only one block
  is still needed, no run is cut for it: it comes from the head like any remainder.
- Return order: the runs in the order they were taken (longest first), each ascending,
  then the ``popleft_n`` remainder in eviction order.
- ``n`` larger than the free count: ``popleft_n(n)`` is called first and fails exactly
  as it does, before anything is removed.
- A run is a maximal segment of the queue order with ``|id[i+1] - id[i]| == 1``; since
  ids are distinct such a segment is monotone, so the split is unique.
- The PR's unpin rule: blocks released by an unpin (``last_resort``) are last-resort
  candidates; they split runs and are never part of a selected run, so only the
  ``popleft_n`` remainder (the ordinary fallback) takes them.

The policy uses only the queue's public API: ``iter_blocks_after`` (from the head
sentinel ``fake_free_list_head``), ``remove``, ``popleft_n`` and ``num_free_blocks``
(and the workload's free path ``prepend_n``). So it runs on a variant with the sentinel
structure, its own ``popleft_n``, ``iter_blocks_after`` and ``prepend_n``: ``kvqueue``
and vLLM 0.26.0 on. Older releases lack
``iter_blocks_after`` (0.10.0-0.25.1) or have the head-tail structure without
``popleft_n`` (before 0.10.0); :func:`unsupported` names what such a variant lacks, and
a policy run refuses it before anything runs. Standard library only: it runs in the bare
measured interpreter.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import partial
from typing import Any

#: Allocations of fewer blocks than this take the default path (the PR's eight).
DEFAULT_THRESHOLD = 8
#: Window factors of the registry; ``None`` is the unbounded search.
WINDOW_FACTORS: tuple[int | None, ...] = (1, 2, 4, 8, None)

Policy = Callable[[Any, int], list]


def lru(queue: Any, n: int, last_resort: Collection[int] = ()) -> list:
    """The baseline policy: ``queue.popleft_n(n)`` (vLLM's eviction order).

    Parameters
    ----------
    queue
        A ``FreeKVCacheBlockQueue`` (any variant).
    n
        Number of blocks.
    last_resort
        Ignored (the ordinary path treats every free block alike).

    Returns
    -------
    list
        The ``n`` blocks at the head of the queue, in eviction order.
    """
    return queue.popleft_n(n)


def split_runs(ids: Sequence[int]) -> list[tuple[int, int]]:
    """Split a sequence of block ids into maximal runs whose ids step by +1 or -1.

    Parameters
    ----------
    ids
        Distinct block ids in queue order.

    Returns
    -------
    list of (start, length)
        Index into ``ids`` and length of every maximal run, in order; lengths sum to
        ``len(ids)`` (a lone block is a run of length 1).
    """
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(ids)):
        step = ids[i] - ids[i - 1]
        if step != 1 and step != -1:
            out.append((start, i - start))
            start = i
    if ids:
        out.append((start, len(ids) - start))
    return out


def contiguous(
    queue: Any,
    n: int,
    window_factor: int | None = 4,
    threshold: int = DEFAULT_THRESHOLD,
    last_resort: Collection[int] = (),
) -> list:
    """The contiguous-run policy (see the module docstring for every rule).

    Parameters
    ----------
    queue
        A ``FreeKVCacheBlockQueue`` (any variant); only its public API is used.
    n
        Number of blocks.
    window_factor
        The search looks at the first ``window_factor * n`` free blocks; ``None``:
        the whole queue.
    threshold
        Allocations of fewer blocks are ``popleft_n(n)`` unchanged.
    last_resort
        Ids of blocks released by an unpin (the PR's last-resort candidates): they break
        runs and are never part of a selected run; only the ``popleft_n`` remainder (the
        ordinary fallback) can take them. Empty: the policy as before.

    Returns
    -------
    list
        ``n`` distinct blocks that were free: the chosen runs (longest first, each
        ascending), then the remainder in eviction order.
    """
    if n < threshold or n > queue.num_free_blocks:
        return queue.popleft_n(n)
    limit = queue.num_free_blocks if window_factor is None else window_factor * n
    window = []
    # Collect the whole window before touching the queue: the iterator walks the links
    # that remove() rewrites.
    for block in queue.iter_blocks_after(queue.fake_free_list_head):
        window.append(block)
        if len(window) >= limit:
            break
    ids = [b.block_id for b in window]
    runs = [r for r in split_runs(ids) if r[1] >= 2]
    if last_resort:
        runs = [
            piece
            for start, length in runs
            for piece in _without(start, ids[start : start + length], last_resort)
        ]
    # Longest first; equal lengths: nearer the head first (sort is stable).
    runs.sort(key=lambda r: -r[1])
    taken: list = []
    need = n
    for start, length in runs:
        if need < 2:
            break  # a single block of a run is no run: leave it to the head
        part = window[start : start + min(length, need)]
        if part[0].block_id > part[-1].block_id:
            part.reverse()
        for block in part:
            queue.remove(block)
        taken.extend(part)
        need -= len(part)
    if need:
        taken.extend(queue.popleft_n(need))
    return taken


def _without(start: int, run: Sequence[int], excluded: Collection[int]) -> list[tuple[int, int]]:
    """The pieces of ``run`` (starting at index ``start``) between excluded ids, as
    ``(start, length)`` with length >= 2: an excluded block breaks a run and joins none."""
    out: list[tuple[int, int]] = []
    first = None
    for k, block_id in enumerate([*run, None]):
        if block_id is None or block_id in excluded:
            if first is not None and k - first >= 2:
                out.append((start + first, k - first))
            first = None
        elif first is None:
            first = k
    return out


def window_of(name: str) -> int | None:
    """The window factor of a registry policy name (``contig-w4`` -> 4, ``contig-inf``
    -> None); 0 for ``lru``."""
    if name == LRU:
        return 0
    tail = name.removeprefix("contig-")
    return None if tail == "inf" else int(tail.removeprefix("w"))


def policy_name(window_factor: int | None) -> str:
    """Registry name of the contiguous policy with ``window_factor`` (None: unbounded)."""
    return "contig-inf" if window_factor is None else f"contig-w{window_factor}"


LRU = "lru"
#: Registry names in report order: the baseline, then the windows from small to unbounded.
NAMES: tuple[str, ...] = (LRU, *(policy_name(w) for w in WINDOW_FACTORS))


def get(name: str, threshold: int = DEFAULT_THRESHOLD) -> Policy:
    """The policy called ``name`` as ``policy(queue, n)``: ``lru``, ``contig-inf`` or
    ``contig-wK`` for any whole ``K >= 1`` written without leading zeros (:data:`NAMES`
    lists the registry's, but a run may choose any window).

    Raises
    ------
    KeyError
        An unknown name.
    """
    if name == LRU:
        return lru
    tail = name.removeprefix("contig-w")
    if name != "contig-inf" and not (
        name.startswith("contig-w") and tail.isdecimal() and tail.isascii() and tail[0] != "0"
    ):
        raise KeyError(
            f"unknown policy {name!r}: lru, contig-inf or contig-wK with a whole K >= 1 "
            f"(registry: {' '.join(NAMES)})"
        )
    return partial(contiguous, window_factor=window_of(name), threshold=threshold)


#: What :func:`contiguous` and the churn's free path (``prepend_n`` for unhashed blocks,
#: :mod:`kvqueue.policy.churn`) need of a variant, beyond the loader's core methods.
REQUIRED_METHODS = ("popleft_n", "iter_blocks_after", "prepend_n")
#: ``kvqueue.sources.loader.STRUCTURE_SENTINELS`` (not imported: this module stays import-light).
STRUCTURE_SENTINELS = "sentinels"


def unsupported(variant: Any) -> str | None:
    """Why the policies cannot run on a loaded variant (one line), or ``None``.

    Parameters
    ----------
    variant
        A :class:`kvqueue.sources.loader.Variant` (its ``structure``, ``missing``, ``adapted``).
    """
    # An adapted method (the popleft-loop adapter) is one the class lacks itself.
    lacks = [m for m in REQUIRED_METHODS if m in variant.missing or m in variant.adapted]
    if variant.structure != STRUCTURE_SENTINELS:
        lacks.append(f"the sentinel fake_free_list_head (its structure is {variant.structure})")
    if not lacks:
        return None
    return (
        f"the allocation policies need iter_blocks_after, popleft_n, prepend_n and the sentinel "
        f"fake_free_list_head (vLLM 0.26.0 on, or kvqueue); this variant lacks "
        f"{', '.join(lacks)}"
    )


def ascending_runs(ids: Sequence[int]) -> list[int]:
    """Lengths of the maximal segments of ``ids`` (return order) whose ids step by +1.

    This is the descriptor-count proxy: a transfer of blocks mapped in this order to
    consecutive logical positions can merge exactly these segments into one descriptor
    each (a descending segment does not merge).
    """
    out: list[int] = []
    length = 0
    prev = None
    for block_id in ids:
        if prev is not None and block_id == prev + 1:
            length += 1
        else:
            if length:
                out.append(length)
            length = 1
        prev = block_id
    if length:
        out.append(length)
    return out
