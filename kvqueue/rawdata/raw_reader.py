"""Read and check the raw runs under ``data/raw/<host>/<run-id>/`` (format: :mod:`schema`).

Every problem is raised as :class:`RawDataError` whose message is ONE line that starts
with the offending file, so ``make report`` can print it and stop. Runs whose status is
not ``"complete"`` are kept aside (their ``samples.csv`` may be cut short and is not
read) so the report can name them.

Integrity of a complete run (:attr:`Run.integrity`, :attr:`Run.altered`; the checks are
:mod:`kvqueue.rawdata.integrity`'s):

- its files are checked against the digests that ``run.json`` records (schema 2, see
  :mod:`kvqueue.measure.run_folder`): the sha256 and row count of ``samples.csv``, the sha256 of
  ``bench.ipynb`` when one is recorded. A ``bench.ipynb`` without a recorded digest is
  noted (``notebook not sealed``), not held against the run. Schema-1 runs record no
  digests: they are ``unsealed (schema 1)``;
- its samples are checked against its own plan
  (:func:`kvqueue.rawdata.integrity.plan_problem`): processes x phases x cases x pools x
  variants x samples, no gaps, nothing extra, process numbers ``1..processes_completed``
  per phase, each round's order positions a permutation.

A run that fails either check is *altered*: it stays in :attr:`RawData.runs` (so the
report names it, with the reason) but out of :attr:`RawData.included`, so out of every
statistic. A run id that appears in two folders, or two complete runs with
byte-identical ``samples.csv``, is a :class:`RawDataError` naming both folders (a copied
run must never count as an independent one).

Kinds (``run.json`` ``kind``, :data:`kvqueue.schema.RUN_KINDS`): bench and history runs
share the bench format and every check above. A run of another kind (``policy``) is
checked for the keys every kind has and for the digests of every file its ``files``
records; those files are read here, once, and their checked bytes handed on
(:attr:`Run.recorded`): the run's own module parses them and never reads or hashes
the folder again.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.rawdata import integrity
from kvqueue.rawdata.samples_csv import RawDataError, read_samples
from kvqueue.rawdata.samples_csv import require as _require

COMPLETE = "complete"

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Run:
    """One run folder: its metadata and (for complete runs) its samples.

    Attributes
    ----------
    path
        The run folder.
    meta
        The parsed ``run.json``.
    samples
        Checked samples (columns :data:`schema.SAMPLE_COLUMNS`), or ``None`` for a run
        that is not complete (or whose ``samples.csv`` does not match its digest).
    integrity
        For a complete run, a value of :mod:`kvqueue.rawdata.integrity`: ``SEALED``,
        ``SEALED_NOTEBOOK_UNSEALED``, ``UNSEALED_V1``, ``UNSEALED_NO_DIGESTS`` or ``ALTERED``
        + reason;
        ``None`` for a run that is not complete (its files are not checked).
    altered
        Why the run's files disagree with its ``run.json`` (one line), or ``None``.
    samples_sha256
        sha256 of ``samples.csv`` as read (complete runs).
    recorded
        For a complete run of a kind outside the bench format (policy, counts) whose
        files match their digests: the bytes of every file its ``run.json`` records,
        keyed by name, as read and checked here (empty otherwise). Its question parses
        these; nothing reads the files again.
    """

    path: Path
    meta: dict[str, Any]
    samples: pd.DataFrame | None
    integrity: str | None = None
    altered: str | None = None
    samples_sha256: str | None = None
    recorded: Mapping[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def run_id(self) -> str:
        """The run id (also the folder name)."""
        return str(self.meta["run_id"])

    @property
    def host(self) -> str:
        """The host label given to ``make bench``."""
        return str(self.meta["host"])

    @property
    def status(self) -> str:
        """``complete``, ``running``, ``interrupted`` or ``failed``."""
        return str(self.meta["status"])

    @property
    def complete(self) -> bool:
        """Whether every planned process finished (``status`` is ``complete``)."""
        return self.status == COMPLETE

    @property
    def kind(self) -> str:
        """What the run measured: ``bench``, ``history`` or ``policy``."""
        return schema.run_kind(self.meta)

    @property
    def included(self) -> bool:
        """Whether the run enters the analysis: complete and not altered."""
        if self.kind not in schema.BENCH_FORMAT_KINDS:
            return self.complete and self.altered is None
        return self.complete and self.altered is None and self.samples is not None

    @property
    def interpreter(self) -> str:
        """The measured interpreter, e.g. ``CPython 3.12.1``."""
        py = self.meta["python"]
        return f"{py.get('implementation', 'Python')} {py.get('version', '?')}"

    @property
    def started(self) -> datetime | None:
        """Start time (for picking the newest run), or ``None`` if unparsable."""
        try:
            return datetime.fromisoformat(str(self.meta.get("started_at")))
        except ValueError:
            return None


@dataclass(frozen=True)
class Unreadable:
    """A run folder that could not be read (``run.json`` missing or malformed, its samples
    malformed): named in the report with ``problem``, out of every table."""

    path: Path
    problem: str

    @property
    def host(self) -> str:
        """The host folder's name."""
        return self.path.parent.name

    @property
    def run_id(self) -> str:
        """The run folder's name."""
        return self.path.name


