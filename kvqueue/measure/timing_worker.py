"""One timing process = one repetition of the protocol (docs/design.md §4).

Run as ``PYTHON -m kvqueue.measure.timing_worker`` with a JSON spec on stdin; prints one JSON
result on
stdout. Standard library only, so it runs under any CPython >= 3.10 with nothing
installed: the runner puts the project folder on ``PYTHONPATH``.

Inside the process:

1. pin to one CPU (``os.sched_setaffinity``) and record which;
2. load every variant (from the cache; sha256 checked against the gate's record) and
   build the pools before any timing: one set of blocks per pool size, shared by all
   variants (see :class:`SharedPool`); in block mode ``own`` (each variant links its own
   release's block class) one pool per variant and size (:class:`OwnPools`);
3. per (case, pool): calibrate the loop count once, on every variant (the median), so a sample lasts
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

from kvqueue.measure import child, stack_layout
from kvqueue.sources import loader
from kvqueue.subjects import queue_cases

#: Heap padding of this process (:func:`heap_padding`): objects allocated only to shift
#: where the next hot objects land, kept alive on purpose until the process ends. Every
#: worker that builds what it times appends here between allocations (the bench's and
#: the policy run's, :mod:`kvqueue.policy.policy_worker`).
LAYOUT_PADDING: list[list[bytes]] = []


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
    sources: list[str],
    labels: list[str],
    block_source: str | None,
    rng: random.Random,
    block: tuple[type, Any] | None = None,
    own_blocks: dict[str, tuple[type, Any]] | None = None,
) -> list[loader.Variant]:
    """Load the variants in a random order with heap padding between them.

    Returns them in the given (label) order; the block class comes from
    ``block_source`` or, by default, the first (baseline) source, unless ``block``
    (an already loaded block class and its source) is given. With ``own_blocks``
    (block mode ``own``: label -> block class and source, filled here for labels it
    lacks) each variant links its own source's block class instead.
    """
    if own_blocks is None:
        block = block or loader.load_block_class(block_source or sources[0])
    loaded: dict[int, loader.Variant] = {}
    for index in rng.sample(range(len(sources)), len(sources)):
        LAYOUT_PADDING.append(heap_padding(rng))
        if own_blocks is not None:
            label = labels[index]
            if label not in own_blocks:
                own_blocks[label] = loader.load_block_class(sources[index])
            block = own_blocks[label]
        assert block is not None
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


def calibrate(run: queue_cases.Runner, sample_ns: int) -> int:
    """Return the loop count that makes ``run(loops)`` last about ``sample_ns``."""
    loops = 1
    while True:
        elapsed = run(loops)
        # Stop doubling once a run is long enough to be measured reliably (>= 1/8 of
        # a sample), then scale up linearly.
        if elapsed >= sample_ns // 8 or loops >= 1 << 30:
            return max(1, round(loops * sample_ns / max(elapsed, 1)))
        loops *= 2


def calibrate_all(
    pool: SharedPool | OwnPools,
    runners: dict[str, queue_cases.Runner],
    labels: list[str],
    rng: random.Random,
    sample_ns: int,
) -> int:
    """The loop count of a cell: :func:`calibrate` on every label in a shuffled order, the
    median (the lower one of an even count) taken, so that no label is run first and
    longest in every process."""
    found = sorted(
        calibrate(partial(pool.timed, runners, label), sample_ns)
        for label in rng.sample(labels, len(labels))
    )
    return found[(len(found) - 1) // 2]


class SharedPool:
    """One set of blocks that every variant's queue takes turns to own.

    Giving each variant a pool of its own gave each a different memory layout, which
    showed as a ~2% bias between two copies of the same class (an A/A pair), larger
    than the effects of interest. Here all variants link the SAME block objects: before
    a variant is timed, the chain is handed over to its sentinels in O(1) (setup, never
    timed), so every variant runs on identical memory and on the same queue state.
    """

    def __init__(
        self,
        size: int,
        block_cls: type,
        queues: dict[str, Any],
        structures: dict[str, str] | None = None,
    ) -> None:
        self.blocks = [block_cls(block_id=i) for i in range(size)]
        self.structures = structures or {}
        self.queues: dict[str, Any] = {}
        for label, queue_cls in queues.items():
            self._clear_ends()
            self.queues[label] = queue_cls(self.blocks)
            self.owner = label  # each __init__ relinks every block to its own sentinels

    def _clear_ends(self) -> None:
        # A head-tail __init__ (vLLM < 0.10.0) links consecutive blocks only and leaves
        # the ends as it finds them; after a sentinel queue they would still point at
        # that queue's sentinels.
        if self.blocks:
            self.blocks[0].prev_free_block = None
            self.blocks[-1].next_free_block = None

    def blocks_of(self, label: str) -> list[Any]:
        """The blocks ``label``'s queue links (the same list for every label here)."""
        return self.blocks

    def rebind(self, queues: dict[str, Any]) -> None:
        """Replace every variant's queue by a new one of the given class, on these blocks."""
        self.queues = {}
        for label, queue_cls in queues.items():
            self._clear_ends()
            self.queues[label] = queue_cls(self.blocks)
            self.owner = label

    def timed(
        self, runners: dict[str, queue_cases.Runner], label: str, loops: int, last: bool = False
    ) -> int:
        """Hand the chain of blocks to ``label``'s queue (untimed), then time its runner
        (``last``: the process's last call, passed to a runner that takes it:
        :func:`kvqueue.subjects.queue_cases.takes_last`)."""
        if self.owner != label:
            hand_over(
                self.queues[self.owner],
                self.queues[label],
                self.structures.get(self.owner, loader.STRUCTURE_SENTINELS),
                self.structures.get(label, loader.STRUCTURE_SENTINELS),
            )
            self.owner = label
        return runners[label](loops, last=True) if last else runners[label](loops)


