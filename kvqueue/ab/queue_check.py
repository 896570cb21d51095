"""``make check-queue``: our queue's instructions per operation against a reference.

A regression check that is exact enough for CI: :mod:`kvqueue.measure.cachegrind` counts
the queue (by default ``kvqueue``, this project's) on each case at pool 2,048 under
each interpreter, and compares with ``data/reference/queue-instructions.json``, recorded
by ``make check-queue UPDATE=1``. A case more than ``THRESHOLD_PCT`` above its
reference fails the check; one more than that below it is reported as an improvement
to record.

The reference is keyed by the interpreter's full ``sys.version`` and machine: another
build of the same CPython executes a different number of instructions, so it is
"no reference", never a false failure. An interpreter without a reference is skipped
with a line that says how to record one; a check that compared nothing fails.

Why 1 %: two counts in the same folder agree exactly, but the same commit cloned into
another folder counted up to 0.51 % differently (CPython 3.11.7: about +12 instructions per
operation on every case; 3.10 and 3.13 within 0.27 %), and a reference recorded with
another warm-up plan differed by up to 1.1 %. CI counts in a fresh clone elsewhere, so
1 % leaves a margin of ~0.5 pp; a real change of the code path (three wasted bytecodes
in ``popleft_n``) is well above it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kvqueue import hostinfo
from kvqueue.errors import BenchInputError
from kvqueue.measure import cachegrind
from kvqueue.stats import count_figures

REFERENCE = Path("data") / "reference" / "queue-instructions.json"
REFERENCE_FORMAT = 1
THRESHOLD_PCT = 1.0
CASES = ("alloc1", "alloc2", "mix", "popappend", "remove")
POOL = 2048
SEED = 1


@dataclass(frozen=True)
class Outcome:
    """One interpreter's result: ``status`` is ok, failed, skipped or recorded."""

    python: str
    key: str
    status: str
    lines: tuple[str, ...]


def interpreter_key(python: str) -> tuple[str, str]:
    """(key, version) of an interpreter: ``sys.version`` and machine, and X.Y.Z."""
    code = (
        "import sys, platform, json; print(json.dumps([sys.version.replace(chr(10), ' '), "
        "platform.machine(), platform.python_version()]))"
    )
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise BenchInputError(f"cannot run {python}: {proc.stderr.strip()[-200:]}")
    version, machine, short = json.loads(proc.stdout)
    return f"{version} [{machine}]", short


def load_reference(path: Path) -> dict[str, Any]:
    """The reference file, or an empty one if it does not exist yet.

    Raises
    ------
    BenchInputError
        The file is not a reference of a format this code reads (one line).
    """
    if not path.exists():
        return {"format": REFERENCE_FORMAT, "threshold_pct": THRESHOLD_PCT, "entries": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"{path}: not a readable reference ({exc})") from None
    if data.get("format") != REFERENCE_FORMAT or not isinstance(data.get("entries"), dict):
        raise BenchInputError(f"{path}: not a format-{REFERENCE_FORMAT} reference")
    return data


def count_queue(
    python: str, queue: str, cases: Sequence[str], valgrind: cachegrind.Valgrind, progress: TextIO
) -> dict[str, float]:
    """Instructions per operation of ``queue`` per case at pool 2,048."""
    spec = {
        "sources": [queue],
        "labels": [queue],
        "block_source": None,
        "block_mode": "shared",
        "expected_sha256": {},
        "cases": list(cases),
        "pools": [POOL],
        "seed": SEED,
        "case_seed": SEED,
    }
    rows = cachegrind.count(python, spec, valgrind=valgrind, progress=progress)
    return {c.case: c.instructions for c in count_figures.per_op(rows)}


def check(
    pythons: Sequence[str],
    *,
    queue: str = "kvqueue",
    reference: Path = REFERENCE,
    update: bool = False,
    cases: Sequence[str] = CASES,
    out: TextIO | None = None,
) -> list[Outcome]:
    """Count ``queue`` under each interpreter and compare with (or record) the reference.

    Returns
    -------
    list of Outcome
        One per interpreter, in the given order.
    """
    stream = out or sys.stdout
    valgrind = cachegrind.find_valgrind(cache_sim=False)
    data = load_reference(reference)
    threshold = float(data.get("threshold_pct", THRESHOLD_PCT))
    outcomes = []
    for python in pythons:
        key, short = interpreter_key(python)
        entry = data["entries"].get(key)
        if entry is None and not update:
            line = (
                f"check-queue: {python} (CPython {short}): no reference for this build; "
                f"record one with `make check-queue UPDATE=1 PYTHONS={python}`"
            )
            print(line, file=stream)
            outcomes.append(Outcome(python, key, "skipped", (line,)))
            continue
        per_op = count_queue(python, queue, cases, valgrind, sys.stderr)
        if update:
            data["entries"][key] = {
                "python": short,
                "queue": queue,
                "pool": POOL,
                "warmup_ops": cachegrind.WARMUP_OPS,
                "target_ops": cachegrind.TARGET_OPS,
                "valgrind": valgrind.version,
                "options": valgrind.options(),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "project_commit": hostinfo.project_info().get("commit") or "",
                "instructions_per_op": {c: round(v, 3) for c, v in per_op.items()},
            }
            line = f"check-queue: {python} (CPython {short}): reference recorded for {queue}"
            print(line, file=stream)
            outcomes.append(Outcome(python, key, "recorded", (line,)))
            continue
        lines, failed = [], False
        for case, value in per_op.items():
            ref = entry["instructions_per_op"].get(case)
            if ref is None:
                lines.append(f"  {case}: {value:,.1f} instructions/op (no reference)")
                continue
            change = 100.0 * (value / ref - 1.0)
            verdict = "ok"
            if change > threshold:
                verdict, failed = f"SLOWER (> +{threshold:g} %)", True
            elif change < -threshold:
                verdict = "faster: record it with UPDATE=1"
            lines.append(
                f"  {case}: {value:,.1f} instructions/op vs {ref:,.1f} ({change:+.2f} %) {verdict}"
            )
        head = f"check-queue: {python} (CPython {short}), {queue}: {'FAILED' if failed else 'ok'}"
        print(head, *lines, sep="\n", file=stream)
        outcomes.append(Outcome(python, key, "failed" if failed else "ok", (head, *lines)))
    if update:
        reference.parent.mkdir(parents=True, exist_ok=True)
        tmp = reference.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(reference)
    return outcomes


def exit_status(outcomes: Sequence[Outcome]) -> int:
    """0 when every compared interpreter passed and at least one was compared or recorded."""
    if any(o.status == "failed" for o in outcomes):
        return 1
    if not any(o.status in ("ok", "recorded") for o in outcomes):
        print("check-queue: nothing was compared (no interpreter has a reference)", file=sys.stderr)
        return 1
    return 0
