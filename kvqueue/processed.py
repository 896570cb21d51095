"""Build the tidy tables in ``data/processed/`` from every run under ``data/raw/``.

``build`` reads and checks the raw runs (:mod:`kvqueue.rawdata`), computes the statistics
(:mod:`kvqueue.stats`) and writes one CSV per table plus ``manifest.json``. The output is
byte-identical on a rerun over the same raw data: rows are sorted, columns fixed, floats
written with one format, and nothing time-dependent is recorded. The report (notebook,
tables, figures, writeup) reads only these tables.

Tables (one row per ...)

``runs.csv``
    run found, complete or not; ``headline`` marks the newest complete run per
    host x interpreter (the one the headline tables show).
``variants.csv``
    variant of a run, with provenance (source, sha256s, gate result).
``process_medians.csv``
    (cell, variant, process): median, mean and CV of its samples.
``ratios.csv``
    (cell, comparison, process): the paired per-process ratio.
``summary.csv``
    (cell, comparison): headline statistics, CI, verdict, A/A half-width.
``order_effects.csv``
    cell: the order-position effect with its CI and a warning flag.
``floor_gap.csv``
    (cell, comparison, bound): share of the gap to the lower bound that is closed.

A *cell* is ``host, interpreter, run_id, phase, case, pool``; a *comparison* is
``candidate`` vs ``baseline`` with ``kind`` ``"pair"`` or ``"aa"`` (an A/A duplicate
``X#2`` vs ``X``: the noise floor).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import rawdata, schema, stats

DEFAULT_PAIRS: tuple[tuple[str, str], ...] = (
    ("vllm==0.32.0", "vllm==0.31.0"),  # the upstream change
    ("kvqueue", "vllm==0.32.0"),  # our queue against current upstream
)
CELL = ("host", "interpreter", "run_id", "phase", "case", "pool")
COMPARISON = ("candidate", "baseline", "kind")
PAIR = "pair"
AA = "aa"
MANIFEST = "manifest.json"
# Enough digits to re-derive every statistic; one fixed format keeps the files stable.
FLOAT_FORMAT = "%.9g"
_MANIFEST_FORMAT = 1
# The code that determines the processed numbers; a change invalidates the manifest.
_CODE_FILES = ("rawdata.py", "stats.py", "processed.py", "schema.py")

_S, _I, _F, _B = "string", "Int64", "float64", "boolean"
_CELL_SPEC = {
    "host": _S,
    "interpreter": _S,
    "run_id": _S,
    "phase": _S,
    "case": _S,
    "pool": _I,
}
_CMP_SPEC = {"candidate": _S, "baseline": _S, "kind": _S}
#: Column order and dtype of every processed table.
TABLES: dict[str, dict[str, str]] = {
    "runs": {
        "host": _S,
        "interpreter": _S,
        "run_id": _S,
        "status": _S,
        "included": _B,
        "headline": _B,
        "note": _S,
        "started_at": _S,
        "ended_at": _S,
        "python_implementation": _S,
        "python_version": _S,
        "python_tag": _S,
        "python_build": _S,
        "python_compiler": _S,
        "python_executable": _S,
        "hostname": _S,
        "cpu_model": _S,
        "cpu_count": _I,
        "kernel": _S,
        "platform": _S,
        "governor": _S,
        "load_avg_start": _S,
        "load_avg_end": _S,
        "baseline": _S,
        "block_source": _S,
        "processes": _I,
        "confirm_processes": _I,
        "samples": _I,
        "sample_ms": _F,
        "warmup_ms": _F,
        "pools": _S,
        "cases": _S,
        "confirm_cases": _S,
        "cpu": _S,
        "gc": _S,
        "run_seed": _S,
        "quick": _B,
        "aa": _B,
        "processes_planned_main": _I,
        "processes_planned_confirm": _I,
        "processes_completed_main": _I,
        "processes_completed_confirm": _I,
        "pinned_processes": _I,
        "gates_passed": _I,
        "commit": _S,
        "dirty": _B,
        "n_samples": _I,
    },
    "variants": {
        "host": _S,
        "run_id": _S,
        "position": _I,
        "label": _S,
        "source": _S,
        "class_name": _S,
        "vllm_version": _S,
        "class_sha256": _S,
        "file_sha256": _S,
        "block_source": _S,
        "block_class_sha256": _S,
        "is_bound": _B,
        "gate_ok": _B,
        "gate_ops_checked": _I,
        "gate_invalid_compared": _I,
    },
    "process_medians": {
        **_CELL_SPEC,
        "variant": _S,
        "process": _I,
        "n_samples": _I,
        "median_ns": _F,
        "mean_ns": _F,
        "cv": _F,
    },
    "ratios": {
        **_CELL_SPEC,
        **_CMP_SPEC,
        "process": _I,
        "baseline_ns": _F,
        "candidate_ns": _F,
        "ratio": _F,
    },
    "summary": {
        **_CELL_SPEC,
        **_CMP_SPEC,
        "headline": _B,
        "n_processes": _I,
        "baseline_ns": _F,
        "candidate_ns": _F,
        "reduction": _F,
        "ci_low": _F,
        "ci_high": _F,
        "ci_method": _S,
        "share_faster": _F,
        "cv_baseline": _F,
        "cv_candidate": _F,
        "verdict": _S,
        "aa_half_width": _F,
    },
    "order_effects": {
        **_CELL_SPEC,
        "headline": _B,
        "n_processes": _I,
        "positions": _I,
        "effect": _F,
        "ci_low": _F,
        "ci_high": _F,
        "headline_half_width": _F,
        "warn": _B,
    },
    "floor_gap": {
        **_CELL_SPEC,
        "candidate": _S,
        "baseline": _S,
        "bound": _S,
        "headline": _B,
        "n_processes": _I,
        "candidate_reduction": _F,
        "bound_reduction": _F,
        "bound_ci_low": _F,
        "bound_ci_high": _F,
        "gap_closed": _F,
        "ci_low": _F,
        "ci_high": _F,
    },
}


@dataclass(frozen=True)
class Settings:
    """Analysis settings (the report notebook's parameters).

    Attributes
    ----------
    pairs
        ``(candidate, baseline)`` label pairs compared wherever a run has both.
    confidence
        CI level.
    resamples
        Bootstrap resamples (>= 10,000 for the report).
    seed
        Seed of every bootstrap call.
    delta
        Equivalence band of the verdict (fraction).
    method
        scipy bootstrap method.
    """

    pairs: tuple[tuple[str, str], ...] = DEFAULT_PAIRS
    confidence: float = stats.DEFAULT_CONFIDENCE
    resamples: int = stats.DEFAULT_RESAMPLES
    seed: int = stats.DEFAULT_SEED
    delta: float = stats.DEFAULT_DELTA
    method: str = stats.CI_METHOD

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Settings:
        """Build settings from JSON-like values (lists become tuples)."""
        values = dict(values)
        if "pairs" in values:
            values["pairs"] = tuple((str(c), str(b)) for c, b in values["pairs"])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready values."""
        out = asdict(self)
        out["pairs"] = [list(p) for p in self.pairs]
        return out

    def bootstrap(self) -> dict[str, Any]:
        """Keyword arguments for the :mod:`kvqueue.stats` bootstrap functions."""
        return {
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "method": self.method,
        }


@dataclass(frozen=True)
class Processed:
    """All processed tables of one build (see the module docstring)."""

    settings: Settings
    runs: pd.DataFrame
    variants: pd.DataFrame
    process_medians: pd.DataFrame
    ratios: pd.DataFrame
    summary: pd.DataFrame
    order_effects: pd.DataFrame
    floor_gap: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """Return a table by its file stem (``"summary"``, ...)."""
        return getattr(self, name)

    def headline_runs(self) -> pd.DataFrame:
        """The rows of ``runs`` that are headline runs (newest complete per host x python)."""
        return self.runs[self.runs["headline"].fillna(False)]

    def in_headline_runs(self, df: pd.DataFrame, phase: str) -> pd.DataFrame:
        """Rows of ``df`` (a table without a ``headline`` column) of ``phase`` in a
        headline run."""
        heads = self.headline_runs()[["host", "run_id"]]
        return df[df["phase"] == phase].merge(heads, on=["host", "run_id"])


# ---------------------------------------------------------------------------------------
# comparisons


def comparisons_for_run(
    labels: Sequence[str],
    baseline: str,
    bound_labels: Iterable[str],
    pairs: Sequence[tuple[str, str]],
) -> list[tuple[str, str, str]]:
    """Return the ``(candidate, baseline, kind)`` comparisons made within one run.

    Parameters
    ----------
    labels
        The run's variant labels.
    baseline
        The run's baseline label.
    bound_labels
        Labels of lower bounds (never a candidate of a fallback comparison).
    pairs
        Configured pairs; those whose two labels are in the run are used.

    Returns
    -------
    list of tuple
        Configured pairs present in the run; when none is present, every candidate
        (not an A/A copy, not a bound) against the run's baseline, so any run still
        gets compared. Plus one ``"aa"`` comparison ``X#k`` vs ``X`` per A/A copy.
    """
    present = set(labels)
    bounds = set(bound_labels)
    out = [(c, b, PAIR) for c, b in pairs if c in present and b in present and c != b]
    if not out:
        out = [
            (lab, baseline, PAIR)
            for lab in labels
            if lab != baseline and lab not in bounds and aa_original(lab) is None
        ]
    out.extend((lab, orig, AA) for lab in labels if (orig := aa_original(lab)) in present)
    return out


def aa_original(label: str) -> str | None:
    """Return ``X`` for an A/A copy label ``X#2`` (``X#3``, ...), else ``None``."""
    base, sep, num = label.rpartition("#")
    return base if sep and base and num.isdigit() and int(num) >= 2 else None


# ---------------------------------------------------------------------------------------
# build


def _none_to_na(value: Any) -> Any:
    return pd.NA if value is None else value


def _joined(values: Any) -> Any:
    if isinstance(values, list | tuple):
        return " ".join(str(v) for v in values)
    return _none_to_na(values)


def _recency(run: rawdata.Run) -> tuple[float, str]:
    # Newest by start time; the run id (which starts with a UTC stamp) breaks ties and
    # orders runs whose start time is unreadable.
    return (run.started.timestamp() if run.started else float("-inf"), run.run_id)


def _runs_table(raw: rawdata.RawData) -> pd.DataFrame:
    newest: dict[tuple[str, str], rawdata.Run] = {}
    for run in raw.complete:
        key = (run.host, run.interpreter)
        if key not in newest or _recency(run) > _recency(newest[key]):
            newest[key] = run
    rows = []
    for run in raw.runs:
        m = run.meta
        machine, py, params = m["machine"], m["python"], m["parameters"]
        planned = m.get("processes_planned") or {}
        completed = m.get("processes_completed") or {}
        info = m.get("process_info") or []
        headline = run.complete and newest[(run.host, run.interpreter)] is run
        if not run.complete:
            note = f"left out: status {run.status}"
        elif headline:
            note = "headline"
        else:
            note = "older run (not in the headline tables)"
        base_var = next(v for v in m["variants"] if v["label"] == m["baseline"])
        rows.append(
            {
                "host": run.host,
                "interpreter": run.interpreter,
                "run_id": run.run_id,
                "status": run.status,
                "included": run.complete,
                "headline": headline,
                "note": note,
                "started_at": _none_to_na(m.get("started_at")),
                "ended_at": _none_to_na(m.get("ended_at")),
                "python_implementation": _none_to_na(py.get("implementation")),
                "python_version": _none_to_na(py.get("version")),
                "python_tag": _none_to_na(py.get("tag")),
                "python_build": _none_to_na(py.get("build")),
                "python_compiler": _none_to_na(py.get("compiler")),
                "python_executable": _none_to_na(py.get("executable")),
                "hostname": _none_to_na(machine.get("hostname")),
                "cpu_model": _none_to_na(machine.get("cpu_model")),
                "cpu_count": _none_to_na(machine.get("cpu_count")),
                "kernel": _none_to_na(machine.get("kernel")),
                "platform": _none_to_na(machine.get("platform")),
                "governor": _none_to_na(machine.get("governor")),
                "load_avg_start": _joined(machine.get("load_avg_start")),
                "load_avg_end": _joined(machine.get("load_avg_end")),
                "baseline": m["baseline"],
                "block_source": _none_to_na(base_var.get("block_source")),
                "processes": _none_to_na(params.get("processes")),
                "confirm_processes": _none_to_na(params.get("confirm_processes")),
                "samples": _none_to_na(params.get("samples")),
                "sample_ms": _none_to_na(params.get("sample_ms")),
                "warmup_ms": _none_to_na(params.get("warmup_ms")),
                "pools": _joined(params.get("pools")),
                "cases": _joined(params.get("cases")),
                "confirm_cases": _joined(params.get("confirm_cases")),
                "cpu": _joined(params.get("cpu")),
                "gc": _joined(params.get("gc")),
                "run_seed": _joined((m.get("seeds") or {}).get("run", params.get("seed"))),
                "quick": _none_to_na(params.get("quick")),
                "aa": _none_to_na(params.get("aa")),
                "processes_planned_main": _none_to_na(planned.get("main")),
                "processes_planned_confirm": _none_to_na(planned.get("confirm")),
                "processes_completed_main": _none_to_na(completed.get("main")),
                "processes_completed_confirm": _none_to_na(completed.get("confirm")),
                "pinned_processes": sum(1 for p in info if isinstance(p, dict) and p.get("pinned")),
                "gates_passed": sum(
                    1 for v in m["variants"] if (v.get("gate") or {}).get("ok") is True
                ),
                "commit": _none_to_na((m.get("project") or {}).get("commit")),
                "dirty": _none_to_na((m.get("project") or {}).get("dirty")),
                "n_samples": len(run.samples) if run.samples is not None else pd.NA,
            }
        )
    return _conform(pd.DataFrame(rows), "runs", sort=["host", "interpreter", "run_id"])


def _variants_table(raw: rawdata.RawData) -> pd.DataFrame:
    rows = []
    for run in raw.runs:
        for pos, v in enumerate(run.meta["variants"]):
            gate = v.get("gate") or {}
            rows.append(
                {
                    "host": run.host,
                    "run_id": run.run_id,
                    "position": pos,
                    "label": v["label"],
                    "source": v["source"],
                    "class_name": _none_to_na(v.get("class_name")),
                    "vllm_version": _none_to_na(v.get("vllm_version")),
                    "class_sha256": _none_to_na(v.get("class_sha256")),
                    "file_sha256": _none_to_na(v.get("file_sha256")),
                    "block_source": _none_to_na(v.get("block_source")),
                    "block_class_sha256": _none_to_na(v.get("block_class_sha256")),
                    "is_bound": bool(v.get("is_bound", False)),
                    "gate_ok": _none_to_na(gate.get("ok")),
                    "gate_ops_checked": _none_to_na(gate.get("ops_checked")),
                    "gate_invalid_compared": _none_to_na(gate.get("invalid_compared")),
                }
            )
    return _conform(pd.DataFrame(rows), "variants", sort=["host", "run_id", "position"])


def _all_samples(raw: rawdata.RawData) -> pd.DataFrame:
    frames = []
    for run in raw.complete:
        assert run.samples is not None  # complete runs always carry samples
        df = run.samples.copy()
        df.insert(0, "host", run.host)
        df.insert(1, "interpreter", run.interpreter)
        df.insert(2, "run_id", run.run_id)
        frames.append(df)
    if not frames:
        cols = ["host", "interpreter", "run_id", *schema.SAMPLE_COLUMNS]
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.concat(frames, ignore_index=True)


def _case_rank(cases: pd.Series) -> pd.Series:
    order = {c: i for i, c in enumerate(schema.CASES)}
    return cases.map(lambda c: order.get(c, len(order)))


def _missing(value: Any) -> bool:
    return value is None or (not isinstance(value, list | tuple | dict) and bool(pd.isna(value)))


def _conform(df: pd.DataFrame, table: str, sort: Sequence[str] | None = None) -> pd.DataFrame:
    """Fix column order and dtypes of a processed table; sort its rows."""
    spec = TABLES[table]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in spec.items()})
    out = df.reindex(columns=list(spec))
    for col, dtype in spec.items():
        if dtype == _S:
            out[col] = out[col].map(lambda v: pd.NA if _missing(v) else str(v))
        elif dtype == _F:
            # Optional metadata (absent in run.json) becomes NaN, the float "missing".
            out[col] = out[col].map(lambda v: np.nan if _missing(v) else v)
        out[col] = out[col].astype(dtype)
    if sort:
        keys = list(sort)
        if "case" in keys:
            out["_case"] = _case_rank(out["case"])
            keys = [("_case" if k == "case" else k) for k in keys]
        out = out.sort_values(keys, kind="stable").drop(columns=["_case"], errors="ignore")
    return out.reset_index(drop=True)


