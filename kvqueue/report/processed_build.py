"""Build the processed tables from the raw data: read -> analyse per question -> ledger -> write.

:func:`build` reads the raw runs in scope once (:mod:`kvqueue.rawdata.raw_reader`), has
each question analyse them (:mod:`kvqueue.ab.ab_analysis`, :mod:`kvqueue.history.history_analysis`,
:mod:`kvqueue.policy.policy_analysis`, :mod:`kvqueue.stats.count_figures`), adds the ledger
of every folder found and writes the tables (:mod:`kvqueue.processed.store`). A bench
run's analysis goes through the report's cache (:mod:`kvqueue.report.build_cache`).
:func:`ensure` reuses the files while the manifest (settings, the sha256 of every raw file
read and of the package's code, the git state of every run folder,
:mod:`kvqueue.rawdata.git_state`) still matches.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.ab import ab_analysis
from kvqueue.history import history_analysis
from kvqueue.params.report_params import ReportSettings
from kvqueue.policy import policy_analysis
from kvqueue.processed import store
from kvqueue.rawdata import git_state, host_keys, raw_reader, run_ledger
from kvqueue.report import build_cache
from kvqueue.stats import count_figures

# ---------------------------------------------------------------------------------------
# files


def in_scope(run_dir: Path, settings: ReportSettings | None) -> bool:
    """Whether a run folder is in the report's scope (``HOSTS``, ``RUNS``; the reader's
    rule, :func:`kvqueue.rawdata.raw_reader.in_scope`)."""
    return settings is None or raw_reader.in_scope(run_dir, settings.hosts, settings.runs)


#: The files of a run folder the analysis reads (``bench.ipynb``: its digest decides
#: whether a run is altered).
_INPUTS = (
    schema.RUN_JSON,
    schema.SAMPLES_CSV,
    schema.RUN_NOTEBOOK,
    schema.POLICY_CSV,
    schema.POLICY_AGE_CSV,
    schema.COUNTS_CSV,
)


def fingerprint(raw_dir: Path | str, settings: ReportSettings | None = None) -> dict[str, str]:
    """sha256 of every raw file the analysis reads, keyed by path relative to ``raw_dir``
    (the run folders in the scope of ``settings`` only): the manifest's inputs, and the
    inputs of each run's cache key."""
    root = Path(raw_dir)
    out = {}
    for run_dir in raw_reader.run_dirs(root):
        if not in_scope(run_dir, settings):
            continue
        for name in _INPUTS:
            path = run_dir / name
            if path.is_file():
                out[path.relative_to(root).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return out


def _manifest(
    raw_dir: Path | str,
    settings: ReportSettings,
    git: dict[str, str] | None = None,
    inputs: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "format": store.MANIFEST_FORMAT,
        "settings": settings.to_dict(),
        "code_sha256": build_cache.code_digest(),
        "inputs": fingerprint(raw_dir, settings) if inputs is None else inputs,
        "git_state": {
            key: state
            for key, state in (git_state.git_states(raw_dir) if git is None else git).items()
            if in_scope(Path(raw_dir) / key, settings)
        },
        "tables": [f"{name}.csv" for name in store.TABLES],
    }


def _cached_analysis(
    processed_dir: Path | str,
    settings: ReportSettings,
    inputs: dict[str, str],
    say: Callable[[str], None],
) -> Callable[[raw_reader.Run], dict[str, pd.DataFrame]]:
    """``run -> ab_analysis.analyze_run(run, settings)`` through the build cache, keyed by
    the run's files (their sha256 in ``inputs``) and the analysis settings; one progress
    line per run. Pickle keeps every float, so the tables are those of a computation
    from scratch."""
    home = Path(processed_dir) / build_cache.FOLDER
    analysis = build_cache.settings_part(settings)

    def compute(run: raw_reader.Run) -> dict[str, pd.DataFrame]:
        folder = f"{run.host}/{run.run_id}/"
        files = [f"{path}={digest}" for path, digest in inputs.items() if path.startswith(folder)]
        started = time.perf_counter()
        tables, fresh = build_cache.pickled(
            home,
            f"run-{run.host}-{run.run_id}",
            build_cache.key("run", [*files, analysis]),
            lambda: ab_analysis.analyze_run(run, settings),
        )
        took = f" ({time.perf_counter() - started:.1f} s)" if fresh else ""
        say(f"processed: {'analysed' if fresh else 'reused'} {run.host}/{run.run_id}{took}")
        return tables

    return compute


def build(
    raw_dir: Path | str,
    processed_dir: Path | str,
    settings: ReportSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> store.Processed:
    """Read the raw runs in scope, compute the tables and write them to ``processed_dir``.

    A run folder that cannot be read is left out and named (the ``ledger`` table), not an
    error; each included bench run's statistics come from the build cache
    (:func:`_cached_analysis`).

    Parameters
    ----------
    raw_dir
        Raw-data root (``data/raw``).
    processed_dir
        Output folder (``data/processed``); created if needed.
    settings
        Analysis settings and scope (defaults:
        :class:`kvqueue.params.report_params.ReportSettings`).
    progress
        Gets one line per run and per stage (``make report`` prints them).

    Returns
    -------
    store.Processed

    Raises
    ------
    kvqueue.rawdata.raw_reader.RawDataError
        The raw-data folder is missing, a run id is in two folders, or two runs hold
        the same samples (a copied run).
    """
    settings = settings or ReportSettings()
    say = progress or (lambda _line: None)
    started = time.perf_counter()
    git = {
        k: v
        for k, v in git_state.git_states(raw_dir).items()
        if in_scope(Path(raw_dir) / k, settings)
    }
    inputs = fingerprint(raw_dir, settings)
    build_cache.remove_partials(Path(processed_dir) / build_cache.FOLDER)
    # The per-run cache of builds before the one build cache (43 MB on the committed
    # data); nothing reads it any more.
    shutil.rmtree(Path(processed_dir) / "runs", ignore_errors=True)

    # Read: every run folder in scope, once, with the git rule applied once.
    found = raw_reader.read_raw(raw_dir, strict=False, hosts=settings.hosts, run_ids=settings.runs)
    raw = git_state.with_git_state(found, git)
    say(
        f"processed: read {len(raw.runs) + len(raw.unreadable)} run folders "
        f"({time.perf_counter() - started:.1f} s)"
    )

    # One HOST label = one CPU: a label's CPUs numbered once, over its runs of every
    # kind, and every question keyed on that host key.
    cpus = host_keys.host_cpus(raw)

    # Analyse, per question, the runs the reader included.
    per_run = _cached_analysis(processed_dir, settings, inputs, say)
    tables = ab_analysis.analyze(raw, settings, git, per_run, cpus)
    tables.update(history_analysis.analyze(raw, settings.confidence, cpus[0]))
    policy_runs, problems = policy_analysis.read_runs(raw.of_kind(schema.KIND_POLICY).included)
    tables["policy"] = policy_analysis.analyze(policy_runs, settings, cpus[0])
    count_tables, count_problems = count_figures.analyze(
        raw.of_kind(schema.KIND_COUNTS).included, settings.pairs, cpus[0]
    )
    tables.update(count_tables)
    problems.update(count_problems)

    # Ledger: every folder found, with its use or the reason it is left out.
    tables["ledger"] = run_ledger.ledger(
        raw,
        tables["runs"],
        tables["history"],
        tables["policy"],
        problems,
        counts=pd.concat([tables["count_pairs"], tables["count_steps"]]),
        cpus=cpus,
    )

    # Write.
    data = store.Processed(
        settings,
        manifest=_manifest(raw_dir, settings, git, inputs),
        folder=Path(processed_dir),
        **tables,
    )
    store.write(data, processed_dir)
    say(f"processed: tables written ({time.perf_counter() - started:.1f} s)")
    return data


def ensure(
    raw_dir: Path | str, processed_dir: Path | str, settings: ReportSettings | None = None
) -> store.Processed:
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
    store.Processed
    """
    settings = settings or ReportSettings()
    folder = Path(processed_dir)
    manifest_path = folder / store.MANIFEST
    if manifest_path.is_file() and all((folder / f"{n}.csv").is_file() for n in store.TABLES):
        try:
            current = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            current = None
        if current == _manifest(raw_dir, settings):
            return store.load(folder)
    return build(raw_dir, folder, settings)
