"""Validation of allocation policies by invariants (docs/design.md §12).

A policy returns different blocks than ``popleft_n`` by design, so the bench gate
(equality with the baseline) cannot judge it. Instead, every allocation of the churn
workload (:mod:`kvqueue.policy.churn`) is checked against rules that hold for any correct
policy, and the contiguous policy against a list model of its description:

- the returned blocks are ``n`` distinct blocks that were free, now detached (both links
  ``None``), and the queue holds exactly the other free blocks, in their old order;
- ``lru``, and any allocation below the threshold, returns exactly ``popleft_n``'s
  blocks (the first ``n`` in eviction order);
- the contiguous policy's search looks at no more than ``window_factor * n`` blocks
  (counted by a wrapper around the queue that also refuses any attribute outside the
  public API the policy may use), every block it takes from a run lies in that window,
  each run it returns is ascending by one and was queue-adjacent, and the result equals
  :func:`model` (written independently of :func:`kvqueue.policy.policies.contiguous`);
- after every step of the workload the whole queue is intact: forward and backward
  links, sentinels, count, and every block is either linked (free) or detached (held);
- the check tested the search: every contiguous policy saw at least
  :data:`MIN_BIG_ALLOCATIONS` allocations of ``threshold`` blocks or more (the check
  workload's prefills scale with the threshold, :func:`check_workload`).

Standard library only: ``python -m kvqueue.policy.policy_worker --check`` runs it in the
measured interpreter before anything is timed.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection, Iterator
from typing import Any

from kvqueue.policy import churn, policies


class PolicyCheckError(AssertionError):
    """A policy or the queue broke a rule; the message names the step and the rule."""


class WatchedQueue:
    """The queue as a policy sees it: the public API only, with the search counted.

    ``scanned`` counts the blocks ``iter_blocks_after`` yielded since the last reset.
    Any other attribute raises ``AttributeError``, so a policy that reaches into the
    queue's internals fails the check.
    """

    _ALLOWED = ("remove", "popleft_n")

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self.scanned = 0

    @property
    def num_free_blocks(self) -> int:
        """The wrapped queue's count."""
        return self._queue.num_free_blocks

    @property
    def fake_free_list_head(self) -> Any:
        """The wrapped queue's head sentinel (the documented cursor start)."""
        return self._queue.fake_free_list_head

    def iter_blocks_after(self, cursor: Any) -> Iterator[Any]:
        """The wrapped queue's iterator, counting every block it yields."""
        for block in self._queue.iter_blocks_after(cursor):
            self.scanned += 1
            yield block

    def __getattr__(self, name: str) -> Any:
        if name in self._ALLOWED:
            return getattr(self._queue, name)
        raise AttributeError(f"a policy may not use queue.{name} (public API only)")


def model(
    ids: list[int],
    n: int,
    window_factor: int | None,
    threshold: int,
    last_resort: Collection[int] = (),
) -> list[int]:
    """The contiguous policy's result on a free queue given as ids (list model).

    Written from the description, independently of :func:`kvqueue.policy.policies.contiguous`:
    every maximal ±1 run is found by extending from each start, runs of two or more are
    taken longest first (ties: nearer the head), each ascending, a run longer than
    needed contributes its oldest blocks (if that is two or more), and the rest comes
    from the head. A ``last_resort`` block (released by an unpin) joins no run.
    """
    if n < threshold or n > len(ids):
        return ids[:n]
    window = ids if window_factor is None else ids[: window_factor * n]
    runs = []
    i = 0
    while i < len(window):
        j = i + 1
        if window[i] in last_resort:
            i = j
            continue
        while (
            j < len(window) and abs(window[j] - window[j - 1]) == 1 and window[j] not in last_resort
        ):
            j += 1
        if j - i >= 2:
            runs.append((-(j - i), i, window[i:j]))
        i = j
    out: list[int] = []
    for _, _, run in sorted(runs):
        need = n - len(out)
        if need < 2:
            break  # one block of a run is no run: the head gives it
        part = run[:need]
        out.extend(sorted(part))
    taken = set(out)
    out.extend([b for b in ids if b not in taken][: n - len(out)])
    return out


def free_ids(queue: Any) -> list[int]:
    """Ids of the free blocks in eviction order (walking ``next_free_block`` links)."""
    out = []
    tail = queue.fake_free_list_tail
    node = queue.fake_free_list_head.next_free_block
    while node is not None and node is not tail:
        out.append(node.block_id)
        node = node.next_free_block
        if len(out) > 10_000_000:
            raise PolicyCheckError("the free list has a cycle")
    return out


