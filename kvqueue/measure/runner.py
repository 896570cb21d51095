"""Run the timing protocol on one host and write ``data/raw/<host>/<run-id>/``.

The last step of the bench route (``__main__`` -> ``bench.checks.check`` -> ``notebook_run``
-> ``bench.ipynb`` -> here -> ``worker``); see ``docs/design.md`` §9. Order of work:

1. take :class:`kvqueue.params.bench_params.Checked` parameters (checked once, by the CLI; a bare
   :class:`~kvqueue.params.bench_params.BenchParams` is checked here) — bad input writes nothing;
2. run the validation gate under the interpreter being MEASURED — a refused variant
   writes nothing;
3. create the run folder (never reusing one) and ``run.json`` with status ``running``;
4. run the main processes, then the confirmation processes, one fresh interpreter
   each; after every process rewrite ``samples.csv`` and ``run.json`` atomically
   (temp file + rename), so an interruption leaves intact completed processes and a
   ``run.json`` whose status says the run is incomplete.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchError, GateRefused
from kvqueue.gate import model_check
from kvqueue.gate.gate import sizes_summary as gate_sizes
from kvqueue.measure import child, machine_lock, process_sizing, run_folder
from kvqueue.measure.interpreter_checks import check
from kvqueue.measure.run_folder import RunWriter
from kvqueue.params.bench_params import BUDGET_START_ENV, BenchParams, Checked
from kvqueue.params.report_params import DEFAULT_PAIRS
from kvqueue.schema import MIN_POOL

RAW_DIR = hostinfo.PROJECT_DIR / "data" / "raw"
#: A variant that never returns must not hang a bench forever. The gate takes 2-6 s per
#: variant here (60,000 ops plus the timed pool sizes); a worker process of the default
#: protocol 15-25 s. The limits allow ten times that, and more on slower machines.
GATE_SECONDS_PER_VARIANT = 60.0
GATE_SECONDS_BASE = 120.0
WORKER_SLACK = 10.0
WORKER_SECONDS_BASE = 120.0

#: The comparisons and cases a run is sized for: (candidate, baseline) pairs and cases.
SizingTargets = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


def bench_sizing_targets(record: Mapping[str, Any]) -> SizingTargets:
    """What a bench run is sized for: :data:`~kvqueue.params.DEFAULT_PAIRS` on the
    headline cases (:data:`kvqueue.measure.process_sizing.HEADLINE_CASES`), or on every
    case a queue run times when it times none of them (``CASES=alloc500``); a pool run
    (``parameters.subject`` pool), on every case it times (the pairs present, else every
    candidate against its baseline: :mod:`kvqueue.stats.comparisons`)."""
    params = record.get("parameters") or {}
    cases = tuple(params.get("cases") or ())
    if params.get("subject") == schema.SUBJECT_POOL:
        return DEFAULT_PAIRS, cases
    queue = params.get("subject", schema.SUBJECT_QUEUE) == schema.SUBJECT_QUEUE
    if queue and cases and not set(cases) & set(process_sizing.HEADLINE_CASES):
        return DEFAULT_PAIRS, cases
    return DEFAULT_PAIRS, process_sizing.HEADLINE_CASES


@dataclass(frozen=True)
class RunKind:
    """What the runner needs to know of the question a run of the paired protocol answers.

    The default is a bench run; a release history (:mod:`kvqueue.history.history_collect`) gives
    its own. The runner itself knows no kind but through this.

    Attributes
    ----------
    kind
        ``run.json``'s kind (:data:`kvqueue.schema.RUN_KINDS`); it names new run folders.
    record
        The kind's own ``run.json`` keys (:attr:`kvqueue.runrecord.RunRecord.extra`).
    invalid_ops
        The gate's handling of a difference on invalid use: ``refuse`` or ``record``.
    sizing_targets
        ``run.json`` record after the pilot -> the pairs and cases the second stage is
        sized for (:func:`kvqueue.measure.process_sizing.size_run`).
    """

    kind: str = schema.KIND_BENCH
    record: Mapping[str, Any] = field(default_factory=dict)
    invalid_ops: str = "refuse"
    sizing_targets: Callable[[Mapping[str, Any]], SizingTargets] = bench_sizing_targets


#: A bench run (``make bench``).
BENCH = RunKind()


def _worker_env() -> dict[str, str]:
    # The measured interpreter has nothing installed: it finds the package by path.
    # Gate and workers run in the caller's folder, so relative variant paths resolve
    # there exactly as they did when the parameters were checked.
    env = dict(os.environ)
    env["PYTHONPATH"] = str(hostinfo.PROJECT_DIR)
    env[child.PARENT_ENV] = str(os.getpid())
    env.pop("PYTHONSTARTUP", None)
    return env


def run_child(
    cmd: list[str], *, input_text: str | None, timeout: float, what: str
) -> subprocess.CompletedProcess[str]:
    """Run a gate or worker process in a session of its own, with a time limit.

    On a timeout, an interruption or any error the whole session is killed, so no child
    outlives the runner; with the parent-death signal not even a ``kill -9`` of the
    runner leaves one behind.

    Raises
    ------
    BenchError
        ``what`` took longer than ``timeout`` seconds (one line).
    """
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_worker_env(),
        start_new_session=True,  # see kvqueue.measure.child: it dies with this process
    )
    try:
        out, err = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        raise BenchError(
            f"{what} did not finish within {timeout:.0f} s (a variant that never returns?); "
            "it was stopped"
        ) from None
    except BaseException:
        _kill_session(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_session(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=5)


def run_gate(
    params: BenchParams, invalid: str = "refuse", sizes: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    """Run ``python -m kvqueue validate`` under the measured interpreter.

    The model check runs at the pools the run measures, the smallest pool allowed, and
    any further ``sizes`` (``make quick`` adds the bench's pools: a queue broken only
    above 5,000 blocks passed a gate that stopped at 2,048), with the batch lengths of the
    run's cases (``--cases``: N of every ``allocN`` and ``popleftN``).

    Returns
    -------
    list of dict
        Per variant: the gate result and the variant's provenance.

    Raises
    ------
    GateRefused
        Any variant failed; the message is the gate's readable report.
    """
    cmd = [params.python, "-m", "kvqueue", "validate", "--json", "--ops", str(params.gate_ops)]
    cmd += ["--seed", str(model_check.DEFAULT_SEED)]
    # The model check at the sizes this run times (and the smallest pool allowed).
    cmd += ["--sizes", ",".join(map(str, sorted({MIN_POOL, *params.pools, *sizes})))]
    if params.block_source:
        cmd += ["--block-source", params.block_source]
    if params.block_mode != "shared":
        cmd += ["--block-mode", params.block_mode]
    if invalid != "refuse":
        cmd += ["--invalid-ops", invalid]
    if params.subject != schema.SUBJECT_QUEUE:
        cmd += ["--subject", params.subject]
    else:
        cmd += ["--cases", " ".join(dict.fromkeys([*params.cases, *params.confirm_cases]))]
    timeout = GATE_SECONDS_BASE + GATE_SECONDS_PER_VARIANT * len(params.sources)
    proc = run_child(
        [*cmd, *params.sources], input_text=None, timeout=timeout, what="the validation gate"
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise GateRefused(f"validation gate did not run: {tail}") from None
    lines, failures = [], []
    for result in report["results"]:
        status = "PASS" if result["ok"] else "FAIL"
        sized = result.get("size_ops_checked", 0)
        if result.get("subject") in (schema.SUBJECT_POOL, schema.SUBJECT_MANAGER):
            named = ", ".join(result.get("differences") or ()) or "none"
            unit = "calls" if result["subject"] == schema.SUBJECT_POOL else "scheduler steps"
            summary = (
                f"gate {status} {result['label']}: {result['ops_checked']:,} {unit} compared "
                f"at {' '.join(map(str, result.get('sizes') or [])) or 'no size passed'} "
                f"blocks, named differences: {named}, sha256 {result['sha256'][:16]}"
            )
        else:
            sizes = gate_sizes(
                sized,
                result.get("sizes") or [],
                result.get("failed_size"),
                result.get("batches") or (),
            )
            summary = (
                f"gate {status} {result['label']}: {result['ops_checked']:,} ops, "
                f"{result['invalid_compared']} invalid ops, {sizes}, "
                f"sha256 {result['sha256'][:16]}"
            )
        lines.append(summary)
        lines += [f"    note: {note}" for note in result.get("skipped") or ()]
        lines += [f"    differs (recorded): {d}" for d in result.get("invalid_differs") or ()]
        if result["error"]:
            lines.append("    " + result["error"].replace("\n", "\n    "))
            failures.append(f"{summary}: {result['error'].strip().splitlines()[0]}")
    if proc.returncode != 0:
        raise GateRefused(
            "validation gate refused a variant; nothing was timed\n" + "\n".join(lines),
            failure=failures[0] if failures else "",
        )
    print("\n".join(lines), file=sys.stderr)
    return report["results"]


def phase_cases(params: BenchParams, phase: str) -> list[str]:
    """Cases a process of ``phase`` times: all for ``main``; for ``confirm`` the
    confirmation cases that the run measured, or all confirmation cases when it measured
    none of them."""
    if phase == "main":
        return list(params.cases)
    return [c for c in params.confirm_cases if c in params.cases] or list(params.confirm_cases)


def process_plan(params: BenchParams, main: int | None = None) -> list[tuple[str, int, int]]:
    """(phase, process number, seed) for every process, seeded by the run seed.

    ``main`` main processes (default ``params.processes``), then the confirmation ones.
    Main seeds come from the run seed's stream and confirmation seeds from a second
    stream, so that a run sized up after its pilot keeps every seed it already used.
    """
    main_rng = random.Random(params.seed)
    confirm_rng = random.Random(f"confirm:{params.seed}")
    n_main = params.processes if main is None else main
    plan = [("main", i, main_rng.getrandbits(32)) for i in range(1, n_main + 1)]
    plan += [
        ("confirm", i, confirm_rng.getrandbits(32)) for i in range(1, params.confirm_processes + 1)
    ]
    return plan


def _size_after_pilot(
    params: BenchParams, writer: RunWriter, seconds_spent: float, kind: RunKind
) -> process_sizing.Sizing:
    """Decide the main-phase size from the pilot's samples (see
    :mod:`kvqueue.measure.process_sizing`)."""
    info = [p for p in writer.record["process_info"] if p["phase"] == "main"]
    per_process = sum(p["seconds"] for p in info) / max(1, len(info))
    # A confirmation process times fewer cases: scale its expected time by that share.
    share = len(phase_cases(params, "confirm")) / max(1, len(params.cases))
    bounds = [v["label"] for v in writer.record["variants"] if v.get("is_bound")]
    pairs, cases = kind.sizing_targets(writer.record)
    return process_sizing.size_run(
        writer.rows,
        params.labels,
        bounds,
        pilot=params.processes,
        precision_pp=params.precision,
        max_processes=params.max_processes,
        max_minutes=params.max_minutes,
        seconds_per_process=per_process,
        seconds_spent=seconds_spent,
        seconds_after=params.confirm_processes * per_process * share,
        pairs=pairs,
        cases=cases,
    )


def _seconds_since_launch(now: float | None = None) -> float:
    """Seconds since ``python -m kvqueue bench`` started (0 when it left no time, or a
    time that cannot be this launch's: in the future or over an hour old)."""
    now = time.time() if now is None else now
    try:
        started = float(os.environ.get(BUDGET_START_ENV, ""))
    except ValueError:
        return 0.0
    spent = now - started
    return spent if 0 <= spent < 3600 else 0.0


def _eta(done: int, total: int, elapsed: float) -> str:
    if done == 0:
        return "?"
    left = elapsed / done * (total - done)
    return f"{int(left // 60)}m{int(left % 60):02d}s"


def run_bench(
    params: Checked | BenchParams,
    raw_dir: Path = RAW_DIR,
    run_id: str | None = None,
    launcher_pid: int | None = None,
    kind: RunKind = BENCH,
) -> Path:
    """Run the whole protocol for one interpreter and return the run folder.

    Parameters
    ----------
    params
        Parameters checked by :func:`kvqueue.measure.interpreter_checks.check`; bare
        :class:`~kvqueue.params.bench_params.BenchParams` are checked here (once).
    raw_dir
        Root of the raw data (``data/raw``).
    run_id
        Folder name to use; a fresh one by default.
    launcher_pid
        The process that launched this run (the CLI, when the notebook runs it; default:
        this process). Recorded, so that the launcher files its notebook only into a
        folder that its own run created.
    kind
        What the run is for (its ``run.json`` kind and keys, the gate's handling of
        invalid use, what the second stage is sized for); a bench run by default.

    Raises
    ------
    BenchInputError, GateRefused
        Before anything is written.
    BenchError
        A worker failed (the run folder stays, marked ``failed``).
    KeyboardInterrupt
        After marking the run folder ``interrupted``.
    """
    checked = params if isinstance(params, Checked) else check(params)
    with machine_lock.hold(f"host {checked.params.host}"):
        return _run_locked(checked, raw_dir, run_id, launcher_pid or os.getpid(), kind)


def _run_locked(
    checked: Checked,
    raw_dir: Path,
    run_id: str | None,
    launcher_pid: int,
    kind: RunKind,
) -> Path:
    params, py = checked.params, checked.python
    start = time.monotonic()
    # MAX_MINUTES budgets the whole command: with the gate, the probe and the notebook's
    # kernel outside it, a default `make bench` on 3.10 took 335 s for a 300 s budget.
    spent_before = _seconds_since_launch()
    gate_results = run_gate(params, invalid=kind.invalid_ops)
    run_id = run_id or schema.new_run_id(py["tag"], kind.kind)
    labels = params.labels
    plan = process_plan(params)
    record = run_folder.start_record(
        kind.kind,
        run_id,
        params.host,
        python=py,
        baseline=labels[0],
        variants=[
            {
                **g["provenance"],
                "gate": {
                    k: g.get(k)
                    for k in (
                        "ok",
                        "ops_checked",
                        "invalid_compared",
                        "seconds",
                        "role",
                        "sizes",
                        "size_ops_checked",
                        "size_seconds",
                        "adapter",
                        "invalid_skipped",
                        "invalid_references",
                        "invalid_differs",
                        "skipped",
                    )
                },
            }
            for g in gate_results
        ],
        # confirm_cases as the confirmation phase really times them (see phase_cases).
        parameters={
            **params.record(),
            "confirm_cases": phase_cases(params, "confirm") if params.confirm_processes else [],
        },
        launcher_pid=launcher_pid,
        seeds={
            "run": params.seed,
            "gate": model_check.DEFAULT_SEED,
            "case": params.seed,
            "processes": {ph: [s for p, _, s in plan if p == ph] for ph in schema.PHASES},
        },
        processes_planned={"main": params.processes, "confirm": params.confirm_processes},
        extra=kind.record,
    )
    writer = run_folder.create_run(raw_dir, record, run_folder.SAMPLES)
    expected = {g["label"]: g["sha256"] for g in gate_results}
    # Block mode own: each variant links its own block class, which the gate checked too.
    expected_block = (
        {g["label"]: g["provenance"]["block_class_sha256"] for g in gate_results}
        if params.block_mode == "own"
        else {}
    )
    processes_start = time.monotonic()  # the ETA extrapolates from the processes only
    print(
        f"run {run_id}: {len(plan)} processes on {py['executable']} ({py['version']}) -> "
        f"{writer.dir}",
        file=sys.stderr,
    )
    sized = False
    interrupted = f"interrupted: {writer.dir} keeps the completed processes, marked incomplete"
    with run_folder.closing_run(writer, interrupted):
        done = 0
        while True:
            if not sized and done == params.processes:  # the pilot is complete
                sized = True
                decision = _size_after_pilot(
                    params, writer, spent_before + time.monotonic() - start, kind
                )
                writer.record["sizing"] = decision.record()
                if decision.planned > params.processes:
                    plan = process_plan(params, main=decision.planned)
                    writer.record["processes_planned"]["main"] = decision.planned
                    writer.record["seeds"]["processes"]["main"] = [
                        s for ph, _, s in plan if ph == "main"
                    ]
                writer.save()
                print(
                    f"sizing: {decision.planned} main processes (pilot {params.processes}, "
                    f"the target of ±{params.precision:g} pp asks for {decision.wanted}"
                    + (f"; capped by {decision.capped_by})" if decision.capped_by else ")"),
                    file=sys.stderr,
                    flush=True,
                )
            if done >= len(plan):
                break
            phase, number, seed = plan[done]
            result = run_process(params, phase, number, seed, expected, expected_block)
            info = {
                "phase": phase,
                "process": number,
                "seed": seed,
                **{k: result[k] for k in ("cpu", "pinned", "note", "seconds", "loops")},
            }
            writer.add_process(phase, number, result["rows"], info)
            if not result["pinned"]:
                print(f"  note: process not pinned to a CPU ({result['note']})", file=sys.stderr)
            elapsed = time.monotonic() - processes_start
            done += 1
            print(
                f"[{done:>2}/{len(plan)}] {phase} {number}: {result['seconds']:.1f} s on "
                f"CPU {result['cpu']}, ETA {_eta(done, len(plan), elapsed)}",
                file=sys.stderr,
                flush=True,
            )
    print(f"complete: {writer.dir} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return writer.dir


def run_process(
    params: BenchParams,
    phase: str,
    number: int,
    seed: int,
    expected: dict[str, str],
    expected_block: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run worker process ``number`` of ``phase`` and return its parsed result.

    Parameters
    ----------
    params
        Checked parameters.
    phase, number, seed
        One entry of :func:`process_plan`.
    expected
        Variant label -> class sha256 as the gate saw it (the worker refuses a change).
    expected_block
        Variant label -> block class sha256 as the gate saw it (block mode ``own``).
    """
    cases = phase_cases(params, phase)
    spec = {
        **worker_spec(params, cases, seed, expected, expected_block),
        "samples": params.samples,
        "sample_ms": params.sample_ms,
        "epochs": params.epochs,
        "cpu": params.cpu if params.cpu == "auto" else int(params.cpu),
        "gc": params.gc,
        "phase": phase,
        "process": number,
    }
    return _run_worker(params.python, spec, worker_timeout(params, cases))


def worker_spec(
    params: BenchParams,
    cases: list[str],
    seed: int,
    expected: dict[str, str],
    expected_block: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What every process that builds a worker ``Layout`` needs (timing or counting):
    the variants, the gate's digests, the cells, the block mode and the seeds."""
    return {
        "sources": params.sources,
        "labels": params.labels,
        "block_source": params.block_source or None,
        "expected_sha256": expected,
        "expected_block_sha256": expected_block or {},
        "cases": cases,
        "pools": list(params.pools),
        "block_mode": params.block_mode,
        "subject": params.subject,
        "seed": seed,
        "case_seed": params.seed,
    }


def worker_timeout(params: BenchParams, cases: list[str]) -> float:
    """Seconds one worker process may take: :data:`WORKER_SLACK` times the samples it
    times, plus :data:`WORKER_SECONDS_BASE` for start-up, pools and calibration."""
    timed = len(cases) * len(params.pools) * len(params.sources) * params.samples
    # Calibration and warm-up cost about as much as the samples again.
    return WORKER_SECONDS_BASE + WORKER_SLACK * 2 * timed * params.sample_ms / 1000


def _run_worker(python: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one fresh worker process and return its parsed result."""
    proc = run_child(
        [python, "-m", "kvqueue.measure.timing_worker"],
        input_text=json.dumps(spec),
        timeout=timeout,
        what=f"worker process ({spec.get('phase', '?')} {spec.get('process', '?')})",
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"worker exited with {proc.returncode}: {tail}")
    return json.loads(proc.stdout)


def summarize(run_dir: Path) -> Any:
    """Median ns/cycle per (phase, case, pool) x variant of one run, as a DataFrame.

    A quick look for the bench notebook; the statistics proper live in the report.
    """
    import pandas as pd

    samples = pd.read_csv(Path(run_dir) / "samples.csv")
    per_process = samples.groupby(["phase", "case", "pool", "variant", "process"])[
        "ns_per_cycle"
    ].median()
    table = per_process.groupby(["phase", "case", "pool", "variant"]).median().unstack("variant")
    return table.round(1)
