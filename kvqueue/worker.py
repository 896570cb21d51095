"""One timing process = one repetition of the protocol (docs/design.md §4).

Run as ``PYTHON -m kvqueue.worker`` with a JSON spec on stdin; prints one JSON result on
stdout. Standard library only, so it runs under any CPython >= 3.10 with nothing
installed: the runner puts the project folder on ``PYTHONPATH``.

Inside the process:

1. pin to one CPU (``os.sched_setaffinity``) and record which;
2. load every variant (from the cache; sha256 checked against the gate's record) and
   build the pools before any timing: one set of blocks per pool size, shared by all
   variants (see :class:`SharedPool`);
3. per (case, pool): calibrate the loop count once on the baseline so a sample lasts
   about ``sample_ms``; warm every variant up; then take ``samples`` rounds, each timing
   every variant once in a freshly shuffled (seeded, recorded) order.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time
from functools import partial
from typing import Any

from kvqueue import cases as case_mod
from kvqueue import child, loader

# Objects allocated only to shift where the next hot objects land; kept alive on purpose.
_LAYOUT_PADDING: list[list[bytes]] = []


def heap_padding(rng: random.Random) -> list[bytes]:
    """Allocate a random number of small objects of random sizes (to be kept alive).

    Where a variant's hot objects (class, functions, code, queue, closures) land in
    memory changes its speed: an A/A pair, two copies of the same class, differed by
    up to 15% on CPython 3.10 in every process of a run, because every process loads
    and builds everything in the same order and so gets the same relative layout. A
    seeded random amount of padding between allocations, together with a shuffled
    load and build order, gives every process a different layout, turning that bias
    into process-to-process noise which the paired statistics and the CI then carry.
    """
    return [bytes(rng.randrange(1, 600)) for _ in range(rng.randrange(0, 400))]


def load_shuffled(
    sources: list[str], labels: list[str], block_source: str | None, rng: random.Random
) -> list[loader.Variant]:
    """Load the variants in a random order with heap padding between them.

    Returns them in the given (label) order; the block class comes from
    ``block_source`` or, by default, the first (baseline) source.
    """
    block = loader.load_block_class(block_source or sources[0])
    loaded: dict[int, loader.Variant] = {}
    for index in rng.sample(range(len(sources)), len(sources)):
        _LAYOUT_PADDING.append(heap_padding(rng))
        loaded[index] = loader.load_variant(sources[index], block, labels[index])
    return [loaded[i] for i in range(len(sources))]


def pin_cpu(request: str | int) -> dict[str, Any]:
    """Pin this process to one CPU.

    Parameters
    ----------
    request
        ``"auto"`` (the highest-numbered CPU this process may use: CPU 0 tends to take
        more interrupts) or a CPU number.

    Returns
    -------
    dict
        ``cpu`` (int or None), ``pinned`` (bool) and ``note`` (why not, when not).
    """
    if not hasattr(os, "sched_setaffinity"):
        return {"cpu": None, "pinned": False, "note": "os.sched_setaffinity unavailable"}
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if request == "auto" else int(request)
    if cpu not in allowed:
        raise SystemExit(f"kvqueue worker: CPU {cpu} is not available (allowed: {allowed})")
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        return {"cpu": None, "pinned": False, "note": f"sched_setaffinity failed: {exc}"}
    actual = sorted(os.sched_getaffinity(0))
    return {"cpu": actual[0], "pinned": actual == [cpu], "note": ""}


def calibrate(run: case_mod.Runner, sample_ns: int) -> int:
    """Return the loop count that makes ``run(loops)`` last about ``sample_ns``."""
    loops = 1
    while True:
        elapsed = run(loops)
        # Stop doubling once a run is long enough to be measured reliably (>= 1/8 of
        # a sample), then scale up linearly.
        if elapsed >= sample_ns // 8 or loops >= 1 << 30:
            return max(1, round(loops * sample_ns / max(elapsed, 1)))
        loops *= 2


class SharedPool:
    """One set of blocks that every variant's queue takes turns to own.

    Giving each variant a pool of its own gave each a different memory layout, which
    showed as a ~2% bias between two copies of the same class (an A/A pair), larger
    than the effects of interest. Here all variants link the SAME block objects: before
    a variant is timed, the chain is handed over to its sentinels in O(1) (setup, never
    timed), so every variant runs on identical memory and on the same queue state.
    """

    def __init__(self, size: int, block_cls: type, queues: dict[str, Any]) -> None:
        self.blocks = [block_cls(block_id=i) for i in range(size)]
        self.queues: dict[str, Any] = {}
        for label, queue_cls in queues.items():
            self.queues[label] = queue_cls(self.blocks)
            self.owner = label  # each __init__ relinks every block to its own sentinels

    def timed(self, runners: dict[str, case_mod.Runner], label: str, loops: int) -> int:
        """Hand the chain of blocks to ``label``'s queue (untimed), then time its runner."""
        if self.owner != label:
            hand_over(self.queues[self.owner], self.queues[label])
            self.owner = label
        return runners[label](loops)


