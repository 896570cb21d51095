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
