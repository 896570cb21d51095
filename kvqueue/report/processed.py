"""Store and cache the processed tables: ``data/processed/*.csv`` plus ``manifest.json``.

:func:`build` reads the raw runs (:mod:`kvqueue.analysis.rawdata`), has :mod:`kvqueue.analysis.ab`
compute the tables and writes one CSV per table of
:data:`kvqueue.schema.PROCESSED_TABLES`. The output is byte-identical on a rerun over
the same raw data: rows are sorted, columns fixed, floats written with one format, and
nothing time-dependent is recorded. :func:`ensure` reuses the files while the manifest
(settings, the sha256 of every raw file read and of the code that computes the
numbers, the git state of every run folder) still matches. The report (notebook,
tables, figures, writeup) reads only these tables, through :class:`Processed`.

Git state (:func:`git_states`, the ``git_state`` column of ``runs``): whether each run
folder's files are committed and unmodified in the git repository that holds the raw
data. It is not a raw file, so it is part of the manifest key: committing, editing or
reverting a run folder changes the manifest, and :func:`ensure` rebuilds; with the same
git state a rebuild is byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from kvqueue import errors, hostinfo, schema, versions
from kvqueue.analysis import ab, comparisons, integrity, ledger, rawdata, samplefile, stats
from kvqueue.analysis import counts as count_math
from kvqueue.history import analyze as history_analyze
from kvqueue.params import bench as bench_params
from kvqueue.params import checks as param_checks
from kvqueue.params import history as history_params
from kvqueue.params import policy as policy_params
from kvqueue.params import report as report_params
from kvqueue.params import spec as param_spec
from kvqueue.params.report import SCOPE_FIELDS, ReportSettings
from kvqueue.policy import analyze as policy_analyze

MANIFEST = "manifest.json"
_MANIFEST_FORMAT = 3
#: The modules whose code determines the processed numbers: every ``kvqueue`` module
#: this one reaches through its imports (the analysis side, never a display module); a
#: change to any of them invalidates the manifest. Module objects, not file names, so
#: that a module that is renamed or split must be listed again here
#: (``tests/test_architecture.py`` checks that the list is exactly what this module
#: reaches).
CODE_MODULES: tuple[ModuleType, ...] = (
    ab,
    count_math,
    comparisons,
    errors,
    history_analyze,
    hostinfo,
    integrity,
    ledger,
    bench_params,
    param_checks,
    history_params,
    policy_params,
    report_params,
    param_spec,
    policy_analyze,
    versions,
    rawdata,
    samplefile,
    schema,
    stats,
)
TABLES = schema.PROCESSED_TABLES
_THIS_MODULE = sys.modules[__name__]


@dataclass(frozen=True)
class Processed:
    """All processed tables of one build (see the module docstring)."""

    settings: ReportSettings
    runs: pd.DataFrame
    variants: pd.DataFrame
    process_medians: pd.DataFrame
    ratios: pd.DataFrame
    summary: pd.DataFrame
    order_effects: pd.DataFrame
    floor_gap: pd.DataFrame
    policy: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.policy.analyze
    history: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.history.analyze
    history_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    ledger: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.analysis.ledger
    counts: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.analysis.counts
    count_pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    count_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    manifest: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """Return a table by its file stem (``"summary"``, ...)."""
        return getattr(self, name)

    def headline_runs(self) -> pd.DataFrame:
        """The rows of ``runs`` that are headline runs (see
        :func:`kvqueue.analysis.ab.headline_runs`: newest included full-protocol run per
        host x python)."""
        return self.runs[self.runs["headline"].fillna(False)]

    def in_headline_runs(self, df: pd.DataFrame, phase: str) -> pd.DataFrame:
        """Rows of ``df`` (a table without a ``headline`` column) of ``phase`` in a
        headline run."""
        heads = self.headline_runs()[["host", "run_id"]]
        return df[df["phase"] == phase].merge(heads, on=["host", "run_id"])


# ---------------------------------------------------------------------------------------
# files


def _in_scope(run_dir: Path, settings: ReportSettings | None) -> bool:
    """Whether a run folder is in the report's scope (``HOSTS``, ``RUNS``)."""
    if settings is None:
        return True
    hosts, runs = settings.hosts, settings.runs
    return (not hosts or run_dir.parent.name in hosts) and (not runs or run_dir.name in runs)


