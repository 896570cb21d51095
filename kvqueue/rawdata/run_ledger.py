"""The ``ledger`` table: every run folder found, whatever its kind, with its use.

One row per run folder under the raw directory (bench, history, policy, or unreadable):
``use`` is ``headline`` (a headline table shows it), ``shown`` (in the processed tables,
not a headline) or ``left out``; ``reason`` says why (status, altered and how, unreadable
and why, or the note of a shown run). ``make report`` prints a line per left-out run and
the report lists every row, so no run vanishes silently.

Pure computation from the tables the analysis already made; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.params import bench_params, history_params, policy_params
from kvqueue.rawdata import host_keys, raw_reader

HEADLINE, SHOWN, LEFT_OUT = "headline", "shown", "left out"
#: A history, policy or counts run that a newer one of the same kind and key replaces:
#: the report shows only the newest (its section names which), so it is not "shown".
SUPERSEDED = "superseded"
_SUPERSEDED_BY = {
    schema.KIND_HISTORY: "not shown: a newer full history of the same host and interpreter "
    "replaces it",
    schema.KIND_POLICY: "not shown: a newer policy run of the same host, interpreter, variant "
    "and regime replaces it",
    schema.KIND_COUNTS: "not shown: no table uses it (a newer counts run of its host and "
    "interpreter, or it compares no pair of the report)",
}
#: ``kind`` of a folder whose ``run.json`` could not be read.
UNREADABLE = "unreadable"
COLUMNS = schema.PROCESSED_TABLES["ledger"]


def _left_reason(run: raw_reader.Run) -> str | None:
    if not run.complete:
        return f"status {run.status} (the run did not finish)"
    if run.altered is not None:
        return f"altered: {run.altered}"
    return None


def make_command(meta: Mapping[str, Any]) -> tuple[str, str, list[tuple[str, str]]]:
    """What repeats a run, from its ``run.json``: ``(target, python, assignments)``.

    ``target`` is the make target (``bench``, ``history`` or ``policy``; a counts run
    is the bench or history run it counted), ``python`` the executable it measured and
    ``assignments`` every other recorded parameter as ``(MAKE_VARIABLE, text)``
    (``HOST`` and ``PYTHON`` are left to the caller; a bench run's ``VARIANTS`` too,
    since the report pins their git refs to the recorded commits; a counts run's are
    here, pinned the same way). Empty strings and
    ``[]`` where ``run.json`` records no parameters, and no target for a policy run of
    the older protocol (today's ``make policy`` cannot repeat it).
    """
    kind = schema.run_kind(meta)
    parameters = meta.get("parameters")
    python = meta.get("python")
    executable = str(python.get("executable", "")) if isinstance(python, Mapping) else ""
    if not isinstance(parameters, Mapping):
        return "", executable, []
    history = meta.get(schema.HISTORY_KEY)
    if kind == schema.KIND_POLICY:
        if meta.get("protocol") != schema.POLICY_PROTOCOL:
            return "", executable, []  # the older protocol: today's make policy differs
        return "policy", executable, policy_params.make_assignments(parameters)
    if kind == schema.KIND_HISTORY or (
        kind == schema.KIND_COUNTS and meta.get("question") == "history"
    ):
        record = history if isinstance(history, Mapping) else {}
        commits = {
            str(v.get("source")): commit
            for v in meta.get("variants") or ()
            if isinstance(v, Mapping) and (commit := schema.git_commit_of(v.get("resolved_path")))
        }
        assignments = history_params.make_assignments(parameters, record, commits)
        return "history", executable, assignments
    assignments = bench_params.make_assignments(parameters)
    if kind == schema.KIND_COUNTS:
        # No bench run's variants table holds a counts run's sources: its VARIANTS
        # come from here (a counts-only writeup's command counted the defaults).
        assignments = [("VARIANTS", _pinned_variants(meta, parameters)), *assignments]
    return "bench", executable, assignments


def _pinned_variants(meta: Mapping[str, Any], parameters: Mapping[str, Any]) -> str:
    """A run's ``VARIANTS`` as given, each ``git:REPO@REF`` pinned to the commit it read."""
    commits = {
        str(v.get("source")): schema.git_commit_of(v.get("resolved_path"))
        for v in meta.get("variants") or ()
        if isinstance(v, Mapping)
    }
    words = []
    for text in parameters.get("variants") or ():
        name, source = schema.split_name(str(text))
        pinned = schema.pin_git_ref(source, commits.get(source))
        words.append(f"{name}={pinned}" if name else pinned)
    return " ".join(words)


def _commit(meta: Mapping[str, Any]) -> str | None:
    project = meta.get("project")
    commit = project.get("commit") if isinstance(project, Mapping) else None
    return str(commit) if commit else None


def ledger(
    raw: raw_reader.RawData,
    runs: pd.DataFrame,
    history: pd.DataFrame,
    policy: pd.DataFrame,
    problems: Mapping[str, str] | None = None,
    counts: pd.DataFrame | None = None,
    cpus: tuple[Mapping[tuple[str, str], str], Mapping[str, str]] | None = None,
) -> pd.DataFrame:
    """One row per run folder found (see the module docstring).

    Parameters
    ----------
    raw
        Every run read (git state applied: :func:`kvqueue.rawdata.git_state.with_git_state`),
        with its unreadable folders.
    runs
        The processed ``runs`` table (bench runs: ``headline``, ``note``).
    history, policy
        The processed ``history`` and ``policy`` tables (their ``headline`` column).
    problems
        ``{"<host>/<run_id>": why}`` for runs that the raw-data reader included but their
        question's reader left out (a policy or counts file that is unreadable or
        altered).
    counts
        The counts runs' rows that the report shows (``host``, ``run_id``): those runs
        are *headline*, other counts runs *shown*.
    cpus
        :func:`kvqueue.rawdata.host_keys.host_cpus` of every run (default: of ``raw``):
        the history, policy and counts tables name a run by its host key (``label#2`` on
        the label's second CPU); such a run's reason names its CPU and the label's
        warning (a bench run's note, from the ``runs`` table, does already).

    Returns
    -------
    pandas.DataFrame
        Columns of :data:`kvqueue.schema.PROCESSED_TABLES` ``["ledger"]``, sorted by host
        and run id.
    """
    problems = dict(problems or {})
    keys, warnings = cpus or host_keys.host_cpus(raw)
    notes = {(r.host, r.run_id): (bool(r.headline), str(r.note)) for r in runs.itertuples()}
    heads: dict[str, set[tuple[str, str]]] = {}
    for kind, table in ((schema.KIND_HISTORY, history), (schema.KIND_POLICY, policy)):
        if len(table):
            shown = table[table["headline"].fillna(False).astype(bool)]
            heads[kind] = set(zip(shown["host"], shown["run_id"], strict=True))
    # A counts run is used where its counts stand beside time (the newest A/B counts run
    # of its host x interpreter) or where its history's steps are shown.
    if counts is not None and len(counts):
        heads[schema.KIND_COUNTS] = set(zip(counts["host"], counts["run_id"], strict=True))
    rows = []
    for run in raw.runs:
        reason = _left_reason(run)
        key = (run.host, run.run_id)
        if reason is None:
            reason = problems.get(f"{run.host}/{run.run_id}")
        if reason is not None:
            use = LEFT_OUT
        elif run.kind == schema.KIND_BENCH:
            headline, note = notes.get(key, (False, ""))
            use, reason = (HEADLINE if headline else SHOWN), note
        else:
            shown_as = (host_keys.host_key(keys, run.host, run.run_id), run.run_id)
            headline = shown_as in heads.get(run.kind, set())
            use = HEADLINE if headline else SUPERSEDED
            reason = f"newest {run.kind} run" if headline else _SUPERSEDED_BY[run.kind]
            if run.host in warnings:
                reason += f"{host_keys.CPU_TAG}{shown_as[0]} ({warnings[run.host]})"
        target, executable, assigned = make_command(run.meta)
        rows.append(
            {
                "host": run.host,
                "run_id": run.run_id,
                "kind": run.kind,
                "interpreter": run.interpreter,
                "status": run.status,
                "started_at": run.meta.get("started_at"),
                "use": use,
                "reason": reason,
                "make_target": target,
                "commit": _commit(run.meta),
                "python_executable": executable,
                "make_args": json.dumps(assigned),
            }
        )
    for bad in raw.unreadable:
        rows.append(
            {
                "host": bad.host,
                "run_id": bad.run_id,
                "kind": UNREADABLE,
                "use": LEFT_OUT,
                "reason": bad.problem,
            }
        )
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.astype({c: t for c, t in COLUMNS.items()})
    return df.sort_values(["host", "run_id"], kind="stable").reset_index(drop=True)


def left_out_lines(table: pd.DataFrame) -> list[str]:
    """One line per left-out row of a ledger: ``host/run_id (kind): reason``."""
    left = table[table["use"] == LEFT_OUT]
    return [
        f"left out {r.host}/{r.run_id} ({r.kind}): {r.reason}" for r in left.itertuples(index=False)
    ]
