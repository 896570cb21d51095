"""The report's release-history section: the processed history tables -> step table,
text and figure.

Reads the ``history`` and ``history_steps`` tables that :mod:`kvqueue.history.history_analysis`
computes, and shows their ``headline`` runs: the step table (release range -> change in
time with its interval, per case), the section's note and the figure (ns per cycle by
version, significant steps labelled).

A history counted but never timed on a host × interpreter (``make history
METRIC=instructions`` alone) is shown by its ``count_steps``: :func:`counts_only_steps`
picks those runs, :func:`count_step_table` and :func:`count_step_lines` show each release
step's change in instructions per operation (:data:`CODE_COST_MIN` or more: a change).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from kvqueue import plotstyle, schema
from kvqueue.formatting import fmt_signed_ci, fmt_signed_pct
from kvqueue.sources.versions import version_key

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def step_table(steps: pd.DataFrame, counts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Release range -> change in time [95 % CI], one column per case (headline runs).

    Only steps that are significant (false-discovery control included) in at least one
    case of their run are shown, with their kind (:func:`step_kinds`); a
    cell is ``+12.3% [+10.1, +14.0]`` (positive: the newer release takes longer), with
    ``*`` on significant cells, and ``· instr +9.8%`` where a history counts run of the
    same interpreter counted the same two versions on that case (instructions per
    operation do not depend on the machine or, beyond ~1 %, on the pool size).

    Parameters
    ----------
    steps
        The processed ``history_steps`` table.
    counts
        The processed ``count_steps`` table (optional).

    Returns
    -------
    pandas.DataFrame
        Host, Interpreter, Release range, then one column per case and pool.
    """
    if steps.empty:
        return pd.DataFrame()
    steps = steps[steps["headline"].astype(bool)]
    keep = steps.groupby(["host", "interpreter", "release_range"])["significant"].transform("any")
    steps = steps[keep]
    if steps.empty:
        return pd.DataFrame()
    instr: dict[tuple[str, str, str, str], float] = {}
    if counts is not None and len(counts):
        for c in counts.itertuples():
            instr.setdefault((c.interpreter, c.from_version, c.to_version, c.case), c.instr_change)

    def counted(r: object) -> str:
        key = (r.interpreter, r.from_version, r.to_version, r.case)  # type: ignore[attr-defined]
        return f" · instr {fmt_signed_pct(instr[key])}" if key in instr else ""

    steps = steps.assign(
        cell=[
            f"{fmt_signed_pct(r.change)} {fmt_signed_ci(r.ci_low, r.ci_high)}"
            f"{' *' if r.significant else ''}{counted(r)}"
            for r in steps.itertuples()
        ],
        column=[f"{r.case} / {r.pool:,}" for r in steps.itertuples()],
    )
    order = {rr: i for i, rr in enumerate(_release_order(steps))}
    wide = steps.pivot_table(
        index=["host", "interpreter", "release_range"],
        columns="column",
        values="cell",
        aggfunc="first",
    ).reset_index()
    wide = wide.sort_values(
        ["host", "interpreter", "release_range"],
        key=lambda s: s.map(order) if s.name == "release_range" else s,
    )
    wide.columns.name = None
    kinds = step_kinds(steps, counts)
    wide.insert(3, "Step", wide["release_range"].map(lambda rr: kinds.get(rr, NOT_COUNTED)))
    return wide.rename(
        columns={"host": "Host", "interpreter": "Interpreter", "release_range": "Release range"}
    ).reset_index(drop=True)


def _release_order(steps: pd.DataFrame) -> list[str]:
    ranges = steps["release_range"].unique().tolist()
    return sorted(ranges, key=lambda rr: version_key(rr.split(" → ")[-1].split(" (")[0]))


