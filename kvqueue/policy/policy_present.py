"""The report's allocation-policy section: the processed ``policy`` table -> display
table, paragraph and figure (docs/design.md §12).

Reads the table that :mod:`kvqueue.policy.policy_analysis` computes and shows its headline runs
of the steady-state protocol (the newest per host × interpreter × variant × regime): the
steady-state table (one row per policy: descriptors per READ against lru, with both
halves of the measurement and "not settled" when they disagree, p50/p90, the one-side
runs ratio as a secondary column, the net line), a paragraph generated from the numbers
and the age curve (each policy's descriptor ratio to lru against engine age). Runs of
the older protocol (warm-up in engine steps) are named in one line, never dropped
silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kvqueue import plotstyle, schema
from kvqueue.formatting import TOO_FEW, fmt_interval, fmt_number_estimate
from kvqueue.policy.policy_analysis import LRU, OLDER_PROTOCOL, STEADY, TABLE_COLUMNS, policy_order
from kvqueue.stats import paired_stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: The PR's cluster run: 23,252 descriptors per READ down to 8,926-10,222.
PR_REDUCTION = (2.3, 2.6)


#: Metrics that cannot be negative: a t interval of a mean near 0 is clipped at 0.
_NON_NEGATIVE = ("desc_per_read", "desc_p50", "desc_p90", "hit_share")


def _cell(row: pd.Series | None, digits: int) -> str:
    if row is None:
        return "n/a"
    bounds = (0.0, math.inf) if row["metric"] in _NON_NEGATIVE else None
    return fmt_number_estimate(
        row["estimate"],
        row["ci_low"],
        row["ci_high"],
        digits,
        bounds=bounds,
        too_few=_too_few(row),
    )


def _too_few(row: pd.Series) -> bool:
    """Whether the row's interval is missing because the run had too few processes (a
    t interval needs 2, the order-statistic interval of a median 6 at 95 %)."""
    least = paired_stats.MIN_PROCESSES if row["ci_method"] == paired_stats.ORDER_STATISTIC else 2
    return int(row["n_processes"]) < least


def _judgeable(grp: pd.DataFrame, name: str) -> bool:
    """Whether both halves of the measurement have a descriptor-ratio interval (with one
    process neither has, and "settled" cannot be decided)."""
    halves = [_get(grp, name, "desc_reduction", age) for age in _halves(grp)]
    return all(
        h is not None and math.isfinite(h["ci_low"]) and math.isfinite(h["ci_high"]) for h in halves
    )


def _headline(policy: pd.DataFrame) -> pd.DataFrame:
    if policy.empty:
        return pd.DataFrame(columns=list(TABLE_COLUMNS))
    df = policy[policy["headline"].fillna(False).astype(bool)]
    return df[df["protocol"] == schema.POLICY_PROTOCOL]


def older_runs(policy: pd.DataFrame) -> list[str]:
    """``host/run_id`` of every run of the older protocol in the table."""
    if policy.empty:
        return []
    old = policy[policy["protocol"] == OLDER_PROTOCOL]
    return sorted({f"{h}/{r}" for h, r in zip(old["host"], old["run_id"], strict=True)})


def _get(grp: pd.DataFrame, name: str, metric: str, age: str = STEADY) -> pd.Series | None:
    # numpy masks, not pandas ones: 364 calls of the pandas version were 1.2 s of the
    # policy writeup and as much of the report notebook's policy section.
    mask = (
        (grp["policy"].to_numpy() == name)
        & (grp["metric"].to_numpy() == metric)
        & (grp["age"].to_numpy() == age)
    )
    hit = np.flatnonzero(mask)
    return None if not len(hit) else grp.iloc[int(hit[0])]


def _halves(grp: pd.DataFrame) -> tuple[str, str]:
    """Labels of the two halves of the measurement (the last two age windows)."""
    curve = grp[grp["age"] != STEADY].drop_duplicates("age").sort_values("age_from")
    labels = list(curve["age"])
    return (labels[-2], labels[-1]) if len(labels) >= 2 else ("", "")


def _runs(df: pd.DataFrame) -> list[tuple[tuple[str, str, str, str], pd.DataFrame]]:
    keys = ["host", "interpreter", "variant", "regime"]
    return [(k, g) for k, g in df.groupby(keys, sort=True)]


def display_table(policy: pd.DataFrame) -> pd.DataFrame:
    """The steady-state table: rows host × interpreter × variant × regime × policy.

    Parameters
    ----------
    policy
        The processed ``policy`` table.

    Returns
    -------
    pandas.DataFrame
        One column per quantity, each "estimate [CI]" (empty without a steady-state run).
    """
    rows = []
    for (host, interp, variant, regime), grp in _runs(_headline(policy)):
        first, second = _halves(grp)
        for name in policy_order(grp["policy"]):
            steady = _get(grp, name, "desc_reduction")
            if _is_settled(grp, name) or name == LRU:
                headline = _cell(steady, 2)
            elif steady is not None and not _judgeable(grp, name):
                headline = _cell(steady, 2)  # "2.00 [n/a (too few processes)]": undecided
            else:
                headline = "not settled"
            rows.append(
                {
                    "host": host,
                    "interpreter": interp,
                    "variant": variant,
                    "regime": regime,
                    "policy": name,
                    "processes": int(grp[grp["policy"] == name]["n_processes"].iloc[0]),
                    # The window is a column, not part of a header: runs of other
                    # lengths in one table left every other run's cells NaN.
                    "steady state (turnovers)": (f"{first.split('–')[0]}–{second.split('–')[-1]}"),
                    "steady state: descriptors per READ ÷ (vs lru)": headline,
                    "÷ first half": _cell(_get(grp, name, "desc_reduction", first), 2),
                    "÷ second half": _cell(_get(grp, name, "desc_reduction", second), 2),
                    "descriptors per READ": _cell(_get(grp, name, "desc_per_read"), 1),
                    "p50": _cell(_get(grp, name, "desc_p50"), 1),
                    "p90": _cell(_get(grp, name, "desc_p90"), 1),
                    "one-side runs ÷ (secondary)": _cell(_get(grp, name, "runs_reduction"), 2),
                    "allocator ns added / request": (
                        "—" if name == LRU else _cell(_get(grp, name, "ns_added"), 0)
                    ),
                    "posting ns saved / request": (
                        "—" if name == LRU else _cell(_get(grp, name, "ns_saved"), 0)
                    ),
                    "net ns / request": "—" if name == LRU else _cell(_get(grp, name, "net_ns"), 0),
                    "break-even KV regions": (
                        "—" if name == LRU else _cell(_get(grp, name, "break_even_regions"), 1)
                    ),
                }
            )
    return pd.DataFrame(rows)


def note(policy: pd.DataFrame, confidence: float) -> str:
    """The section's text: the method (:func:`note_parts`), then one reading per
    headline steady-state run, then the older protocol's runs, as Markdown paragraphs."""
    method, readings, older = note_parts(policy, confidence)
    return "\n\n".join(p for p in (method, *readings, older) if p)


