"""Reading valgrind's out files: cachegrind's per-function totals, callgrind's function
contexts and calls, and CPython's perf map of trampolines. Standard library only; no
``cg_annotate`` or ``callgrind_annotate`` is needed (:mod:`kvqueue.measure.function_profile`
explains what the readings mean).

- :func:`cachegrind_functions`: a cachegrind out file's ``fn=`` blocks summed per
  function (a static function's name shared by two C files is one name: summed);
- :func:`parse_callgrind`: a callgrind dump's contexts, each with its own cost and its
  calls' inclusive costs (names decompressed, relative positions followed);
- :func:`read_perf_map`: ``/tmp/perf-<pid>.map``, trampoline address -> Python function;
- :func:`python_functions`: inclusive, exclusive and calls per Python function from a
  dump made with the perf trampoline and ``--separate-callers``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvqueue.errors import BenchError

_TRAMPOLINE_NAME = re.compile(r"^0x([0-9a-fA-F]+)$")
_NAMED = re.compile(r"^\((\d+)\)(?: (.*))?$")


def cachegrind_functions(text: str, event: str = "Ir") -> dict[str, int]:
    """Per C function, the total of one event in a cachegrind out file.

    Parameters
    ----------
    text
        The out file (``events:``, then ``fl=`` / ``fn=`` lines, each followed by cost
        lines ``LINE COST...``; a missing trailing cost is 0).
    event
        The event to sum (default ``Ir``, instructions).

    Returns
    -------
    dict
        Function name -> total; functions of several files under one name are summed.

    Raises
    ------
    BenchError
        The file has no ``events:`` line, or not ``event``.
    """
    names: list[str] | None = None
    index = -1
    fn: str | None = None
    table: dict[str, str] = {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line:
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            if fn is None or index < 0:
                continue
            parts = line.split()
            if len(parts) > index + 1:
                out[fn] = out.get(fn, 0) + int(parts[index + 1])
        elif line.startswith("fn="):
            fn = _name(line[3:], table)
            out.setdefault(fn, 0)
        elif line.startswith("events:"):
            names = line[7:].split()
            if event not in names:
                raise BenchError(f"cachegrind out file has no {event} events ({names})")
            index = names.index(event)
    if names is None:
        raise BenchError("cachegrind out file has no events: line (did the process crash?)")
    return out


def per_op_functions(
    target: Mapping[str, int], zero: Mapping[str, int], ops: int
) -> dict[str, float]:
    """Each C function's instructions per operation: (target − zero) / ``ops``, for every
    function either run executed (a function only the zero run executed is negative)."""
    if ops <= 0:
        raise ValueError("ops must be positive")
    return {
        fn: (target.get(fn, 0) - zero.get(fn, 0)) / ops
        for fn in sorted(set(target) | set(zero))
        if target.get(fn, 0) != zero.get(fn, 0)
    }


def _name(value: str, table: dict[str, str]) -> str:
    """A name of a valgrind out file, with callgrind's compression: ``(12) name``
    defines id 12, ``(12)`` refers to it; anything else is the name itself."""
    found = _NAMED.match(value)
    if found is None:
        return value
    ident, name = found.groups()
    if name is not None:
        table[ident] = name
        return name
    return table.get(ident, f"({ident})")


# ------------------------------------------------------------------ callgrind


@dataclass
class Context:
    """One function context of a callgrind file: its own cost and the calls it made.

    Attributes
    ----------
    name
        As callgrind names it: the function, then ``'N`` for a recursion level and
        ``'caller'caller…`` for the callers it was separated by.
    self_cost
        Instructions executed in the context itself.
    calls
        ``(callee context, call count, inclusive instructions of those calls)``.
    """

    name: str
    self_cost: int = 0
    calls: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def function(self) -> str:
        """The function's own name (contexts and recursion levels stripped)."""
        return self.name.split("'", 1)[0]

    @property
    def callers(self) -> list[str]:
        """The callers the context was separated by, nearest first (recursion levels
        left out)."""
        return [p for p in self.name.split("'")[1:] if not p.isdigit()]

    @property
    def inclusive(self) -> int:
        """Own cost plus the inclusive cost of every call made."""
        return self.self_cost + sum(c[2] for c in self.calls)