def _of_run(df: pd.DataFrame, run: rawdata.Run) -> pd.DataFrame:
    return df[(df["host"] == run.host) & (df["run_id"] == run.run_id)]


def analyze(raw: rawdata.RawData, settings: Settings) -> Processed:
    """Compute every processed table from checked raw runs (no I/O).

    Parameters
    ----------
    raw
        Output of :func:`kvqueue.rawdata.read_raw`.
    settings
        Pairs, bootstrap settings and the verdict band.

    Returns
    -------
    Processed
    """
    boot = settings.bootstrap()
    runs = _runs_table(raw)
    variants = _variants_table(raw)
    headline_runs = runs.loc[runs["headline"].fillna(False), ["host", "run_id"]]
    headline_ids = set(headline_runs.itertuples(index=False, name=None))
    samples = _all_samples(raw)
    medians = stats.process_medians(samples, CELL) if len(samples) else samples.iloc[0:0]
    cell = list(CELL)

    # Paired per-process ratios of every comparison in every complete run.
    ratio_frames = []
    for run in raw.complete:
        bound = [v["label"] for v in run.meta["variants"] if v.get("is_bound")]
        labels = [v["label"] for v in run.meta["variants"]]
        run_medians = _of_run(medians, run)
        for cand, base, kind in comparisons_for_run(
            labels, run.meta["baseline"], bound, settings.pairs
        ):
            r = stats.paired_ratios(run_medians, cand, base, cell)
            r.insert(len(cell) + 2, "kind", kind)
            ratio_frames.append(r)
    ratios = pd.concat(ratio_frames, ignore_index=True) if ratio_frames else pd.DataFrame()
    ratios = _conform(ratios, "ratios", sort=[*cell, "kind", "candidate", "baseline", "process"])

    # One summary row per (cell, comparison).
    medians_by_cell = {k: g for k, g in medians.groupby(cell, sort=True)}
    rows = []
    for key, grp in ratios.groupby([*cell, *COMPARISON], sort=True):
        cell_key = tuple(key[: len(cell)])
        row = dict(zip([*cell, *COMPARISON], key, strict=True))
        row.update(
            stats.summarize_pair(grp, medians_by_cell[cell_key], delta=settings.delta, **boot)
        )
        row["headline"] = (row["host"], row["run_id"]) in headline_ids
        rows.append(row)
    summary = pd.DataFrame(rows)
    if len(summary):
        aa = summary[summary["kind"] == AA].assign(
            aa_half_width=lambda d: (d["ci_high"] - d["ci_low"]) / 2
        )
        aa_hw = aa.groupby(cell, sort=True)["aa_half_width"].max().reset_index()
        summary = summary.merge(aa_hw, on=cell, how="left")
    summary = _conform(summary, "summary", sort=[*cell, "kind", "candidate", "baseline"])

    # Order effect per cell, against the tightest headline CI of that cell.
    pair_rows = summary[summary["kind"] == PAIR]
    tightest = ((pair_rows["ci_high"] - pair_rows["ci_low"]) / 2).groupby(
        [pair_rows[c] for c in cell]
    )
    tightest_by_cell = (
        {tuple(k): float(v) for k, v in tightest.min().items()} if len(pair_rows) else {}
    )
    order_rows = []
    if len(samples):
        for key, grp in samples.groupby(cell, sort=True):
            est = stats.order_effect(grp, **boot)
            ref = tightest_by_cell.get(tuple(key), np.nan)
            order_rows.append(
                {
                    **dict(zip(cell, key, strict=True)),
                    "headline": (key[0], key[2]) in headline_ids,
                    "n_processes": est.n,
                    "positions": int(grp["order_position"].max()) + 1,
                    "effect": est.estimate,
                    "ci_low": est.low,
                    "ci_high": est.high,
                    "headline_half_width": ref,
                    # Warn only for an effect that is real (CI excludes 0) AND larger than
                    # the precision of the comparisons; a point estimate alone is noise.
                    "warn": bool(
                        np.isfinite(ref)
                        and abs(est.estimate) > ref
                        and (est.low > 0 or est.high < 0)
                    ),
                }
            )
    order_effects = _conform(pd.DataFrame(order_rows), "order_effects", sort=cell)

    floor_gap = _conform(
        pd.DataFrame(_floor_gap_rows(raw, medians, ratios, headline_ids, boot)),
        "floor_gap",
        sort=[*cell, "candidate", "baseline", "bound"],
    )
    medians = _conform(medians, "process_medians", sort=[*cell, "variant", "process"])
    return Processed(settings, runs, variants, medians, ratios, summary, order_effects, floor_gap)


