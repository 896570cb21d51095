"""Drive any release's ``KVCacheManager`` as vLLM's scheduler does, through one API.

The adapter is chosen by signature, never by version number:

- **construction**: ``KVCacheConfig`` and ``KVCacheGroupSpec`` are filled by their field
  names (``kv_cache_tensors`` or ``tensors``), a ``FullAttentionSpec`` of
  :data:`BLOCK_SIZE` tokens by its fields; the manager gets the keyword arguments its
  ``__init__`` takes (``scheduler_block_size``, ``hash_block_size``,
  ``caching_hash_algo``: each at the value a one-group engine passes, or its default);
- **requests**: the release's own ``Request``, given the keyword arguments its
  ``__init__`` takes; a release whose ``Request`` hashes its own blocks (a
  ``block_hasher`` argument, 0.10.1 on) gets the release's
  ``get_request_block_hasher`` over the algorithm its engine config defaults to
  (``CacheConfig.prefix_caching_hash_algo``, parsed from the release: ``builtin``, Python's
  ``hash``, in 0.10.1; ``sha256`` from 0.10.2; :data:`HASH_ALGO` where the source holds
  no config); earlier managers hash in ``get_computed_blocks`` with the algorithm their
  ``caching_hash_algo`` defaults to (``builtin``);
- **calls**: ``get_computed_blocks`` returns 2 values, or 3 from 0.26 (the hit tokens are
  the second either way); ``allocate_slots`` is called by keyword
  (``num_new_tokens``, ``num_new_computed_tokens``, ``new_computed_blocks``,
  ``num_lookahead_tokens``), which every release takes.

The sampling parameters handed to ``Request`` are :class:`SamplingParams`, our own object
with the attributes a text-only request without structured output reads; the structured
output request is :class:`NoStructuredOutput` (``from_sampling_params`` gives None).

Standard library only (runs inside the gate and the workers under the measured interpreter).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Any

#: Tokens per block (vLLM's default ``block_size``).
BLOCK_SIZE = 16
#: The longest sequence a request may reach (prompt and output), in tokens.
MAX_MODEL_LEN = 1 << 17
#: The hash algorithm of a source whose requests hash but which holds no engine config
#: (a checkout of ``vllm/v1/core`` alone): every release's default since 0.10.2.
HASH_ALGO = "sha256"


class ManagerAPIError(RuntimeError):
    """A manager cannot be driven by this adapter; one line naming what is missing."""


class SamplingParams:
    """What ``Request.__init__`` reads of a text request's sampling parameters: the
    output length, and no extra arguments, logprobs or structured output."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.extra_args: dict[str, Any] | None = None
        self.logprobs: int | None = None
        self.prompt_logprobs: int | None = None
        self.prompt_logprob_token_ids: list[int] | None = None
        self.structured_outputs: Any = None
        self.guided_decoding: Any = None
        self.n = 1
        self.seed: int | None = None
        self.skip_reading_prefix_cache: bool | None = None
        self.all_stop_token_ids: set[int] = set()
        self.stop_token_ids: list[int] = []
        self.min_tokens = 0
        self.ignore_eos = True


class NoStructuredOutput:
    """Stand-in for ``vllm.v1.structured_output.request.StructuredOutputRequest``: a
    request without structured output has none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no structured output is stood in for")

    @staticmethod
    def from_sampling_params(sampling_params: Any) -> None:
        """A text request's sampling parameters carry no structured output."""
        return None


def _accepts(fn: Callable[..., Any]) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _fill(cls: type, values: dict[str, Any]) -> Any:
    """Build a dataclass from the values its fields name (others keep their defaults)."""
    if not is_dataclass(cls):
        raise ManagerAPIError(f"{cls.__name__} is not a dataclass")
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