def parse_callgrind(text: str, event: str = "Ir") -> dict[str, Context]:
    """The function contexts of a callgrind out file (one dump), by context name.

    Parameters
    ----------
    text
        The out file: ``positions:`` / ``events:`` header; ``fn=`` (and ``fl=``,
        ``fi=``, ``fe=``, ``ob=``) select the context; cost lines ``POSITION… COST…``
        (positions absolute, ``+N``/``-N`` relative or ``*``); ``cfn=`` then
        ``calls=COUNT TARGET`` and one line with the calls' inclusive costs. Names may be
        compressed (``(id) name`` / ``(id)``).
    event
        The event read (default ``Ir``).

    Returns
    -------
    dict
        Context name -> :class:`Context`.
    """
    positions = 1
    index = 0
    fns: dict[str, str] = {}
    contexts: dict[str, Context] = {}
    current: Context | None = None
    callee: str | None = None
    pending_calls: int | None = None
    skip_next = False
    for line in text.splitlines():
        if not line:
            continue
        if skip_next:
            skip_next = False
            continue
        head = line[0]
        if head.isdigit() or head in "+-*" or line.startswith("0x"):
            parts = line.split()
            costs = parts[positions:]
            value = int(costs[index]) if len(costs) > index else 0
            if pending_calls is not None:
                if current is not None and callee is not None:
                    current.calls.append((callee, pending_calls, value))
                pending_calls = None
            elif current is not None:
                current.self_cost += value
            continue
        key, _, rest = line.partition("=")
        if key == "fn":
            name = _name(rest, fns)
            current = contexts.setdefault(name, Context(name))
        elif key == "cfn":
            callee = _name(rest, fns)
            contexts.setdefault(callee, Context(callee))
        elif key == "calls":
            pending_calls = int(rest.split()[0])
        elif key in ("jump", "jcnd"):
            skip_next = True  # the jump's source position follows (no costs)
        elif line.startswith("positions:"):
            positions = len(line.split(":", 1)[1].split())
        elif line.startswith("events:"):
            names = line.split(":", 1)[1].split()
            if event not in names:
                raise BenchError(f"callgrind out file has no {event} events ({names})")
            index = names.index(event)
    return contexts


def read_perf_map(text: str) -> dict[int, tuple[str, str]]:
    """The Python functions of a ``/tmp/perf-<pid>.map``: trampoline address ->
    ``(file, qualname)`` (lines ``ADDRESS SIZE py::QUALNAME:FILE``; others skipped)."""
    out: dict[int, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or not parts[2].startswith("py::"):
            continue
        qualname, sep, file = parts[2][4:].partition(":")
        if not sep:
            continue
        try:
            out[int(parts[0], 16)] = (file, qualname)
        except ValueError:
            continue
    return out


def python_functions(
    contexts: Mapping[str, Context], perf_map: Mapping[int, tuple[str, str]]
) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per Python function, ``(inclusive, exclusive, calls)`` in instructions and calls,
    from one callgrind dump made with the perf trampoline and ``--separate-callers``.

    Parameters
    ----------
    contexts
        :func:`parse_callgrind`'s contexts.
    perf_map
        :func:`read_perf_map`'s trampolines.

    Returns
    -------
    dict
        ``(file, qualname)`` -> totals; exclusive = inclusive − the inclusive cost of
        the trampolines whose nearest trampoline caller is this function's.
    """

    def function_of(name: str) -> tuple[str, str] | None:
        found = _TRAMPOLINE_NAME.match(name)
        return perf_map.get(int(found.group(1), 16)) if found else None

    calls_in: dict[str, int] = {}
    for ctx in contexts.values():
        for callee, count, _cost in ctx.calls:
            calls_in[callee] = calls_in.get(callee, 0) + count
    inclusive: dict[tuple[str, str], int] = {}
    children: dict[tuple[str, str], int] = {}
    calls: dict[tuple[str, str], int] = {}
    for ctx in contexts.values():
        key = function_of(ctx.function)
        if key is None:
            continue
        cost = ctx.inclusive
        inclusive[key] = inclusive.get(key, 0) + cost
        calls[key] = calls.get(key, 0) + calls_in.get(ctx.name, 0)
        parent = next((k for k in map(function_of, ctx.callers) if k is not None), None)
        if parent is not None:
            children[parent] = children.get(parent, 0) + cost
    return {
        key: (value, value - children.get(key, 0), calls.get(key, 0))
        for key, value in inclusive.items()
    }


def c_functions(contexts: Mapping[str, Context]) -> dict[str, int]:
    """Each C function's own instructions (its contexts summed; trampolines left out)."""
    out: dict[str, int] = {}
    for ctx in contexts.values():
        name = ctx.function
        if ctx.self_cost and not _TRAMPOLINE_NAME.match(name):
            out[name] = out.get(name, 0) + ctx.self_cost
    return out
