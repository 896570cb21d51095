"""The validation gate of the manager subject: a candidate ``KVCacheManager`` stack against
the baseline, step by step through one seeded scheduler-shaped trace.

Each variant runs :class:`kvqueue.subjects.manager_cases.Stream` (admission with
``get_computed_blocks``, prefill ``allocate_slots``, one decode ``allocate_slots`` per
running request and step, preemption when allocation fails, ``free`` at the end) on a
pool small enough that requests are preempted and cached blocks evicted. After every
step the gate takes a *snapshot* and compares it with the baseline's:

- the step's calls: each admission's hit tokens and whether it was allocated, each
  preemption and finish;
- every running request's block ids, and the free count;
- the block ids that hold a cached block hash.

and checks, on the variant alone, the invariants: free + held = the pool (less the null
block); each held block's ``ref_cnt`` equals the requests holding it; a prefix admitted
and freed is found again (hit tokens of a second identical request). A stub reached
(:func:`kvqueue.sources.stand_ins.reached`) refuses the variant, naming it.

The first difference refuses the candidate in one line naming the step and the field,
expected vs got. A difference *by design* (the release of the pair changed behaviour on
purpose, e.g. 0.24.0's freed unhashed blocks at the queue's head) is recorded, not
refused, when the gate runs with ``differences="record"`` (the manager history).

Standard library only (runs under the measured interpreter).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvqueue.sources import stand_ins
from kvqueue.sources.manager_loader import ManagerVariant
from kvqueue.subjects.manager_api import BLOCK_SIZE, ManagerAPI, manager_api
from kvqueue.subjects.manager_cases import Stream

#: Seed of the gate's trace.
DEFAULT_SEED = 20261205
#: Steps of the trace, and its pool: 600 blocks hold a few long requests, so the trace
#: preempts and evicts (about 2 pool turnovers).
STEPS, GATE_POOL = 400, 600


class ManagerGateError(AssertionError):
    """A candidate stack differs from the baseline or breaks an invariant (one line)."""


@dataclass(frozen=True)
class Snapshot:
    """What one step left behind (the fields the gate compares, by name)."""

    calls: tuple[tuple[Any, ...], ...]
    block_ids: tuple[tuple[str, tuple[int, ...]], ...]
    free: int
    cached: tuple[int, ...]


def _cached_ids(pool: Any) -> tuple[int, ...]:
    """Block ids holding a cached hash, from the pool's blocks (every release keeps the
    hash on the block: ``block_hash`` or ``_block_hash``)."""
    out = []
    null = pool.null_block
    for block in pool.blocks:
        found = getattr(block, "block_hash", None)
        if found is None:
            found = getattr(block, "_block_hash", None)
        if found is not None and block is not null:
            out.append(block.block_id)
    return tuple(out)


def snapshot(api: ManagerAPI, stream: Stream) -> Snapshot:
    """The state after a step, with the invariants checked.

    Raises
    ------
    ManagerGateError
        Free + held is not the pool, or a held block's ``ref_cnt`` is not its holders.
    """
    manager = stream.manager
    pool = manager.block_pool
    holders: Counter[int] = Counter()
    ids = []
    for request, _k in stream.running:
        held = api.block_ids(manager, request.request_id)
        ids.append((request.request_id, tuple(held)))
        # The pool's null_block, not is_null: 0.9.0 has the first but not the second.
        holders.update(b for b in held if pool.blocks[b] is not pool.null_block)
    free = api.free_count(manager)
    real = len(pool.blocks) - 1
    if free + len(holders) != real:
        raise ManagerGateError(
            f"free + held = {free} + {len(holders)} blocks, the pool has {real} (null block aside)"
        )
    for block_id, count in holders.items():
        ref = pool.blocks[block_id].ref_cnt
        if ref != count:
            raise ManagerGateError(
                f"block {block_id}: ref_cnt {ref}, held by {count} running request(s)"
            )
    calls = tuple(stream.events)
    stream.events.clear()
    return Snapshot(calls, tuple(ids), free, _cached_ids(pool))


def trace(variant: ManagerVariant, steps: int, pool: int, seed: int) -> list[Snapshot]:
    """Run the gate's trace on ``variant``; one snapshot per step, invariants checked.

    Raises
    ------
    ManagerGateError
        An invariant broken (naming the step), a repeated prefix not found again, or a
        stub reached.
    """
    api = manager_api(variant)
    stream = Stream(api, api.new_manager(pool), seed)
    stream.record = True
    out = []
    for step in range(1, steps + 1):
        try:
            stream.step()
            out.append(snapshot(api, stream))
        except ManagerGateError as exc:
            raise ManagerGateError(f"{variant.label} step {step}: {exc}") from None
    _prefix_found_again(api, variant.label, pool)
    return out


def _prefix_found_again(api: ManagerAPI, label: str, pool: int) -> None:
    manager = api.new_manager(pool)
    prompt = list(range(7, 7 + 20 * BLOCK_SIZE))
    first = api.new_request("p1", prompt, 1)
    blocks, hit = api.computed(manager, first)
    manager.allocate_slots(
        first, num_new_tokens=len(prompt), new_computed_blocks=blocks, num_lookahead_tokens=0
    )
    manager.free(first)
    second = api.new_request("p2", prompt, 1)
    _blocks, hit = api.computed(manager, second)
    if hit < len(prompt) - BLOCK_SIZE:
        raise ManagerGateError(
            f"{label}: a 20-block prompt admitted and freed is found again with {hit} hit "
            f"tokens, expected at least {len(prompt) - BLOCK_SIZE}"
        )


_FIELDS = {
    "calls": "step calls (admit id, hit tokens, allocated | preempt id | finish id)",
    "block_ids": "block ids of the running requests",
    "free": "free blocks",
    "cached": "block ids holding a cached hash",
}


def first_difference(expected: list[Snapshot], got: list[Snapshot]) -> str | None:
    """The first step and field where two traces differ, in one line (None: equal)."""
    for step, (want, have) in enumerate(zip(expected, got, strict=True), start=1):
        for name, what in _FIELDS.items():
            a, b = getattr(want, name), getattr(have, name)
            if a != b:
                detail = _first_item(a, b) if isinstance(a, tuple) else f"expected {a!r}, got {b!r}"
                return f"step {step}: {what}: {detail}"
    return None


def _first_item(a: tuple[Any, ...], b: tuple[Any, ...], at: str = "item") -> str:
    """The first differing element; for a request's ``(id, blocks)`` the first block that
    differs (``request 'q4' block 143: 593, got 592``), so a long list shows where it parts."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == y:
            continue
        pair = isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) == 2
        if pair and x[0] == y[0] and isinstance(x[1], tuple) and isinstance(y[1], tuple):
            return f"request {x[0]!r} " + _first_item(x[1], y[1], "block")
        return f"{at} {k}: expected {_short(x)}, got {_short(y)}"
    return f"expected {len(a)} {at}s, got {len(b)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class ManagerGateResult:
    """One stack's gate result."""

    label: str
    ok: bool
    steps: int
    seconds: float
    error: str | None
    difference: str | None


