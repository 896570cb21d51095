"""Where a count's instructions go: per C function, and per Python function.

Two readings of valgrind's output files (parsed by :mod:`kvqueue.measure.cost_files`,
standard library only), both exact in instructions:

- **per C function of the interpreter**
  (:func:`kvqueue.measure.cost_files.cachegrind_functions`): the counted processes of
  :mod:`kvqueue.measure.cachegrind` write a cachegrind out file per zero and target
  run, so a target's function minus its zero run's, divided by the operations, is that
  C function's share of the loops' instructions per operation
  (:func:`kvqueue.measure.cost_files.per_op_functions`).
- **per Python function** (:func:`profile_cells`, CPython >= 3.12 on Linux): one extra
  counted process under ``valgrind --tool=callgrind`` after
  ``sys.activate_stack_trampoline("perf")``. Every Python call then enters a small
  per-code-object trampoline whose address ``/tmp/perf-<pid>.map`` names
  (``547b00b b py::mid:/tmp/tr.py``); callgrind's inclusive cost of that address is the
  function's inclusive instruction count. ``--separate-callers10=0x*`` splits each
  trampoline's costs by its ten nearest callers, so the nearest trampoline among them is
  the Python caller: *exclusive* = inclusive − the inclusive cost of the Python calls
  made while the function was the innermost Python frame (the C work it causes stays
  in its exclusive cost). Only the target loops are read: the worker calls
  ``os.getppid()`` right before and after them, and ``--dump-before=getppid`` makes the
  last dump hold exactly the loops. With the trampoline active CPython 3.12 stops
  inlining Python-to-Python calls (each goes through the C stack), so these counts are
  *higher* than the cachegrind counts of the same loops, by the calls' own overhead: use
  them to say where, and the cachegrind count to say how much. A recursive function's
  inclusive cost counts its nested calls again.

The second consumer of :class:`Profile` groups the Python functions of a manager stack
into layers (manager, pool, queue, hashing): :meth:`Profile.by_part` gives each file's
*part* (its member path in the release, ``vllm/v1/core/block_pool.py``, or ``queue``
for a queue class) and :meth:`Profile.layers` sums exclusive costs by a classifier of
``(part, qualname)``, so that consumer needs no parsing of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from kvqueue.errors import BenchError
from kvqueue.measure import cachegrind, cost_files

#: Callers a trampoline's costs are split by (the Python caller's trampoline is 5-7
#: C frames up on 3.12: evaluator, _PyEval_Vector, _PyFunction_Vectorcall, a
#: vectorcall or method wrapper, _PyEval_EvalFrameDefault).
SEPARATE_CALLERS = 10
#: The C library function whose calls delimit the loops (``os.getppid()``).
MARKER = "getppid"
#: The worker module a profiled process runs.
WORKER = "kvqueue.measure.profiled_worker"
#: The part of a Python function whose file is none of the variant's measured files.
OTHER_PART = ""


@dataclass(frozen=True)
class FunctionCost:
    """One Python function's instructions per operation, and its calls per operation."""

    inclusive: float
    exclusive: float
    calls: float


@dataclass(frozen=True)
class Profile:
    """Where one variant's loops of one case spend their instructions, per operation.

    Attributes
    ----------
    python
        ``(file, qualname)`` -> :class:`FunctionCost`, every Python function that ran
        (the harness's and the standard library's too).
    c
        C function -> its own instructions per operation (with the trampoline active).
    parts
        File -> the part of the variant it holds (:data:`OTHER_PART` for none): a member
        path (``vllm/v1/core/block_pool.py``) or ``queue`` for a queue class (by file:
        another class of a queue's file, a block's methods, is ``queue`` here too).
    total
        Instructions per operation of the loops, as this profile counted them
        (inflated by the trampoline: see the module docstring).
    ops
        Operations the loops ran.
    """

    python: Mapping[tuple[str, str], FunctionCost]
    c: Mapping[str, float]
    parts: Mapping[str, str]
    total: float
    ops: int

    def part(self, file: str) -> str:
        """The part ``file`` belongs to (:data:`OTHER_PART` when it is not measured)."""
        return self.parts.get(file, OTHER_PART)

    def by_part(self) -> dict[tuple[str, str], FunctionCost]:
        """The Python functions of the measured files, keyed ``(part, qualname)``
        (functions of one part and qualname in several code objects summed)."""
        out: dict[tuple[str, str], FunctionCost] = {}
        for (file, qualname), cost in self.python.items():
            part = self.part(file)
            if part == OTHER_PART:
                continue
            key = (part, qualname)
            had = out.get(key)
            out[key] = cost if had is None else _add(had, cost)
        return out

    def layers(self, classify: Callable[[str, str], str | None]) -> dict[str, float]:
        """Exclusive instructions per operation summed by layer.

        Parameters
        ----------
        classify
            ``(part, qualname) -> layer`` (``part``: :meth:`part` of the function's
            file, :data:`OTHER_PART` outside the measured files), or None to put the
            function in ``"other"``.

        Returns
        -------
        dict
            Layer -> exclusive instructions per operation. Exclusive costs add up: the
            layers' sum is the loops' total but for work done outside any Python
            function.
        """
        out: dict[str, float] = {}
        for (file, qualname), cost in self.python.items():
            layer = classify(self.part(file), qualname) or "other"
            out[layer] = out.get(layer, 0.0) + cost.exclusive
        return out


def _add(a: FunctionCost, b: FunctionCost) -> FunctionCost:
    return FunctionCost(a.inclusive + b.inclusive, a.exclusive + b.exclusive, a.calls + b.calls)


