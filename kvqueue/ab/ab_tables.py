"""The A/B result tables of the report: display-ready DataFrames of formatted strings.

Every function takes the processed tables (:class:`kvqueue.processed.store.Processed`)
and returns one cell of text per displayed column (rendered by
:mod:`kvqueue.report.frames`), so the HTML report and the Markdown writeup show exactly
the same cells: the summary, the compact grids, the full per-case tables, the gap to the
lower bound and ns per variant, plus the notes that say how to read them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis
from kvqueue.formatting import (
    TOO_FEW,
    ci_header,
    comparison,
    fmt_ci,
    fmt_estimate,
    fmt_ns,
    fmt_pct,
    fmt_pool,
    is_na,
)
from kvqueue.processed import store
from kvqueue.stats import paired_stats
from kvqueue.subjects import queue_cases

#: The cases of the three headline tables.
HEADLINE_CASES = ("alloc1", "alloc2", "mix")
#: Titles of the fixed cases (a sized case's: :func:`case_title`).
_FIXED_TITLES = {
    "mix": "Mixed workload (mix)",
    "popappend": "popleft/append (popappend)",
    "remove": "Remove/append of cached blocks (remove)",
    "churn": "BlockPool: one request's allocation path under prefix caching (churn)",
    "stream": "KVCacheManager: one scheduler step of a serving stream (stream)",
}
#: Titles of ``alloc1`` and ``alloc2`` (the headline cases' words).
_ALLOC_WORDS = {1: "Singleton", 2: "Two-block"}


def case_title(case: str) -> str:
    """The heading of a case's table: ``32-block allocation/free (alloc32)``, any N."""
    n = schema.case_size(case)
    family = schema.case_family(case) if n is not None else None
    if family == "alloc":
        return f"{_ALLOC_WORDS.get(n, f'{n}-block')} allocation/free ({case})"
    if family == "popleft":
        return f"popleft_n({n}) alone ({case})"
    if family == "loop":
        return f"BlockPool: get_new_blocks({n}) + free_blocks ({case})"
    if family == "sweep":
        return f"KVCacheManager: one request of {n} blocks admitted and freed ({case})"
    return _FIXED_TITLES.get(case, case)


#: The cases a pool comparison shows by default: every default pool case (vLLM's loop at
#: its five sizes, the churn); a run's other ``loopN`` are shown too
#: (:func:`subject_cases`).
POOL_HEADLINE_CASES = schema.POOL_CASES
#: The cases a manager comparison shows by default: every default manager case (the five
#: sweeps, the stream), and any other ``sweepN`` measured.
MANAGER_HEADLINE_CASES = schema.MANAGER_CASES
#: The cases each subject's comparisons show first (the queue's: ``make report CASES``'s
#: default).
SUBJECT_HEADLINE_CASES = {
    schema.SUBJECT_QUEUE: HEADLINE_CASES,
    schema.SUBJECT_POOL: POOL_HEADLINE_CASES,
    schema.SUBJECT_MANAGER: MANAGER_HEADLINE_CASES,
}
#: What one cycle of each fixed case is (a sized case's: :func:`case_cycle`).
_FIXED_CYCLES = {
    "mix": (
        f"a fixed shuffled sequence of {len(queue_cases.MIX_SIZES)} allocations "
        f"({queue_cases.mix_composition()}), each freed again; times are ns per allocation/free"
    ),
    "popappend": "one cycle = `q.append(q.popleft())`",
    "remove": "one cycle = `q.remove(b); q.append(b)` for a cached block from the interior",
    "churn": (
        "one request finished (its blocks freed, last first) and one admitted (prefix looked "
        "up with `get_cached_block`, hits `touch`-ed, the rest from `get_new_blocks`, which "
        "evicts, full blocks cached); times are ns per request"
    ),
    "stream": (
        "one scheduler step of a serving-shaped stream (admissions while fewer than 16 "
        "run, one decode `allocate_slots` per running request, preemption when allocation "
        "fails, `free` when done); times are ns per step"
    ),
}


def case_cycle(case: str) -> str:
    """What one cycle (operation) of a case is, in words, any N; an unknown case's name."""
    n = schema.case_size(case)
    family = schema.case_family(case) if n is not None else None
    if family == "alloc":
        return f"one cycle = `blocks = q.popleft_n({n}); q.append_n(blocks)`"
    if family == "popleft":
        return (
            f"one cycle = `q.popleft_n({n})` alone, timed in stretches of calls on a full "
            "queue; the blocks go back untimed between stretches (and in no count)"
        )
    if family == "loop":
        return (
            f"one round of vLLM's own benchmark loop = `blocks = pool.get_new_blocks({n}); "
            "pool.free_blocks(blocks)`; times are ns per round"
        )
    if family == "sweep":
        return (
            f"one request of {n} full blocks with no cache hit, admitted and finished "
            "(`Request()`, `get_computed_blocks`, `allocate_slots`, `free`), every "
            "allocation evicting a cached block; times are ns per request"
        )
    return _FIXED_CYCLES.get(case, case)


