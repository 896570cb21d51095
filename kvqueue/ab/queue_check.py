"""``make check-queue``: our queue's instructions per operation against a reference.

A regression check that is exact enough for CI: :mod:`kvqueue.measure.cachegrind` counts
the queue (by default ``kvqueue``, this project's) on each case at pool 2,048 under
each interpreter, and compares with ``data/reference/queue-instructions.json``, recorded
by ``make check-queue UPDATE=1``. A case more than ``THRESHOLD_PCT`` above its
reference fails the check; one more than that below it is reported as an improvement
to record.

A reference knows what it was recorded for (format 2). Its entries are keyed by the
interpreter's full ``sys.version`` and machine: another build of the same CPython
executes a different number of instructions, so it is "no reference", never a false
failure. Each entry records the queue's source string and the sha256 of the loaded class
(and of its block class), and the plan (pool, cases, warm-up and target operations,
seed). A check of another queue source, or with another plan, is refused in one line
(exit 2): a reference recorded by ``UPDATE=1 QUEUE=vllm==0.31.0`` passed our queue as
"ok (-39 %)", so one wrong update disarmed the check. The sha256 is information only:
our queue's code changing is what the check is for, so a different digest is printed
beside the verdict, never refused. A format-1 file (no digest, no plan) is refused with
the command that re-records it. ``UPDATE=1`` prints old → new per case ("new" where
there was none) and any change of queue or plan.

Every input is checked before valgrind starts, each refusal one line with nothing
written: the reference file (missing: created by ``UPDATE=1``, refused otherwise; not
JSON or of another format: refused), the queue source (resolved and loaded, so a bogus
``QUEUE`` is refused in a second, not after the counts), every interpreter of
``PYTHONS`` (exists, runs, CPython >= 3.10 without ``-O``: Python 2.7 and 3.9 used to
be advised ``UPDATE=1``, which then failed inside valgrind), no build named twice, and
valgrind itself. A count that fails is one line for its interpreter; the others are
still counted and print their tables (and are recorded by ``UPDATE=1``), and the exit
status is 1.

Why 1 %: counts of identical code used to differ by where and by whom they were made:
up to 0.51 % from ``.pyc`` files and a collection (now neither is counted), then up to
1.5 % (CPython 3.11.7's alloc2, by the checkout's folder name) and 7 % (3.10.13's
popappend, by the caller's environment) from where the loops' objects landed in memory;
CI, in a checkout of its own, failed it twice (the tables it kept were within 0.1 %, the
failing one was cut off). Since plan ``layout`` 2 the counted process's paths and
environment are the same wherever it runs (:mod:`kvqueue.measure.cachegrind`), and a
check from another checkout under ``env -i`` matched the reference to 0.00-0.04 %. 1 %
leaves room for another CPU (the C library's routines differ by CPU: about 0.2 % seen
between CI's machine and an AMD VM on 3.13.0); a real change of the code path (three
wasted bytecodes in ``popleft_n``) is well above it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kvqueue import hostinfo
from kvqueue.errors import BenchError, BenchInputError
from kvqueue.measure import cachegrind, interpreter_checks
from kvqueue.params.spec import resolve_in_repo
from kvqueue.rawdata import host_keys
from kvqueue.stats import count_figures

REFERENCE = Path("data") / "reference" / "queue-instructions.json"
#: 2: each entry records the queue (source, sha256 of its class and block class) and the
#: plan; 1 recorded neither and is refused.
REFERENCE_FORMAT = 2
THRESHOLD_PCT = 1.0
CASES = ("alloc1", "alloc2", "mix", "popappend", "remove")
POOL = 2048
SEED = 1
#: The plan's fields, in the order a change of plan is printed.
PLAN_FIELDS = ("pool", "cases", "warmup_ops", "target_ops", "seed", "layout")

# Runs under any interpreter (Python 2.7 included), so that an old one is named as such.

#: The counting function: (interpreter, queue source, cases, valgrind, progress, sha256
#: of the queue class) -> instructions per operation per case.
Counter = Callable[[str, str, Sequence[str], cachegrind.Valgrind, TextIO, str], dict[str, float]]


@dataclass(frozen=True)
class Outcome:
    """One interpreter's result: ``status`` is ok, failed, skipped, recorded or error
    (its count failed)."""

    python: str
    key: str
    status: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Interpreter:
    """An interpreter of ``PYTHONS``, probed once: as given, its reference key, X.Y.Z."""

    python: str
    key: str
    version: str


@dataclass(frozen=True)
class QueueIdentity:
    """What the reference records of the queue: its source string and digests."""

    source: str
    class_sha256: str
    block_class_sha256: str

    def record(self) -> dict[str, str]:
        """The entry's ``queue`` field."""
        return {
            "source": self.source,
            "class_sha256": self.class_sha256,
            "block_class_sha256": self.block_class_sha256,
        }


