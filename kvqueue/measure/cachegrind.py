"""Instruction counts: each variant × case × pool run under valgrind's cachegrind.

Wall time on a shared 2-vCPU VM needs ~45 processes for a ±0.5 pp interval; the
number of instructions a cycle executes is exact, needs one process per cell and is
immune to load. Counts track time, but not one to one (memory traffic and branch
behaviour are not instructions), so the report shows both.

How a count is made (docs/design.md §13):

- per pool and variant, one process builds the timing worker's layout for that variant
  alone and warms every case up by ``warmup_ops`` operations
  (:mod:`kvqueue.measure.counted_worker`); that is the *zero* run (the first one is made
  twice, to show that the count is deterministic);
- the same process plus ``loops`` loops of one case: that case's *target* run;
- instructions per operation = (target − zero) / (loops × ops per loop). Interpreter
  start, imports, layout and warm-up are identical in both and cancel.

Determinism: ``PYTHONHASHSEED=0``, the same seeds, no bytecode written (a ``.pyc``
written by the first run and read by the next changed the zero count by ~45 million
instructions on CPython 3.11.7), and none of the project's read: the counted process
imports a copy of the package's sources made for the count, without ``__pycache__``
(four ``.pyc`` files of 3.11's tag another process had left in ``kvqueue/__pycache__``
moved 3.11.7's counts by ~+15 instructions per operation, 0.5 %, against a clean copy;
without them the two agree within 0.02 %). The standard library's own ``.pyc`` files,
written once when the interpreter was installed, are read: compiling it too (layout 2,
``PYTHONPYCACHEPREFIX`` at a folder that cannot exist) made a zero run 5x longer, 2.97
billion instructions against 0.6 billion on 3.11.7 (7.5 s against 1.6 s under
cachegrind here).

Optional cache simulation (``--cache-sim=yes``, ~2× slower) adds L1 and last-level
misses and an estimated-cycles figure: L1 hits + 5 × LL hits + 35 × RAM accesses, the
cost model of iai-callgrind (itself from Itamar Turner-Trauring's "pythonspeed" work),
which weighs a miss by its rough latency. It is a model, not a measurement.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from kvqueue import hostinfo, schema
from kvqueue.errors import BenchError, BenchInputError
from kvqueue.kernel import remove_dead_entries, stop_signals
from kvqueue.measure import child, cost_files, stack_layout, timing_worker
from kvqueue.sources import cache_paths
from kvqueue.subjects import queue_cases

#: Operations each cell is warmed up by before anything is counted: CPython 3.11+
#: specializes a function's bytecode after a few executions; 2,000 operations cover it.
WARMUP_OPS = 2_000
#: Operations a target run adds: 20,000 keeps the zero runs' spread (±80,000 of 786
#: million on 3.11.7) at ±4 instructions per operation, 0.1 % of alloc1's ~3,300.
TARGET_OPS = 20_000
T = TypeVar("T")
#: Hash seed of every counted process (hashing is part of what is counted).
HASH_SEED = "0"
INSTALL_HINT = (
    "valgrind is not installed: install it with `apt-get install valgrind` "
    "(Debian/Ubuntu; `dnf install valgrind` on Fedora, `brew install valgrind` is not "
    "available on Apple silicon: use a Linux machine or container)"
)
#: Seconds a counted (or profiled) process may take.
TIMEOUT_S = 900
#: How a counted process's memory layout is kept the same wherever and by whom the
#: project is run: 3, every path it imports or reads from is of one length
#: (:func:`_fixed_root`), its environment is fixed (:func:`_env`), it reads no
#: site-packages and no ``.pyc`` of the project's, and reads the standard library's;
#: 2 compiled the standard library from source as well; 1 (unrecorded) had the
#: checkout's path and the caller's environment. Part of a check-queue reference's
#: plan: counts of two layouts differ (1 and 2 by up to 7 %).
LAYOUT = 3
#: Characters the runner's folder is padded to in a counted process's spec, and PATH in
#: its environment (past pymalloc's 512 bytes, so that neither moves its small objects).
_CWD_WIDTH = 1024
_PAD_WIDTH = 1024
#: Prefix of a count's temp folder: ``<prefix><pid>-*``.
_TMP_PREFIX = "kvqueue-counts-"


@dataclass(frozen=True)
class Valgrind:
    """The valgrind used for a count: path, version and the options every run gets."""

    path: str
    version: str
    cache_sim: bool

    def options(self) -> list[str]:
        """cachegrind's options (recorded in run.json)."""
        return ["--tool=cachegrind", f"--cache-sim={'yes' if self.cache_sim else 'no'}"]