class OwnPools:
    """Block mode ``own``: one pool per variant (its own block class), no hand-over.

    Each variant's queue links blocks of its own release's ``KVCacheBlock`` (a history
    must time 0.9.x's dataclass equality too), so the variants cannot share block
    objects. Separate pools give each variant its own memory layout, which biased an
    A/A pair by ~2 % (see :class:`SharedPool`); the shuffled build order and the heap
    padding between pools turn that into process-to-process noise, which the paired
    intervals then carry, but a step smaller than that is not resolved.
    """

    def __init__(
        self,
        size: int,
        block_classes: dict[str, type],
        queues: dict[str, Any],
        rng: random.Random,
    ) -> None:
        self.pools: dict[str, SharedPool] = {}
        for label, queue_cls in queues.items():
            self.pools[label] = SharedPool(size, block_classes[label], {label: queue_cls})
            LAYOUT_PADDING.append(heap_padding(rng))

    @property
    def queues(self) -> dict[str, Any]:
        """Label -> that variant's queue."""
        return {label: pool.queues[label] for label, pool in self.pools.items()}

    def blocks_of(self, label: str) -> list[Any]:
        """The blocks of ``label``'s own pool."""
        return self.pools[label].blocks

    def rebind(self, queues: dict[str, Any]) -> None:
        """New queues of the given classes, each on its variant's blocks."""
        for label, queue_cls in queues.items():
            self.pools[label].rebind({label: queue_cls})

    def timed(
        self, runners: dict[str, queue_cases.Runner], label: str, loops: int, last: bool = False
    ) -> int:
        """Time ``label``'s runner on its own pool (nothing to hand over; ``last`` as for
        :meth:`SharedPool.timed`)."""
        return runners[label](loops, last=True) if last else runners[label](loops)


def _ends(q: Any, structure: str) -> tuple[Any, Any, Any, Any]:
    """(head marker, tail marker, first block, last block) of a queue; the markers are
    None for the head-tail structure (``loader.STRUCTURE_HEAD_TAIL``)."""
    if structure == loader.STRUCTURE_HEAD_TAIL:
        return None, None, q.free_list_head, q.free_list_tail
    head, tail = q.fake_free_list_head, q.fake_free_list_tail
    return head, tail, head.next_free_block, tail.prev_free_block


def hand_over(
    src: Any,
    dst: Any,
    src_structure: str = loader.STRUCTURE_SENTINELS,
    dst_structure: str = loader.STRUCTURE_SENTINELS,
) -> None:
    """Move the whole chain of blocks from queue ``src`` to queue ``dst`` in O(1).

    Only the documented attributes are used: the two sentinels (or, for the head-tail
    structure of vLLM < 0.10.0, ``free_list_head``/``free_list_tail``) and
    ``num_free_blocks``. ``src`` is left empty and consistent.
    """
    s_head, s_tail, first, last = _ends(src, src_structure)
    d_head, d_tail, _, _ = _ends(dst, dst_structure)
    empty = first is s_tail
    if dst_structure == loader.STRUCTURE_HEAD_TAIL:
        dst.free_list_head, dst.free_list_tail = (None, None) if empty else (first, last)
    elif empty:
        d_head.next_free_block, d_tail.prev_free_block = d_tail, d_head
    else:
        d_head.next_free_block, d_tail.prev_free_block = first, last
    if not empty:
        first.prev_free_block, last.next_free_block = d_head, d_tail
    if src_structure == loader.STRUCTURE_HEAD_TAIL:
        src.free_list_head = src.free_list_tail = None
    else:
        s_head.next_free_block, s_tail.prev_free_block = s_tail, s_head
    dst.num_free_blocks, src.num_free_blocks = src.num_free_blocks, 0


