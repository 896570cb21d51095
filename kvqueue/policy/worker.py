"""One process of a policy run (docs/design.md §12).

Run as ``PYTHON -m kvqueue.policy.worker`` with a JSON spec on stdin; prints one JSON
result on stdout. ``--check`` runs the invariant check (:mod:`kvqueue.policy.invariants`)
instead. Standard library only (the measured interpreter has nothing installed).

Inside a process, for one queue variant and every policy:

1. pin to one CPU; load the variant with heap padding; build ONE set of blocks that
   every pass reuses (a fresh queue over them per pass relinks them in id order);
2. a *metrics pass* per policy, in a shuffled order: the churn workload, warm-up steps
   first, then the measured steps, in which every allocation is described (runs in the
   returned order, blocks in runs of >= 2, how many older free blocks it passed over,
   the age ranks it evicted, blocks searched). Nothing is timed in it: describing an
   allocation walks the head of the queue, which would warm exactly the cache lines the
   timed call then reads;
3. a *timed pass* per policy, in a new shuffled order (recorded as ``order_position``),
   with the garbage collector as configured: the same workload from the same seed, only
   ``perf_counter_ns`` around each allocation call of the measured steps. It replays the
   metrics pass exactly (both are deterministic): the final queue order and the counts
   of both passes must agree, or the process fails.
"""

from __future__ import annotations

import gc
import hashlib
import json
import random
import sys
import time
from typing import Any

from kvqueue import child, schema
from kvqueue.bench.worker import LAYOUT_PADDING, heap_padding, load_shuffled, pin_cpu
from kvqueue.policy import churn, invariants, policies
from kvqueue.sources import loader


class _Metrics:
    """Describes every allocation of the measured steps (the untimed pass)."""

    def __init__(self, name: str, threshold: int, queue: Any) -> None:
        self.name = name
        self.threshold = threshold
        self.queue = queue
        self.watched = invariants.WatchedQueue(queue)
        self.plain = policies.get(name, threshold)
        self.window = policies.window_of(name)
        self.sums = dict.fromkeys(schema.POLICY_ROW_KEYS[3:13], 0)

    def __call__(self, n: int) -> list[Any]:
        queue = self.queue
        big = n >= self.threshold
        # Every block the policy can take lies in the first window + n blocks.
        if not big or self.name == policies.LRU:
            depth = n
        elif self.window is None:
            depth = queue.num_free_blocks
        else:
            depth = self.window * n + n
        position = {}
        for i, block in enumerate(queue.iter_blocks_after(queue.fake_free_list_head)):
            if i >= depth:
                break
            position[block.block_id] = i
        self.watched.scanned = 0
        got = self.plain(self.watched, n)
        ids = [b.block_id for b in got]
        runs = policies.ascending_runs(ids)
        s = self.sums
        s["allocations"] += 1
        s["blocks"] += n
        s["runs"] += len(runs)
        if big:
            try:
                ranks = [position[i] for i in ids]
            except KeyError:
                raise SystemExit(
                    f"kvqueue policy worker: {self.name} took a block beyond its window + n"
                ) from None
            s["big_allocations"] += 1
            s["big_blocks"] += n
            s["big_runs"] += len(runs)
            s["big_blocks_in_runs"] += sum(r for r in runs if r >= 2)
            # Older free blocks passed over: free blocks ahead of the youngest one taken.
            s["big_passed_over"] += max(ranks) + 1 - n
            # Mean age rank taken, above what popleft_n takes ((n - 1) / 2), in blocks.
            s["big_rank_excess"] += sum(ranks) / n - (n - 1) / 2
            s["big_scanned"] += self.watched.scanned
        return got


def _queue_digest(queue: Any) -> str:
    ids = ",".join(str(i) for i in invariants.free_ids(queue))
    return hashlib.sha256(ids.encode()).hexdigest()


def _pass(
    variant: loader.Variant,
    blocks: list[Any],
    workload: churn.Workload,
    seed: int,
    alloc_for: Any,
) -> tuple[churn.Churn, Any]:
    """Warm up with the plain policy, then run the measured steps with ``alloc_for(queue)``."""
    queue = variant.queue_cls(blocks)
    measured = alloc_for(queue)
    plain = measured.plain
    sim = churn.Churn(workload, seed, queue, blocks, lambda n: plain(queue, n))
    sim.run(workload.warmup_steps)
    sim.alloc = measured
    sim.run(workload.steps)
    return sim, measured


class _Timed:
    """``perf_counter_ns`` around each allocation call, nothing else."""

    def __init__(self, name: str, threshold: int, queue: Any) -> None:
        self.plain = policies.get(name, threshold)
        self.queue = queue
        self.threshold = threshold
        self.ns: list[int] = []
        self.sizes: list[int] = []

    def __call__(self, n: int) -> list[Any]:
        clock = time.perf_counter_ns
        t0 = clock()
        got = self.plain(self.queue, n)
        t1 = clock()
        self.ns.append(t1 - t0)
        self.sizes.append(n)
        return got


