"""Counted runs (``counts.csv``) to figures per operation: instructions, misses, cycles.

A counts.csv holds raw cachegrind totals, one row per counted process (see
:mod:`kvqueue.measure.cachegrind`): per pool and variant a ``zero`` run (``case`` ``*``: every
case warmed; runs of the first layout had one zero run per case) and one ``target`` run
per case, and one ``zero2`` (the first zero run again). Per operation:

- instructions = (target Ir − zero Ir) / (loops × ops per loop);
- the *spread* = |zero2 Ir − zero Ir| / (loops × ops per loop): how far two identical
  runs disagree, in the same unit (the count's own resolution);
- with the cache simulation: L1 misses (I1mr + D1mr + D1mw), last-level misses
  (ILmr + DLmr + DLmw) and estimated cycles = L1 hits + 5 × LL hits + 35 × RAM
  accesses (iai-callgrind's model; :data:`kvqueue.measure.cachegrind.CYCLE_WEIGHTS`).

:func:`per_op` is pure Python (``make quick`` and ``make check-queue`` use it without
pandas); the readers below build the report's tables from the counts runs on disk.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kvqueue import schema
from kvqueue.rawdata import host_keys, integrity
from kvqueue.sources.versions import step_range

#: Weights of L1 hits, last-level hits and RAM accesses in estimated cycles.
CYCLE_WEIGHTS = (1, 5, 35)
_L1 = ("I1mr", "D1mr", "D1mw")
_LL = ("ILmr", "DLmr", "DLmw")
_REFS = ("Ir", "Dr", "Dw")


@dataclass(frozen=True)
class CellCount:
    """One variant's counts per operation in one (case, pool) cell."""

    case: str
    pool: int
    label: str
    instructions: float
    spread: float
    l1_misses: float | None
    ll_misses: float | None
    est_cycles: float | None


