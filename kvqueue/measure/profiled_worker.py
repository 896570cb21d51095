"""One profiled process: where a variant's loops of one case spend their work.

Run as ``PYTHON -S -m kvqueue.measure.profiled_worker`` with a JSON spec on stdin: a
count worker's spec (:func:`kvqueue.measure.cachegrind.job_spec`, a ``target`` cell)
plus ``profile``: ``{"mode": ..., "out": PATH}``. The process builds the same layout as
:mod:`kvqueue.measure.counted_worker` and warms every case up the same way, then:

- mode ``lines`` (no valgrind): runs the target loops once untraced (so the code is
  specialised as at the end of a counted target run), records each measured line's
  specialised instructions (``dis.get_instructions(adaptive=True)``, CPython >= 3.11),
  then runs the loops again counting the bytecodes executed per (code object, line) of
  the variant's own files (:func:`count_bytecodes`: ``sys.monitoring`` INSTRUCTION
  events on CPython >= 3.12, ``sys.settrace`` opcode events before). Exact in
  *bytecodes*, not in instructions (a bytecode of a specialised call and one of a generic
  call cost very different numbers of instructions); a traced bytecode is counted in
  its generic form.
- mode ``trampoline`` (under ``valgrind --tool=callgrind``, CPython >= 3.12): activates
  ``sys.activate_stack_trampoline("perf")`` before anything is built, and calls
  ``os.getppid()`` right before and right after the target loops, so that callgrind's
  ``--dump-before=getppid`` puts the loops alone in the last dump
  (:mod:`kvqueue.measure.function_profile`).

Both write ``out`` (JSON): the pid, the operations of the loops, and the variant's
*parts* (:func:`measured_parts`: each file of its own code with its text, first line and
part name); ``lines`` adds the counts and specialisations. The texts go only to the
command that started the process (never into a run folder). Exits with ``os._exit``
without finalization, as the counted worker does.

Standard library only (it runs under the measured interpreter).
"""

from __future__ import annotations

import dis
import gc
import json
import os
import random
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from kvqueue.measure import child, counted_worker, timing_worker
from kvqueue.sources import loader
from kvqueue.subjects import manager_cases

#: The part name of a queue class (a queue variant's, or one swapped into a stack).
QUEUE_PART = "queue"
#: The part name of the load-time adapter of a queue without ``popleft_n``/``append_n``.
ADAPTER_PART = "adapter"
_ADAPTER_FILE = f"<kvqueue adapter {loader.ADAPTER_POPLEFT_LOOP}>"


def measured_parts(variant: Any) -> list[dict[str, Any]]:
    """The files of a variant's own code, each with the part it is.

    A queue variant: its class (part :data:`QUEUE_PART`, its lines in the file it was
    cut from) and the adapter, if loaded with one. A stack variant (pool, manager):
    every member file it read (part: the member's path in the release,
    ``vllm/v1/core/block_pool.py``), and a swapped-in queue class.

    Returns
    -------
    list of dict
        ``part``, ``where`` (the code objects' ``co_filename``), ``first_line``,
        ``text`` (None: not known) and ``lines`` (how many; 0: the whole file).
    """
    out: list[dict[str, Any]] = []
    queue_src = getattr(variant, "queue_src", None)
    graph = getattr(variant, "graph", None)
    if graph is not None:
        for member in sorted(graph.members.values(), key=lambda m: m.path):
            out.append(_part(member.path, member.where, member.text, 1))
        swapped = getattr(variant, "queue", None)
        queue_src = None if swapped is None else swapped.queue_src
    if queue_src is not None:
        out.append(_part(QUEUE_PART, queue_src.path, queue_src.text, queue_src.first_line))
    if getattr(variant, "adapter", None):
        adapter = {"part": ADAPTER_PART, "where": _ADAPTER_FILE, "first_line": 1}
        out.append({**adapter, "text": None, "lines": 0})
    return out


