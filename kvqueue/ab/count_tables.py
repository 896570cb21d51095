"""Instruction counts beside time: the report's agreement table and its sentence.

Each A/B comparison of the headline time tables gets the instruction reduction of the
newest counts run of the same host × interpreter, case and pool (``make bench
METRIC=instructions``). Counts track time, but not one to one: an instruction that
waits on memory or follows a mispredicted branch costs more than one that does not, so
a change that also shortens memory traffic or branch behaviour saves more time than
instructions. The sentence under the table is computed from the cells shown.
"""

from __future__ import annotations

import math

import pandas as pd

from kvqueue.formatting import fmt_interval, fmt_signed_pct

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


def agreement_sentence(cells: pd.DataFrame) -> str:
    """One paragraph on how far counts and time agree, from the cells shown ('' if none)."""
    if cells.empty:
        return ""
    n = len(cells)
    inside = int(((cells["instr"] >= cells["ci_low"]) & (cells["instr"] <= cells["ci_high"])).sum())
    more = int((cells["gap_pp"] > 0).sum())
    median_gap = float(cells["gap_pp"].median())
    widest = cells.loc[cells["gap_pp"].abs().idxmax()]
    text = (
        f"In {inside} of {n} cells the instruction reduction lies inside the time "
        f"interval. Time fell more than instructions in {more} of {n} cells (median gap "
        f"{median_gap:+.1f} pp; widest: {widest['candidate']} vs {widest['baseline']}, "
        f"{widest['case']} on {widest['interpreter']}, time {fmt_signed_pct(widest['time'])} "
        f"against instructions {fmt_signed_pct(widest['instr'])}). "
    )
    if more > n / 2:
        text += (
            "Where time falls further than instructions, the change also cut what an "
            "instruction count does not weigh: loads that wait on memory and mispredicted "
            "branches."
        )
    else:
        text += (
            "Where time falls less than instructions, the instructions saved were cheap "
            "ones (already in cache, well predicted)."
        )
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