class Layout:
    """One memory layout of a process: the variants' classes, the pools and the runners.

    Building it again gives every hot object (class, functions and their code objects,
    queues, blocks, closures) a new address, with fresh heap padding in between: a
    *layout epoch*. Every part is built untimed.
    """

    def __init__(
        self,
        spec: dict[str, Any],
        rng: random.Random,
        block: tuple[type, Any] | None = None,
        pools: dict[int, SharedPool | OwnPools] | None = None,
        own_blocks: dict[str, tuple[type, Any]] | None = None,
    ) -> None:
        labels = spec["labels"]
        own = spec.get("block_mode", "shared") == "own"
        # Block mode "own": the block classes are loaded once per process (the pools'
        # blocks outlive a layout) and kept here for the next layout.
        self.own_blocks = (own_blocks if own_blocks is not None else {}) if own else None
        self.variants = load_shuffled(
            spec["sources"],
            labels,
            spec.get("block_source"),
            rng,
            block=block,
            own_blocks=self.own_blocks,
        )
        for variant, label in zip(self.variants, labels, strict=True):
            want = spec["expected_sha256"].get(label)
            if want is not None and variant.queue_src.sha256 != want:
                raise SystemExit(
                    f"kvqueue worker: {label} changed since the validation gate (sha256 "
                    f"{variant.queue_src.sha256[:12]} != {want[:12]}); refusing to time it"
                )
            # Block mode own times each variant on its own block class: it is part of
            # what is timed, so a change since the gate is refused as well.
            want = spec.get("expected_block_sha256", {}).get(label)
            if want is not None and variant.block_src.sha256 != want:
                raise SystemExit(
                    f"kvqueue worker: {label}'s block class changed since the validation "
                    f"gate (sha256 {variant.block_src.sha256[:12]} != {want[:12]}); "
                    "refusing to time it"
                )
        self.block = (self.variants[0].block_cls, self.variants[0].block_src)
        classes = {label: v.queue_cls for label, v in zip(labels, self.variants, strict=True)}
        structures = {label: v.structure for label, v in zip(labels, self.variants, strict=True)}
        order = rng.sample(range(len(labels)), len(labels))
        if pools is None:
            # Build every pool before any timing; queues are constructed in a shuffled order.
            self.pools = {}
            for size in spec["pools"]:
                shuffled = {labels[i]: classes[labels[i]] for i in order}
                if own:
                    block_classes = {v.label: v.block_cls for v in self.variants}
                    self.pools[size] = OwnPools(size, block_classes, shuffled, rng)
                else:
                    self.pools[size] = SharedPool(size, self.block[0], shuffled, structures)
                LAYOUT_PADDING.append(heap_padding(rng))
        else:
            # Same blocks, new queue objects of the new classes (each relinks the blocks).
            self.pools = pools
            for shared in pools.values():
                shared.rebind({labels[i]: classes[labels[i]] for i in order})
                LAYOUT_PADDING.append(heap_padding(rng))
        self.runners: dict[tuple[str, int], dict[str, queue_cases.Runner]] = {}
        for case in spec["cases"]:
            for pool in spec["pools"]:
                shared = self.pools[pool]
                runners = {}
                for label in rng.sample(labels, len(labels)):
                    runners[label] = queue_cases.make_runner(
                        case, shared.queues[label], shared.blocks_of(label), spec["case_seed"]
                    )
                    LAYOUT_PADDING.append(heap_padding(rng))
                self.runners[(case, pool)] = runners


def stack_kind(spec: dict[str, Any]) -> stack_layout.StackKind | None:
    """The spec's stack subject (vLLM's ``BlockPool`` or ``KVCacheManager``), or None for
    the queue."""
    return stack_layout.KINDS.get(spec.get("subject", "queue"))


def ops_per_loop(spec: dict[str, Any], case: str, pool: int) -> int:
    """Operations per loop of ``case`` in the spec's subject."""
    kind = stack_kind(spec)
    if kind is not None:
        return int(kind.cases.ops_per_loop(case, pool))
    return queue_cases.ops_per_loop(case, pool)