def profile_from_files(dump: str, perf_map: str, parts: Mapping[str, str], ops: int) -> Profile:
    """A :class:`Profile` from the loops' callgrind dump and the process's perf map.

    Parameters
    ----------
    dump
        The callgrind dump that holds the loops alone (the last ``.N`` file).
    perf_map
        The text of ``/tmp/perf-<pid>.map``.
    parts
        File -> part (the worker's record of the variant's measured files).
    ops
        Operations the loops ran.
    """
    contexts = cost_files.parse_callgrind(dump)
    totals = cost_files.python_functions(contexts, cost_files.read_perf_map(perf_map))
    python = {
        key: FunctionCost(inc / ops, exc / ops, calls / ops)
        for key, (inc, exc, calls) in totals.items()
    }
    own = cost_files.c_functions(contexts)
    total = sum(ctx.self_cost for ctx in contexts.values())
    return Profile(
        python=python,
        c={k: v / ops for k, v in own.items()},
        parts=dict(parts),
        total=total / ops,
        ops=ops,
    )


# ------------------------------------------------------------------ the process


def trampoline_available(python: str) -> bool:
    """Whether ``python`` (a CPython >= 3.12 on Linux) can activate the perf trampoline."""
    code = (
        "import os, sys\n"
        "try:\n    sys.activate_stack_trampoline('perf')\nexcept Exception:\n    sys.exit(1)\n"
        "sys.deactivate_stack_trampoline()\n"
        # The (empty) map the activation opened is this probe's alone.
        "try:\n    os.unlink(f'/tmp/perf-{os.getpid()}.map')\nexcept OSError:\n    pass\n"
    )
    try:
        proc = subprocess.run(
            [python, "-S", "-c", code], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def callgrind_options() -> list[str]:
    """callgrind's options for a profile (the marker dumps, the trampolines' callers)."""
    return [
        "--tool=callgrind",
        f"--dump-before={MARKER}",
        f"--separate-callers{SEPARATE_CALLERS}=0x*",
    ]


def profile_cells(
    python: str,
    base_spec: dict[str, Any],
    cells: Iterable[tuple[str, str, int]],
    *,
    valgrind: cachegrind.Valgrind,
    jobs: int | None = None,
    progress: TextIO | None = None,
) -> dict[tuple[str, str, int], Profile]:
    """A :class:`Profile` per ``(label, case, pool)`` cell, one callgrind process each.

    Parameters
    ----------
    python
        The measured interpreter (CPython >= 3.12: :func:`trampoline_available`).
    base_spec
        The counts' worker spec (:func:`kvqueue.measure.counts_run.base_spec`).
    cells
        The cells to profile.
    valgrind
        From :func:`kvqueue.measure.cachegrind.find_valgrind` (its cachegrind options
        are not used).
    jobs
        Processes at once (default: the CPUs this process may use).
    progress
        Where a line per finished profile goes (default: stderr).

    Returns
    -------
    dict
        Cell -> profile.

    Raises
    ------
    BenchError
        A profiled process failed, or wrote no dump of its loops.
    """
    out = progress or sys.stderr
    subject = base_spec.get("subject", "queue")
    todo = list(cells)
    binary = cachegrind.interpreter_binary(python)
    found: dict[tuple[str, str, int], Profile] = {}

    def launch(i: int, cell: tuple[str, str, int], root: Path) -> subprocess.Popen:
        label, case, pool = cell
        loops = cachegrind.target_loops(case, pool, subject=subject)
        spec = cachegrind.job_spec(base_spec, cachegrind.Job(case, pool, "target", label, loops))
        path = root / "out" / f"callgrind.{i}"
        spec["profile"] = {"mode": "trampoline", "out": f"{path}.json"}
        return cachegrind.start(
            valgrind,
            binary,
            spec,
            path,
            root,
            tool=[*callgrind_options(), f"--callgrind-out-file={path}"],
            module=WORKER,
        )

    def finish(cell: tuple[str, str, int], root: Path) -> None:
        found[cell] = _read_profile(root / "out" / f"callgrind.{todo.index(cell)}")
        print(
            f"profile {len(found)}/{len(todo)}: {cell[0]} {cell[1]}/{cell[2]} "
            "(callgrind, perf trampoline)",
            file=out,
            flush=True,
        )

    cachegrind.run_processes(
        todo,
        launch,
        finish,
        what=lambda c: f"profiled process ({c[0]} {c[1]}/{c[2]})",
        jobs=jobs,
    )
    return found


def _read_profile(path: Path) -> Profile:
    """The profile of one finished process: its record, its loops' dump and perf map
    (both removed once read)."""
    record = json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))
    dumps = sorted(
        (p for p in path.parent.glob(f"{path.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
    )
    # CPython writes the map here, whatever TMPDIR says.
    map_path = Path(f"/tmp/perf-{int(record['pid'])}.map")
    try:
        if len(dumps) < 2:
            raise BenchError(
                f"callgrind made {len(dumps)} dumps at {MARKER}() (2 or more expected): "
                "the loops cannot be told from the set-up"
            )
        profile = profile_from_files(
            dumps[-1].read_text(encoding="utf-8"),
            map_path.read_text(encoding="utf-8"),
            {p["where"]: p["part"] for p in record["parts"]},
            int(record["ops"]),
        )
        # The package's files as the project's own (the process ran a copy in root).
        root = path.parent.parent

        def mine(file: str) -> str:
            return cachegrind.project_path(file, root)

        return Profile(
            python={(mine(f), q): cost for (f, q), cost in profile.python.items()},
            c=profile.c,
            parts={mine(f): part for f, part in profile.parts.items()},
            total=profile.total,
            ops=profile.ops,
        )
    except OSError as exc:
        raise BenchError(f"profile of {path.name}: {exc}") from None
    finally:
        for p in dumps:
            p.unlink(missing_ok=True)
        map_path.unlink(missing_ok=True)