def note_parts(policy: pd.DataFrame, confidence: float) -> tuple[str, list[str], str]:
    """The section's text in parts: what was measured (Markdown paragraphs), a reading
    per headline steady-state run (a table and at most three sentences derived from it),
    and the line naming the runs of the older protocol ("" when none).

    Parameters
    ----------
    policy
        The processed ``policy`` table.
    confidence
        Confidence level of its intervals (the report's settings).

    Returns
    -------
    tuple
        (method, readings, older line).
    """
    df = _headline(policy)
    older = older_runs(policy)
    older_line = (
        f"Older protocol (warm-up and measurement in engine steps, one pool), not in the "
        f"steady-state table: {', '.join(older)}."
        if older
        else ""
    )
    if df.empty:
        text = (
            "No steady-state policy run found. `make policy HOST=<label> REGIME=chat` (or "
            "`agentic`, or `TRACE=file`) runs `lru` and the contiguous-run policy of vLLM "
            "PR #55841 at window factors 1, 2, 4, 8 and unbounded against engine age."
        )
        return text, [], older_line
    ci = f"{round(100 * confidence)}% CI"
    text = [
        "`lru` is `popleft_n` (vLLM's eviction order); `contig-wK` is the contiguous-run "
        "policy of vLLM PR #55841, written from its description: for an allocation of at "
        "least T blocks it searches the first K × n free blocks (`contig-inf`: all) for "
        "queue-adjacent runs of consecutive ids, longest first, never using blocks "
        "released by an unpin (the PR's last-resort rule). Both a prefill-side and a "
        "decode-side pool run the policy; vLLM's free path prepends a request's unhashed "
        "last block and appends the rest reversed (`free order append`: all appended); the "
        "prefill side releases a request after its READ by that free path, or by an unpin "
        "where the regime says `prefill release unpin`. "
        "*Engine age* is in pool turnovers (allocations totalling the pool size). A READ "
        "pairs a request's whole prefill block list on both sides; two neighbours merge "
        "into one descriptor only when both ends are adjacent in the same direction.",
        f"Intervals ({ci}) over processes (each its own request stream): Student t "
        "(ratios on the log scale); allocator time (added and net) is the median over "
        "processes with the order-statistic interval, robust to a descheduled process; "
        "p50/p90 are the per-process nearest-rank percentiles "
        "of descriptors per READ (the steady state's: the mean of its two halves'; their "
        "intervals clipped at 0). The "
        "steady state is the measurement window, split in two halves; it is declared only "
        "when the halves' descriptor ratios agree within their intervals, otherwise the "
        "table says *not settled*. The net line: the posting cost saved (lru's block-runs "
        "per READ − the policy's, × the KV regions per block on one rank, × the run's cost "
        "per native descriptor) against the allocator time added per request (both pools' "
        "allocation calls per READ, − lru's). vLLM's NIXL connector posts one descriptor "
        "per (KV region, block): 2 × layers regions with K and V apart, layers with MLA "
        "(`KV_REGIONS`, default 64: Llama-3.1-8B's 32 layers; `make report KV_REGIONS=N` "
        "prices the same runs for another model). *Break-even regions*: the region count "
        "at which the posting saved equals the allocator time added; it does not depend "
        "on the model, and any model with more regions per rank gains.",
    ]
    readings = []
    for (host, interp, variant, regime), grp in _runs(df):
        readings.append(_reading(host, interp, variant, regime, grp))
    return "\n\n".join(text), readings, older_line


