"""Where the cost moved, in words and tables: one cell's base against head
(:class:`kvqueue.stats.cost_moves.CellMoves`) as a sentence, as Markdown (``make
regress``, the report's writeups) and as plain text (``make quick METRIC=instructions``).

The sentence names the lines of the diff with their bytecodes per operation and the
specialised instructions the interpreter ran there, and the C functions whose
instructions per operation moved most ("the extra instructions went to C functions
list_append (+30.8), …"). Δ = head − base throughout: + means head executes more, the
opposite sign of the project's *reduction* (docs/design.md §5), because a count that
moved is read as where instructions went.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvqueue.stats import cost_moves
from kvqueue.stats.cost_moves import CellMoves, LineRow, Move

#: Lines and C functions a sentence names, in the direction of the cell's change.
SENTENCE_LINES = 4
SENTENCE_C = 5
#: Characters of a line's text a sentence or plain table shows.
TEXT_WIDTH = 48

C_NOTE = (
    "**C functions** of the interpreter: instructions per operation, exact (cachegrind's "
    "per-function counts of the counted target run minus its zero run, over the "
    "operations); Δ = head − base (+: more in head)."
)
BYTECODE_NOTE = (
    "in bytecodes per operation, not instructions: one more process per variant traced "
    "the same loops (`sys.monitoring` INSTRUCTION events on CPython >= 3.12, "
    "`sys.settrace` opcode events before; exact in bytecodes; a specialised "
    "call and a generic one are one bytecode each, so what a line costs shows in the C "
    "functions and in its specialised instructions, read with "
    "`dis.get_instructions(adaptive=True)` after the loops ran untraced)"
)
TRAMPOLINE_NOTE = (
    "in exclusive instructions per operation (those run while the function was the "
    "innermost Python frame, the C work it caused included): one more process per variant "
    "under callgrind with CPython's perf trampoline; with the trampoline active CPython "
    "stops inlining Python-to-Python calls, so these figures are higher than the counts "
    "by the calls' own overhead"
)


def method_note(moves: Sequence[CellMoves]) -> str:
    """How to read the tables of every cell (one paragraph, Markdown)."""
    lines = (
        "**lines** of that code aligned by the diff of base and head (`-`: base only, `+`: "
        "head only)"
    )
    if any(m.function_unit == cost_moves.INSTRUCTIONS for m in moves if m.functions):
        return (
            f"{C_NOTE} **Python functions** of the variants' own code, {TRAMPOLINE_NOTE} "
            "(else their lines' bytecodes, where a variant was not profiled so). The "
            f"{lines}, {BYTECODE_NOTE}."
        )
    return (
        f"{C_NOTE} **Python functions** of the variants' own code (their lines summed) and "
        f"the {lines}, {BYTECODE_NOTE}."
    )


def _num(x: float) -> str:
    return "–" if x != x else f"{x:,.1f}"


def _signed(x: float) -> str:
    return "–" if x != x else f"{x:+,.1f}"


def _cell(m: CellMoves) -> str:
    return f"{m.case} (pool {m.pool:,})"


def _clip(text: str, width: int = TEXT_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _code(text: str) -> str:
    """Inline code that survives Markdown tables: backticks doubled when the text holds
    one, ``|`` escaped."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _line_name(r: LineRow, side: str, common: frozenset[str] = frozenset()) -> str:
    number = r.head_line if side == "head" else r.base_line
    value = r.head if side == "head" else r.base
    special = [
        s for s in (r.head_specialised if side == "head" else r.base_specialised) if s not in common
    ]
    text = f"line {number} {_code(_clip(r.text))}" if r.text else f"line {number}"
    detail = f"{_num(value)} bytecodes/op"
    if special:
        detail += f"; {', '.join(special)}"
    return f"{text} ({detail})"


