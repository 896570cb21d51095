"""The report's provenance tables: every run found, the machines and interpreters of the
headline runs, and the variants they measured.

Display-ready DataFrames of formatted strings from the processed ``runs`` and
``variants`` tables (rendered by :mod:`kvqueue.report.frames`), generic over their
columns: a column added to a processed table later is shown with a header made from
its name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis
from kvqueue.formatting import is_na
from kvqueue.processed import store

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
    if is_na(value):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def runs_table(data: store.Processed) -> pd.DataFrame:
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
        if c not in _RUNS_HEADERS
        and c not in _RUNS_SHOWN_ELSEWHERE
        and not all(is_na(v) for v in runs[c])
    ]
    rows = []
    for r in runs.to_dict("records"):
        done = (
            f"{_int(r['processes_completed_main'])}/{_int(r['processes_planned_main'])} + "
            f"{_int(r['processes_completed_confirm'])}/{_int(r['processes_planned_confirm'])}"
        )
        commit = _str(r["commit"])[:12]
        if not is_na(r["dirty"]) and bool(r["dirty"]):
            commit += " (dirty)"
        row = {header: _cell_text(r[col]) for col, header in _RUNS_HEADERS.items()}
        row |= {
            "Kind": "bench",
            "Processes (main + confirm)": done,
            "Samples": _int(r["n_samples"]),
            "Commit": commit,
        }
        row |= {_header(c): _cell_text(r[c]) for c in extra}
        row["Use"] = _cell_text(r["note"])
        rows.append(row)
    # Every other run folder found (history, policy, unreadable): the ledger's rows.
    bench = set(zip(runs["host"], runs["run_id"], strict=True))
    for r in _ledger(data).to_dict("records"):
        if (r["host"], r["run_id"]) in bench:
            continue
        row = {
            "Host": r["host"],
            "Python": _cell_text(r["interpreter"]),
            "Run": r["run_id"],
            "Status": _cell_text(r["status"]),
            "Started": _cell_text(r["started_at"]),
            "Kind": r["kind"],
        }
        row["Use"] = f"{r['use']}: {r['reason']}"
        rows.append(row)
    out = pd.DataFrame(rows).fillna("–") if rows else pd.DataFrame()
    if len(out):
        out = out.sort_values(["Host", "Run"], kind="stable").reset_index(drop=True)
    out.attrs["wrap"] = [_header(c) for c in extra]
    return out


def _ledger(data: store.Processed) -> pd.DataFrame:
    """The ``ledger`` table (empty with its columns when an older build lacks it)."""
    if len(data.ledger.columns):
        return data.ledger
    return pd.DataFrame({c: pd.Series(dtype=object) for c in schema.PROCESSED_TABLES["ledger"]})


def environment_table(data: store.Processed) -> pd.DataFrame:
    """Machine and interpreter of each headline run, one column per run.

    Transposed (fields as rows) so that several hosts with long CPU names still fit.

    Parameters
    ----------
    data
        Processed tables.

    Returns
    -------
    pandas.DataFrame
        A ``Field`` column, then one column per headline run (``host · interpreter``;
        ``host#2 · interpreter`` for the second CPU under one host label).
    """
    runs = data.headline_runs()
    if runs.empty:
        return pd.DataFrame()
    columns: dict[str, list[str]] = {}
    fields: list[str] = []
    for r in runs.itertuples(index=False):
        commit = _str(r.commit)
        if not is_na(r.dirty) and bool(r.dirty):
            commit += " (dirty)"
        planned = sum(
            0 if is_na(x) else int(x)
            for x in (r.processes_planned_main, r.processes_planned_confirm)
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
        # A label holding runs on two CPUs has a headline run per CPU and interpreter:
        # its CPU's host key (label#2) tells the columns apart instead of one hiding
        # the other.
        columns[f"{ab_analysis.host_key_of(r.host, r.note)} · {r.interpreter}"] = list(
            values.values()
        )
    out = pd.DataFrame({"Field": fields, **columns})
    out.attrs["wrap"] = list(columns)
    return out


def variants_table(data: store.Processed, *, sha_chars: int = 12) -> pd.DataFrame:
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
    extra = [c for c in extra if not all(is_na(x) for x in v[c])]
    grouped: dict[tuple[str, ...], list[str]] = {}
    for r in v.itertuples(index=False):
        if r.label == r.baseline:
            role = "baseline"
        elif not is_na(r.is_bound) and bool(r.is_bound):
            role = "bound (not a candidate)"
        elif ab_analysis.aa_original(r.label) is not None:
            role = f"A/A copy of {r.source}"
        else:
            role = "candidate"
        gate = "passed" if (not is_na(r.gate_ok) and bool(r.gate_ok)) else "not recorded"
        if not is_na(r.gate_ok) and not bool(r.gate_ok):
            gate = "FAILED"
        if gate == "passed" and not is_na(r.gate_ops_checked):
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
    return "–" if is_na(value) else str(value)


def _int(value: object) -> str:
    return "–" if is_na(value) else str(int(value))  # type: ignore[call-overload]


def runs_note(data: store.Processed) -> str:
    """Which runs the headline tables use, which are not headline runs and which were left
    out (each with its note: status, altered, quick, older)."""
    r = data.runs
    heads = r[r["headline"].fillna(False)]
    others = r[r["included"].fillna(False) & ~r["headline"].fillna(False)]
    bench = set(zip(r["host"], r["run_id"], strict=True))
    ledger_rows = _ledger(data)
    left = r[~r["included"].fillna(False)]
    others_left = [
        x
        for x in ledger_rows.itertuples()
        if x.use == "left out" and (x.host, x.run_id) not in bench
    ]
    shown = [
        x
        for x in ledger_rows.itertuples()
        if x.use != "left out" and (x.host, x.run_id) not in bench
    ]
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
    if shown:
        parts.append(
            "History and policy runs: "
            + ", ".join(f"{x.host}/{x.run_id} ({x.kind}, {x.use})" for x in shown)
            + "."
        )
    named = [
        f"{x.host}/{x.run_id} ({str(x.note).removeprefix('left out: ')})" for x in left.itertuples()
    ]
    named += [f"{x.host}/{x.run_id} ({x.kind}: {x.reason})" for x in others_left]
    if named:
        parts.append("Left out: " + ", ".join(named) + ".")
    return " ".join(parts)
