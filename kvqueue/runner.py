"""Run the timing protocol on one host and write ``data/raw/<host>/<run-id>/``.

The last step of the bench route (``__main__`` -> ``params.check`` -> ``notebook_run``
-> ``bench.ipynb`` -> here -> ``worker``); see ``docs/design.md``. Order of work:

1. take :class:`kvqueue.params.Checked` parameters (checked once, by the CLI; a bare
   :class:`~kvqueue.params.BenchParams` is checked here) — bad input writes nothing;
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
import csv
import datetime as dt
import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvqueue import hostinfo, schema, validate
from kvqueue.errors import BenchError, GateRefused
from kvqueue.params import BenchParams, Checked, check

RAW_DIR = hostinfo.PROJECT_DIR / "data" / "raw"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _worker_env() -> dict[str, str]:
    # The measured interpreter has nothing installed: it finds the package by path.
    # Gate and workers run in the caller's folder, so relative variant paths resolve
    # there exactly as they did when the parameters were checked.
    env = dict(os.environ)
    env["PYTHONPATH"] = str(hostinfo.PROJECT_DIR)
    env.pop("PYTHONSTARTUP", None)
    return env


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename (never half-written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def run_gate(params: BenchParams) -> list[dict[str, Any]]:
    """Run ``python -m kvqueue validate`` under the measured interpreter.

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
    cmd += ["--seed", str(validate.DEFAULT_SEED)]
    if params.block_source:
        cmd += ["--block-source", params.block_source]
    proc = subprocess.run(
        [*cmd, *params.sources],
        capture_output=True,
        text=True,
        env=_worker_env(),
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise GateRefused(f"validation gate did not run: {proc.stderr.strip()}") from None
    lines = []
    for result in report["results"]:
        status = "PASS" if result["ok"] else "FAIL"
        lines.append(
            f"gate {status} {result['label']}: {result['ops_checked']:,} ops, "
            f"{result['invalid_compared']} invalid ops, sha256 {result['sha256'][:16]}"
        )
        if result["error"]:
            lines.append("    " + result["error"].replace("\n", "\n    "))
    if proc.returncode != 0:
        raise GateRefused(
            "validation gate refused a variant; nothing was timed\n" + "\n".join(lines)
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


def _process_plan(params: BenchParams) -> list[tuple[str, int, int]]:
    """(phase, process number, seed) for every process, seeded by the run seed."""
    rng = random.Random(params.seed)
    plan = [("main", i, rng.getrandbits(32)) for i in range(1, params.processes + 1)]
    plan += [("confirm", i, rng.getrandbits(32)) for i in range(1, params.confirm_processes + 1)]
    return plan


class RunWriter:
    """Owns one run folder: creates it once, then rewrites its files atomically."""

    def __init__(self, run_dir: Path, record: dict[str, Any]) -> None:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(exist_ok=False)  # a run folder is never reused
        self.dir = run_dir
        self.record = record
        self.rows: list[list[Any]] = []
        self.save()

    def add_process(self, phase: str, process: int, rows: list[list[Any]], info: dict) -> None:
        # Ctrl-C between these updates would let the interrupt handler save rows of a
        # process that run.json does not count: hold SIGINT until both are on disk.
        with _sigint_held():
            self.rows.extend([process, phase, *row] for row in rows)
            self.record["processes_completed"][phase] += 1
            self.record["process_info"].append(info)
            self.save()

    def save(self, status: str | None = None) -> None:
        if status:
            self.record["status"] = status
        # samples first: run.json must never count a process whose samples are not on disk.
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(schema.SAMPLE_COLUMNS)
        out.writerows([_cell(v) for v in row] for row in self.rows)
        write_atomic(self.dir / schema.SAMPLES_CSV, buf.getvalue())
        write_atomic(self.dir / schema.RUN_JSON, json.dumps(self.record, indent=2) + "\n")


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Delay SIGINT (delivered on exit) where the platform allows it."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _cell(value: Any) -> Any:
    # Floats in the schema's one format; the csv module quotes labels (source strings)
    # that hold a comma or a quote.
    return schema.format_sample_float(value) if isinstance(value, float) else value


def _eta(done: int, total: int, elapsed: float) -> str:
    if done == 0:
        return "?"
    left = elapsed / done * (total - done)
    return f"{int(left // 60)}m{int(left % 60):02d}s"


def run_bench(
    params: Checked | BenchParams, raw_dir: Path = RAW_DIR, run_id: str | None = None
) -> Path:
    """Run the whole protocol for one interpreter and return the run folder.

    Parameters
    ----------
    params
        Parameters checked by :func:`kvqueue.params.check`; bare
        :class:`~kvqueue.params.BenchParams` are checked here (once).
    raw_dir
        Root of the raw data (``data/raw``).
    run_id
        Folder name to use; a fresh one by default.

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
    params, py = checked.params, checked.python
    gate = run_gate(params)
    machine = hostinfo.machine_info()
    run_id = run_id or schema.new_run_id(py["tag"])
    labels = params.labels
    plan = _process_plan(params)
    record: dict[str, Any] = {
        "schema_version": schema.SCHEMA_VERSION,
        "run_id": run_id,
        "host": params.host,
        "status": "running",
        "started_at": _now(),
        "ended_at": None,
        "machine": machine,
        "python": py,
        "baseline": labels[0],
        "variants": [
            {
                **g["provenance"],
                "gate": {
                    k: g[k] for k in ("ok", "ops_checked", "invalid_compared", "seconds", "role")
                },
            }
            for g in gate
        ],
        "parameters": params.record(),
        "seeds": {
            "run": params.seed,
            "gate": validate.DEFAULT_SEED,
            "case": params.seed,
            "processes": {ph: [s for p, _, s in plan if p == ph] for ph in schema.PHASES},
        },
        "project": hostinfo.project_info(),
        "processes_planned": {"main": params.processes, "confirm": params.confirm_processes},
        "processes_completed": {"main": 0, "confirm": 0},
        "process_info": [],
    }
    writer = RunWriter(schema.run_path(raw_dir, params.host, run_id), record)
    expected = {g["label"]: g["sha256"] for g in gate}
    start = time.monotonic()
    print(
        f"run {run_id}: {len(plan)} processes on {py['executable']} ({py['version']}) -> "
        f"{writer.dir}",
        file=sys.stderr,
    )
    try:
        for done, (phase, number, seed) in enumerate(plan):
            spec = {
                "sources": params.sources,
                "labels": labels,
                "block_source": params.block_source or None,
                "expected_sha256": expected,
                "cases": phase_cases(params, phase),
                "pools": list(params.pools),
                "samples": params.samples,
                "sample_ms": params.sample_ms,
                "seed": seed,
                "case_seed": params.seed,
                "cpu": params.cpu if params.cpu == "auto" else int(params.cpu),
                "gc": params.gc,
            }
            result = _run_worker(params.python, spec)
            info = {
                "phase": phase,
                "process": number,
                "seed": seed,
                **{k: result[k] for k in ("cpu", "pinned", "note", "seconds", "loops")},
            }
            writer.add_process(phase, number, result["rows"], info)
            if not result["pinned"]:
                print(f"  note: process not pinned to a CPU ({result['note']})", file=sys.stderr)
            elapsed = time.monotonic() - start
            print(
                f"[{done + 1:>2}/{len(plan)}] {phase} {number}: {result['seconds']:.1f} s on "
                f"CPU {result['cpu']}, ETA {_eta(done + 1, len(plan), elapsed)}",
                file=sys.stderr,
                flush=True,
            )
    except KeyboardInterrupt:
        writer.record["ended_at"] = _now()
        writer.save("interrupted")
        print(
            f"interrupted: {writer.dir} keeps the completed processes, marked incomplete",
            file=sys.stderr,
        )
        raise
    except BaseException as exc:
        writer.record["ended_at"] = _now()
        writer.record["error"] = f"{type(exc).__name__}: {exc}"
        writer.save("failed")
        raise
    writer.record["ended_at"] = _now()
    writer.record["machine"]["load_avg_end"] = hostinfo.load_average()
    writer.save("complete")
    print(f"complete: {writer.dir} ({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return writer.dir


def _run_worker(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one fresh worker process and return its parsed result."""
    proc = subprocess.run(
        [python, "-m", "kvqueue.worker"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        env=_worker_env(),
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