def note(versions: pd.DataFrame, counts: pd.DataFrame | None = None) -> str:
    """The section's text: what was timed, how it is paired, and how to read it.

    Parameters
    ----------
    versions
        The processed ``history`` table.
    counts
        The :func:`counts_only_steps` (no timed history: :data:`COUNTS_NOTE`).

    Returns
    -------
    str
        Markdown.
    """
    if versions.empty and counts is not None and len(counts):
        return COUNTS_NOTE
    if versions.empty:
        return (
            "No release-history run yet. `make history HOST=...` times every distinct "
            "version of the queue from vLLM 0.6.4 (the first release with "
            "`vllm/v1/core/kv_cache_utils.py`) to the newest, paired."
        )
    head = versions[versions["headline"].astype(bool)]
    n_versions = head.groupby(["host", "interpreter"])["version"].nunique()
    adapters = sorted(set(head.loc[head["adapter"] != "", "releases"]))
    lo, hi = n_versions.min(), n_versions.max()
    count = f"{lo}" if lo == hi else f"{lo}–{hi}"
    subject = schema.subject_of_label(head["version"].iloc[0])
    if subject == schema.SUBJECT_POOL:
        return _pool_note(head, count) + _reduced_text(head)
    if subject == schema.SUBJECT_MANAGER:
        return _manager_note(head, count) + _reduced_text(head)
    text = (
        f"Each distinct (queue class, block class) version of the vLLM releases, "
        f"{count} per interpreter, timed in every process "
        "of one paired run per interpreter on the release's own `KVCacheBlock` (block "
        "mode `own`: 0.9.x's dataclass equality is part of its cost). Paired: every "
        "version against the newest, and every step against its predecessor, as "
        "per-process ratios; the interval is the median's order-statistic interval "
        "over processes. A step marked `*` has an interval that excludes 0; positive = "
        "the newer release is slower. Separate block pools per variant (needed with "
        "separate block classes) biased an A/A pair by ~2 % in the A/B setting, so steps "
        "below ~2 % are not resolved here."
    )
    if adapters:
        text += (
            " Releases without `popleft_n`/`append_n` ("
            + ", ".join(adapters)
            + ") are driven through the `popleft-loop` adapter: loops of "
            "`popleft()`/`append()`, as their own `BlockPool` did."
        )
    return text + _reduced_text(head)


def _reduced_text(head: pd.DataFrame) -> str:
    """What the note says of each host × interpreter whose history shown is reduced."""
    cut = head.loc[head["reduced"] != "", ["host", "interpreter", "reduced"]].drop_duplicates()
    return "".join(
        f" No full history of {r.host} / {r.interpreter} yet: the run shown is a "
        f"reduced one ({r.reduced})."
        for r in cut.itertuples()
    )


def _pool_note(head: pd.DataFrame, count: str) -> str:
    """The method note of a ``BlockPool`` release history."""
    text = (
        f"Each distinct `BlockPool` version of the vLLM releases ({count} per interpreter): "
        "releases whose `block_pool.py`, the definitions it uses from `kv_cache_utils.py` "
        "(the queue, the block, the hash helpers) and `kv_cache_metrics.py` are "
        "byte-identical are one version, timed under its newest release. Every process "
        "times every version, each as its release runs it (its own queue and block), on "
        "a fresh pool per version and case, through the calls vLLM's KV-cache manager "
        "makes (`kvqueue.subjects.pool_cases`). Paired as the queue's history: each step "
        "against its predecessor as per-process ratios, the median's order-statistic "
        "interval over processes, positive = the newer release is slower. Every version "
        "passed the pool gate against the newest, with the differences by design named "
        "per pair."
    )
    return text + _adaptations(head)


def _adaptations(head: pd.DataFrame) -> str:
    """Consecutive versions with the same adaptation of the API drift as one release range:
    `` Called through adaptations of the API drift: 0.9.0–0.9.2: ...`` ('' without any)."""
    spans: list[list[str]] = []  # [first release, last release, adapter]
    for r in head.drop_duplicates("version").sort_values("order").itertuples():
        # A stack history records no adapter (NA: its adapter is chosen by signature);
        # "bool(NA)" stopped the first timed manager history's report.
        adapter = "" if pd.isna(r.adapter) else str(r.adapter)
        if spans and spans[-1][2] == adapter:
            spans[-1][1] = str(r.last_release)
        else:
            spans.append([str(r.first_release), str(r.last_release), adapter])
    adapted = [f"{a if a == b else f'{a}–{b}'}: {how}" for a, b, how in spans if how]
    return (
        " Called through adaptations of the API drift: " + "; ".join(adapted) + "."
        if adapted
        else ""
    )


