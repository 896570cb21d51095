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

from kvqueue import schema
from kvqueue.formatting import fmt_interval, fmt_number, fmt_pct, fmt_signed_pct, is_na
from kvqueue.params.regression_params import DEFAULT_THRESHOLD_PCT
from kvqueue.stats import count_figures

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


# ---------------------------------------------------------------------------------------
# a stack subject's saving per request and per block (the manager's writeup)


def request_savings(
    pairs: pd.DataFrame, summary: pd.DataFrame, candidate: str, baseline: str
) -> pd.DataFrame:
    """What the candidate saves per operation (one request of ``sweepN``, one scheduler
    step of ``stream``) and per block (``sweepN``: per operation / N,
    :func:`kvqueue.stats.count_figures.case_blocks`), per host × interpreter × case ×
    pool.

    Instructions come from the counts (``pairs``: the processed ``count_pairs``); time
    from the headline timed rows of the same host × interpreter × cell (``summary``):
    the baseline's median ns per operation times the paired reduction and its interval.
    No time is derived from instructions: a cell without a timed row has none.

    Returns
    -------
    pandas.DataFrame
        host, interpreter, case, pool, blocks (nan: not fixed), baseline_instructions,
        candidate_instructions, saving_instr, saving_instr_per_block, instr_reduction,
        saving_ns, saving_ns_low, saving_ns_high, time_reduction (nan without a timed row).
    """
    keys = ["host", "interpreter", "case", "pool"]
    columns = [
        *keys,
        "blocks",
        "baseline_instructions",
        "candidate_instructions",
        "saving_instr",
        "saving_instr_per_block",
        "instr_reduction",
        "saving_ns",
        "saving_ns_low",
        "saving_ns_high",
        "time_reduction",
    ]
    rows: list[dict] = []
    counted = (
        pairs[(pairs["candidate"] == candidate) & (pairs["baseline"] == baseline)]
        if len(pairs)
        else pairs
    )
    timed = pd.DataFrame()
    if len(summary):
        timed = summary[
            summary["headline"].fillna(False).astype(bool)
            & (summary["phase"] == "main")
            & (summary["kind"] != "aa")
            & (summary["candidate"] == candidate)
            & (summary["baseline"] == baseline)
        ]
    cells: dict[tuple, dict] = {}
    for r in counted.itertuples(index=False) if len(counted) else ():
        key = (r.host, r.interpreter, r.case, int(r.pool))
        saving = float(r.baseline_instructions) - float(r.candidate_instructions)
        cells[key] = {
            "baseline_instructions": float(r.baseline_instructions),
            "candidate_instructions": float(r.candidate_instructions),
            "saving_instr": saving,
            "instr_reduction": float(r.instr_reduction),
        }
    for r in timed.itertuples(index=False) if len(timed) else ():
        key = (r.host, r.interpreter, r.case, int(r.pool))
        base_ns = float(r.baseline_ns)
        cells.setdefault(key, {}).update(
            {
                "saving_ns": base_ns * float(r.reduction),
                "saving_ns_low": base_ns * float(r.ci_low),
                "saving_ns_high": base_ns * float(r.ci_high),
                "time_reduction": float(r.reduction),
            }
        )
    for key, cell in cells.items():
        blocks = count_figures.case_blocks(str(key[2]))
        per_block = (
            cell["saving_instr"] / blocks
            if blocks is not None and "saving_instr" in cell
            else math.nan
        )
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "blocks": math.nan if blocks is None else blocks,
                **cell,
                "saving_instr_per_block": per_block,
            }
        )
    out = pd.DataFrame(rows).reindex(columns=columns)
    if out.empty:
        return out
    return (
        out.assign(_c=out["case"].map(schema.case_rank))
        .sort_values(["host", "interpreter", "_c", "pool"])
        .drop(columns="_c")
        .reset_index(drop=True)
    )


def _instr(x: float) -> str:
    return "–" if not _finite(x) else f"{x:+,.0f}"


def _finite(x: object) -> bool:
    return not is_na(x) and math.isfinite(float(x))  # type: ignore[arg-type]


def _us(ns: float, low: float = math.nan, high: float = math.nan) -> str:
    """ns as µs with its interval: ``+12.3 µs [+10.1, +14.0]``."""
    if not _finite(ns):
        return "–"
    text = f"{ns / 1000:+,.2f} µs"
    if _finite(low) and _finite(high):
        text += f" [{low / 1000:+,.2f}, {high / 1000:+,.2f}]"
    return text


