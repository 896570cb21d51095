"""One counted process: the timing worker's layout, run under cachegrind.

Run as ``valgrind --tool=cachegrind ... PYTHON -m kvqueue.measure.counted_worker`` with a
JSON spec on stdin (:mod:`kvqueue.measure.cachegrind` starts it). The process builds the same
:class:`kvqueue.measure.timing_worker.Layout` a timing process builds (same loader, pools,
heap padding and case runners), warms every variant of every cell up by the same number
of operations, and then runs one *target* cell for ``loops`` loops, or nothing.

A target run and the zero run of the same spec do identical work up to the target's
loops, so the difference of their instruction totals is the loops' own cost: setup,
interpreter start and warm-up cancel exactly (``counts`` divides by loops × ops).

No garbage collection is ever counted: the collector is off from the end of the setup to
the end of the process, and the process ends with ``os._exit`` once the loops are done,
without the interpreter's finalization (cachegrind counts the whole process, so a
collection after the loops, or finalization's own, would be counted over a heap the
target loops have changed). The worker used to call ``gc.enable()`` after the loops: a
target run has allocated more than its zero run, so a collection started in some target
runs and not in others: ~107 extra instructions per operation (~2 million per target
run) on CPython 3.13.0, up to 4.1 % between counts of identical code (0.31 % on 3.12.1).
Measured on the five cases of ``make check-queue`` at pool 2,048, the same code copied
into two folders (``/tmp/kvq-gc/a/x`` and a path 24 characters longer): with the
collector left off but a normal exit, the two agreed within 0.003 % (3.10.13), 0.023 %
(3.11.7) and 0.016 % (3.12.1), but 3.13.0 still differed by +4.2 instructions per
operation on every case (0.165 %); with ``os._exit`` as well, 3.12.1 agreed within 0.014 %
and 3.13.0 within 0.044 % (1.1 instructions per operation).

Standard library only (it runs under the measured interpreter, like the worker).
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
from typing import Any

from kvqueue.measure import child, timing_worker
from kvqueue.sources import loader
from kvqueue.subjects import queue_cases

#: The module global :func:`run_counted` keeps the layout in until ``os._exit``, set
#: after the loops. Freed when :func:`run_counted` returned, its teardown was counted,
#: and it differs between a target run and its zero run when the target leaves other
#: objects behind: ``popleftN``'s target leaves 5,000 detached blocks that the layout's
#: last reference then freed (~705,000 instructions of ``subtype_dealloc`` on CPython
#: 3.11.7, 70,000 per ``popleft500``), while blocks in the queue form cycles the
#: refcounts never free (the collector is off). Set only after the loops: an object
#: made before them moves where the loops' own objects land, and their counts with it
#: (a module-level list made at import moved ``make check-queue``'s counts by up to
#: +1.3 %).
KEPT_NAME = "_kept_layout"


def warm_loops(case: str, pool: int, warmup_ops: int, spec: dict[str, Any] | None = None) -> int:
    """Loops of ``case`` that cover at least ``warmup_ops`` operations (at least 1), or a
    queue case's share of them (:func:`kvqueue.subjects.queue_cases.warmup_ops`: fewer for
    a large N); a stack case (``spec``'s subject) is warmed up by its own count
    (:func:`kvqueue.subjects.pool_cases.warmup_ops`)."""
    spec = spec or {}
    kind = timing_worker.stack_kind(spec)
    if kind is not None:
        warmup_ops = kind.cases.warmup_ops(case)
    else:
        warmup_ops = queue_cases.warmup_ops(case, warmup_ops)
    per_loop = timing_worker.ops_per_loop(spec, case, pool)
    return max(1, -(-warmup_ops // per_loop))


def run_counted(spec: dict[str, Any]) -> None:
    """Build the layout, warm every cell up, then run the target cell (if any), with
    the garbage collector off from the warm-up on; it is left off, and the layout alive
    (:data:`KEPT_NAME`), until the process exits.

    Parameters
    ----------
    spec
        A worker spec (see :func:`kvqueue.measure.timing_worker.run_process`: ``sources``,
        ``labels``, ``block_source``, ``expected_sha256``, ``cases``, ``pools``,
        ``seed``, ``case_seed``, ``block_mode``) plus ``warmup_ops`` and ``target``:
        ``null`` or ``[label, case, pool, loops]``.
    """
    rng = random.Random(spec["seed"])
    layout = timing_worker.new_layout(spec, rng)
    gc.collect()
    gc.disable()
    for case in spec["cases"]:
        for pool in spec["pools"]:
            runners = layout.runners[(case, pool)]
            loops = warm_loops(case, pool, int(spec["warmup_ops"]), spec)
            for label in spec["labels"]:
                layout.pools[pool].timed(runners, label, loops)
    target = spec.get("target")
    if target is not None:
        label, case, pool, loops = target
        # The last call of the process: popleftN gives back nothing, so its put-back is
        # in no count (kvqueue.subjects.queue_cases).
        last = timing_worker.stack_kind(spec) is None and queue_cases.takes_last(case)
        layout.pools[pool].timed(layout.runners[(case, pool)], label, int(loops), last=last)
    # No gc.enable(): the process ends here, and everything up to its exit is counted;
    # nor a teardown of the layout (KEPT_NAME).
    globals()[KEPT_NAME] = layout


def main() -> int:
    """Read the spec from stdin and run it; exit 2 on an unusable source."""
    child.die_with_parent()
    spec = json.load(sys.stdin)
    if spec.get("cwd"):
        # Started in a folder of fixed name length (kvqueue.measure.cachegrind); a
        # source given by a relative path is the runner's.
        os.chdir(spec["cwd"].rstrip("/") or "/")  # padded with "/" to one length
    try:
        run_counted(spec)
    except loader.SourceError as exc:
        print(f"kvqueue count worker: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the interpreter's finalization (module teardown and the collection
    # it makes even with the collector off) would be counted too, over a heap the
    # target loops have changed (+4.2 instructions per operation between two folders
    # on CPython 3.13.0).
    os._exit(status)
