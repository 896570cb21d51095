"""Summary tables for the report: display-ready DataFrames, rendered as HTML or Markdown.

Every function takes processed tables (:mod:`kvqueue.report.processed`) and returns a
DataFrame of formatted strings (one column per displayed column), so the HTML report
and the Markdown writeup show exactly the same cells. ``to_html``/``to_markdown``
render them; numeric columns are right-aligned in both.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.analysis import ab, stats
from kvqueue.report import processed
from kvqueue.subject import cases

#: The cases of the three headline tables.
HEADLINE_CASES = ("alloc1", "alloc2", "mix")
CASE_TITLES = {
    "alloc1": "Singleton allocation/free (alloc1)",
    "alloc2": "Two-block allocation/free (alloc2)",
    "mix": "Mixed workload (mix)",
    "alloc8": "8-block allocation/free (alloc8)",
    "alloc32": "32-block allocation/free (alloc32)",
    "popappend": "popleft/append (popappend)",
    "remove": "Remove/append of cached blocks (remove)",
}
CASE_CYCLES = {
    "alloc1": "one cycle = `blocks = q.popleft_n(1); q.append_n(blocks)`",
    "alloc2": "one cycle = `blocks = q.popleft_n(2); q.append_n(blocks)`",
    "alloc8": "one cycle = `blocks = q.popleft_n(8); q.append_n(blocks)`",
    "alloc32": "one cycle = `blocks = q.popleft_n(32); q.append_n(blocks)`",
    "mix": (
        f"a fixed shuffled sequence of {len(cases.MIX_SIZES)} allocations "
        f"({cases.mix_composition()}), each freed again; times are ns per allocation/free"
    ),
    "popappend": "one cycle = `q.append(q.popleft())`",
    "remove": "one cycle = `q.remove(b); q.append(b)` for a cached block from the interior",
}
# Columns whose cells are numbers (right-aligned).
_NUMERIC = {
    "Pool",
    "Baseline ns",
    "Candidate ns",
    "Reduction",
    "CI",
    "Faster in",
    "CV % (b/c)",
    "A/A ±",
    "Difference",
    "Half-width",
    "Last vs first",
    "Headline CI ±",
    "Candidate reduction",
    "Bound reduction",
    "Gap closed",
    "Processes",
    "Samples",
    "Median ns",
    "Process range ns",
    "Positions",
    "Gates passed",
}


#: Columns that may wrap (long free text); every other cell stays on one line.
_WRAP = {"Use", "CPU", "Build", "Load avg (start → end)"}


# ---------------------------------------------------------------------------------------
# formatting


def _num(x: float, digits: int) -> str:
    # round first so that -0.04 shows as "0.0", not "-0.0"
    value = round(x, digits) + 0.0
    return f"{value:.{digits}f}"


def _finite(x: object) -> bool:
    return not _na(x) and bool(np.isfinite(float(x)))  # type: ignore[arg-type]


def fmt_pct(x: float, digits: int = 1) -> str:
    """Format a fraction as a percentage (``0.201`` -> ``20.1%``); NaN -> ``n/a``."""
    return f"{_num(x * 100, digits)}%" if _finite(x) else "n/a"


def fmt_ci(low: float, high: float, digits: int = 1) -> str:
    """Format a CI of fractions as percentages: ``[18.9, 21.0]``; NaN -> ``n/a``.

    The one formatter of intervals: every table, summary and sentence goes through it
    (directly or through :func:`fmt_estimate`), so a missing interval reads ``n/a``
    everywhere.
    """
    if not (_finite(low) and _finite(high)):
        return "n/a"
    return f"[{_num(low * 100, digits)}, {_num(high * 100, digits)}]"


def fmt_estimate(x: float, low: float, high: float, digits: int = 1) -> str:
    """An estimate with its CI: ``20.3% [19.5, 21.3]``, ``20.3% (CI n/a)`` or ``n/a``."""
    if not _finite(x):
        return "n/a"
    ci = fmt_ci(low, high, digits)
    return f"{fmt_pct(x, digits)} {ci}" if ci != "n/a" else f"{fmt_pct(x, digits)} (CI n/a)"


def fmt_ns(x: float) -> str:
    """Format nanoseconds with one decimal and thousands separators."""
    return f"{x:,.1f}" if _finite(x) else "n/a"


def fmt_pool(pool: int) -> str:
    """Format a pool size (``100000`` -> ``100,000``)."""
    return f"{int(pool):,}"


def comparison(candidate: str, baseline: str) -> str:
    """Label of a comparison: ``candidate vs baseline``."""
    return f"{candidate} vs {baseline}"


def ci_header(confidence: float) -> str:
    """Header of a CI column, e.g. ``95% CI``."""
    return f"{confidence * 100:g}% CI"


def _pair_rank(df: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> pd.Series:
    order = {p: i for i, p in enumerate(pairs)}
    keys = zip(df["candidate"], df["baseline"], strict=True)
    return pd.Series([order.get(k, len(order)) for k in keys], index=df.index)


def _case_rank(cases: pd.Series) -> pd.Series:
    return cases.map(schema.case_rank)


def _na(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


# ---------------------------------------------------------------------------------------
# result tables


def results_table(
    data: processed.Processed,
    cases: Sequence[str],
    *,
    phase: str = "main",
    headline_only: bool = True,
    kind: str = ab.PAIR,
    pair: tuple[str, str] | None = None,
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
    kind
        ``"pair"`` (real comparisons) or ``"aa"`` (A/A noise floor).
    pair
        Only this ``(candidate, baseline)`` comparison (the Comparison column is left
        out then).

    Returns
    -------
    pandas.DataFrame
        Formatted columns: Host, Python, Pool, Comparison, Baseline ns, Candidate ns,
        Reduction, 95% CI, Verdict, Faster in, sample CV, and ``A/A ±`` when an A/A pair
        was measured in any shown run.
    """
    sel = comparison_rows(data, cases, phase=phase, headline_only=headline_only, kind=kind)
    if pair is not None:
        sel = sel[(sel["candidate"] == pair[0]) & (sel["baseline"] == pair[1])]
    ci = ci_header(data.settings.confidence)
    show_aa = kind == ab.PAIR and sel["aa_half_width"].notna().any()
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
                ci: fmt_ci(r.ci_low, r.ci_high),
                "Verdict": r.verdict,
                "Faster in": f"{round(r.share_faster * r.n_processes)}/{r.n_processes}",
                "CV % (b/c)": (f"{r.cv_baseline * 100:.1f} / {r.cv_candidate * 100:.1f}"),
            }
        )
        if show_aa:
            row["A/A ±"] = "–" if _na(r.aa_half_width) else fmt_pct(r.aa_half_width, 2)
        if pair is not None:
            del row["Comparison"]
        rows.append(row)
    return pd.DataFrame(rows)


