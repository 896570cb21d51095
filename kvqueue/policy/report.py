"""Policy runs → the processed ``policy`` table, its display table, figure and paragraph
(docs/design.md §12).

Reading (:func:`read_policy_runs`) is as strict as :mod:`kvqueue.analysis.rawdata`: a malformed
``run.json`` or ``policy.csv`` is a :class:`kvqueue.analysis.rawdata.RawDataError` (one line
naming the file); a complete run whose ``policy.csv`` differs from the sha256 and row
count its ``run.json`` records, or whose rows do not match its plan (processes
``1..completed`` × every policy, exactly once), is *altered* and left out; so is one
whose committed folder git reports modified (:func:`with_git_state`).

Statistics, per run and policy, over the run's processes (each its own request stream,
so its own sample of the workload):

- timing (``ns_per_alloc``, ``ns_per_big_alloc``, ``ns_per_big_block``): the
  per-process mean ns per allocation (per block of the ≥threshold allocations); the
  estimate is the median over processes and the interval the project's interpolated
  order-statistic (Hettmansperger–Sheather) interval of that median, as for bench cells;
  ``ns_ratio`` / ``big_ns_ratio`` / ``big_block_ns_ratio`` are the same for the paired
  per-process ratio against ``lru`` (time of the policy / time of lru). The policies
  do not time the same allocations: eviction order decides which prefixes stay cached,
  so prefill sizes (and which allocations reach the threshold) differ between policies
  of one process. Per block removes the size difference to first order, not the
  per-call overhead, so the per-block ratio is the comparison the report leads with;
  ``hit_share`` shows how far the allocation sets differ;
- structural metrics (deterministic per seed): the mean over processes of the
  per-process value with a Student t interval (``runs_per_big_alloc``, ``share_in_runs``,
  ``passed_over``, ``rank_excess``, ``scanned``, ``hit_share``); ``runs_reduction`` is
  the geometric mean over processes of lru's runs per ≥threshold allocation divided by
  the policy's (the descriptor-count reduction factor), t interval on the log scale.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats as sps

from kvqueue import schema
from kvqueue.analysis import ab, rawdata, stats
from kvqueue.params.report import ReportSettings
from kvqueue.policy import collect as policy_collect

KIND = "policy"
POLICY_CSV = "policy.csv"
LRU = "lru"
#: ``policy.csv`` header: written by :mod:`kvqueue.policy.collect`, one definition.
COLUMNS = policy_collect.COLUMNS
#: Columns of whole numbers: every column but the names and the mean age-rank excess.
_INT_COLUMNS = tuple(c for c in COLUMNS if c not in ("policy", "window", "big_rank_excess"))
T_INTERVAL = "student-t"
LOG_T_INTERVAL = "student-t (log scale)"
#: metric -> (label, how its interval is formed).
METRICS: dict[str, tuple[str, str]] = {
    "runs_per_big_alloc": ("runs per ≥threshold allocation", T_INTERVAL),
    "runs_reduction": ("descriptor reduction vs lru (×)", LOG_T_INTERVAL),
    "share_in_runs": ("share of blocks in runs ≥ 2", T_INTERVAL),
    "ns_per_alloc": ("ns per allocation", stats.ORDER_STATISTIC),
    "ns_per_big_alloc": ("ns per ≥threshold allocation", stats.ORDER_STATISTIC),
    "ns_ratio": ("time per allocation / lru's", stats.ORDER_STATISTIC),
    "big_ns_ratio": ("time per ≥threshold allocation / lru's", stats.ORDER_STATISTIC),
    "ns_per_big_block": ("ns per block of ≥threshold allocations", stats.ORDER_STATISTIC),
    "big_block_ns_ratio": (
        "time per block of ≥threshold allocations / lru's",
        stats.ORDER_STATISTIC,
    ),
    "passed_over": ("older free blocks passed over per ≥threshold allocation", T_INTERVAL),
    "rank_excess": ("mean age rank taken above popleft_n's, blocks", T_INTERVAL),
    "scanned": ("blocks searched per ≥threshold allocation", T_INTERVAL),
    "hit_share": ("prefix-cache hit share of prefill blocks", T_INTERVAL),
}
#: Columns of the processed ``policy`` table (:data:`kvqueue.schema.PROCESSED_TABLES`).
TABLE_COLUMNS = tuple(schema.PROCESSED_TABLES["policy"])


# ---------------------------------------------------------------------------------------
# reading


def _fail(path: Path, problem: str) -> rawdata.RawDataError:
    return rawdata.RawDataError(path, problem)


def read_policy_runs(raw_dir: Path | str) -> list[dict[str, Any]]:
    """Every policy run under ``raw_dir``: ``{path, meta, rows, altered}``.

    ``rows`` is the checked ``policy.csv`` of a complete, unaltered run, else ``None``.

    Raises
    ------
    kvqueue.analysis.rawdata.RawDataError
        A malformed ``run.json`` or ``policy.csv`` (one line naming the file).
    """
    root = Path(raw_dir)
    if not root.is_dir():
        return []
    out = []
    for run_dir in rawdata.run_dirs(root):
        path = run_dir / schema.RUN_JSON
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not readable as JSON: the bench reader names it
        if not isinstance(meta, dict) or meta.get("kind") != KIND:
            continue
        out.append(read_policy_run(run_dir, meta))
    return out


def read_policy_run(run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Check one policy run folder (see :func:`read_policy_runs`)."""
    path = run_dir / schema.RUN_JSON
    for key in ("run_id", "host", "status", "parameters", "policies", "python", "variants"):
        if key not in meta:
            raise _fail(path, f"missing key {key} (a policy run)")
    if meta["run_id"] != run_dir.name or meta["host"] != run_dir.parent.name:
        raise _fail(path, "host/run_id do not match the folder")
    policies = meta["policies"]
    if not isinstance(policies, list) or LRU not in policies:
        raise _fail(path, "policies must be a list holding lru")
    run = {"path": run_dir, "meta": meta, "rows": None, "altered": None}
    if meta["status"] != rawdata.COMPLETE:
        return run
    csv_path = run_dir / POLICY_CSV
    if not csv_path.is_file():
        raise _fail(csv_path, "missing (a complete policy run needs its rows)")
    data = csv_path.read_bytes()
    sealed = (meta.get(schema.FILES_KEY) or {}).get(POLICY_CSV) or {}
    if sealed.get("sha256") != hashlib.sha256(data).hexdigest():
        run["altered"] = "policy.csv sha256 differs from run.json (edited after the run)"
        return run
    lines = list(csv.reader(data.decode("utf-8").splitlines()))
    if not lines or tuple(lines[0]) != COLUMNS:
        raise _fail(csv_path, f"header must be {','.join(COLUMNS)}")
    df = pd.DataFrame(lines[1:], columns=list(COLUMNS))
    try:
        for col in _INT_COLUMNS:
            df[col] = df[col].astype("int64")
        df["big_rank_excess"] = df["big_rank_excess"].astype(float)
    except ValueError as exc:
        raise _fail(csv_path, f"a number does not parse: {exc}") from None
    if (df[list(_INT_COLUMNS)] < 0).to_numpy().any():
        raise _fail(csv_path, "counts must not be negative")
    completed = (meta.get("processes_completed") or {}).get("main")
    want = {(p, name) for p in range(1, (completed or 0) + 1) for name in policies}
    got = list(zip(df["process"], df["policy"], strict=True))
    if sealed.get("rows") != len(df) or set(got) != want or len(got) != len(want):
        run["altered"] = "policy.csv does not hold every process × policy exactly once"
        return run
    if completed != (meta.get("processes_planned") or {}).get("main"):
        run["altered"] = "complete, but fewer processes than planned"
        return run
    run["rows"] = df
    return run


