"""How many main processes a run needs for its precision target: a two-stage design.

Stage 1 (the *pilot*) runs ``processes`` main processes. From their samples this module
estimates, for every headline cell (``HEADLINE_CASES`` x pools) and every comparison the
report will make (:func:`kvqueue.stats.comparisons.comparisons_for_run`: the configured pairs
and the A/A copies), a robust spread ``s`` of the per-process log ratio (1.4826 x its
median absolute deviation), and asks for ``n = ceil((t(0.975, n-1) * 1.2 s / h)^2)``
processes (1.2: the median's interval is wider than a t interval), ``h`` being the
target half-width
(``PRECISION``, in percentage points of the time ratio). Stage 2 runs the missing
processes, up to ``MAX_PROCESSES`` and the time left of ``MAX_MINUTES``. The final
interval uses every process.

Why this does not bias the interval: the second stage's size depends on the pilot's
*spread* only, never on its estimate of the effect (Stein's two-stage procedure), so
stopping cannot select runs whose effect happened to look large or small. The interval
is then computed on all ``n`` processes as in any run; ``run.json`` records the rule,
the pilot, the n each cell asked for, the planned and (with ``processes_completed``) the
actual n. Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvqueue import schema
from kvqueue.stats import comparisons

#: The cells whose precision sets a run's size (the report's headline cycles).
HEADLINE_CASES = ("alloc1", "alloc2", "mix")
RULE = (
    "two-stage: pilot of `processes` main processes; per headline cell (`cases` x pools: "
    "alloc1, alloc2, mix, or a history's cases) and compared pair (the report's pairs and "
    "A/A copies; a history's consecutive versions), s = 1.4826 x MAD "
    "of the per-process log ratio; "
    "n = ceil((t(0.975, n-1) * 1.2 s / h)^2) for the target half-width h (1.2: the median's "
    "interval is wider than the mean's); stage 2 runs "
    "n - pilot more, capped by max_processes and max_minutes"
)
_Z = 1.959963984540054  # 97.5 % quantile of the standard normal
#: Half-width of the median's interpolated order-statistic interval relative to a t
#: interval of the mean on the same processes (methods.coverage, n = 11: 1.17 / 1.02).
MEDIAN_WIDTH = 1.2
_T975_SMALL = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105}
#: Seconds kept for what follows the last process: sealing the run and filing the
#: executed notebook. A default `make bench` AA=1 on 3.11 without it took 305 s for 300.
FINISH_SECONDS = 10.0
#: MAD -> SD of a normal law.
_MAD_TO_SD = 1.482602218505602


def robust_sd(values: Sequence[float]) -> float:
    """``1.4826 x`` the median absolute deviation: the SD for normal data, unmoved by a tail.

    Why not the SD: the median's interval depends on the spread near the median. On the
    EPYC VM (2026-12-01) a few far-out processes made the pilots' SD 2-4x their robust
    spread, and SD-based sizing asked for 4,975-7,860 processes where about 200 would do.
    """
    mid = statistics.median(values)
    return _MAD_TO_SD * statistics.median(abs(v - mid) for v in values)


def t975(df: int) -> float:
    """97.5 % quantile of Student's t with ``df`` degrees of freedom.

    Exact table values below df 5; above, the Cornish-Fisher expansion, within 0.1 % of
    the exact value (2.5678 vs 2.5706 at df 5, 2.2280 vs 2.2281 at df 10): far below the
    uncertainty of a pilot's SD.
    """
    if df < 1:
        return math.inf
    if df < 5:
        return _T975_SMALL[df]
    z = _Z
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def required_n(sd: float, half_width: float, floor: int = 2, cap: int = 10_000) -> int:
    """Smallest n with ``t975(n-1) * sd / sqrt(n) <= half_width`` (both in log units)."""
    if not sd > 0:
        return floor
    n = max(floor, 2)
    while n < cap and t975(n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return n


@dataclass
class Sizing:
    """The sizing decision of one run (recorded as ``run.json["sizing"]``)."""

    rule: str
    precision_pp: float
    pilot: int
    max_processes: int
    max_minutes: float
    required: dict[str, int] = field(default_factory=dict)
    sd_pp: dict[str, float] = field(default_factory=dict)
    robust_sd_pp: dict[str, float] = field(default_factory=dict)
    wanted: int = 0
    planned: int = 0
    capped_by: str | None = None
    #: The cases sized for (the rule's "headline cells"; a history sizes its own cases).
    cases: list[str] = field(default_factory=lambda: list(HEADLINE_CASES))

    def record(self) -> dict[str, Any]:
        """JSON-ready copy."""
        return asdict(self)


def per_process_log_ratios(
    rows: Iterable[Sequence[Any]],
    labels: Sequence[str],
    bounds: Iterable[str],
    pairs: Sequence[tuple[str, str]] = (),
    cases: Sequence[str] = HEADLINE_CASES,
) -> dict[str, list[float]]:
    """``{"case/pool a vs b": [log ratio per process]}`` from pilot sample rows.

    ``rows`` are ``samples.csv`` rows (columns :data:`kvqueue.schema.SAMPLE_COLUMNS`); per
    process and variant the median ns/cycle is taken, then the log of candidate over
    baseline for every comparison the report makes of a run with these ``labels``
    (baseline first), ``bounds`` and configured ``pairs``, in the given ``cases``.
    """
    col = {name: i for i, name in enumerate(schema.SAMPLE_COLUMNS)}
    per: dict[tuple[str, int, int, str], list[float]] = {}
    for row in rows:
        if row[col["phase"]] != "main" or row[col["case"]] not in cases:
            continue
        key = (row[col["case"]], int(row[col["pool"]]), int(row[col["process"]]))
        per.setdefault((*key, row[col["variant"]]), []).append(float(row[col["ns_per_cycle"]]))
    medians = {k: statistics.median(v) for k, v in per.items()}
    compared = [
        (cand, base)
        for cand, base, _ in comparisons.comparisons_for_run(labels, labels[0], bounds, pairs)
    ]
    cells = sorted({(c, p) for c, p, _, _ in medians})
    processes = sorted({pr for _, _, pr, _ in medians})
    out: dict[str, list[float]] = {}
    for case, pool in cells:
        for cand, base in compared:
            values = []
            for pr in processes:
                b, c = medians.get((case, pool, pr, base)), medians.get((case, pool, pr, cand))
                if b and c:
                    values.append(math.log(c / b))
            if len(values) >= 2:
                out[f"{case}/{pool} {cand} vs {base}"] = values
    return out


def size_run(
    pilot_rows: Iterable[Sequence[Any]],
    labels: Sequence[str],
    bounds: Iterable[str],
    *,
    pilot: int,
    precision_pp: float,
    max_processes: int,
    max_minutes: float,
    seconds_per_process: float,
    seconds_spent: float,
    seconds_after: float,
    pairs: Sequence[tuple[str, str]] = (),
    cases: Sequence[str] = HEADLINE_CASES,
) -> Sizing:
    """Decide the number of main processes after the pilot.

    Parameters
    ----------
    pilot_rows
        The pilot's ``samples.csv`` rows.
    labels, bounds
        The run's variant labels (baseline first) and those of lower bounds.
    pilot
        Main processes run so far.
    precision_pp
        Target 95 % half-width, percentage points of the time ratio (0: no target).
    max_processes, max_minutes
        Caps on the main processes and on the whole run's time.
    seconds_per_process
        Mean time of a pilot process.
    seconds_spent, seconds_after
        Time used so far (gate included), and the time still needed after the main phase
        (the confirmation processes).
    pairs
        The report's configured pairs (:data:`kvqueue.params.report_params.DEFAULT_PAIRS`): with
        the A/A
        copies, the comparisons sized for (:mod:`kvqueue.stats.comparisons`); a release
        history passes its consecutive version pairs (newer, older).
    cases
        The cases whose cells set the size (:data:`HEADLINE_CASES`; a history's own).
    """
    sizing = Sizing(RULE, precision_pp, pilot, max_processes, max_minutes, cases=list(cases))
    if precision_pp <= 0:
        sizing.wanted = sizing.planned = pilot
        sizing.capped_by = "no precision target"
        return sizing
    half = math.log1p(precision_pp / 100)
    ratios = per_process_log_ratios(pilot_rows, labels, bounds, pairs, cases)
    for key, values in sorted(ratios.items()):
        sizing.sd_pp[key] = round(100 * statistics.stdev(values), 3)
        spread = robust_sd(values)
        sizing.robust_sd_pp[key] = round(100 * spread, 3)
        # The report's interval is the median's order-statistic interval, about 1.15x as
        # wide as a t interval on the same processes (simulated, n = 11, Gaussian
        # effects; 1.25x asymptotically): size for the wider one.
        sizing.required[key] = required_n(MEDIAN_WIDTH * spread, half, floor=pilot)
    sizing.wanted = max([pilot, *sizing.required.values()])
    by_time = pilot
    if seconds_per_process > 0:
        left = max_minutes * 60 - seconds_spent - seconds_after - FINISH_SECONDS
        by_time = pilot + max(0, math.floor(left / seconds_per_process))
    sizing.planned = min(sizing.wanted, max_processes, by_time)
    if sizing.planned < sizing.wanted:
        sizing.capped_by = "max_processes" if max_processes <= by_time else "max_minutes"
    return sizing