def fingerprint(raw_dir: Path | str, settings: ReportSettings | None = None) -> dict[str, str]:
    """sha256 of every raw file the analysis reads, keyed by path relative to ``raw_dir``
    (the run folders in the scope of ``settings`` only).

    ``bench.ipynb`` included: its digest decides whether a run is altered.
    """
    root = Path(raw_dir)
    out = {}
    for run_dir in rawdata.run_dirs(root):
        if not _in_scope(run_dir, settings):
            continue
        for name in (
            schema.RUN_JSON,
            schema.SAMPLES_CSV,
            schema.RUN_NOTEBOOK,
            schema.POLICY_CSV,
        ):
            path = run_dir / name
            if path.is_file():
                out[path.relative_to(root).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return out


COMMITTED, MODIFIED, UNTRACKED, NO_GIT = "committed", "modified", "untracked", "no git"
_GIT_TIMEOUT = 60.0
#: Variables that would point git at another repository than the one holding the data.
_GIT_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR")


def _git(cwd: Path, *args: str) -> bytes | None:
    """stdout of ``git -C cwd ARGS`` (read-only: no optional locks; paths taken
    literally, never as pathspec patterns), or None on failure."""
    exe = shutil.which("git")
    if exe is None:
        return None
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    try:
        proc = subprocess.run(
            [exe, "--no-optional-locks", "--literal-pathspecs", "-C", str(cwd), *args],
            capture_output=True,
            env=env,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_states(raw_dir: Path | str) -> dict[str, str]:
    """The git state of every run folder, keyed ``"<host>/<run_id>"`` (best effort).

    ``committed``: the folder's files are in ``HEAD`` and none differs from it (staged
    or not), nor is there an untracked file in it; ``modified``: in ``HEAD`` but changed,
    deleted, or with a new file; ``untracked``: nothing of the folder is in ``HEAD``;
    ``no git``: git is not installed, the raw data is not in a work tree, or git fails.
    Gitignored files do not count. Only reads the repository (``git ls-tree HEAD`` and
    ``git status --porcelain``, without optional locks).
    """
    root = Path(raw_dir).resolve()
    keys = [d.relative_to(root).as_posix() for d in rawdata.run_dirs(root)]
    if not keys:
        return {}
    top_out = _git(root, "rev-parse", "--show-toplevel")
    top = Path(os.fsdecode(top_out).strip()).resolve() if top_out else None
    if top is None or not root.is_relative_to(top):
        return dict.fromkeys(keys, NO_GIT)
    rel = root.relative_to(top).as_posix()  # "." when the raw data is the work tree
    status = _git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", rel)
    if status is None:
        return dict.fromkeys(keys, NO_GIT)
    # A repository without commits has no HEAD: then nothing is committed.
    head = _git(top, "ls-tree", "-r", "-z", "--name-only", "--full-tree", "HEAD", "--", rel)
    prefix = "" if rel == "." else f"{rel}/"

    def run_key(path: str) -> str | None:
        # "<host>/<run_id>" of a repository path inside a run folder, else None.
        parts = path[len(prefix) :].split("/") if path.startswith(prefix) else []
        return "/".join(parts[:2]) if len(parts) > 2 else None

    in_head = {run_key(p) for p in os.fsdecode(head or b"").split("\0")}
    changed = set()
    entries = iter(os.fsdecode(status).split("\0"))
    for entry in entries:
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:  # a rename or copy: its source path follows
            changed.add(run_key(next(entries, "")))
        if entry and code != "!!":
            changed.add(run_key(path))
    return {
        key: UNTRACKED if key not in in_head else MODIFIED if key in changed else COMMITTED
        for key in keys
    }


def code_hash() -> str:
    """sha256 over the source files of :data:`CODE_MODULES` and of this module."""
    digest = hashlib.sha256()
    for module in (*CODE_MODULES, _THIS_MODULE):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def _manifest(
    raw_dir: Path | str, settings: ReportSettings, git: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "format": _MANIFEST_FORMAT,
        "settings": settings.to_dict(),
        "code_sha256": code_hash(),
        "inputs": fingerprint(raw_dir, settings),
        "git_state": {
            key: state
            for key, state in (git_states(raw_dir) if git is None else git).items()
            if _in_scope(Path(raw_dir) / key, settings)
        },
        "tables": [f"{name}.csv" for name in TABLES],
    }


def write(data: Processed, processed_dir: Path | str) -> list[Path]:
    """Write every table as CSV plus ``manifest.json``; return the paths written."""
    out_dir = Path(processed_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in TABLES:
        path = out_dir / f"{name}.csv"
        data.table(name).to_csv(
            path, index=False, float_format=schema.PROCESSED_FLOAT_FORMAT, lineterminator="\n"
        )
        paths.append(path)
    path = out_dir / MANIFEST
    path.write_text(json.dumps(data.manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths.append(path)
    return paths


#: Folder (under the processed folder) of the per-run cache: ``runs/<host>/<run-id>/``.
RUN_CACHE = "runs"
_RUN_CACHE_FILE = "analysis.pkl"
_SAMPLES_CACHE_FILE = "samples.pkl"
Progress = Callable[[str], None]


def _run_key(run_dir: Path, settings: ReportSettings, code: str) -> dict[str, Any]:
    """What one run's analysis depends on: its files, the analysis settings, the code."""
    files = {
        name: hashlib.sha256((run_dir / name).read_bytes()).hexdigest()
        for name in (schema.RUN_JSON, schema.SAMPLES_CSV, schema.RUN_NOTEBOOK)
        if (run_dir / name).is_file()
    }
    analysis = {k: v for k, v in settings.to_dict().items() if k not in SCOPE_FIELDS}
    return {"files": files, "settings": analysis, "code_sha256": code}


def cached_run_analysis(
    processed_dir: Path | str,
    settings: ReportSettings,
    progress: Progress | None = None,
    analysed_ahead: set[str] | None = None,
) -> Callable[[rawdata.Run], dict[str, pd.DataFrame]]:
    """``run -> ab.analyze_run(run, settings)``, cached per run folder.

    The cache is ``<processed_dir>/runs/<host>/<run-id>/analysis.pkl``: the run's tables
    with the key they were computed under (the sha256 of the run's files, the analysis
    settings, :func:`code_hash`). A key that differs, or a file that does not load, is
    recomputed and rewritten; pickle keeps every float exactly, so the combined tables
    are byte-identical to a computation from scratch. ``progress`` gets one line per run
    (analysed, with its time, or reused), except for the runs of ``analysed_ahead``
    (:func:`prepare_ahead` named them).
    """
    code = code_hash()
    say = progress or (lambda _line: None)
    ahead = set(analysed_ahead or ())

    def compute(run: rawdata.Run) -> dict[str, pd.DataFrame]:
        path = _cache_file(processed_dir, run.path, _RUN_CACHE_FILE)
        started = time.perf_counter()
        fresh: list[bool] = []

        def analyse() -> dict[str, pd.DataFrame]:
            fresh.append(True)
            return ab.analyze_run(run, settings)

        tables = _cached(path, _run_key(run.path, settings, code), analyse)
        took = f" ({time.perf_counter() - started:.1f} s)" if fresh else ""
        if fresh or f"{run.host}/{run.run_id}" not in ahead:  # else said by prepare_ahead
            say(f"processed: {'analysed' if fresh else 'reused'} {run.host}/{run.run_id}{took}")
        return tables

    return compute


#: Worker processes of :func:`prepare_ahead`: one per CPU, at most this many.
MAX_WORKERS = 4
#: Seconds :func:`prepare_ahead` waits for a worker's next answer (a run took 0.4-1.5 s).
_JOB_TIMEOUT = 300.0
#: The jobs a forked worker of :func:`prepare_ahead` runs (set before the fork, so a
#: worker finds them in its copy of the parent's memory instead of a pickle).
_AHEAD: list[Callable[[], str]] = []


def ignore_interrupts() -> None:
    """The initializer of a forked worker: it ignores Ctrl-C, and the parent, which gets
    it, terminates the workers at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_ahead(index: int) -> tuple[int, str, float]:
    """A forked worker's part of :func:`prepare_ahead`: run job ``index``; the index,
    what it did and its seconds."""
    started = time.perf_counter()
    did = _AHEAD[index]()
    return index, did, time.perf_counter() - started


def _cache_file(processed_dir: Path | str, run_dir: Path, name: str) -> Path:
    """``<processed_dir>/runs/<host>/<run-id>/<name>``: one of a run's cache files."""
    return Path(processed_dir) / RUN_CACHE / run_dir.parent.name / run_dir.name / name


def can_fork() -> bool:
    """Whether this process may fork workers: on Linux (macOS lists fork, but its system
    libraries are not safe after it), and with no other thread running (a thread
    holding a lock at the fork would leave it held in the child: a Jupyter kernel has
    several; `make report`'s process has one until its notebook starts)."""
    import multiprocessing

    return (
        sys.platform == "linux"
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
    )


def prepare_ahead(
    raw_dir: Path | str,
    processed_dir: Path | str,
    settings: ReportSettings,
    git: dict[str, str],
    progress: Progress | None = None,
    workers: int | None = None,
) -> set[str]:
    """Fill the per-run caches (:func:`cached_samples`, :func:`cached_run_analysis`) of
    the run folders in scope whose entry is missing or stale, in forked worker
    processes: one per CPU, at most :data:`MAX_WORKERS`.

    A worker reads its run folder as :func:`build` does and, for a bench run that the
    analysis will include, analyses it. Each run's reading and analysis are
    independent and seeded by the settings alone, so the caches hold what this process
    would compute; a folder that cannot be read is left for :func:`build` to name.
    Without :func:`can_fork`, with one CPU or with fewer than two folders to prepare,
    nothing happens here (:func:`build` does it all, one run after another). Returns
    the ``"<host>/<run_id>"`` of each folder prepared here.
    """
    import multiprocessing

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if min(workers or cpus or 1, MAX_WORKERS) < 2 or not can_fork():
        return set()
    code = code_hash()
    reader = cached_samples(processed_dir)
    jobs: list[tuple[str, Callable[[], str]]] = []
    for run_dir in rawdata.run_dirs(raw_dir):
        samples = run_dir / schema.SAMPLES_CSV
        name = f"{run_dir.parent.name}/{run_dir.name}"
        if not _in_scope(run_dir, settings) or not samples.is_file():
            continue  # nothing to parse or analyse
        try:
            meta = rawdata.read_run_json(run_dir / schema.RUN_JSON)
        except rawdata.RawDataError:
            continue  # build names it
        if meta.get("status") != rawdata.COMPLETE:
            continue  # neither parsed nor analysed
        analysis = _cache_file(processed_dir, run_dir, _RUN_CACHE_FILE)
        key = _run_key(run_dir, settings, code)
        files = key["files"]  # each file hashed once, for both keys
        parsed = _samples_key(files[schema.SAMPLES_CSV], files[schema.RUN_JSON], code)
        modified = git.get(name) == MODIFIED
        # A history run is parsed here but analysed by kvqueue.history.analyze; a run
        # whose folder differs from its commit is left out, never analysed.
        analysed = (
            schema.run_kind(meta) != schema.KIND_BENCH or modified or _stored_key(analysis) == key
        )
        if (
            analysed
            and _stored_key(_cache_file(processed_dir, run_dir, _SAMPLES_CACHE_FILE)) == parsed
        ):
            continue

        def job(run_dir: Path = run_dir, analysis: Path = analysis, key: Any = key,
                modified: bool = modified) -> str:  # fmt: skip
            try:
                run = rawdata.read_run(run_dir, reader)
            except rawdata.RawDataError:
                return "could not read"  # build names it
            if run.kind == schema.KIND_BENCH and run.included and not modified:
                _cached(analysis, key, lambda: ab.analyze_run(run, settings))
                return "read and analysed"
            return "read"

        jobs.append((name, job))
    n = min(workers or cpus or 1, MAX_WORKERS, len(jobs))
    if n < 2:
        return set()
    say = progress or (lambda _line: None)
    done = set()
    stats.scipy_stats()  # imported once here, not once in every worker (1.3 s each)
    _AHEAD[:] = [job for _, job in jobs]
    # multiprocessing.Pool, not ProcessPoolExecutor: on Ctrl-C or an error,
    # terminate() stops the workers at once (the executor finished its queued jobs
    # first: the report took 10 s to stop).
    pool = multiprocessing.get_context("fork").Pool(n, initializer=ignore_interrupts)
    try:
        results = pool.imap_unordered(_run_ahead, range(len(jobs)))
        for count in range(1, len(jobs) + 1):
            # A worker that dies (killed, out of memory) never answers: after the
            # timeout the build does the rest itself, one run after another.
            index, did, took = results.next(timeout=_JOB_TIMEOUT)
            done.add(jobs[index][0])
            say(f"processed: {did} {jobs[index][0]} ({took:.1f} s; {count}/{len(jobs)})")
        pool.close()
    except multiprocessing.TimeoutError:
        pool.terminate()
        say(
            f"processed: a worker process gave no answer in {_JOB_TIMEOUT:.0f} s; "
            "the rest is done here"
        )
    except BaseException:  # Ctrl-C, or a job's error (build raises it again, serially)
        pool.terminate()
        raise
    finally:
        pool.join()
        _AHEAD.clear()
        for name, _job in jobs:  # a terminated worker's half-written cache entry
            for partial in (Path(processed_dir) / RUN_CACHE / name).glob(".*.tmp"):
                partial.unlink(missing_ok=True)
    return done


def _stored_key(path: Path) -> Any:
    """The key a cache file of :func:`_cached` was written under (None if unreadable):
    the file's first pickle, read without the value behind it."""
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)
    except Exception:  # missing, truncated or from another version
        return None


def _samples_key(samples_sha256: str, run_json_sha256: str, code: str) -> dict[str, str]:
    # run.json too: the samples are checked against its schema version and labels.
    return {
        schema.SAMPLES_CSV: samples_sha256,
        schema.RUN_JSON: run_json_sha256,
        "code_sha256": code,
    }


def cached_samples(processed_dir: Path | str) -> rawdata.SamplesReader:
    """:func:`kvqueue.analysis.rawdata.read_samples`, cached per run folder by the file's
    sha256, its run.json's and :func:`code_hash` (``runs/<host>/<run-id>/samples.pkl``):
    parsing and checking the committed runs' samples took 4.3 of the 12 s of a cached
    rebuild."""
    code = code_hash()

    def read(path: Path, meta: dict[str, Any], digest: str) -> pd.DataFrame:
        run_json = hashlib.sha256((path.parent / schema.RUN_JSON).read_bytes()).hexdigest()
        return _cached(
            _cache_file(processed_dir, path.parent, _SAMPLES_CACHE_FILE),
            _samples_key(digest, run_json, code),
            lambda: rawdata.read_samples(path, meta),
        )

    return read


def _cached(path: Path, key: dict[str, Any], compute: Callable[[], Any]) -> Any:
    """``compute()``, stored in ``path`` under ``key``; reused while the key matches.

    The file holds two pickles, the key and then the value, so that
    :func:`_stored_key` reads the key alone.
    """
    try:
        with path.open("rb") as fh:
            if pickle.load(fh) == key:
                return pickle.load(fh)
    except Exception:  # missing, truncated or from another version: recompute
        pass
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temp file of its own, then a rename: never a half-written cache file under the
    # real name, and two builds writing the same entry at once both succeed.
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(key, fh, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return value


def _policy_problems(raw: rawdata.RawData) -> dict[str, str]:
    """Why the policy reader leaves out a policy run that passed the raw checks."""
    out = {}
    for run in raw.of_kind(schema.KIND_POLICY).included:
        key = f"{run.host}/{run.run_id}"
        try:
            read = policy_analyze.read_policy_run(run.path, run.meta)
        except rawdata.RawDataError as exc:
            out[key] = f"unreadable: {exc.path.name}: {exc.problem}"
            continue
        if read["altered"] is not None:
            out[key] = f"altered: {read['altered']}"
    return out


def build(
    raw_dir: Path | str,
    processed_dir: Path | str,
    settings: ReportSettings | None = None,
    progress: Progress | None = None,
) -> Processed:
    """Read the raw runs in scope, compute the tables and write them to ``processed_dir``.

    A run folder that cannot be read is left out and named (the ``ledger`` table), not an
    error; each included bench run's statistics come from the per-run cache
    (:func:`cached_run_analysis`).

    Parameters
    ----------
    raw_dir
        Raw-data root (``data/raw``).
    processed_dir
        Output folder (``data/processed``); created if needed.
    settings
        Analysis settings and scope (defaults: :class:`kvqueue.params.report.ReportSettings`).
    progress
        Gets one line per run and per stage (``make report`` prints them).

    Returns
    -------
    Processed

    Raises
    ------
    kvqueue.analysis.rawdata.RawDataError
        The raw-data folder is missing, a run id is in two folders, or two runs hold
        the same samples (a copied run).
    """
    settings = settings or ReportSettings()
    say = progress or (lambda _line: None)
    started = time.perf_counter()
    git = {k: v for k, v in git_states(raw_dir).items() if _in_scope(Path(raw_dir) / k, settings)}
    # From scratch, reading (parsing samples.csv) and analysing the runs one after
    # another was 22 of the 24 s of this stage: the folders to prepare go to one
    # process per CPU first, and what follows reads their caches.
    ahead = prepare_ahead(raw_dir, processed_dir, settings, git, say)
    raw = rawdata.read_raw(
        raw_dir,
        strict=False,
        hosts=settings.hosts,
        run_ids=settings.runs,
        samples_reader=cached_samples(processed_dir),
    )
    say(
        f"processed: read {len(raw.runs) + len(raw.unreadable)} run folders "
        f"({time.perf_counter() - started:.1f} s)"
    )
    checked = ab.with_git_state(raw, git)
    per_run = cached_run_analysis(processed_dir, settings, say, ahead)
    tables = ab.analyze(raw, settings, git, per_run)
    problems = _policy_problems(checked)
    policy_ok = {
        f"{r.host}/{r.run_id}"
        for r in checked.of_kind(schema.KIND_POLICY).included
        if f"{r.host}/{r.run_id}" not in problems
    }
    tables["policy"] = policy_analyze.analyze(raw_dir, settings, git, only=policy_ok)
    # History and policy runs pass the same integrity rules as bench runs (git state too).
    tables.update(history_analyze.analyze(checked, settings.confidence))
    # Instruction counts (kind counts): the runs the reader included, sealed and in scope.
    counted = {f"{r.host}/{r.run_id}" for r in checked.of_kind(schema.KIND_COUNTS).included}
    count_tables, _ = count_math.analyze(raw_dir, settings.pairs, only=counted)
    tables.update(count_tables)
    tables["ledger"] = ledger.ledger(
        checked,
        tables["runs"],
        tables["history"],
        tables["policy"],
        problems,
        counts=pd.concat([tables["count_pairs"], tables["count_steps"]]),
    )
    data = Processed(settings, manifest=_manifest(raw_dir, settings, git), **tables)
    write(data, processed_dir)
    say(f"processed: tables written ({time.perf_counter() - started:.1f} s)")
    return data


def load(processed_dir: Path | str) -> Processed:
    """Read the tables written by :func:`build`.

    Parameters
    ----------
    processed_dir
        Folder holding the CSVs and ``manifest.json``.

    Returns
    -------
    Processed
    """
    folder = Path(processed_dir)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    tables = {}
    for name, spec in TABLES.items():
        df = pd.read_csv(
            folder / f"{name}.csv",
            dtype={c: t for c, t in spec.items()},
            keep_default_na=False,
            na_values=[""],
        )
        tables[name] = df[list(spec)]
    return Processed(ReportSettings.from_dict(manifest["settings"]), manifest=manifest, **tables)


def ensure(
    raw_dir: Path | str, processed_dir: Path | str, settings: ReportSettings | None = None
) -> Processed:
    """Load the processed tables, rebuilding them when the raw data or settings changed.

    ``kvqueue report`` builds first and then runs the notebook, which calls this: the
    manifest matches and the bootstrap is not repeated. Opened on its own, the notebook
    builds what is missing.

    Parameters
    ----------
    raw_dir, processed_dir, settings
        As for :func:`build`.

    Returns
    -------
    Processed
    """
    settings = settings or ReportSettings()
    folder = Path(processed_dir)
    manifest_path = folder / MANIFEST
    if manifest_path.is_file() and all((folder / f"{n}.csv").is_file() for n in TABLES):
        try:
            current = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            current = None
        if current == _manifest(raw_dir, settings):
            return load(folder)
    return build(raw_dir, folder, settings)
