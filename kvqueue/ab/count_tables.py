"""Instruction counts beside time: the report's agreement table and its sentence.

Each A/B comparison of the headline time tables gets the instruction reduction of the
newest counts run of the same host × interpreter, case and pool (``make bench
METRIC=instructions``). Counts track time, but not one to one: an instruction that
waits on memory or follows a mispredicted branch costs more than one that does not, so
a change that also shortens memory traffic or branch behaviour saves more time than
instructions. The sentence under the table is computed from the cells shown.

A pair counted but never timed on a host × interpreter (a counts-only run, ``make bench
METRIC=instructions`` alone) gets its own table (:func:`counts_only`, :func:`counts_table`)
and verdict (:func:`counts_verdict`): a cell changed when its instructions per operation
moved by :data:`THRESHOLD` or more.
"""

from __future__ import annotations

import math

import pandas as pd

from kvqueue.formatting import fmt_interval, fmt_number, fmt_pct, fmt_signed_pct
from kvqueue.params.regression_params import DEFAULT_THRESHOLD_PCT

_KEYS = ["host", "interpreter", "case", "pool", "candidate", "baseline"]


def agreement(summary: pd.DataFrame, pairs: pd.DataFrame, cases: list[str]) -> pd.DataFrame:
    """Time reduction [CI] beside instruction reduction per headline cell.

    Parameters
    ----------
    summary
        The processed ``summary`` table (time; headline rows, main phase are used).
    pairs
        The processed ``count_pairs`` table (newest A/B counts run per host ×
        interpreter).
    cases
        The cases to show.

    Returns
    -------
    pandas.DataFrame
        Numbers (fractions) per cell: ``time``, ``ci_low``, ``ci_high``, ``instr``,
        ``cycles`` (nan without the cache simulation) and ``gap_pp`` (time − instr).
    """
    if summary.empty or pairs.empty:
        return pd.DataFrame()
    time = summary[
        summary["headline"].astype(bool)
        & (summary["phase"] == "main")
        & (summary["kind"] != "aa")
        & summary["case"].isin(cases)
    ]
    counts = pairs.rename(columns={"instr_reduction": "instr", "cycles_reduction": "cycles"})
    merged = time.merge(counts[[*_KEYS, "instr", "cycles"]], on=_KEYS, how="inner")
    merged = merged.assign(
        time=merged["reduction"], gap_pp=100 * (merged["reduction"] - merged["instr"])
    )
    return merged[[*_KEYS, "time", "ci_low", "ci_high", "instr", "cycles", "gap_pp"]]


def agreement_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Display version of :func:`agreement` (formatted strings)."""
    if cells.empty:
        return pd.DataFrame()
    out = pd.DataFrame(
        {
            "Host": cells["host"],
            "Interpreter": cells["interpreter"],
            "Comparison": cells["candidate"] + " vs " + cells["baseline"],
            "Case": cells["case"],
            "Pool": cells["pool"].map(lambda p: f"{int(p):,}"),
            "Time (95% CI)": [
                f"{fmt_signed_pct(t)} {fmt_interval(lo, hi, fmt_signed_pct)}"
                for t, lo, hi in zip(cells["time"], cells["ci_low"], cells["ci_high"], strict=True)
            ],
            "Instructions": cells["instr"].map(fmt_signed_pct),
            "Gap (pp)": cells["gap_pp"].map(lambda g: f"{g:+.1f}"),
        }
    )
    if cells["cycles"].notna().any():
        out["Est. cycles"] = cells["cycles"].map(lambda c: "n/a" if c != c else fmt_signed_pct(c))
    return out.reset_index(drop=True)


def _direction_sentence(both: pd.DataFrame, fell: bool) -> str:
    """What the cells where time and instructions moved the same way say, read in that
    direction: both fell (the candidate faster and executing fewer), or both rose."""
    if both.empty:
        return ""
    # Further = a larger magnitude of time than of instructions, in that direction.
    further = int((both["time"].abs() > both["instr"].abs()).sum())
    n = len(both)
    moved = "fell" if fell else "rose"
    where = (
        f"Where both fell ({n} cell{'s' if n != 1 else ''}: the candidate is faster and "
        "executes fewer instructions)"
        if fell
        else f"Where both rose ({n} cell{'s' if n != 1 else ''}: the candidate is slower "
        "and executes more instructions)"
    )
    if further > n / 2:
        why = (
            "the change also cut what an instruction count does not weigh: loads that "
            "wait on memory and mispredicted branches"
            if fell
            else "the instructions added were costly ones, or brought what a count does "
            "not weigh: loads that wait on memory, mispredicted branches"
        )
        return f"{where}, time {moved} further than instructions in {further}: {why}."
    what = "saved" if fell else "added"
    return (
        f"{where}, time {moved} less than instructions in {n - further}: the instructions "
        f"{what} were cheap ones (already in cache, well predicted)."
    )


def agreement_sentence(cells: pd.DataFrame) -> str:
    """One paragraph on how far counts and time agree, from the cells shown ('' if none),
    true whichever way they moved: cells where both fell and cells where both rose are
    read apart, cells where they disagree in sign are counted."""
    if cells.empty:
        return ""
    n = len(cells)
    inside = int(((cells["instr"] >= cells["ci_low"]) & (cells["instr"] <= cells["ci_high"])).sum())
    median_gap = float(cells["gap_pp"].median())
    widest = cells.loc[cells["gap_pp"].abs().idxmax()]
    text = (
        f"In {inside} of {n} cells the instruction reduction lies inside the time "
        f"interval; the median gap, time minus instruction reduction, is {median_gap:+.1f} "
        f"pp (widest: {widest['candidate']} vs {widest['baseline']}, {widest['case']} on "
        f"{widest['interpreter']}, time {fmt_signed_pct(widest['time'])} against "
        f"instructions {fmt_signed_pct(widest['instr'])})."
    )
    for fell in (True, False):
        sign = 1 if fell else -1
        both = cells[(sign * cells["time"] > 0) & (sign * cells["instr"] > 0)]
        line = _direction_sentence(both, fell)
        if line:
            text += " " + line
    signs = (cells["time"] > 0) == (cells["instr"] > 0)
    if not bool(signs.all()):
        text += f" In {n - int(signs.sum())} cells the two disagree in sign."
    if cells["cycles"].notna().any():
        err = (100 * (cells["time"] - cells["cycles"])).abs().median()
        text += (
            f" The estimated cycles of the cache simulation come within a median "
            f"{err:.1f} pp of time."
        )
    return text if not math.isnan(median_gap) else ""


#: The smallest instruction reduction (either sign) read as a change: ``make regress``'s
#: and ``make check-queue``'s 1 %, ~10x the largest difference measured here between two
#: counts of identical code (0.13 %, CPython 3.10 to 3.13: layout and interpreter state).
THRESHOLD = DEFAULT_THRESHOLD_PCT / 100
FEWER, MORE, SAME = "fewer instructions", "more instructions", "no change"


def counts_only(pairs: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The ``count_pairs`` rows whose host × interpreter × comparison no headline time
    run measured (main phase): what only instruction counts answer."""
    if pairs.empty:
        return pairs
    keys = ["host", "interpreter", "candidate", "baseline"]
    if summary.empty:
        return pairs.reset_index(drop=True)
    timed = summary[summary["headline"].fillna(False).astype(bool) & (summary["phase"] == "main")]
    timed = set(timed[keys].itertuples(index=False, name=None))
    own = [k not in timed for k in pairs[keys].itertuples(index=False, name=None)]
    return pairs[own].reset_index(drop=True)