def hand_over(src: Any, dst: Any) -> None:
    """Move the whole chain of blocks from queue ``src`` to queue ``dst`` in O(1).

    Only the documented attributes are used: the two sentinels and ``num_free_blocks``.
    ``src`` is left empty and consistent.
    """
    s_head, s_tail = src.fake_free_list_head, src.fake_free_list_tail
    d_head, d_tail = dst.fake_free_list_head, dst.fake_free_list_tail
    first, last = s_head.next_free_block, s_tail.prev_free_block
    if first is s_tail:
        d_head.next_free_block, d_tail.prev_free_block = d_tail, d_head
    else:
        d_head.next_free_block, first.prev_free_block = first, d_head
        d_tail.prev_free_block, last.next_free_block = last, d_tail
    s_head.next_free_block, s_tail.prev_free_block = s_tail, s_head
    dst.num_free_blocks, src.num_free_blocks = src.num_free_blocks, 0


def run_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one process's share of the protocol.

    Parameters
    ----------
    spec
        ``sources``, ``labels``, ``block_source``, ``expected_sha256`` (label ->
        sha256), ``cases``, ``pools``, ``samples``, ``sample_ms``, ``seed`` (this
        process's shuffle seed), ``case_seed`` (workload shuffles, same for all
        processes), ``cpu``, ``gc`` (``"disabled"`` or ``"enabled"``).

    Returns
    -------
    dict
        ``rows`` (lists in :data:`kvqueue.schema.SAMPLE_COLUMNS` order, without
        ``process`` and ``phase``), ``loops``, pinning info, ``seconds``.
    """
    start = time.perf_counter()
    pin = pin_cpu(spec["cpu"])
    rng = random.Random(spec["seed"])
    labels = spec["labels"]
    variants = load_shuffled(spec["sources"], labels, spec.get("block_source"), rng)
    for variant, label in zip(variants, labels, strict=True):
        want = spec["expected_sha256"].get(label)
        if want is not None and variant.queue_src.sha256 != want:
            raise SystemExit(
                f"kvqueue worker: {label} changed since the validation gate "
                f"(sha256 {variant.queue_src.sha256[:12]} != {want[:12]}); refusing to time it"
            )
    sample_ns = int(spec["sample_ms"] * 1_000_000)
    block_cls = variants[0].block_cls

    # Build every pool before any timing; queues are constructed in a shuffled order.
    order = rng.sample(range(len(labels)), len(labels))
    pools = {}
    for size in spec["pools"]:
        pools[size] = SharedPool(size, block_cls, {labels[i]: variants[i].queue_cls for i in order})
        _LAYOUT_PADDING.append(heap_padding(rng))

    rows: list[list[Any]] = []
    loops_used: dict[str, int] = {}
    gc_enabled = gc.isenabled()
    try:
        for case in spec["cases"]:
            for pool in spec["pools"]:
                shared = pools[pool]
                runners = {}
                for label in rng.sample(labels, len(labels)):
                    runners[label] = case_mod.make_runner(
                        case, shared.queues[label], shared.blocks, spec["case_seed"]
                    )
                    _LAYOUT_PADDING.append(heap_padding(rng))

                per_loop = case_mod.ops_per_loop(case, pool)
                gc.collect()
                if spec["gc"] == "disabled":
                    gc.disable()
                loops = calibrate(partial(shared.timed, runners, labels[0]), sample_ns)
                loops_used[f"{case}/{pool}"] = loops
                for label in rng.sample(labels, len(labels)):  # warm-up, not recorded
                    shared.timed(runners, label, loops)
                for sample in range(spec["samples"]):
                    order = rng.sample(labels, len(labels))
                    for position, label in enumerate(order):
                        ns = shared.timed(runners, label, loops)
                        rows.append(
                            [
                                case,
                                pool,
                                label,
                                sample,
                                position,
                                loops,
                                per_loop,
                                ns,
                                ns / (loops * per_loop),
                            ]
                        )
                if gc_enabled:
                    gc.enable()
    finally:
        if gc_enabled:
            gc.enable()
    return {
        "rows": rows,
        "loops": loops_used,
        **pin,
        "seconds": round(time.perf_counter() - start, 3),
        "python": sys.version,
    }


def main() -> int:
    """Read the spec from stdin, run, print the result as JSON on stdout."""
    child.die_with_parent()
    spec = json.load(sys.stdin)
    if sys.flags.optimize:
        # The runner refuses -O up front; this catches a worker started some other way.
        print("kvqueue worker: refusing to time under -O (asserts stripped)", file=sys.stderr)
        return 2
    try:
        result = run_process(spec)
    except loader.SourceError as exc:
        print(f"kvqueue worker: {exc}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
