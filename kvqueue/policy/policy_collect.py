"""One policy run: ``make policy HOST=...`` (docs/design.md §12).

The machine lock, the invariant check in the measured interpreter, then one worker
process (:mod:`kvqueue.policy.policy_worker`) at a time, each writing its rows into
``data/raw/<host>/<run-id>/`` with the writer of every run folder
(:class:`kvqueue.measure.run_folder.RunWriter`, its data file :data:`POLICY_TABLE`):

``run.json``
    ``kind: "policy"``, the parameters (workload included), the seeds, the variant's
    provenance and check result, the machine, the interpreter, the project state, the
    processes planned and completed, ``files`` (sha256 and rows of ``policy.csv``).
``policy_age.csv``
    One row per process, policy and engine-age window: ``process`` then
    :data:`kvqueue.schema.POLICY_AGE_ROW_KEYS` (``run.json`` ``protocol``
    :data:`kvqueue.schema.POLICY_PROTOCOL`; runs before it wrote ``policy.csv``, one row
    per process and policy, warm-up and measurement in engine steps).

First the gate: the variant passes the bench's validation gate
(:func:`kvqueue.measure.runner.run_gate`, ``python -m kvqueue validate --json``) at the
pool size the run uses, then the policies' invariant check; a refusal is one line and
nothing is written. A trace (``TRACE``) is read and checked before either, and played
once under ``lru`` (:func:`trace_info`): one that needs more blocks than its pool or
ends before ``TURNOVERS`` is refused in one line.

After every process ``policy.csv`` and then ``run.json`` are rewritten atomically with
SIGINT, SIGTERM and SIGHUP held, so run.json never counts a process whose rows are not
on disk; ``status`` is ``running`` until the last process, then ``complete``
(``interrupted`` on Ctrl-C, SIGTERM or SIGHUP, taken as Ctrl-C while the machine lock is
held; ``failed`` on an error): a cut run is never read as complete. Standard library
only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvqueue import schema
from kvqueue.errors import BenchError, BenchInputError, GateRefused
from kvqueue.measure import machine_lock, run_folder, runner
from kvqueue.params import policy_params
from kvqueue.params.bench_params import BenchParams
from kvqueue.params.policy_params import PolicyParams
from kvqueue.policy import age_windows, trace
from kvqueue.subjects.our_queue import FreeKVCacheBlockQueue
from kvqueue.subjects.stand_in_block import KVCacheBlock

#: Seed of the invariant check (fixed, like the bench gate's).
CHECK_SEED = 20261129
CHECK_TIMEOUT = 600.0


def rows_text(rows: list[dict[str, Any]]) -> str:
    """``policy_age.csv`` as text (csv module; floats with 6 decimals)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(schema.POLICY_AGE_COLUMNS)
    for row in rows:
        out.writerow(
            [
                f"{row[c]:.6f}" if isinstance(row[c], float) else row[c]
                for c in schema.POLICY_AGE_COLUMNS
            ]
        )
    return buf.getvalue()


def policy_row(process: int, phase: str, row: dict[str, Any]) -> dict[str, Any]:
    """One ``policy_age.csv`` row: a worker's row after its process (policy runs have
    one phase, ``main``)."""
    return {"process": process, **row}


#: ``policy_age.csv``: the data file of a policy run
#: (:class:`kvqueue.measure.run_folder.RunWriter`).
POLICY_TABLE = run_folder.RunTable(schema.POLICY_AGE_CSV, rows_text, policy_row)


def trace_info(p: PolicyParams) -> dict[str, Any] | None:
    """The checked trace of a run (path, sha256, header, events, the turnovers it holds
    and its peak blocks in use per side, both under ``lru``), or ``None``.

    Read whole and played once under ``lru`` (:func:`kvqueue.policy.trace.size`) before
    the gate, so that a trace that does not fit its pool, or that ends before the run's
    ``TURNOVERS``, is refused before anything is written.

    Raises
    ------
    BenchInputError
        The trace does not follow the format, does not fit its pool, or ends before
        ``TURNOVERS`` (one line naming the file, and what to set).
    """
    if not p.trace:
        return None
    path = Path(p.trace).resolve()
    try:
        header, events = trace.read_trace(path)
        held = trace.size(path, header, events, FreeKVCacheBlockQueue, KVCacheBlock, p.free_order)
        digest = trace.sha256(path)
    except trace.TraceError as exc:
        raise BenchInputError(f"TRACE: {exc}") from None
    check_trace_length(p, held.turnovers)
    return {
        "path": str(path),
        "sha256": digest,
        "header": {k: (list(v) if isinstance(v, tuple) else v) for k, v in header.items()},
        "events": len(events),
        "turnovers": round(held.turnovers, 6),
        "peak_blocks": held.peak,
    }


