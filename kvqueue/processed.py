"""Store and cache the processed tables: ``data/processed/*.csv`` plus ``manifest.json``.

:func:`build` reads the raw runs (:mod:`kvqueue.rawdata`), has :mod:`kvqueue.analysis`
compute the tables and writes one CSV per table of
:data:`kvqueue.schema.PROCESSED_TABLES`. The output is byte-identical on a rerun over
the same raw data: rows are sorted, columns fixed, floats written with one format, and
nothing time-dependent is recorded. :func:`ensure` reuses the files while the manifest
(settings, the sha256 of every raw file read and of the code that computes the
numbers) still matches. The report (notebook, tables, figures, writeup) reads only these
tables, through :class:`Processed`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from kvqueue import analysis, params, rawdata, schema, stats
from kvqueue.params import ReportSettings

MANIFEST = "manifest.json"
_MANIFEST_FORMAT = 2
#: The modules whose code determines the processed numbers; a change to any of them
#: invalidates the manifest. Module objects, not file names, so that a module that is
#: renamed or split must be listed again here (``tests/test_processed.py`` checks that
#: every ``kvqueue`` module imported by :mod:`kvqueue.analysis` is listed).
CODE_MODULES: tuple[ModuleType, ...] = (analysis, params, rawdata, schema, stats)
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
    manifest: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """Return a table by its file stem (``"summary"``, ...)."""
        return getattr(self, name)

    def headline_runs(self) -> pd.DataFrame:
        """The rows of ``runs`` that are headline runs (newest complete per host x python)."""
        return self.runs[self.runs["headline"].fillna(False)]

    def in_headline_runs(self, df: pd.DataFrame, phase: str) -> pd.DataFrame:
        """Rows of ``df`` (a table without a ``headline`` column) of ``phase`` in a
        headline run."""
        heads = self.headline_runs()[["host", "run_id"]]
        return df[df["phase"] == phase].merge(heads, on=["host", "run_id"])


# ---------------------------------------------------------------------------------------
# files


def fingerprint(raw_dir: Path | str) -> dict[str, str]:
    """sha256 of every raw file the analysis reads, keyed by path relative to ``raw_dir``."""
    root = Path(raw_dir)
    out = {}
    for run_dir in rawdata.run_dirs(root):
        for name in (rawdata.RUN_JSON, rawdata.SAMPLES_CSV):
            path = run_dir / name
            if path.is_file():
                out[path.relative_to(root).as_posix()] = hashlib.sha256(
                    path.read_bytes()
                ).hexdigest()
    return out


def code_hash() -> str:
    """sha256 over the source files of :data:`CODE_MODULES` and of this module."""
    digest = hashlib.sha256()
    for module in (*CODE_MODULES, _THIS_MODULE):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def _manifest(raw_dir: Path | str, settings: ReportSettings) -> dict[str, Any]:
    return {
        "format": _MANIFEST_FORMAT,
        "settings": settings.to_dict(),
        "code_sha256": code_hash(),
        "inputs": fingerprint(raw_dir),
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
        Analysis settings (defaults: :class:`kvqueue.params.ReportSettings`).

    Returns
    -------
    Processed

    Raises
    ------
    kvqueue.rawdata.RawDataError
        On the first missing or malformed raw file.
    """
    settings = settings or ReportSettings()
    raw = rawdata.read_raw(raw_dir)
    tables = analysis.analyze(raw, settings)
    data = Processed(settings, manifest=_manifest(raw_dir, settings), **tables)
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