def _interpreter_rank(interpreter: str) -> tuple[int, ...]:
    """``CPython 3.12.1`` -> (3, 12, 1)."""
    digits = interpreter.rsplit(" ", 1)[-1].split(".")
    return tuple(int(d) if d.isdigit() else 0 for d in digits)


def split_readings(policy: pd.DataFrame, readings: list[str]) -> tuple[list[str], list[str]]:
    """The answer's readings, and the ones folded under it.

    One reading per regime (sensitivity runs are regimes of their own, e.g. ``agentic,
    prefill release unpin``): the run measured to the greatest engine age, then the
    newest interpreter, then the first host. The first host's readings alone used to
    be the answer, which left out a regime measured only on another host (chat). The
    folded ones are the other readings of the hosts shown.

    Parameters
    ----------
    policy
        The processed ``policy`` table.
    readings
        :func:`note_parts`' readings of the same table (one per run, in its order).

    Returns
    -------
    tuple of list of str
        (shown, folded), each in the readings' order.
    """
    keys = []
    for (host, interp, _variant, regime), grp in _runs(_headline(policy)):
        end = grp.loc[grp["age"] != STEADY, "age_to"].max()
        keys.append((host, interp, str(regime), float(end) if pd.notna(end) else 0.0))
    if len(keys) != len(readings):
        return readings[:1], readings[1:]
    best: dict[str, int] = {}
    for i, (host, interp, regime, end) in enumerate(keys):
        j = best.get(regime)
        if j is None:
            best[regime] = i
            continue
        other = keys[j]
        mine = (end, _interpreter_rank(interp))
        theirs = (other[3], _interpreter_rank(other[1]))
        if mine > theirs or (mine == theirs and host < other[0]):
            best[regime] = i
    chosen = sorted(best.values())
    hosts = {keys[i][0] for i in chosen}
    shown = [readings[i] for i in chosen]
    folded = [r for i, r in enumerate(readings) if i not in chosen and keys[i][0] in hosts]
    return shown, folded