def find_valgrind(cache_sim: bool = False) -> Valgrind:
    """The valgrind on ``PATH``, or one line saying how to install it.

    Raises
    ------
    BenchInputError
        valgrind is missing or does not run.
    """
    path = shutil.which("valgrind")
    if path is None:
        raise BenchInputError(INSTALL_HINT)
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise BenchInputError(f"valgrind at {path} does not run ({exc}); {INSTALL_HINT}") from None
    return Valgrind(path=path, version=out, cache_sim=cache_sim)


def interpreter_binary(python: str) -> str:
    """The interpreter's own binary (valgrind must run it, not a pyenv shim script)."""
    proc = subprocess.run(
        [python, "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BenchInputError(f"cannot run {python}: {proc.stderr.strip()[-200:]}")
    return proc.stdout.strip()


def target_loops(
    case: str, pool: int, target_ops: int | None = None, subject: str = "queue"
) -> int:
    """Loops of a target run: at least ``target_ops`` operations (at least 1 loop);
    by default a queue case's share of :data:`TARGET_OPS`
    (:func:`kvqueue.subjects.queue_cases.target_ops`: fewer for a large N, and what the
    pool holds for ``popleftN``), or a stack subject's case's own (``target_ops`` of
    :mod:`kvqueue.subjects.pool_cases` or ``manager_cases``)."""
    kind = stack_layout.KINDS.get(subject)
    if kind is not None:
        ops = target_ops or kind.cases.target_ops(case)
        return max(1, -(-ops // kind.cases.ops_per_loop(case, pool)))
    ops = target_ops or queue_cases.target_ops(case, pool, TARGET_OPS)
    return max(1, -(-ops // queue_cases.ops_per_loop(case, pool)))


#: Counted calls of a ``popleftN`` target below which :func:`few_calls_notes` says so: a
#: target is one stretch of what the pool holds (``pool // N`` calls: nothing may go
#: back, see :mod:`kvqueue.subjects.queue_cases`), and a run's own events that no number
#: of calls repeats (the C allocator's, the type cache's) are then a share of each call:
#: one call of ``popleft500`` counted 195,695 to 394,979 instructions around a mean of
#: ~240,000, and a 10-call count came out 4.5 % above that mean (CPython 3.11.7).
FEW_CALLS = 100


def few_calls_notes(jobs: Sequence[Job]) -> list[str]:
    """One line per cell whose target counts fewer than :data:`FEW_CALLS` calls: a
    ``popleftN`` on a pool of fewer than ``100 N`` blocks."""
    cells = {(j.case, j.pool): j.loops for j in jobs if j.run == "target"}
    return [
        f"note: {case} at {pool:,} blocks counts {loops} call{'s' if loops > 1 else ''} (all "
        f"the pool holds: {case} gives nothing back while counted), so a run's own "
        f"allocator events may move its figure by a few %; {FEW_CALLS:,} calls or more "
        f"need pools of {FEW_CALLS * schema.case_size(case):,} blocks"
        for (case, pool), loops in cells.items()
        if loops < FEW_CALLS and queue_cases.takes_last(case)
    ]


@dataclass(frozen=True)
class Job:
    """One cachegrind run: ``run`` is ``zero``, ``zero2`` or ``target``."""

    case: str
    pool: int
    run: str
    label: str = ""
    loops: int = 0


#: ``case`` of a zero run that warmed every case of its variant and pool.
ALL_CASES = "*"


def plan(
    labels: Sequence[str], cases: Sequence[str], pools: Sequence[int], subject: str = "queue"
) -> list[Job]:
    """Every run of a count: per pool and label one zero run that warms every case up,
    and one target run per case (the same, plus the case's loops); the first zero run is
    made twice (``zero2``), to show the count's resolution.

    Each variant is counted alone (its processes load only it): a history of 17 versions
    on 100,000-block pools would otherwise build 17 pools in every process. One zero run
    per variant and pool, not per cell, saves 3 of every 8 processes of a history (4
    cases) and 6 of every 14 of a bench (7 cases).
    """
    jobs: list[Job] = []
    for pool in pools:
        for label in labels:
            jobs.append(Job(ALL_CASES, pool, "zero", label))
            if len(jobs) == 1:
                jobs.append(Job(ALL_CASES, pool, "zero2", label))
            for case in cases:
                loops = target_loops(case, pool, subject=subject)
                jobs.append(Job(case, pool, "target", label, loops))
    return jobs


def job_spec(base: dict[str, Any], job: Job) -> dict[str, Any]:
    """The count worker's spec of one job: the job's variant alone, on its pool, every
    case of the run warmed up (so a target run is its zero run plus the loops).

    The block class stays the run's: the baseline's (or ``block_source``) when shared,
    the variant's own release's in block mode ``own``.
    """
    i = list(base["labels"]).index(job.label)
    shared = base.get("block_mode", "shared") == "shared"
    label = job.label
    return {
        **base,
        "sources": [base["sources"][i]],
        "labels": [label],
        "block_source": base.get("block_source") or (base["sources"][0] if shared else None),
        "expected_sha256": {k: v for k, v in base["expected_sha256"].items() if k == label},
        "expected_block_sha256": {
            k: v for k, v in (base.get("expected_block_sha256") or {}).items() if k == label
        },
        "cases": list(base["cases"]),
        "pools": [job.pool],
        "warmup_ops": WARMUP_OPS,
        "target": [label, job.case, job.pool, job.loops] if job.run == "target" else None,
    }


def parse_cachegrind(text: str) -> dict[str, int]:
    """Event totals from a cachegrind output file (its ``events:`` and ``summary:`` lines)."""
    events = re.search(r"^events:\s*(.+)$", text, flags=re.M)
    summary = re.search(r"^summary:\s*(.+)$", text, flags=re.M)
    if not events or not summary:
        raise BenchError("cachegrind wrote no summary (did the counted process crash?)")
    names, values = events.group(1).split(), summary.group(1).split()
    return {n: int(v) for n, v in zip(names, values, strict=True)}


def _env(root: Path) -> dict[str, str]:
    """The counted process's environment, the same bytes wherever and by whom it is
    started: nothing of this one's but ``PATH`` (for a git source's ``git``), padded.

    Why: every variable is a string the interpreter allocates before the loops, and
    where the loops' own objects land moves their counts. A copy of the caller's
    environment gave CPython 3.10.13's popappend 5,946 instructions per operation under
    one shell and 6,382 (+7 %) under ``env -i``; mix 8,651 and 8,728.
    """
    path = os.environ.get("PATH") or os.defpath
    return {
        # Padded to one length past pymalloc's 512 bytes: the C library holds it.
        "PATH": path + ":/" * max(0, (_PAD_WIDTH - len(path)) // 2),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": str(root / "home"),  # no user site-packages, no ~/.gitconfig
        "PYTHONPATH": str(root),
        "XDG_CACHE_HOME": str(root / "cache"),
        "PYTHONHASHSEED": HASH_SEED,
        "PYTHONDONTWRITEBYTECODE": "1",
        child.PARENT_ENV: f"{os.getpid():07d}",  # one length for every pid
    }


def _fixed_root(tmp: Path) -> Path:
    """A copy of the project's package and a link to the release cache in ``tmp``, whose
    name has one length (``<prefix><pid, 7 digits>-<8 characters>``): the counted process
    runs in ``tmp`` and imports from it.

    Why: the path strings a process holds before its loops (``sys.path``, module file
    names) shift where everything after them lands in memory, and the loops' counts
    with it. With the checkout's own path on ``PYTHONPATH``, a folder name 18 characters
    longer moved CPython 3.11.7's alloc2 from 4,349.6 to 4,283.7 instructions per
    operation (-1.5 %, beyond check-queue's 1 %), and 3.10.13's mix by -0.4 %; CI counts
    in a checkout of its own.
    """
    # A copy of the package's sources, not a link to it: a .pyc another process left in
    # the checkout's __pycache__ would be read (see the module docstring).
    shutil.copytree(
        hostinfo.PROJECT_DIR / "kvqueue",
        tmp / "kvqueue",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    # The cache's own rule (``cache_dir()`` is ``<base>/kvqueue``): ``cache`` is the base.
    (tmp / "cache").symlink_to(cache_paths.cache_dir().parent, target_is_directory=True)
    # Nothing else in it: the interpreter lists sys.path[0] once, and the count files
    # (in out/) appear one by one during a count.
    (tmp / "out").mkdir()
    return tmp


def start(
    valgrind: Valgrind | None,
    binary: str,
    spec: dict[str, Any],
    out: Path,
    root: Path,
    *,
    tool: list[str] | None = None,
    module: str = "kvqueue.measure.counted_worker",
) -> subprocess.Popen:
    """Start one counted process: ``module`` of the copy in ``root`` under valgrind, with
    ``spec`` on its stdin.

    Parameters
    ----------
    valgrind, binary
        The valgrind and the interpreter's own binary (valgrind None: the worker runs
        without it, as a bytecode profile does).
    spec
        The worker's spec (the runner's folder is added, padded to one length).
    out
        The out file (cachegrind's; a ``tool`` names its own).
    root
        The fixed-length folder (:func:`counting_root`).
    tool
        valgrind's options instead of cachegrind's (``--tool=callgrind ...``: a
        profile, :mod:`kvqueue.measure.function_profile`).
    module
        The worker module run.
    """
    if valgrind is None:
        under: list[str] = []
    else:
        options = (
            [*valgrind.options(), f"--cachegrind-out-file={out}"] if tool is None else list(tool)
        )
        under = [
            valgrind.path,
            *options,
            # valgrind's gdbserver FIFOs (three per process) go to the run's temp folder,
            # not beside it in /tmp: a killed valgrind cannot remove them.
            f"--vgdb-prefix={out.parent / 'vgdb'}",
        ]
    cmd = [
        # Through kvqueue.measure.child: valgrind dies with this process from its start
        # (a kill -9 of the runner left two counting on for seconds). -S: it needs no
        # site-packages, and starts in ~20 ms.
        sys.executable,
        "-S",
        "-m",
        "kvqueue.measure.child",
        *under,
        binary,
        # -S: no site-packages (a .pth there runs code at start, and differs between
        # machines); the worker needs the standard library only.
        "-S",
        "-m",
        module,
    ]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(root),
        # In the fixed-length folder (sys.path[0] of ``-m``); the worker goes back to
        # this one (spec ``cwd``) before it reads a source given by a relative path.
        cwd=root,
        start_new_session=True,  # killed as a group on Ctrl-C or SIGTERM; dies with us
    )
    assert proc.stdin is not None
    # The runner's folder padded with "/" to one length (the spec is read before the
    # loops: a longer string would move them like a longer path).
    proc.stdin.write(json.dumps({**spec, "cwd": os.getcwd().ljust(_CWD_WIDTH, "/")}))
    proc.stdin.close()
    return proc


def kill(proc: subprocess.Popen) -> None:
    """Kill a counted process's group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


def project_path(path: str, root: Path) -> str:
    """A file name as a counted process saw it, with the temp folder it ran in
    (:func:`counting_root`, which holds a copy of the package) replaced by the project's
    own folder: the name of the same file once the count is over."""
    prefix = f"{root}/"
    if path.startswith(prefix):
        return str(hostinfo.PROJECT_DIR / path[len(prefix) :])
    return path


def default_jobs() -> int:
    """Counted processes at once by default: the CPUs this process may use (counts do
    not depend on load, so they may share the machine)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


@contextlib.contextmanager
def counting_root() -> Iterator[Path]:
    """The temp folder counted processes run in (:func:`_fixed_root`), removed at the
    end; SIGTERM and SIGHUP stop the block as Ctrl-C does (check-queue holds no machine
    lock, which gives them to the other commands).

    The folder is named after this process, so that one a kill -9 left is removed by
    the next count.
    """
    remove_dead_entries(_TMP_PREFIX)
    with (
        stop_signals(),
        tempfile.TemporaryDirectory(prefix=f"{_TMP_PREFIX}{os.getpid():07d}-") as tmp,
    ):
        yield _fixed_root(Path(tmp))


def run_processes(
    todo: Sequence[T],
    launch: Callable[[int, T, Path], subprocess.Popen],
    finish: Callable[[T, Path], None],
    *,
    what: Callable[[T], str],
    jobs: int | None = None,
) -> None:
    """Run one process per item of ``todo``, ``jobs`` at once, in a
    :func:`counting_root` (a profile's processes: :mod:`kvqueue.measure.function_profile`,
    :mod:`kvqueue.measure.where_run`).

    Parameters
    ----------
    todo
        The items.
    launch
        ``(index, item, root) -> process`` (:func:`start`).
    finish
        Called with each item and the root once its process exited 0.
    what
        An item's name in a failure's message.
    jobs
        Processes at once (default: :func:`default_jobs`).

    Raises
    ------
    BenchError
        A process failed or ran out of time; the others are stopped.
    """
    width = jobs or default_jobs()
    running: list[tuple[T, subprocess.Popen, float]] = []
    with counting_root() as root:
        pending = list(enumerate(todo))
        try:
            while pending or running:
                while pending and len(running) < width:
                    i, item = pending.pop(0)
                    running.append((item, launch(i, item, root), time.monotonic()))
                time.sleep(0.05)
                for entry in list(running):
                    item, proc, t0 = entry
                    if proc.poll() is None:
                        if time.monotonic() - t0 > TIMEOUT_S:
                            raise BenchError(
                                f"{what(item)} did not finish within {TIMEOUT_S} s; stopped"
                            )
                        continue
                    running.remove(entry)
                    err = proc.stderr.read() if proc.stderr else ""
                    if proc.returncode != 0:
                        tail = [ln for ln in err.splitlines() if not ln.startswith("==")]
                        raise BenchError(
                            f"{what(item)} exited {proc.returncode}: {' '.join(tail)[-300:]}"
                        )
                    finish(item, root)
        except BaseException:
            for _item, proc, _t0 in running:
                kill(proc)
            raise


def count(
    python: str,
    base_spec: dict[str, Any],
    *,
    valgrind: Valgrind,
    jobs: int | None = None,
    progress: TextIO | None = None,
    on_row: Callable[[dict[str, Any], float], None] | None = None,
    on_functions: Callable[[dict[str, Any], dict[str, int]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every count of ``base_spec`` (a worker spec) under cachegrind.

    Parameters
    ----------
    python
        The measured interpreter (a shim is resolved to its binary).
    base_spec
        A worker spec: ``sources``, ``labels``, ``cases``, ``pools``, seeds,
        ``block_source``, ``block_mode``, ``expected_sha256``.
    valgrind
        From :func:`find_valgrind`.
    jobs
        Runs at once (default: :func:`default_jobs`).
    progress
        Where a line per finished run goes (default: stderr).
    on_row
        Called with each row and its seconds as it is finished (the run folder appends
        it at once).
    on_functions
        Called with each row and its instructions per C function
        (:func:`kvqueue.measure.function_profile.cachegrind_functions`), read from the
        run's out file before it is removed: where the cost went.

    Returns
    -------
    list of dict
        One row per run, in :data:`kvqueue.schema.COUNT_COLUMNS` order of keys.

    Raises
    ------
    BenchError
        A counted process failed or ran out of time; the others are stopped.
    """
    out = progress or sys.stderr
    binary = interpreter_binary(python)
    subject = base_spec.get("subject", "queue")
    todo = plan(base_spec["labels"], base_spec["cases"], base_spec["pools"], subject)
    for note in few_calls_notes(todo):
        print(note, file=out, flush=True)
    rows: list[dict[str, Any]] = []
    started: dict[int, float] = {}
    start_time = time.monotonic()

    def launch(i: int, job: Job, root: Path) -> subprocess.Popen:
        started[id(job)] = time.monotonic()
        return start(valgrind, binary, job_spec(base_spec, job), root / "out" / f"cg.{i}", root)

    def finish(job: Job, root: Path) -> None:
        path = root / "out" / f"cg.{todo.index(job)}"
        text = path.read_text()
        totals = parse_cachegrind(text)
        row = {
            "case": job.case,
            "pool": job.pool,
            "label": job.label,
            "run": job.run,
            "loops": job.loops,
            "per_loop": 0
            if job.run != "target"
            else timing_worker.ops_per_loop(base_spec, job.case, job.pool),
            **{e: totals.get(e, "") for e in schema.COUNT_EVENTS},
        }
        rows.append(row)
        if on_functions is not None:
            on_functions(row, cost_files.cachegrind_functions(text))
        path.unlink()
        if on_row is not None:
            on_row(row, round(time.monotonic() - started[id(job)], 3))
        print(
            f"count {len(rows)}/{len(todo)}: {job.run} {job.label} "
            f"{job.case}/{job.pool}: {totals['Ir']:,} instructions "
            f"({time.monotonic() - start_time:.0f} s)",
            file=out,
            flush=True,
        )

    run_processes(
        todo,
        launch,
        finish,
        what=lambda job: f"counted process ({job.run} {job.label or 'zero'} {job.case}/{job.pool})",
        jobs=jobs,
    )
    return rows