def comparisons(
    data: processed.Processed, cases: Sequence[str], *, phase: str = "main"
) -> list[tuple[str, str]]:
    """The ``(candidate, baseline)`` comparisons of ``cases`` in the headline runs, in
    report order (configured pairs first)."""
    sel = comparison_rows(data, cases, phase=phase)
    return list(dict.fromkeys(zip(sel["candidate"], sel["baseline"], strict=True)))


def comparison_rows(
    data: processed.Processed,
    cases: Sequence[str],
    *,
    phase: str = "main",
    headline_only: bool = True,
    kind: str = ab.PAIR,
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
        _pair=_pair_rank(sel, data.settings.pairs), _case=_case_rank(sel["case"])
    ).sort_values(["_pair", "candidate", "baseline", "_case", "host", "interpreter", "pool"])


def verdict_counts(verdicts: pd.Series) -> str:
    """``faster 8/8``, or ``faster 6/8, inconclusive 2/8`` (most frequent first)."""
    counts = verdicts.fillna("n/a").astype(str).value_counts()
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{v} {n}/{len(verdicts)}" for v, n in ordered)


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
        text = fmt_estimate(lo["reduction"], lo["ci_low"], lo["ci_high"])
        if len(valid) > 1:
            text += " to " + fmt_estimate(hi["reduction"], hi["ci_low"], hi["ci_high"])
    return f"{text}; {verdict_counts(cells['verdict'])}"