def _part(part: str, where: str, text: str, first_line: int) -> dict[str, Any]:
    return {
        "part": part,
        "where": where,
        "first_line": first_line,
        "text": text,
        "lines": len(text.splitlines()),
    }


class PartIndex:
    """Which part a (file, line) of code belongs to."""

    def __init__(self, parts: list[dict[str, Any]]) -> None:
        self.by_file: dict[str, list[tuple[int, int, str]]] = {}
        for p in parts:
            last = p["first_line"] + p["lines"] - 1 if p["lines"] else sys.maxsize
            self.by_file.setdefault(p["where"], []).append((p["first_line"], last, p["part"]))

    def files(self) -> set[str]:
        """The measured files."""
        return set(self.by_file)

    def part(self, file: str, line: int | None) -> str | None:
        """The part of ``line`` of ``file`` (None: not measured)."""
        for first, last, part in self.by_file.get(file, ()):
            if line is not None and first <= line <= last:
                return part
        return None


def _qualname(code: types.CodeType) -> str:
    return str(getattr(code, "co_qualname", code.co_name))


def _codes(files: set[str]) -> Iterator[types.CodeType]:
    """Every code object of the live functions defined in ``files``, nested ones too."""
    seen: set[int] = set()
    stack = [
        obj.__code__
        for obj in gc.get_objects()
        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename in files
    ]
    while stack:
        code = stack.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        yield code
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def specialisations(index: PartIndex) -> dict[tuple[str, int], list[str]]:
    """Per (part, line): the specialised or adaptive instructions the interpreter runs
    there now (names that are not plain opcodes: ``PRECALL_NO_KW_LIST_APPEND``,
    ``LOAD_ATTR_ADAPTIVE``), in code order; empty before CPython 3.11. Super-instructions
    (``LOAD_FAST__LOAD_FAST``: two plain ones fused) and the quickened forms of
    instructions that have no specialisation (``RESUME_QUICK``) are left out."""
    out: dict[tuple[str, int], list[str]] = {}
    for code in _codes(index.files()):
        try:
            instructions = list(dis.get_instructions(code, adaptive=True))  # type: ignore[call-arg]
        except TypeError:
            return {}  # CPython 3.10: no adaptive interpreter
        for ins in instructions:
            line = ins.positions.lineno if ins.positions is not None else None
            part = index.part(code.co_filename, line)
            if part is None or line is None or not _specialised(ins.opname):
                continue
            names = out.setdefault((part, line), [])
            if ins.opname not in names:
                names.append(ins.opname)
    return out


def _specialised(name: str) -> bool:
    return name not in dis.opmap and "__" not in name and not name.endswith("_QUICK")