def check_queue(queue: Any, blocks: list[Any], held: list[int], where: str) -> None:
    """The whole queue is intact; ``held[i] > 0`` iff block ``i`` must be detached.

    Raises
    ------
    PolicyCheckError
        The first broken rule.
    """
    head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
    if head.prev_free_block is not None or tail.next_free_block is not None:
        raise PolicyCheckError(f"{where}: a sentinel has an outer link")
    prev = head
    count = 0
    node = head.next_free_block
    while node is not tail:
        if node is None:
            raise PolicyCheckError(f"{where}: the forward chain ends before the tail")
        if node.prev_free_block is not prev:
            raise PolicyCheckError(f"{where}: block {node.block_id} has a wrong prev link")
        if held[node.block_id]:
            raise PolicyCheckError(f"{where}: held block {node.block_id} is in the free queue")
        prev, node = node, node.next_free_block
        count += 1
        if count > len(blocks):
            raise PolicyCheckError(f"{where}: the free list is longer than the pool (cycle)")
    if tail.prev_free_block is not prev:
        raise PolicyCheckError(f"{where}: the tail's prev link is wrong")
    if count != queue.num_free_blocks:
        raise PolicyCheckError(f"{where}: num_free_blocks {queue.num_free_blocks} != {count}")
    detached = sum(1 for b in blocks if b.prev_free_block is None and b.next_free_block is None)
    if count + detached != len(blocks):
        raise PolicyCheckError(f"{where}: {len(blocks) - count - detached} half-linked blocks")
    if count != sum(1 for h in held if h == 0):
        raise PolicyCheckError(f"{where}: {count} free blocks, the workload expects otherwise")


def check_allocation(
    name: str,
    n: int,
    threshold: int,
    before: list[int],
    got: list[Any],
    after: list[int],
    scanned: int,
    where: str,
    last_resort: Collection[int] = (),
) -> None:
    """Every rule of one allocation (see the module docstring).

    Parameters
    ----------
    name
        Registry name of the policy.
    n, threshold
        The request and the policy's threshold.
    before, after
        Free ids in eviction order before and after the call.
    got
        The returned blocks.
    scanned
        Blocks the policy's search looked at (:class:`WatchedQueue`).
    where
        Context for the message.
    last_resort
        Ids of the free blocks released by an unpin (before the call).

    Raises
    ------
    PolicyCheckError
        The first broken rule.
    """
    ids = [b.block_id for b in got]
    if len(ids) != n or len(set(ids)) != n:
        raise PolicyCheckError(f"{where}: {name} returned {len(ids)} blocks for {n} (or twice)")
    was_free = set(before)
    if not was_free.issuperset(ids):
        raise PolicyCheckError(f"{where}: {name} returned a block that was not free")
    if any(b.prev_free_block is not None or b.next_free_block is not None for b in got):
        raise PolicyCheckError(f"{where}: {name} returned a block that is still linked")
    taken = set(ids)
    if after != [b for b in before if b not in taken]:
        raise PolicyCheckError(f"{where}: {name} changed the order of the blocks it left")
    window = policies.window_of(name)
    if name == policies.LRU or n < threshold:
        if ids != before[:n]:
            raise PolicyCheckError(f"{where}: {name} with n={n} differs from popleft_n")
        if name != policies.LRU and scanned:
            raise PolicyCheckError(f"{where}: {name} searched below the threshold")
        return
    for j, block_id in enumerate(ids):
        # A last-resort block is taken only by the ordinary fallback: from where it is
        # returned on, the result is the head of what the runs left.
        if block_id in last_resort:
            earlier = set(ids[:j])
            if ids[j:] != [b for b in before if b not in earlier][: n - j]:
                raise PolicyCheckError(
                    f"{where}: {name} put last-resort (unpinned) block {block_id} in a run"
                )
    limit = len(before) if window is None else window * n
    if scanned > limit:
        raise PolicyCheckError(f"{where}: {name} looked at {scanned} blocks, window {limit}")
    want = model(before, n, window, threshold, last_resort)
    if ids != want:
        raise PolicyCheckError(f"{where}: {name} returned {ids}, the description gives {want}")
    # Blocks of the window that sit in a queue-adjacent ±1 pair: only these may be taken
    # out of order; if anything remains after them, it is the head of what is left.
    window_ids = before[:limit]
    in_runs = set()
    for a, b in itertools.pairwise(window_ids):
        if abs(a - b) == 1 and a not in last_resort and b not in last_resort:
            in_runs.update((a, b))
    k = 0
    while k < n and ids[k] in in_runs:
        k += 1
    segments = policies.ascending_runs(ids[:k])
    if segments and segments[-1] == 1:
        k -= 1  # one block still needed comes from the head, even out of a run
        segments.pop()
    if any(length < 2 for length in segments):
        raise PolicyCheckError(f"{where}: {name} returned a run that is not ascending")
    from_runs = set(ids[:k])  # built once: inside the comprehension it was once per block
    head = [b for b in before if b not in from_runs][: n - k]
    if ids[k:] != head:
        raise PolicyCheckError(f"{where}: {name}'s remainder is not the head of the queue")


