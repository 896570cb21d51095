"""Where the cost moved between two variants of one cell: per C function, per Python
function and per source line, base against head. Pure functions (no pandas), shared by
``make regress``, ``make quick METRIC=instructions`` and the report.

What one variant's loops of one (case, pool) cell spend (:class:`VariantWhere`):

- per C function of the interpreter, instructions per operation: cachegrind's
  per-function totals of the counted target run minus its zero run, over the
  operations (exact, the counts' own runs);
- per source line of the variant's own code, *bytecodes* per operation: one traced
  process (``sys.settrace`` with opcode events), exact in bytecodes, not in instructions;
  with the specialised instructions the adaptive interpreter ran there
  (``PRECALL_NO_KW_LIST_APPEND`` against ``PRECALL_NO_KW_BUILTIN_O``);
- per Python function, instructions per operation (inclusive, exclusive, calls) where
  the interpreter could run the perf trampoline under callgrind (CPython >= 3.12:
  :mod:`kvqueue.measure.function_profile`; higher than the counts, since with the
  trampoline Python-to-Python calls are not inlined); else the bytecodes of its lines.

:func:`compare` puts base and head side by side: the C functions that moved most
(|Δ|, Δ = head − base: + means head executes more), the Python functions likewise, and
the lines aligned by the unified diff of the two texts (:func:`align_lines`), so a
changed line shows its base and head counts beside its text.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: C functions and Python functions shown per cell, by |Δ|.
TOP = 8
#: Most aligned lines shown per cell (changed lines first kept).
MAX_LINES = 60
#: Δ per operation below which a C function, function or line did not move.
MOVED_MIN = 0.05
#: Unit of a Python function's figures: instructions (perf trampoline) or bytecodes.
INSTRUCTIONS, BYTECODES = "instructions", "bytecodes"
#: Tags of an aligned line: in both texts, only in base's, only in head's, text unknown.
SAME, REMOVED, ADDED, UNALIGNED = " ", "-", "+", "?"


@dataclass(frozen=True)
class Part:
    """One file (or class) of a variant's own code.

    Attributes
    ----------
    part
        Its name: a member path (``vllm/v1/core/block_pool.py``) or ``queue``.
    first_line
        The line of the file its text starts on.
    text
        Its text, or None when it is not known here (the report found no copy).
    """

    part: str
    first_line: int = 1
    text: str | None = None


@dataclass(frozen=True)
class VariantWhere:
    """Where one variant's loops of one cell spend their work, per operation.

    Attributes
    ----------
    instructions
        The loops' instructions per operation (the count).
    c
        C function -> instructions per operation.
    lines
        ``(part, qualname, line)`` -> bytecodes per operation.
    specialised
        ``(part, line)`` -> the specialised instructions run there.
    parts
        The variant's parts, with their texts where known.
    python
        ``(part, qualname)`` -> ``(inclusive, exclusive, calls)`` instructions and calls
        per operation (perf trampoline); empty when not profiled.
    """

    instructions: float
    c: Mapping[str, float] = field(default_factory=dict)
    lines: Mapping[tuple[str, str, int], float] = field(default_factory=dict)
    specialised: Mapping[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    parts: Sequence[Part] = ()
    python: Mapping[tuple[str, str], tuple[float, float, float]] = field(default_factory=dict)

    def text_of(self, part: str) -> Part | None:
        """The part named ``part``, if the variant has it."""
        return next((p for p in self.parts if p.part == part), None)


@dataclass(frozen=True)
class Move:
    """One C or Python function, base and head per operation (nan: not run)."""

    name: str
    base: float
    head: float

    @property
    def delta(self) -> float:
        """head − base (a side that did not run it counts 0)."""
        return _zero(self.head) - _zero(self.base)


@dataclass(frozen=True)
class LineRow:
    """One line of the aligned texts of a part.

    Attributes
    ----------
    tag
        :data:`SAME`, :data:`REMOVED`, :data:`ADDED` or :data:`UNALIGNED`.
    base_line, head_line
        The line's number in each file (None: not in that text).
    text
        The line's text, stripped ('' when unknown).
    base, head
        Bytecodes per operation (0: not executed; nan: not in that text).
    """

    part: str
    qualname: str
    tag: str
    base_line: int | None
    head_line: int | None
    text: str
    base: float
    head: float
    base_specialised: tuple[str, ...] = ()
    head_specialised: tuple[str, ...] = ()

    @property
    def delta(self) -> float:
        """head − base in bytecodes per operation."""
        return _zero(self.head) - _zero(self.base)

    @property
    def changed(self) -> bool:
        """Whether the line is in only one of the texts (a line of the diff)."""
        return self.tag in (REMOVED, ADDED)


@dataclass(frozen=True)
class CellMoves:
    """Base against head in one cell: the figures :mod:`kvqueue.ab.where_text` shows."""

    case: str
    pool: int
    base_instructions: float
    head_instructions: float
    c: tuple[Move, ...]
    c_rest: float
    c_rest_count: int
    functions: tuple[Move, ...]
    function_unit: str
    lines: tuple[LineRow, ...]
    lines_left_out: int
    #: Lines of the diff that neither variant ran in these loops (not shown).
    diff_not_run: int = 0
    #: Parts whose lines could not be aligned (a text unknown): shown by number only.
    unaligned: tuple[str, ...] = ()

    @property
    def delta(self) -> float:
        """head − base instructions per operation."""
        return self.head_instructions - self.base_instructions


def _zero(x: float) -> float:
    return 0.0 if x != x else x


def top_moves(
    base: Mapping[str, float], head: Mapping[str, float], top: int = TOP
) -> tuple[list[Move], float, int]:
    """The ``top`` names whose values moved most (|head − base|, ties by name), and the
    summed Δ and number of the others that moved at all.

    A name only one side has is nan on the other (shown as not run, counted as 0).
    """
    names = set(base) | set(head)
    moves = [Move(n, base.get(n, math.nan), head.get(n, math.nan)) for n in names]
    moves = [m for m in moves if abs(m.delta) > 0]
    moves.sort(key=lambda m: (-abs(m.delta), m.name))
    shown = [m for m in moves[:top] if abs(m.delta) >= MOVED_MIN]
    rest = moves[len(shown) :]
    return shown, sum(m.delta for m in rest), len(rest)


def _line_maps(
    where: VariantWhere, part: str
) -> tuple[dict[int, float], dict[int, str], dict[int, tuple[str, ...]]]:
    counts: dict[int, float] = {}
    names: dict[int, str] = {}
    for (p, qualname, line), value in where.lines.items():
        if p == part:
            counts[line] = counts.get(line, 0.0) + value
            names.setdefault(line, qualname)
    special = {line: tuple(v) for (p, line), v in where.specialised.items() if p == part}
    return counts, names, special


def align_lines(base: VariantWhere, head: VariantWhere) -> tuple[list[LineRow], list[str]]:
    """The lines of every part of base and head, aligned by the diff of their texts.

    Lines in both texts (``SAME``) are kept where either side executed them; lines of
    the diff (``REMOVED``: base only, ``ADDED``: head only) always. A part whose text one
    side lacks is listed by line number, unaligned.

    Returns
    -------
    (list of LineRow, list of str)
        The rows, in part and file order, and the parts that could not be aligned.
    """
    rows: list[LineRow] = []
    unaligned: list[str] = []
    names = list(dict.fromkeys([p.part for p in base.parts] + [p.part for p in head.parts]))
    executed = {p for p, _q, _l in [*base.lines, *head.lines]}
    for part in names:
        b_part, h_part = base.text_of(part), head.text_of(part)
        b_counts, b_names, b_spec = _line_maps(base, part)
        h_counts, h_names, h_spec = _line_maps(head, part)
        if b_part is None or h_part is None or b_part.text is None or h_part.text is None:
            if part in executed:
                unaligned.append(part)
                rows += _unaligned_rows(
                    part, (b_counts, b_names, b_spec), (h_counts, h_names, h_spec)
                )
            continue
        b_text, h_text = b_part.text.splitlines(), h_part.text.splitlines()
        b0, h0 = b_part.first_line, h_part.first_line
        matcher = difflib.SequenceMatcher(None, b_text, h_text, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    bl, hl = b0 + i, h0 + j
                    if bl in b_counts or hl in h_counts:
                        rows.append(
                            LineRow(
                                part,
                                h_names.get(hl) or b_names.get(bl, ""),
                                SAME,
                                bl,
                                hl,
                                h_text[j].strip(),
                                b_counts.get(bl, 0.0),
                                h_counts.get(hl, 0.0),
                                b_spec.get(bl, ()),
                                h_spec.get(hl, ()),
                            )
                        )
                continue
            for i in range(i1, i2):
                bl = b0 + i
                rows.append(
                    LineRow(
                        part,
                        b_names.get(bl, ""),
                        REMOVED,
                        bl,
                        None,
                        b_text[i].strip(),
                        b_counts.get(bl, 0.0),
                        math.nan,
                        b_spec.get(bl, ()),
                        (),
                    )
                )
            for j in range(j1, j2):
                hl = h0 + j
                rows.append(
                    LineRow(
                        part,
                        h_names.get(hl, ""),
                        ADDED,
                        None,
                        hl,
                        h_text[j].strip(),
                        math.nan,
                        h_counts.get(hl, 0.0),
                        (),
                        h_spec.get(hl, ()),
                    )
                )
    return rows, unaligned


def _unaligned_rows(
    part: str,
    base: tuple[dict[int, float], dict[int, str], dict[int, tuple[str, ...]]],
    head: tuple[dict[int, float], dict[int, str], dict[int, tuple[str, ...]]],
) -> list[LineRow]:
    """The executed lines of a part whose texts are not both known, by (qualname, line):
    without the texts, a line is the same line only by its number."""
    (bc, bn, bs), (hc, hn, hs) = base, head
    rows = []
    for line in sorted(set(bc) | set(hc)):
        rows.append(
            LineRow(
                part,
                hn.get(line) or bn.get(line, ""),
                UNALIGNED,
                line if line in bc else None,
                line if line in hc else None,
                "",
                bc.get(line, math.nan),
                hc.get(line, math.nan),
                bs.get(line, ()),
                hs.get(line, ()),
            )
        )
    return rows


def _ran(r: LineRow) -> bool:
    return _zero(r.base) > 0 or _zero(r.head) > 0


def _shown_lines(rows: list[LineRow], limit: int) -> tuple[list[LineRow], int, int]:
    """The rows worth showing, at most ``limit``: every line of the diff that ran and
    every line that moved, then the other executed lines of the functions that hold them
    (their context); the other executed lines are counted, and the lines of the diff
    that never ran in these loops."""
    not_run = sum(1 for r in rows if r.changed and not _ran(r))
    rows = [r for r in rows if _ran(r)]
    moved = [r for r in rows if r.changed or abs(r.delta) >= MOVED_MIN]
    functions = {(r.part, r.qualname) for r in moved}
    keep = [r for r in rows if r in moved or (r.part, r.qualname) in functions]
    if len(keep) > limit:
        chosen = {id(r) for r in moved[:limit]}
        keep = [r for r in keep if id(r) in chosen]
    return keep, len(rows) - len(keep), not_run


def function_moves(
    base: VariantWhere, head: VariantWhere, top: int = TOP
) -> tuple[list[Move], str]:
    """The Python functions of the variants' own code that moved most, and the unit:
    exclusive instructions per operation where both were profiled with the perf
    trampoline, else bytecodes per operation (their lines summed)."""
    if base.python and head.python:
        b = {_function_name(p, q): v[1] for (p, q), v in base.python.items() if p}
        h = {_function_name(p, q): v[1] for (p, q), v in head.python.items() if p}
        unit = INSTRUCTIONS
    else:
        b, h = _function_bytecodes(base), _function_bytecodes(head)
        unit = BYTECODES
    moves, _rest, _n = top_moves(_short(b), _short(h), top)
    return moves, unit


def _function_name(part: str, qualname: str) -> str:
    """``file:qualname``: the part's file name (``block_pool.py``) before the function."""
    return f"{part.rsplit('/', 1)[-1]}:{qualname}"


