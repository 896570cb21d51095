"""Read and check the raw runs under ``data/raw/<host>/<run-id>/`` (format: :mod:`schema`).

Every problem is raised as :class:`RawDataError` whose message is ONE line that starts
with the offending file, so ``make report`` can print it and stop. Runs whose status is
not ``"complete"`` are kept aside (their ``samples.csv`` may be cut short and is not
read) so the report can name them.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema

RUN_JSON = schema.RUN_JSON
SAMPLES_CSV = schema.SAMPLES_CSV
COMPLETE = "complete"

_INT_COLUMNS = ("process", "pool", "sample", "order_position", "loops", "ops_per_loop", "ns_total")
_FLOAT_COLUMNS = ("ns_per_cycle",)
_STR_COLUMNS = ("phase", "case", "variant")


class RawDataError(ValueError):
    """A raw file is missing or malformed; ``str()`` is one line naming the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.path}: {self.problem}")


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
        that is not complete.
    """

    path: Path
    meta: dict[str, Any]
    samples: pd.DataFrame | None

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
        """Whether every planned process finished."""
        return self.status == COMPLETE

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
class RawData:
    """All runs found under a raw directory, sorted by (host, run id)."""

    runs: tuple[Run, ...]

    @property
    def complete(self) -> tuple[Run, ...]:
        """Runs that enter the analysis."""
        return tuple(r for r in self.runs if r.complete)

    @property
    def left_out(self) -> tuple[Run, ...]:
        """Runs left out because their status is not ``complete``."""
        return tuple(r for r in self.runs if not r.complete)


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


def read_raw(raw_dir: Path | str) -> RawData:
    """Read and check every run under ``raw_dir``.

    Parameters
    ----------
    raw_dir
        The raw-data root.

    Returns
    -------
    RawData
        Complete runs carry their samples; other runs only their metadata.

    Raises
    ------
    RawDataError
        On the first missing or malformed file.
    """
    return RawData(tuple(read_run(d) for d in run_dirs(raw_dir)))


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
    """
    run_dir = Path(run_dir)
    meta = read_run_json(run_dir / RUN_JSON)
    if meta["run_id"] != run_dir.name or meta["host"] != run_dir.parent.name:
        raise RawDataError(
            run_dir / RUN_JSON,
            f"host/run_id {meta['host']!r}/{meta['run_id']!r} do not match the folder "
            f"{run_dir.parent.name}/{run_dir.name}",
        )
    if meta["status"] != COMPLETE:
        return Run(run_dir, meta, None)
    samples = read_samples(run_dir / SAMPLES_CSV, meta)
    return Run(run_dir, meta, samples)


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


def _require(cond: bool, path: Path, problem: str) -> None:
    if not cond:
        raise RawDataError(path, problem)


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
        for key in ("pools", "cases"):
            _require(isinstance(params.get(key), list), path, f"parameters.{key} must be a list")
    return meta


# ---------------------------------------------------------------------------------------
# samples.csv


