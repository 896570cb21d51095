"""The per-run cache of the processed build, and the forked workers that fill it ahead.

One cache file per run folder and stage (``<processed>/runs/<host>/<run-id>/samples.pkl``
and ``analysis.pkl``), each holding its key (the sha256 of the run's files, the analysis
settings, the code digest) before its value, so that the key is read alone.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis
from kvqueue.kernel import die_with
from kvqueue.params.report_params import SCOPE_FIELDS, ReportSettings
from kvqueue.rawdata import git_state, raw_reader
from kvqueue.stats import paired_stats


def in_scope(run_dir: Path, settings: ReportSettings | None) -> bool:
    """Whether a run folder is in the report's scope (``HOSTS``, ``RUNS``)."""
    if settings is None:
        return True
    hosts, runs = settings.hosts, settings.runs
    return (not hosts or run_dir.parent.name in hosts) and (not runs or run_dir.name in runs)


def code_modules(start: ModuleType) -> list[ModuleType]:
    """``start`` and every kvqueue module it reaches through its module-level names (an
    imported module, or a class or function defined in one), sorted by name."""
    seen = {start.__name__: start}
    todo = [start]
    while todo:
        for value in vars(todo.pop()).values():
            name = (
                value.__name__
                if isinstance(value, ModuleType)
                else getattr(value, "__module__", None)
            )
            if isinstance(name, str) and name.startswith("kvqueue.") and name not in seen:
                seen[name] = sys.modules[name]
                todo.append(seen[name])
    return [seen[name] for name in sorted(seen)]


def code_digest(start: ModuleType) -> str:
    """sha256 over the source files of :func:`code_modules` of ``start``: the one code
    part of every key of this cache and of the processed manifest."""
    digest = hashlib.sha256()
    for module in code_modules(start):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


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
    code: str,
    progress: Progress | None = None,
    analysed_ahead: set[str] | None = None,
) -> Callable[[raw_reader.Run], dict[str, pd.DataFrame]]:
    """``run -> ab_analysis.analyze_run(run, settings)``, cached per run folder.

    The cache is ``<processed_dir>/runs/<host>/<run-id>/analysis.pkl``: the run's tables
    with the key they were computed under (the sha256 of the run's files, the analysis
    settings, the code digest). A key that differs, or a file that does not load, is
    recomputed and rewritten; pickle keeps every float exactly, so the combined tables
    are byte-identical to a computation from scratch. ``progress`` gets one line per run
    (analysed, with its time, or reused), except for the runs of ``analysed_ahead``
    (:func:`prepare_ahead` named them).
    """
    say = progress or (lambda _line: None)
    ahead = set(analysed_ahead or ())

    def compute(run: raw_reader.Run) -> dict[str, pd.DataFrame]:
        path = _cache_file(processed_dir, run.path, _RUN_CACHE_FILE)
        started = time.perf_counter()
        fresh: list[bool] = []

        def analyse() -> dict[str, pd.DataFrame]:
            fresh.append(True)
            return ab_analysis.analyze_run(run, settings)

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
    it, terminates the workers at once (and removes what they left half-written); it
    dies with the parent, so that a ``kill -9`` of the report leaves no worker on."""
    import multiprocessing

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid is not None:
        die_with(parent.pid)


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
    code: str,
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
    reader = cached_samples(processed_dir, code)
    jobs: list[tuple[str, Callable[[], str]]] = []
    for run_dir in raw_reader.run_dirs(raw_dir):
        samples = run_dir / schema.SAMPLES_CSV
        name = f"{run_dir.parent.name}/{run_dir.name}"
        if not in_scope(run_dir, settings) or not samples.is_file():
            continue  # nothing to parse or analyse
        try:
            meta = raw_reader.read_run_json(run_dir / schema.RUN_JSON)
        except raw_reader.RawDataError:
            continue  # build names it
        if meta.get("status") != raw_reader.COMPLETE:
            continue  # neither parsed nor analysed
        analysis = _cache_file(processed_dir, run_dir, _RUN_CACHE_FILE)
        key = _run_key(run_dir, settings, code)
        files = key["files"]  # each file hashed once, for both keys
        parsed = _samples_key(files[schema.SAMPLES_CSV], files[schema.RUN_JSON], code)
        modified = git.get(name) == git_state.MODIFIED
        # A history run is parsed here but analysed by kvqueue.history.history_analysis; a run
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
                run = raw_reader.read_run(run_dir, reader)
            except raw_reader.RawDataError:
                return "could not read"  # build names it
            if run.kind == schema.KIND_BENCH and run.included and not modified:
                _cached(analysis, key, lambda: ab_analysis.analyze_run(run, settings))
                return "read and analysed"
            return "read"

        jobs.append((name, job))
    n = min(workers or cpus or 1, MAX_WORKERS, len(jobs))
    if n < 2:
        return set()
    say = progress or (lambda _line: None)
    done = set()
    paired_stats.scipy_stats()  # imported once here, not once in every worker (1.3 s each)
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


def cached_samples(processed_dir: Path | str, code: str) -> raw_reader.SamplesReader:
    """:func:`kvqueue.rawdata.raw_reader.read_samples`, cached per run folder by the file's
    sha256, its run.json's and the code digest (``runs/<host>/<run-id>/samples.pkl``):
    parsing and checking the committed runs' samples took 4.3 of the 12 s of a cached
    rebuild."""

    def read(path: Path, meta: dict[str, Any], digest: str) -> pd.DataFrame:
        run_json = hashlib.sha256((path.parent / schema.RUN_JSON).read_bytes()).hexdigest()
        return _cached(
            _cache_file(processed_dir, path.parent, _SAMPLES_CACHE_FILE),
            _samples_key(digest, run_json, code),
            lambda: raw_reader.read_samples(path, meta),
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
