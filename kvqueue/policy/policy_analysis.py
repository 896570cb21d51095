"""Raw policy runs → the processed ``policy`` table (docs/design.md §12); the report shows
it through :mod:`kvqueue.policy.policy_present`.

Reading (:func:`read_runs`) parses what :mod:`kvqueue.rawdata.raw_reader` read: the
raw reader reads each run's recorded files once and checks them against the sha256 its
``run.json`` records (an edited or missing file makes the run *altered* there, named in
the ledger); here the checked bytes (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`) are
parsed, never read or hashed again. A malformed ``policy.csv`` is a
:class:`kvqueue.rawdata.raw_reader.RawDataError` (one line naming the file); a complete
run whose rows differ from the row count its ``run.json`` records, or do not match its
plan (processes ``1..completed`` × every policy, exactly once), is *altered* and left
out; so is one whose committed folder git reports modified
(:func:`kvqueue.rawdata.git_state.with_git_state`).

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
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.params import policy_params
from kvqueue.params.report_params import ReportSettings
from kvqueue.rawdata import host_keys, integrity, raw_reader
from kvqueue.stats import paired_stats

LRU = "lru"
#: Posting cost per descriptor of runs that did not record one: vLLM PR #55841's cluster
#: run, 79.6 ms for 23,252 descriptors (:class:`kvqueue.params.policy_params.PolicyParams`).
DEFAULT_DESC_COST_NS = 79.6e6 / 23_252
#: KV regions per block on one rank of runs that did not record one
#: (:data:`kvqueue.params.policy_params.DEFAULT_KV_REGIONS`): the PR's cost is per native
#: descriptor, one per (region, block); a READ's block-run posts one per region.
DEFAULT_KV_REGIONS = policy_params.DEFAULT_KV_REGIONS
#: Columns of whole numbers: every column but the names and the mean age-rank excess.
_INT_COLUMNS = tuple(
    c for c in schema.POLICY_COLUMNS if c not in ("policy", "window", "big_rank_excess")
)
T_INTERVAL = "student-t"
LOG_T_INTERVAL = "student-t (log scale)"
#: metric -> (label, how its interval is formed).
METRICS: dict[str, tuple[str, str]] = {
    "runs_per_big_alloc": ("runs per ≥threshold allocation", T_INTERVAL),
    "runs_reduction": ("descriptor reduction vs lru (×)", LOG_T_INTERVAL),
    "share_in_runs": ("share of blocks in runs ≥ 2", T_INTERVAL),
    "ns_per_alloc": ("ns per allocation", paired_stats.ORDER_STATISTIC),
    "ns_per_big_alloc": ("ns per ≥threshold allocation", paired_stats.ORDER_STATISTIC),
    "ns_ratio": ("time per allocation / lru's", paired_stats.ORDER_STATISTIC),
    "big_ns_ratio": ("time per ≥threshold allocation / lru's", paired_stats.ORDER_STATISTIC),
    "ns_per_big_block": ("ns per block of ≥threshold allocations", paired_stats.ORDER_STATISTIC),
    "big_block_ns_ratio": (
        "time per block of ≥threshold allocations / lru's",
        paired_stats.ORDER_STATISTIC,
    ),
    "passed_over": ("older free blocks passed over per ≥threshold allocation", T_INTERVAL),
    "rank_excess": ("mean age rank taken above popleft_n's, blocks", T_INTERVAL),
    "scanned": ("blocks searched per ≥threshold allocation", T_INTERVAL),
    "hit_share": ("prefix-cache hit share of prefill blocks", T_INTERVAL),
    # The steady-state protocol (schema.POLICY_PROTOCOL), per engine-age window:
    "desc_reduction": ("descriptors per READ, lru ÷ policy (×)", LOG_T_INTERVAL),
    "desc_per_read": ("descriptors per READ (both ends adjacent)", T_INTERVAL),
    "desc_p50": ("descriptors per READ, p50", T_INTERVAL),
    "desc_p90": ("descriptors per READ, p90", T_INTERVAL),
    "ns_per_request": ("allocator ns per request, both pools", paired_stats.ORDER_STATISTIC),
    "ns_added": ("allocator ns added per request vs lru", paired_stats.ORDER_STATISTIC),
    "ns_saved": (
        "block-runs saved × KV regions × posting cost, ns per READ",
        T_INTERVAL,
    ),
    "net_ns": ("net ns per request: saved − added", paired_stats.ORDER_STATISTIC),
    "break_even_regions": (
        "KV regions per block at which the posting saved pays for the allocator time added",
        paired_stats.ORDER_STATISTIC,
    ),
    "settled": ("the two halves' descriptor ratios agree (1) or not (0)", "interval overlap"),
    "requests": ("requests admitted per process in the window", T_INTERVAL),
}
#: ``protocol`` of the processed rows of runs before the steady-state protocol.
OLDER_PROTOCOL = "older: warm-up and measurement in engine steps"
#: ``age`` of the processed rows that combine both halves of the measurement.
STEADY = "steady"
#: Columns of the processed ``policy`` table (:data:`kvqueue.schema.PROCESSED_TABLES`).
TABLE_COLUMNS = tuple(schema.PROCESSED_TABLES["policy"])


# ---------------------------------------------------------------------------------------
# reading


def _fail(path: Path, problem: str) -> raw_reader.RawDataError:
    return raw_reader.RawDataError(path, problem)


def read_runs(runs: Iterable[raw_reader.Run]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The policy rows of the runs the raw-data reader included, each ``policy.csv`` (or
    ``policy_age.csv``) parsed from the bytes the reader read and checked
    (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`; no file is read again): the readable
    runs ``{path, meta, rows, altered}`` with rows, and ``{"<host>/<run_id>": why}`` for
    each run left out here."""
    out, problems = [], {}
    for run in runs:
        key = f"{run.host}/{run.run_id}"
        try:
            # A Run made by hand (not by the reader) carries no bytes: read them then.
            read = read_policy_run(run.path, run.meta, run.recorded or None)
        except raw_reader.RawDataError as exc:
            problems[key] = f"unreadable: {exc.path.name}: {exc.problem}"
            continue
        if read["altered"] is not None:
            problems[key] = f"altered: {read['altered']}"
        elif read["rows"] is not None:
            out.append(read)
    return out, problems