def verdict(reduction: float) -> str:
    """:data:`FEWER`, :data:`MORE` or :data:`SAME` (within :data:`THRESHOLD`)."""
    if abs(reduction) < THRESHOLD:
        return f"{SAME} (< {fmt_pct(THRESHOLD, 0)})"
    return FEWER if reduction > 0 else MORE


def counts_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Display rows of :func:`counts_only`: instructions per operation of both variants,
    the reduction (> 0: the candidate executes fewer) and the verdict."""
    if rows.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "Host": rows["host"],
            "Interpreter": rows["interpreter"],
            "Comparison": rows["candidate"] + " vs " + rows["baseline"],
            "Case": rows["case"],
            "Pool": rows["pool"].map(lambda p: f"{int(p):,}"),
            "Baseline instr/op": rows["baseline_instructions"].map(lambda x: fmt_number(x, 1)),
            "Candidate instr/op": rows["candidate_instructions"].map(lambda x: fmt_number(x, 1)),
            "Reduction": rows["instr_reduction"].map(fmt_signed_pct),
            "Verdict": rows["instr_reduction"].map(verdict),
        }
    ).reset_index(drop=True)


def counts_verdict(rows: pd.DataFrame, candidate: str, baseline: str) -> str:
    """The verdict line of one counted pair (Markdown; '' without rows): per verdict the
    cells and the range of their reductions, over the hosts × interpreters counted."""
    mine = rows[(rows["candidate"] == candidate) & (rows["baseline"] == baseline)]
    if mine.empty:
        return ""
    parts = []
    for word in (FEWER, MORE, SAME):
        got = mine[mine["instr_reduction"].map(verdict).str.startswith(word)]
        if got.empty:
            continue
        lo, hi = got["instr_reduction"].min(), got["instr_reduction"].max()
        span = fmt_signed_pct(lo) if lo == hi else f"{fmt_signed_pct(lo)} to {fmt_signed_pct(hi)}"
        cases = ", ".join(dict.fromkeys(got["case"]))
        said = verdict(float(got["instr_reduction"].iloc[0]))
        parts.append(f"{said} in {len(got)} ({cases}: reduction {span})")
    where = "; ".join(
        f"{h}, {i}" for h, i in dict.fromkeys(zip(mine["host"], mine["interpreter"], strict=True))
    )
    return (
        f"**`{candidate}` vs `{baseline}`, instructions per operation ({where}), "
        f"{len(mine)} cells: " + "; ".join(parts) + ".**"
    )


def counts_method(counts: pd.DataFrame, run_ids: list[str]) -> str:
    """How to read a counts-only verdict: the threshold, the runs' own resolution, and
    that instructions are not wall time (Markdown)."""
    own = counts[counts["run_id"].isin(run_ids)] if len(counts) else counts
    rel = (own["spread"] / own["instructions"].abs()).max() if len(own) else float("nan")
    measured = ""
    if rel == rel:
        measured = (
            f"; two identical counts in these runs differed by at most {100 * rel:.2g} %"
            if rel > 0
            else "; two identical counts in these runs agreed exactly"
        )
    return (
        "Instructions per operation under cachegrind (`METRIC=instructions`; docs/design.md "
        "§13) are deterministic: a repeated count gives the same number to a few "
        f"instructions in a billion{measured}, so a difference carries no interval. A cell "
        f"counts as a change when the reduction is {fmt_pct(THRESHOLD, 0)} or more either "
        "way, the threshold of `make regress` and `make check-queue`: ~10x the largest "
        "difference measured here between counts of identical code (0.13 %, CPython "
        "3.10-3.13), which layout and interpreter state move. Instructions are not wall "
        "time: loads that wait on memory and mispredicted branches cost time without "
        "instructions, so how much faster a variant is needs a timed run (`make bench`)."
    )