#: The PR's cluster run: 9,591 requests served in 3,629 s. Its age on this workload's
#: curve is where as many requests have been admitted; its rate turns ages into hours.
PR_REQUESTS = 9_591
PR_RATE = 9_591 / 3_629  # requests per second


def age_hours(grp: pd.DataFrame) -> list[tuple[str, float, float, float]]:
    """(window, age from, age to, hours of serving at its end at :data:`PR_RATE`), per
    window of the age curve of one run: the requests ``lru`` admitted per process, summed
    from the start."""
    rows = grp[(grp["policy"] == LRU) & (grp["metric"] == "requests") & (grp["age"] != STEADY)]
    rows = rows.sort_values("age_from")
    cum = rows["estimate"].cumsum() / PR_RATE / 3600.0
    return list(zip(rows["age"], rows["age_from"], rows["age_to"], cum, strict=True))


def pr_age(grp: pd.DataFrame) -> str | None:
    """The window of the age curve in which this workload has admitted the PR run's
    :data:`PR_REQUESTS` (None: the run ends before)."""
    rows = grp[(grp["policy"] == LRU) & (grp["metric"] == "requests") & (grp["age"] != STEADY)]
    total = 0.0
    for r in rows.sort_values("age_from").itertuples():
        total += r.estimate
        if total >= PR_REQUESTS:
            return str(r.age)
    return None


def _ratio(row: pd.Series | None) -> str:
    if row is None:
        return "—"
    interval = fmt_interval(row["ci_low"], row["ci_high"], lambda v: f"{v:.2f}")
    return f"{row['estimate']:.2f}× {interval}"


def _verdict(net: pd.Series | None, regions: str) -> str:
    if net is None or not (math.isfinite(net["ci_low"]) and math.isfinite(net["ci_high"])):
        return "n/a"
    if net["ci_low"] > 0:
        return f"net gain at {regions} regions"
    if net["ci_high"] < 0:
        return f"net loss at {regions} regions"
    return f"no net difference at {regions} regions"