def _manager_note(head: pd.DataFrame, count: str) -> str:
    """The method note of a ``KVCacheManager`` release history."""
    return (
        f"Each distinct `KVCacheManager` stack of the vLLM releases ({count} per interpreter): "
        "releases whose manager, coordinator, single-type managers, `BlockPool`, `Request` "
        "and the definitions they use (the queue, the block, the hash helpers) are "
        "byte-identical are one version, timed under its newest release. Every process "
        "times every version, each as its release runs it, on a fresh manager per version "
        "and case, through the calls vLLM's scheduler makes (`kvqueue.subjects."
        "manager_cases`: `sweepN` admits and frees one request of N blocks with no cache "
        "hit, `stream` is one scheduler step). Paired as the queue's history: each step "
        "against its predecessor as per-process ratios, the median's order-statistic "
        "interval over processes, positive = the newer release is slower. Every version "
        "passed the manager gate (a scheduler trace replayed step by step) against the "
        "newest, with the differences by design recorded. CPU only: no GPU time, no "
        "batching on the GPU." + _adaptations(head)
    )


def of_subject(df: pd.DataFrame, subject: str) -> pd.DataFrame:
    """The rows of ``history``, ``history_steps`` or ``count_steps`` of one subject
    (:data:`kvqueue.schema.SUBJECTS`), told apart by the label prefix of their versions
    (:func:`kvqueue.schema.subject_of_label`)."""
    if df.empty:
        return df
    column = "version" if "version" in df.columns else "from_version"
    return df[df[column].map(schema.subject_of_label) == subject]


def figure(
    versions: pd.DataFrame, steps: pd.DataFrame, counts: pd.DataFrame | None = None
) -> Figure:
    """The paired change of every release step, what the verdict rests on: per host ×
    interpreter (rows) and case (columns), each step's median per-process ratio
    newer/older with its 95 % interval, in release order, on a log axis labelled in
    percent; the instruction change of the same step where it was counted (×).

    A step that holds up under the false-discovery control is filled and numbered (the
    same number in every panel, a key of release ranges under the panels): red where
    the instruction counts moved too (code cost), grey where only the time did; the
    others are hollow. The absolute ns per cycle drawn before had unpaired intervals up
    to 2x wide, so numbered steps sat on lines flat within their bars (issue 26).

    Parameters
    ----------
    versions, steps
        The processed ``history`` and ``history_steps`` tables.
    counts
        The processed ``count_steps`` table (optional).

    Returns
    -------
    matplotlib.figure.Figure
    """
    with plotstyle.theme():
        return _figure(versions, steps, counts)