def read_policy_run(
    run_dir: Path, meta: dict[str, Any], recorded: Mapping[str, bytes] | None = None
) -> dict[str, Any]:
    """Check one policy run folder: ``{path, meta, rows, altered}``; ``rows`` is the
    checked ``policy.csv`` of a complete, unaltered run, else ``None``.

    ``recorded``: the run's recorded files as the raw reader read and checked them
    (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`); parsed, not read again. Without
    it (a run looked at alone), they are read and checked here by the same rule
    (:func:`kvqueue.rawdata.integrity.read_recorded_files`).
    """
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
    if meta["status"] != raw_reader.COMPLETE:
        return run
    if recorded is None:
        recorded, problem = integrity.read_recorded_files(run_dir, meta)
        if problem is not None:
            run["altered"] = problem
            return run
    if meta.get("protocol") == schema.POLICY_PROTOCOL:
        return _read_age_run(run_dir, meta, run, recorded)
    csv_path = run_dir / schema.POLICY_CSV
    data = _sealed_bytes(run_dir, schema.POLICY_CSV, recorded, run)
    if data is None:
        return run
    sealed = (meta.get(schema.FILES_KEY) or {}).get(schema.POLICY_CSV) or {}
    lines = list(csv.reader(data.decode("utf-8").splitlines()))
    if not lines or tuple(lines[0]) != schema.POLICY_COLUMNS:
        raise _fail(csv_path, f"header must be {','.join(schema.POLICY_COLUMNS)}")
    df = pd.DataFrame(lines[1:], columns=list(schema.POLICY_COLUMNS))
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


#: Columns of ``policy_age.csv`` that are not whole numbers.
_AGE_TEXT = ("policy", "window")
_AGE_FLOAT = ("window_from", "window_to", "age_from", "age_to")


def _sealed_bytes(
    run_dir: Path, name: str, recorded: Mapping[str, bytes], run: dict[str, Any]
) -> bytes | None:
    """The checked bytes of the run's file ``name``; ``None`` with ``run["altered"]`` set
    when ``run.json`` records no digest of a file that is there (nothing could tell it
    from an edited copy). A file neither recorded nor there is an error."""
    if name in recorded:
        return recorded[name]
    path = run_dir / name
    if not path.is_file():
        raise _fail(path, "missing (a complete policy run needs its rows)")
    run["altered"] = f"{name} sha256 differs from run.json (edited after the run)"
    return None