def _function_bytecodes(where: VariantWhere) -> dict[str, float]:
    out: dict[str, float] = {}
    for (part, qualname, _line), value in where.lines.items():
        key = _function_name(part, qualname)
        out[key] = out.get(key, 0.0) + value
    return out


def _short(values: Mapping[str, float]) -> dict[str, float]:
    """Function keys without their part when one part holds them all (a queue)."""
    parts = {k.split(":", 1)[0] for k in values}
    if len(parts) == 1:
        return {k.split(":", 1)[1]: v for k, v in values.items()}
    return dict(values)


def compare(
    case: str,
    pool: int,
    base: VariantWhere,
    head: VariantWhere,
    top: int = TOP,
    max_lines: int = MAX_LINES,
) -> CellMoves:
    """Base against head in one cell (module docstring)."""
    c, rest, n_rest = top_moves(base.c, head.c, top)
    functions, unit = function_moves(base, head, top)
    rows, unaligned = align_lines(base, head)
    shown, left, not_run = _shown_lines(rows, max_lines)
    return CellMoves(
        case=case,
        pool=pool,
        base_instructions=base.instructions,
        head_instructions=head.instructions,
        c=tuple(c),
        c_rest=rest,
        c_rest_count=n_rest,
        functions=tuple(functions),
        function_unit=unit,
        lines=tuple(shown),
        lines_left_out=left,
        diff_not_run=not_run,
        unaligned=tuple(unaligned),
    )