def _figure(versions: pd.DataFrame, steps: pd.DataFrame, counts: pd.DataFrame | None) -> Figure:
    from matplotlib.figure import Figure

    head = versions[versions["headline"].astype(bool)] if not versions.empty else versions
    shown = steps[steps["headline"].astype(bool)] if not steps.empty else steps
    if head.empty or shown.empty:
        fig = Figure(figsize=(6, 3))
        ax = fig.subplots()
        ax.set_xlabel("vLLM release step (oldest → newest)")
        ax.set_ylabel("change, newer vs older")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            "No release-history run yet:\nmake history HOST=<label>",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return fig
    rows = sorted(shown.groupby(["host", "interpreter"]).groups)
    cells = sorted(
        shown.groupby(["case", "pool"]).groups, key=lambda c: (schema.case_rank(c[0]), c[1])
    )
    # One number per significant release step, the same in every panel, explained in a
    # key under the panels: the release ranges written beside the points were 4.5 pt
    # vertical text, unreadable at 100 % (issue 18).
    numbers = step_numbers(steps, versions, counts)
    kinds = step_kinds(steps, counts)
    instr = _instructions(counts)
    order = {rr: i for i, rr in enumerate(_release_order(shown))}
    # One y range for every panel: a step's height compares across cases and machines.
    lows = (1 + shown[["ci_low", "ci_high"]].min(axis=1)).clip(lower=1e-3)
    highs = 1 + shown[["ci_low", "ci_high"]].max(axis=1)
    y_lo, y_hi = float(lows.min()) / 1.15, float(highs.max()) * 1.15
    key_rows = -(-len(numbers) // 3) if numbers else 0
    fig = Figure(figsize=(4.2 * len(cells), 3.4 * len(rows) + 0.17 * key_rows + 0.5))
    axes = fig.subplots(len(rows), len(cells), squeeze=False, sharey=True)
    for i, (host, interp) in enumerate(rows):
        for j, (case, pool) in enumerate(cells):
            ax = axes[i][j]
            sub = shown[
                (shown["host"] == host)
                & (shown["interpreter"] == interp)
                & (shown["case"] == case)
                & (shown["pool"] == pool)
            ]
            sub = sub.assign(xpos=sub["release_range"].map(order)).sort_values("xpos")
            _step_panel(ax, sub, kinds, numbers, instr)
            ax.set_xticks(sorted(order.values()))
            ax.set_xticklabels(
                [_newer(rr) for rr in sorted(order, key=order.__getitem__)],
                rotation=90,
                fontsize=7.5,
            )
            ax.set_xlim(-0.6, len(order) - 0.4)
            ax.set_title(f"{case} / {pool:,}\n{interp} ({host})", fontsize=9)
            _percent_log_axis(ax, y_lo, y_hi)
            ax.set_ylabel("newer vs older (log)" if j == 0 else "")
    key_in = 0.17 * key_rows  # inches of the key: 9 pt lines
    legend = (
        "Each step: median per-process ratio newer/older, 95 % interval; × its change in "
        "instructions per operation. Filled and numbered: holds up under the false-discovery "
        "control (red: the instruction counts moved too; grey: time only); hollow: not."
    )
    if numbers:
        key = [
            f"{n}: {rr}" + (" (time only)" if kinds.get(rr) == TIME_ONLY else "")
            for rr, n in numbers.items()
        ]
        cols = ["\n".join(key[c * key_rows : (c + 1) * key_rows]) for c in range(3)]
        top = 0.01 + key_in / fig.get_figheight()
        for c, text in enumerate(cols):
            # Anchored at the top: a shorter last column starts level with the others.
            fig.text(0.02 + 0.32 * c, top, text, fontsize=9, va="top", ha="left")
    fig.text(0.02, 0.01 + (key_in + 0.08) / fig.get_figheight(), legend, fontsize=9)
    fig.tight_layout(rect=(0, (key_in + 0.35) / fig.get_figheight(), 1, 1))
    return fig


def _newer(release_range: str) -> str:
    """The tick of a step: the first release of its newer version."""
    return release_range.split(" → ")[-1].split(" (")[0]


def _instructions(counts: pd.DataFrame | None) -> dict[tuple[str, str, str, str], float]:
    """(interpreter, from_version, to_version, case) -> the step's instruction change."""
    instr: dict[tuple[str, str, str, str], float] = {}
    if counts is not None and len(counts):
        for c in counts.itertuples():
            instr.setdefault((c.interpreter, c.from_version, c.to_version, c.case), c.instr_change)
    return instr


def _step_panel(
    ax: Axes,
    sub: pd.DataFrame,
    kinds: Mapping[str, str],
    numbers: Mapping[str, int],
    instr: Mapping[tuple[str, str, str, str], float],
) -> None:
    """One panel of :func:`figure`: each step's ratio and interval at ``xpos``."""
    ax.axhline(1.0, color="0.45", linewidth=0.8, zorder=1)
    blue = plotstyle.palette(1)[0]
    for r in sub.itertuples():
        sig = bool(r.significant)
        grey = kinds.get(r.release_range) == TIME_ONLY
        colour = ("tab:gray" if grey else "tab:red") if sig else blue
        mid = 1 + r.change
        lo, hi = max(1 + min(r.ci_low, r.ci_high), 1e-3), 1 + max(r.ci_low, r.ci_high)
        ax.errorbar(
            [r.xpos],
            [mid],
            yerr=[[mid - lo], [hi - mid]],
            fmt="o",
            markersize=4.5,
            color=colour,
            markerfacecolor=colour if sig else "white",
            elinewidth=1.1,
            capsize=2,
            zorder=3,
        )
        moved = instr.get((r.interpreter, r.from_version, r.to_version, r.case))
        if moved is not None:
            ax.plot([r.xpos], [1 + moved], "x", color="black", markersize=5, zorder=4)
        if sig and r.release_range in numbers:
            up = r.change > 0
            ax.annotate(
                str(numbers[r.release_range]),
                (r.xpos, hi if up else lo),
                textcoords="offset points",
                xytext=(0, 3 if up else -3),
                ha="center",
                va="bottom" if up else "top",
                fontsize=8.5,
                fontweight="bold",
                color=colour,
            )


def _percent_log_axis(ax: Axes, low: float, high: float) -> None:
    """A log axis of ratios labelled as changes (0.5 -> "-50%"): a halving and a
    doubling are the same height, and a reader reads percent without arithmetic."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

    ax.set_yscale("log")
    ax.set_ylim(low, high)
    # 9 pt apart at least on a 3.4-inch panel spanning -85 % to +15 %: -10 % and +10 %
    # overlapped 0.
    ticks = [0.1, 0.2, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0]
    ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if low <= t <= high]))
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _pos: "0" if abs(v - 1) < 1e-9 else f"{v - 1:+.0%}")
    )
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _significant_steps(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty:
        return steps
    return steps[steps["headline"].astype(bool) & steps["significant"].astype(bool)]


#: The smallest change in instructions per operation that counts as a change of the
#: executed code's cost. One version's counts move by up to ~1 % with the pool size
#: (the counts are taken at 2,048 blocks, the times at 2,048 and 100,000); in the
#: committed history every step's largest change is either below 0.6 % (11 steps) or
#: above 7.8 % (5 steps).
CODE_COST_MIN = 0.01
CODE_COST, TIME_ONLY, NOT_COUNTED = "code cost", "time only", "not counted"


def step_kinds(steps: pd.DataFrame, counts: pd.DataFrame | None) -> dict[str, str]:
    """Kind of each significant step of the headline runs: :data:`CODE_COST` when the
    instruction counts of the same interpreter moved by :data:`CODE_COST_MIN` or more
    in a case where its time moved significantly; :data:`TIME_ONLY` when they were
    counted there and did not (layout or noise: not attributable to the diff);
    :data:`NOT_COUNTED` when no counts run covers those cells."""
    sig = _significant_steps(steps)
    instr: dict[tuple[str, str, str, str], float] = {}
    if counts is not None and len(counts):
        for c in counts.itertuples():
            instr.setdefault((c.interpreter, c.from_version, c.to_version, c.case), c.instr_change)
    kinds = {}
    for rr, grp in sig.groupby("release_range", sort=False):
        known = [
            instr[k]
            for k in zip(
                grp["interpreter"], grp["from_version"], grp["to_version"], grp["case"], strict=True
            )
            if k in instr and not pd.isna(instr[k])
        ]
        if not known:
            kinds[rr] = NOT_COUNTED
        elif any(abs(v) >= CODE_COST_MIN for v in known):
            kinds[rr] = CODE_COST
        else:
            kinds[rr] = TIME_ONLY
    return kinds


def step_numbers(
    steps: pd.DataFrame, versions: pd.DataFrame, counts: pd.DataFrame | None = None
) -> dict[str, int]:
    """Number of each significant release step of the headline runs: the steps whose
    executed code changed cost (or that were not counted) first, then the time-only
    ones, each group oldest first. The figure marks the steps with these numbers, the
    writeup lists them with the same."""
    sig = _significant_steps(steps)
    if sig.empty:
        return {}
    kinds = step_kinds(steps, counts)
    order = dict(zip(versions["version"], versions["order"], strict=False))
    ranked = sig.assign(
        _t=sig["release_range"].map(lambda rr: kinds.get(rr) == TIME_ONLY),
        _o=sig["to_version"].map(order),
    ).sort_values(["_t", "_o"], kind="stable")
    return {rr: k for k, rr in enumerate(dict.fromkeys(ranked["release_range"]), start=1)}


#: The history section's text when only instruction counts measured the releases.
COUNTS_NOTE = (
    "Instruction counts only: no timed history (`make history` without "
    "`METRIC=instructions`) of these hosts × interpreters. Each release step is the newer "
    "version's instructions per operation against its predecessor's (cachegrind, "
    "deterministic: no interval; + = the newer release executes more). A step moved the "
    f"executed code's cost when a cell changed by {CODE_COST_MIN:.0%} or more (the "
    "threshold of `make regress`: ~10x the largest difference between counts of identical "
    "code, 0.13 %); smaller moves are layout, not code. A version is named by the newest "
    "release that ships it. Instructions are not wall time (memory waits and mispredicted "
    "branches cost time without instructions): how much a step cost in time needs the "
    "timed `make history`."
)


def counts_only_steps(counts: pd.DataFrame, versions: pd.DataFrame) -> pd.DataFrame:
    """The ``count_steps`` rows of hosts × interpreters × subjects with no headline timed
    history (``versions``: the processed ``history`` table). By subject: a timed pool
    history of a host hid that host's counted manager history."""
    if counts.empty or versions.empty:
        return counts
    head = versions[versions["headline"].astype(bool)]
    subject = schema.subject_of_label
    timed = {
        (h, i, subject(str(v)))
        for h, i, v in zip(head["host"], head["interpreter"], head["version"], strict=True)
    }
    own = [
        (h, i, subject(str(v))) not in timed
        for h, i, v in zip(counts["host"], counts["interpreter"], counts["to_version"], strict=True)
    ]
    return counts[own]


def _count_range(row: object) -> str:
    """The step's label: the timed history's (``release_range``) for the same step."""
    return str(row.release_range)  # type: ignore[attr-defined]


def count_step_kinds(counts: pd.DataFrame) -> dict[str, str]:
    """Release step (``older → newer``) -> :data:`CODE_COST` when a cell moved by
    :data:`CODE_COST_MIN` or more, else ``below 1%``; in release order."""
    out: dict[str, str] = {}
    for r in counts.itertuples():
        moved = abs(float(r.instr_change)) >= CODE_COST_MIN
        key = _count_range(r)
        out[key] = CODE_COST if moved or out.get(key) == CODE_COST else f"below {CODE_COST_MIN:.0%}"
    return out


def count_step_table(counts: pd.DataFrame) -> pd.DataFrame:
    """Host, Interpreter, Release step, Step (its kind), then the change in instructions
    per operation per case and pool (``+9.8%``)."""
    if counts.empty:
        return pd.DataFrame()
    kinds = count_step_kinds(counts)
    order = {k: i for i, k in enumerate(kinds)}
    df = counts.assign(
        step=[_count_range(r) for r in counts.itertuples()],
        column=[f"{r.case} / {int(r.pool):,}" for r in counts.itertuples()],
        cell=counts["instr_change"].map(fmt_signed_pct),
    )
    wide = df.pivot_table(
        index=["host", "interpreter", "step"], columns="column", values="cell", aggfunc="first"
    ).reset_index()
    wide = wide.sort_values(
        ["host", "interpreter", "step"], key=lambda s: s.map(order) if s.name == "step" else s
    )
    wide.columns.name = None
    wide.insert(3, "Step", wide["step"].map(kinds))
    return wide.rename(
        columns={"host": "Host", "interpreter": "Interpreter", "step": "Release step"}
    ).reset_index(drop=True)


def _version_order(label: str) -> tuple:
    """Sort key of a history version label (``manager:vllm==0.10.0``): by release."""
    return version_key(label.split("==", 1)[-1])


def count_version_table(counts: pd.DataFrame, blocks: Mapping[str, int]) -> pd.DataFrame:
    """Each counted version's instructions per operation, oldest first: one column per
    case and pool, and per block for the cases of ``blocks`` (case -> blocks one
    operation allocates and frees).

    Parameters
    ----------
    counts
        Rows of the processed ``counts`` table of one history's runs.
    """
    if counts.empty:
        return pd.DataFrame()
    rows = []
    for (host, python, label), grp in counts.groupby(["host", "interpreter", "label"], sort=False):
        row: dict[str, object] = {"Host": host, "Interpreter": python, "Version": label}
        for r in sorted(grp.itertuples(), key=lambda r: (schema.case_key(r.case), r.pool)):
            where = f"{r.case} / {int(r.pool):,}"
            row[f"{where}: instr/op"] = f"{float(r.instructions):,.0f}"
            if r.case in blocks:
                row[f"{where}: per block"] = f"{float(r.instructions) / blocks[r.case]:,.0f}"
        rows.append(row)
    df = pd.DataFrame(rows)
    order = df["Version"].map(_version_order)
    return (
        df.assign(_o=order)
        .sort_values(["Host", "Interpreter", "_o"])
        .drop(columns="_o")
        .reset_index(drop=True)
    )


def count_version_line(counts: pd.DataFrame, blocks: Mapping[str, int]) -> str:
    """One sentence: each case's instructions per operation in the oldest and the
    newest counted version, and the lowest and highest between (per block where a case
    has a fixed number of blocks)."""
    if counts.empty:
        return ""
    parts = []
    cases = sorted(counts["case"].unique(), key=schema.case_key)
    for case in cases:
        grp = counts[counts["case"] == case]
        per = blocks.get(case, 1)
        by = grp.assign(_o=grp["label"].map(_version_order)).sort_values("_o")
        first, last = by.iloc[0], by.iloc[-1]
        lo, hi = by.loc[by["instructions"].idxmin()], by.loc[by["instructions"].idxmax()]
        unit = " per block" if case in blocks else " per operation"

        def at(r: pd.Series, per: int = per) -> str:
            return f"{float(r['instructions']) / per:,.0f} ({_release(str(r['label']))})"

        parts.append(
            f"{case}: {at(first)} → {at(last)} instructions{unit}; lowest {at(lo)}, "
            f"highest {at(hi)}"
        )
    return "; ".join(parts)


def _release(label: str) -> str:
    return label.split("==", 1)[-1]


def count_step_lines(counts: pd.DataFrame) -> list[str]:
    """One numbered Markdown line per release step whose instructions moved by
    :data:`CODE_COST_MIN` or more (lowest to highest change over the cells), then one
    line naming the steps below it."""
    if counts.empty:
        return []
    kinds = count_step_kinds(counts)
    ranges = [_count_range(r) for r in counts.itertuples()]
    lines: list[str] = []
    small: list[str] = []
    for step, kind in kinds.items():
        cells = counts[[rr == step for rr in ranges]]
        if kind != CODE_COST:
            small.append(step)
            continue
        lo, hi = (
            cells.loc[cells["instr_change"].idxmin()],
            cells.loc[cells["instr_change"].idxmax()],
        )
        span = f"{fmt_signed_pct(lo['instr_change'])} ({lo['case']}, {lo['interpreter']})"
        if lo.name != hi.name:
            span += f" to {fmt_signed_pct(hi['instr_change'])} ({hi['case']}, {hi['interpreter']})"
        moved = int((cells["instr_change"].abs() >= CODE_COST_MIN).sum())
        lines.append(
            f"{len(lines) + 1}. **{step}**: instructions per operation {span}; "
            f"{moved} of {len(cells)} cells moved by {CODE_COST_MIN:.0%} or more"
        )
    if small:
        lines.append(
            f"\n{len(small)} step{'s' if len(small) != 1 else ''} moved by less than "
            f"{CODE_COST_MIN:.0%} in every cell (no change of the executed code's cost): "
            + ", ".join(small)
            + "."
        )
    return lines