def _floor_gap_rows(
    raw: rawdata.RawData,
    medians: pd.DataFrame,
    ratios: pd.DataFrame,
    headline_ids: set[tuple[str, str]],
    boot: dict[str, Any],
) -> list[dict[str, Any]]:
    """Gap closed towards each lower bound, for every compared pair of a run with one."""
    cell = list(CELL)
    rows: list[dict[str, Any]] = []
    for run in raw.complete:
        bounds = [v["label"] for v in run.meta["variants"] if v.get("is_bound")]
        if not bounds:
            continue
        run_medians = _of_run(medians, run)
        run_pairs = _of_run(ratios, run)
        run_pairs = run_pairs[run_pairs["kind"] == PAIR]
        for (cand, base), cand_r in run_pairs.groupby(["candidate", "baseline"], sort=True):
            for bound in bounds:
                if bound in (cand, base):
                    continue
                bound_r = stats.paired_ratios(run_medians, bound, base, cell)
                both = cand_r.merge(bound_r, on=[*cell, "process"], suffixes=("_c", "_f"))
                for key, grp in both.groupby(cell, sort=True):
                    bound_est = stats.reduction_interval(grp["ratio_f"].to_numpy(), **boot)
                    cand_est = stats.reduction_interval(grp["ratio_c"].to_numpy(), **boot)
                    # The share is only defined when the bound is clearly faster than the
                    # baseline; otherwise the denominator's CI reaches 0.
                    if bound_est.low > 0:
                        gap = stats.gap_closed(
                            grp["ratio_c"].to_numpy(), grp["ratio_f"].to_numpy(), **boot
                        )
                        values = (gap.estimate, gap.low, gap.high)
                    else:
                        values = (np.nan, np.nan, np.nan)
                    rows.append(
                        {
                            **dict(zip(cell, key, strict=True)),
                            "candidate": cand,
                            "baseline": base,
                            "bound": bound,
                            "headline": (run.host, run.run_id) in headline_ids,
                            "n_processes": len(grp),
                            "candidate_reduction": cand_est.estimate,
                            "bound_reduction": bound_est.estimate,
                            "bound_ci_low": bound_est.low,
                            "bound_ci_high": bound_est.high,
                            "gap_closed": values[0],
                            "ci_low": values[1],
                            "ci_high": values[2],
                        }
                    )
    return rows


