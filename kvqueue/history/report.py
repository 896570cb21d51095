"""The report's release-history section: raw history runs -> tables -> text and figure.

A history run (``run.json`` ``kind: "history"``, :mod:`kvqueue.history.collect`) times one
representative release per distinct queue version, newest first, in every process. Per
run, case and pool:

- **per version**: ns per cycle = the median over processes of the per-process medians,
  with the interpolated order-statistic interval of that median
  (:func:`kvqueue.analysis.stats.order_statistic_interval`, the report's interval), and the
  paired ratio to the newest version (median over processes of the per-process ratio,
  same interval);
- **per step** between consecutive versions in release order: the paired change in
  time, ``median_p(m(p, newer) / m(p, older)) - 1``, with its interval. A step is
  *significant* when its interval excludes 0; it is labelled with the release range it
  spans (the last release of the older version -> the first of the newer, plus "also in"
  the newer's earlier releases when its releases are not consecutive).

Tables ``history`` and ``history_steps`` (schema.PROCESSED_TABLES). The ``headline`` run
per host x interpreter, which the section shows, is the newest *full* history (releases
not given, the default cases and pools): a later ``RELEASES="0.31.0 0.32.0"`` or
``CASES=alloc1`` run does not replace it. Without a full one, the newest reduced run is
shown, and the text says what it left out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.analysis import rawdata, stats
from kvqueue.params.history import HISTORY_DEFAULTS
from kvqueue.sources.upstream import version_key

KIND = schema.KIND_HISTORY
VERSION_COLUMNS = tuple(schema.PROCESSED_TABLES["history"])
STEP_COLUMNS = tuple(schema.PROCESSED_TABLES["history_steps"])


def _versions(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's versions, oldest first (run.json lists them newest first)."""
    return list(reversed((meta.get("history") or {}).get("versions") or []))


def _span(version: Mapping[str, Any]) -> str:
    releases = version["releases"]
    if version.get("non_consecutive"):
        return ", ".join(releases)  # a range would claim the releases in between
    return releases[0] if len(releases) == 1 else f"{releases[0]}–{releases[-1]}"


def _step_range(older: Mapping[str, Any], newer: Mapping[str, Any]) -> str:
    """``"last of older → first of newer after it"``, and the newer's earlier releases.

    A version whose releases are not consecutive (A, B, A) also shipped before the older
    one: the step is from the older's last release to the newer's next one.
    """
    last = older["releases"][-1]
    after = [r for r in newer["releases"] if version_key(r) > version_key(last)]
    earlier = [r for r in newer["releases"] if version_key(r) < version_key(last)]
    text = f"{last} → {(after or newer['releases'])[0]}"
    return text + (f" (also in {', '.join(earlier)})" if earlier else "")


def reduced(meta: Mapping[str, Any]) -> str:
    """What a history run left out of the full history ('' for a full one)."""
    hist = meta.get("history") or {}
    given = meta.get("parameters") or {}
    out = ["releases given"] if hist.get("releases_given") else []
    for name in ("cases", "pools"):
        have = [str(x) for x in given.get(name) or ()]
        if not {str(x) for x in HISTORY_DEFAULTS[name]} <= set(have):
            out.append(f"{name} {' '.join(have)}")
    return "; ".join(out)


def _headline_ids(runs: list[rawdata.Run]) -> set[str]:
    """Per host x interpreter: the newest full history, else the newest reduced one."""
    best: dict[tuple[str, str], tuple[bool, str, str]] = {}
    for run in runs:
        key = (run.host, run.interpreter)
        rank = (not reduced(run.meta), str(run.meta.get("started_at")), run.run_id)
        if key not in best or rank > best[key]:
            best[key] = rank
    return {rank[2] for rank in best.values()}


