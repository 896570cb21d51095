"""Where the cost went, measured: the figures of :mod:`kvqueue.stats.cost_moves` for chosen
(label, case, pool) cells of a count.

Three sources, all exact in their unit:

- **C functions** (:class:`FunctionTotals`): cachegrind's per-function totals of the
  count's own zero and target runs (:func:`kvqueue.measure.cachegrind.count`'s
  ``on_functions``): nothing more is run;
- **lines** (:func:`line_profiles`): one process per cell, without valgrind, that traces
  the target loops in bytecodes per line (:mod:`kvqueue.measure.profiled_worker`, mode
  ``lines``);
- **Python functions in instructions** (CPython >= 3.12, :func:`where_cells` with
  ``trampoline``): one callgrind process per cell with the perf trampoline
  (:func:`kvqueue.measure.function_profile.profile_cells`); CPython 3.11 has no
  trampoline, so its Python functions are read in bytecodes from the lines.

Each is one extra process per variant × cell: ``make regress`` and ``make quick`` run
them for the cells they show, a counts run (``make bench METRIC=instructions``) the lines
for every cell (:data:`kvqueue.schema.WHERE_CSV`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kvqueue import schema
from kvqueue.errors import BenchError
from kvqueue.measure import cachegrind, cost_files, function_profile
from kvqueue.stats import cost_moves, count_figures

Cell = tuple[str, str, int]
"""A profiled cell: (label, case, pool)."""


@dataclass
class FunctionTotals:
    """cachegrind's instructions per C function of every run of a count, kept as the
    count goes (pass the instance as ``on_functions``)."""

    runs: dict[tuple[str, str, int, str], dict[str, int]] = field(default_factory=dict)
    ops: dict[tuple[str, str, int], int] = field(default_factory=dict)

    def __call__(self, row: Mapping[str, Any], functions: dict[str, int]) -> None:
        """Keep one run's totals (``row``: its counts.csv row)."""
        key = (str(row["label"]), str(row["case"]), int(row["pool"]), str(row["run"]))
        self.runs[key] = functions
        if row["run"] == "target":
            cell = (str(row["label"]), str(row["case"]), int(row["pool"]))
            self.ops[cell] = int(row["loops"]) * int(row["per_loop"])

    def raw(self, cell: Cell) -> tuple[dict[str, int], dict[str, int], int] | None:
        """A target's totals, its zero run's and its operations (None: not counted)."""
        label, case, pool = cell
        target = self.runs.get((label, case, pool, "target"))
        zero = self.runs.get((label, case, pool, "zero")) or self.runs.get(
            (label, cachegrind.ALL_CASES, pool, "zero")
        )
        if target is None or zero is None or cell not in self.ops:
            return None
        return target, zero, self.ops[cell]

    def per_op(self, cell: Cell) -> dict[str, float]:
        """Each C function's instructions per operation in ``cell`` ({} if not counted)."""
        found = self.raw(cell)
        return {} if found is None else cost_files.per_op_functions(*found)


def line_profiles(
    python: str,
    base_spec: dict[str, Any],
    cells: Iterable[Cell],
    *,
    jobs: int | None = None,
    progress: TextIO | None = None,
) -> dict[Cell, dict[str, Any]]:
    """The bytecode profile of each cell: one process each (mode ``lines`` of
    :mod:`kvqueue.measure.profiled_worker`), without valgrind.

    Returns
    -------
    dict
        Cell -> the worker's record: ``ops``, ``parts`` (texts included), ``lines``
        (``[part, qualname, line, bytecodes]``) and ``specialised``.

    Raises
    ------
    BenchError
        A process failed.
    """
    out = progress or sys.stderr
    todo = list(cells)
    binary = cachegrind.interpreter_binary(python)
    subject = base_spec.get("subject", "queue")
    found: dict[Cell, dict[str, Any]] = {}

    def launch(i: int, cell: Cell, root: Path) -> subprocess.Popen:
        label, case, pool = cell
        loops = cachegrind.target_loops(case, pool, subject=subject)
        spec = cachegrind.job_spec(base_spec, cachegrind.Job(case, pool, "target", label, loops))
        spec["profile"] = {"mode": "lines", "out": str(root / "out" / f"lines.{i}.json")}
        return cachegrind.start(
            None, binary, spec, root / "out" / f"lines.{i}", root, module=function_profile.WORKER
        )

    def finish(cell: Cell, root: Path) -> None:
        path = root / "out" / f"lines.{todo.index(cell)}.json"
        record = json.loads(path.read_text(encoding="utf-8"))
        for part in record["parts"]:
            # Our own queue was read from the package's copy in ``root``.
            part["where"] = cachegrind.project_path(part["where"], root)
        found[cell] = record
        path.unlink()
        print(
            f"lines {len(found)}/{len(todo)}: {cell[0]} {cell[1]}/{cell[2]} (bytecodes, traced)",
            file=out,
            flush=True,
        )

    cachegrind.run_processes(
        todo,
        launch,
        finish,
        what=lambda c: f"bytecode profile ({c[0]} {c[1]}/{c[2]})",
        jobs=jobs,
    )
    return found