def _reading(host: str, interp: str, variant: str, regime: str, grp: pd.DataFrame) -> str:
    """One run's answer: a table per policy and at most three sentences, each read off
    the table."""
    names = [n for n in policy_order(grp["policy"]) if n != LRU]
    first, second = _halves(grp)
    base = _get(grp, LRU, "desc_per_read")
    head = f"**{host}, {interp}, {regime}** (`{variant}`)"
    if base is None or not names:
        return f"{head}: no contiguous policy in the run."
    at_pr = pr_age(grp)
    curve = age_hours(grp)
    pr_col = (
        f"÷ at the PR's age ({at_pr} turnovers)" if at_pr else "÷ at the PR's age (not reached)"
    )
    recorded = grp["kv_regions"].dropna() if "kv_regions" in grp else pd.Series(dtype=float)
    regions = str(int(recorded.iloc[0])) if len(recorded) and recorded.iloc[0] > 0 else "the run's"
    lines = [
        f"| policy | {pr_col} | ÷ steady state ({first}, {second}) | allocator µs added / "
        "request | posting µs saved / READ | break-even KV regions | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    gains, qualify, evens = [], [], []
    for name in names:
        red = _get(grp, name, "desc_reduction")
        if _is_settled(grp, name):
            steady = _ratio(red)
        else:
            a = _get(grp, name, "desc_reduction", first)
            b = _get(grp, name, "desc_reduction", second)
            trend = _trend(a["estimate"], b["estimate"]) if a is not None and b is not None else "?"
            steady = f"not settled ({trend})" if _judgeable(grp, name) else f"settling {TOO_FEW}"
        young = _get(grp, name, "desc_reduction", at_pr) if at_pr else None
        added, saved = _get(grp, name, "ns_added"), _get(grp, name, "ns_saved")
        even, net = _get(grp, name, "break_even_regions"), _get(grp, name, "net_ns")
        verdict = _verdict(net, regions)
        if verdict.startswith("net gain"):
            gains.append(name)
        if even is not None and math.isfinite(even["estimate"]):
            evens.append((even["estimate"], name, _cell(even, 1)))
        lo, hi = PR_REDUCTION
        if young is not None and young["ci_low"] <= hi and young["ci_high"] >= lo:
            qualify.append(name)
        lines.append(
            f"| `{name}` | {_ratio(young)} | {steady} | "
            f"{_us(added) if added is not None else '—'} | "
            f"{_us(saved) if saved is not None else '—'} | "
            f"{_cell(even, 1) if even is not None else '—'} | {verdict} |"
        )
    last = curve[-1] if curve else None
    sentences = [
        f"`lru` needs {base['estimate']:.1f} descriptors per READ; the PR's "
        f"{PR_REQUESTS:,} requests are "
        + (f"turnovers {at_pr} of this workload" if at_pr else "beyond this run")
        + (
            f" (the PR's hour), and its last window ends at {last[2]:g} turnovers, after "
            f"{last[3]:.1f} h of serving at the PR's {PR_RATE:.2f} requests/s."
            if last is not None
            else "."
        ),
        (
            f"At {regions} KV regions per block, {len(gains)} of {len(names)} windows "
            f"are a net gain"
            + (f" ({', '.join(f'`{g}`' for g in gains)})" if gains else "")
            + (
                (
                    f"; break-even is {evens[0][2]} regions."
                    if len(evens) == 1
                    else f"; break-even ranges from {min(evens)[2]} (`{min(evens)[1]}`) to "
                    f"{max(evens)[2]} (`{max(evens)[1]}`) regions."
                )
                if evens
                else "; none saves a block-run."
            )
        ),
        (
            f"At the PR's age, {', '.join(f'`{q}`' for q in qualify)} "
            f"reproduce{'s' if len(qualify) == 1 else ''} the PR's "
            f"{PR_REDUCTION[0]}–{PR_REDUCTION[1]}×."
            if qualify
            else f"No window reproduces the PR's {PR_REDUCTION[0]}–{PR_REDUCTION[1]}× at its age."
        ),
    ]
    return f"{head}\n\n" + "\n".join(lines) + "\n\n" + " ".join(sentences)


def _trend(first: float, second: float) -> str:
    """``first× → second×`` with the fewest decimals (2 to 4) that tell them apart: two
    halves that disagree read "1.00× → 1.00×" at 2 (a chat run's contig-w8)."""
    for digits in (2, 3, 4):
        a, b = f"{first:.{digits}f}", f"{second:.{digits}f}"
        if a != b:
            break
    return f"{a}× → {b}×"


def _is_settled(grp: pd.DataFrame, name: str) -> bool:
    """Whether ``name``'s two halves agree within their intervals (``settled`` is 1)."""
    settled = _get(grp, name, "settled")
    return settled is not None and settled["estimate"] == 1.0


def _us(row: pd.Series) -> str:
    return fmt_number_estimate(
        row["estimate"] / 1e3,
        row["ci_low"] / 1e3,
        row["ci_high"] / 1e3,
        2,
        too_few=_too_few(row),
    )


# ---------------------------------------------------------------------------------------
# figure


def figure(policy: pd.DataFrame) -> Figure:
    """The age curve: each policy's descriptors per READ, lru ÷ policy, against engine
    age (turnovers, log scale), one panel per headline steady-state run (host ×
    interpreter × variant × regime), intervals as bands; the one-side runs ratio of the
    widest window dotted; the measurement's two halves shaded.

    Parameters
    ----------
    policy
        The processed ``policy`` table.

    Returns
    -------
    matplotlib.figure.Figure
    """
    with plotstyle.theme():
        return _figure(_headline(policy))


def _figure(df: pd.DataFrame) -> Figure:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator

    runs = _runs(df)
    panels = max(1, len(runs))
    cols = min(panels, 2)
    rows = -(-panels // cols)
    fig = Figure(figsize=(6.5 * cols, 4.2 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    if not runs:
        ax = axes[0]
        ax.set_title("descriptors per READ, lru ÷ policy", fontsize=11)
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "No steady-state policy run yet:\nmake policy HOST=<label> REGIME=chat",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return fig
    for ax, ((host, interp, variant, regime), grp) in zip(axes, runs, strict=False):
        del variant  # one headline per variant: the title names host, interpreter, regime
        curve = grp[grp["age"] != STEADY]
        names = [n for n in policy_order(grp["policy"]) if n != LRU]
        palette = dict(zip(names, plotstyle.palette(len(names)), strict=True))
        _age_curves(ax, curve, names, palette)
        if names:
            last = names[-1]
            one = curve[(curve["policy"] == last) & (curve["metric"] == "runs_reduction")]
            one = one.sort_values("age_from")
            ax.plot(
                _mid_age(one),
                one["estimate"],
                linestyle=":",
                color=palette[last],
                label=f"{last}, one-side runs ÷",
            )
        first, second = _halves(grp)
        measured = curve[curve["age"].isin([first, second])]
        if not measured.empty:
            ax.axvspan(measured["age_from"].min(), measured["age_to"].max(), color="0.92", zorder=0)
        ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
        # The one outside figure: the PR's 2.3-2.6x over its hour of serving, drawn as a
        # box where this workload has admitted as many requests as the PR run.
        at_pr = pr_age(grp)
        pr_rows = curve[curve["age"] == at_pr] if at_pr else curve.iloc[:0]
        if not pr_rows.empty:
            lo, hi = PR_REDUCTION
            ax.fill_between(
                [pr_rows["age_from"].min(), pr_rows["age_to"].max()],
                lo,
                hi,
                facecolor="none",
                edgecolor="0.2",
                hatch="///",
                linewidth=0.8,
                label=f"PR #55841: {lo}–{hi}× at its age",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")  # ratios: 2x fewer and 2x more are the same distance
        # Plain 1-2-5 labels ("2×"), not matplotlib's "2 × 10⁰" of a log axis.
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}×"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))
        # The estimates set the scale; a band from two processes can span decades and
        # would flatten every curve (it is clipped at the panel's edge instead).
        shown = curve[curve["metric"].isin(["desc_reduction", "runs_reduction"])]["estimate"]
        shown = shown[np.isfinite(shown) & (shown > 0)]
        if len(shown):
            ax.set_ylim(min(0.8, shown.min() / 1.5), max(1.25, shown.max() * 1.5))
        ax.set_xlabel("engine age, pool turnovers (grey: steady-state measurement)")
        ax.set_ylabel("descriptors per READ, lru ÷ policy")
        ax.set_title(f"{host} · {interp} · {regime}", fontsize=11)
        ax.legend(fontsize=8, loc="best")
    for ax in axes[len(runs) :]:
        ax.set_visible(False)
    return fig


def _mid_age(rows: pd.DataFrame) -> pd.Series:
    """Where an age window is plotted: the geometric middle of its turnovers (the first
    window, from 0, as if from 0.5)."""
    return np.sqrt(np.maximum(rows["age_from"], 0.5) * rows["age_to"])


def _age_curves(
    ax: Axes,
    curve: pd.DataFrame,
    names: Sequence[str],
    palette: Mapping[str, tuple[float, float, float]],
) -> None:
    """One panel's curves of :func:`figure`: each policy's ``desc_reduction`` against its
    windows' middle ages, a ``lineplot`` of the given intervals (a band; an end that is
    not finite falls back to the estimate).

    The ``lineplot`` drew the figure in 1.74 s against 2.09 s with one ``plot`` and one
    ``fill_between`` per policy (draw and save, committed data, best of 6: no slower).
    """
    sub = curve[curve["policy"].isin(names) & (curve["metric"] == "desc_reduction")]
    if sub.empty:
        return
    est = sub["estimate"]
    sub = sub.assign(
        _age=_mid_age(sub),
        _low=sub["ci_low"].where(np.isfinite(sub["ci_low"]), est),
        _high=sub["ci_high"].where(np.isfinite(sub["ci_high"]), est),
    )
    plotstyle.seaborn().lineplot(
        data=plotstyle.given_intervals(sub, "estimate", "_low", "_high"),
        x="_age",
        y="value",
        hue="policy",
        hue_order=list(names),
        palette=dict(palette),
        estimator=plotstyle.given_estimate,
        errorbar=plotstyle.given_interval,
        err_kws={"alpha": 0.15, "linewidth": 0},
        marker="o",
        ax=ax,
    )