def subject_cases(data: store.Processed, subject: str, phase: str = "main") -> list[str]:
    """The cases of ``subject`` a stack comparison shows: its defaults (the headline
    cases) and any other of its cases the headline runs measured, in table order."""
    present = [c for c in present_cases(data, phase) if schema.is_case(subject, c)]
    return sorted({*SUBJECT_HEADLINE_CASES[subject], *present}, key=schema.case_key)


def pair_ranks(df: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> pd.Series:
    """Sort key of each row's (candidate, baseline): its position in ``pairs``, others last."""
    order = {p: i for i, p in enumerate(pairs)}
    keys = zip(df["candidate"], df["baseline"], strict=True)
    return pd.Series([order.get(k, len(order)) for k in keys], index=df.index)


def case_ranks(cases: pd.Series) -> pd.Series:
    """Sort key of each case: its table order (:func:`kvqueue.schema.case_rank`: a sized
    family's cases by N where the family stands)."""
    return cases.map(schema.case_rank)


# ---------------------------------------------------------------------------------------
# result tables


def results_table(
    data: store.Processed,
    cases: Sequence[str],
    *,
    phase: str = "main",
    headline_only: bool = True,
) -> pd.DataFrame:
    """Comparison results, one row per host x interpreter x pool x comparison (x case).

    Parameters
    ----------
    data
        Processed tables.
    cases
        Cases to include; a ``Case`` column is added when there are several.
    phase
        ``"main"`` or ``"confirm"``.
    headline_only
        Only the headline run (newest full-protocol run) per host x interpreter.

    Returns
    -------
    pandas.DataFrame
        Formatted columns: Host, Python, Pool, Comparison, Baseline ns, Candidate ns,
        Reduction, 95% CI, Verdict, Faster in, sample CV, and ``A/A ±`` when an A/A pair
        was measured in any shown run.
    """
    sel = comparison_rows(data, cases, phase=phase, headline_only=headline_only)
    ci = ci_header(data.settings.confidence)
    show_aa = sel["aa_half_width"].notna().any()
    rows = []
    for r in sel.itertuples(index=False):
        row = {}
        if len(cases) > 1:
            row["Case"] = r.case
        row.update(
            {
                "Host": r.host,
                "Python": r.interpreter,
                "Pool": fmt_pool(r.pool),
                "Comparison": comparison(r.candidate, r.baseline),
                "Baseline ns": fmt_ns(r.baseline_ns),
                "Candidate ns": fmt_ns(r.candidate_ns),
                "Reduction": fmt_pct(r.reduction),
                ci: TOO_FEW
                if _few(r) and fmt_ci(r.ci_low, r.ci_high) == "n/a"
                else fmt_ci(r.ci_low, r.ci_high),
                "Verdict": r.verdict,
                "Faster in": f"{round(r.share_faster * r.n_processes)}/{r.n_processes}",
                "CV % (b/c)": (f"{r.cv_baseline * 100:.1f} / {r.cv_candidate * 100:.1f}"),
            }
        )
        if show_aa:
            row["A/A ±"] = "–" if is_na(r.aa_half_width) else fmt_pct(r.aa_half_width, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def comparison_rows(
    data: store.Processed,
    cases: Sequence[str],
    *,
    phase: str = "main",
    headline_only: bool = True,
    kind: str = ab_analysis.PAIR,
) -> pd.DataFrame:
    """Rows of ``summary`` for ``cases``, in report order.

    Configured pairs first (then any other comparison), then case, host, interpreter and
    pool; the sort keys ``_pair`` and ``_case`` are kept as columns.
    """
    s = data.summary
    sel = s[(s["phase"] == phase) & (s["kind"] == kind) & s["case"].isin(list(cases))]
    if headline_only:
        sel = sel[sel["headline"].fillna(False)]
    return sel.assign(
        _pair=pair_ranks(sel, data.settings.pairs), _case=case_ranks(sel["case"])
    ).sort_values(["_pair", "candidate", "baseline", "_case", "host", "interpreter", "pool"])


def verdict_counts(verdicts: pd.Series) -> str:
    """``faster 8/8``, or ``faster 6/8, inconclusive 2/8`` (most frequent first)."""
    counts = verdicts.fillna("n/a").astype(str).value_counts()
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{v} {n}/{len(verdicts)}" for v, n in ordered)


def _few(row: Any) -> bool:
    """Whether a summary row has fewer processes than an interval needs."""
    n = row["n_processes"] if isinstance(row, pd.Series) else row.n_processes
    return not is_na(n) and int(n) < paired_stats.MIN_PROCESSES


def _range_cell(cells: pd.DataFrame) -> str:
    """Lowest and highest reduction of some cells, each with its CI, and their verdicts."""
    if cells.empty:
        return "–"
    valid = cells[cells["reduction"].notna()]
    if valid.empty:
        text = "n/a"
    else:
        lo = valid.loc[valid["reduction"].idxmin()]
        hi = valid.loc[valid["reduction"].idxmax()]
        text = fmt_estimate(lo["reduction"], lo["ci_low"], lo["ci_high"], too_few=_few(lo))
        if len(valid) > 1:
            text += " to " + fmt_estimate(
                hi["reduction"], hi["ci_low"], hi["ci_high"], too_few=_few(hi)
            )
    return f"{text}; {verdict_counts(cells['verdict'])}"


def _listed(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _span(values: pd.Series) -> str:
    """The range of some percentages (fractions in, magnitudes out): ``15.2–18.4 %``."""
    lo, hi = f"{100 * values.min():.1f}", f"{100 * values.max():.1f}"
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def verdict_sentence(data: store.Processed, cases: Sequence[str]) -> str:
    """The writeup's opening sentence, one a reviewer can paste: what the candidate does
    to each case against the baseline, by how much and where, e.g. "`X` makes alloc2,
    alloc8 and alloc32 15.2–18.4 % slower than `Y` on CPython 3.11.7, one host (h)."

    Over every headline cell (main phase) of ``cases`` of the first comparison in
    ``data`` (a writeup's data holds one): the cells judged faster and those judged
    slower, each with the range of their reductions' size, then those with no change and
    the inconclusive ones; a group that is not every cell says how many it is.

    Returns
    -------
    str
        The sentence ('' when no cell was measured).
    """
    sel = comparison_rows(data, cases)
    if sel.empty:
        return ""
    cand, base = sel["candidate"].iloc[0], sel["baseline"].iloc[0]
    sel = sel[(sel["candidate"] == cand) & (sel["baseline"] == base)]
    n = len(sel)

    def group(cells: pd.DataFrame, said: str) -> str:
        share = "" if len(cells) == n else f" ({len(cells)} of {n} cells)"
        return f"{_listed(list(dict.fromkeys(cells['case'])))} {said}{share}"

    verdicts = sel["verdict"].fillna(paired_stats.INCONCLUSIVE).astype(str)
    moved = [
        group(cells, f"{_span(cells['reduction'].abs())} {word}")
        for word in (paired_stats.FASTER, paired_stats.SLOWER)
        if not (cells := sel[verdicts == word]).empty
    ]
    unchanged = verdicts.str.startswith("no change")
    same = sel[unchanged]
    unclear = sel[~verdicts.isin([paired_stats.FASTER, paired_stats.SLOWER]) & ~unchanged]
    rest = [group(same, str(same["verdict"].iloc[0]))] if len(same) else []
    rest += [group(unclear, paired_stats.INCONCLUSIVE)] if len(unclear) else []
    pythons = list(dict.fromkeys(sorted(sel["interpreter"].astype(str))))
    hosts = sorted(sel["host"].astype(str).unique())
    where = f"on {_listed(pythons)}, " + (
        f"one host ({hosts[0]})" if len(hosts) == 1 else f"{len(hosts)} hosts ({', '.join(hosts)})"
    )
    if moved:
        text = f"`{cand}` makes {' and '.join(moved)} than `{base}` {where}"
        return text + (f"; {'; '.join(rest)}." if rest else ".")
    return f"`{cand}` against `{base}` {where}: {'; '.join(rest)}."


def summary_table(data: store.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
    """The answer at a glance: per comparison and case, the range over each host's cells.

    Parameters
    ----------
    data
        Processed tables (main phase of the headline runs).
    cases
        Cases shown (default: the headline cases).

    Returns
    -------
    pandas.DataFrame
        Comparison, Cycles, then one column per host: the lowest and the highest
        reduction over the host's interpreters and pools, each with its CI, and the
        verdict counts of those cells.
    """
    sel = comparison_rows(data, cases)
    if sel.empty:
        return pd.DataFrame()
    hosts = sorted(sel["host"].unique())
    rows = []
    keys = ["_pair", "candidate", "baseline", "_case", "case"]
    for (_, cand, base, _, case), grp in sel.groupby(keys, sort=True):
        row = {"Comparison": comparison(cand, base), "Cycles": case}
        for host in hosts:
            row[host] = _range_cell(grp[grp["host"] == host])
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["wrap"] = hosts
    return out


def _grid(data: store.Processed, cases: Sequence[str], cell: Callable[[Any], str]) -> pd.DataFrame:
    """Rows comparison x host x interpreter, one column per case and pool (``cell(row)``)."""
    sel = comparison_rows(data, cases)
    if sel.empty:
        return pd.DataFrame()
    cells = sorted(
        {(c, int(p)) for c, p in zip(sel["case"], sel["pool"], strict=True)},
        key=lambda cp: (schema.case_rank(cp[0]), cp[1]),
    )
    columns = {cp: f"{cp[0]} · {fmt_pool(cp[1])}" for cp in cells}
    rows = []
    keys = ["_pair", "candidate", "baseline", "host", "interpreter"]
    for (_, cand, base, host, interp), grp in sel.groupby(keys, sort=True):
        row = {"Comparison": comparison(cand, base), "Host": host, "Python": interp}
        by_cell = {(r.case, int(r.pool)): r for r in grp.itertuples(index=False)}
        for cp, col in columns.items():
            r = by_cell.get(cp)
            row[col] = "–" if r is None else cell(r)
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["right"] = list(columns.values())
    # Six or more cells of ~25 characters: let them wrap rather than scroll sideways.
    out.attrs["wrap"] = ["Comparison", *columns.values()]
    return out


def headline_grid(data: store.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
    """Compact results: one row per comparison x host x interpreter, pools side by side.

    Parameters
    ----------
    data
        Processed tables (main phase of the headline runs).
    cases
        Cases shown (default: the headline cases).

    Returns
    -------
    pandas.DataFrame
        Comparison, Host, Python, then one column per case and pool (``alloc1 · 2,048``)
        holding ``reduction [CI] verdict`` (``–`` where the run has no such cell).
    """
    return _grid(
        data,
        cases,
        lambda r: f"{fmt_estimate(r.reduction, r.ci_low, r.ci_high, too_few=_few(r))} {r.verdict}",
    )


def ns_grid(data: store.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
    """Times behind :func:`headline_grid`, in its layout.

    Parameters
    ----------
    data
        Processed tables (main phase of the headline runs).
    cases
        Cases shown (default: the headline cases).

    Returns
    -------
    pandas.DataFrame
        Comparison, Host, Python, then one column per case and pool holding
        ``baseline ns → candidate ns · processes faster/processes``.
    """

    def cell(r: Any) -> str:
        faster = f"{round(r.share_faster * r.n_processes)}/{r.n_processes}"
        return f"{fmt_ns(r.baseline_ns)} → {fmt_ns(r.candidate_ns)} · {faster}"

    return _grid(data, cases, cell)


def floor_gap_table(data: store.Processed, *, phase: str = "main") -> pd.DataFrame:
    """Share of the gap between a baseline and the lower bound that a candidate closes.

    Parameters
    ----------
    data
        Processed tables.
    phase
        ``"main"`` or ``"confirm"``.

    Returns
    -------
    pandas.DataFrame
        Case, Host, Python, Pool, then one ``Gap closed: <candidate> vs <baseline>``
        column per comparison (configured order) holding ``"50% [49, 51]"``, or ``n/a``
        when the bound is not clearly faster than that baseline, each followed (once per
        baseline) by ``Bound saves vs <baseline>``: the bound's own reduction, i.e. the
        size of the gap. The bound is named in the columns when a run has several.
    """
    g = data.floor_gap
    g = g[(g["phase"] == phase) & g["headline"].fillna(False)]
    if g.empty:
        return pd.DataFrame()
    g = g.assign(_pair=pair_ranks(g, data.settings.pairs), _case=case_ranks(g["case"]))
    comps = (
        g[["_pair", "candidate", "baseline", "bound"]]
        .drop_duplicates()
        .sort_values(["_pair", "candidate", "baseline", "bound"])
    )
    several_bounds = comps["bound"].nunique() > 1

    def label(c: str, b: str, f: str) -> str:
        return f"Gap closed: {comparison(c, b)}" + (f" → {f}" if several_bounds else "")

    def bound_label(b: str, f: str) -> str:
        return f"Bound saves vs {b}" + (f" ({f})" if several_bounds else "")

    rows = []
    for key, grp in g.sort_values(["_case", "host", "interpreter", "pool"]).groupby(
        ["_case", "case", "host", "interpreter", "pool"], sort=False
    ):
        row = {"Case": key[1], "Host": key[2], "Python": key[3], "Pool": fmt_pool(key[4])}
        for c in comps.itertuples(index=False):
            hit = grp[
                (grp["candidate"] == c.candidate)
                & (grp["baseline"] == c.baseline)
                & (grp["bound"] == c.bound)
            ]
            if hit.empty:
                text = "–"
            else:
                r = hit.iloc[0]
                if np.isfinite(r["gap_closed"]):
                    text = f"{fmt_pct(r['gap_closed'], 0)} {fmt_ci(r['ci_low'], r['ci_high'], 0)}"
                elif not np.isfinite(r["bound_ci_low"]):
                    text = "n/a (too few processes)"
                else:
                    text = "n/a (bound not clearly faster)"
            row[label(c.candidate, c.baseline, c.bound)] = text
            # The size of the gap itself: a share of a small gap is an imprecise number.
            key = bound_label(c.baseline, c.bound)
            if key not in row:
                row[key] = "–" if hit.empty else fmt_pct(hit.iloc[0]["bound_reduction"])
        rows.append(row)
    return pd.DataFrame(rows)


def ns_table(data: store.Processed, *, phase: str = "main") -> pd.DataFrame:
    """Median ns/cycle per variant (median over processes of per-process medians).

    Parameters
    ----------
    data
        Processed tables.
    phase
        ``"main"`` or ``"confirm"``.

    Returns
    -------
    pandas.DataFrame
        Host, Python, Case, Pool, Variant, Processes, Median ns and the range of the
        per-process medians, headline runs only.
    """
    m = data.in_headline_runs(data.process_medians, phase)
    order = _variant_order(data)
    agg = (
        m.groupby(["host", "interpreter", "case", "pool", "variant"], sort=True)["median_ns"]
        .agg(["count", "median", "min", "max"])
        .reset_index()
    )
    agg = agg.assign(
        _case=case_ranks(agg["case"]), _var=agg["variant"].map(lambda v: order.get(v, 99))
    ).sort_values(["host", "interpreter", "_case", "pool", "_var", "variant"])
    return pd.DataFrame(
        [
            {
                "Host": r.host,
                "Python": r.interpreter,
                "Case": r.case,
                "Pool": fmt_pool(r.pool),
                "Variant": r.variant,
                "Processes": str(r.count),
                "Median ns": fmt_ns(r.median),
                "Process range ns": f"{fmt_ns(r.min)} – {fmt_ns(r.max)}",
            }
            for r in agg.itertuples(index=False)
        ]
    )


def _variant_order(data: store.Processed) -> dict[str, int]:
    order: dict[str, int] = {}
    for r in data.variants.sort_values(["position"], kind="stable").itertuples(index=False):
        order.setdefault(r.label, len(order))
    return order


def case_note(case: str, data: store.Processed) -> str:
    """What one cycle of a case is (printed under its heading)."""
    return case_cycle(case) + "."


def headline_note(data: store.Processed) -> str:
    """How to read the result tables (printed once, above them)."""
    delta = data.settings.delta
    ci = ci_header(data.settings.confidence)
    return (
        "Reduction = 1 − median over worker processes of the per-process time ratio "
        "candidate/baseline (positive: the candidate takes less time), with its "
        f"{ci} from a bootstrap over processes (n/a with fewer than "
        f"{paired_stats.MIN_PROCESSES} processes). Baseline/candidate ns: medians over "
        "processes of the per-process medians. Verdict from the CI alone: "
        f'"{paired_stats.no_change_label(delta)}" if the CI lies inside ±{delta * 100:g}%, '
        '"faster"/"slower" if it lies above/below 0, otherwise "inconclusive". '
        "Faster in: processes where the candidate was faster. CV % (b/c): median sample "
        "coefficient of variation within a process, baseline/candidate. A/A ±: CI "
        "half-width of an A/A pair in the same run (the noise floor), when measured."
    )


def present_cases(data: store.Processed, phase: str) -> list[str]:
    """Cases with comparison rows in the headline runs for ``phase``, in schema order."""
    s = data.summary
    s = s[(s["phase"] == phase) & s["headline"].fillna(False)]
    return sorted(s["case"].unique(), key=schema.case_key)