def _floor2(value: float) -> float:
    """``value`` rounded down to 2 decimals (a setting that stays within the trace)."""
    return math.floor(value * 100) / 100


def check_trace_length(p: PolicyParams, held: float) -> None:
    """Refuse a trace that ends before the run's ``TURNOVERS``: its last age window would
    end early (or, before ``WARMUP_TURNOVERS``, the "steady state" would be the start
    of the trace). The message names the turnovers it holds and the settings that fit.

    Parameters
    ----------
    p
        The run's parameters (``warmup_turnovers``, ``turnovers``, ``trace``).
    held
        The turnovers the trace holds (:attr:`kvqueue.policy.trace.TraceSize.turnovers`).

    Raises
    ------
    BenchInputError
        ``held`` is below ``p.turnovers``.
    """
    if held >= p.turnovers:
        return
    asked = f"WARMUP_TURNOVERS={p.warmup_turnovers:g} to TURNOVERS={p.turnovers:g}"
    end = _floor2(held)
    if end < 0.02:
        fix = "replay a longer trace"
    else:
        warmup = p.warmup_turnovers if p.warmup_turnovers < end else _floor2(end / 2)
        fix = f"set TURNOVERS={end:g} WARMUP_TURNOVERS={warmup:g}, or replay a longer trace"
    raise BenchInputError(
        f"TRACE: {p.trace} holds {held:.2f} turnovers (under lru), the run measures from "
        f"{asked}: {fix}"
    )


def recorded_workload(p: PolicyParams, traced: dict[str, Any] | None) -> dict[str, Any]:
    """The workload a run's ``run.json`` records: the parameters', or a trace's own where
    its header says (its pool always): a replay recorded the workload parameters it
    never used (pool 4,096 for a trace of 512 blocks)."""
    workload = p.workload()
    if traced is None:
        return workload
    header = traced["header"]
    own = {k: v for k, v in (header.get("workload") or {}).items() if k in workload}
    return {**workload, **own, "pool": int(header["pool"])}


def run_pool(p: PolicyParams, traced: dict[str, Any] | None) -> int:
    """Blocks per pool of the run: the trace's, else the workload's."""
    return int(traced["header"]["pool"]) if traced else p.pool


def run_bench_gate(p: PolicyParams, pool: int) -> list[dict[str, Any]]:
    """The gate of ``make bench`` for the policy's variant at the run's pool size.

    Raises
    ------
    GateRefused
        The variant failed (one line: the gate's first failing line and its error).
    """
    params = replace(BenchParams(), python=p.python, variants=(p.variant,), pools=(pool,))
    try:
        return runner.run_gate(params)
    except GateRefused as exc:
        failing = exc.failure or str(exc).strip().splitlines()[-1]
        raise GateRefused(f"policy refused by the bench gate: {failing}") from None


def process_seeds(seed: int, processes: int) -> list[int]:
    """The seed of every process (its request stream and shuffles)."""
    rng = random.Random(f"policy:{seed}")
    return [rng.getrandbits(32) for _ in range(processes)]


def _child(python: str, args: list[str], spec: dict[str, Any], timeout: float, what: str) -> dict:
    proc = runner.run_child(
        [python, "-m", "kvqueue.policy.policy_worker", *args],
        input_text=json.dumps(spec),
        timeout=timeout,
        what=what,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"{what} exited with {proc.returncode}: {tail}")
    return json.loads(proc.stdout)


def run_check(p: PolicyParams) -> dict[str, Any]:
    """The invariant check of every policy in the measured interpreter.

    Raises
    ------
    GateRefused
        A rule was broken (one line naming the policy, the step and the rule).
    """
    spec = {
        "source": p.variant,
        "block_source": None,
        "policies": p.policies,
        "threshold": p.threshold,
        "seed": CHECK_SEED,
    }
    result = _child(p.python, ["--check"], spec, CHECK_TIMEOUT, "policy check")
    if not result.get("ok"):
        raise GateRefused(f"policy check refused: {result.get('error')}")
    return result


def worker_timeout(p: PolicyParams) -> float:
    """Seconds one worker may take: generous, from the steps it runs (an unbounded
    search over a big pool is the slow part: ~1 ms per allocation on 12,000 free blocks)."""
    # Measured: 20 turnovers of a 4,096-block pool take 0.1-0.4 s per bounded window;
    # allow 50x that per block turned over, and the unbounded search far more.
    blocks = p.turnovers * p.pool * len(p.policies)
    return 300.0 + blocks * 2.5e-4 * (1 + p.pool / 4096)