def _number(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(value)


def _est_cycles(totals: Mapping[str, int]) -> int:
    refs = sum(totals[e] for e in _REFS)
    l1 = sum(totals[e] for e in _L1)
    ll = sum(totals[e] for e in _LL)
    w1, w2, w3 = CYCLE_WEIGHTS
    return w1 * (refs - l1) + w2 * (l1 - ll) + w3 * ll


def per_op(rows: Iterable[Mapping[str, Any]]) -> list[CellCount]:
    """Per-operation counts of every target row, against its cell's zero runs.

    Raises
    ------
    ValueError
        A cell has a target but no ``zero`` run, or a target with no loops.
    """
    zeros: dict[tuple[str, int, str], dict[str, Mapping[str, Any]]] = {}
    targets: list[Mapping[str, Any]] = []
    for row in rows:
        key = (str(row["case"]), int(row["pool"]), str(row["label"]))
        if row["run"] == "target":
            targets.append(row)
        else:
            zeros.setdefault(key, {})[str(row["run"])] = row
    out = []
    for row in targets:
        key = (str(row["case"]), int(row["pool"]), str(row["label"]))
        # A zero run warmed one case (``case`` named) or every case (``*``).
        found = zeros.get(key) or zeros.get(("*", key[1], key[2]), {})
        zero = found.get("zero")
        if zero is None:
            raise ValueError(f"no zero run for {key[2]} {key[0]}/{key[1]}")
        ops = int(row["loops"]) * int(row["per_loop"])
        if ops <= 0:
            raise ValueError(f"target {row['label']} {key[0]}/{key[1]} has no loops")
        zero2 = found.get("zero2")
        spread = (
            abs(int(zero2["Ir"]) - int(zero["Ir"])) / ops if zero2 is not None else float("nan")
        )
        cached = all(_number(row.get(e)) is not None for e in (*_L1, *_LL, "Dr", "Dw"))
        if cached:
            t = {e: int(row[e]) for e in (*_REFS, *_L1, *_LL)}
            z = {e: int(zero[e]) for e in (*_REFS, *_L1, *_LL)}
            l1 = (sum(t[e] for e in _L1) - sum(z[e] for e in _L1)) / ops
            ll = (sum(t[e] for e in _LL) - sum(z[e] for e in _LL)) / ops
            cycles: float | None = (_est_cycles(t) - _est_cycles(z)) / ops
        else:
            l1 = ll = cycles = None
        out.append(
            CellCount(
                case=key[0],
                pool=key[1],
                label=str(row["label"]),
                instructions=(int(row["Ir"]) - int(zero["Ir"])) / ops,
                spread=spread,
                l1_misses=l1,
                ll_misses=ll,
                est_cycles=cycles,
            )
        )
    return out


def _resolution(counts: Sequence[CellCount]) -> float:
    """The largest measured spread of two identical zero runs, per operation (nan if the
    run made none)."""
    spreads = [c.spread for c in counts if c.spread == c.spread]
    return max(spreads) if spreads else float("nan")


def reduction_pct(candidate: float, baseline: float) -> float:
    """Reduction of ``candidate`` against ``baseline`` in percent (positive = fewer)."""
    return 100.0 * (1.0 - candidate / baseline)


def table(counts: Sequence[CellCount], pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Rows (case, pool, candidate, baseline, their instructions, the reduction %)."""
    by = {(c.case, c.pool, c.label): c for c in counts}
    cells = sorted({(c.case, c.pool) for c in counts}, key=lambda k: (k[1], k[0]))
    out = []
    for cand, base in pairs:
        for case, pool in cells:
            a, b = by.get((case, pool, cand)), by.get((case, pool, base))
            if a is None or b is None:
                continue
            out.append(
                {
                    "case": case,
                    "pool": pool,
                    "candidate": cand,
                    "baseline": base,
                    "candidate_instructions": a.instructions,
                    "baseline_instructions": b.instructions,
                    "reduction_pct": reduction_pct(a.instructions, b.instructions),
                    "spread": _resolution(counts),
                }
            )
    return out


# ------------------------------------------------------------------ counts runs on disk


@dataclass(frozen=True)
class CountRun:
    """One counts run folder: its ``run.json`` and its ``counts.csv`` rows; ``host``: its
    host key (the label, or ``label#n`` on the label's *n*-th CPU,
    :mod:`kvqueue.rawdata.host_keys`)."""

    path: Path
    meta: dict[str, Any]
    rows: list[dict[str, str]]
    host: str = ""
    #: ``where.csv``'s rows (none before the file existed, or when it was not written).
    where: list[dict[str, str]] = dataclasses.field(default_factory=list)

    @property
    def host_key(self) -> str:
        """The host the tables name: :attr:`host`, else the label of ``run.json``."""
        return self.host or str(self.meta["host"])

    @property
    def interpreter(self) -> str:
        """The counted interpreter, e.g. ``CPython 3.12.1`` (as the time tables say)."""
        py = self.meta["python"]
        return f"{py.get('implementation', 'Python')} {py.get('version', '?')}"


#: The part of a stack variant's source that swaps one component into its release.
SWAP_MARKS = ("+queue=", "+pool=")


def case_blocks(case: str) -> int | None:
    """Blocks one operation of a case allocates and frees, where that is fixed: N of the
    manager's ``sweepN`` and of the pool's ``loopN`` (None for any other case)."""
    return schema.case_size(case, "sweep") or schema.case_size(case, "loop")


def swap_shares(rows: Sequence[Mapping[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """What each component swap explains of each whole candidate's saving, per cell.

    A *swap* is a candidate whose label is the baseline's with ``+queue=`` or ``+pool=``
    after it (``manager:vllm==0.9.2+queue=vllm==0.10.0``): the baseline's stack with one
    part changed. Its saving over the baseline, divided by the saving of the whole
    candidate the part came from (``manager:vllm==0.10.0``), is the share of that saving
    the part explains. A swap is set beside no other candidate (0.10.0's queue explains
    nothing of what 0.10.2 saves: beside it, the "share" read 112.5 % and -4.0 %).

    Parameters
    ----------
    rows
        :func:`table`'s rows (case, pool, candidate, baseline, candidate_instructions,
        baseline_instructions).
    baseline
        The baseline's label.

    Returns
    -------
    list of dict
        Per case × pool × swap × whole candidate: ``saving_per_block`` of each
        (instructions, None when the case has no fixed block count) and ``share`` (the
        swap's saving over the whole's; None when the whole saves nothing).
    """
    swaps = [
        r for r in rows if any(str(r["candidate"]).startswith(baseline + m) for m in SWAP_MARKS)
    ]
    wholes = [r for r in rows if r not in swaps]
    out = []
    for swap in swaps:
        source = _swapped_source(str(swap["candidate"]), baseline)
        for whole in wholes:
            if (whole["case"], whole["pool"]) != (swap["case"], swap["pool"]):
                continue
            if str(whole["candidate"]).split(":", 1)[-1] != source:
                continue
            base = float(swap["baseline_instructions"])
            part = base - float(swap["candidate_instructions"])
            full = base - float(whole["candidate_instructions"])
            blocks = case_blocks(str(swap["case"]))
            out.append(
                {
                    "case": swap["case"],
                    "pool": swap["pool"],
                    "swap": swap["candidate"],
                    "whole": whole["candidate"],
                    "swap_saving_per_block": None if blocks is None else part / blocks,
                    "whole_saving_per_block": None if blocks is None else full / blocks,
                    "share": part / full if full else None,
                }
            )
    return out


def _swapped_source(swap: str, baseline: str) -> str:
    """The source of the part a swap label puts into the baseline's stack
    (``manager:vllm==0.9.2+queue=vllm==0.10.0`` -> ``vllm==0.10.0``)."""
    rest = swap[len(baseline) :]
    for mark in SWAP_MARKS:
        if rest.startswith(mark):
            return rest[len(mark) :]
    return rest


def read_count_run(
    run_dir: Path, meta: dict[str, Any], recorded: Mapping[str, bytes] | None = None
) -> CountRun | str:
    """A complete, sealed counts run, or the one-line reason it is left out.

    ``recorded``: the run's recorded files as the raw reader read and checked them
    (:attr:`kvqueue.rawdata.raw_reader.Run.recorded`); ``counts.csv`` is parsed from
    these, never read or hashed again. Without it (a run looked at alone) the recorded
    files are read and checked here by the same rule
    (:func:`kvqueue.rawdata.integrity.read_recorded_files`).
    """
    if meta.get("status") != "complete":
        return f"status {meta.get('status')!r}, not complete"
    sealed = (meta.get(schema.FILES_KEY) or {}).get(schema.COUNTS_CSV)
    missing = "counts.csv missing or not recorded in run.json"
    if recorded is None:
        if sealed is None or not (run_dir / schema.COUNTS_CSV).is_file():
            return missing
        recorded, problem = integrity.read_recorded_files(run_dir, meta)
        if problem is not None:
            return problem
    elif sealed is None or schema.COUNTS_CSV not in recorded:
        return missing
    data = recorded[schema.COUNTS_CSV]
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    if not rows or tuple(rows[0]) != schema.COUNT_COLUMNS:
        return f"counts.csv columns are not {', '.join(schema.COUNT_COLUMNS)}"
    where: list[dict[str, str]] = []
    if schema.WHERE_CSV in recorded:
        reader = csv.DictReader(io.StringIO(recorded[schema.WHERE_CSV].decode("utf-8")))
        if tuple(reader.fieldnames or ()) != schema.WHERE_COLUMNS:
            return f"where.csv columns are not {', '.join(schema.WHERE_COLUMNS)}"
        where = list(reader)
    return CountRun(run_dir, meta, rows, where=where)


def where_frame(runs: Sequence[CountRun], run_ids: Iterable[str]) -> pd.DataFrame:
    """The ``count_where`` rows of the runs named (where.csv, per operation): one row per
    run × cell × variant × C function, part or line (:data:`kvqueue.schema.WHERE_COLUMNS`;
    ``per_op`` = value / ops for C functions and lines)."""
    wanted = set(run_ids)
    out = []
    for run in runs:
        if str(run.meta["run_id"]) not in wanted:
            continue
        for r in run.where:
            ops, value = int(r["ops"]), int(r["value"])
            out.append(
                {
                    "host": run.host_key,
                    "interpreter": run.interpreter,
                    "run_id": run.meta["run_id"],
                    "case": r["case"],
                    "pool": int(r["pool"]),
                    "label": r["label"],
                    "kind": r["kind"],
                    "part": r["part"],
                    "name": r["name"],
                    "line": int(r["line"]) if r["line"] else None,
                    "ops": ops,
                    "value": value,
                    "per_op": value / ops if r["kind"] != schema.WHERE_PART else float("nan"),
                    "detail": r["detail"],
                }
            )
    return pd.DataFrame(out, columns=list(schema.PROCESSED_TABLES["count_where"]))


def counts_frame(runs: Sequence[CountRun]) -> pd.DataFrame:
    """One row per run × cell × variant: instructions (and misses, cycles) per op."""
    out = []
    for run in runs:
        for c in per_op(run.rows):
            out.append(
                {
                    "host": run.host_key,
                    "interpreter": run.interpreter,
                    "run_id": run.meta["run_id"],
                    "question": run.meta.get(schema.QUESTION_KEY, "ab"),
                    "started_at": run.meta.get("started_at"),
                    "case": c.case,
                    "pool": c.pool,
                    "label": c.label,
                    "instructions": c.instructions,
                    "spread": c.spread,
                    "l1_misses": c.l1_misses,
                    "ll_misses": c.ll_misses,
                    "est_cycles": c.est_cycles,
                }
            )
    return pd.DataFrame(out, columns=COUNT_FRAME_COLUMNS)


#: Columns of :func:`counts_frame`.
COUNT_FRAME_COLUMNS = (
    "host",
    "interpreter",
    "run_id",
    "question",
    "started_at",
    "case",
    "pool",
    "label",
    "instructions",
    "spread",
    "l1_misses",
    "ll_misses",
    "est_cycles",
)


def newest_ab(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the newest A/B counts run per host × interpreter."""
    ab = frame[frame["question"] == "ab"]
    if ab.empty:
        return ab
    newest = ab.groupby(["host", "interpreter"])["started_at"].transform("max")
    return ab[ab["started_at"] == newest]


def pair_reductions(frame: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Instruction reduction (%) of each candidate vs baseline per host × interpreter × cell."""
    rows = []
    keys = ["host", "interpreter", "run_id", "case", "pool"]
    for key, grp in frame.groupby(keys, sort=False):
        by = dict(zip(grp["label"], grp["instructions"], strict=True))
        est = dict(zip(grp["label"], grp["est_cycles"], strict=True))
        for cand, base in pairs:
            if cand in by and base in by:
                e_c, e_b = est.get(cand), est.get(base)
                cycles = (
                    reduction_pct(e_c, e_b)
                    if e_c is not None and e_b is not None and e_c == e_c and e_b == e_b
                    else float("nan")
                )
                rows.append(
                    {
                        **dict(zip(keys, key, strict=True)),
                        "candidate": cand,
                        "baseline": base,
                        "candidate_instructions": by[cand],
                        "baseline_instructions": by[base],
                        "instr_reduction": reduction_pct(by[cand], by[base]) / 100.0,
                        "cycles_reduction": cycles / 100.0,
                    }
                )
    return pd.DataFrame(rows)


def history_steps(
    frame: pd.DataFrame, versions: Mapping[str, Sequence[Mapping[str, Any]]]
) -> pd.DataFrame:
    """Each history counts run's steps: newer vs its predecessor, per cell (instructions),
    with the step's ``release_range``, the label the timed history gives the same step.

    ``versions``: run_id -> the run's versions (``run.json``'s history entries), oldest
    first.
    """
    rows = []
    for run_id, found in versions.items():
        sub = frame[frame["run_id"] == run_id]
        pairs = [(b["label"], a["label"]) for a, b in itertools.pairwise(found)]
        if not sub.empty and pairs:
            ranges = {
                (b["label"], a["label"]): step_range(a, b) for a, b in itertools.pairwise(found)
            }
            got = pair_reductions(sub, pairs)
            if not got.empty:
                got = got.assign(
                    release_range=[
                        ranges[(c, b)]
                        for c, b in zip(got["candidate"], got["baseline"], strict=True)
                    ]
                )
            rows.append(got)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def analyze(
    included: Iterable[Any],
    pairs: Sequence[tuple[str, str]],
    keys: host_keys.HostKeys | None = None,
) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """The processed ``counts``, ``count_pairs``, ``count_steps`` and ``count_where``
    tables of the counts runs the raw-data reader included
    (:class:`kvqueue.rawdata.raw_reader.Run`: ``path``, ``meta``, ``host``, ``run_id``),
    and ``{"<host>/<run_id>": why}`` for each run left out here.

    ``pairs``: the A/B pairs compared (the report's configured pairs); each A/B counts
    run also compares every variant with its baseline. ``count_steps`` holds the newest
    history counts run per host × interpreter × newest version. A host is one CPU under
    one label: ``keys`` (:func:`kvqueue.rawdata.host_keys.host_cpus` of every run; without
    it, the label) gives each run's host key, so a run on one CPU never replaces a run on
    another.
    """
    runs: list[CountRun] = []
    left: dict[str, str] = {}
    for run in included:
        # The bytes the raw reader checked (a Run made by hand carries none: read them).
        got = read_count_run(run.path, run.meta, getattr(run, "recorded", None) or None)
        if isinstance(got, str):
            left[f"{run.host}/{run.run_id}"] = got
        else:
            key = host_keys.host_key(keys, str(run.host), str(run.run_id))
            runs.append(dataclasses.replace(got, host=key))
    frame = counts_frame(runs)
    ab = newest_ab(frame)
    wanted = list(pairs)
    for run in runs:
        if run.meta.get(schema.QUESTION_KEY, "ab") == "ab":
            labels = [v["label"] for v in run.meta["variants"]]
            wanted += [(c, labels[0]) for c in labels[1:] if (c, labels[0]) not in wanted]
    pair_rows = pair_reductions(ab, wanted)
    # The newest history counts run per host × interpreter × newest version: an older one
    # is replaced (the ledger calls it superseded), as a newer timed history replaces one.
    versions: dict[str, list[Mapping[str, Any]]] = {}
    newest: dict[tuple[str, str, str], str] = {}
    for run in sorted(runs, key=lambda r: str(r.meta["run_id"])):
        if run.meta.get(schema.QUESTION_KEY) == "history":
            found = list(reversed((run.meta.get(schema.HISTORY_KEY) or {})["versions"]))
            key = (run.host_key, run.interpreter, found[-1]["label"] if found else "")
            versions.pop(newest.get(key, ""), None)
            newest[key] = str(run.meta["run_id"])
            versions[newest[key]] = found
    steps = history_steps(frame, versions)
    if not steps.empty:
        steps = steps.assign(
            from_version=steps["baseline"],
            to_version=steps["candidate"],
            instr_change=-steps["instr_reduction"],
        )
    tables = {
        "counts": frame,
        "count_pairs": pair_rows,
        "count_steps": steps,
        # Where the instructions went, of the runs whose pairs the report compares.
        "count_where": where_frame(runs, set(ab["run_id"]) if len(ab) else ()),
    }
    out = {}
    for name, df in tables.items():
        spec = schema.PROCESSED_TABLES[name]
        cols = list(spec)
        df = df.reindex(columns=cols) if not df.empty else pd.DataFrame(columns=cols)
        out[name] = df.sort_values(
            [
                c
                for c in (
                    "host",
                    "interpreter",
                    "run_id",
                    "case",
                    "pool",
                    "label",
                    "kind",
                    "part",
                    "name",
                    "line",
                )
                if c in cols
            ],
            kind="stable",
        ).reset_index(drop=True)
    return out, left
