"""Parse and check one ``samples.csv`` (:func:`read_samples`), and the one error of reading
raw data (:class:`RawDataError`, one line naming the file).

Used by :mod:`kvqueue.rawdata.raw_reader`, which re-exports both.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvqueue import schema

_INT_COLUMNS = (
    "process",
    "pool",
    "sample",
    "order_position",
    "loops",
    "ops_per_loop",
    "ns_total",
    "epoch",
)
_FLOAT_COLUMNS = ("ns_per_cycle",)
_STR_COLUMNS = ("phase", "case", "variant")


class RawDataError(ValueError):
    """A raw file is missing or malformed; ``str()`` is one line naming the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.path}: {self.problem}")


def require(cond: bool, path: Path, problem: str) -> None:
    if not cond:
        raise RawDataError(path, problem)


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


#: A column of plain whole numbers / of numbers without surrounding white space, as the
#: runner writes them: then the column is converted in one call. Stripping and checking
#: every value one by one was 7 of the 12 s of reading the committed runs' samples.
_PLAIN_INTS = re.compile(r"(?:-?[0-9]+\n)*")
_NO_SPACE = re.compile(r"[^\s]*")


def _plain_column(text: pd.Series, whole: bool) -> pd.Series | np.ndarray | None:
    """``text`` converted at once when every value is plain (see :data:`_PLAIN_INTS`),
    with the values the value-by-value path gives; ``None`` sends the column down that
    path, which names a bad value's line."""
    joined = "\n".join(text.tolist()) + "\n"
    if whole:
        # int() of a plain decimal is exact, as to_numeric's int64 is.
        return np.array(text.tolist(), dtype=np.int64) if _PLAIN_INTS.fullmatch(joined) else None
    if not _NO_SPACE.fullmatch(joined.replace("\n", "")):
        return None
    values = pd.to_numeric(text, errors="coerce")
    finite = np.isfinite(values.to_numpy(dtype=float))
    return values if finite.all() and not values.isna().any() else None


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
    require(path.is_file(), path, "missing (a complete run needs its samples)")
    header, rows, lines = _read_csv_rows(path)
    expected = schema.sample_columns(int(meta.get("schema_version", schema.SCHEMA_VERSION)))
    missing = [c for c in expected if c not in header]
    extra = [c for c in header if c not in expected]
    require(
        not missing and not extra,
        path,
        f"header mismatch: missing {missing or 'none'}, unexpected {extra or 'none'}",
    )
    # Everything as text first, so a bad value can be reported with its line.
    raw = pd.DataFrame(rows, columns=header, dtype=str)
    if "epoch" not in header:  # before layout epochs: one layout per process
        raw["epoch"] = "0"
    require(len(raw) > 0, path, "no samples")

    def first(mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[0])

    def line_of(mask: np.ndarray) -> int:
        return lines[first(mask)]

    out = pd.DataFrame(index=raw.index)
    for col in _INT_COLUMNS + _FLOAT_COLUMNS:
        fast = _plain_column(raw[col], col in _INT_COLUMNS)
        if fast is not None:
            out[col] = fast
            continue
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
        (
            "case is no subject's case (kvqueue.schema.is_case)",
            ~out["case"].map(lambda c: schema.subject_of_case(c) is not None).to_numpy(bool),
        ),
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
        ("epoch must be >= 0", (out["epoch"] < 0).to_numpy()),
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