# ---------------------------------------------------------------------------------------
# statistics


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean with its Student t interval (NaN bounds below two values)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(sps.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def _per_process(df: pd.DataFrame) -> pd.DataFrame:
    big = df["big_allocations"].replace(0, np.nan)
    return pd.DataFrame(
        {
            "process": df["process"],
            "policy": df["policy"],
            "runs_per_big_alloc": df["big_runs"] / big,
            "share_in_runs": df["big_blocks_in_runs"] / df["big_blocks"].replace(0, np.nan),
            "ns_per_alloc": df["ns_total"] / df["allocations"].replace(0, np.nan),
            "ns_per_big_alloc": df["big_ns_total"] / big,
            "ns_per_big_block": df["big_ns_total"] / df["big_blocks"].replace(0, np.nan),
            "passed_over": df["big_passed_over"] / big,
            "rank_excess": df["big_rank_excess"] / big,
            "scanned": df["big_scanned"] / big,
            "hit_share": df["hit_blocks"] / df["prefill_blocks"].replace(0, np.nan),
        }
    )


def run_metrics(rows: pd.DataFrame, confidence: float) -> list[dict[str, Any]]:
    """One row per (policy, metric) of one run: estimate, interval, method."""
    per = _per_process(rows)
    lru = per[per["policy"] == LRU].set_index("process")
    out = []
    for name, grp in per.groupby("policy", sort=False):
        g = grp.set_index("process").loc[lru.index]
        values: dict[str, tuple[float, float, float]] = {}
        for metric in ("runs_per_big_alloc", "share_in_runs", "passed_over", "rank_excess"):
            values[metric] = t_interval(g[metric].to_numpy(), confidence)
        values["scanned"] = t_interval(g["scanned"].to_numpy(), confidence)
        values["hit_share"] = t_interval(g["hit_share"].to_numpy(), confidence)
        log_red = np.log(lru["runs_per_big_alloc"].to_numpy() / g["runs_per_big_alloc"].to_numpy())
        est, low, high = t_interval(log_red, confidence)
        values["runs_reduction"] = (math.exp(est), math.exp(low), math.exp(high))
        for metric in ("ns_per_alloc", "ns_per_big_alloc", "ns_per_big_block"):
            iv = stats.order_statistic_interval(
                g[metric].dropna().to_numpy(), confidence=confidence
            )
            values[metric] = (iv.estimate, iv.low, iv.high)
        for metric, col in (
            ("ns_ratio", "ns_per_alloc"),
            ("big_ns_ratio", "ns_per_big_alloc"),
            ("big_block_ns_ratio", "ns_per_big_block"),
        ):
            ratio = (g[col] / lru[col]).dropna().to_numpy()
            iv = stats.order_statistic_interval(ratio, confidence=confidence)
            values[metric] = (iv.estimate, iv.low, iv.high)
        for metric, (est, low, high) in values.items():
            out.append(
                {
                    "policy": name,
                    "n_processes": len(g),
                    "metric": metric,
                    "estimate": est,
                    "ci_low": low,
                    "ci_high": high,
                    "ci_method": METRICS[metric][1],
                }
            )
    return out


def _interpreter(meta: dict[str, Any]) -> str:
    py = meta.get("python") or {}
    return f"{py.get('implementation', 'Python')} {py.get('version', '?')}"


def with_git_state(
    runs: list[dict[str, Any]], git_states: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    """``runs`` with every complete run whose folder differs from its git commit altered
    (and its rows dropped), the rule :func:`kvqueue.analysis.ab.with_git_state` applies to
    bench and history runs: an edited committed run with recomputed digests passes the
    digest check, and git is the witness."""
    out = []
    for run in runs:
        meta = run["meta"]
        state = (git_states or {}).get(f"{meta['host']}/{meta['run_id']}")
        if state == ab.GIT_MODIFIED and run["rows"] is not None:
            run = {**run, "rows": None, "altered": "raw files differ from their git commit"}
        out.append(run)
    return out


def analyze(
    raw_dir: Path | str,
    settings: ReportSettings | None = None,
    git_states: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The processed ``policy`` table: every included policy run, long format
    (columns :data:`TABLE_COLUMNS`); ``headline`` marks the newest run per host ×
    interpreter × variant. ``git_states`` (``kvqueue.report.processed.git_states``): a run
    folder that differs from its commit is left out (:func:`with_git_state`)."""
    settings = settings or ReportSettings()
    rows = []
    newest: dict[tuple[str, str, str], str] = {}
    for run in with_git_state(read_policy_runs(raw_dir), git_states):
        if run["rows"] is None:
            continue
        meta = run["meta"]
        variant = str(meta["parameters"].get("variant", meta["variants"][0].get("source")))
        key = (meta["host"], _interpreter(meta), variant)
        stamp = f"{meta.get('started_at', '')}|{meta['run_id']}"
        newest[key] = max(newest.get(key, ""), stamp)
        windows = dict(zip(run["rows"]["policy"], run["rows"]["window"], strict=True))
        for r in run_metrics(run["rows"], settings.confidence):
            rows.append(
                {
                    "host": meta["host"],
                    "interpreter": _interpreter(meta),
                    "run_id": meta["run_id"],
                    "variant": variant,
                    "_stamp": stamp,
                    "window": "" if r["policy"] == LRU else str(windows[r["policy"]]),
                    "threshold": int(meta["parameters"].get("threshold", 8)),
                    **r,
                }
            )
    df = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "_stamp"])
    if len(df):
        df["headline"] = [
            newest[(h, i, v)] == s
            for h, i, v, s in zip(
                df["host"], df["interpreter"], df["variant"], df["_stamp"], strict=True
            )
        ]
    df = df.drop(columns="_stamp")
    order = {name: i for i, name in enumerate(_policy_order(df["policy"]))}
    metric_order = {m: i for i, m in enumerate(METRICS)}
    df = df.assign(_p=df["policy"].map(order), _m=df["metric"].map(metric_order))
    df = df.sort_values(["host", "interpreter", "run_id", "_p", "_m"], kind="stable")
    return df.drop(columns=["_p", "_m"]).reset_index(drop=True)


def _policy_order(names: pd.Series) -> list[str]:
    def key(name: str) -> tuple[int, float]:
        if name == LRU:
            return (0, 0.0)
        tail = name.removeprefix("contig-")
        return (1, math.inf if tail == "inf" else float(tail.removeprefix("w")))

    return sorted(set(names), key=key)


# ---------------------------------------------------------------------------------------
# display (the report)


def _fmt(x: float, digits: int) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:,.{digits}f}"


def _cell(row: pd.Series, digits: int, scale: float = 1.0) -> str:
    est, low, high = (row[c] * scale for c in ("estimate", "ci_low", "ci_high"))
    if not np.isfinite(est):
        return "n/a"
    if not (np.isfinite(low) and np.isfinite(high)):
        return _fmt(est, digits)
    return f"{_fmt(est, digits)} [{_fmt(low, digits)}, {_fmt(high, digits)}]"


#: Display columns: (metric, header, decimals, scale).
_DISPLAY = (
    ("runs_per_big_alloc", "runs / ≥T alloc", 2, 1.0),
    ("runs_reduction", "descriptors ÷ (vs lru)", 2, 1.0),
    ("share_in_runs", "blocks in runs ≥2 %", 1, 100.0),
    ("ns_per_alloc", "ns / alloc", 0, 1.0),
    ("ns_per_big_alloc", "ns / ≥T alloc", 0, 1.0),
    ("big_ns_ratio", "≥T time × lru", 2, 1.0),
    ("ns_per_big_block", "ns / block of ≥T", 1, 1.0),
    ("big_block_ns_ratio", "≥T time per block × lru", 2, 1.0),
    ("passed_over", "passed over / ≥T alloc", 1, 1.0),
    ("rank_excess", "age-rank excess", 1, 1.0),
    ("hit_share", "prefix hits %", 2, 100.0),
)


def display_table(data: Any) -> pd.DataFrame:
    """Rows host × interpreter × policy of the headline policy runs, one column per
    metric, each "estimate [CI]"."""
    df = _headline(data)
    if df.empty:
        return pd.DataFrame()
    rows = []
    for (host, interp, variant, _run_id), grp in df.groupby(
        ["host", "interpreter", "variant", "run_id"], sort=True
    ):
        threshold = int(grp["threshold"].iloc[0])
        for name in _policy_order(grp["policy"]):
            g = grp[grp["policy"] == name].set_index("metric")
            row = {
                "host": host,
                "interpreter": interp,
                "variant": variant,
                "policy": name,
                "window": "—" if name == LRU else g["window"].iloc[0],
                "processes": int(g["n_processes"].iloc[0]),
            }
            for metric, header, digits, scale in _DISPLAY:
                cell = _cell(g.loc[metric], digits, scale) if metric in g.index else "n/a"
                row[header.replace("T", str(threshold))] = cell
            rows.append(row)
    return pd.DataFrame(rows)


def _headline(data: Any) -> pd.DataFrame:
    df = getattr(data, "policy", None)
    if df is None or df.empty:
        return pd.DataFrame(columns=list(TABLE_COLUMNS))
    return df[df["headline"].fillna(False).astype(bool)]


def _get(grp: pd.DataFrame, name: str, metric: str) -> pd.Series | None:
    hit = grp[(grp["policy"] == name) & (grp["metric"] == metric)]
    return None if hit.empty else hit.iloc[0]


def note(data: Any) -> str:
    """The section's text: what was measured, and a reading of the trade-off, generated
    from the numbers of the headline policy runs."""
    df = _headline(data)
    if df.empty:
        return (
            "No policy run found. `make policy HOST=<label>` runs `lru` and the contiguous-run "
            "policy of vLLM PR #55841 at window factors 1, 2, 4, 8 and unbounded on a seeded "
            "serving-like churn workload."
        )
    ci = f"{round(100 * data.settings.confidence)}% CI"
    text = [
        "`lru` is `popleft_n` (vLLM's eviction order); `contig-wK` is the contiguous-run "
        "policy of vLLM PR #55841 (opt-in there), written from its description: for an "
        "allocation of at least T blocks (T in the column names) it searches the first "
        "K × n free blocks (`contig-inf`: the whole queue) for queue-adjacent runs of "
        "consecutive block ids, takes the longest first, each ascending, and fills the "
        "rest from the head. The workload is a seeded closed loop of concurrent requests "
        "(prefill allocation, one-block decode growth, reversed frees, prefix-cache hits "
        "removed from mid-queue), measured after a warm-up. *Runs* count the segments of "
        "the returned blocks whose ids step by +1, the descriptor-count proxy; "
        "*descriptors ÷* is lru's runs per allocation over the policy's. *Passed over*: "
        "older free blocks left in the queue ahead of the youngest block taken (0 for lru); "
        "*age-rank excess*: the mean queue position taken above what popleft_n takes.",
        f"Intervals ({ci}): timing columns are the median over processes of the per-process "
        "mean with the interpolated order-statistic interval (as for the bench cells); "
        "structural columns the mean over processes with a Student t interval "
        "(descriptors ÷ on the log scale). Each process has its own request stream; within "
        "a process every policy replays the same stream of requests, but not the same "
        "allocations: eviction order decides which prefixes stay cached, so prefill sizes "
        "(and which allocations reach T blocks) differ between policies (see prefix hits). "
        "Time per allocation therefore compares different allocation sets; time per block "
        "of the ≥ T allocations removes the size difference to first order (not the "
        "per-call overhead) and is the cost quoted below.",
    ]
    for (host, interp, variant), grp in df.groupby(["host", "interpreter", "variant"], sort=True):
        text.append(_reading(host, interp, variant, grp))
    return "\n\n".join(text)


def _reading(host: str, interp: str, variant: str, grp: pd.DataFrame) -> str:
    names = [n for n in _policy_order(grp["policy"]) if n != LRU]
    lru_runs = _get(grp, LRU, "runs_per_big_alloc")
    threshold = int(grp["threshold"].iloc[0])
    if lru_runs is None or not names:
        return f"**{host}, {interp}** ({variant}): no contiguous policy in the run."
    parts = [
        f"**{host}, {interp}** (`{variant}`): `lru` returns an allocation of ≥ {threshold} "
        f"blocks in {lru_runs['estimate']:.1f} runs on average."
    ]
    reds = []
    for name in names:
        red = _get(grp, name, "runs_reduction")
        cost = _get(grp, name, "big_block_ns_ratio")
        over = _get(grp, name, "passed_over")
        if red is None or cost is None or over is None:
            continue
        reds.append((name, red, cost, over))
    if reds:
        pieces = [
            f"`{n}` {r['estimate']:.2f}× fewer [{r['ci_low']:.2f}, {r['ci_high']:.2f}] at "
            f"{c['estimate']:.2f}× lru's time per block of ≥ {threshold} allocations, "
            f"passing over {o['estimate']:.0f} older blocks"
            for n, r, c, o in reds
        ]
        parts.append("Descriptors: " + "; ".join(pieces) + ".")
        best = max(reds, key=lambda t: t[1]["estimate"])
        cheapest = min(reds, key=lambda t: t[2]["estimate"])
        lo, hi = 2.3, 2.6  # the PR's cluster run: 23,252 -> 8,926-10,222 per READ
        where = (
            "below"
            if best[1]["ci_high"] < lo
            else "above"
            if best[1]["ci_low"] > hi
            else "in the range of"
        )
        parts.append(
            f"The largest reduction here, `{best[0]}` at {best[1]['estimate']:.2f}×, is {where} "
            f"the 2.3–2.6× of the PR's cluster run; the cheapest search, `{cheapest[0]}`, costs "
            f"{cheapest[2]['estimate']:.2f}× lru's time per block of ≥ {threshold} "
            f"allocations for {cheapest[1]['estimate']:.2f}× fewer descriptors."
        )
        hit_lru = _get(grp, LRU, "hit_share")
        hit_best = _get(grp, best[0], "hit_share")
        if hit_lru is not None and hit_best is not None:
            parts.append(
                f"Eviction order: prefix-cache hits cover {100 * hit_lru['estimate']:.2f}% of "
                f"prefill blocks under lru and {100 * hit_best['estimate']:.2f}% under "
                f"`{best[0]}`."
            )
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# figure


def figure(data: Any) -> Any:
    """Three panels against the window factor (headline policy runs): runs per
    ≥threshold allocation, time per block of ≥threshold allocations relative to lru,
    older blocks passed over; one line per host × interpreter × variant (one headline
    run each), error bars the intervals, lru dashed."""
    import seaborn as sns
    from matplotlib.figure import Figure

    df = _headline(data)
    sns.set_theme(style="whitegrid", context="notebook")
    fig = Figure(figsize=(13.0, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    if df.empty:
        for ax, title in zip(
            axes, ("runs per allocation", "time / lru's", "passed over"), strict=True
        ):
            ax.set_title(title, fontsize=11)
            ax.set_xticks(range(5), ["w1", "w2", "w4", "w8", "inf"])
            ax.set_yticks([])
            ax.text(
                0.5,
                0.5,
                "No policy run yet:\nmake policy HOST=<label>",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        return fig
    panels = (
        ("runs_per_big_alloc", "runs per ≥T allocation", False),
        ("big_block_ns_ratio", "time per block of ≥T allocations / lru's", True),
        ("passed_over", "older blocks passed over per ≥T allocation", False),
    )
    windows = [n for n in _policy_order(df["policy"]) if n != LRU]
    xs = {name: i for i, name in enumerate(windows)}
    labels = [n.removeprefix("contig-") for n in windows]
    # One line per headline run: the headline is per host × interpreter × variant, so two
    # variants on one host are two lines (grouped by host × interpreter they would join
    # into one zig-zag line, and lru's dashed reference would be either variant's).
    lines = ["host", "interpreter", "variant"]
    palette = sns.color_palette("colorblind", max(1, df.groupby(lines).ngroups))
    threshold = int(df["threshold"].iloc[0])
    for ax, (metric, title, log) in zip(axes, panels, strict=True):
        for k, ((host, interp, variant), grp) in enumerate(df.groupby(lines, sort=True)):
            color = palette[k % len(palette)]
            sub = grp[(grp["metric"] == metric) & (grp["policy"] != LRU)]
            sub = sub.assign(_x=sub["policy"].map(xs)).sort_values("_x")
            est = sub["estimate"].to_numpy()
            low = np.where(np.isfinite(sub["ci_low"]), sub["ci_low"], est)
            high = np.where(np.isfinite(sub["ci_high"]), sub["ci_high"], est)
            offset = k * 0.06  # side by side, not on top of each other
            ax.errorbar(
                sub["_x"].to_numpy() + offset,
                est,
                yerr=[est - low, high - est],
                marker="o",
                capsize=3,
                color=color,
                label=f"{host} · {interp} · {variant}",
            )
            base = _get(grp, LRU, metric)
            ref = (
                1.0
                if metric == "big_block_ns_ratio"
                else (base["estimate"] if base is not None else None)
            )
            if ref is not None:
                ax.axhline(ref, color=color, linestyle="--", linewidth=1, alpha=0.8)
        ax.set_xticks(range(len(windows)), labels)
        ax.set_xlabel("window factor (lru: dashed line)")
        ax.set_title(title.replace("T", str(threshold)), fontsize=11)
        if log:
            ax.set_yscale("log")
        elif metric == "passed_over":
            # The unbounded search passes over thousands of blocks, the windows tens.
            ax.set_yscale("symlog", linthresh=10)
    axes[0].legend(fontsize=8, loc="best")
    return fig