def _read_age_run(
    run_dir: Path, meta: dict[str, Any], run: dict[str, Any], recorded: Mapping[str, bytes]
) -> dict[str, Any]:
    """A complete steady-state run's ``policy_age.csv``, checked like ``policy.csv``: the
    digest (checked by the raw reader) and row count of ``run.json``, every process ×
    policy present, the same age windows for every process and policy."""
    csv_path = run_dir / schema.POLICY_AGE_CSV
    data = _sealed_bytes(run_dir, schema.POLICY_AGE_CSV, recorded, run)
    if data is None:
        return run
    sealed = (meta.get(schema.FILES_KEY) or {}).get(schema.POLICY_AGE_CSV) or {}
    lines = list(csv.reader(data.decode("utf-8").splitlines()))
    if not lines or tuple(lines[0]) != schema.POLICY_AGE_COLUMNS:
        raise _fail(csv_path, f"header must be {','.join(schema.POLICY_AGE_COLUMNS)}")
    df = pd.DataFrame(lines[1:], columns=list(schema.POLICY_AGE_COLUMNS))
    ints = [c for c in schema.POLICY_AGE_COLUMNS if c not in (*_AGE_TEXT, *_AGE_FLOAT)]
    try:
        for col in ints:
            df[col] = df[col].astype("int64")
        for col in _AGE_FLOAT:
            df[col] = df[col].astype(float)
    except ValueError as exc:
        raise _fail(csv_path, f"a number does not parse: {exc}") from None
    if (df[ints] < 0).to_numpy().any():
        raise _fail(csv_path, "counts must not be negative")
    completed = (meta.get("processes_completed") or {}).get("main")
    want = {(p, name) for p in range(1, (completed or 0) + 1) for name in meta["policies"]}
    got = set(zip(df["process"], df["policy"], strict=True))
    windows = df.groupby(["process", "policy"])["window_from"].apply(tuple)
    if sealed.get("rows") != len(df) or got != want or windows.nunique() != 1:
        run["altered"] = "policy_age.csv does not hold every process × policy × window once"
        return run
    if completed != (meta.get("processes_planned") or {}).get("main"):
        run["altered"] = "complete, but fewer processes than planned"
        return run
    run["rows"] = df
    return run


# ---------------------------------------------------------------------------------------
# statistics


@functools.lru_cache(maxsize=256)
def _t_quantile(confidence: float, dof: int) -> float:
    # One scipy call per (confidence, dof), not per interval: 1,764 calls of t.ppf were
    # 1.0 s of every report build with the committed policy runs.
    return float(paired_stats.scipy_stats().t.ppf(0.5 + confidence / 2, dof))


