"""Counted runs (``counts.csv``) to figures per operation: instructions, misses, cycles.

A counts.csv holds raw cachegrind totals, one row per counted process (see
:mod:`kvqueue.bench.counts`): per (case, pool) a ``zero`` and a ``zero2`` run, and one
``target`` run per variant. Per operation:

- instructions = (target Ir − zero Ir) / (loops × ops per loop);
- the *spread* = |zero2 Ir − zero Ir| / (loops × ops per loop): how far two identical
  runs disagree, in the same unit (the count's own resolution);
- with the cache simulation: L1 misses (I1mr + D1mr + D1mw), last-level misses
  (ILmr + DLmr + DLmw) and estimated cycles = L1 hits + 5 × LL hits + 35 × RAM
  accesses (iai-callgrind's model; :data:`kvqueue.bench.counts.CYCLE_WEIGHTS`).

Pure Python, no pandas: ``make quick`` and ``make check-queue`` use it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Weights of L1 hits, last-level hits and RAM accesses in estimated cycles.
CYCLE_WEIGHTS = (1, 5, 35)
_L1 = ("I1mr", "D1mr", "D1mw")
_LL = ("ILmr", "DLmr", "DLmw")
_REFS = ("Ir", "Dr", "Dw")


@dataclass(frozen=True)
class CellCount:
    """One variant's counts per operation in one (case, pool) cell."""

    case: str
    pool: int
    label: str
    instructions: float
    spread: float
    l1_misses: float | None
    ll_misses: float | None
    est_cycles: float | None


def _number(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def _est_cycles(totals: Mapping[str, int]) -> int:
    refs = sum(totals[e] for e in _REFS)
    l1 = sum(totals[e] for e in _L1)
    ll = sum(totals[e] for e in _LL)
    w1, w2, w3 = CYCLE_WEIGHTS
    return w1 * (refs - l1) + w2 * (l1 - ll) + w3 * ll


def per_op(rows: Iterable[Mapping[str, Any]]) -> list[CellCount]:
    """Per-operation counts of every target row, against its cell's zero runs.

    Raises
    ------
    ValueError
        A cell has a target but no ``zero`` run, or a target with no loops.
    """
    zeros: dict[tuple[str, int], dict[str, Mapping[str, Any]]] = {}
    targets: list[Mapping[str, Any]] = []
    for row in rows:
        key = (str(row["case"]), int(row["pool"]))
        if row["run"] == "target":
            targets.append(row)
        else:
            zeros.setdefault(key, {})[str(row["run"])] = row
    out = []
    for row in targets:
        key = (str(row["case"]), int(row["pool"]))
        zero = zeros.get(key, {}).get("zero")
        if zero is None:
            raise ValueError(f"no zero run for {key[0]}/{key[1]}")
        ops = int(row["loops"]) * int(row["per_loop"])
        if ops <= 0:
            raise ValueError(f"target {row['label']} {key[0]}/{key[1]} has no loops")
        zero2 = zeros[key].get("zero2")
        spread = (
            abs(int(zero2["Ir"]) - int(zero["Ir"])) / ops if zero2 is not None else float("nan")
        )
        cached = all(_number(row.get(e)) is not None for e in (*_L1, *_LL, "Dr", "Dw"))
        if cached:
            t = {e: int(row[e]) for e in (*_REFS, *_L1, *_LL)}
            z = {e: int(zero[e]) for e in (*_REFS, *_L1, *_LL)}
            l1 = (sum(t[e] for e in _L1) - sum(z[e] for e in _L1)) / ops
            ll = (sum(t[e] for e in _LL) - sum(z[e] for e in _LL)) / ops
            cycles: float | None = (_est_cycles(t) - _est_cycles(z)) / ops
        else:
            l1 = ll = cycles = None
        out.append(
            CellCount(
                case=key[0],
                pool=key[1],
                label=str(row["label"]),
                instructions=(int(row["Ir"]) - int(zero["Ir"])) / ops,
                spread=spread,
                l1_misses=l1,
                ll_misses=ll,
                est_cycles=cycles,
            )
        )
    return out


def reduction_pct(candidate: float, baseline: float) -> float:
    """Reduction of ``candidate`` against ``baseline`` in percent (positive = fewer)."""
    return 100.0 * (1.0 - candidate / baseline)


def table(counts: Sequence[CellCount], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Rows (case, pool, candidate, baseline, their instructions, the reduction %)."""
    by = {(c.case, c.pool, c.label): c for c in counts}
    cells = sorted({(c.case, c.pool) for c in counts}, key=lambda k: (k[1], k[0]))
    out = []
    for cand, base in pairs:
        for case, pool in cells:
            a, b = by.get((case, pool, cand)), by.get((case, pool, base))
            if a is None or b is None:
                continue
            out.append(
                {
                    "case": case,
                    "pool": pool,
                    "candidate": cand,
                    "baseline": base,
                    "candidate_instructions": a.instructions,
                    "baseline_instructions": b.instructions,
                    "reduction_pct": reduction_pct(a.instructions, b.instructions),
                    "spread": max(a.spread, b.spread),
                }
            )
    return out