def summary_table(data: processed.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
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


def _grid(
    data: processed.Processed, cases: Sequence[str], cell: Callable[[Any], str]
) -> pd.DataFrame:
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


def headline_grid(data: processed.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
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
        data, cases, lambda r: f"{fmt_estimate(r.reduction, r.ci_low, r.ci_high)} {r.verdict}"
    )


def ns_grid(data: processed.Processed, cases: Sequence[str] = HEADLINE_CASES) -> pd.DataFrame:
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


def aa_table(data: processed.Processed, *, headline_only: bool = True) -> pd.DataFrame:
    """A/A comparisons (the noise floor): their CI must contain 0.

    Parameters
    ----------
    data
        Processed tables.
    headline_only
        Only headline runs.

    Returns
    -------
    pandas.DataFrame
        Host, Python, Phase, Case, Pool, A/A pair, Difference, CI, Half-width,
        CI contains 0.
    """
    s = data.summary[data.summary["kind"] == ab.AA]
    if headline_only:
        s = s[s["headline"].fillna(False)]
    s = s.assign(_case=_case_rank(s["case"])).sort_values(
        ["host", "interpreter", "phase", "_case", "pool", "candidate"], ascending=[1, 1, 0, 1, 1, 1]
    )
    ci = ci_header(data.settings.confidence)
    rows = [
        {
            "Host": r.host,
            "Python": r.interpreter,
            "Phase": r.phase,
            "Case": r.case,
            "Pool": fmt_pool(r.pool),
            "A/A pair": comparison(r.candidate, r.baseline),
            "Difference": fmt_pct(r.reduction, 2),
            ci: fmt_ci(r.ci_low, r.ci_high, 2),
            "Half-width": fmt_pct((r.ci_high - r.ci_low) / 2, 2),
            "CI contains 0": (
                "n/a"
                if _na(r.ci_low) or _na(r.ci_high)
                else ("yes" if r.ci_low <= 0 <= r.ci_high else "NO")
            ),
        }
        for r in s.itertuples(index=False)
    ]
    return pd.DataFrame(rows)


def precision_table(data: processed.Processed) -> pd.DataFrame:
    """Headline cells (main phase, alloc1/alloc2/mix) against their run's precision target.

    Returns
    -------
    pandas.DataFrame
        Host, Python, Case, Pool, Comparison, n, Half-width, Target, Met: whether the
        95 % half-width is within the run's ``PRECISION`` ("no target" for runs made
        before the target existed).
    """
    s = data.summary
    s = s[s["headline"].fillna(False) & (s["phase"] == "main")]
    s = s[s["case"].isin(HEADLINE_CASES)]
    targets = data.runs.set_index(["host", "run_id"])["precision_target"]
    s = s.assign(_case=_case_rank(s["case"])).sort_values(
        ["host", "interpreter", "_case", "pool", "kind", "candidate"]
    )
    rows = []
    for r in s.itertuples(index=False):
        target = targets.get((r.host, r.run_id))
        half = (r.ci_high - r.ci_low) / 2 * 100 if not _na(r.ci_low) else np.nan
        if _na(target) or not target:
            met = "no target"
        elif np.isnan(half):
            met = "n/a"
        else:
            met = "yes" if half <= float(target) else "NO"
        rows.append(
            {
                "Host": r.host,
                "Python": r.interpreter,
                "Case": r.case,
                "Pool": fmt_pool(r.pool),
                "Comparison": comparison(r.candidate, r.baseline),
                "n": int(r.n_processes),
                "Half-width": "n/a" if np.isnan(half) else f"±{half:.2f} pp",
                "Target": "—" if _na(target) or not target else f"±{float(target):g} pp",
                "Met": met,
            }
        )
    return pd.DataFrame(rows)


def precision_note(data: processed.Processed) -> str:
    """One sentence: how many headline cells met their run's precision target."""
    t = precision_table(data)
    if t.empty:
        return "No headline cells."
    judged = t[t["Met"].isin(["yes", "NO"])]
    if judged.empty:
        return (
            "The headline runs were made before the precision target existed "
            "(`PRECISION`, a two-stage design that sizes the main phase from a pilot): "
            "their half-widths are shown without one."
        )
    met = int((judged["Met"] == "yes").sum())
    return (
        f"{met} of {len(judged)} headline cells reach their run's precision target "
        "(`PRECISION`, in percentage points: a pilot of `PROCESSES` main processes "
        "estimates the spread, then the run sizes itself, within `MAX_PROCESSES` and "
        "`MAX_MINUTES`; `run.json` records the decision)."
    )


def aa_summary(data: processed.Processed) -> str:
    """One sentence: how many A/A CIs exclude 0, against the number expected by chance."""
    s = data.summary
    s = s[(s["kind"] == ab.AA) & s["headline"].fillna(False)]
    s = s[s["ci_low"].notna() & s["ci_high"].notna()]
    if s.empty:
        return ""
    out = int(((s["ci_low"] > 0) | (s["ci_high"] < 0)).sum())
    conf = data.settings.confidence
    return (
        f"{out} of {len(s)} A/A intervals exclude 0; at {conf * 100:g}% confidence about "
        f"{len(s) * (1 - conf):.1f} would by chance alone. A real difference between two "
        "copies of the same code would show up as many more, or as a consistent sign."
    )


def order_table(data: processed.Processed, *, headline_only: bool = True) -> pd.DataFrame:
    """Order-effect check per cell.

    Parameters
    ----------
    data
        Processed tables.
    headline_only
        Only headline runs.

    Returns
    -------
    pandas.DataFrame
        Host, Python, Phase, Case, Pool, Positions, Last vs first (time change of the
        last position in a round relative to the first), CI, Headline CI ± (the
        tightest comparison CI half-width of the cell) and a warning flag.
    """
    o = data.order_effects
    if headline_only:
        o = o[o["headline"].fillna(False)]
    o = o.assign(_case=_case_rank(o["case"])).sort_values(
        ["host", "interpreter", "phase", "_case", "pool"], ascending=[1, 1, 0, 1, 1]
    )
    ci = ci_header(data.settings.confidence)
    rows = [
        {
            "Host": r.host,
            "Python": r.interpreter,
            "Phase": r.phase,
            "Case": r.case,
            "Pool": fmt_pool(r.pool),
            "Positions": str(r.positions),
            "Last vs first": fmt_pct(r.effect, 2),
            ci: fmt_ci(r.ci_low, r.ci_high, 2),
            "Headline CI ±": fmt_pct(r.headline_half_width, 2),
            "Order effect > CI ±": "WARNING" if r.warn else "no",
        }
        for r in o.itertuples(index=False)
    ]
    return pd.DataFrame(rows)


def order_summary(data: processed.Processed) -> str:
    """One or two sentences (plain text) on the order-effect check of the headline runs."""
    o = data.order_effects[data.order_effects["headline"].fillna(False)]
    if o.empty:
        return "No order-effect check: no headline run."
    warn = o[o["warn"].fillna(False)]
    worst = o.loc[o["effect"].abs().idxmax()]
    text = (
        f"Across {len(o)} host × phase × case × pool cells of the headline runs, the median "
        f"per-process change in time from the first to the last position of a round is "
        f"at most {fmt_pct(abs(worst['effect']), 2)} in magnitude "
        f"({worst['host']}, {worst['phase']}, {worst['case']}, pool {fmt_pool(worst['pool'])}). "
    )
    if warn.empty:
        return text + (
            "No cell shows an order effect that is both distinguishable from 0 and larger "
            "than the half-width of its comparison CIs."
        )
    cells = ", ".join(
        f"{r.host} {r.phase} {r.case}/{fmt_pool(r.pool)}" for r in warn.itertuples(index=False)
    )
    return (
        text + f"WARNING: in {len(warn)} cell(s) the order effect is distinguishable from 0 "
        f"and exceeds the tightest comparison CI half-width ({cells}). The shuffled order "
        "keeps the ratios unbiased, but the position adds noise of that size."
    )


def floor_gap_table(data: processed.Processed, *, phase: str = "main") -> pd.DataFrame:
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
    g = g.assign(_pair=_pair_rank(g, data.settings.pairs), _case=_case_rank(g["case"]))
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


def ns_table(data: processed.Processed, *, phase: str = "main") -> pd.DataFrame:
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
        _case=_case_rank(agg["case"]), _var=agg["variant"].map(lambda v: order.get(v, 99))
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


def _variant_order(data: processed.Processed) -> dict[str, int]:
    order: dict[str, int] = {}
    for r in data.variants.sort_values(["position"], kind="stable").itertuples(index=False):
        order.setdefault(r.label, len(order))
    return order


# ---------------------------------------------------------------------------------------
# runs and provenance


#: Columns of ``runs`` shown by :func:`runs_table` under their own header.
_RUNS_HEADERS = {
    "host": "Host",
    "interpreter": "Python",
    "run_id": "Run",
    "status": "Status",
    "started_at": "Started",
}
#: Columns of ``runs`` that :func:`runs_table` folds into one of its columns
#: (processes, samples, commit, use) or that other tables show (the environment
#: table, the methods paragraph, the reproduce commands).
_RUNS_SHOWN_ELSEWHERE = {
    "make_args",  # the reproduce commands
    "included",
    "headline",
    "note",
    "ended_at",
    "python_implementation",
    "python_version",
    "python_tag",
    "python_build",
    "python_compiler",
    "python_executable",
    "hostname",
    "cpu_model",
    "cpu_count",
    "kernel",
    "platform",
    "governor",
    "load_avg_start",
    "load_avg_end",
    "baseline",
    "block_source",
    "processes",
    "confirm_processes",
    "samples",
    "sample_ms",
    "warmup_ms",
    "pools",
    "cases",
    "confirm_cases",
    "cpu",
    "gc",
    "run_seed",
    "quick",
    "aa",
    "processes_planned_main",
    "processes_planned_confirm",
    "processes_completed_main",
    "processes_completed_confirm",
    "pinned_processes",
    "gates_passed",
    "commit",
    "dirty",
    "n_samples",
}


#: Columns of ``variants`` that :func:`variants_table` shows or folds into a column.
_VARIANTS_KNOWN = {
    "host",
    "run_id",
    "position",
    "label",
    "source",
    "class_name",
    "vllm_version",
    "class_sha256",
    "file_sha256",
    "block_source",
    "block_class_sha256",
    "is_bound",
    "gate_ok",
    "gate_ops_checked",
    "gate_invalid_compared",
}


def _header(column: str) -> str:
    """Display header of a processed-table column: ``git_state`` -> ``Git state``."""
    return column.replace("_", " ").capitalize()


def _cell_text(value: object) -> str:
    """A value of a processed table as display text (bools as yes/no, missing as –)."""
    if _na(value):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def runs_table(data: processed.Processed) -> pd.DataFrame:
    """Every run found: which one each headline table uses, which were left out and why.

    Generic over the columns of ``runs``: a column that no other table shows (a note
    added to the processed table later, say) is listed here with a header made from
    its name, unless it is empty in every run.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    pandas.DataFrame
        Host, Python, Run, Status, Started, Processes (main + confirm), Samples, Commit,
        any further column of ``runs``, then Use.
    """
    runs = data.runs
    extra = [
        c
        for c in runs.columns
        if c not in _RUNS_HEADERS and c not in _RUNS_SHOWN_ELSEWHERE and not runs[c].map(_na).all()
    ]
    rows = []
    for r in runs.to_dict("records"):
        done = (
            f"{_int(r['processes_completed_main'])}/{_int(r['processes_planned_main'])} + "
            f"{_int(r['processes_completed_confirm'])}/{_int(r['processes_planned_confirm'])}"
        )
        commit = _str(r["commit"])[:12]
        if not _na(r["dirty"]) and bool(r["dirty"]):
            commit += " (dirty)"
        row = {header: _cell_text(r[col]) for col, header in _RUNS_HEADERS.items()}
        row |= {
            "Processes (main + confirm)": done,
            "Samples": _int(r["n_samples"]),
            "Commit": commit,
        }
        row |= {_header(c): _cell_text(r[c]) for c in extra}
        row["Use"] = _cell_text(r["note"])
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["wrap"] = [_header(c) for c in extra]
    return out


def environment_table(data: processed.Processed) -> pd.DataFrame:
    """Machine and interpreter of each headline run, one column per run.

    Transposed (fields as rows) so that several hosts with long CPU names still fit.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    pandas.DataFrame
        A ``Field`` column, then one column per headline run (``host · interpreter``).
    """
    runs = data.headline_runs()
    if runs.empty:
        return pd.DataFrame()
    columns: dict[str, list[str]] = {}
    fields: list[str] = []
    for r in runs.itertuples(index=False):
        commit = _str(r.commit)
        if not _na(r.dirty) and bool(r.dirty):
            commit += " (dirty)"
        planned = sum(
            0 if _na(x) else int(x) for x in (r.processes_planned_main, r.processes_planned_confirm)
        )
        values = {
            "Run": r.run_id,
            "Started": _str(r.started_at),
            "Ended": _str(r.ended_at),
            "Hostname": _str(r.hostname),
            "CPU": _str(r.cpu_model),
            "CPUs": _int(r.cpu_count),
            "Kernel": _str(r.kernel),
            "Platform": _str(r.platform),
            "Governor": _str(r.governor),
            "Load avg (start → end)": f"{_str(r.load_avg_start)} → {_str(r.load_avg_end)}",
            "Python": f"{r.interpreter} ({_str(r.python_tag)})",
            "Build": _str(r.python_build),
            "Compiler": _str(r.python_compiler),
            "Executable": _str(r.python_executable),
            "Pinned processes": f"{_int(r.pinned_processes)}/{planned}",
            "CPU choice": _str(r.cpu),
            "GC while timing": _str(r.gc),
            "Project commit": commit,
        }
        fields = list(values)
        columns[f"{r.host} · {r.interpreter}"] = list(values.values())
    out = pd.DataFrame({"Field": fields, **columns})
    out.attrs["wrap"] = list(columns)
    return out


def variants_table(data: processed.Processed, *, sha_chars: int = 12) -> pd.DataFrame:
    """Provenance of the variants of the headline runs, one row per distinct variant.

    A variant measured identically (same source, digests, block class and gate result)
    in several runs is one row; ``Runs`` names the runs (``all N`` when it is in every
    headline run). The per-run rows are in ``data/processed/variants.csv``.

    Parameters
    ----------
    data
        Processed tables.
    sha_chars
        Shown prefix of the sha256 digests (the full ones are in ``variants.csv``).

    Returns
    -------
    pandas.DataFrame
        Variant, Role (an A/A copy names its source), vLLM, Class sha256, File sha256,
        Block class from, Gate, any further column of ``variants`` (a release check,
        say), Runs.
    """
    heads = data.headline_runs()[["host", "run_id", "interpreter", "baseline"]]
    v = data.variants.merge(heads, on=["host", "run_id"]).sort_values(
        ["host", "interpreter", "run_id", "position"]
    )
    # Columns this table does not know (a check added to variants.csv later) are shown
    # as they are, unless empty in every row.
    extra = [c for c in data.variants.columns if c not in _VARIANTS_KNOWN]
    extra = [c for c in extra if not v[c].map(_na).all()]
    grouped: dict[tuple[str, ...], list[str]] = {}
    for r in v.itertuples(index=False):
        if r.label == r.baseline:
            role = "baseline"
        elif not _na(r.is_bound) and bool(r.is_bound):
            role = "bound (not a candidate)"
        elif ab.aa_original(r.label) is not None:
            role = f"A/A copy of {r.source}"
        else:
            role = "candidate"
        gate = "passed" if (not _na(r.gate_ok) and bool(r.gate_ok)) else "not recorded"
        if not _na(r.gate_ok) and not bool(r.gate_ok):
            gate = "FAILED"
        if gate == "passed" and not _na(r.gate_ops_checked):
            gate += f" ({int(r.gate_ops_checked):,} ops)"
        key = (
            r.label,
            role,
            _str(r.vllm_version),
            _str(r.class_sha256)[:sha_chars],
            _str(r.file_sha256)[:sha_chars],
            _str(r.block_source),
            gate,
            *(_cell_text(getattr(r, c)) for c in extra),
        )
        grouped.setdefault(key, []).append(f"{r.host} · {r.interpreter}")
    n_runs = len(heads)
    header = ["Variant", "Role", "vLLM", "Class sha256", "File sha256", "Block class from"]
    header += ["Gate", *(_header(c) for c in extra)]
    rows = []
    for key, where in grouped.items():
        row = dict(zip(header, key, strict=True))
        row["Runs"] = f"all {n_runs}" if len(where) == n_runs else ", ".join(where)
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["wrap"] = ["Runs", *(_header(c) for c in extra)]
    return out


def _str(value: object) -> str:
    return "–" if _na(value) else str(value)


def _int(value: object) -> str:
    return "–" if _na(value) else str(int(value))  # type: ignore[call-overload]


# ---------------------------------------------------------------------------------------
# rendering


def _wraps(df: pd.DataFrame, col: str) -> bool:
    # Free-text columns, and the columns a table marks in ``attrs["wrap"]``.
    return col in _WRAP or col in df.attrs.get("wrap", ())


def _is_numeric(df: pd.DataFrame, col: str) -> bool:
    return (
        col in _NUMERIC
        or col in df.attrs.get("right", ())
        or col.endswith(" CI")
        or "CI" in col.split()
        or col.startswith("Gap closed")
        or col.startswith("Bound saves")
    )


def to_html(df: pd.DataFrame, *, empty: str = "No data.") -> str:
    """Render a display table as an HTML ``<table>`` (numbers right-aligned).

    Parameters
    ----------
    df
        A table from this module (``df.attrs`` may name extra ``right``-aligned and
        ``wrap``-ping columns).
    empty
        Text shown instead of an empty table.

    Returns
    -------
    str
    """
    if df.empty:
        return f'<p class="kvq-empty"><em>{html.escape(empty)}</em></p>'

    def cell(tag: str, col: str, text: str) -> str:
        align = "right" if _is_numeric(df, col) else "left"
        cls = ' class="kvq-wrap"' if _wraps(df, col) and tag == "td" else ""
        return f'<{tag}{cls} style="text-align:{align}">{html.escape(text)}</{tag}>'

    head = "".join(cell("th", c, c) for c in df.columns)
    body = "\n".join(
        "<tr>"
        + "".join(cell("td", c, str(v)) for c, v in zip(df.columns, row, strict=True))
        + "</tr>"
        for row in df.itertuples(index=False)
    )
    return (
        '<table class="kvq-table">\n'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    )


def _md_cell(value: object) -> str:
    # "|" would end a cell in GFM; a line break would end the row.
    return " ".join(str(value).split()).replace("|", "\\|")


def to_markdown(df: pd.DataFrame, *, empty: str = "No data.") -> str:
    """Render a display table as a GitHub-flavoured Markdown pipe table.

    Cells are not padded to a common width (GitHub aligns the rendered table; padding
    would double the size of a long table); numbers are right-aligned.

    Parameters
    ----------
    df
        A table from this module.
    empty
        Text used instead of an empty table.

    Returns
    -------
    str
    """
    if df.empty:
        return f"_{empty}_"
    align = ["---:" if _is_numeric(df, c) else ":---" for c in df.columns]
    lines = [
        "| " + " | ".join(_md_cell(c) for c in df.columns) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += [
        "| " + " | ".join(_md_cell(v) for v in row) + " |" for row in df.itertuples(index=False)
    ]
    return "\n".join(lines)


def case_note(case: str, data: processed.Processed) -> str:
    """What one cycle of a case is (printed under its heading)."""
    return CASE_CYCLES.get(case, case) + "."


def headline_note(data: processed.Processed) -> str:
    """How to read the result tables (printed once, above them)."""
    delta = data.settings.delta
    ci = ci_header(data.settings.confidence)
    return (
        "Reduction = 1 − median over worker processes of the per-process time ratio "
        "candidate/baseline (positive: the candidate takes less time), with its "
        f"{ci} from a bootstrap over processes (n/a with fewer than "
        f"{stats.MIN_PROCESSES} processes). Baseline/candidate ns: medians over "
        "processes of the per-process medians. Verdict from the CI alone: "
        f'"{stats.no_change_label(delta)}" if the CI lies inside ±{delta * 100:g}%, '
        '"faster"/"slower" if it lies above/below 0, otherwise "inconclusive". '
        "Faster in: processes where the candidate was faster. CV % (b/c): median sample "
        "coefficient of variation within a process, baseline/candidate. A/A ±: CI "
        "half-width of an A/A pair in the same run (the noise floor), when measured."
    )


def present_cases(data: processed.Processed, phase: str) -> list[str]:
    """Cases with comparison rows in the headline runs for ``phase``, in schema order."""
    s = data.summary
    s = s[(s["phase"] == phase) & s["headline"].fillna(False)]
    return sorted(s["case"].unique(), key=schema.case_key)


def runs_note(data: processed.Processed) -> str:
    """Which runs the headline tables use, which are not headline runs and which were left
    out (each with its note: status, altered, quick, older)."""
    r = data.runs
    heads = r[r["headline"].fillna(False)]
    others = r[r["included"].fillna(False) & ~r["headline"].fillna(False)]
    left = r[~r["included"].fillna(False)]
    parts = [
        "The headline tables use the newest full-protocol run per host × interpreter: "
        + (", ".join(f"{x.host}/{x.run_id}" for x in heads.itertuples()) or "none")
        + "."
    ]
    if len(others):
        parts.append(
            "Other included runs (in data/processed, not in the headline tables): "
            + ", ".join(f"{x.host}/{x.run_id} ({x.note})" for x in others.itertuples())
            + "."
        )
    if len(left):
        parts.append(
            "Left out: "
            + ", ".join(
                f"{x.host}/{x.run_id} ({str(x.note).removeprefix('left out: ')})"
                for x in left.itertuples()
            )
            + "."
        )
    return " ".join(parts)
