"""The report's validation tables: the A/A noise floor, the precision target and the
order effect of the headline runs, each a display table and a sentence.

Display-ready DataFrames of formatted strings from the processed tables (rendered by
:mod:`kvqueue.report.frames`), as :mod:`kvqueue.ab.ab_tables` does for the results.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvqueue.ab import ab_analysis
from kvqueue.ab.ab_tables import HEADLINE_CASES, case_ranks
from kvqueue.formatting import ci_header, comparison, fmt_ci, fmt_pct, fmt_pool, is_na
from kvqueue.processed import store


def aa_table(data: store.Processed, *, headline_only: bool = True) -> pd.DataFrame:
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
    s = data.summary[data.summary["kind"] == ab_analysis.AA]
    if headline_only:
        s = s[s["headline"].fillna(False)]
    s = s.assign(_case=case_ranks(s["case"])).sort_values(
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
                if is_na(r.ci_low) or is_na(r.ci_high)
                else ("yes" if r.ci_low <= 0 <= r.ci_high else "NO")
            ),
        }
        for r in s.itertuples(index=False)
    ]
    return pd.DataFrame(rows)


def precision_table(data: store.Processed) -> pd.DataFrame:
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
    s = s.assign(_case=case_ranks(s["case"])).sort_values(
        ["host", "interpreter", "_case", "pool", "kind", "candidate"]
    )
    rows = []
    for r in s.itertuples(index=False):
        target = targets.get((r.host, r.run_id))
        half = (r.ci_high - r.ci_low) / 2 * 100 if not is_na(r.ci_low) else np.nan
        if is_na(target) or not target:
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
                "Target": "—" if is_na(target) or not target else f"±{float(target):g} pp",
                "Met": met,
            }
        )
    return pd.DataFrame(rows)


def precision_note(data: store.Processed) -> str:
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


def aa_summary(data: store.Processed) -> str:
    """One sentence: how many A/A CIs exclude 0, against the number expected by chance."""
    s = data.summary
    s = s[(s["kind"] == ab_analysis.AA) & s["headline"].fillna(False)]
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


def order_table(data: store.Processed, *, headline_only: bool = True) -> pd.DataFrame:
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
    o = o.assign(_case=case_ranks(o["case"])).sort_values(
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


def order_summary(data: store.Processed) -> str:
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