def new_layout(spec: dict[str, Any], rng: random.Random, previous: Any = None) -> Any:
    """The next layout of a process: a :class:`Layout` of queues (reusing ``previous``'s
    blocks unless the spec rebuilds its pools), or a whole new pool-subject layout
    (:class:`kvqueue.measure.stack_layout.StackLayout`: a pool's blocks are its own)."""
    if stack_kind(spec) is not None:
        return stack_layout.StackLayout(spec, rng, lambda: LAYOUT_PADDING.append(heap_padding(rng)))
    if previous is None or bool(spec.get("epoch_pools", False)):
        return Layout(spec, rng)
    return Layout(
        spec, rng, block=previous.block, pools=previous.pools, own_blocks=previous.own_blocks
    )


def epoch_rounds(samples: int, epochs: int) -> list[range]:
    """Split the sample rounds ``0 .. samples-1`` into ``epochs`` consecutive ranges."""
    epochs = max(1, min(epochs, samples))
    return [range(e * samples // epochs, (e + 1) * samples // epochs) for e in range(epochs)]


def run_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one process's share of the protocol.

    Parameters
    ----------
    spec
        ``sources``, ``labels``, ``block_source``, ``expected_sha256`` (label ->
        sha256), ``cases``, ``pools``, ``samples``, ``sample_ms``, ``seed`` (this
        process's shuffle seed), ``case_seed`` (workload shuffles, same for all
        processes), ``cpu``, ``gc`` (``"disabled"`` or ``"enabled"``); optional
        ``epochs`` (layout epochs per process, default 1: one layout for all rounds),
        ``epoch_pools`` (rebuild the pools' blocks at every epoch, default false) and
        ``block_mode`` (``"shared"``, the default, or ``"own"``: see :class:`OwnPools`).

    Returns
    -------
    dict
        ``rows`` (lists in :data:`kvqueue.schema.SAMPLE_COLUMNS` order, without
        ``process`` and ``phase``), ``loops``, pinning info, ``seconds``, and
        ``layout_seconds`` (untimed time spent building layouts).
    """
    start = time.perf_counter()
    pin = pin_cpu(spec["cpu"])
    rng = random.Random(spec["seed"])
    labels = spec["labels"]
    sample_ns = int(spec["sample_ms"] * 1_000_000)
    rounds = epoch_rounds(spec["samples"], int(spec.get("epochs", 1)))
    # Keep the blocks by default: A/A on 3.11, alloc1, 24 processes x 9 epochs, SD of the
    # per-process log ratio (pools 2,048 / 100,000): new blocks each epoch 2.6/5.5 % and
    # 9.5/2.0 % in two runs, same blocks 1.1/1.6 % and 1.9/1.6 % (one layout: 1.6/2.2 %).
    rebuild_pools = bool(spec.get("epoch_pools", False))

    rows: list[list[Any]] = []
    loops_used: dict[str, int] = {}
    layout_seconds = 0.0
    gc_enabled = gc.isenabled()
    layout: Layout | None = None
    try:
        for epoch, epoch_samples in enumerate(rounds):
            t0 = time.perf_counter()
            previous = layout
            if rebuild_pools or stack_kind(spec) is not None:
                layout = previous = None  # the old objects go before the new ones are made
            layout = new_layout(spec, rng, previous)
            # One collection per layout, not per cell: with 100,000-block pools a
            # collection costs ~30 ms, and per cell it doubled the cost of 9 epochs.
            gc.collect()
            layout_seconds += time.perf_counter() - t0
            if spec["gc"] == "disabled":
                gc.disable()
            for case in spec["cases"]:
                for pool in spec["pools"]:
                    shared = layout.pools[pool]
                    runners = layout.runners[(case, pool)]
                    per_loop = ops_per_loop(spec, case, pool)
                    key = f"{case}/{pool}"
                    if key not in loops_used:  # calibrated once, on the first layout
                        # On every label, in a shuffled order, and the median taken: a
                        # calibration on the baseline alone ran it first and longest.
                        loops_used[key] = calibrate_all(shared, runners, labels, rng, sample_ns)
                    loops = loops_used[key]
                    # Warm-up, not recorded: a full sample on the first layout; on a new
                    # layout an eighth of one re-specializes the new code objects.
                    warm = loops if epoch == 0 else max(1, loops // 8)
                    for label in rng.sample(labels, len(labels)):
                        shared.timed(runners, label, warm)
                    for sample in epoch_samples:
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
                                    epoch,
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
        "layout_seconds": round(layout_seconds, 3),
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