def _and(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + f" and {items[-1]}"


def _c_list(moves: Sequence[Move]) -> str:
    return _and([f"{m.name} ({_signed(m.delta)})" for m in moves])


def sentence(m: CellMoves) -> str:
    """One paragraph: how far the cell moved, the lines of the diff (with bytecodes and
    specialised instructions) and the lines that ran more or less often, the Python
    functions (with the perf trampoline) and the C functions that moved most."""
    pct = f" ({100 * m.delta / m.base_instructions:+.2f} %)" if m.base_instructions else ""
    more = "more" if m.delta > 0 else "fewer"
    text = (
        f"{_cell(m)}: head executes {abs(m.delta):,.1f} {more} instructions per operation "
        f"than base{pct}."
    )
    removed = [r for r in m.lines if r.tag == cost_moves.REMOVED and _zero(r.base) > 0]
    added = [r for r in m.lines if r.tag == cost_moves.ADDED and _zero(r.head) > 0]
    moved = sorted(
        (r for r in m.lines if r.tag == cost_moves.SAME and abs(r.delta) >= cost_moves.MOVED_MIN),
        key=lambda r: -abs(r.delta),
    )
    if added or removed:
        # The specialised instructions both sides run are no difference: named once
        # each side lacks them.
        common = frozenset(s for r in removed for s in r.base_specialised) & frozenset(
            s for r in added for s in r.head_specialised
        )
        heads = _and([_line_name(r, "head", common) for r in added[:SENTENCE_LINES]]) or "nothing"
        bases = _and([_line_name(r, "base", common) for r in removed[:SENTENCE_LINES]])
        text += f" In the diff, head runs {heads}"
        text += f" where base ran {bases}." if bases else "."
    elif m.lines and not m.unaligned:
        text += " No executed line of the diff."
    if moved:
        text += (
            " Lines of both that run more or fewer bytecodes: "
            + _and(
                [
                    f"line {r.head_line} {_code(_clip(r.text))} ({_signed(r.delta)} bytecodes/op)"
                    if r.text
                    else f"line {r.head_line} ({_signed(r.delta)} bytecodes/op)"
                    for r in moved[:SENTENCE_LINES]
                ]
            )
            + "."
        )
    if m.function_unit == cost_moves.INSTRUCTIONS and m.functions:
        text += (
            " By Python function (exclusive instructions/op, perf trampoline): "
            + _c_list(m.functions[:SENTENCE_C])
            + "."
        )
    up = [c for c in m.c if c.delta > 0]
    down = [c for c in m.c if c.delta < 0]
    main, other = (up, down) if m.delta >= 0 else (down, up)
    if main:
        text += (
            " The extra instructions went to C functions "
            if m.delta >= 0
            else " The instructions saved came from C functions "
        ) + _c_list(main[:SENTENCE_C])
        if other:
            text += f"; {'fewer' if m.delta >= 0 else 'more'} in " + _c_list(other[:2])
        text += " (instructions/op)."
    return text


def _zero(x: float) -> float:
    return 0.0 if x != x else x


def _special(r: LineRow, arrow: str, sep: str) -> str:
    """A line's specialised instructions: once when base and head run the same ones,
    ``base → head`` when they differ ('' when there are none)."""
    b, h = r.base_specialised, r.head_specialised
    if b == h or (r.tag == cost_moves.REMOVED and not h) or (r.tag == cost_moves.ADDED and not b):
        return sep.join(b or h)
    return arrow.join(sep.join(x) or "–" for x in (b, h))


def c_table(m: CellMoves) -> list[str]:
    """The C functions that moved most, as Markdown table lines."""
    lines = ["| C function | base | head | Δ |", "|---|---:|---:|---:|"]
    for c in m.c:
        lines.append(f"| `{c.name}` | {_num(c.base)} | {_num(c.head)} | {_signed(c.delta)} |")
    if m.c_rest_count:
        lines.append(
            f"| the {m.c_rest_count:,} other C functions that moved | | | {_signed(m.c_rest)} |"
        )
    return lines


def function_table(m: CellMoves) -> list[str]:
    """The Python functions that moved most, as Markdown table lines."""
    unit = "instr/op" if m.function_unit == cost_moves.INSTRUCTIONS else "bytecodes/op"
    lines = [f"| function | base {unit} | head {unit} | Δ |", "|---|---:|---:|---:|"]
    for f in m.functions:
        lines.append(f"| `{f.name}` | {_num(f.base)} | {_num(f.head)} | {_signed(f.delta)} |")
    return lines


def line_table(m: CellMoves) -> list[str]:
    """The aligned lines, as Markdown table lines (a part column when there are
    several)."""
    several = len({r.part for r in m.lines}) > 1
    head = (
        "| | "
        + ("part | " if several else "")
        + ("base line | head line | code | base | head | Δ | specialised (base → head) |")
    )
    rule = "|---|" + ("---|" if several else "") + "---:|---:|---|---:|---:|---:|---|"
    lines = [head, rule]
    for r in m.lines:
        tag = {cost_moves.SAME: "", cost_moves.UNALIGNED: "?"}.get(r.tag, r.tag)
        special = _special(r, " → ", ", ")
        code = _code(r.text) if r.text else (f"`{r.qualname}`" if r.qualname else "")
        lines.append(
            f"| {tag} | "
            + (f"`{r.part}` | " if several else "")
            + f"{'' if r.base_line is None else r.base_line} | "
            f"{'' if r.head_line is None else r.head_line} | {code} | {_num(r.base)} | "
            f"{_num(r.head)} | {_signed(r.delta)} | {special} |"
        )
    return lines


def details(m: CellMoves, *, summary: str | None = None) -> str:
    """The cell's tables in one ``<details>`` block (Markdown; read with
    :func:`method_note`)."""
    label = summary or f"{_cell(m)}: C functions, Python functions and lines"
    parts = [f"<details><summary>{label}</summary>", "", *c_table(m)]
    if m.functions:
        parts += ["", *function_table(m)]
    notes = []
    if m.unaligned:
        notes.append(
            "Not aligned (a text not found here), by line number only: "
            + ", ".join(f"`{p}`" for p in m.unaligned)
            + "."
        )
    if m.lines_left_out:
        notes.append(f"{m.lines_left_out} other executed lines that did not move are left out.")
    if m.diff_not_run:
        notes.append(f"{m.diff_not_run} lines of the diff never ran in these loops.")
    if m.lines:
        parts += ["", *line_table(m)]
    if notes:
        parts += ["", " ".join(notes)]
    parts += ["", "</details>"]
    return "\n".join(parts)


def markdown(moves: Sequence[CellMoves], heading: str = "### Where the instructions moved") -> str:
    """The section of ``make regress``'s Markdown: how to read it, then a sentence per
    cell and its tables folded ('' without cells)."""
    if not moves:
        return ""
    out = [heading, "", method_note(moves), ""]
    for m in moves:
        out += [sentence(m), "", details(m), ""]
    return "\n".join(out).rstrip() + "\n"


def plain(m: CellMoves, base: str, head: str) -> str:
    """The cell as plain text for a terminal (``make quick METRIC=instructions``)."""
    out = [f"where {head} vs {base}, {sentence(m)}", "  C functions (instructions/op):"]
    fmt = "    {:<48} {:>10} {:>10} {:>9}"
    out.append(fmt.format("function", "base", "head", "delta"))
    for c in m.c:
        out.append(fmt.format(_clip(c.name, 48), _num(c.base), _num(c.head), _signed(c.delta)))
    if m.functions:
        unit = "instructions" if m.function_unit == cost_moves.INSTRUCTIONS else "bytecodes"
        out.append(f"  Python functions ({unit}/op):")
        for f in m.functions:
            name = f.name if len(f.name) <= 48 else "…" + f.name[-47:]  # the qualname's end
            out.append(fmt.format(name, _num(f.base), _num(f.head), _signed(f.delta)))
    shown = [r for r in m.lines if r.changed or abs(r.delta) >= cost_moves.MOVED_MIN]
    if shown:
        out.append("  lines of the diff and lines that moved (bytecodes/op):")
        lfmt = "    {:1} {:>5} {:>5}  {:<48} {:>8} {:>8}  {}"
        for r in shown:
            special = _special(r, " -> ", ",")
            out.append(
                lfmt.format(
                    r.tag.strip(),
                    "" if r.base_line is None else r.base_line,
                    "" if r.head_line is None else r.head_line,
                    _clip(r.text or r.qualname),
                    _num(r.base),
                    _num(r.head),
                    special,
                )
            )
    return "\n".join(out)