@dataclass(frozen=True)
class RawData:
    """All runs found under a raw directory, sorted by (host, run id); ``unreadable``: the
    folders that :func:`read_raw` (``strict=False``) could not read."""

    runs: tuple[Run, ...]
    unreadable: tuple[Unreadable, ...] = ()

    @property
    def included(self) -> tuple[Run, ...]:
        """Runs that enter the analysis: complete and not altered."""
        return tuple(r for r in self.runs if r.included)

    def of_kind(self, *kinds: str) -> RawData:
        """The runs of the given kinds only (``bench``, ``history``, ``policy``)."""
        return RawData(tuple(r for r in self.runs if r.kind in kinds), self.unreadable)


# ---------------------------------------------------------------------------------------
# discovery


def run_dirs(raw_dir: Path | str) -> list[Path]:
    """List run folders (``<raw_dir>/<host>/<run-id>/``), sorted.

    Parameters
    ----------
    raw_dir
        The raw-data root.

    Returns
    -------
    list of pathlib.Path
        Hidden entries (``.gitkeep``, ...) are ignored.

    Raises
    ------
    RawDataError
        If ``raw_dir`` is not a directory.
    """
    root = Path(raw_dir)
    if not root.is_dir():
        raise RawDataError(root, "raw-data directory not found")
    found = []
    for host_dir in sorted(root.iterdir()):
        if host_dir.name.startswith(".") or not host_dir.is_dir():
            continue
        found.extend(
            d for d in sorted(host_dir.iterdir()) if d.is_dir() and not d.name.startswith(".")
        )
    return found


def in_scope(run_dir: Path, hosts: Sequence[str] = (), run_ids: Sequence[str] = ()) -> bool:
    """Whether a run folder is among ``hosts`` and ``run_ids`` (the report's ``HOSTS`` and
    ``RUNS``; empty: all)."""
    return (not hosts or run_dir.parent.name in hosts) and (not run_ids or run_dir.name in run_ids)