class ManagerAPI:
    """One release's manager stack, constructed and called as the scheduler does.

    Parameters
    ----------
    variant
        A :class:`kvqueue.sources.manager_loader.ManagerVariant` (anything with
        ``manager_cls`` and ``module(name)``).
    """

    def __init__(self, variant: Any) -> None:
        self.variant = variant
        iface = variant.module("vllm.v1.kv_cache_interface")
        self.request_module = variant.module("vllm.v1.request")
        self.utils = variant.module("vllm.v1.core.kv_cache_utils")
        self._iface = iface
        self.manager_cls = variant.manager_cls
        self._init = _accepts(self.manager_cls.__init__)
        self._request_init = _accepts(self.request_module.Request.__init__)
        self.hashes_in_request = "block_hasher" in self._request_init
        self.hit_tuple = None
        self._hasher: Any = None
        self.hash_algo: str | None = None
        # The structured-output request is never built for a text request.
        module = variant.module("vllm.v1.structured_output.request")
        module.StructuredOutputRequest = NoStructuredOutput
        request_globals = self.request_module.__dict__
        if "StructuredOutputRequest" in request_globals:
            request_globals["StructuredOutputRequest"] = NoStructuredOutput
        if self.hashes_in_request:
            found = getattr(variant, "hash_algo", None)
            self.hash_algo = HASH_ALGO if found is None else found[0]
            hash_fn = _hash_fn_by_name(variant, self.hash_algo)
            if hasattr(self.utils, "init_none_hash"):
                self.utils.init_none_hash(hash_fn)
            self._hasher = self.utils.get_request_block_hasher(BLOCK_SIZE, hash_fn)

    def new_manager(self, num_blocks: int, enable_caching: bool = True) -> Any:
        """A fresh manager over ``num_blocks`` blocks (the null block among them)."""
        iface = self._iface
        spec = _fill(
            iface.FullAttentionSpec,
            {
                "block_size": BLOCK_SIZE,
                "num_kv_heads": 1,
                "head_size": 64,
                "dtype": "float16",
                "use_mla": False,
                "sliding_window": None,
            },
        )
        group = _fill(iface.KVCacheGroupSpec, {"layer_names": ["layer.0"], "kv_cache_spec": spec})
        config = _fill(
            iface.KVCacheConfig,
            {
                "num_blocks": num_blocks,
                "tensors": {},
                "kv_cache_tensors": [],
                "kv_cache_groups": [group],
            },
        )
        offered = {
            "kv_cache_config": config,
            "max_model_len": MAX_MODEL_LEN,
            "enable_caching": enable_caching,
            "scheduler_block_size": BLOCK_SIZE,
            "hash_block_size": BLOCK_SIZE,
            "use_eagle": False,
            "log_stats": False,
            "enable_kv_cache_events": False,
        }
        return self.manager_cls(**{k: v for k, v in offered.items() if k in self._init})

    def new_request(self, request_id: str, prompt: list[int], max_tokens: int) -> Any:
        """The release's own ``Request`` for a text prompt (hashed by the release, if its
        requests hash their blocks)."""
        offered: dict[str, Any] = {
            "request_id": request_id,
            "prompt_token_ids": prompt,
            "sampling_params": SamplingParams(max_tokens),
            "pooling_params": None,
            "eos_token_id": None,
            "multi_modal_inputs": None,
            "multi_modal_kwargs": None,  # 0.10.1's name of the above
            "multi_modal_hashes": None,
            "multi_modal_placeholders": None,
            "arrival_time": 0.0,
            "block_hasher": self._hasher,
        }
        cls = self.request_module.Request
        return cls(**{k: v for k, v in offered.items() if k in self._request_init})

    @staticmethod
    def computed(manager: Any, request: Any) -> tuple[Any, int]:
        """``get_computed_blocks``: the cached blocks and the hit tokens (2 or 3 values)."""
        found = manager.get_computed_blocks(request)
        return found[0], found[1]

    @staticmethod
    def block_ids(manager: Any, request_id: str) -> list[int]:
        """The block ids a request holds (its one KV cache group)."""
        return list(manager.get_block_ids(request_id)[0])

    @staticmethod
    def free_count(manager: Any) -> int:
        """Free blocks of the manager's pool."""
        return int(manager.block_pool.get_num_free_blocks())


def _hash_fn_by_name(variant: Any, name: str) -> Any:
    """The release's ``get_hash_fn_by_name(name)``: in ``vllm/utils/hashing.py`` from 0.18
    on, in ``vllm/utils`` before (a placeholder where the release has none)."""
    for module in ("vllm.utils.hashing", "vllm.utils"):
        found = variant.module(module).__dict__.get("get_hash_fn_by_name")
        if hasattr(found, "__code__"):  # the release's own function, not a placeholder
            return found(name)
    raise ManagerAPIError("the release has no get_hash_fn_by_name for its requests' hasher")


def manager_api(variant: Any) -> ManagerAPI:
    """The adapter of one loaded manager stack (raises :class:`ManagerAPIError`)."""
    try:
        return ManagerAPI(variant)
    except (AttributeError, KeyError, TypeError, RuntimeError) as exc:  # a placeholder used
        raise ManagerAPIError(f"{variant.label}: {type(exc).__name__}: {exc}") from None