def plan_of(cases: Sequence[str]) -> dict[str, Any]:
    """The plan a count follows (what an entry must match to be compared with)."""
    return {
        "pool": POOL,
        "cases": list(cases),
        "warmup_ops": cachegrind.WARMUP_OPS,
        "target_ops": cachegrind.TARGET_OPS,
        "seed": SEED,
        "layout": cachegrind.LAYOUT,
    }


def probe_interpreter(python: str) -> Interpreter:
    """Probe one interpreter of ``PYTHONS``: it must exist, run and be CPython >= 3.10
    without ``-O`` (:func:`kvqueue.measure.interpreter_checks.check_python`); its key is
    the build (``sys.version`` and machine), as the reference records it.

    Raises
    ------
    BenchInputError
        One line naming the interpreter and what is wrong with it.
    """
    _, info = interpreter_checks.check_python(
        python, role="PYTHONS:", worker="the counted worker", cpython_only=True
    )
    return Interpreter(python, f"{info['sys_version']} [{info['machine']}]", info["version"])


def _refuse_old_format(path: Path, found: object) -> BenchInputError:
    return BenchInputError(
        f"REFERENCE '{path}' is a format-{found} reference, which records neither the "
        f"queue's sha256 nor the plan (this code reads format {REFERENCE_FORMAT}): "
        f"re-record it with `make check-queue UPDATE=1 REFERENCE={path} PYTHONS=...`"
    )


def _check_entry(path: Path, key: str, entry: object) -> None:
    """Refuse an entry that is not of format 2's shape (one line)."""
    queue = entry.get("queue") if isinstance(entry, dict) else None
    plan = entry.get("plan") if isinstance(entry, dict) else None
    counts = entry.get("instructions_per_op") if isinstance(entry, dict) else None
    good = (
        isinstance(queue, dict)
        and isinstance(queue.get("source"), str)
        and isinstance(queue.get("class_sha256"), str)
        # A plan without a newer field (layout) is another plan, which the comparison
        # names and UPDATE=1 re-records; refused here, UPDATE=1 could not replace it.
        and isinstance(plan, dict)
        and isinstance(counts, dict)
        and all(isinstance(v, int | float) and v > 0 for v in counts.values())
    )
    if not good:
        raise BenchInputError(
            f"REFERENCE '{path}': entry '{key}' is not a format-{REFERENCE_FORMAT} entry "
            "(queue, plan and instructions_per_op); re-record it with UPDATE=1"
        )