def variant_where(
    instructions: float,
    c: Mapping[str, float],
    lines: Mapping[str, Any] | None,
    profile: function_profile.Profile | None = None,
) -> cost_moves.VariantWhere:
    """One variant's figures in one cell, from the count, its bytecode profile (None:
    not made) and its trampoline profile (None: not made)."""
    python = (
        {}
        if profile is None
        else {k: (v.inclusive, v.exclusive, v.calls) for k, v in profile.by_part().items()}
    )
    if lines is None:
        return cost_moves.VariantWhere(instructions, dict(c), python=python)
    ops = int(lines["ops"])
    return cost_moves.VariantWhere(
        instructions=instructions,
        c=dict(c),
        lines={(p, q, int(ln)): n / ops for p, q, ln, n in lines["lines"]},
        specialised={(p, int(ln)): tuple(names) for p, ln, names in lines["specialised"]},
        parts=[
            cost_moves.Part(p["part"], int(p["first_line"]), p.get("text")) for p in lines["parts"]
        ],
        python=python,
    )


def where_cells(
    python: str,
    base_spec: dict[str, Any],
    cells: Sequence[Cell],
    instructions: Mapping[Cell, float],
    functions: FunctionTotals,
    *,
    valgrind: cachegrind.Valgrind,
    trampoline: bool | None = None,
    progress: TextIO | None = None,
) -> dict[Cell, cost_moves.VariantWhere]:
    """Every figure of each cell: its C functions (from the count), its lines (one
    process each) and, where the interpreter has the perf trampoline, its Python
    functions in instructions (one callgrind process each).

    Parameters
    ----------
    python
        The measured interpreter.
    base_spec
        The count's worker spec.
    cells
        The cells.
    instructions
        Each cell's instructions per operation (the count).
    functions
        The count's per-function totals.
    valgrind
        The count's valgrind.
    trampoline
        Profile the Python functions in instructions (default: when the interpreter can,
        :func:`kvqueue.measure.function_profile.trampoline_available`).
    progress
        Where a line per process goes (default: stderr).
    """
    cells = list(dict.fromkeys(cells))
    if not cells:
        return {}
    lines = line_profiles(python, base_spec, cells, progress=progress)
    if trampoline is None:
        trampoline = function_profile.trampoline_available(python)
    profiles: dict[Cell, function_profile.Profile] = {}
    if trampoline:
        try:
            profiles = function_profile.profile_cells(
                python, base_spec, cells, valgrind=valgrind, progress=progress
            )
        except BenchError as exc:
            # The C functions and lines stand without it; the functions read in bytecodes.
            print(
                f"Python functions not profiled in instructions: {exc}",
                file=progress or sys.stderr,
            )
    return {
        cell: variant_where(
            instructions.get(cell, float("nan")),
            functions.per_op(cell),
            lines.get(cell),
            profiles.get(cell),
        )
        for cell in cells
    }


def cell_moves(
    python: str,
    base_spec: dict[str, Any],
    rows: Sequence[Mapping[str, Any]],
    functions: FunctionTotals,
    chosen: Sequence[tuple[str, int, str, str]],
    *,
    valgrind: cachegrind.Valgrind,
    trampoline: bool | None = None,
    progress: TextIO | None = None,
) -> list[cost_moves.CellMoves]:
    """Base against head in each chosen cell (``make regress``, ``make quick``).

    Parameters
    ----------
    python, base_spec, functions, valgrind, trampoline, progress
        As for :func:`where_cells`.
    rows
        The count's rows (cachegrind's).
    chosen
        ``(case, pool, base label, head label)`` per cell to compare.

    Returns
    -------
    list of CellMoves
        In the order chosen.
    """
    instructions = {(c.label, c.case, c.pool): c.instructions for c in count_figures.per_op(rows)}
    cells = [(label, case, pool) for case, pool, b, h in chosen for label in (b, h)]
    where = where_cells(
        python,
        base_spec,
        cells,
        instructions,
        functions,
        valgrind=valgrind,
        trampoline=trampoline,
        progress=progress,
    )
    return [
        cost_moves.compare(case, pool, where[(b, case, pool)], where[(h, case, pool)])
        for case, pool, b, h in chosen
    ]