# ---------------------------------------------------------------------------------------
# files


def fingerprint(raw_dir: Path | str) -> dict[str, str]:
    """sha256 of every raw file the analysis reads, keyed by path relative to ``raw_dir``."""
    root = Path(raw_dir)
    out = {}
    for run_dir in rawdata.run_dirs(root):
        for name in (rawdata.RUN_JSON, rawdata.SAMPLES_CSV):
            path = run_dir / name
            if path.is_file():
                out[path.relative_to(root).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return out


def _code_hash() -> str:
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _CODE_FILES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def _manifest(raw_dir: Path | str, settings: Settings) -> dict[str, Any]:
    return {
        "format": _MANIFEST_FORMAT,
        "settings": settings.to_dict(),
        "code_sha256": _code_hash(),
        "inputs": fingerprint(raw_dir),
        "tables": [f"{name}.csv" for name in TABLES],
    }


def write(data: Processed, processed_dir: Path | str) -> list[Path]:
    """Write every table as CSV plus ``manifest.json``; return the paths written."""
    out_dir = Path(processed_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in TABLES:
        path = out_dir / f"{name}.csv"
        data.table(name).to_csv(path, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
        paths.append(path)
    path = out_dir / MANIFEST
    path.write_text(json.dumps(data.manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths.append(path)
    return paths


def build(
    raw_dir: Path | str, processed_dir: Path | str, settings: Settings | None = None
) -> Processed:
    """Read all raw runs, compute the tables and write them to ``processed_dir``.

    Parameters
    ----------
    raw_dir
        Raw-data root (``data/raw``).
    processed_dir
        Output folder (``data/processed``); created if needed.
    settings
        Analysis settings (defaults: :class:`Settings`).

    Returns
    -------
    Processed

    Raises
    ------
    kvqueue.rawdata.RawDataError
        On the first missing or malformed raw file.
    """
    settings = settings or Settings()
    raw = rawdata.read_raw(raw_dir)
    data = analyze(raw, settings)
    data = Processed(**{**data.__dict__, "manifest": _manifest(raw_dir, settings)})
    write(data, processed_dir)
    return data


def load(processed_dir: Path | str) -> Processed:
    """Read the tables written by :func:`build`.

    Parameters
    ----------
    processed_dir
        Folder holding the CSVs and ``manifest.json``.

    Returns
    -------
    Processed
    """
    folder = Path(processed_dir)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    tables = {}
    for name, spec in TABLES.items():
        df = pd.read_csv(
            folder / f"{name}.csv",
            dtype={c: ("boolean" if t == _B else t) for c, t in spec.items()},
            keep_default_na=False,
            na_values=[""],
        )
        tables[name] = df[list(spec)]
    return Processed(Settings.from_dict(manifest["settings"]), manifest=manifest, **tables)


def ensure(
    raw_dir: Path | str, processed_dir: Path | str, settings: Settings | None = None
) -> Processed:
    """Load the processed tables, rebuilding them when the raw data or settings changed.

    ``kvqueue report`` builds first and then runs the notebook, which calls this: the
    manifest matches and the bootstrap is not repeated. Opened on its own, the notebook
    builds what is missing.

    Parameters
    ----------
    raw_dir, processed_dir, settings
        As for :func:`build`.

    Returns
    -------
    Processed
    """
    settings = settings or Settings()
    folder = Path(processed_dir)
    manifest_path = folder / MANIFEST
    if manifest_path.is_file() and all((folder / f"{n}.csv").is_file() for n in TABLES):
        try:
            current = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            current = None
        if current == _manifest(raw_dir, settings):
            return load(folder)
    return build(raw_dir, folder, settings)
