"""A run of instruction counts (``METRIC=instructions``): gate, counts, one run folder.

``make bench METRIC=instructions`` and ``make history METRIC=instructions`` come here
instead of the timing processes; ``make quick METRIC=instructions`` uses
:func:`count_rows` and writes nothing. The same gate runs first, at the pools the run
counts; then :mod:`kvqueue.measure.cachegrind` runs every (case, pool) cell's zero runs and one
target run per variant under cachegrind, and each finished count is appended to
``counts.csv`` at once (a Ctrl-C keeps the finished ones; the run is marked
``interrupted``). ``run.json`` (kind ``counts``) records valgrind's version and options,
the warm-up and target operations and the hash seed under ``counting``, and which
question the run answers (``ab`` or ``history``, with the history's versions). Once every
count is done, each cell's lines are traced in bytecodes (one process each, no valgrind)
and ``where.csv`` is written once with them and the count's C functions
(:func:`write_where`; ``counting.where_format``).
"""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchError
from kvqueue.gate import model_check
from kvqueue.measure import (
    cachegrind,
    function_profile,
    machine_lock,
    run_folder,
    runner,
    where_run,
)
from kvqueue.params.bench_params import BenchParams, Checked


def counts_text(rows: list[dict[str, Any]]) -> str:
    """``counts.csv`` as text: the header, then one row per cachegrind run."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(schema.COUNT_COLUMNS)
    out.writerows([row[c] for c in schema.COUNT_COLUMNS] for row in rows)
    return buf.getvalue()


def count_row(process: int, phase: str, row: dict[str, Any]) -> dict[str, Any]:
    """One ``counts.csv`` row (a count is one process of the ``main`` phase)."""
    return row


#: ``counts.csv``: the data file of a counts run.
COUNTS = run_folder.RunTable(schema.COUNTS_CSV, counts_text, count_row)


def base_spec(params: BenchParams, gate: list[dict[str, Any]]) -> dict[str, Any]:
    """The worker spec every count of the run shares (the timing worker's, untimed)."""
    own = params.block_mode == "own"
    expected_block = (
        {g["label"]: g["provenance"]["block_class_sha256"] for g in gate} if own else {}
    )
    expected = {g["label"]: g["sha256"] for g in gate}
    return runner.worker_spec(params, list(params.cases), params.seed, expected, expected_block)


def where_text(rows: list[dict[str, Any]]) -> str:
    """``where.csv`` as text: the header, then the rows (:data:`kvqueue.schema.WHERE_COLUMNS`)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(schema.WHERE_COLUMNS)
    out.writerows([row[c] for c in schema.WHERE_COLUMNS] for row in rows)
    return buf.getvalue()


def write_where(
    writer: run_folder.RunWriter,
    python: str,
    spec: dict[str, Any],
    totals: where_run.FunctionTotals,
    valgrind: cachegrind.Valgrind,
) -> None:
    """Trace every counted cell's lines (one process each, no valgrind) and write
    ``where.csv`` once, with the C functions of the count (docs/design.md §13). A
    profile that fails is one line: the counts stand without it."""
    try:
        lines = where_run.line_profiles(python, spec, sorted(totals.ops))
    except BenchError as exc:
        print(f"where.csv not written: {exc}", file=sys.stderr)
        lines = {}
    profiles: dict[where_run.Cell, function_profile.Profile] = {}
    # A manager's layers and per-call figures need its Python functions in instructions:
    # one callgrind process per cell (~40 s each here), on an interpreter that can.
    if spec.get("subject") == schema.SUBJECT_MANAGER and function_profile.trampoline_available(
        python
    ):
        try:
            profiles = function_profile.profile_cells(
                python, spec, sorted(totals.ops), valgrind=valgrind
            )
        except BenchError as exc:
            print(f"Python functions not profiled: {exc}", file=sys.stderr)
    rows = where_run.where_rows(totals, lines, profiles)
    writer.record[schema.COUNTING_KEY][schema.WHERE_FORMAT_KEY] = schema.WHERE_FORMAT
    writer.add_file(schema.WHERE_CSV, where_text(rows), len(rows))


def counting_record(valgrind: cachegrind.Valgrind) -> dict[str, Any]:
    """What run.json records of the method (``counting``)."""
    return {
        "valgrind": valgrind.version,
        "options": valgrind.options(),
        "warmup_ops": cachegrind.WARMUP_OPS,
        "target_ops": cachegrind.TARGET_OPS,
        "hash_seed": cachegrind.HASH_SEED,
        # 2: the counted process's paths and environment fixed (runs without it: 1).
        "layout": cachegrind.LAYOUT,
    }


def count_rows(
    checked: Checked,
    *,
    invalid: str = "refuse",
    sizes: tuple[int, ...] = (),
    valgrind: cachegrind.Valgrind | None = None,
    what: str = "the counts",
    counted_if: Callable[[list[dict[str, Any]]], bool] | None = None,
    on_functions: Callable[[dict[str, Any], dict[str, int]], None] | None = None,
    then: Callable[[list[dict[str, Any]], list[dict[str, Any]]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Gate and count, writing nothing (``make quick METRIC=instructions``, ``make
    regress``): the gate's results (their commits and digests name the sources) and
    cachegrind's rows.

    Parameters
    ----------
    checked
        Checked parameters.
    invalid, sizes
        As for :func:`kvqueue.measure.runner.run_gate`.
    valgrind
        valgrind as already found (default: found here).
    what
        The machine lock's holder, as a second command would be told.
    counted_if
        Given the gate's results, whether to count at all (``False``: no rows; ``make
        regress`` does not count two identical codes). Default: always.
    on_functions
        Given to :func:`kvqueue.measure.cachegrind.count` (each run's instructions per C
        function).
    then
        Called with the gate's results and the rows while the machine lock is still
        held (``make regress`` profiles where the instructions went).
    """
    params = checked.params
    valgrind = valgrind or cachegrind.find_valgrind(params.cache_sim)
    with machine_lock.hold(what):
        gate = runner.run_gate(params, invalid=invalid, sizes=sizes)
        if counted_if is not None and not counted_if(gate):
            return gate, []
        rows = cachegrind.count(
            params.python, base_spec(params, gate), valgrind=valgrind, on_functions=on_functions
        )
        if then is not None:
            then(gate, rows)
        return gate, rows


def run_counts(
    checked: Checked,
    raw_dir: Path,
    run_id: str | None = None,
    *,
    launcher_pid: int,
    question: str = "ab",
    record: Mapping[str, Any] | None = None,
    invalid: str = "refuse",
) -> Path:
    """Gate, then count every variant × case × pool into a new run folder.

    Parameters
    ----------
    checked
        Checked parameters (``metric`` ``instructions``).
    raw_dir, run_id
        Where the run folder goes, and its name (default: a new counts run id).
    launcher_pid
        The command that started the run.
    question
        ``ab`` (a bench) or ``history`` (a release history; ``record`` holds its
        ``history`` key).
    invalid
        The gate's treatment of invalid-operation differences (history records them).

    Returns
    -------
    Path
        The run folder.

    Raises
    ------
    BenchInputError
        valgrind is missing (one line saying how to install it): nothing written.
    GateRefused
        A variant failed the gate: nothing written.
    """
    params, py = checked.params, checked.python
    valgrind = cachegrind.find_valgrind(params.cache_sim)
    start = time.monotonic()
    # The holder another command is told of: a history's counts are not a bench's.
    with machine_lock.hold("make history" if question == "history" else "make bench"):
        gate = runner.run_gate(params, invalid=invalid)
        run_id = run_id or schema.new_run_id(py["tag"], schema.KIND_COUNTS)
        jobs = cachegrind.plan(params.labels, params.cases, params.pools)
        rec = run_folder.start_record(
            schema.KIND_COUNTS,
            run_id,
            params.host,
            python=py,
            baseline=params.labels[0],
            variants=[
                {**g["provenance"], "gate": {k: g.get(k) for k in ("ok", "ops_checked", "sizes")}}
                for g in gate
            ],
            parameters=params.record(),
            launcher_pid=launcher_pid,
            seeds={"run": params.seed, "gate": model_check.DEFAULT_SEED, "case": params.seed},
            processes_planned={"main": len(jobs), "confirm": 0},
            extra={
                schema.QUESTION_KEY: question,
                schema.COUNTING_KEY: counting_record(valgrind),
                **(record or {}),
            },
        )
        writer = run_folder.create_run(raw_dir, rec, COUNTS)
        print(
            f"run {run_id}: {len(jobs)} counts under cachegrind on {py['executable']} "
            f"({py['version']}) -> {writer.dir}",
            file=sys.stderr,
        )
        interrupted = f"interrupted: {writer.dir} keeps the finished counts, marked incomplete"
        with run_folder.closing_run(writer, interrupted):
            done = 0

            def keep(row: dict[str, Any], seconds: float) -> None:
                nonlocal done
                done += 1
                info = {"phase": "main", "process": done, "run": row["run"], "seconds": seconds}
                writer.add_process("main", done, [row], info)

            spec = base_spec(params, gate)
            totals = where_run.FunctionTotals()
            cachegrind.count(
                params.python, spec, valgrind=valgrind, on_row=keep, on_functions=totals
            )
            write_where(writer, params.python, spec, totals, valgrind)
    print(f"complete: {writer.dir} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return writer.dir