def t_interval(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean with its Student t interval (NaN bounds below two values)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(_t_quantile(confidence, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
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
            iv = paired_stats.order_statistic_interval(
                g[metric].dropna().to_numpy(), confidence=confidence
            )
            values[metric] = (iv.estimate, iv.low, iv.high)
        for metric, col in (
            ("ns_ratio", "ns_per_alloc"),
            ("big_ns_ratio", "ns_per_big_alloc"),
            ("big_block_ns_ratio", "ns_per_big_block"),
        ):
            ratio = (g[col] / lru[col]).dropna().to_numpy()
            iv = paired_stats.order_statistic_interval(ratio, confidence=confidence)
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


def _age_per_process(df: pd.DataFrame, cost_ns: float, regions: int) -> pd.DataFrame:
    """Per process and policy of a set of windows (summed): the per-process values."""
    g = df.groupby(["process", "policy"], sort=False)
    sums = g[
        [
            "reads",
            "descriptors",
            "big_runs",
            "big_allocations",
            "ns_total",
            "prefill_ns_total",
            "admitted",
            "hit_blocks",
            "prefill_blocks",
        ]
    ].sum()
    pct = g[["desc_p50", "desc_p90"]].mean()  # the windows' nearest-rank percentiles
    requests = sums["reads"].where(sums["reads"] > 0, sums["admitted"]).replace(0, np.nan)
    out = pd.DataFrame(
        {
            "desc_per_read": sums["descriptors"] / sums["reads"].replace(0, np.nan),
            "desc_p50": pct["desc_p50"].where(sums["reads"] > 0),
            "desc_p90": pct["desc_p90"].where(sums["reads"] > 0),
            "runs_per_big_alloc": sums["big_runs"] / sums["big_allocations"].replace(0, np.nan),
            "ns_per_request": (sums["ns_total"] + sums["prefill_ns_total"]) / requests,
            "hit_share": sums["hit_blocks"] / sums["prefill_blocks"].replace(0, np.nan),
            "requests": sums["admitted"].astype(float),
        }
    ).reset_index()
    lru = out[out["policy"] == LRU].set_index("process")
    out = out.set_index("process")
    base = lru.reindex(out.index)
    out["desc_reduction"] = base["desc_per_read"] / out["desc_per_read"]
    out["runs_reduction"] = base["runs_per_big_alloc"] / out["runs_per_big_alloc"]
    out["ns_added"] = out["ns_per_request"] - base["ns_per_request"]
    saved_per_region = (base["desc_per_read"] - out["desc_per_read"]) * cost_ns
    out["ns_saved"] = saved_per_region * regions
    out["net_ns"] = out["ns_saved"] - out["ns_added"]
    # Linear in the regions: the count at which saved = added. A policy that saves no
    # block-run (or adds no time) has none (inf), a policy that costs nothing needs 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        even = out["ns_added"].clip(lower=0) / saved_per_region
    out["break_even_regions"] = even.where(saved_per_region > 0, np.inf)
    return out.reset_index()


_AGE_LOG = ("desc_reduction", "runs_reduction")
_AGE_T = ("desc_per_read", "desc_p50", "desc_p90", "hit_share", "ns_saved", "requests")
#: Timing-based: the median over processes with the order-statistic interval (a process
#: that was descheduled inside a few calls moves a mean by milliseconds: 8 ms once in
#: 100 calls in a 2-process trial on the shared 2-vCPU VM).
_AGE_ORDER = ("ns_per_request", "ns_added", "net_ns", "break_even_regions")


def _age_values(per: pd.DataFrame, confidence: float) -> dict[str, dict[str, tuple]]:
    """policy -> metric -> (estimate, low, high) over processes."""
    out: dict[str, dict[str, tuple]] = {}
    for name, g in per.groupby("policy", sort=False):
        values: dict[str, tuple] = {}
        for metric in _AGE_T:
            values[metric] = t_interval(g[metric].to_numpy(), confidence)
        for metric in _AGE_LOG:
            x = np.log(g[metric].to_numpy(dtype=float))
            est, low, high = t_interval(x[np.isfinite(x)], confidence)
            values[metric] = (math.exp(est), math.exp(low), math.exp(high))
        for metric in _AGE_ORDER:
            iv = paired_stats.order_statistic_interval(
                g[metric].dropna().to_numpy(), confidence=confidence
            )
            values[metric] = (iv.estimate, iv.low, iv.high)
        values["_n"] = (len(g), 0, 0)
        out[str(name)] = values
    return out


def overlap(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether two (estimate, low, high) intervals overlap (NaN bounds: never)."""
    if not all(math.isfinite(v) for v in (*a[1:], *b[1:])):
        return False
    return a[1] <= b[2] and b[1] <= a[2]


def age_metrics(
    rows: pd.DataFrame, confidence: float, cost_ns: float, regions: int = DEFAULT_KV_REGIONS
) -> list[dict[str, Any]]:
    """One row per (age window, policy, metric) of a steady-state run: every window of
    the age curve, then ``steady`` (the two halves of the measurement summed) with the
    net line and ``settled`` (1 when the halves' descriptor-ratio intervals overlap)."""
    windows = sorted(set(zip(rows["window_from"], rows["window_to"], strict=True)))
    out: list[dict[str, Any]] = []

    def emit(label: str, lo: float, hi: float, values: dict[str, dict[str, tuple]]) -> None:
        for name, metrics in values.items():
            for metric, (est, low, high) in metrics.items():
                if metric == "_n" or (
                    name == LRU and metric in ("ns_added", "ns_saved", "break_even_regions")
                ):
                    continue
                out.append(
                    {
                        "age": label,
                        "age_from": lo,
                        "age_to": hi,
                        "policy": name,
                        "n_processes": int(metrics["_n"][0]),
                        "metric": metric,
                        "estimate": est,
                        "ci_low": low,
                        "ci_high": high,
                        "ci_method": METRICS[metric][1],
                    }
                )

    halves = []
    for lo, hi in windows:
        sub = rows[(rows["window_from"] == lo) & (rows["window_to"] == hi)]
        values = _age_values(_age_per_process(sub, cost_ns, regions), confidence)
        halves.append(values)
        emit(f"{lo:g}–{hi:g}", lo, hi, values)
    if len(windows) >= 2:
        (lo, _), (_, hi) = windows[-2], windows[-1]
        sub = rows[rows["window_from"] >= lo]
        values = _age_values(_age_per_process(sub, cost_ns, regions), confidence)
        for name in values:
            a = halves[-2].get(name, {}).get("desc_reduction")
            b = halves[-1].get(name, {}).get("desc_reduction")
            ok = a is not None and b is not None and overlap(a, b)
            values[name]["settled"] = (1.0 if ok else 0.0, math.nan, math.nan)
        emit(STEADY, lo, hi, values)
    return out


def _interpreter(meta: dict[str, Any]) -> str:
    py = meta.get("python") or {}
    return f"{py.get('implementation', 'Python')} {py.get('version', '?')}"


def analyze(
    runs: Sequence[dict[str, Any]],
    settings: ReportSettings | None = None,
    keys: host_keys.HostKeys | None = None,
) -> pd.DataFrame:
    """The processed ``policy`` table of the runs :func:`read_runs` read, long format
    (columns :data:`TABLE_COLUMNS`); ``headline`` marks the newest run per host ×
    interpreter × variant × regime.

    A host is one CPU under one label: ``host`` holds the run's host key from ``keys``
    (:func:`kvqueue.rawdata.host_keys.host_cpus` of every run; without it, the label),
    so a run on one CPU never supersedes a run on another."""
    settings = settings or ReportSettings()
    rows = []
    newest: dict[tuple[str, str, str, str], str] = {}
    for run in runs:
        meta = run["meta"]
        host = host_keys.host_key(keys, str(meta["host"]), str(meta["run_id"]))
        variant = str(meta["parameters"].get("variant", meta["variants"][0].get("source")))
        key = (host, _interpreter(meta), variant, _regime_key(meta))
        stamp = f"{meta.get('started_at', '')}|{meta['run_id']}"
        newest[key] = max(newest.get(key, ""), stamp)
        windows = dict(zip(run["rows"]["policy"], run["rows"]["window"], strict=True))
        params = meta["parameters"]
        steady = meta.get("protocol") == schema.POLICY_PROTOCOL
        regions = 0
        if steady:
            cost = float(params.get("desc_cost_ns", DEFAULT_DESC_COST_NS))
            regions = settings.kv_regions or int(params.get("kv_regions", DEFAULT_KV_REGIONS))
            metrics = age_metrics(run["rows"], settings.confidence, cost, regions)
        else:
            no_age = {"age": "", "age_from": math.nan, "age_to": math.nan}
            metrics = [{**no_age, **r} for r in run_metrics(run["rows"], settings.confidence)]
        regime = regime_label(meta) if steady else ""
        for r in metrics:
            rows.append(
                {
                    "host": host,
                    "interpreter": _interpreter(meta),
                    "run_id": meta["run_id"],
                    "variant": variant,
                    "_stamp": stamp,
                    "protocol": schema.POLICY_PROTOCOL if steady else OLDER_PROTOCOL,
                    "regime": regime,
                    "window": "" if r["policy"] == LRU else str(windows[r["policy"]]),
                    "threshold": int(params.get("threshold", 8)),
                    "kv_regions": regions,
                    **r,
                }
            )
    df = pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "_stamp"])
    if len(df):
        df["headline"] = [
            newest[(h, i, v, _regime_of(p, g))] == s
            for h, i, v, p, g, s in zip(
                df["host"],
                df["interpreter"],
                df["variant"],
                df["protocol"],
                df["regime"],
                df["_stamp"],
                strict=True,
            )
        ]
    df = df.drop(columns="_stamp")
    order = {name: i for i, name in enumerate(policy_order(df["policy"]))}
    metric_order = {m: i for i, m in enumerate(METRICS)}
    df = df.assign(_p=df["policy"].map(order), _m=df["metric"].map(metric_order))
    df = df.sort_values(
        ["host", "interpreter", "run_id", "age_from", "_p", "_m"],
        kind="stable",
        na_position="first",
    )
    return df.drop(columns=["_p", "_m"]).reset_index(drop=True)


def _regime_key(meta: dict[str, Any]) -> str:
    """The headline key's regime part: the newest run per host × interpreter × variant ×
    protocol × regime (the free order and the prefix share are part of the regime)."""
    if meta.get("protocol") != schema.POLICY_PROTOCOL:
        return _regime_of(OLDER_PROTOCOL, "")
    return _regime_of(schema.POLICY_PROTOCOL, regime_label(meta))


def regime_label(meta: dict[str, Any]) -> str:
    """The regime of a steady-state run as the report names it: ``trace``, or the label
    the run recorded (:func:`kvqueue.params.policy_params.regime_label`: the ``REGIME`` with the
    free order and hit structure where they differ from its preset), so that a
    sensitivity run is its own headline."""
    if meta.get("trace"):
        return "trace"
    return str(meta.get("regime_label") or meta["parameters"].get("regime", ""))


def _regime_of(protocol: str, regime: str) -> str:
    return f"{protocol}|{regime}"


def policy_order(names: pd.Series) -> list[str]:
    """Policy names in display order: ``lru``, then the windows ascending, ``inf`` last."""

    def key(name: str) -> tuple[int, float]:
        if name == LRU:
            return (0, 0.0)
        tail = name.removeprefix("contig-")
        return (1, math.inf if tail == "inf" else float(tail.removeprefix("w")))

    return sorted(set(names), key=key)