def run_policy(
    p: PolicyParams, python_info: dict[str, Any], raw_dir: Path, run_id: str, announce: str = ""
) -> Path:
    """Run a checked policy run into ``raw_dir/<host>/<run_id>/``; return the folder
    (``announce``: the line printed to stderr once the trace and pool are checked, before
    the gate).

    Raises
    ------
    GateRefused
        The invariant check failed: nothing was written.
    BenchError
        A worker failed or timed out (the run is marked ``failed``).
    BenchInputError
        Another bench or policy run holds the machine lock.
    """
    with machine_lock.hold(f"policy run {run_id}"):
        return _run_locked(p, python_info, raw_dir, run_id, announce)


def _run_locked(
    p: PolicyParams, py: dict[str, Any], raw_dir: Path, run_id: str, announce: str
) -> Path:
    traced = trace_info(p)
    if traced and traced["turnovers"] > p.turnovers * 1.01:
        print(
            f"note: TRACE holds {traced['turnovers']:.2f} turnovers (under lru), past "
            f"TURNOVERS={p.turnovers:g}: it is replayed whole, so the last age window runs "
            f"to its end (age_to)",
            file=sys.stderr,
            flush=True,
        )
    pool = run_pool(p, traced)
    if announce:
        print(announce, file=sys.stderr, flush=True)
    gate = run_bench_gate(p, pool)
    check = run_check(p)
    edges = age_windows.age_edges(p.warmup_turnovers, p.turnovers)
    seeds = process_seeds(p.seed, p.processes)
    record = run_folder.start_record(
        schema.KIND_POLICY,
        run_id,
        p.host,
        python=py,
        baseline="lru",
        variants=[
            {
                **check["provenance"],
                "check": {
                    k: check.get(k) for k in ("ok", "seed", "seconds", "policies", "workload")
                },
            }
        ],
        parameters=p.record(),
        launcher_pid=os.getpid(),
        seeds={"run": p.seed, "check": CHECK_SEED, "processes": {"main": seeds}},
        processes_planned={"main": p.processes, "confirm": 0},
        extra={
            "workload": recorded_workload(p, traced),
            "policies": p.policies,
            "protocol": schema.POLICY_PROTOCOL,
            "regime_label": policy_params.regime_label(p),
            "age_edges": edges,
            "trace": traced,
            "gate": [
                {k: g.get(k) for k in ("label", "ok", "ops_checked", "sizes", "sha256")}
                for g in gate
            ],
        },
    )
    writer = run_folder.create_run(raw_dir, record, POLICY_TABLE)
    start = time.monotonic()
    print(
        f"policy run {run_id}: {p.processes} processes x {len(p.policies)} policies on "
        f"{p.variant} under {py['executable']} ({py['version']}) -> {writer.dir}",
        file=sys.stderr,
        flush=True,
    )
    with run_folder.closing_run(writer, f"interrupted: {writer.dir} is marked incomplete"):
        for number, seed in enumerate(seeds, start=1):
            spec = {
                "source": p.variant,
                "block_source": None,
                "expected_sha256": check["sha256"],
                "policies": p.policies,
                "threshold": p.threshold,
                "workload": p.workload(),
                "edges": edges,
                "trace": traced["path"] if traced else None,
                "seed": seed,
                "cpu": p.cpu if p.cpu == "auto" else int(p.cpu),
                "gc": p.gc,
            }
            result = _child(
                p.python, [], spec, worker_timeout(p), f"policy worker process {number}"
            )
            info = {
                "process": number,
                "seed": seed,
                **{k: result[k] for k in ("cpu", "pinned", "note", "seconds")},
            }
            writer.add_process("main", number, result["rows"], info)
            elapsed = time.monotonic() - start
            eta = elapsed / number * (p.processes - number)
            print(
                f"[{number:>2}/{p.processes}] {result['seconds']:.1f} s on CPU {result['cpu']}"
                f"{'' if result['pinned'] else ' (not pinned)'}: descriptors per READ at the "
                f"end, {_steady(result['rows'])}; ETA {eta:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    print(f"complete: {writer.dir} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return writer.dir


def _steady(rows: list[dict[str, Any]]) -> str:
    """Descriptors per READ of each policy in its last age window (a progress line)."""
    last: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["policy"] not in last or row["window_from"] > last[row["policy"]]["window_from"]:
            last[row["policy"]] = row
    return " ".join(
        f"{name} {r['descriptors'] / r['reads']:.1f}" if r["reads"] else f"{name} n/a"
        for name, r in last.items()
    )
