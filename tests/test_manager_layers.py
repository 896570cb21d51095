"""The manager's layers and per-call costs from a per-function profile."""

from __future__ import annotations

import pytest

from kvqueue.stats import manager_layers as ml


@pytest.mark.parametrize(
    ("part", "qualname", "layer"),
    [
        ("vllm/v1/core/kv_cache_manager.py", "KVCacheManager.allocate_slots", "manager"),
        ("vllm/v1/core/single_type_kv_cache_manager.py", "FullAttentionManager.free", "manager"),
        ("vllm/v1/core/block_pool.py", "BlockPool.get_new_blocks", "pool"),
        ("vllm/v1/core/kv_cache_utils.py", "KVCacheBlock.reset_hash", "pool"),
        ("vllm/v1/core/kv_cache_utils.py", "FreeKVCacheBlockQueue.popleft_n", "queue"),
        ("queue", "FreeKVCacheBlockQueue.append_n", "queue"),
        ("vllm/v1/core/kv_cache_utils.py", "hash_block_tokens", "hashing"),
        (
            "vllm/v1/core/kv_cache_utils.py",
            "get_request_block_hasher.<locals>.request_block_hasher",
            "hashing",
        ),
        ("vllm/utils/__init__.py", "sha256", "hashing"),
        ("vllm/v1/request.py", "Request.__init__", "request"),
        ("vllm/utils/math_utils.py", "cdiv", "helpers"),
        ("", "Stream.step", "outside"),
        ("<generated>", "__create_fn__.<locals>.__eq__", "generated"),
    ],
)
def test_each_function_lands_in_its_layer(part: str, qualname: str, layer: str) -> None:
    assert ml.layer_of(part, qualname) == layer


def test_layers_sum_exclusive_costs_and_shares_leave_the_harness_out() -> None:
    costs = ml.layer_costs(
        {
            ("vllm/v1/core/kv_cache_manager.py", "KVCacheManager.free"): 30.0,
            ("vllm/v1/core/block_pool.py", "BlockPool.free_blocks"): 50.0,
            ("queue", "FreeKVCacheBlockQueue.append_n"): 20.0,
            ("", "Stream.step"): 900.0,
        }
    )
    assert costs["pool"] == 50.0 and costs["outside"] == 900.0 and costs["hashing"] == 0.0
    shares = ml.layer_shares(costs)
    assert "outside" not in shares
    assert shares["queue"] == pytest.approx(0.2) and sum(shares.values()) == pytest.approx(1.0)


def test_a_call_costs_its_inclusive_less_the_wrapper_per_call() -> None:
    per_call = ml.call_costs(
        {"Stream.prefill": 1_050.0, "Stream.decode": 0.0, "Stream.step": 5_000.0},
        {"Stream.prefill": 50.0},
        {"Stream.prefill": 2.0, "Stream.decode": 0.0, "Stream.step": 1.0},
    )
    assert per_call == {"prefill": 500.0}


def test_a_profile_keeps_the_variants_functions_and_the_named_calls_and_sums_the_rest() -> None:
    from kvqueue import schema
    from kvqueue.measure import function_profile as fp
    from kvqueue.measure import where_run

    profile = fp.Profile(
        python={
            ("/r/block_pool.py", "BlockPool.get_new_blocks"): fp.FunctionCost(30.0, 20.0, 1.0),
            ("/h/manager_cases.py", "Stream.prefill"): fp.FunctionCost(100.0, 2.0, 0.5),
            ("/h/manager_cases.py", "Stream.step"): fp.FunctionCost(400.0, 7.0, 1.0),
            ("<string>", "__eq__"): fp.FunctionCost(3.0, 3.0, 1.0),
            ("/usr/lib/python3.12/random.py", "Random.random"): fp.FunctionCost(1.0, 1.0, 1.0),
        },
        c={},
        parts={"/r/block_pool.py": "vllm/v1/core/block_pool.py"},
        total=500.0,
        ops=10,
    )
    rows = where_run.function_rows(("manager:x", "stream", 2048), profile)
    by_name = {r["name"]: r for r in rows}
    assert all(r["kind"] == schema.WHERE_FUNC for r in rows)
    assert set(by_name) == {
        "BlockPool.get_new_blocks",
        "Stream.prefill",
        "__eq__",
        schema.WHERE_REST,
    }
    assert by_name["__eq__"]["part"] == schema.WHERE_GENERATED
    pool = by_name["BlockPool.get_new_blocks"]
    assert (pool["part"], pool["value"], pool["detail"], pool["line"]) == (
        "vllm/v1/core/block_pool.py",
        200,
        "300",
        10,
    )
    assert by_name[schema.WHERE_REST]["value"] == 80  # Stream.step and random, over 10 ops
