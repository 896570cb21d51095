"""One measured pass of one policy: engine-age windows and their sums (docs/design.md §12).

*Engine age* is counted in pool turnovers: one turnover is allocations totalling the
pool's size in blocks, on the decode side (:attr:`kvqueue.policy.churn.Side.allocated`).
A pass runs the workload (synthetic, :class:`kvqueue.policy.churn.Churn`, or a trace,
:mod:`kvqueue.policy.trace`) from an id-ordered queue until the age reaches the end of
the run, and sums what happened in each age window (:func:`age_edges`): the windows up to
the warm-up draw the age curve; the measurement, warm-up to end, is split into two
halves, so that the analysis can tell whether the steady state has settled.

Per window: allocation calls and blocks per side, the one-side metric of before
(ascending +1 runs of the decode side's allocations of at least ``threshold`` blocks),
``perf_counter_ns`` around every allocation call of both sides, and per READ (request
transferred from the prefill side to the decode side) its descriptors
(:func:`kvqueue.policy.churn.descriptors`), whose p50 and p90 (nearest rank) are kept.
Nothing but the clock runs inside the timed interval: the metrics are computed from the
returned blocks after the call.

Standard library only: it runs in the bare measured interpreter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kvqueue import schema
from kvqueue.policy import churn, policies

#: Age-curve edges in turnovers (the windows before the warm-up end use these).
AGE_EDGES = (0, 1, 3, 7, 15, 30, 50, 100, 150, 200, 300, 400, 600, 800, 1200, 1600)
#: Sums of a window: the ``policy_age.csv`` columns after the window's edges and ages.
SUM_KEYS = schema.POLICY_AGE_ROW_KEYS[schema.POLICY_AGE_ROW_KEYS.index("allocations") :]


def age_edges(warmup: float, end: float) -> list[float]:
    """Window edges in turnovers: :data:`AGE_EDGES` below ``warmup``, then ``warmup``, the
    middle of the measurement, ``end``.

    Raises
    ------
    ValueError
        ``warmup`` not below ``end``, or negative.
    """
    if not 0 <= warmup < end:
        raise ValueError(f"the warm-up ({warmup}) must be >= 0 and below the end ({end})")
    below = [float(e) for e in AGE_EDGES if e < warmup]
    return sorted({*below, float(warmup), (warmup + end) / 2, float(end)} | {0.0})


def nearest_rank(values: list[int], q: float) -> int:
    """The ``q`` quantile by nearest rank (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ascending_run_sums(blocks: list[Any]) -> tuple[int, int]:
    """``len(runs)`` and ``sum(r for r in runs if r >= 2)`` of
    ``runs = policies.ascending_runs([b.block_id for b in blocks])``, in one loop over
    the blocks (no list of ids, no list of runs)."""
    if not blocks:
        return 0, 0
    runs = in_runs = 0
    length = 0
    prev = blocks[0].block_id - 2  # the first id does not follow it
    for block in blocks:
        block_id = block.block_id
        if block_id == prev + 1:
            length += 1
        else:
            if length >= 2:
                in_runs += length
            runs += 1
            length = 1
        prev = block_id
    if length >= 2:
        in_runs += length
    return runs, in_runs


class Meter:
    """The per-window sums of one pass; :meth:`wrap` gives each side's timed allocation."""

    def __init__(self, edges: list[float], threshold: int) -> None:
        self.edges = edges
        self.threshold = threshold
        self.windows = [dict.fromkeys(SUM_KEYS, 0) for _ in edges[:-1]]
        self.desc: list[list[int]] = [[] for _ in edges[:-1]]
        self.ages: list[list[float]] = [[math.nan, math.nan] for _ in edges[:-1]]
        self.k = 0

    def wrap(self, policy: policies.Policy, side: churn.Side, decode: bool) -> Callable:
        """``alloc(n)`` for ``side``: the policy (given the side's last-resort set), timed."""
        clock = time.perf_counter_ns
        threshold = self.threshold
        resort = side.last_resort

        def alloc(n: int) -> list[Any]:
            queue = side.queue
            t0 = clock()
            got = policy(queue, n, last_resort=resort)
            t1 = clock()
            s = self.windows[self.k]
            if not decode:
                s["prefill_allocations"] += 1
                s["prefill_ns_total"] += t1 - t0
                return got
            s["allocations"] += 1
            s["blocks"] += n
            s["ns_total"] += t1 - t0
            if n >= threshold:
                runs, in_runs = ascending_run_sums(got)
                s["big_allocations"] += 1
                s["big_blocks"] += n
                s["big_runs"] += runs
                s["big_blocks_in_runs"] += in_runs
                s["big_ns_total"] += t1 - t0
            return got

        return alloc

    def on_read(self, rid: Hashable, count: int, k: int) -> None:
        """:attr:`kvqueue.policy.churn.Pools.on_read`: one READ's descriptors."""
        s = self.windows[self.k]
        s["reads"] += 1
        s["read_blocks"] += k
        s["descriptors"] += count
        self.desc[self.k].append(count)

    def rows(self) -> list[dict[str, Any]]:
        """One row per window that saw an allocation: edges, actual ages, sums."""
        out = []
        for k, s in enumerate(self.windows):
            if not s["allocations"]:
                continue
            s["desc_p50"] = nearest_rank(self.desc[k], 0.5)
            s["desc_p90"] = nearest_rank(self.desc[k], 0.9)
            out.append(
                {
                    "window_from": self.edges[k],
                    "window_to": self.edges[k + 1],
                    "age_from": round(self.ages[k][0], 4),
                    "age_to": round(self.ages[k][1], 4),
                    **s,
                }
            )
        return out


def synthetic_pass(
    sim: churn.Churn, meter: Meter, progress: Callable[[float], None] | None = None
) -> None:
    """Run ``sim`` window by window until its age reaches the last edge."""
    for k in range(len(meter.edges) - 1):
        meter.k = k
        before = (sim.admitted, sim.hit_blocks, sim.prefill_blocks)
        meter.ages[k][0] = sim.age
        sim.run_until(meter.edges[k + 1])
        meter.ages[k][1] = sim.age
        s = meter.windows[k]
        s["admitted"] = sim.admitted - before[0]
        s["hit_blocks"] = sim.hit_blocks - before[1]
        s["prefill_blocks"] = sim.prefill_blocks - before[2]
        if progress is not None:
            progress(sim.age)


def replay_pass(
    pools: churn.Pools, events: Iterable[dict[str, Any]], pool: int, meter: Meter
) -> None:
    """Run every trace event on ``pools``, window by window (``admitted`` counts the first
    ``alloc`` of each request on the decode side; prefix hits are not known to a trace
    and stay 0). The trace is played whole: the last window runs from its lower edge to
    the end of the trace (its ``age_to`` records where that was), so a trace written up
    to the run's last edge replays the synthetic run it came from exactly."""
    decode = pools.decode
    last = len(meter.edges) - 2  # index of the last window
    seen: set[Hashable] = set()
    meter.ages[0][0] = 0.0
    for event in events:
        age = decode.allocated / pool
        while meter.k < last and age >= meter.edges[meter.k + 1]:
            meter.ages[meter.k][1] = age
            meter.k += 1
            meter.ages[meter.k][0] = age
        decode_alloc = event["op"] == "alloc" and event.get("side", churn.DECODE) == churn.DECODE
        if decode_alloc and event["req"] not in seen:
            seen.add(event["req"])
            meter.windows[meter.k]["admitted"] += 1
        pools.apply(event)
    meter.ages[meter.k][1] = decode.allocated / pool
