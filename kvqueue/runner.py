"""Run the timing protocol on one host and write ``data/raw/<host>/<run-id>/``.

Order of work (DESIGN §4, §6):

1. check every parameter and resolve every variant source — bad input writes nothing;
2. run the validation gate under the interpreter being MEASURED — a refused variant
   writes nothing;
3. create the run folder (never reusing one) and ``run.json`` with status ``running``;
4. run the main processes, then the confirmation processes, one fresh interpreter
   each; after every process rewrite ``samples.csv`` and ``run.json`` atomically
   (temp file + rename), so an interruption leaves intact completed processes and a
   ``run.json`` whose status says the run is incomplete.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from kvqueue import hostinfo, schema, validate
from kvqueue.params import (
    DEFAULT_VARIANTS,
    BenchInputError,
    BenchParams,
    check_sources,
    make_params,
)

RAW_DIR = hostinfo.PROJECT_DIR / "data" / "raw"


class GateRefused(RuntimeError):
    """The validation gate refused a variant; the message holds the gate's report."""


class BenchError(RuntimeError):
    """A worker process failed; the run folder is marked ``failed``."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id(python_tag: str) -> str:
    """Return a fresh run id: UTC time, interpreter tag (``cp312``) and a random suffix."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    tag = python_tag.replace("cpython-", "cp")
    return f"{stamp}-{tag}-{secrets.token_hex(2)}"


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
        lines = [",".join(schema.SAMPLE_COLUMNS)]
        lines += [",".join(_fmt(v) for v in row) for row in self.rows]
        write_atomic(self.dir / "samples.csv", "\n".join(lines) + "\n")
        write_atomic(self.dir / "run.json", json.dumps(self.record, indent=2) + "\n")


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


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    text = str(value)
    # Labels are source strings: quote them if they could break the CSV.
    return f'"{text}"' if any(c in text for c in ',"\n') else text


def _eta(done: int, total: int, elapsed: float) -> str:
    if done == 0:
        return "?"
    left = elapsed / done * (total - done)
    return f"{int(left // 60)}m{int(left % 60):02d}s"


def run_bench(params: BenchParams, raw_dir: Path = RAW_DIR, run_id: str | None = None) -> Path:
    """Run the whole protocol for one interpreter and return the run folder.

    Parameters
    ----------
    params
        Checked parameters (see :func:`kvqueue.params.make_params`).
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
    check_sources(params)
    py = hostinfo.python_info(params.python)
    gate = run_gate(params)
    machine = hostinfo.machine_info()
    run_id = run_id or new_run_id(py["tag"])
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
    writer = RunWriter(raw_dir / params.host / run_id, record)
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
                "block_source": params.block_source,
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


# ------------------------------------------------------------------------ CLI


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors become one-line BenchInputErrors (``make bench: ...``)."""

    def error(self, message: str) -> NoReturn:
        raise BenchInputError(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m kvqueue bench`` argument parser (the Makefile maps its variables)."""
    p = _OneLineParser(
        prog="python -m kvqueue bench", description="Collect one run of the timing protocol."
    )
    p.add_argument("--host", help="label of this machine (folder under data/raw)")
    p.add_argument("--python", default=sys.executable, help="interpreter to measure")
    p.add_argument(
        "--variants",
        help=f"space-separated sources, baseline first (default: {' '.join(DEFAULT_VARIANTS)})",
    )
    p.add_argument("--processes", type=int)
    p.add_argument("--confirm-processes", type=int)
    p.add_argument("--samples", type=int)
    p.add_argument("--sample-ms", type=float)
    p.add_argument("--pools", help="space-separated pool sizes (default: 2048 100000)")
    p.add_argument("--cases", help=f"space-separated cases (default: {' '.join(schema.CASES)})")
    p.add_argument("--cpu", help="CPU to pin to, or 'auto'")
    p.add_argument("--gc", choices=["disabled", "enabled"])
    p.add_argument("--seed", type=int)
    p.add_argument("--quick", action="store_true", help="a fast smoke run")
    p.add_argument("--aa", action="store_true", help="add an A/A copy of the baseline")
    p.add_argument("--raw-dir", type=Path, default=RAW_DIR)
    p.add_argument(
        "--no-notebook",
        action="store_true",
        help="run directly instead of through notebooks/bench.ipynb",
    )
    return p


def params_from_args(args: argparse.Namespace) -> BenchParams:
    """Turn parsed CLI arguments into checked parameters (raises BenchInputError)."""

    def words(text: str | None) -> list[str] | None:
        return text.split() if text is not None else None

    pools = words(args.pools)
    try:
        pool_sizes = [int(x) for x in pools] if pools is not None else None
    except ValueError:
        raise BenchInputError(f"pools must be whole numbers, got '{args.pools}'") from None
    return make_params(
        args.host,
        args.python,
        variants=words(args.variants),
        processes=args.processes,
        confirm_processes=args.confirm_processes,
        samples=args.samples,
        sample_ms=args.sample_ms,
        pools=pool_sizes,
        cases=words(args.cases),
        cpu=args.cpu,
        gc=args.gc,
        seed=args.seed,
        quick=args.quick or None,
        aa=args.aa or None,
    )


def main(argv: list[str]) -> int:
    """``python -m kvqueue bench``: check input, then run via the bench notebook."""
    try:
        args = build_parser().parse_args(argv)
        args.raw_dir = args.raw_dir.resolve()
        params = params_from_args(args)
        check_sources(params)  # fetch releases now: a bad source is a one-line error
        if args.no_notebook:
            run_bench(params, args.raw_dir)
        else:
            from kvqueue.notebook_run import run_bench_notebook

            run_bench_notebook(params, args.raw_dir)
    except (BenchInputError, GateRefused, BenchError) as exc:
        print(f"make bench: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, BenchInputError) else 1
    except KeyboardInterrupt:
        return 130
    return 0


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
