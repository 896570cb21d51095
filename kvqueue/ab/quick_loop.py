"""``make quick``: a fast A/B loop for tuning a queue, printed in the terminal.

The same gate and the same paired, order-randomized worker processes as ``make bench``,
with small defaults (:data:`kvqueue.params.bench_params.QUICK_LOOP_DEFAULTS`), a progress line per
process, and the comparison table (reduction, interval, verdict) at the end. Nothing is
written under ``data/raw``: evidence for a pull request comes from ``make bench``; this
is for the many short loops in between.

With ``METRIC=instructions`` it prints, per candidate, where the instructions moved in
the cell that changed most (:func:`where_cells`; :mod:`kvqueue.ab.where_text`): the C
functions, the Python functions and the lines of the diff, from one more process per
variant (:mod:`kvqueue.measure.where_run`).
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis, where_text
from kvqueue.errors import BenchError
from kvqueue.formatting import fmt_interval, fmt_signed_pct
from kvqueue.measure import (
    cachegrind,
    counts_run,
    interpreter_checks,
    machine_lock,
    runner,
    where_run,
)
from kvqueue.params import bench_params
from kvqueue.params.bench_params import BenchParams, Checked
from kvqueue.params.report_params import ReportSettings
from kvqueue.stats import cost_moves, count_figures, paired_stats

_CELL = ("case", "pool")


def quick_params(given: dict[str, Any]) -> BenchParams:
    """Checked parameters of a quick loop: the quick defaults under what was given."""
    defaults = dict(bench_params.QUICK_LOOP_DEFAULTS)
    cases = bench_params.QUICK_SUBJECT_CASES.get(str(given.get("subject")))
    if cases is not None:
        defaults.update(cases=cases)
    return bench_params.make_params(**{"host": "quick", **defaults, **given})


def run_quick(p: BenchParams, out: TextIO = sys.stdout, announce: str = "") -> pd.DataFrame:
    """Gate, time and compare; print progress to stderr and the table to ``out``
    (``announce``: the line printed once the input is checked).

    Returns
    -------
    pandas.DataFrame
        One row per (case, pool, candidate): reduction, CI, verdict.

    Raises
    ------
    BenchInputError, GateRefused, BenchError
        As ``make bench`` (one line each).
    """
    checked = interpreter_checks.check(p, announce)
    p = checked.params
    start = time.monotonic()
    # The queue's gate also runs at the bench's pools: a queue broken only above 5,000
    # blocks passed a gate that stopped at 2,048. A pool's gate compares two whole pools
    # call by call (~6 s per pool at 100,000 blocks): it runs at the sizes timed.
    extra = schema.POOLS if p.subject == schema.SUBJECT_QUEUE else ()
    if p.metric == "instructions":
        pairs = [(label, p.labels[0]) for label in p.labels[1:]]
        totals = where_run.FunctionTotals()
        moves: list[tuple[str, cost_moves.CellMoves]] = []
        notes: list[str] = []

        def trace(gate: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
            # Per candidate, the cell that moved most, traced to functions and lines.
            chosen = where_cells(count_figures.table(count_figures.per_op(rows), pairs))
            try:
                found = where_run.cell_moves(
                    p.python,
                    counts_run.base_spec(p, gate),
                    rows,
                    totals,
                    chosen,
                    valgrind=cachegrind.find_valgrind(p.cache_sim),
                )
            except BenchError as exc:
                notes.append(f"where the instructions moved was not traced: {exc}")
                return
            moves.extend((head, m) for (_c, _p, _b, head), m in zip(chosen, found, strict=True))

        _, rows = counts_run.count_rows(
            checked, sizes=extra, what="make quick", on_functions=totals, then=trace
        )
        counted = count_figures.per_op(rows)
        table = count_figures.table(counted, pairs)
        text = format_counts(
            table, checked, time.monotonic() - start - machine_lock.waited_seconds()
        )
        print(text, file=out)
        shares = count_figures.swap_shares(table, p.labels[0])
        if shares:
            print(format_shares(shares), file=out)
        for head, m in moves:
            print(where_text.plain(m, p.labels[0], head), file=out)
        for note in notes:
            print(note, file=out)
        return pd.DataFrame(table)
    with machine_lock.hold("make quick"):
        gate = runner.run_gate(p, sizes=extra)
        expected = {g["label"]: g["sha256"] for g in gate}
        plan = runner.process_plan(p)
        rows: list[list[Any]] = []
        for done, (phase, number, seed) in enumerate(plan, start=1):
            result = runner.run_process(p, phase, number, seed, expected)
            rows.extend([number, phase, *row] for row in result["rows"])
            print(
                f"[{done:>2}/{len(plan)}] process {number}: {result['seconds']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    table = compare(pd.DataFrame(rows, columns=list(schema.SAMPLE_COLUMNS)), p)
    print(
        format_table(table, checked, time.monotonic() - start - machine_lock.waited_seconds()),
        file=out,
    )
    return table


def where_cells(table: list[dict[str, Any]]) -> list[tuple[str, int, str, str]]:
    """Per candidate, the (case, pool, baseline, candidate) cell whose instructions per
    operation moved most against the baseline (the one ``make quick`` traces to
    functions and lines)."""
    best: dict[str, dict[str, Any]] = {}
    for r in table:
        had = best.get(r["candidate"])
        if had is None or abs(r["reduction_pct"]) > abs(had["reduction_pct"]):
            best[r["candidate"]] = r
    return [(r["case"], int(r["pool"]), r["baseline"], r["candidate"]) for r in best.values()]


def compare(samples: pd.DataFrame, p: BenchParams) -> pd.DataFrame:
    """Every variant against the baseline, per (case, pool), with the report's statistics."""
    labels = p.labels
    medians = paired_stats.process_medians(samples, _CELL)
    settings = ReportSettings()
    rows = []
    comparisons = ab_analysis.comparisons_for_run(labels, labels[0], [], ())
    for cand, base, kind in comparisons:
        ratios = paired_stats.paired_ratios(medians, cand, base, _CELL)
        for (case, pool), grp in ratios.groupby(list(_CELL), sort=False):
            cell = medians[(medians["case"] == case) & (medians["pool"] == pool)]
            row = paired_stats.summarize_pair(
                grp, cell, delta=settings.delta, **settings.bootstrap()
            )
            rows.append({"case": case, "pool": int(pool), "candidate": cand, "kind": kind, **row})
    out = pd.DataFrame(rows)
    if len(out):
        out["_rank"] = out["case"].map(schema.case_rank)
        out = out.sort_values(["_rank", "pool", "candidate"]).drop(columns="_rank")
    return out.reset_index(drop=True)


