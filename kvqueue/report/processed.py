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
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from kvqueue import errors, hostinfo, schema, versions
from kvqueue.analysis import ab, comparisons, integrity, rawdata, stats
from kvqueue.history import analyze as history_analyze
from kvqueue.params import bench as bench_params
from kvqueue.params import checks as param_checks
from kvqueue.params import history as history_params
from kvqueue.params import report as report_params
from kvqueue.params import spec as param_spec
from kvqueue.params.report import ReportSettings
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
    comparisons,
    errors,
    history_analyze,
    hostinfo,
    integrity,
    bench_params,
    param_checks,
    history_params,
    report_params,
    param_spec,
    policy_analyze,
    versions,
    rawdata,
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


def fingerprint(raw_dir: Path | str) -> dict[str, str]:
    """sha256 of every raw file the analysis reads, keyed by path relative to ``raw_dir``.

    ``bench.ipynb`` included: its digest decides whether a run is altered.
    """
    root = Path(raw_dir)
    out = {}
    for run_dir in rawdata.run_dirs(root):
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
        "inputs": fingerprint(raw_dir),
        "git_state": git_states(raw_dir) if git is None else git,
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


def build(
    raw_dir: Path | str, processed_dir: Path | str, settings: ReportSettings | None = None
) -> Processed:
    """Read all raw runs, compute the tables and write them to ``processed_dir``.

    Parameters
    ----------
    raw_dir
        Raw-data root (``data/raw``).
    processed_dir
        Output folder (``data/processed``); created if needed.
    settings
        Analysis settings (defaults: :class:`kvqueue.params.report.ReportSettings`).

    Returns
    -------
    Processed

    Raises
    ------
    kvqueue.analysis.rawdata.RawDataError
        On the first missing or malformed raw file.
    """
    settings = settings or ReportSettings()
    raw = rawdata.read_raw(raw_dir)
    git = git_states(raw_dir)
    tables = ab.analyze(raw, settings, git)
    tables["policy"] = policy_analyze.analyze(raw_dir, settings, git)
    # History and policy runs pass the same integrity rules as bench runs (git state too).
    tables.update(history_analyze.analyze(ab.with_git_state(raw, git), settings.confidence))
    data = Processed(settings, manifest=_manifest(raw_dir, settings, git), **tables)
    write(data, processed_dir)
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