def analyze(
    raw: rawdata.RawData, confidence: float = stats.DEFAULT_CONFIDENCE
) -> dict[str, pd.DataFrame]:
    """Compute ``history`` and ``history_steps`` from the included history runs."""
    runs = [r for r in raw.of_kind(KIND).included if _versions(r.meta)]
    headline = _headline_ids(runs)
    rows: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for run in runs:
        versions = _versions(run.meta)
        labels = [v["label"] for v in versions]
        base = run.meta["baseline"]
        samples = run.samples
        assert samples is not None
        main = samples[samples["phase"] == "main"]
        medians = stats.process_medians(main, by=["case", "pool"])
        run_reduced = reduced(run.meta)
        ident = {
            "host": run.host,
            "interpreter": run.interpreter,
            "run_id": run.run_id,
            "headline": run.run_id in headline,
        }
        for (case, pool), cell in medians.groupby(["case", "pool"], sort=False):
            wide = cell.pivot(index="process", columns="variant", values="median_ns")
            for order, version in enumerate(versions):
                label = version["label"]
                if label not in wide:
                    continue
                ns = stats.order_statistic_interval(wide[label].dropna(), confidence=confidence)
                ratio = stats.order_statistic_interval(
                    (wide[label] / wide[base]).dropna(), confidence=confidence
                )
                rows.append(
                    {
                        **ident,
                        "case": case,
                        "pool": int(pool),
                        "version": label,
                        "order": order,
                        "reduced": run_reduced,
                        "releases": _span(version),
                        "first_release": version["releases"][0],
                        "last_release": version["releases"][-1],
                        "adapter": version.get("adapter") or "",
                        "n_processes": ns.n,
                        "ns": ns.estimate,
                        "ns_low": ns.low,
                        "ns_high": ns.high,
                        "ratio_to_newest": ratio.estimate,
                        "ratio_low": ratio.low,
                        "ratio_high": ratio.high,
                    }
                )
            for older, newer in itertools.pairwise(versions):
                a, b = older["label"], newer["label"]
                if a not in wide or b not in wide or a not in labels:
                    continue
                r = stats.order_statistic_interval(
                    (wide[b] / wide[a]).dropna(), confidence=confidence
                )
                low, high = r.low - 1.0, r.high - 1.0
                steps.append(
                    {
                        **ident,
                        "case": case,
                        "pool": int(pool),
                        "from_version": a,
                        "to_version": b,
                        "release_range": _step_range(older, newer),
                        "n_processes": r.n,
                        "change": r.estimate - 1.0,
                        "ci_low": low,
                        "ci_high": high,
                        "significant": bool(
                            math.isfinite(low) and math.isfinite(high) and (low > 0 or high < 0)
                        ),
                    }
                )
    return {
        "history": _frame(rows, "history"),
        "history_steps": _frame(steps, "history_steps"),
    }