#: The checking workload: small enough that a full walk after every step is cheap, with
#: the same structure as the measured one (prefix hits, reversed frees, decode growth).
CHECK_WORKLOAD = churn.Workload(
    pool=768,
    concurrency=10,
    prefill_median=12.0,
    prefill_sigma=0.9,
    prefill_max=96,
    decode_median=4.0,
    decode_sigma=0.8,
    decode_max=32,
    decode_every=3,
    prefix_share=0.5,
    families=6,
    warmup_steps=0,
    steps=400,
    prefill_release="unpin",  # exercises the last-resort rule on the prefill side
)
#: A contiguous policy must see at least this many allocations of >= threshold blocks in
#: the check, or the check refuses: otherwise it passes without testing the search.
MIN_BIG_ALLOCATIONS = 20
#: Largest factor :func:`check_workload` scales the allocations by: pool 12,288 blocks,
#: whose walks before and after every allocation make the check of the six registry
#: policies take 38 s on the 2-vCPU VM (1.6 s unscaled, threshold 8).
MAX_CHECK_SCALE = 16


def check_workload(threshold: int) -> churn.Workload:
    """:data:`CHECK_WORKLOAD` with prefills (and the pool) scaled so that allocations of
    ``threshold`` blocks are as common as allocations of 8 are in it (factor
    ``ceil(threshold / 8)``, at most :data:`MAX_CHECK_SCALE`; 1 up to the default 8)."""
    scale = min(MAX_CHECK_SCALE, max(1, -(-threshold // policies.DEFAULT_THRESHOLD)))
    w = CHECK_WORKLOAD
    return dataclasses.replace(
        w,
        pool=w.pool * scale,
        prefill_median=w.prefill_median * scale,
        prefill_max=w.prefill_max * scale,
    )


def run_check(
    queue_cls: type,
    block_cls: type,
    names: list[str],
    threshold: int,
    seed: int,
    workload: churn.Workload | None = None,
) -> dict[str, Any]:
    """Step the workload (default :func:`check_workload` of ``threshold``) with every
    policy and check every rule after every step.

    Returns
    -------
    dict
        ``allocations``, ``steps``, ``big`` (allocations >= threshold) and ``largest``
        checked per policy, ``ok`` True.

    Raises
    ------
    PolicyCheckError
        The first broken rule, naming the policy, the step and the allocation; or a
        contiguous policy saw fewer than :data:`MIN_BIG_ALLOCATIONS` allocations of
        ``threshold`` blocks or more (the check would have tested nothing of its search).
    """
    workload = workload or check_workload(threshold)
    counts = {
        name: _check_one(queue_cls, block_cls, name, threshold, seed, workload) for name in names
    }
    return {"ok": True, "seed": seed, "policies": counts, "workload": workload.record()}


def _check_one(
    queue_cls: type,
    block_cls: type,
    name: str,
    threshold: int,
    seed: int,
    workload: churn.Workload,
) -> dict[str, int]:
    """:func:`run_check` for one policy on both pools of the paired workload (the
    prefill side releases by unpin, so the last-resort rule is exercised): the counts of
    what was checked."""
    chosen = policies.get(name, threshold)
    done = {"allocations": 0, "steps": 0, "big": 0, "largest": 0, "last_resort_seen": 0}
    sim: churn.Churn
    sides: dict[str, tuple[Any, list[Any]]] = {}

    def checked_for(side: str) -> Any:
        def checked(n: int) -> list[Any]:
            queue = sides[side][0]
            watched = WatchedQueue(queue)
            resort = set(sim.pools.sides[side].last_resort)
            before = free_ids(queue)
            got = chosen(watched, n, last_resort=resort)
            where = (
                f"{name}, {side} side, step {sim.step_no}, allocation "
                f"{done['allocations'] + 1} (n={n})"
            )
            check_allocation(
                name, n, threshold, before, got, free_ids(queue), watched.scanned, where, resort
            )
            done["allocations"] += 1
            done["big"] += n >= threshold
            done["largest"] = max(done["largest"], n)
            done["last_resort_seen"] += bool(resort) and n >= threshold
            return got

        return checked

    for side in (churn.DECODE, churn.PREFILL):
        blocks = [block_cls(block_id=i) for i in range(workload.pool)]
        sides[side] = (queue_cls(blocks), blocks)
    d_queue, d_blocks = sides[churn.DECODE]
    p_queue, p_blocks = sides[churn.PREFILL]
    sim = churn.Churn(
        workload,
        seed,
        d_queue,
        d_blocks,
        checked_for(churn.DECODE),
        prefill=(p_queue, p_blocks, checked_for(churn.PREFILL)),
    )
    for side, (queue, blocks) in sides.items():
        check_queue(queue, blocks, sim.pools.sides[side].ref, f"{name}, {side} side, start")
    for _ in range(workload.steps):
        sim.step()
        for side, (queue, blocks) in sides.items():
            check_queue(
                queue,
                blocks,
                sim.pools.sides[side].ref,
                f"{name}, {side} side, after step {sim.step_no}",
            )
        done["steps"] += 1
    if name != policies.LRU and done["big"] < MIN_BIG_ALLOCATIONS:
        raise PolicyCheckError(
            f"{name}: only {done['big']} of {done['allocations']} check allocations reached "
            f"the threshold {threshold} (largest {done['largest']} blocks), fewer than "
            f"{MIN_BIG_ALLOCATIONS}: the check would not test the contiguous search; use a "
            "smaller THRESHOLD"
        )
    return done
