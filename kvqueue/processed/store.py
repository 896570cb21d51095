"""The processed tables on disk: ``data/processed/*.csv`` plus ``manifest.json``.

:class:`Processed` holds every table of one build (:data:`kvqueue.schema.PROCESSED_TABLES`);
:func:`write` stores them byte-identically on a rerun over the same raw data (rows sorted,
columns fixed, floats written with one format, nothing time-dependent), :func:`load` reads
them back. The report (notebook, tables, figures, writeups) reads only these tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.params.report_params import ReportSettings

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 3

TABLES = schema.PROCESSED_TABLES


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
    policy: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.policy.policy_analysis
    history: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.history.history_analysis
    history_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    ledger: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.rawdata.run_ledger
    counts: pd.DataFrame = field(default_factory=pd.DataFrame)  # kvqueue.stats.count_figures
    count_pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    count_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    count_where: pd.DataFrame = field(default_factory=pd.DataFrame)
    manifest: dict[str, Any] = field(default_factory=dict)
    #: The folder the tables were written to or read from (its ``cache/`` holds the
    #: report's figures: :mod:`kvqueue.report.build_cache`); None for tables made in memory.
    folder: Path | None = field(default=None, compare=False)

    def table(self, name: str) -> pd.DataFrame:
        """Return a table by its file stem (``"summary"``, ...)."""
        return getattr(self, name)

    def headline_runs(self) -> pd.DataFrame:
        """The rows of ``runs`` that are headline runs (see
        :func:`kvqueue.ab.ab_analysis.headline_runs`: newest included full-protocol run per
        host x python)."""
        return self.runs[self.runs["headline"].fillna(False)]

    def in_headline_runs(self, df: pd.DataFrame, phase: str) -> pd.DataFrame:
        """Rows of ``df`` (a table without a ``headline`` column) of ``phase`` in a
        headline run."""
        heads = self.headline_runs()[["host", "run_id"]]
        return df[df["phase"] == phase].merge(heads, on=["host", "run_id"])


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
    for name, columns in TABLES.items():
        df = pd.read_csv(
            folder / f"{name}.csv",
            dtype={c: t for c, t in columns.items()},
            keep_default_na=False,
            na_values=[""],
        )
        tables[name] = df[list(columns)]
    return Processed(
        ReportSettings.from_dict(manifest["settings"]), manifest=manifest, folder=folder, **tables
    )
