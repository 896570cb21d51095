"""The timing worker (``python -m kvqueue.measure.timing_worker``) and the timed cases
(docs/design.md §4).

Workers run in subprocesses only: ``run_process`` pins its own process to one CPU, which
must never happen to the pytest process. Parameters are tiny (64/128-block pools,
1–2 ms samples, 2–4 rounds).
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter

import pytest
from benchutil import GOOD_QUEUE, check_orders, run_worker

from kvqueue import schema
from kvqueue.measure import timing_worker
from kvqueue.sources import loader
from kvqueue.subjects import queue_cases

SOURCES = ["kvqueue", "kvqueue:floor", str(GOOD_QUEUE)]
ROW_KEYS = schema.SAMPLE_COLUMNS[2:]  # worker rows lack process and phase


def make_spec(**changes) -> dict:
    """A tiny worker spec (three variants so a round has 6 possible orders)."""
    spec = {
        "sources": SOURCES,
        "labels": schema.variant_labels(SOURCES),
        "block_source": None,
        "expected_sha256": {},
        "cases": ["alloc1", "mix", "remove"],
        "pools": [64, 128],
        "samples": 3,
        "sample_ms": 1,
        "seed": 12345,
        "case_seed": 1,
        "cpu": "auto",
        "gc": "disabled",
    }
    spec.update(changes)
    return spec


def worker_result(spec: dict) -> dict:
    proc = run_worker(spec)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def as_dicts(result: dict) -> list[dict]:
    return [dict(zip(ROW_KEYS, row, strict=True)) for row in result["rows"]]


@pytest.fixture(scope="module")
def tiny_run() -> tuple[dict, dict]:
    """(spec, result) of one tiny worker process."""
    spec = make_spec()
    return spec, worker_result(spec)


# ------------------------------------------------------------------ worker output


def test_rows_have_the_schema_shape(tiny_run):
    spec, result = tiny_run
    assert result["rows"]
    for row in result["rows"]:
        assert len(row) == len(ROW_KEYS)
        r = dict(zip(ROW_KEYS, row, strict=True))
        assert r["case"] in spec["cases"]
        assert r["pool"] in spec["pools"]
        assert r["variant"] in spec["labels"]
        assert 0 <= r["sample"] < spec["samples"]
        assert 0 <= r["order_position"] < len(spec["labels"])
        for key in ("pool", "sample", "order_position", "loops", "ops_per_loop", "ns_total"):
            assert isinstance(r[key], int) and not isinstance(r[key], bool), key
        assert r["loops"] >= 1
        assert r["ns_total"] > 0
        assert r["ops_per_loop"] == queue_cases.ops_per_loop(r["case"], r["pool"])


def test_every_case_pool_variant_has_samples_rows(tiny_run):
    spec, result = tiny_run
    counts = Counter((r["case"], r["pool"], r["variant"]) for r in as_dicts(result))
    expected = {
        (c, p, v): spec["samples"]
        for c in spec["cases"]
        for p in spec["pools"]
        for v in spec["labels"]
    }
    assert dict(counts) == expected


def test_ns_per_cycle_is_ns_total_over_loops_times_ops(tiny_run):
    _, result = tiny_run
    for r in as_dicts(result):
        assert r["ns_per_cycle"] == pytest.approx(
            r["ns_total"] / (r["loops"] * r["ops_per_loop"]), rel=1e-12
        )
    ops = {r["case"]: r["ops_per_loop"] for r in as_dicts(result) if r["pool"] == 128}
    assert ops == {"alloc1": 1, "mix": 100, "remove": 128}


def test_loops_calibrated_once_per_case_pool_and_shared_by_variants(tiny_run):
    spec, result = tiny_run
    loops_seen: dict[str, set[int]] = {}
    for r in as_dicts(result):
        loops_seen.setdefault(f"{r['case']}/{r['pool']}", set()).add(r["loops"])
    assert all(len(v) == 1 for v in loops_seen.values()), loops_seen
    assert {k: v.pop() for k, v in loops_seen.items()} == result["loops"]
    assert set(result["loops"]) == {f"{c}/{p}" for c in spec["cases"] for p in spec["pools"]}


def test_each_round_is_a_permutation_and_orders_vary(tiny_run):
    spec, result = tiny_run
    orders = check_orders(as_dicts(result), spec["labels"], ("case", "pool", "sample"))
    assert len(orders) == len(spec["cases"]) * len(spec["pools"]) * spec["samples"]
    # 18 rounds of 3 variants: a fixed order would show up as a single distinct order.
    assert len(set(orders)) > 1
    # Every variant is sometimes timed first: the baseline is not favoured by position.
    assert {o[0] for o in orders} == set(spec["labels"])


def test_same_seed_same_orders_other_seed_other_orders(tiny_run):
    spec, result = tiny_run

    def orders(res: dict) -> list[tuple]:
        # (case, pool, variant, sample, order_position): timings and loops may differ.
        return [tuple(row[:5]) for row in res["rows"]]

    again = worker_result(make_spec())
    other = worker_result(make_spec(seed=spec["seed"] + 1))
    assert orders(again) == orders(result)
    assert orders(other) != orders(result)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux-only pinning")
def test_pinning_is_recorded(tiny_run):
    _, result = tiny_run
    allowed = sorted(os.sched_getaffinity(0))
    assert isinstance(result["cpu"], int)
    assert result["cpu"] in allowed
    assert result["cpu"] == allowed[-1]  # "auto" = the highest allowed CPU
    assert result["pinned"] is True
    assert result["note"] == ""
    assert result["seconds"] > 0
    assert result["python"] == sys.version


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux-only pinning")
def test_explicit_cpu_and_unavailable_cpu():
    cpu = min(os.sched_getaffinity(0))
    tiny = {"cases": ["alloc1"], "pools": [64], "samples": 2, "cpu": cpu}
    result = worker_result(make_spec(**tiny))
    assert (result["cpu"], result["pinned"]) == (cpu, True)

    proc = run_worker(make_spec(**{**tiny, "cpu": 4096}))
    assert proc.returncode != 0
    assert "CPU 4096 is not available" in proc.stderr
    assert proc.stdout == ""


def test_sha256_mismatch_is_refused():
    variants = loader.load_variants(["kvqueue", "kvqueue:floor"])
    good = {v.label: v.queue_src.sha256 for v in variants}
    tiny = {
        "sources": ["kvqueue", "kvqueue:floor"],
        "labels": ["kvqueue", "kvqueue:floor"],
        "cases": ["alloc1"],
        "pools": [64],
        "samples": 2,
    }
    assert worker_result(make_spec(**tiny, expected_sha256=good))["rows"]

    proc = run_worker(make_spec(**tiny, expected_sha256={**good, "kvqueue:floor": "0" * 64}))
    assert proc.returncode != 0
    assert "kvqueue:floor changed since the validation gate" in proc.stderr
    assert proc.stdout == ""


def test_unknown_source_is_refused(tmp_path):
    missing = str(tmp_path / "missing.py")
    proc = run_worker(
        make_spec(sources=["kvqueue", missing], labels=["kvqueue", missing], cases=["alloc1"])
    )
    assert proc.returncode == 2
    assert "kvqueue worker:" in proc.stderr and "missing.py" in proc.stderr
    assert proc.stdout == ""


def test_aa_duplicate_labels_are_timed_separately():
    sources = ["kvqueue", "kvqueue:floor", "kvqueue"]
    labels = schema.variant_labels(sources)
    assert labels == ["kvqueue", "kvqueue:floor", "kvqueue#2"]
    result = worker_result(
        make_spec(sources=sources, labels=labels, cases=["alloc2"], pools=[64], samples=2)
    )
    counts = Counter(r["variant"] for r in as_dicts(result))
    assert counts == dict.fromkeys(labels, 2)


# ------------------------------------------------------------------ calibration


def test_calibrate_scales_to_the_sample_length():
    calls = []

    def fake_run(loops: int) -> int:
        calls.append(loops)
        return loops * 1_000  # 1 µs per loop

    assert timing_worker.calibrate(fake_run, 1_000_000) == 1_000
    # Doubled until a run lasted >= 1/8 of a sample (128 loops = 128 µs), then scaled.
    assert calls == [1, 2, 4, 8, 16, 32, 64, 128]


def test_calibrate_never_returns_zero():
    assert timing_worker.calibrate(lambda loops: 10**12, 1_000) == 1


# ------------------------------------------------------------------ cases


def test_mix_sequence_sizes_and_fixed_order():
    seq = queue_cases.mix_sequence(1)
    assert len(seq) == 100 == queue_cases.ops_per_loop("mix", 2048)
    assert Counter(seq) == {1: 90, 2: 5, 8: 4, 32: 1}
    assert queue_cases.mix_sequence(1) == seq  # same seed, same sequence
    assert queue_cases.mix_sequence(2) != seq  # it is shuffled by the seed
    assert seq != sorted(seq)


@pytest.mark.parametrize("pool", [64, 128, 5000])
def test_remove_walk_is_two_orders_of_the_same_interior_blocks(pool):
    blocks = list(range(pool))
    walk = queue_cases.remove_walk(blocks, seed=3)
    count = min(queue_cases.REMOVE_BLOCKS, pool // 2)
    assert len(walk) == 2 * count == queue_cases.ops_per_loop("remove", pool)
    first, second = walk[:count], walk[count:]
    assert len(set(first)) == count  # a permutation: no block twice in one order
    assert set(first) == set(second)
    assert first != second  # two different shuffles
    assert blocks[0] not in first and blocks[-1] not in first  # interior only
    assert queue_cases.remove_walk(blocks, seed=3) == walk


def test_ops_per_loop():
    for case in ("alloc1", "alloc2", "alloc8", "alloc32", "popappend"):
        assert queue_cases.ops_per_loop(case, 64) == 1
    assert queue_cases.ops_per_loop("mix", 64) == 100
    assert queue_cases.ops_per_loop("remove", 64) == 64
    assert queue_cases.ops_per_loop("remove", 100_000) == 2 * queue_cases.REMOVE_BLOCKS


def test_unknown_case_is_refused():
    with pytest.raises(ValueError, match="unknown case"):
        queue_cases.make_runner("shuffle", None, [], 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("source", ["kvqueue", "kvqueue:floor", str(GOOD_QUEUE)])
@pytest.mark.parametrize("pool", [64, 128])
def test_every_case_cycle_is_balanced(source, pool):
    """After any number of cycles the queue holds exactly its pool again (all free)."""
    (variant,) = loader.load_variants([source], block_source="kvqueue")
    for case in schema.CASES:
        blocks = [variant.block_cls(block_id=i) for i in range(pool)]
        q = variant.queue_cls(blocks)
        run = queue_cases.make_runner(case, q, blocks, 1)
        assert run(3) > 0
        free = q.get_all_free_blocks()
        assert len(free) == pool == q.num_free_blocks, case
        assert {id(b) for b in free} == {id(b) for b in blocks}, case
        # Still a well-formed list: walking it through iter_blocks_after agrees.
        assert list(q.iter_blocks_after(None)) == free, case


# ------------------------------------------------------------------ shared pool


def _chain(q) -> list:
    """Blocks from head to tail, checking every back link on the way."""
    out, prev = [], q.fake_free_list_head
    block = prev.next_free_block
    while block is not q.fake_free_list_tail:
        assert block.prev_free_block is prev
        out.append(block)
        prev, block = block, block.next_free_block
    assert q.fake_free_list_tail.prev_free_block is prev
    return out


def _shared_pool(size: int) -> tuple[timing_worker.SharedPool, list[str]]:
    variants = loader.load_variants(SOURCES)
    labels = schema.variant_labels(SOURCES)
    queues = {label: v.queue_cls for label, v in zip(labels, variants, strict=True)}
    return timing_worker.SharedPool(size, variants[0].block_cls, queues), labels


def test_shared_pool_hands_one_chain_between_variants():
    shared, labels = _shared_pool(64)
    seen = []
    idle = {label: (lambda loops, label=label: seen.append(label) or 0) for label in labels}
    # Queues built before the last one keep stale sentinels until they first own the
    # chain (harmless: every timing first hands the chain over); check after that.
    for label in labels:
        shared.timed(idle, label, 1)
    for label in [labels[0], labels[2], labels[1], labels[1], labels[0]]:
        assert shared.timed(idle, label, 1) == 0
        assert seen[-1] == label
        q = shared.queues[label]
        assert _chain(q) == shared.blocks  # the same objects, in the same order
        assert q.num_free_blocks == 64
        for other in labels:
            if other != label:
                assert _chain(shared.queues[other]) == []
                assert shared.queues[other].num_free_blocks == 0


@pytest.mark.parametrize("case", schema.CASES)
def test_shared_pool_stays_whole_across_variants_and_cases(case):
    """Timing each variant in turn on the shared blocks never loses or duplicates one."""
    shared, labels = _shared_pool(128)
    runners = {
        label: queue_cases.make_runner(case, shared.queues[label], shared.blocks, 1)
        for label in labels
    }
    for label in [*labels, *reversed(labels)]:
        assert shared.timed(runners, label, 2) > 0
        q = shared.queues[label]
        assert q.num_free_blocks == 128
        assert {id(b) for b in _chain(q)} == {id(b) for b in shared.blocks}


def test_hand_over_of_an_empty_queue():
    (variant,) = loader.load_variants(["kvqueue"])
    blocks = [variant.block_cls(block_id=i) for i in range(4)]
    src, dst = variant.queue_cls(blocks), variant.queue_cls([])
    timing_worker.hand_over(src, dst)
    assert (_chain(dst), dst.num_free_blocks) == (blocks, 4)
    assert (_chain(src), src.num_free_blocks) == ([], 0)
    timing_worker.hand_over(src, dst)  # src is empty now: dst ends up empty too
    assert (_chain(dst), dst.num_free_blocks) == ([], 0)


# ------------------------------------------------------------------ layout epochs


def test_epoch_rounds_split_the_samples_into_consecutive_ranges() -> None:
    assert timing_worker.epoch_rounds(9, 1) == [range(0, 9)]
    assert timing_worker.epoch_rounds(9, 3) == [range(0, 3), range(3, 6), range(6, 9)]
    assert [len(r) for r in timing_worker.epoch_rounds(9, 4)] == [2, 2, 2, 3]
    assert timing_worker.epoch_rounds(2, 5) == [range(0, 1), range(1, 2)]  # at most one per round


@pytest.mark.parametrize("pools", [True, False], ids=["new-blocks", "same-blocks"])
def test_a_new_layout_recreates_classes_queues_and_runners(pools: bool) -> None:
    spec = make_spec()
    rng = random.Random(3)
    first = timing_worker.Layout(spec, rng)
    second = (
        timing_worker.Layout(spec, rng)
        if pools
        else timing_worker.Layout(spec, rng, block=first.block, pools=first.pools)
    )
    for a, b in zip(first.variants, second.variants, strict=True):
        assert a.queue_cls is not b.queue_cls
        assert a.queue_cls.popleft_n.__code__ is not b.queue_cls.popleft_n.__code__
    key = next(iter(first.runners))
    for label in spec["labels"]:
        assert first.runners[key][label].__code__ is not second.runners[key][label].__code__
    size = spec["pools"][0]
    assert (first.pools[size].blocks is second.pools[size].blocks) is (not pools)


def test_a_process_with_epochs_times_every_round_once() -> None:
    # In a fresh process each: run_process pins the process that runs it to one CPU.
    result = worker_result(make_spec(samples=4, epochs=2))
    one = worker_result(make_spec(samples=4))
    assert len(result["rows"]) == len(one["rows"])
    rounds = {(r[0], r[1], r[2], r[3]) for r in result["rows"]}
    assert len(rounds) == len(result["rows"])  # no round twice
    assert result["layout_seconds"] > 0
