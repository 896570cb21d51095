"""One policy run: ``make policy HOST=...`` (docs/design.md §12).

The machine lock, the invariant check in the measured interpreter, then one worker
process (:mod:`kvqueue.policy.worker`) at a time, each writing its rows into
``data/raw/<host>/<run-id>/`` with the writer of every run folder
(:class:`kvqueue.bench.runfiles.RunWriter`, its data file :data:`POLICY_TABLE`):

``run.json``
    ``kind: "policy"``, the parameters (workload included), the seeds, the variant's
    provenance and check result, the machine, the interpreter, the project state, the
    processes planned and completed, ``files`` (sha256 and rows of ``policy.csv``).
``policy.csv``
    One row per process and policy: ``process`` then :data:`kvqueue.schema.POLICY_ROW_KEYS`.

After every process ``policy.csv`` and then ``run.json`` are rewritten atomically with
SIGINT held, so run.json never counts a process whose rows are not on disk; ``status``
is ``running`` until the last process, then ``complete`` (``interrupted`` on Ctrl-C,
``failed`` on an error): a cut run is never read as complete. Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from kvqueue import schema
from kvqueue.bench import runfiles, runner
from kvqueue.errors import BenchError, GateRefused
from kvqueue.params.policy import PolicyParams

#: Seed of the invariant check (fixed, like the bench gate's).
CHECK_SEED = 20261129
CHECK_TIMEOUT = 600.0


def rows_text(rows: list[dict[str, Any]]) -> str:
    """``policy.csv`` as text (csv module; floats with 6 decimals)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(schema.POLICY_COLUMNS)
    for row in rows:
        out.writerow(
            [
                f"{row[c]:.6f}" if isinstance(row[c], float) else row[c]
                for c in schema.POLICY_COLUMNS
            ]
        )
    return buf.getvalue()


def policy_row(process: int, phase: str, row: dict[str, Any]) -> dict[str, Any]:
    """One ``policy.csv`` row: a worker's row after its process (policy runs have one
    phase, ``main``)."""
    return {"process": process, **row}


#: ``policy.csv``: the data file of a policy run (:class:`kvqueue.bench.runfiles.RunWriter`).
POLICY_TABLE = runfiles.RunTable(schema.POLICY_CSV, rows_text, policy_row)


def process_seeds(seed: int, processes: int) -> list[int]:
    """The seed of every process (its request stream and shuffles)."""
    rng = random.Random(f"policy:{seed}")
    return [rng.getrandbits(32) for _ in range(processes)]


def _child(python: str, args: list[str], spec: dict[str, Any], timeout: float, what: str) -> dict:
    proc = runner.run_child(
        [python, "-m", "kvqueue.policy.worker", *args],
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
    steps = (p.warmup_steps + p.steps) * 2 * len(p.policies)
    return 120.0 + 20 * steps * (1e-4 + p.pool * 2e-8)


def run_policy(p: PolicyParams, python_info: dict[str, Any], raw_dir: Path, run_id: str) -> Path:
    """Run a checked policy run into ``raw_dir/<host>/<run_id>/``; return the folder.

    Raises
    ------
    GateRefused
        The invariant check failed: nothing was written.
    BenchError
        A worker failed or timed out (the run is marked ``failed``).
    BenchInputError
        Another bench or policy run holds the machine lock.
    """
    with runner.machine_lock(f"policy run {run_id}"):
        return _run_locked(p, python_info, raw_dir, run_id)


def _run_locked(p: PolicyParams, py: dict[str, Any], raw_dir: Path, run_id: str) -> Path:
    check = run_check(p)
    seeds = process_seeds(p.seed, p.processes)
    record = runfiles.start_record(
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
        extra={"workload": p.workload(), "policies": p.policies},
    )
    writer = runfiles.create_run(raw_dir, record, POLICY_TABLE)
    start = time.monotonic()
    print(
        f"policy run {run_id}: {p.processes} processes x {len(p.policies)} policies on "
        f"{p.variant} under {py['executable']} ({py['version']}) -> {writer.dir}",
        file=sys.stderr,
        flush=True,
    )
    with runfiles.closing_run(writer, f"interrupted: {writer.dir} is marked incomplete"):
        for number, seed in enumerate(seeds, start=1):
            spec = {
                "source": p.variant,
                "block_source": None,
                "expected_sha256": check["sha256"],
                "policies": p.policies,
                "threshold": p.threshold,
                "workload": p.workload(),
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
            by_name = {r["policy"]: r for r in result["rows"]}
            lru = by_name["lru"]
            best = by_name[p.policies[-1]]
            print(
                f"[{number:>2}/{p.processes}] {result['seconds']:.1f} s on CPU {result['cpu']}"
                f"{'' if result['pinned'] else ' (not pinned)'}: runs per >=8 allocation "
                f"lru {_per(lru, 'big_runs')}, {p.policies[-1]} {_per(best, 'big_runs')}; "
                f"ETA {eta:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    print(f"complete: {writer.dir} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return writer.dir


def _per(row: dict[str, Any], key: str) -> str:
    n = row["big_allocations"]
    return f"{row[key] / n:.2f}" if n else "n/a"