def read_raw(
    raw_dir: Path | str,
    *,
    strict: bool = True,
    hosts: Sequence[str] = (),
    run_ids: Sequence[str] = (),
) -> RawData:
    """Read and check every run under ``raw_dir``.

    Parameters
    ----------
    raw_dir
        The raw-data root.
    strict
        ``True``: the first unreadable run folder is an error. ``False`` (the report):
        it is kept in :attr:`RawData.unreadable` with its one-line problem, and the
        other runs are read.
    hosts, run_ids
        Read only these host folders / run folders (empty: all).

    Returns
    -------
    RawData
        Complete runs carry their samples; other runs only their metadata.

    Raises
    ------
    RawDataError
        On the first missing or malformed file (``strict``); when a run id is in two
        folders (any hosts) or two complete runs have byte-identical ``samples.csv`` (a
        copied run).
    """
    every = run_dirs(raw_dir)
    # A filter entry that names nothing is a typo, not an empty selection: a report that
    # dropped it silently would look like one of the host or run it meant.
    for what, given, known in (
        ("HOSTS", hosts, sorted({d.parent.name for d in every})),
        ("RUNS", run_ids, sorted({d.name for d in every})),
    ):
        unknown = [g for g in given if g not in known]
        if unknown:
            near = difflib.get_close_matches(unknown[0], known, n=1)
            raise RawDataError(
                Path(raw_dir),
                f"{what} names {', '.join(unknown)}, found nowhere under it"
                + (f" (did you mean {near[0]}?)" if near else "")
                + (f"; the host folders: {', '.join(known)}" if what == "HOSTS" else ""),
            )
    dirs = [d for d in every if in_scope(d, hosts, run_ids)]
    first_of: dict[str, Path] = {}
    for d in dirs:
        if d.name in first_of:
            raise RawDataError(
                d,
                f"run id {d.name} appears twice in the raw data: folders {first_of[d.name]} "
                f"and {d} (a copied run; a run id must be unique across hosts)",
            )
        first_of[d.name] = d
    found: list[Run] = []
    unreadable: list[Unreadable] = []
    for d in dirs:
        try:
            found.append(read_run(d))
        except RawDataError as exc:
            if strict:
                raise
            unreadable.append(Unreadable(d, f"{exc.path.name}: {exc.problem}"))
    runs = tuple(found)
    by_digest: dict[str, Run] = {}
    for run in runs:
        if run.samples_sha256 is None:
            continue
        other = by_digest.setdefault(run.samples_sha256, run)
        if other is not run:
            raise RawDataError(
                run.path / schema.SAMPLES_CSV,
                f"byte-identical to {other.path / schema.SAMPLES_CSV}: folders {other.path} and "
                f"{run.path} hold the same samples (a copied run)",
            )
    return RawData(runs, tuple(unreadable))


def read_run(run_dir: Path | str) -> Run:
    """Read one run folder (samples only when the run is complete).

    Parameters
    ----------
    run_dir
        ``<raw_dir>/<host>/<run-id>``.

    Returns
    -------
    Run

    Raises
    ------
    RawDataError
        If ``run.json`` is missing or malformed, or a complete run's ``samples.csv`` is.
        Files that disagree with the run's digests or plan are not an error: the run
        comes back *altered* (see the module docstring).
    """
    run_dir = Path(run_dir)
    meta = read_run_json(run_dir / schema.RUN_JSON)
    if meta["run_id"] != run_dir.name or meta["host"] != run_dir.parent.name:
        raise RawDataError(
            run_dir / schema.RUN_JSON,
            f"host/run_id {meta['host']!r}/{meta['run_id']!r} do not match the folder "
            f"{run_dir.parent.name}/{run_dir.name}",
        )
    if meta["status"] != COMPLETE:
        return Run(run_dir, meta, None)
    if schema.run_kind(meta) not in schema.BENCH_FORMAT_KINDS:
        files, problem = integrity.read_recorded_files(run_dir, meta)
        if problem is not None:
            return Run(run_dir, meta, None, integrity.ALTERED + problem, problem)
        state = integrity.SEALED if meta.get(schema.FILES_KEY) else None
        return Run(run_dir, meta, None, state, recorded=files)
    path = run_dir / schema.SAMPLES_CSV
    _require(path.is_file(), path, "missing (a complete run needs its samples)")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    state, problem = integrity.check_digests(run_dir, meta, digest)
    if problem is not None:
        # The file is not the one the run wrote: never parse it into the analysis.
        return Run(run_dir, meta, None, integrity.ALTERED + problem, problem, digest)
    samples = read_samples(path, meta)
    recorded_rows = ((meta.get(schema.FILES_KEY) or {}).get(schema.SAMPLES_CSV) or {}).get("rows")
    if recorded_rows is not None and recorded_rows != len(samples):
        problem = f"samples.csv has {len(samples):,} rows, run.json records {recorded_rows:,}"
    else:
        problem = integrity.plan_problem(meta, samples)
    if problem is not None:
        return Run(run_dir, meta, samples, integrity.ALTERED + problem, problem, digest)
    return Run(run_dir, meta, samples, state, None, digest)