def request_savings_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Display version of :func:`request_savings` (positive: the candidate saves); the
    time columns only where a timed run measured a cell."""
    if cells.empty:
        return pd.DataFrame()
    out = pd.DataFrame(
        {
            "Host": cells["host"],
            "Interpreter": cells["interpreter"],
            "Case": cells["case"],
            "Pool": cells["pool"].map(lambda p: f"{int(p):,}"),
            "Blocks": cells["blocks"].map(lambda b: "–" if not _finite(b) else f"{int(b):,}"),
            "Baseline instr/op": cells["baseline_instructions"].map(
                lambda x: "–" if not _finite(x) else fmt_number(x, 0)
            ),
            "Saving instr/op": cells["saving_instr"].map(_instr),
            "Saving instr/block": cells["saving_instr_per_block"].map(_instr),
            "Instr reduction": cells["instr_reduction"].map(
                lambda x: "–" if not _finite(x) else fmt_signed_pct(x)
            ),
        }
    )
    if cells["saving_ns"].notna().any():
        out["Time saving/op [95% CI]"] = [
            _us(ns, lo, hi)
            for ns, lo, hi in zip(
                cells["saving_ns"], cells["saving_ns_low"], cells["saving_ns_high"], strict=True
            )
        ]
        out["Time saving/block"] = [
            "–" if not (_finite(ns) and _finite(b)) else f"{ns / b:+,.1f} ns"
            for ns, b in zip(cells["saving_ns"], cells["blocks"], strict=True)
        ]
    return out.reset_index(drop=True)


def swap_shares_of(pairs: pd.DataFrame, candidate: str, baseline: str) -> pd.DataFrame:
    """The shares :func:`kvqueue.stats.count_figures.swap_shares` computes, per host ×
    interpreter × run of the counts (``pairs``: the processed ``count_pairs``), of the
    swaps and whole candidates against ``baseline`` that involve ``candidate`` (as the
    swap or as the whole). Columns: host, interpreter, run_id, case, pool, swap, whole,
    swap_saving_per_block, whole_saving_per_block, share."""
    columns = [
        "host",
        "interpreter",
        "run_id",
        "case",
        "pool",
        "swap",
        "whole",
        "swap_saving_per_block",
        "whole_saving_per_block",
        "share",
    ]
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    mine = pairs[pairs["baseline"] == baseline]
    rows = []
    for (host, interp, run), grp in mine.groupby(["host", "interpreter", "run_id"], sort=True):
        for share in count_figures.swap_shares(grp.to_dict("records"), baseline):
            if candidate in (share["swap"], share["whole"]):
                rows.append({"host": host, "interpreter": interp, "run_id": run, **share})
    out = pd.DataFrame(rows, columns=columns)
    if out.empty:
        return out
    return (
        out.assign(_c=out["case"].map(schema.case_rank))
        .sort_values(["host", "interpreter", "swap", "whole", "_c", "pool"])
        .drop(columns="_c")
        .reset_index(drop=True)
    )


def swap_sentence(shares: pd.DataFrame, candidate: str) -> str:
    """What a swap explains of each whole candidate's saving, from
    :func:`swap_shares_of` (Markdown; '' without shares): per swap × whole, the range of
    the shares over the cells (lowest and highest with their case), per host ×
    interpreter."""
    if shares.empty:
        return ""
    out = []
    for (swap, whole), grp in shares.groupby(["swap", "whole"], sort=False):
        known = grp[grp["share"].notna()]
        where = "; ".join(
            dict.fromkeys(f"{h}, {i}" for h, i in zip(grp["host"], grp["interpreter"], strict=True))
        )
        if known.empty:
            out.append(
                f"`{whole}` saves nothing against the baseline in these cells ({where}): "
                f"no share of it to explain by `{swap}`."
            )
            continue
        lo = known.loc[known["share"].astype(float).idxmin()]
        hi = known.loc[known["share"].astype(float).idxmax()]
        span = f"{fmt_pct(lo['share'])} ({lo['case']})"
        if lo.name != hi.name and fmt_pct(lo["share"]) != fmt_pct(hi["share"]):
            span += f" to {fmt_pct(hi['share'])} ({hi['case']})"
        subject = (
            f"The swap `{swap}` explains"
            if candidate == swap
            else f"Of this saving, `{swap}` explains"
        )
        out.append(
            f"{subject} {span} of the instructions per operation that `{whole}` saves "
            f"against the same baseline ({len(known)} cells; {where}): the rest is the "
            "other code the whole release changed."
        )
    return " ".join(out)


def counts_verdict_sentence(rows: pd.DataFrame, candidate: str, baseline: str) -> str:
    """The opening sentence of a pair only counted, one a reviewer can paste: the cases in
    which the candidate executes fewer instructions per operation and those with more,
    each with the range of their reductions, then those that moved by less than
    :data:`THRESHOLD`; where ('' without rows)."""
    mine = rows[(rows["candidate"] == candidate) & (rows["baseline"] == baseline)]
    if mine.empty:
        return ""
    n = len(mine)
    said = mine["instr_reduction"].map(verdict)

    def group(cells: pd.DataFrame) -> str:
        cases = list(dict.fromkeys(sorted(cells["case"], key=schema.case_rank)))
        listed = cases[0] if len(cases) == 1 else f"{', '.join(cases[:-1])} and {cases[-1]}"
        share = "" if len(cells) == n else f" ({len(cells)} of {n} cells)"
        return listed + share

    def span(cells: pd.DataFrame) -> str:
        lo, hi = (f"{100 * v:.1f}" for v in (cells.min(), cells.max()))
        return f"{lo} %" if lo == hi else f"{lo}–{hi} %"

    parts = []
    fewer = mine[said == FEWER]
    more = mine[said == MORE]
    if len(fewer):
        parts.append(
            f"executes {span(fewer['instr_reduction'])} fewer instructions per operation "
            f"than `{baseline}` in {group(fewer)}"
        )
    if len(more):
        parts.append(
            f"{span(-more['instr_reduction'])} more in {group(more)}"
            if parts
            else f"executes {span(-more['instr_reduction'])} more instructions per operation "
            f"than `{baseline}` in {group(more)}"
        )
    same = mine[~said.isin([FEWER, MORE])]
    pythons = list(dict.fromkeys(sorted(mine["interpreter"].astype(str))))
    hosts = sorted(mine["host"].astype(str).unique())
    where = f"on {', '.join(pythons[:-1]) + ' and ' if len(pythons) > 1 else ''}{pythons[-1]}, " + (
        f"one host ({hosts[0]})" if len(hosts) == 1 else f"{len(hosts)} hosts ({', '.join(hosts)})"
    )
    if not parts:
        return (
            f"`{candidate}` against `{baseline}` {where}: no change of "
            f"{fmt_pct(THRESHOLD, 0)} or more in instructions per operation in any cell."
        )
    text = f"`{candidate}` " + "; ".join(parts) + f" {where}"
    if len(same):
        text += f"; below {fmt_pct(THRESHOLD, 0)} in {group(same)}"
    return text + "."


def largest_sweep_phrase(savings: pd.DataFrame) -> str:
    """What the largest request measured saves, per request and per block, over the
    hosts × interpreters (:func:`request_savings`; '' without a case of fixed blocks):
    "per request of 1,000 blocks (sweep1000): 9,218,329 fewer instructions (9,218 per
    block)", with the time saving where a timed run measured it."""
    fixed = savings[savings["blocks"].notna() & savings["saving_instr"].notna()]
    timed = savings[savings["blocks"].notna() & savings["saving_ns"].notna()]
    if fixed.empty and timed.empty:
        return ""
    use = fixed if len(fixed) else timed
    blocks = int(use["blocks"].max())
    case = str(use.loc[use["blocks"] == blocks, "case"].iloc[0])
    text = f"per request of {blocks:,} blocks ({case}): "
    said = []
    top = fixed[fixed["blocks"] == blocks]
    if len(top):

        def rng(values: pd.Series) -> str:
            lo, hi = f"{values.min():,.0f}", f"{values.max():,.0f}"
            return lo if lo == hi else f"{lo} to {hi}"

        saved = top["saving_instr"]
        word = "fewer" if saved.min() >= 0 else "more" if saved.max() <= 0 else "fewer (or more)"
        said.append(
            f"{rng(saved.abs())} {word} instructions ({rng(top['saving_instr_per_block'].abs())} "
            "per block)"
        )
    clock = timed[timed["blocks"] == blocks]
    if len(clock):
        ns = clock["saving_ns"]
        lo, hi = f"{ns.min() / 1000:+,.1f}", f"{ns.max() / 1000:+,.1f}"
        said.append(f"{lo if lo == hi else f'{lo} to {hi}'} µs saved in time (paired, timed)")
    return text + "; ".join(said)
