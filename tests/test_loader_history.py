"""Older queue APIs in the loader, the gate and the worker (issue 11).

A head-tail queue without ``popleft_n``/``append_n``/``prepend_n``/``iter_blocks_after``
(``tests/queues/headtail.py``, written from the contract) gets the named ``popleft-loop``
adapter, is checked by the gate on what it has (and the gate says what it skipped), and
is timed by the worker on its own block class (block mode ``own``) or handed the shared
chain of blocks across structures.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kvqueue.gate import gate, invalid_ops, naming, size_check
from kvqueue.measure import timing_worker
from kvqueue.sources import loader

HEADTAIL = Path(__file__).resolve().parent / "queues" / "headtail.py"


def headtail(cls: str = "FreeKVCacheBlockQueue", mode: str = "own") -> loader.Variant:
    (variant,) = loader.load_variants([f"{HEADTAIL}::{cls}"], block_mode=mode)
    return variant


# ------------------------------------------------------------------ loader


def test_adapter_is_named_and_recorded():
    v = headtail()
    assert v.adapter == loader.ADAPTER_POPLEFT_LOOP
    assert v.adapted == ("popleft_n", "append_n")
    assert v.missing == ("prepend_n", "iter_blocks_after")
    assert v.structure == loader.STRUCTURE_HEAD_TAIL
    prov = v.provenance()
    assert prov["adapter"] == "popleft-loop"
    assert prov["adapted_methods"] == ["popleft_n", "append_n"]
    assert prov["missing_methods"] == ["prepend_n", "iter_blocks_after"]
    assert prov["structure"] == "head-tail"
    assert not v.has("popleft_n") and v.can("popleft_n")
    assert not v.can("prepend_n")
    # The class's own text is what is identified; the adapter is a subclass on top.
    assert v.queue_cls.__mro__[1].__name__ == "FreeKVCacheBlockQueue"
    assert "popleft_n" in vars(v.queue_cls) and "popleft" not in vars(v.queue_cls)


def test_adapter_loops_behave_like_the_batch_methods():
    v = headtail()
    blocks = [v.block_cls(block_id=i) for i in range(5)]
    q = v.queue_cls(blocks)
    got = q.popleft_n(3)
    assert [b.block_id for b in got] == [0, 1, 2]
    assert q.popleft_n(0) == []
    q.append_n(got[::-1])
    assert [b.block_id for b in q.get_all_free_blocks()] == [3, 4, 2, 1, 0]
    assert q.num_free_blocks == 5


def test_full_api_class_has_no_adapter(good_path):
    (v,) = loader.load_variants([str(good_path)])
    assert (v.adapter, v.adapted, v.missing) == (None, (), ())
    assert v.structure == loader.STRUCTURE_SENTINELS


def test_own_block_mode_binds_each_sources_block_class(good_path):
    own = loader.load_variants([str(good_path), str(HEADTAIL)], block_mode="own")
    assert own[0].block_src.path == str(good_path.resolve())
    assert own[1].block_src.path == str(HEADTAIL.resolve())
    assert own[0].block_cls is not own[1].block_cls
    assert not hasattr(own[1].block_cls, "__slots__")  # the plain dataclass of headtail.py
    shared = loader.load_variants([str(good_path), str(HEADTAIL)])
    assert shared[0].block_cls is shared[1].block_cls


def test_own_block_mode_refuses_a_block_source(good_path):
    with pytest.raises(loader.SourceError, match="block mode 'own'"):
        loader.load_variants([str(good_path)], block_source="kvqueue", block_mode="own")
    with pytest.raises(loader.SourceError, match="not one of shared, own"):
        loader.load_variants([str(good_path)], block_mode="mine")


def test_core_method_missing_is_still_refused(tmp_path):
    text = HEADTAIL.read_text().replace("    def remove(self, block", "    def _remove(self, block")
    path = tmp_path / "no_remove.py"
    path.write_text(text)
    with pytest.raises(
        loader.SourceError, match=r"lacks queue method\(s\): popleft_n, remove, append_n"
    ):
        loader.load_variants([str(path)])


# ------------------------------------------------------------------ gate


def test_gate_passes_a_head_tail_queue_and_says_what_it_skipped(good_path):
    variants = loader.load_variants([str(good_path), str(HEADTAIL)], block_mode="own")
    base, old = gate.gate(variants, ops=4000, sizes=(64, 2048))
    assert base.ok and old.ok, (base.error, old.error)
    assert old.ops_checked == 4000 and old.sizes == (64, 2048)
    assert old.adapter == "popleft-loop"
    # No scenario is shared: a sentinel baseline and a head-tail candidate differ in
    # structure, and nothing earlier in the list shares the candidate's.
    assert old.invalid_compared == 0
    assert old.invalid_skipped == len(invalid_ops.INVALID_SCENARIOS)
    notes = " ".join(old.notes())
    assert "adapter popleft-loop" in notes
    assert "no prepend_n, iter_blocks_after" in notes
    assert "head-tail structure" in notes
    assert f"{len(invalid_ops.INVALID_SCENARIOS)} of {len(invalid_ops.INVALID_SCENARIOS)}" in notes


def test_gate_compares_head_tail_queues_among_themselves():
    variants = loader.load_variants(
        [f"{HEADTAIL}::FreeKVCacheBlockQueue", f"{HEADTAIL}::FreeKVCacheBlockQueue"],
        block_mode="own",
    )
    base, twin = gate.gate(variants, ops=2000, sizes=(64,))
    assert base.ok and twin.ok, (base.error, twin.error)
    shared = [
        sc
        for sc in invalid_ops.INVALID_SCENARIOS
        if invalid_ops.scenario_needs(sc) <= {"popleft", "remove", "append", "get_all_free_blocks"}
    ]
    assert shared, "some scenarios need only methods a head-tail queue has"
    assert twin.invalid_compared == len(shared) == base.invalid_compared
    assert twin.invalid_skipped == len(invalid_ops.INVALID_SCENARIOS) - len(shared)


@pytest.mark.parametrize("timed_sizes", [(), (64,)])
def test_gate_refuses_a_broken_head_tail_queue(timed_sizes):
    variants = loader.load_variants([str(HEADTAIL), f"{HEADTAIL}::LeakyQueue"], block_mode="own")
    # ops=400: one episode is enough for remove/popleft to leave links behind.
    results = gate.gate(variants, ops=400, sizes=timed_sizes)
    assert results[0].ok
    assert not results[1].ok
    assert "not in the queue but its links are not cleared" in (results[1].error or "")


def test_sized_check_refuses_a_broken_head_tail_queue():
    (leaky,) = loader.load_variants([f"{HEADTAIL}::LeakyQueue"], block_mode="own")
    with pytest.raises(naming.ValidationError, match="size 2048"):
        size_check.size_check(leaky, 2048, ops=2000)


def test_scenario_needs_reads_the_methods_and_sentinels():
    by_name = {sc[0]: invalid_ops.scenario_needs(sc) for sc in invalid_ops.INVALID_SCENARIOS}
    assert by_name["popleft() on an empty queue"] == {"popleft", invalid_ops.EMPTY_INIT}
    assert by_name["popleft_n(5) with 4 free"] == {"popleft_n"}
    assert by_name["remove() of the head sentinel"] == {"remove", "sentinels"}
    assert by_name["iter_blocks_after() a detached cursor"] == {"iter_blocks_after"}
    assert by_name["prepend_n([]) with a corrupted head sentinel"] == {"prepend_n", "sentinels"}
    every = set().union(*by_name.values())
    assert every <= {*loader.QUEUE_METHODS, "sentinels", invalid_ops.EMPTY_INIT}


# ------------------------------------------------------------------ worker


def _chain(variant: loader.Variant, q: object) -> list[int]:
    return [b.block_id for b in q.get_all_free_blocks()]  # type: ignore[attr-defined]


def test_hand_over_between_structures(good_path):
    new, old = loader.load_variants([str(good_path), str(HEADTAIL)])  # shared blocks
    blocks = [new.block_cls(block_id=i) for i in range(6)]
    qs = {"new": new.queue_cls(blocks), "old": old.queue_cls(blocks)}  # old owns the chain
    structures = {"new": new.structure, "old": old.structure}
    owner = "old"
    for target in ["new", "old", "old", "new", "old", "new"]:
        if target != owner:
            timing_worker.hand_over(qs[owner], qs[target], structures[owner], structures[target])
            owner = target
        q = qs[owner]
        got = q.popleft_n(2)
        q.append_n(got)
        assert q.num_free_blocks == 6
        variant = new if owner == "new" else old
        ids = _chain(variant, q)
        assert sorted(ids) == list(range(6)) and len(ids) == 6
        other = qs["old" if owner == "new" else "new"]
        assert other.num_free_blocks == 0 and other.get_all_free_blocks() == []
    # The ends of the chain point at the owner's markers.
    first = blocks[_chain(new, qs["new"])[0]]
    assert first.prev_free_block is qs["new"].fake_free_list_head


def test_hand_over_of_an_empty_head_tail_queue(good_path):
    new, old = loader.load_variants([str(good_path), str(HEADTAIL)])
    blocks = [new.block_cls(block_id=0)]
    q_old = old.queue_cls(blocks)
    q_new = new.queue_cls([])
    q_old.popleft()
    timing_worker.hand_over(q_old, q_new, old.structure, new.structure)
    assert q_new.num_free_blocks == 0 and q_new.get_all_free_blocks() == []


def test_own_pools_give_each_variant_its_blocks(good_path):
    variants = loader.load_variants([str(good_path), str(HEADTAIL)], block_mode="own")
    labels = [v.label for v in variants]
    pools = timing_worker.OwnPools(
        64,
        {v.label: v.block_cls for v in variants},
        {v.label: v.queue_cls for v in variants},
        random.Random(1),
    )
    assert pools.blocks_of(labels[0])[0] is not pools.blocks_of(labels[1])[0]
    for v in variants:
        assert type(pools.blocks_of(v.label)[0]) is v.block_cls
        assert pools.queues[v.label].num_free_blocks == 64


def test_worker_times_own_blocks_and_adapted_variants(good_path):
    spec = {
        "sources": [str(good_path), str(HEADTAIL)],
        "labels": ["new", "old"],
        "block_source": None,
        "block_mode": "own",
        "expected_sha256": {},
        "cases": ["alloc1", "alloc8", "mix", "remove", "popappend"],
        "pools": [256],
        "samples": 2,
        "sample_ms": 0.2,
        "epochs": 2,
        "seed": 7,
        "case_seed": 1,
        "cpu": "auto",
        "gc": "disabled",
    }
    result = timing_worker.run_process(spec)
    assert {(r[0], r[2]) for r in result["rows"]} == {
        (c, label) for c in spec["cases"] for label in ("new", "old")
    }
    assert len(result["rows"]) == 5 * 2 * 2


def test_worker_refuses_a_block_class_changed_since_the_gate(good_path):
    """Block mode own times each variant's own block class: the gate's sha256 binds it."""
    variants = loader.load_variants([str(good_path), str(HEADTAIL)], block_mode="own")
    spec = {
        "sources": [str(good_path), str(HEADTAIL)],
        "labels": ["new", "old"],
        "block_source": None,
        "block_mode": "own",
        "expected_sha256": {"new": variants[0].queue_src.sha256},
        "expected_block_sha256": {"new": variants[0].block_src.sha256, "old": "0" * 64},
        "cases": ["alloc1"],
        "pools": [64],
        "samples": 1,
        "sample_ms": 0.2,
        "epochs": 1,
        "seed": 7,
        "case_seed": 1,
        "cpu": "auto",
        "gc": "disabled",
    }
    with pytest.raises(SystemExit, match="old's block class changed since the validation gate"):
        timing_worker.run_process(spec)
    spec["expected_block_sha256"]["old"] = variants[1].block_src.sha256
    assert timing_worker.run_process(spec)["rows"]


def test_runner_passes_the_gates_block_sha256_to_the_worker(monkeypatch, good_path):
    import sys

    from kvqueue.measure import runner
    from kvqueue.params import bench_params

    seen = {}
    monkeypatch.setattr(runner, "_run_worker", lambda py, spec, timeout: seen.update(spec))
    p = bench_params.make_params(
        host="box", python=sys.executable, variants=[str(good_path), "kvqueue"]
    )
    runner.run_process(p, "main", 1, 7, {"a": "q"}, {"a": "b"})
    assert seen["expected_sha256"] == {"a": "q"} and seen["expected_block_sha256"] == {"a": "b"}


def test_sized_check_does_not_count_skipped_draws():
    """A class without iter_blocks_after skips ~1 draw in 10: those checked nothing."""
    ops = 2_000
    checked = size_check.size_check(headtail(), 256, ops=ops)
    assert 0.8 * ops < checked < ops
    assert size_check.size_check(headtail(), 256, ops=ops) == checked  # seeded