def load_reference(path: Path, update: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference file and the format-1 entries ``UPDATE=1`` replaces.

    Parameters
    ----------
    path
        The reference file.
    update
        Whether the file is to be (re-)recorded: then a missing file is an empty
        reference and a format-1 file is replaced (its entries are returned, for the
        old -> new lines); otherwise both are refused.

    Returns
    -------
    (dict, dict)
        The format-2 reference, and the format-1 entries by key (usually empty).

    Raises
    ------
    BenchInputError
        Missing (without ``update``), unreadable, not JSON, another format or a
        malformed entry (one line).
    """
    empty = {"format": REFERENCE_FORMAT, "threshold_pct": THRESHOLD_PCT, "entries": {}}
    if not path.exists():
        if update:
            return empty, {}
        raise BenchInputError(
            f"REFERENCE '{path}' does not exist; record one with "
            f"`make check-queue UPDATE=1 REFERENCE={path} PYTHONS=...`"
        )
    if path.is_dir():
        raise BenchInputError(f"REFERENCE '{path}' is a directory, not a reference file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"REFERENCE '{path}' is not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise BenchInputError(f"REFERENCE '{path}' is not a check-queue reference (no entries)")
    found = data.get("format")
    if found == 1:
        if not update:
            raise _refuse_old_format(path, found)
        return {**empty, "threshold_pct": data.get("threshold_pct", THRESHOLD_PCT)}, dict(
            data["entries"]
        )
    if found != REFERENCE_FORMAT:
        raise BenchInputError(
            f"REFERENCE '{path}' is not a format-{REFERENCE_FORMAT} reference (format {found!r})"
        )
    for key, entry in data["entries"].items():
        _check_entry(path, key, entry)
    return data, {}


def _check_writable(path: Path) -> None:
    """Refuse a reference ``UPDATE=1`` could not write, before anything is counted."""
    if path.is_dir():
        raise BenchInputError(f"REFERENCE '{path}' is a directory, not a reference file")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise BenchInputError(f"REFERENCE '{path}' cannot be written ({folder} is not writable)")
    if path.exists() and not os.access(path, os.W_OK):
        raise BenchInputError(f"REFERENCE '{path}' cannot be written (read-only)")


def load_queue(queue: str, cases: Sequence[str]) -> QueueIdentity:
    """Resolve and load the queue source (fetching a release), and check that every
    case can run on it (:func:`kvqueue.measure.interpreter_checks.check_source`).

    Raises
    ------
    BenchInputError
        The source does not resolve or load, or lacks a case's method (one line).
    """
    variant = interpreter_checks.check_source(queue, cases, role="QUEUE", done="counted")
    return QueueIdentity(queue, variant.queue_src.sha256, variant.block_src.sha256)


def mismatch(entry: Mapping[str, Any], queue: QueueIdentity, plan: Mapping[str, Any]) -> str:
    """Why an entry cannot be compared with this check ('' when it can): another queue
    source or another plan. A different sha256 of the same source is a code change,
    which is what the check measures."""
    recorded = entry["queue"]
    if recorded["source"] != queue.source:
        return (
            f"recorded for queue '{recorded['source']}' (sha256 "
            f"{recorded['class_sha256'][:12]}), not '{queue.source}' (sha256 "
            f"{queue.class_sha256[:12]}): check QUEUE={recorded['source']}, or re-record "
            f"with UPDATE=1 QUEUE={queue.source}"
        )
    old = entry["plan"]
    changed = [f"{f} {old.get(f)} -> {plan[f]}" for f in PLAN_FIELDS if old.get(f) != plan[f]]
    if changed:
        return f"recorded with another plan ({'; '.join(changed)}): re-record it with UPDATE=1"
    return ""


def count_queue(
    python: str,
    queue: str,
    cases: Sequence[str],
    valgrind: cachegrind.Valgrind,
    progress: TextIO,
    sha256: str = "",
) -> dict[str, float]:
    """Instructions per operation of ``queue`` per case at pool 2,048 (the counted
    processes refuse a class whose sha256 is not ``sha256``, when given)."""
    spec = {
        "sources": [queue],
        "labels": [queue],
        "block_source": None,
        "block_mode": "shared",
        "expected_sha256": {queue: sha256} if sha256 else {},
        "cases": list(cases),
        "pools": [POOL],
        "seed": SEED,
        "case_seed": SEED,
    }
    rows = cachegrind.count(python, spec, valgrind=valgrind, progress=progress)
    return {c.case: c.instructions for c in count_figures.per_op(rows)}


def _digest_note(entry: Mapping[str, Any], queue: QueueIdentity) -> str:
    """The queue's sha256 against the one recorded (information, never a refusal)."""
    rec = str(entry["queue"]["class_sha256"])
    if rec == queue.class_sha256:
        return f"  sha256 {queue.class_sha256[:12]}, as recorded"
    commit = str(entry.get("project_commit") or "")[:12]
    at = f" at commit {commit}" if commit else ""
    return (
        f"  sha256 {queue.class_sha256[:12]}, recorded {rec[:12]}{at}: the queue's code "
        "changed since the reference"
    )


def compare_lines(
    per_op: Mapping[str, float], entry: Mapping[str, Any], threshold: float
) -> tuple[list[str], bool]:
    """One line per case against the reference, and whether any case failed."""
    lines, failed = [], False
    for case, value in per_op.items():
        ref = entry["instructions_per_op"].get(case)
        if ref is None:
            lines.append(f"  {case}: {value:,.1f} instructions/op (no reference)")
            continue
        # The project's one sign (docs/design.md §5): a reduction, negative = more.
        reduction = 100.0 * (1.0 - value / ref)
        verdict = "ok"
        if reduction < -threshold:
            verdict, failed = f"MORE INSTRUCTIONS (reduction below -{threshold:g} %)", True
        elif reduction > threshold:
            verdict = "fewer instructions: record it with UPDATE=1"
        lines.append(
            f"  {case}: {value:,.1f} instructions/op vs {ref:,.1f} "
            f"(reduction {reduction:+.2f} %) {verdict}"
        )
    return lines, failed


def update_lines(
    per_op: Mapping[str, float],
    old: Mapping[str, Any] | None,
    queue: QueueIdentity,
    plan: Mapping[str, Any],
) -> list[str]:
    """What ``UPDATE=1`` changes in one entry: old -> new per case ("new" where there
    was none), a dropped case, and a change of queue or plan."""
    lines: list[str] = []
    before: Mapping[str, Any] = (old or {}).get("instructions_per_op") or {}
    if old is not None and not isinstance(old.get("queue"), dict):
        lines.append("  replaces a format-1 entry (no queue sha256, no plan)")
    elif old is not None:
        rec = old["queue"]
        if rec.get("source") != queue.source or rec.get("class_sha256") != queue.class_sha256:
            lines.append(
                f"  queue: {rec.get('source')} (sha256 {str(rec.get('class_sha256'))[:12]}) -> "
                f"{queue.source} (sha256 {queue.class_sha256[:12]})"
            )
        changed = [
            f"{f} {old['plan'].get(f)} -> {plan[f]}"
            for f in PLAN_FIELDS
            if old["plan"].get(f) != plan[f]
        ]
        if changed:
            lines.append(f"  plan: {'; '.join(changed)}")
    for case, value in per_op.items():
        was = before.get(case)
        if isinstance(was, int | float) and was:
            lines.append(
                f"  {case}: {was:,.1f} -> {value:,.1f} instructions/op "
                f"(reduction {100.0 * (1.0 - value / was):+.2f} %)"
            )
        else:
            lines.append(f"  {case}: new {value:,.1f} instructions/op")
    for case in before:
        if case not in per_op:
            lines.append(f"  {case}: {before[case]:,.1f} -> dropped (not counted)")
    return lines


def _entry(
    interp: Interpreter,
    queue: QueueIdentity,
    plan: Mapping[str, Any],
    valgrind: cachegrind.Valgrind,
    per_op: Mapping[str, float],
) -> dict[str, Any]:
    return {
        "python": interp.version,
        "queue": queue.record(),
        "plan": dict(plan),
        "valgrind": valgrind.version,
        "options": valgrind.options(),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "project_commit": hostinfo.project_info().get("commit") or "",
        "machine": hostinfo.cpu_record(),
        "instructions_per_op": {c: round(v, 3) for c, v in per_op.items()},
    }


def _cpu_words(machine: Mapping[str, Any]) -> str:
    """'AuthenticAMD family 25 model 17 stepping 1' ('' when unknown)."""
    cpu = machine.get("cpu") if isinstance(machine.get("cpu"), dict) else {}
    words = [str(cpu["vendor"])] if cpu.get("vendor") else []
    words += [f"{f} {cpu[f]}" for f in ("family", "model", "stepping") if cpu.get(f) is not None]
    return " ".join(words)


def _machine_note(entry: Mapping[str, Any], here: Mapping[str, Any]) -> str:
    """A line when the entry was recorded on another CPU than this one ('' otherwise,
    or when the entry names none: entries recorded before 2026-12-04)."""
    theirs = entry.get("machine")
    if not isinstance(theirs, dict):
        return ""
    a, b = host_keys.cpu_identity(theirs), host_keys.cpu_identity(here)
    if a is None or b is None or a == b:
        return ""
    return (
        f"  recorded on another CPU ({_cpu_words(theirs) or theirs.get('cpu_model')}; "
        f"here {_cpu_words(here) or here.get('cpu_model')}): the C library's string and "
        "copy routines are chosen per CPU, so counts may differ a little"
    )


def summary(outcomes: Sequence[Outcome]) -> str:
    """The closing line: every interpreter's verdict, what failed first.

    A CI log keeps the end of the output: this line says what failed and why even when
    the tables above it are cut off.
    """
    # An outcome's key is the interpreter's sys.version, its X.Y.Z first.
    short = {o.python: o.key.split(" ", 1)[0] for o in outcomes}
    bad = [o for o in outcomes if o.status in ("failed", "error")]
    parts = []
    for o in bad:
        if o.status == "error":
            why = o.lines[0].split(": count failed: ", 1)[-1]
        else:
            why = "; ".join(ln.strip() for ln in o.lines[1:] if "MORE INSTRUCTIONS" in ln)
        parts.append(f"CPython {short[o.python]} {o.status.upper()}: {why}")
    for status in ("ok", "recorded", "skipped"):
        names = [short[o.python] for o in outcomes if o.status == status]
        if names:
            parts.append(f"{status}: CPython {', '.join(names)}")
    verdict = "FAILED" if bad else "passed"
    if not any(o.status in ("ok", "recorded") for o in outcomes):
        verdict = "FAILED (nothing compared)"
    return f"check-queue {verdict}: " + "; ".join(parts)


def _write(reference: Path, data: Mapping[str, Any]) -> None:
    reference.parent.mkdir(parents=True, exist_ok=True)
    tmp = reference.with_name(f".{reference.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(reference)


def check(
    pythons: Sequence[str],
    *,
    queue: str = "kvqueue",
    reference: Path = REFERENCE,
    update: bool = False,
    cases: Sequence[str] = CASES,
    out: TextIO | None = None,
    counter: Counter | None = None,
    announce: str = "",
) -> list[Outcome]:
    """Check every input, then count ``queue`` under each interpreter and compare with
    (or record) the reference.

    Parameters
    ----------
    pythons
        The interpreters (names on ``PATH`` or paths).
    queue
        The queue's source string.
    reference
        The reference file.
    update
        Record the counts instead of comparing (the file is created if missing).
    cases
        The cases counted (part of the plan).
    out
        Where the results go (default: stdout; the counts' progress goes to stderr).
    counter
        The counting function (default :func:`count_queue`; tests pass a fake).
    announce
        The line printed to stderr once every input is checked (the parameters not at
        their defaults), before anything is counted.

    Returns
    -------
    list of Outcome
        One per interpreter, in the given order.

    Raises
    ------
    BenchInputError
        An input is unusable, or a reference entry was recorded for another queue source
        or plan: one line, before anything is counted or written.
    """
    stream = out or sys.stdout
    count = counter or count_queue
    # Every input, before valgrind starts.
    data, legacy = load_reference(reference, update)
    if update:
        _check_writable(reference)
    if not pythons:
        raise BenchInputError("PYTHONS is empty: name at least one interpreter")
    identity = load_queue(queue, cases)
    plan = plan_of(cases)
    interpreters: list[Interpreter] = []
    for python in pythons:
        interp = probe_interpreter(python)
        twin = next((i for i in interpreters if i.key == interp.key), None)
        if twin is not None:
            raise BenchInputError(
                f"PYTHONS names one build twice ('{twin.python}' and '{python}', CPython "
                f"{interp.version}): name it once"
            )
        interpreters.append(interp)
        entry = data["entries"].get(interp.key)
        why = mismatch(entry, identity, plan) if entry is not None and not update else ""
        if why:
            raise BenchInputError(
                f"REFERENCE '{reference}' for {python} (CPython {interp.version}) was {why}"
            )
    valgrind = cachegrind.find_valgrind(cache_sim=False)
    threshold = float(data.get("threshold_pct", THRESHOLD_PCT))
    if announce:
        print(announce, file=sys.stderr, flush=True)

    outcomes: list[Outcome] = []
    recorded = 0
    here = hostinfo.cpu_record()
    try:
        for interp in interpreters:
            python, short, key = interp.python, interp.version, interp.key
            entry = data["entries"].get(key)
            if entry is None and not update:
                # The command records into this reference for this queue: without them
                # it recorded kvqueue into the committed reference.
                given = [f"QUEUE={shlex.quote(queue)}"] if queue != "kvqueue" else []
                if Path(reference).resolve() != Path(resolve_in_repo(REFERENCE)).resolve():
                    given.append(f"REFERENCE={shlex.quote(str(reference))}")
                line = (
                    f"check-queue: {python} (CPython {short}): no reference for this build "
                    f"in {reference}; record one with `make check-queue UPDATE=1 "
                    f"PYTHONS={shlex.quote(python)}{''.join(' ' + g for g in given)}`"
                )
                print(line, file=stream, flush=True)
                outcomes.append(Outcome(python, key, "skipped", (line,)))
                continue
            try:
                per_op = count(python, queue, cases, valgrind, sys.stderr, identity.class_sha256)
            except BenchError as exc:
                line = f"check-queue: {python} (CPython {short}), {queue}: count failed: {exc}"
                print(line, file=stream, flush=True)
                outcomes.append(Outcome(python, key, "error", (line,)))
                continue
            if update:
                old = entry if entry is not None else legacy.get(key)
                data["entries"][key] = _entry(interp, identity, plan, valgrind, per_op)
                recorded += 1
                head = (
                    f"check-queue: {python} (CPython {short}): reference recorded for {queue} "
                    f"(sha256 {identity.class_sha256[:12]})"
                )
                lines = update_lines(per_op, old, identity, plan)
                print(head, *lines, sep="\n", file=stream, flush=True)
                outcomes.append(Outcome(python, key, "recorded", (head, *lines)))
                continue
            assert entry is not None
            lines, failed = compare_lines(per_op, entry, threshold)
            lines.insert(0, _digest_note(entry, identity))
            other = _machine_note(entry, here)
            if other:
                lines.insert(1, other)
            head = (
                f"check-queue: {python} (CPython {short}), {queue}: {'FAILED' if failed else 'ok'}"
            )
            print(head, *lines, sep="\n", file=stream, flush=True)
            outcomes.append(Outcome(python, key, "failed" if failed else "ok", (head, *lines)))
    finally:
        # What finished is kept, on a failed count or Ctrl-C as well.
        if update and recorded:
            dropped = [k for k in legacy if k not in data["entries"]]
            if dropped:
                print(
                    f"check-queue: dropped {len(dropped)} format-1 "
                    f"entr{'y' if len(dropped) == 1 else 'ies'} not re-recorded: "
                    + "; ".join(dropped),
                    file=stream,
                )
            _write(reference, data)
    return outcomes


def exit_status(outcomes: Sequence[Outcome]) -> int:
    """0 when every compared interpreter passed and at least one was compared or
    recorded; 1 when a case failed, a count failed or nothing was compared."""
    if any(o.status in ("failed", "error") for o in outcomes):
        return 1
    if not any(o.status in ("ok", "recorded") for o in outcomes):
        print("check-queue: nothing was compared (no interpreter has a reference)", file=sys.stderr)
        return 1
    return 0
