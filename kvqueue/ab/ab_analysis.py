"""Compute the processed tables from checked raw runs: pure computation, no I/O.

:func:`analyze` turns :class:`kvqueue.rawdata.raw_reader.RawData` into one DataFrame per table of
:data:`kvqueue.schema.PROCESSED_TABLES` (columns and dtypes fixed there); storing and
caching them is :mod:`kvqueue.report.processed_build`'s job. Tables (one row per ...):

``runs``
    run found, complete or not; ``included`` marks the runs the statistics use
    (complete, not altered: see :mod:`kvqueue.rawdata.raw_reader`); ``headline`` the run per
    host x interpreter that the headline tables show (:func:`headline_runs`; a host label
    holding runs on two CPUs counts as two hosts, :func:`host_cpus`);
    ``integrity``, ``git_state``, ``protocol`` and ``warnings`` say how far the run can be
    trusted (``note`` says why a run is left out or not a headline run).
``variants``
    variant of a run, with provenance (source, sha256s, gate result) and, for a
    release, ``release_check``: whether every run in the raw data measured the same file
    under that release's name.
``process_medians``
    (cell, variant, process): median, mean and CV of its samples.
``ratios``
    (cell, comparison, process): the paired per-process ratio.
``summary``
    (cell, comparison): headline statistics, CI, verdict, A/A half-width.
``order_effects``
    cell: the order-position effect with its CI and a warning flag.
``floor_gap``
    (cell, comparison, bound): share of the gap to the lower bound that is closed.

A *cell* is :data:`kvqueue.schema.CELL`; a *comparison* is ``candidate`` vs ``baseline``
with ``kind`` ``"pair"`` or ``"aa"`` (an A/A duplicate ``X#2`` vs ``X``: the noise floor).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.params.bench_params import SUBJECT_OVERRIDES, make_assignments
from kvqueue.params.report_params import ReportSettings
from kvqueue.rawdata import raw_reader

# One HOST label = one CPU is a raw-data rule every question keys on; its names stay
# reachable here, where the A/B tables first used them.
from kvqueue.rawdata.host_keys import CPU_TAG, host_cpus
from kvqueue.rawdata.host_keys import cpu_identity as cpu_identity
from kvqueue.rawdata.host_keys import host_key_of as host_key_of
from kvqueue.stats import paired_stats
from kvqueue.stats.comparisons import AA, PAIR, aa_original, comparisons_for_run

CELL = schema.CELL
COMPARISON = schema.COMPARISON
_S, _F = schema.STRING, schema.FLOAT

# ---------------------------------------------------------------------------------------
# build


def _none_to_na(value: Any) -> Any:
    return pd.NA if value is None else value


def _joined(values: Any) -> Any:
    if isinstance(values, list | tuple):
        return " ".join(str(v) for v in values)
    return _none_to_na(values)


def _recency(run: raw_reader.Run) -> tuple[float, str]:
    # Newest by start time; the run id (which starts with a UTC stamp) breaks ties and
    # orders runs whose start time is unreadable.
    return (run.started.timestamp() if run.started else float("-inf"), run.run_id)


#: :func:`protocol` of a run that measured the full protocol.
FULL = "full"
#: :func:`protocol` of a run of one source and its A/A copies only.
AA_ONLY = "A/A only (noise floor)"
#: Pools and cases that a run must cover to be of the full protocol (the defaults of
#: ``make bench``).
FULL_POOLS = schema.POOLS
FULL_CASES = schema.CASES
#: The cases of the full protocol of the pool subject (``parameters.subject`` pool).
FULL_POOL_CASES = schema.POOL_CASES
#: The pools and cases of each subject's full protocol: its ``make bench`` defaults (the
#: manager's one 2,048-block pool: ``kvqueue.params.bench_params.MANAGER_OVERRIDES``).
FULL_PROTOCOL = {
    subject: (
        tuple(SUBJECT_OVERRIDES.get(subject, {}).get("pools", FULL_POOLS)),
        tuple(schema.SUBJECT_CASES[subject]),
    )
    for subject in schema.SUBJECTS
}


def subject_of(run: raw_reader.Run) -> str:
    """What a run measured (:data:`kvqueue.schema.SUBJECTS`): its ``parameters.subject``,
    :data:`kvqueue.schema.SUBJECT_QUEUE` for runs recorded before the field existed."""
    return str((run.meta.get("parameters") or {}).get("subject") or schema.SUBJECT_QUEUE)


def protocol(run: raw_reader.Run) -> str:
    """What a run measured, as one phrase: :data:`FULL` or why it is not the full protocol.

    The *full protocol* is: not ``quick``, at least :data:`kvqueue.stats.paired_stats.MIN_PROCESSES`
    main-phase processes (fewer give no CI), and pools and main-phase cases that include
    the defaults of its subject (:data:`FULL_PROTOCOL`; the queue's :data:`FULL_POOLS`
    and :data:`FULL_CASES`; more is fine).

    Returns
    -------
    str
        ``"full"``, ``"quick (smoke run)"``, :data:`AA_ONLY`, ``"too few processes
        (2 < 6)"`` or ``"reduced (pools 2048 only; cases alloc1 mix only)"``.
    """
    params = run.meta.get("parameters") or {}
    if params.get("quick") is True:
        return "quick (smoke run)"
    labels = [v.get("label") for v in run.meta.get("variants") or [] if not v.get("is_bound")]
    if len(labels) > 1 and all(aa_original(str(label)) for label in labels[1:]):
        # One source and its copies (VARIANTS=X AA=1): it measures the noise floor and
        # the intervals' coverage, and has no comparison to headline.
        return AA_ONLY
    processes = params.get("processes")
    if not isinstance(processes, int) or processes < paired_stats.MIN_PROCESSES:
        return f"too few processes ({processes} < {paired_stats.MIN_PROCESSES})"
    short = []
    pools = params.get("pools") if isinstance(params.get("pools"), list) else []
    cases = params.get("cases") if isinstance(params.get("cases"), list) else []
    full_pools, full_cases = FULL_PROTOCOL.get(subject_of(run), (FULL_POOLS, FULL_CASES))
    if not set(full_pools) <= set(pools):
        short.append(f"pools {' '.join(map(str, pools)) or 'none'} only")
    if not set(full_cases) <= set(cases):
        short.append(f"cases {' '.join(map(str, cases)) or 'none'} only")
    return f"reduced ({'; '.join(short)})" if short else FULL


def _reduced(text: str) -> bool:
    return text.startswith("reduced")


def headline_runs(
    raw: raw_reader.RawData, cpus: tuple[dict[tuple[str, str], str], dict[str, str]] | None = None
) -> dict[tuple[str, str, str], raw_reader.Run]:
    """The headline run of each host x interpreter x subject: ``{(host key, interpreter,
    subject): run}`` (a pool run never stands in for a queue run, nor the reverse).

    Rule: among the *included* runs (complete, not altered), the newest run of the full
    protocol (:func:`protocol`) per host x interpreter. A host x interpreter without any
    full-protocol run takes its newest *reduced* run (not quick, enough processes, fewer
    pools or cases than the defaults), and its ``note`` says so; a newer reduced run never
    displaces a full-protocol one. Quick runs and runs with fewer than
    :data:`kvqueue.stats.paired_stats.MIN_PROCESSES` processes are never headline runs (their rows
    stay in the processed tables, outside the headline tables).

    A *host* here is one CPU under one label (:func:`host_cpus`): a label whose runs were
    measured on two CPUs has a headline run per CPU and interpreter, keyed ``label`` and
    ``label#2``, so that the newer CPU's run never stands in for the older CPU's.
    ``cpus``: :func:`host_cpus` of every run of the raw data, any kind (default: of
    ``raw``'s runs).
    """
    keys, _ = cpus or host_cpus(raw)
    best: dict[tuple[str, str, str], tuple[bool, tuple[float, str], raw_reader.Run]] = {}
    for run in raw.included:
        kind = protocol(run)
        if kind != FULL and not _reduced(kind):
            continue
        rank = (kind == FULL, _recency(run))
        key = (keys[run.host, run.run_id], run.interpreter, subject_of(run))
        if key not in best or rank > best[key][:2]:
            best[key] = (*rank, run)
    return {key: value[2] for key, value in best.items()}


def release_digests(raw: raw_reader.RawData) -> dict[str, dict[str, int]]:
    """``{vllm_version: {file_sha256: number of runs}}`` over every run in the raw data.

    A release is one file: two digests under one release name mean that one of the runs
    measured a modified file under the release's name (no network needed).
    """
    out: dict[str, dict[str, int]] = {}
    for run in raw.runs:
        seen = set()
        for var in run.meta["variants"]:
            version, digest = var.get("vllm_version"), var.get("file_sha256")
            if version and digest and (version, digest) not in seen:
                seen.add((version, digest))
                counts = out.setdefault(str(version), {})
                counts[str(digest)] = counts.get(str(digest), 0) + 1
    return out


def _release_warning(version: str, digest: str, counts: dict[str, int]) -> str:
    others = ", ".join(
        f"{d[:12]} in {n} run{'s' if n > 1 else ''}" for d, n in sorted(counts.items())
    )
    return (
        f"vllm=={version} measured as {digest[:12]} here, but the raw data holds "
        f"{len(counts)} different files under that release ({others}): one is not the "
        "release's file"
    )


#: ``git_state`` of a run folder whose files differ from their commit.
GIT_MODIFIED = "modified"


def _run_warnings(
    run: raw_reader.Run,
    host_warnings: dict[str, str],
    digests: dict[str, dict[str, int]],
    git_state: str | None,
) -> Any:
    found = []
    if git_state == GIT_MODIFIED and not run.complete:
        # A complete run in this state is left out as altered (with_git_state).
        found.append("raw files modified since their git commit")
    if run.host in host_warnings:
        found.append(host_warnings[run.host])
    seen = set()
    for var in run.meta["variants"]:
        version, digest = var.get("vllm_version"), var.get("file_sha256")
        conflict = version and digest and len(digests.get(version, {})) > 1
        if conflict and (version, digest) not in seen:
            seen.add((version, digest))
            found.append(_release_warning(str(version), str(digest), digests[version]))
    return "; ".join(found) if found else pd.NA


def _note(run: raw_reader.Run, kind: str, headline: bool, has_full: bool) -> str:
    if not run.complete:
        return f"left out: status {run.status}"
    if run.altered is not None:
        return f"left out: altered: {run.altered}"
    if headline:
        if kind == FULL:
            return "headline"
        return "headline (reduced protocol: this host × interpreter has no full-protocol run)"
    if kind == FULL or (_reduced(kind) and not has_full):
        return "older run (not in the headline tables)"
    return f"not in the headline tables: {kind}"


def runs_table(
    raw: raw_reader.RawData,
    git_states: Mapping[str, str] | None = None,
    cpus: tuple[dict[tuple[str, str], str], dict[str, str]] | None = None,
) -> pd.DataFrame:
    """The ``runs`` table: one row per run found (see the module docstring).

    Parameters
    ----------
    raw
        Output of :func:`kvqueue.rawdata.raw_reader.read_raw`, git state applied
        (:func:`kvqueue.rawdata.git_state.with_git_state`).
    git_states
        ``{"<host>/<run_id>": state}`` (``committed``, ``modified``, ``untracked``,
        ``no git``), found by :mod:`kvqueue.report.processed_build`; missing: the column is empty.
    cpus
        :func:`host_cpus` of every run of the raw data, of any kind, so that a label is
        split (and named) when its second CPU holds only history, policy or counts runs
        (default: of ``raw``'s runs).

    Returns
    -------
    pandas.DataFrame
    """
    cpus = cpus or host_cpus(raw)
    heads = headline_runs(raw, cpus)
    host_keys, host_warnings = cpus[0], dict(cpus[1])
    # HOST=x and HOST=X are two folders and two hosts: most likely one machine typed twice.
    by_fold: dict[str, set[str]] = {}
    for r in raw.runs:
        by_fold.setdefault(r.host.casefold(), set()).add(r.host)
    for labels in by_fold.values():
        if len(labels) > 1:
            note = f"host labels {', '.join(sorted(labels))} differ only in case (one machine?)"
            for label in labels:
                host_warnings[label] = "; ".join(w for w in (host_warnings.get(label), note) if w)
    full_keys = {
        (host_keys[r.host, r.run_id], r.interpreter, subject_of(r))
        for r in raw.included
        if protocol(r) == FULL
    }
    digests = release_digests(raw)
    rows = []
    for run in raw.runs:
        m = run.meta
        machine, py, params = m["machine"], m["python"], m["parameters"]
        planned = m.get("processes_planned") or {}
        completed = m.get("processes_completed") or {}
        info = m.get("process_info") or []
        key = (host_keys[run.host, run.run_id], run.interpreter, subject_of(run))
        headline = heads.get(key) is run
        kind = protocol(run)
        note = _note(run, kind, headline, key in full_keys)
        if run.host in host_warnings:
            # The label holds several CPUs: say which one this run is on (the
            # provenance tables key their columns on it).
            note += f"{CPU_TAG}{key[0]}"
        git = (git_states or {}).get(f"{run.host}/{run.run_id}")
        base_var = next(v for v in m["variants"] if v["label"] == m["baseline"])
        rows.append(
            {
                "host": run.host,
                "interpreter": run.interpreter,
                "run_id": run.run_id,
                "status": run.status,
                "included": run.included,
                "headline": headline,
                "note": note,
                "integrity": _none_to_na(run.integrity),
                "git_state": _none_to_na(git),
                "protocol": kind,
                "warnings": _run_warnings(run, host_warnings, digests, git),
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
                "schema_version": m.get("schema_version"),
                "precision_target": _none_to_na(params.get("precision")),
                "sizing_wanted": _none_to_na((m.get("sizing") or {}).get("wanted")),
                "sizing_capped_by": _none_to_na((m.get("sizing") or {}).get("capped_by")),
                "epochs": params.get("epochs", 1),
                "make_args": json.dumps(make_assignments(params)),
            }
        )
    return conform(pd.DataFrame(rows), "runs", sort=["host", "interpreter", "run_id"])


def _release_check(variant: dict[str, Any], digests: dict[str, dict[str, int]]) -> Any:
    version, digest = variant.get("vllm_version"), variant.get("file_sha256")
    if not version:
        return pd.NA
    counts = digests.get(str(version), {})
    if not digest:
        return "no file_sha256 recorded"
    if len(counts) > 1:
        return "conflict: " + _release_warning(str(version), str(digest), counts)
    return "consistent"


def _git_commit(resolved: object) -> Any:
    """The commit a ``git:REPO@REF`` variant was read at (missing for any other source)."""
    commit = schema.git_commit_of(resolved)
    return pd.NA if commit is None else commit


def variants_table(raw: raw_reader.RawData) -> pd.DataFrame:
    """The ``variants`` table: one row per variant of every run found (module docstring)."""
    digests = release_digests(raw)
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
                    "commit": _git_commit(v.get("resolved_path")),
                    "class_name": _none_to_na(v.get("class_name")),
                    "vllm_version": _none_to_na(v.get("vllm_version")),
                    "class_sha256": _none_to_na(v.get("class_sha256")),
                    "file_sha256": _none_to_na(v.get("file_sha256")),
                    "release_check": _release_check(v, digests),
                    "block_source": _none_to_na(v.get("block_source")),
                    "block_class_sha256": _none_to_na(v.get("block_class_sha256")),
                    "is_bound": bool(v.get("is_bound", False)),
                    "gate_ok": _none_to_na(gate.get("ok")),
                    "gate_ops_checked": _none_to_na(gate.get("ops_checked")),
                    "gate_invalid_compared": _none_to_na(gate.get("invalid_compared")),
                }
            )
    return conform(pd.DataFrame(rows), "variants", sort=["host", "run_id", "position"])


def _all_samples(raw: raw_reader.RawData) -> pd.DataFrame:
    frames = []
    for run in raw.included:
        assert run.samples is not None  # included runs always carry samples
        df = run.samples.copy()
        df.insert(0, "host", run.host)
        df.insert(1, "interpreter", run.interpreter)
        df.insert(2, "run_id", run.run_id)
        frames.append(df)
    if not frames:
        cols = ["host", "interpreter", "run_id", *schema.SAMPLE_COLUMNS]
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return pd.concat(frames, ignore_index=True)


def _missing(value: Any) -> bool:
    return value is None or (not isinstance(value, list | tuple | dict) and bool(pd.isna(value)))


def conform(df: pd.DataFrame, table: str, sort: Sequence[str] | None = None) -> pd.DataFrame:
    """Fix column order and dtypes of a processed table; sort its rows.

    Parameters
    ----------
    df
        The table's rows (any column order; missing columns become missing values).
    table
        Its name in :data:`kvqueue.schema.PROCESSED_TABLES`.
    sort
        Sort keys; ``case`` sorts in schema order (:func:`kvqueue.schema.case_rank`).

    Returns
    -------
    pandas.DataFrame
    """
    spec = schema.PROCESSED_TABLES[table]
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in spec.items()})
    out = df.reindex(columns=list(spec))
    for col, dtype in spec.items():
        # Fast paths (a column of strings or of floats already): the per-value map below
        # took 2.9 s of a 12 s cached rebuild of the committed data.
        if dtype == _S and pd.api.types.infer_dtype(out[col], skipna=True) in ("string", "empty"):
            out[col] = out[col].astype(dtype)
        elif dtype == _S:
            out[col] = out[col].map(lambda v: pd.NA if _missing(v) else str(v))
        elif dtype == _F and pd.api.types.is_float_dtype(out[col]):
            pass
        elif dtype == _F:
            # Optional metadata (absent in run.json) becomes NaN, the float "missing".
            out[col] = out[col].map(lambda v: np.nan if _missing(v) else v)
        out[col] = out[col].astype(dtype)
    if sort:
        keys = list(sort)
        if "case" in keys:
            out["_case"] = out["case"].map(schema.case_rank)
            keys = [("_case" if k == "case" else k) for k in keys]
        out = out.sort_values(keys, kind="stable").drop(columns=["_case"], errors="ignore")
    return out.reset_index(drop=True)


def _of_run(df: pd.DataFrame, run: raw_reader.Run) -> pd.DataFrame:
    return df[(df["host"] == run.host) & (df["run_id"] == run.run_id)]


#: Tables of :func:`analyze_run`: one run's share of the statistics (no ``headline``).
RUN_TABLES = ("process_medians", "ratios", "summary", "order_effects", "floor_gap")


def analyze_run(run: raw_reader.Run, settings: ReportSettings) -> dict[str, pd.DataFrame]:
    """The statistics of one included bench run: its share of :data:`RUN_TABLES`.

    Everything here depends on the run alone (a cell holds the run id), so
    :mod:`kvqueue.report.processed_build` caches the result per run folder; only the
    ``headline`` flags, which compare runs, are set by :func:`analyze`.

    Parameters
    ----------
    run
        An included run (complete, not altered: it carries its samples).
    settings
        Pairs, bootstrap settings and the verdict band.

    Returns
    -------
    dict
        Table name -> this run's rows (``headline`` columns absent).
    """
    boot = settings.bootstrap()
    cell = list(CELL)
    samples = _all_samples(raw_reader.RawData((run,)))
    medians = paired_stats.process_medians(samples, CELL) if len(samples) else samples.iloc[0:0]

    # Paired per-process ratios of every comparison in the run.
    bound = [v["label"] for v in run.meta["variants"] if v.get("is_bound")]
    labels = [v["label"] for v in run.meta["variants"]]
    ratio_frames = []
    for cand, base, kind in comparisons_for_run(
        labels, run.meta["baseline"], bound, settings.pairs
    ):
        r = paired_stats.paired_ratios(medians, cand, base, cell)
        r.insert(len(cell) + 2, "kind", kind)
        ratio_frames.append(r)
    ratios = pd.concat(ratio_frames, ignore_index=True) if ratio_frames else pd.DataFrame()
    ratios = conform(ratios, "ratios", sort=[*cell, "kind", "candidate", "baseline", "process"])

    # One summary row per (cell, comparison).
    medians_by_cell = {k: g for k, g in medians.groupby(cell, sort=True)}
    rows = []
    for key, grp in ratios.groupby([*cell, *COMPARISON], sort=True):
        cell_key = tuple(key[: len(cell)])
        row = dict(zip([*cell, *COMPARISON], key, strict=True))
        row.update(
            paired_stats.summarize_pair(
                grp, medians_by_cell[cell_key], delta=settings.delta, **boot
            )
        )
        rows.append(row)
    summary = pd.DataFrame(rows)
    if len(summary):
        aa = summary[summary["kind"] == AA].assign(
            aa_half_width=lambda d: (d["ci_high"] - d["ci_low"]) / 2
        )
        aa_hw = aa.groupby(cell, sort=True)["aa_half_width"].max().reset_index()
        summary = summary.merge(aa_hw, on=cell, how="left")

    # Order effect per cell, against the tightest CI of that cell's comparisons.
    pair_rows = summary[summary["kind"] == PAIR] if len(summary) else summary
    tightest_by_cell = {}
    if len(pair_rows):
        tightest = ((pair_rows["ci_high"] - pair_rows["ci_low"]) / 2).groupby(
            [pair_rows[c] for c in cell]
        )
        tightest_by_cell = {tuple(k): float(v) for k, v in tightest.min().items()}
    order_rows = []
    slopes: dict[tuple, np.ndarray] = {}
    if len(samples):  # every cell's slopes in one pass (paired_stats.position_slopes)
        by_cell = paired_stats.position_slopes(samples, by=cell).groupby(level=cell)
        slopes = {tuple(k): g.to_numpy() for k, g in by_cell}
    for key, grp in samples.groupby(cell, sort=True) if len(samples) else ():
        mine = slopes.get(tuple(key), np.empty(0))
        est = paired_stats.order_effect(grp, slopes=mine, **boot)
        ref = tightest_by_cell.get(tuple(key), np.nan)
        order_rows.append(
            {
                **dict(zip(cell, key, strict=True)),
                "n_processes": est.n,
                "positions": int(grp["order_position"].max()) + 1,
                "effect": est.estimate,
                "ci_low": est.low,
                "ci_high": est.high,
                "headline_half_width": ref,
                # Warn only for an effect that is real (CI excludes 0) AND larger than
                # the precision of the comparisons; a point estimate alone is noise.
                "warn": bool(
                    np.isfinite(ref) and abs(est.estimate) > ref and (est.low > 0 or est.high < 0)
                ),
            }
        )
    floor_gap = _floor_gap_rows(raw_reader.RawData((run,)), medians, ratios, set(), boot)
    return {
        "process_medians": medians,
        "ratios": ratios,
        "summary": summary,
        "order_effects": pd.DataFrame(order_rows),
        "floor_gap": pd.DataFrame(floor_gap),
    }


def analyze(
    raw: raw_reader.RawData,
    settings: ReportSettings,
    git_states: Mapping[str, str] | None = None,
    per_run: Callable[[raw_reader.Run], dict[str, pd.DataFrame]] | None = None,
    cpus: tuple[dict[tuple[str, str], str], dict[str, str]] | None = None,
) -> dict[str, pd.DataFrame]:
    """Compute every processed table from checked raw runs (no I/O).

    Only the included runs (complete, not altered) enter the statistics; every bench run
    found is a row of ``runs`` and its variants rows of ``variants``. Runs of other kinds
    (``run.json`` ``kind``: history, policy) stay out of these tables.

    Parameters
    ----------
    raw
        Output of :func:`kvqueue.rawdata.raw_reader.read_raw`, git state applied
        (:func:`kvqueue.rawdata.git_state.with_git_state`).
    settings
        Pairs, bootstrap settings and the verdict band.
    git_states
        Git state of each run folder (see :func:`runs_table`).
    per_run
        ``run -> analyze_run(run, settings)`` or a cached equal of it (default: compute).
    cpus
        :func:`host_cpus` of every run (default: computed here over every kind of
        ``raw``: one numbering of a label's CPUs for every question).

    Returns
    -------
    dict
        Table name (a key of :data:`kvqueue.schema.PROCESSED_TABLES`) -> its rows.
    """
    everything = raw
    # The A/B tables (headline, A/A coverage, precision) read bench runs only: a history
    # run pairs releases of its own choosing and a policy run returns different blocks.
    raw = everything.of_kind(schema.KIND_BENCH)
    runs = runs_table(raw, git_states, cpus or host_cpus(everything))
    variants = variants_table(raw)
    headline_runs = runs.loc[runs["headline"].fillna(False), ["host", "run_id"]]
    headline_ids = set(headline_runs.itertuples(index=False, name=None))
    compute = per_run or (lambda run: analyze_run(run, settings))
    parts = [compute(run) for run in raw.included]

    def joined(name: str) -> pd.DataFrame:
        frames = [p[name] for p in parts if len(p[name])]
        if not frames:
            return pd.DataFrame()
        df = pd.concat(frames, ignore_index=True)
        if name != "process_medians" and name != "ratios":
            ids = zip(df["host"], df["run_id"], strict=True)
            df["headline"] = [key in headline_ids for key in ids]
        return df

    cell = list(CELL)
    return {
        "runs": runs,
        "variants": variants,
        "process_medians": conform(
            joined("process_medians"), "process_medians", sort=[*cell, "variant", "process"]
        ),
        "ratios": conform(
            joined("ratios"), "ratios", sort=[*cell, "kind", "candidate", "baseline", "process"]
        ),
        "summary": conform(
            joined("summary"), "summary", sort=[*cell, "kind", "candidate", "baseline"]
        ),
        "order_effects": conform(joined("order_effects"), "order_effects", sort=cell),
        "floor_gap": conform(
            joined("floor_gap"), "floor_gap", sort=[*cell, "candidate", "baseline", "bound"]
        ),
    }


def _floor_gap_rows(
    raw: raw_reader.RawData,
    medians: pd.DataFrame,
    ratios: pd.DataFrame,
    headline_ids: set[tuple[str, str]],
    boot: dict[str, Any],
) -> list[dict[str, Any]]:
    """Gap closed towards each lower bound, for every compared pair of a run with one."""
    cell = list(CELL)
    rows: list[dict[str, Any]] = []
    for run in raw.included:
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
                bound_r = paired_stats.paired_ratios(run_medians, bound, base, cell)
                both = cand_r.merge(bound_r, on=[*cell, "process"], suffixes=("_c", "_f"))
                for key, grp in both.groupby(cell, sort=True):
                    bound_est = paired_stats.reduction_interval(grp["ratio_f"].to_numpy(), **boot)
                    cand_est = paired_stats.reduction_interval(grp["ratio_c"].to_numpy(), **boot)
                    # The share is only defined when the bound is clearly faster than the
                    # baseline; otherwise the denominator's CI reaches 0.
                    if bound_est.low > 0:
                        gap = paired_stats.gap_closed(
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
