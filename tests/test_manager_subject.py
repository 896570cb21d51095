"""The manager subject: the one loader's rules, the manager gate, its cases and the share a
component swap explains. Releases are read at run time (``network``); the broken managers
are releases with one method replaced by our own code."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvqueue.gate import manager_gate
from kvqueue.sources import stand_ins
from kvqueue.sources.manager_loader import ManagerSourceError, load_manager, split_swaps
from kvqueue.sources.module_graph import cut_definitions
from kvqueue.stats import count_figures
from kvqueue.subjects import manager_cases
from kvqueue.subjects.manager_api import manager_api


def test_a_cut_keeps_what_completes_its_own_definitions_not_patches_of_imports() -> None:
    text = textwrap.dedent(
        """\
        import ctypes
        import torch
        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
        untrack.argtypes = [ctypes.py_object]
        def keep(x):
            untrack(x)
            return torch
        torch.cuda.set_stream = keep
        def unused():
            return 1
        """
    )
    cut = cut_definitions(text, ["keep"], "m.py", "test")
    assert "untrack.argtypes" in cut.text
    assert "torch.cuda.set_stream" not in cut.text and "def unused" not in cut.text
    assert cut.imports == {"torch": ("torch", None)}
    with pytest.raises(ValueError, match=r"m\.py does not define gone, which test imports from it"):
        cut_definitions(text, ["gone"], "m.py", "test")


def test_a_placeholder_may_be_named_and_tested_but_a_use_is_recorded() -> None:
    stand_ins.clear_reached()
    torch = stand_ins.StubModule("torch")
    annotation = torch.Tensor | None
    assert annotation is torch.Tensor or annotation is not None
    assert not isinstance([1], torch.Tensor)  # nothing here is a tensor
    assert stand_ins.reached() == ()
    with pytest.raises(stand_ins.StandInUnavailable, match=r"torch\.zeros has no stand-in"):
        torch.zeros(3)
    assert stand_ins.reached() == ("torch.zeros",)
    stand_ins.clear_reached()


@pytest.mark.parametrize(
    ("spec", "base", "swaps"),
    [
        ("vllm==0.9.2", "vllm==0.9.2", {}),
        ("vllm==0.9.2+queue=kvqueue", "vllm==0.9.2", {"queue": "kvqueue"}),
        (
            "git:r@main+pool=vllm==0.33.0+queue=vllm==0.10.0",
            "git:r@main",
            {"pool": "vllm==0.33.0", "queue": "vllm==0.10.0"},
        ),
    ],
)
def test_swaps_split(spec: str, base: str, swaps: dict[str, str]) -> None:
    assert split_swaps(spec) == (base, swaps)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("vllm==0.8.5", "vllm==0.8.5: manager subjects start at vLLM 0.9.0"),
        ("kvqueue", "'kvqueue' is a queue, not a manager"),
        ("vllm==0.34.0+queue=", "a swap is +queue=SOURCE or +pool=SOURCE"),
        ("+queue=kvqueue", "names no manager before its swap"),
    ],
)
def test_bad_manager_sources_are_one_line(source: str, message: str) -> None:
    with pytest.raises(ManagerSourceError) as info:
        load_manager(source)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_folder_without_the_manager_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ManagerSourceError, match=r"no vllm/v1/core/kv_cache_manager\.py there"):
        load_manager(str(tmp_path))


def test_any_sweep_size_is_a_case_and_its_pool_must_hold_it() -> None:
    assert manager_cases.sweep_size("sweep500") == 500
    assert (
        manager_cases.sweep_size("sweep0") is None and manager_cases.sweep_size("sweep05") is None
    )
    assert manager_cases.smallest_pool("sweep500") == 501


def test_the_share_a_swap_explains_is_its_saving_over_the_candidate_it_came_from() -> None:
    rows = [
        {"case": "sweep10", "pool": 2048, "candidate": "manager:b", "baseline": "manager:a",
         "candidate_instructions": 600.0, "baseline_instructions": 1000.0},
        {"case": "sweep10", "pool": 2048, "candidate": "manager:c", "baseline": "manager:a",
         "candidate_instructions": 100.0, "baseline_instructions": 1000.0},
        {"case": "sweep10", "pool": 2048, "candidate": "manager:a+queue=b", "baseline": "manager:a",
         "candidate_instructions": 900.0, "baseline_instructions": 1000.0},
    ]  # fmt: skip
    # b's queue explains a share of what b saves, nothing of what c saves.
    (share,) = count_figures.swap_shares(rows, "manager:a")
    assert share["whole"] == "manager:b"
    assert share["share"] == pytest.approx(0.25)
    assert share["whole_saving_per_block"] == pytest.approx(40.0)
    assert share["swap_saving_per_block"] == pytest.approx(10.0)


# ------------------------------------------------------------------ releases (network)


@pytest.mark.network
def test_releases_with_one_behaviour_pass_the_gate_and_a_queue_swap_too() -> None:
    variants = [
        load_manager(s)
        for s in ("vllm==0.9.2", "vllm==0.10.0", "vllm==0.9.2+queue=kvqueue", "vllm==0.34.0")
    ]
    records = manager_gate.gate_records(variants)
    assert [r["ok"] for r in records] == [True, True, True, False]
    # 0.23.0 put freed unhashed blocks at the queue's head: a difference, named by step.
    assert records[3]["error"].startswith("vllm==0.34.0 differs from vllm==0.9.2 at step ")
    recorded = manager_gate.gate_records([variants[0], variants[3]], differences="record")
    assert recorded[1]["ok"] and recorded[1]["differences"][0].startswith("step ")


@pytest.mark.network
@pytest.mark.parametrize("source", ["vllm==0.9.0", "vllm==0.10.1"])
def test_the_floor_and_the_odd_request_signature_trace_as_0_9_2(source: str) -> None:
    # 0.9.0's blocks have no is_null (the gate knows the null block as the pool's
    # null_block); 0.10.1's Request requires multi_modal_kwargs (None for a text prompt).
    records = manager_gate.gate_records([load_manager("vllm==0.9.2"), load_manager(source)])
    assert [r["ok"] for r in records] == [True, True], records


@pytest.mark.network
def test_requests_hash_with_the_algorithm_the_release_defaults_to() -> None:
    # Requests hash their blocks from 0.10.1, whose engine still defaulted to builtin
    # hash(); sha256 became the default in 0.10.2. The default is parsed from the config.
    algos = {
        v: manager_api(load_manager(f"vllm=={v}")).hash_algo for v in ("0.10.0", "0.10.1", "0.10.2")
    }
    assert algos == {"0.10.0": None, "0.10.1": "builtin", "0.10.2": "sha256"}


def test_a_folder_of_vllm_v1_core_alone_is_refused_naming_what_it_lacks(tmp_path: Path) -> None:
    (tmp_path / "kv_cache_manager.py").write_text("class KVCacheManager:\n    pass\n")
    with pytest.raises(ManagerSourceError, match=r"no vllm/v1/request\.py there"):
        load_manager(str(tmp_path))


def _broken(source: str, method: str, replace: Any) -> Any:
    variant = load_manager(f"broken={source}")
    pool_cls = variant.module("vllm.v1.core.block_pool").BlockPool
    setattr(pool_cls, method, replace(getattr(pool_cls, method)))
    return variant


def _leaks_a_block(free_blocks: Any) -> Any:
    def free(self: Any, ordered_blocks: Any) -> None:
        blocks = list(ordered_blocks)
        free_blocks(self, blocks[:-1] if len(blocks) > 1 else blocks)

    return free


def _reversed_blocks(get_new_blocks: Any) -> Any:
    def get(self: Any, num_blocks: int) -> Any:
        return list(reversed(get_new_blocks(self, num_blocks)))

    return get


@pytest.mark.network
@pytest.mark.parametrize(
    ("method", "replace", "message"),
    [
        ("free_blocks", _leaks_a_block, r"^broken step \d+: free \+ held = \d+ \+ \d+ blocks"),
        (
            "get_new_blocks",
            _reversed_blocks,
            r"^broken differs from vllm==0\.10\.0 at step \d+: block ids of the running",
        ),
    ],
)
def test_broken_managers_are_refused_in_one_line_naming_the_step(
    method: str, replace: Any, message: str
) -> None:
    baseline = load_manager("vllm==0.10.0")
    result = manager_gate.manager_gate(baseline, _broken("vllm==0.10.0", method, replace))
    assert not result.ok
    assert result.error is not None and "\n" not in result.error
    assert re.match(message, result.error), result.error


@pytest.mark.network
def test_named_calls_change_no_step_and_name_each_call_for_a_profile() -> None:
    events = []
    for named in (False, True):
        api = manager_api(load_manager("vllm==0.10.0"))
        stream = manager_cases.Stream(api, api.new_manager(600), 1, named_calls=named)
        stream.record = True
        for _ in range(120):
            stream.step()
        events.append(stream.events)
    assert events[0] == events[1] and len(events[0]) > 50
    names = {stream._prefill.__code__.co_name, stream._decode.__code__.co_name}
    assert names == {"prefill", "decode"}
    assert stream._prefill.__code__ is not stream._decode.__code__