def manager_gate(
    baseline: ManagerVariant,
    candidate: ManagerVariant,
    steps: int = STEPS,
    pool: int = GATE_POOL,
    seed: int = DEFAULT_SEED,
    differences: str = "refuse",
    expected: list[Snapshot] | None = None,
) -> ManagerGateResult:
    """Compare ``candidate`` with ``baseline`` step by step (see the module docstring).

    Parameters
    ----------
    baseline, candidate
        Loaded stacks (the baseline against a fresh copy of itself checks determinism).
    expected
        The baseline's trace if already run.
    differences
        ``"refuse"`` (the default) or ``"record"``: a difference from the baseline is
        returned in ``difference`` instead of refusing (invariants still refuse).
    """
    start = time.monotonic()
    stand_ins.clear_reached()
    try:
        want = expected if expected is not None else trace(baseline, steps, pool, seed)
        got = trace(candidate, steps, pool, seed)
        reached = stand_ins.reached()
        if reached:
            raise ManagerGateError(
                f"{candidate.label} reached {', '.join(reached)}, which nothing here stands in "
                "for: its code uses a part of vLLM this loader does not run"
            )
        diff = first_difference(want, got)
        if diff is not None and differences != "record":
            raise ManagerGateError(f"{candidate.label} differs from {baseline.label} at {diff}")
    except ManagerGateError as exc:
        return ManagerGateResult(
            candidate.label, False, steps, time.monotonic() - start, str(exc), None
        )
    except Exception as exc:  # a crash in the release's code is a refusal too
        message = str(exc).splitlines()[0] if str(exc) else ""
        error = f"{candidate.label}: {type(exc).__name__}: {message}"
        return ManagerGateResult(
            candidate.label, False, steps, time.monotonic() - start, error, None
        )
    return ManagerGateResult(candidate.label, True, steps, time.monotonic() - start, None, diff)


def gate_records(
    variants: Sequence[ManagerVariant], differences: str = "refuse", seed: int = DEFAULT_SEED
) -> list[dict[str, Any]]:
    """``python -m kvqueue validate --subject manager --json``'s results: one record per
    stack, in the queue gate's shape where the fields mean the same (``ops_checked``:
    steps compared), every stack checked, the baseline against itself."""
    out = []
    expected = None
    try:
        expected = trace(variants[0], STEPS, GATE_POOL, seed)
    except Exception:  # the baseline's own refusal is reported by its record below
        expected = None
    for k, variant in enumerate(variants):
        res = manager_gate(
            variants[0], variant, seed=seed, differences=differences, expected=expected
        )
        out.append(
            {
                "subject": "manager",
                "label": variant.label,
                "ok": res.ok,
                "ops_checked": res.steps if res.ok else 0,
                "invalid_compared": 0,
                "sha256": variant.sha256,
                "seconds": round(res.seconds, 3),
                "error": res.error,
                "role": "baseline" if k == 0 else "candidate",
                "sizes": [GATE_POOL] if res.ok else [],
                "differences": [] if res.difference is None else [res.difference],
                "exempt": [],
                "provenance": variant.provenance(),
            }
        )
    return out
