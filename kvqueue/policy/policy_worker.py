"""One process of a policy run (docs/design.md §12).

Run as ``PYTHON -m kvqueue.policy.policy_worker`` with a JSON spec on stdin; prints one JSON
result on stdout. ``--check`` runs the invariant check (:mod:`kvqueue.policy.invariants`)
instead. Standard library only (the measured interpreter has nothing installed).

Inside a process, for one queue variant and every policy (docs/design.md §12):

1. pin to one CPU; load the variant with heap padding; build ONE set of blocks per side
   (decode, and prefill unless a one-side trace is replayed) that every pass reuses (a
   fresh queue per pass relinks them in id order);
2. one pass per policy, in a shuffled order (recorded as ``order_position``), with the
   garbage collector as configured: the workload (the seeded synthetic churn on two
   pools, or the trace) from the id-ordered start until the engine age reaches the last
   window edge, with ``perf_counter_ns`` around each allocation call and the metrics
   computed from the returned blocks after the clock stopped
   (:class:`kvqueue.policy.age_windows.Meter`). The metrics never walk the queue (the
   older protocol's passed-over and age-rank metrics did, and needed a second, untimed
   pass), so one pass gives both.
"""

from __future__ import annotations

import gc
import json
import random
import sys
import time
from typing import Any

from kvqueue import schema
from kvqueue.measure import child
from kvqueue.measure.timing_worker import LAYOUT_PADDING, heap_padding, load_shuffled, pin_cpu
from kvqueue.policy import age_windows, churn, invariants, policies, trace
from kvqueue.sources import loader


def _pass(
    variant: loader.Variant,
    blocks: dict[str, list[Any]],
    name: str,
    spec: dict[str, Any],
    events: list[dict[str, Any]] | None,
    pool: int,
) -> tuple[age_windows.Meter, Any]:
    """One policy's pass from id-ordered queues to the last age edge; the meter and the
    final decode queue."""
    workload = churn.Workload(**spec["workload"])
    policy = policies.get(name, int(spec["threshold"]))
    meter = age_windows.Meter([float(e) for e in spec["edges"]], int(spec["threshold"]))
    queues = {side: variant.queue_cls(blocks[side]) for side in blocks}
    decode = churn.Side(queues[churn.DECODE], blocks[churn.DECODE], None, workload.free_order)
    prefill = None
    if churn.PREFILL in blocks:
        prefill = churn.Side(
            queues[churn.PREFILL], blocks[churn.PREFILL], None, workload.free_order
        )
    decode.alloc = meter.wrap(policy, decode, True)
    if prefill is not None:
        prefill.alloc = meter.wrap(policy, prefill, False)
    if events is None:
        sim = churn.Churn(workload, spec["seed"], decode.queue, blocks[churn.DECODE], None)
        sim.pools = churn.Pools(decode, prefill)
        sim.pools.on_read = meter.on_read
        age_windows.synthetic_pass(sim, meter)
    else:
        pools = churn.Pools(decode, prefill)
        pools.on_read = meter.on_read
        try:
            age_windows.replay_pass(pools, events, pool, meter)
        except churn.PoolExhausted as exc:
            raise SpecError(f"the trace does not fit the pool under {name}: {exc}") from None
    return meter, decode.queue


def run_process(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one process: one timed and described pass per policy, in a shuffled order.

    Parameters
    ----------
    spec
        ``source``, ``block_source`` (or None), ``expected_sha256`` (or None),
        ``policies`` (registry names), ``threshold``, ``workload`` (a
        :class:`kvqueue.policy.churn.Workload` as a dict), ``edges`` (age window edges
        in turnovers, :func:`kvqueue.policy.age_windows.age_edges`), ``trace`` (a trace path
        or None: the synthetic workload, two sides), ``seed`` (this process's seed: the
        request stream and the shuffles), ``cpu``, ``gc``.

    Returns
    -------
    dict
        ``rows`` (one dict per policy and age window, keys
        :data:`kvqueue.schema.POLICY_AGE_ROW_KEYS`), pinning info, ``seconds``.
    """
    start = time.perf_counter()
    pin = pin_cpu(spec["cpu"])
    rng = random.Random(spec["seed"])
    names = _checked_names(spec["policies"])
    events = None
    sides: tuple[str, ...] = (churn.DECODE, churn.PREFILL)
    pool = int(spec["workload"]["pool"])
    if spec.get("trace"):
        try:
            header, events = trace.read_trace(spec["trace"])
        except trace.TraceError as exc:
            raise SpecError(str(exc)) from None
        sides, pool = header["sides"], header["pool"]
    (variant,) = load_shuffled([spec["source"]], [spec["source"]], spec.get("block_source"), rng)
    want = spec.get("expected_sha256")
    if want and variant.queue_src.sha256 != want:
        raise SystemExit(
            f"kvqueue policy worker: {spec['source']} changed since the check (sha256 "
            f"{variant.queue_src.sha256[:12]} != {want[:12]}); refusing to time it"
        )
    LAYOUT_PADDING.append(heap_padding(rng))
    blocks = {side: [variant.block_cls(block_id=i) for i in range(pool)] for side in sides}
    LAYOUT_PADDING.append(heap_padding(rng))
    rows: list[dict[str, Any]] = []
    gc_enabled = gc.isenabled()
    try:
        for position, name in enumerate(rng.sample(names, len(names))):
            gc.collect()
            if spec["gc"] == "disabled":
                gc.disable()
            meter, _queue = _pass(variant, blocks, name, spec, events, pool)
            if gc_enabled:
                gc.enable()
            for row in meter.rows():
                rows.append(
                    {
                        "policy": name,
                        "window": _window_text(name),
                        "order_position": position,
                        **row,
                    }
                )
            LAYOUT_PADDING.append(heap_padding(rng))
    finally:
        if gc_enabled:
            gc.enable()
    order = {name: i for i, name in enumerate(names)}
    rows.sort(key=lambda r: (order[r["policy"]], r["window_from"]))
    return {
        "rows": [{k: r[k] for k in schema.POLICY_AGE_ROW_KEYS} for r in rows],
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