# ---------------------------------------------------------------------------------------
# run.json


#: (dotted key, allowed types) of optional run.json fields with a fixed type.
_TYPED_FIELDS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("started_at", (str,)),
    ("ended_at", (str,)),
    ("machine.cpu_count", (int,)),
    ("parameters.processes", (int,)),
    ("parameters.confirm_processes", (int,)),
    ("parameters.samples", (int,)),
    ("parameters.sample_ms", (int, float)),
    ("parameters.warmup_ms", (int, float)),
    ("parameters.quick", (bool,)),
    ("parameters.aa", (bool,)),
    ("processes_planned.main", (int,)),
    ("processes_planned.confirm", (int,)),
    ("processes_completed.main", (int,)),
    ("processes_completed.confirm", (int,)),
    ("project.dirty", (bool,)),
)


def _lookup(meta: dict[str, Any], dotted: str) -> Any:
    node: Any = meta
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _bool_as_number(value: Any, kinds: tuple[type, ...]) -> bool:
    # bool is a subclass of int: True must not pass as a process count.
    return isinstance(value, bool) and bool not in kinds


def read_run_json(path: Path | str) -> dict[str, Any]:
    """Parse and check a ``run.json``.

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    dict
        The metadata (extra keys are kept).

    Raises
    ------
    RawDataError
        Missing file, invalid JSON, wrong schema version, missing keys or wrong types.
    """
    path = Path(path)
    _require(path.is_file(), path, "missing (every run folder needs one)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise RawDataError(path, f"not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise RawDataError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    _require(isinstance(meta, dict), path, "must hold one JSON object")
    kind = meta.get(schema.KIND_KEY, schema.KIND_BENCH)
    _require(
        kind in schema.RUN_KINDS,
        path,
        f"kind {kind!r} is not one of {', '.join(schema.RUN_KINDS)}",
    )
    if kind not in schema.BENCH_FORMAT_KINDS:
        return _check_common(meta, path)
    missing = [k for k in schema.RUN_KEYS if k not in meta]
    _require(not missing, path, f"missing key(s): {', '.join(missing)}")
    _require(
        meta["schema_version"] in schema.READABLE_VERSIONS,
        path,
        f"schema_version {meta['schema_version']!r} is not one of {schema.READABLE_VERSIONS}",
    )
    for key in ("run_id", "host", "status", "baseline"):
        _require(isinstance(meta[key], str) and meta[key] != "", path, f"{key} must be a string")
    for key in (
        "machine",
        "python",
        "parameters",
        "seeds",
        "project",
        "processes_planned",
        "processes_completed",
    ):
        _require(isinstance(meta[key], dict), path, f"{key} must be an object")
    _require(isinstance(meta["process_info"], list), path, "process_info must be a list")
    variants = meta["variants"]
    _require(
        isinstance(variants, list) and variants and all(isinstance(v, dict) for v in variants),
        path,
        "variants must be a non-empty list of objects",
    )
    for i, var in enumerate(variants):
        for key in ("label", "source"):
            _require(
                isinstance(var.get(key), str) and var[key] != "",
                path,
                f"variants[{i}].{key} must be a string",
            )
    labels = [v["label"] for v in variants]
    _require(len(set(labels)) == len(labels), path, "variant labels are not unique")
    _require(meta["baseline"] in labels, path, f"baseline {meta['baseline']!r} is not a variant")
    # Optional fields that the processed tables store as numbers or booleans: a wrong
    # type must be reported here, with the file, not deep inside pandas.
    for dotted, kinds in _TYPED_FIELDS:
        value = _lookup(meta, dotted)
        _require(
            value is None or (isinstance(value, kinds) and not _bool_as_number(value, kinds)),
            path,
            f"{dotted} must be {' or '.join(k.__name__ for k in kinds)} or null, got {value!r}",
        )
    for i, var in enumerate(variants):
        for key, kinds in (("is_bound", (bool,)), ("gate", (dict,))):
            _require(
                var.get(key) is None or isinstance(var[key], kinds),
                path,
                f"variants[{i}].{key} has the wrong type",
            )
        for key in ("ops_checked", "invalid_compared"):
            value = (var.get("gate") or {}).get(key)
            _require(
                value is None or (isinstance(value, int) and not isinstance(value, bool)),
                path,
                f"variants[{i}].gate.{key} must be an integer or null",
            )
    if meta["status"] == COMPLETE:
        params = meta["parameters"]
        for key in ("processes", "samples", "sample_ms"):
            _require(
                isinstance(params.get(key), int | float) and not isinstance(params[key], bool),
                path,
                f"parameters.{key} must be a number",
            )
        for key, kind in (("pools", int), ("cases", str), ("confirm_cases", str)):
            value = params.get(key)
            if key == "confirm_cases" and value is None:
                continue  # optional: the runner's default applies
            _require(
                isinstance(value, list)
                and all(isinstance(v, kind) and not isinstance(v, bool) for v in value),
                path,
                f"parameters.{key} must be a list of {'integers' if kind is int else 'strings'}",
            )
    _check_files_entry(meta, path)
    return meta


def _check_common(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    """Check the keys every kind of run has (a policy run's own keys are its module's)."""
    missing = [k for k in schema.COMMON_RUN_KEYS if k not in meta]
    _require(not missing, path, f"missing key(s): {', '.join(missing)}")
    _require(
        meta["schema_version"] in schema.READABLE_VERSIONS,
        path,
        f"schema_version {meta['schema_version']!r} is not one of {schema.READABLE_VERSIONS}",
    )
    for key in ("run_id", "host", "status"):
        _require(isinstance(meta[key], str) and meta[key] != "", path, f"{key} must be a string")
    for key in ("machine", "python", "parameters", "seeds", "project"):
        _require(isinstance(meta[key], dict), path, f"{key} must be an object")
    files = meta.get(schema.FILES_KEY)
    _require(
        files is None or isinstance(files, dict), path, f"{schema.FILES_KEY} must be an object"
    )
    for name, entry in (files or {}).items():
        _require(
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and bool(_SHA256_RE.fullmatch(entry["sha256"])),
            path,
            f"{schema.FILES_KEY}.{name}.sha256 must be a hex sha256",
        )
    return meta


def _check_files_entry(meta: dict[str, Any], path: Path) -> None:
    """Check the shape of ``files`` (the digests, schema 2) when it is present."""
    files = meta.get(schema.FILES_KEY)
    if files is None:
        return
    _require(isinstance(files, dict), path, f"{schema.FILES_KEY} must be an object")
    for name in (schema.SAMPLES_CSV, schema.RUN_NOTEBOOK):
        entry = files.get(name)
        if entry is None:
            continue
        where = f"{schema.FILES_KEY}.{name}"
        _require(isinstance(entry, dict), path, f"{where} must be an object")
        _require(
            isinstance(entry.get("sha256"), str) and bool(_SHA256_RE.fullmatch(entry["sha256"])),
            path,
            f"{where}.sha256 must be a hex sha256",
        )
        if name == schema.SAMPLES_CSV:
            rows = entry.get("rows")
            _require(
                isinstance(rows, int) and not isinstance(rows, bool) and rows >= 0,
                path,
                f"{where}.rows must be a whole number",
            )