def count_bytecodes(
    run: Callable[[], object], files: set[str]
) -> dict[tuple[types.CodeType, int], int]:
    """Bytecodes executed per (code object, line) of ``files`` while ``run()`` runs.

    CPython >= 3.12: ``sys.monitoring`` INSTRUCTION events, set on the code objects of
    those files alone (:func:`_codes`). Before: ``sys.settrace`` with
    ``frame.f_trace_opcodes`` set on the frames of those files only (on 3.12 a frame
    whose opcode events are asked for in its call event got none once its code had
    run: monitoring is the one reliable way there)."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        return _count_monitored(run, list(_codes(files)), monitoring)
    counts: dict[tuple[int, int], int] = {}
    codes: dict[int, types.CodeType] = {}

    def local(frame: types.FrameType, event: str, _arg: object) -> Any:
        if event == "opcode":
            code = frame.f_code
            key = (id(code), frame.f_lineno)  # id: a code object's hash is computed anew
            counts[key] = counts.get(key, 0) + 1
            codes[key[0]] = code
        return local

    def calls(frame: types.FrameType, _event: str, _arg: object) -> Any:
        if frame.f_code.co_filename in files:
            frame.f_trace_opcodes = True
            return local
        return None

    sys.settrace(calls)
    try:
        run()
    finally:
        sys.settrace(None)
    return {(codes[c], line): n for (c, line), n in counts.items()}


def _count_monitored(
    run: Callable[[], object], codes: list[types.CodeType], monitoring: Any
) -> dict[tuple[types.CodeType, int], int]:
    """:func:`count_bytecodes` with ``sys.monitoring`` (CPython >= 3.12): an INSTRUCTION
    event per bytecode of ``codes``, counted per (code, offset), then per line."""
    tool = next(t for t in range(6) if monitoring.get_tool(t) is None)
    monitoring.use_tool_id(tool, "kvqueue-bytecodes")
    counts: dict[tuple[int, int], int] = {}

    def on_instruction(code: types.CodeType, offset: int) -> None:
        key = (id(code), offset)
        counts[key] = counts.get(key, 0) + 1

    event = monitoring.events.INSTRUCTION
    monitoring.register_callback(tool, event, on_instruction)
    try:
        for code in codes:
            monitoring.set_local_events(tool, code, event)
        run()
    finally:
        for code in codes:
            monitoring.set_local_events(tool, code, 0)
        monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)
    out: dict[tuple[types.CodeType, int], int] = {}
    for code in codes:
        lines = [(start, end, line) for start, end, line in code.co_lines() if line is not None]
        for start, end, line in lines:
            n = sum(counts.get((id(code), offset), 0) for offset in range(start, end, 2))
            if n:
                out[(code, line)] = out.get((code, line), 0) + n
    return out


def run_profiled(spec: dict[str, Any]) -> None:
    """Build, warm up and profile the target cell of ``spec`` (module docstring)."""
    profile = spec["profile"]
    mode = profile["mode"]
    if mode == "trampoline":
        sys.activate_stack_trampoline("perf")  # type: ignore[attr-defined]
        # The stream's calls behind functions of their own names (prefill vs decode):
        # a per-function profile is per call only with them.
        manager_cases.NAMED_CALLS[0] = True
    rng = random.Random(spec["seed"])
    layout = timing_worker.new_layout(spec, rng)
    gc.collect()
    gc.disable()
    for case in spec["cases"]:
        for pool in spec["pools"]:
            runners = layout.runners[(case, pool)]
            loops = counted_worker.warm_loops(case, pool, int(spec["warmup_ops"]), spec)
            for label in spec["labels"]:
                layout.pools[pool].timed(runners, label, loops)
    label, case, pool, loops = spec["target"]
    loops = int(loops)
    variant = layout.variants[list(spec["labels"]).index(label)]
    parts = measured_parts(variant)
    record: dict[str, Any] = {
        "pid": os.getpid(),
        "ops": loops * timing_worker.ops_per_loop(spec, case, pool),
        "parts": parts,
    }

    def run() -> object:
        return layout.pools[pool].timed(layout.runners[(case, pool)], label, loops)

    if mode == "trampoline":
        _write(profile["out"], record)
        os.getppid()  # the dump before the loops (function_profile.MARKER)
        run()
        os.getppid()  # the dump of the loops
        return
    run()  # specialised as at the end of a counted target run
    index = PartIndex(parts)
    special = specialisations(index)
    counted = count_bytecodes(run, index.files())
    lines: dict[tuple[str, str, int], int] = {}
    for (code, line), n in counted.items():
        part = index.part(code.co_filename, line)
        if part is not None:
            key = (part, _qualname(code), line)
            lines[key] = lines.get(key, 0) + n
    record["lines"] = [[p, q, ln, n] for (p, q, ln), n in sorted(lines.items())]
    record["specialised"] = [[p, ln, names] for (p, ln), names in sorted(special.items())]
    _write(profile["out"], record)


def _write(path: str, record: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh)


def main() -> int:
    """Read the spec from stdin and run it; exit 2 on an unusable source."""
    child.die_with_parent()
    spec = json.load(sys.stdin)
    if spec.get("cwd"):
        os.chdir(spec["cwd"].rstrip("/") or "/")  # padded with "/" to one length
    try:
        run_profiled(spec)
    except loader.SourceError as exc:
        print(f"kvqueue profile worker: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