def format_table(table: pd.DataFrame, checked: Checked, seconds: float) -> str:
    """The comparison as a fixed-width text table with a header line."""
    p = checked.params
    head = (
        f"quick A/B on {checked.python.get('implementation', 'Python')} "
        f"{checked.python.get('version', '?')}: baseline {p.labels[0]}, {p.processes} "
        f"processes x {p.samples} samples of {p.sample_ms:g} ms, {seconds:.0f} s "
        "(not evidence: use make bench for that)"
    )
    lines = [head]
    fmt = "{:<10} {:>8}  {:<28} {:>9}  {:<19} {:>4}  {}"
    lines.append(fmt.format("case", "pool", "candidate", "reduction", "95% CI", "n", "verdict"))
    for r in table.itertuples(index=False):
        ci = fmt_interval(r.ci_low, r.ci_high, fmt_signed_pct)
        lines.append(
            fmt.format(
                r.case,
                f"{r.pool:,}",
                str(r.candidate)[:28],
                fmt_signed_pct(r.reduction),
                ci,
                r.n_processes,
                r.verdict,
            )
        )
    return "\n".join(lines)


def format_shares(shares: list[dict[str, Any]]) -> str:
    """The saving per block of each whole candidate and of each component swap, and the
    share of the first that the swap explains (:func:`count_figures.swap_shares`)."""
    head = (
        "saving per block (instructions; + = fewer than the baseline) and the share of a "
        "whole candidate's saving that swapping one part explains"
    )
    fmt = "{:<10} {:>8}  {:<28} {:>14}  {:<28} {:>14} {:>8}"
    lines = [
        head,
        fmt.format("case", "pool", "whole", "saving/block", "swap", "saving/block", "share"),
    ]

    def per_block(value: float | None) -> str:
        return "n/a" if value is None else f"{value:+,.1f}"

    ordered = sorted(shares, key=lambda r: (count_figures.case_blocks(r["case"]) or 0, r["case"]))
    for r in ordered:
        lines.append(
            fmt.format(
                r["case"],
                f"{r['pool']:,}",
                str(r["whole"])[:28],
                per_block(r["whole_saving_per_block"]),
                str(r["swap"])[:28],
                per_block(r["swap_saving_per_block"]),
                "n/a" if r["share"] is None else f"{100 * r['share']:.0f}%",
            )
        )
    return "\n".join(lines)


def format_counts(rows: list[dict[str, Any]], checked: Checked, seconds: float) -> str:
    """Instruction counts per operation as a fixed-width text table with a header line."""
    p = checked.params
    spread = max((r["spread"] for r in rows if r["spread"] == r["spread"]), default=float("nan"))
    head = (
        f"quick instruction counts on {checked.python.get('implementation', 'Python')} "
        f"{checked.python.get('version', '?')}: baseline {p.labels[0]}, cachegrind, "
        f"{seconds:.0f} s; two identical runs differ by {spread:.3f} instructions per "
        "operation (time is what users feel: confirm with make bench)"
    )
    fmt = "{:<10} {:>8}  {:<34} {:>12} {:>12}  {:>9} {:>13}"
    lines = [
        head,
        fmt.format(
            "case", "pool", "candidate", "instr/op", "baseline", "reduction", "saving/block"
        ),
    ]
    # Candidates in the order given, each one's cases in table order (sweep30 before
    # sweep100), as in the report.
    order = {label: i for i, label in enumerate(p.labels)}
    for r in sorted(
        rows, key=lambda r: (order.get(r["candidate"], 0), schema.case_key(r["case"]), r["pool"])
    ):
        blocks = count_figures.case_blocks(str(r["case"]))
        saving = r["baseline_instructions"] - r["candidate_instructions"]
        lines.append(
            fmt.format(
                r["case"],
                f"{r['pool']:,}",
                str(r["candidate"])[:34],
                f"{r['candidate_instructions']:,.1f}",
                f"{r['baseline_instructions']:,.1f}",
                f"{r['reduction_pct']:+.2f}%",
                "" if blocks is None else f"{saving / blocks:+,.1f}",
            )
        )
    return "\n".join(lines)