# ------------------------------------------------------------------ where.csv


def where_rows(
    functions: FunctionTotals,
    lines: Mapping[Cell, Mapping[str, Any]],
    profiles: Mapping[Cell, function_profile.Profile] | None = None,
) -> list[dict[str, Any]]:
    """The rows of a counts run's :data:`kvqueue.schema.WHERE_CSV`: raw integers and no
    source text (module docstring of :mod:`kvqueue.schema`, ``WHERE_COLUMNS``).

    Per target run: each C function whose target − zero instructions reach
    :data:`kvqueue.schema.WHERE_MIN_PER_OP` per operation either way, and one row for
    the rest; per bytecode profile: its parts (where, first line, lines, sha256 of the
    text) and each line's bytecodes with its specialised instructions.
    """
    rows: list[dict[str, Any]] = []
    for cell in sorted(functions.ops):
        found = functions.raw(cell)
        if found is None:
            continue
        target, zero, ops = found
        label, case, pool = cell
        rest = 0
        for fn in sorted(set(target) | set(zero)):
            delta = target.get(fn, 0) - zero.get(fn, 0)
            if abs(delta) >= schema.WHERE_MIN_PER_OP * ops:
                rows.append(_row(case, pool, label, schema.WHERE_C, "", fn, "", ops, delta, ""))
            else:
                rest += delta
        rows.append(
            _row(case, pool, label, schema.WHERE_C, "", schema.WHERE_REST, "", ops, rest, "")
        )
    for (label, case, pool), record in sorted(lines.items()):
        ops = int(record["ops"])
        special = {(p, int(ln)): names for p, ln, names in record["specialised"]}
        for part in record["parts"]:
            text = part.get("text")
            digest = "" if text is None else schema.text_sha256(text)
            rows.append(
                _row(
                    case,
                    pool,
                    label,
                    schema.WHERE_PART,
                    part["part"],
                    part["where"],
                    part["first_line"],
                    ops,
                    part["lines"],
                    digest,
                )
            )
        for p, qualname, line, n in record["lines"]:
            names = " ".join(special.get((p, int(line)), ()))
            rows.append(
                _row(case, pool, label, schema.WHERE_LINE, p, qualname, line, ops, n, names)
            )
    for cell, profile in sorted((profiles or {}).items()):
        rows.extend(function_rows(cell, profile))
    return rows


#: The ``co_filename`` of code compiled from a string (dataclasses' generated methods).
_GENERATED_FILE = "<string>"
#: The stream's named calls (kept though outside the variant's code).
_CALLS = frozenset(f"Stream.{call}" for call in schema.MANAGER_CALLS)


def function_rows(cell: Cell, profile: function_profile.Profile) -> list[dict[str, Any]]:
    """:data:`kvqueue.schema.WHERE_FUNC` rows of one cell's trampoline profile: each
    function of the variant's code and each named stream call, raw over the loops, and
    one row summing the rest (the harness, the standard library)."""
    label, case, pool = cell
    ops = profile.ops
    rows, rest = [], 0.0
    for (file, qualname), cost in sorted(profile.python.items()):
        part = profile.part(file)
        if file == _GENERATED_FILE:
            # Methods dataclasses generate (KVCacheBlock.__eq__, which 0.9.x's queue
            # calls in remove): the release's code, though in no file of it. Left in the
            # rest, the layers showed 26,572 of the ~850,000 instructions per sweep100
            # that swapping 0.10.0's queue into 0.9.2 saves (CPython 3.12).
            part = schema.WHERE_GENERATED
        elif part == function_profile.OTHER_PART and qualname not in _CALLS:
            rest += cost.exclusive
            continue
        rows.append(
            _row(
                case,
                pool,
                label,
                schema.WHERE_FUNC,
                part,
                qualname,
                round(cost.calls * ops),
                ops,
                round(cost.exclusive * ops),
                str(round(cost.inclusive * ops)),
            )
        )
    rows.append(
        _row(
            case,
            pool,
            label,
            schema.WHERE_FUNC,
            "",
            schema.WHERE_REST,
            0,
            ops,
            round(rest * ops),
            "",
        )
    )
    return rows


def _row(
    case: str,
    pool: int,
    label: str,
    kind: str,
    part: str,
    name: str,
    line: int | str,
    ops: int,
    value: int,
    detail: str,
) -> dict[str, Any]:
    return dict(
        zip(
            schema.WHERE_COLUMNS,
            (case, pool, label, kind, part, name, line, ops, value, detail),
            strict=True,
        )
    )