def _read_csv_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """Read a CSV strictly: header plus rows that all have the header's field count."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh, strict=True)
            header = next(reader, None)
            if not header:
                raise RawDataError(path, "empty file (no header)")
            rows, lines = [], []
            for row in reader:
                if not row:
                    continue  # a blank line carries no sample
                if len(row) != len(header):
                    raise RawDataError(
                        path,
                        f"not a valid CSV: line {reader.line_num} has {len(row)} fields, "
                        f"expected {len(header)}",
                    )
                rows.append(row)
                lines.append(reader.line_num)
    except UnicodeDecodeError as exc:
        raise RawDataError(path, f"not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise RawDataError(path, f"not a valid CSV: {exc}") from None
    return header, rows, lines


def read_samples(path: Path | str, meta: dict[str, Any]) -> pd.DataFrame:
    """Parse and check a ``samples.csv`` against its run's metadata.

    Parameters
    ----------
    path
        The file.
    meta
        The run's parsed ``run.json`` (for the variant labels).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`schema.SAMPLE_COLUMNS` with integer / float / string dtypes.

    Raises
    ------
    RawDataError
        Missing file, wrong header, a non-numeric or out-of-range value (with its line
        number), unknown phase/case/variant, duplicate samples or inconsistent
        ``ns_per_cycle``.
    """
    path = Path(path)
    _require(path.is_file(), path, "missing (a complete run needs its samples)")
    header, rows, lines = _read_csv_rows(path)
    missing = [c for c in schema.SAMPLE_COLUMNS if c not in header]
    extra = [c for c in header if c not in schema.SAMPLE_COLUMNS]
    _require(
        not missing and not extra,
        path,
        f"header mismatch: missing {missing or 'none'}, unexpected {extra or 'none'}",
    )
    # Everything as text first, so a bad value can be reported with its line.
    raw = pd.DataFrame(rows, columns=header, dtype=str)
    _require(len(raw) > 0, path, "no samples")

    def first(mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[0])

    def line_of(mask: np.ndarray) -> int:
        return lines[first(mask)]

    out = pd.DataFrame(index=raw.index)
    for col in _INT_COLUMNS + _FLOAT_COLUMNS:
        text = raw[col].str.strip()
        values = pd.to_numeric(text, errors="coerce")
        bad = values.isna().to_numpy() | ~np.isfinite(values.to_numpy(dtype=float))
        if bad.any():
            i = first(bad)
            raise RawDataError(
                path, f"line {lines[i]}: {col} is not a number: {raw[col].iloc[i]!r}"
            )
        if col in _INT_COLUMNS:
            frac = (values % 1 != 0).to_numpy()
            if frac.any():
                raise RawDataError(path, f"line {line_of(frac)}: {col} must be an integer")
            values = values.astype(np.int64)
        out[col] = values
    for col in _STR_COLUMNS:
        out[col] = raw[col].astype(str)

    checks: list[tuple[str, np.ndarray]] = [
        (f"phase not in {list(schema.PHASES)}", ~out["phase"].isin(schema.PHASES).to_numpy()),
        (f"case not in {list(schema.CASES)}", ~out["case"].isin(schema.CASES).to_numpy()),
        (
            "variant is not listed in run.json",
            ~out["variant"].isin([v["label"] for v in meta["variants"]]).to_numpy(),
        ),
        ("process must be >= 1", (out["process"] < 1).to_numpy()),
        ("pool must be >= 1", (out["pool"] < 1).to_numpy()),
        ("sample must be >= 0", (out["sample"] < 0).to_numpy()),
        ("order_position must be >= 0", (out["order_position"] < 0).to_numpy()),
        ("loops must be >= 1", (out["loops"] < 1).to_numpy()),
        ("ops_per_loop must be >= 1", (out["ops_per_loop"] < 1).to_numpy()),
        ("ns_total must be > 0", (out["ns_total"] <= 0).to_numpy()),
        ("ns_per_cycle must be > 0", (out["ns_per_cycle"] <= 0).to_numpy()),
    ]
    for problem, bad in checks:
        if bad.any():
            i = first(bad)
            row = raw.iloc[i]
            detail = ", ".join(f"{c}={row[c]}" for c in ("phase", "case", "variant"))
            raise RawDataError(path, f"line {lines[i]}: {problem} ({detail})")
    expected = out["ns_total"] / (out["loops"] * out["ops_per_loop"])
    off = ~np.isclose(out["ns_per_cycle"], expected, rtol=schema.NS_PER_CYCLE_RTOL, atol=0)
    if off.any():
        raise RawDataError(
            path,
            f"line {line_of(np.asarray(off))}: ns_per_cycle != ns_total / (loops * ops_per_loop)",
        )
    key = ["phase", "process", "case", "pool", "variant", "sample"]
    dup = out.duplicated(key, keep="first").to_numpy()
    if dup.any():
        raise RawDataError(path, f"line {line_of(dup)}: duplicate sample {key}")
    return out[list(schema.SAMPLE_COLUMNS)]