def run_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one process: metrics passes, then timed passes, for every policy.

    Parameters
    ----------
    spec
        ``source``, ``block_source`` (or None), ``expected_sha256`` (or None),
        ``policies`` (registry names), ``threshold``, ``workload`` (a
        :class:`kvqueue.policy.churn.Workload` as a dict), ``seed`` (this process's seed: the
        request stream and the shuffles), ``cpu``, ``gc``.

    Returns
    -------
    dict
        ``rows`` (one dict per policy, keys :data:`kvqueue.schema.POLICY_ROW_KEYS`), pinning info,
        ``seconds``.
    """
    start = time.perf_counter()
    pin = pin_cpu(spec["cpu"])
    rng = random.Random(spec["seed"])
    workload = churn.Workload(**spec["workload"])
    threshold = int(spec["threshold"])
    names = _checked_names(spec["policies"])
    (variant,) = load_shuffled([spec["source"]], [spec["source"]], spec.get("block_source"), rng)
    want = spec.get("expected_sha256")
    if want and variant.queue_src.sha256 != want:
        raise SystemExit(
            f"kvqueue policy worker: {spec['source']} changed since the check (sha256 "
            f"{variant.queue_src.sha256[:12]} != {want[:12]}); refusing to time it"
        )
    LAYOUT_PADDING.append(heap_padding(rng))
    blocks = [variant.block_cls(block_id=i) for i in range(workload.pool)]
    LAYOUT_PADDING.append(heap_padding(rng))
    seed = spec["seed"]

    rows: dict[str, dict[str, Any]] = {}
    digests: dict[str, tuple] = {}
    for name in rng.sample(names, len(names)):
        sim, metrics = _pass(
            variant, blocks, workload, seed, lambda q, nm=name: _Metrics(nm, threshold, q)
        )
        rows[name] = {
            "policy": name,
            "window": _window_text(name),
            **metrics.sums,
            "admitted": sim.admitted,
            "completed": sim.completed,
            "prefill_blocks": sim.prefill_blocks,
            "hit_blocks": sim.hit_blocks,
        }
        digests[name] = (_queue_digest(sim.queue), metrics.sums["allocations"])
        LAYOUT_PADDING.append(heap_padding(rng))

    gc_enabled = gc.isenabled()
    try:
        for position, name in enumerate(rng.sample(names, len(names))):
            gc.collect()
            if spec["gc"] == "disabled":
                gc.disable()
            sim, timed = _pass(
                variant, blocks, workload, seed, lambda q, nm=name: _Timed(nm, threshold, q)
            )
            if gc_enabled:
                gc.enable()
            if (_queue_digest(sim.queue), len(timed.ns)) != digests[name]:
                raise SystemExit(
                    f"kvqueue policy worker: the timed pass of {name} did not replay its "
                    "metrics pass (the workload is not deterministic?)"
                )
            row = rows[name]
            row["order_position"] = position
            row["ns_total"] = sum(timed.ns)
            row["big_ns_total"] = sum(
                t for t, n in zip(timed.ns, timed.sizes, strict=True) if n >= threshold
            )
    finally:
        if gc_enabled:
            gc.enable()
    return {
        "rows": [{k: rows[name][k] for k in schema.POLICY_ROW_KEYS} for name in names],
        **pin,
        "class_sha256": variant.queue_src.sha256,
        "seconds": round(time.perf_counter() - start, 3),
        "python": sys.version,
    }


class SpecError(ValueError):
    """The spec names an unknown policy or a variant the policies cannot run on."""


def _checked_names(names: list[str]) -> list[str]:
    for name in names:
        try:
            policies.get(name)
        except KeyError as exc:
            raise SpecError(exc.args[0]) from None
    return list(names)


def _window_text(name: str) -> str:
    window = policies.window_of(name)
    return "inf" if window is None else str(window)


def run_check_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The invariant check of ``spec`` (``source``, ``block_source``, ``policies``,
    ``threshold``, ``seed``) with the variant's provenance.

    Raises
    ------
    SpecError
        An unknown policy name or a variant the policies cannot run on (one line).
    """
    names = _checked_names(spec["policies"])
    (variant,) = loader.load_variants([spec["source"]], block_source=spec.get("block_source"))
    problem = policies.unsupported(variant)
    if problem:
        raise SpecError(f"{spec['source']}: {problem}")
    threshold = int(spec["threshold"])
    t0 = time.perf_counter()
    try:
        result = invariants.run_check(
            variant.queue_cls,
            variant.block_cls,
            names,
            threshold,
            int(spec["seed"]),
        )
    except invariants.PolicyCheckError as exc:
        result = {"ok": False, "error": str(exc)}
    result["seconds"] = round(time.perf_counter() - t0, 3)
    result["provenance"] = variant.provenance()
    result["sha256"] = variant.queue_src.sha256
    return result


def main(argv: list[str] | None = None) -> int:
    """Read the spec from stdin, run (or ``--check``), print the result as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    child.die_with_parent()
    spec = json.load(sys.stdin)
    if sys.flags.optimize:
        print("kvqueue policy worker: refusing to run under -O (asserts stripped)", file=sys.stderr)
        return 2
    try:
        result = run_check_spec(spec) if "--check" in argv else run_process(spec)
    except (loader.SourceError, SpecError) as exc:
        print(f"kvqueue policy worker: {exc}", file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