def _frame(rows: list[dict[str, Any]], name: str) -> pd.DataFrame:
    spec = schema.PROCESSED_TABLES[name]
    df = pd.DataFrame(rows, columns=list(spec))
    df = df.astype(spec)
    keys = ["host", "interpreter", "run_id", "case", "pool"]
    keys += ["order"] if name == "history" else ["release_range"]
    return df.sort_values(keys, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------ display


def _pct(x: float, digits: int = 1) -> str:
    return "n/a" if not np.isfinite(x) else f"{x * 100:+.{digits}f}%"


def _ci(low: float, high: float) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "n/a"
    return f"[{low * 100:+.1f}, {high * 100:+.1f}]"


def step_table(data: Any) -> pd.DataFrame:
    """Release range -> change in time [95 % CI], one column per case (headline runs).

    Only steps that are significant in at least one case of their run are shown; a
    cell is ``+12.3% [+10.1, +14.0]`` (positive: the newer release takes longer), with
    ``*`` on significant cells.
    """
    steps = getattr(data, "history_steps", pd.DataFrame())
    if steps.empty:
        return pd.DataFrame()
    steps = steps[steps["headline"].astype(bool)]
    keep = steps.groupby(["host", "interpreter", "release_range"])["significant"].transform("any")
    steps = steps[keep]
    if steps.empty:
        return pd.DataFrame()
    steps = steps.assign(
        cell=[
            f"{_pct(r.change)} {_ci(r.ci_low, r.ci_high)}{' *' if r.significant else ''}"
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
    return wide.rename(
        columns={"host": "Host", "interpreter": "Interpreter", "release_range": "Release range"}
    ).reset_index(drop=True)


def _release_order(steps: pd.DataFrame) -> list[str]:
    ranges = steps["release_range"].unique().tolist()
    return sorted(ranges, key=lambda rr: version_key(rr.split(" → ")[-1].split(" (")[0]))


def note(data: Any) -> str:
    """The section's text: what was timed, how it is paired, and how to read it."""
    versions = getattr(data, "history", pd.DataFrame())
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
    cut = head.loc[head["reduced"] != "", ["host", "interpreter", "reduced"]].drop_duplicates()
    for r in cut.itertuples():
        text += (
            f" No full history of {r.host} / {r.interpreter} yet: the run shown is a "
            f"reduced one ({r.reduced})."
        )
    return text


def figure(data: Any) -> Any:
    """ns per cycle by version in release order, per interpreter (rows) and case
    (columns), with CI error bars; significant steps labelled with their release range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    versions = getattr(data, "history", pd.DataFrame())
    steps = getattr(data, "history_steps", pd.DataFrame())
    head = versions[versions["headline"].astype(bool)] if not versions.empty else versions
    if head.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.set_xlabel("vLLM release (oldest → newest)")
        ax.set_ylabel("ns per cycle")
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
    rows = sorted(head.groupby(["host", "interpreter"]).groups)
    cells = sorted(
        head.groupby(["case", "pool"]).groups, key=lambda c: (schema.case_rank(c[0]), c[1])
    )
    fig, axes = plt.subplots(
        len(rows), len(cells), figsize=(4.2 * len(cells), 3.4 * len(rows)), squeeze=False
    )
    for i, (host, interp) in enumerate(rows):
        for j, (case, pool) in enumerate(cells):
            ax = axes[i][j]
            sub = head[
                (head["host"] == host)
                & (head["interpreter"] == interp)
                & (head["case"] == case)
                & (head["pool"] == pool)
            ].sort_values("order")
            x = np.arange(len(sub))
            y = sub["ns"].to_numpy()
            err = np.vstack([y - sub["ns_low"].to_numpy(), sub["ns_high"].to_numpy() - y])
            ax.errorbar(x, y, yerr=np.nan_to_num(err), fmt="o-", ms=3, lw=1, capsize=2)
            ax.set_xticks(x)
            ax.set_xticklabels(sub["first_release"], rotation=70, fontsize=6)
            ax.set_title(f"{case} / {pool:,} — {interp} ({host})", fontsize=8)
            # Log scale: a step is the same height wherever it lies (0.9.2 is ~5x 0.32.0).
            ax.set_yscale("log")
            ax.set_ylabel("ns per cycle (log)" if j == 0 else "")
            if not steps.empty:
                st = steps[
                    steps["headline"].astype(bool)
                    & (steps["host"] == host)
                    & (steps["interpreter"] == interp)
                    & (steps["case"] == case)
                    & (steps["pool"] == pool)
                    & steps["significant"].astype(bool)
                ]
                pos = {v: k for k, v in enumerate(sub["version"])}
                # Every step whose interval excludes 0, labelled with the release range
                # it spans: vertical, small, alternately above and below the point, so
                # that neighbouring labels of 17 versions do not overlap.
                shown = [r for r in st.itertuples() if r.to_version in pos]
                for n, r in enumerate(sorted(shown, key=lambda r: pos[r.to_version])):
                    k, up = pos[r.to_version], n % 2 == 0
                    ax.annotate(
                        f"{r.release_range} {_pct(r.change, 0)}",
                        (k, y[k]),
                        textcoords="offset points",
                        xytext=(0, 5 if up else -5),
                        ha="center",
                        va="bottom" if up else "top",
                        rotation=90,
                        fontsize=4.5,
                        color="tab:red",
                    )
                if shown:
                    ax.margins(y=0.35)  # room for the vertical labels
            ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
