"""Where a manager stack's instructions go: by layer, and per scheduler call.

The input is a per-Python-function profile of one variant's loops (exclusive and
inclusive instructions per operation of each ``(part, qualname)``; ``part`` is the
release member a function's file is, ``queue`` for a swapped-in queue class, ``""``
outside the release's files). Exclusive costs add up, so a layer is the sum of its
functions' exclusive costs:

=============  ===========================================================================
``manager``    ``kv_cache_manager.py``, ``kv_cache_coordinator.py``,
               ``single_type_kv_cache_manager.py``
``pool``       ``block_pool.py``, ``kv_cache_metrics.py``, and ``KVCacheBlock``'s methods
``queue``      ``FreeKVCacheBlockQueue`` (the release's, or a swapped-in queue)
``hashing``    the block hashers and hash functions (``hash_block_tokens``,
               ``hash_request_tokens``, the request's block hasher, ``sha256``...)
``request``    the release's ``Request`` (its hashing apart)
``generated``  methods ``dataclasses`` generates for the release's classes (the block's
               ``__eq__`` that 0.9.x's queue calls in ``remove``)
``helpers``    the rest of the release's files the stack runs (``cdiv``,
               ``ConstantList``, the KV cache specs...)
``outside``    code outside the release's files: the harness's scheduler, the standard
               library, methods a dataclass generates (``<string>``)
=============  ===========================================================================

Per call: the stream's calls (:data:`kvqueue.subjects.manager_cases.CALLS`) run behind
functions named ``Stream.<call>`` in a profiled process; a call's cost is that
function's inclusive cost less its own exclusive (the wrapper's) cost.

The tables (:func:`layer_table`, :func:`call_table`) read the ``func`` rows of a counts
run's ``where.csv`` (:data:`kvqueue.schema.WHERE_FUNC`), as the processed
``count_where`` table holds them. No measuring code (the report reads this).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pandas as pd

from kvqueue import schema
from kvqueue.schema import MANAGER_CALLS

#: Layers in table order (module docstring).
LAYERS = ("manager", "pool", "queue", "hashing", "request", "generated", "helpers", "outside")
#: The layers of the scheduler's path proper (``outside`` is the harness's).
PATH_LAYERS = LAYERS[:-1]
_MANAGER_FILES = (
    "vllm/v1/core/kv_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
)
_POOL_FILES = ("vllm/v1/core/block_pool.py", "vllm/v1/core/kv_cache_metrics.py")
_HASHING_FILES = ("vllm/utils/hashing.py",)
_QUEUE_CLASS = "FreeKVCacheBlockQueue."
_BLOCK_CLASS = "KVCacheBlock."
#: A hashing function's name (``KVCacheBlock``'s ``block_hash`` bookkeeping is the pool's).
_HASHING_NAME = re.compile(r"hash|sha256|cbor", re.IGNORECASE)
#: The qualname prefix of the stream's named calls.
CALL_PREFIX = "Stream."


def layer_of(part: str, qualname: str) -> str:
    """The layer of the function ``qualname`` of ``part`` (module docstring)."""
    if not part:
        return "outside"
    if part == schema.WHERE_GENERATED:
        return "generated"
    if part == "queue" or qualname.startswith(_QUEUE_CLASS):
        return "queue"
    if qualname.startswith(_BLOCK_CLASS) or part in _POOL_FILES:
        return "pool"
    if part in _HASHING_FILES or _HASHING_NAME.search(qualname.rsplit(".", 1)[-1]):
        return "hashing"
    if part in _MANAGER_FILES:
        return "manager"
    if part == "vllm/v1/request.py":
        return "request"
    return "helpers"


def layer_costs(exclusive: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Exclusive instructions per operation summed by layer, every layer present.

    Parameters
    ----------
    exclusive
        ``(part, qualname)`` -> exclusive instructions per operation.
    """
    out = dict.fromkeys(LAYERS, 0.0)
    for (part, qualname), cost in exclusive.items():
        out[layer_of(part, qualname)] += cost
    return out


def layer_shares(costs: Mapping[str, float]) -> dict[str, float]:
    """Each path layer's share of the scheduler's path (``outside`` left out)."""
    path = sum(costs.get(layer, 0.0) for layer in PATH_LAYERS)
    return {layer: (costs.get(layer, 0.0) / path if path else 0.0) for layer in PATH_LAYERS}


def call_costs(
    inclusive: Mapping[str, float], exclusive: Mapping[str, float], calls: Mapping[str, float]
) -> dict[str, float]:
    """Instructions per call of each named scheduler call.

    Parameters
    ----------
    inclusive, exclusive, calls
        By qualname of the harness's functions (``Stream.prefill``...): inclusive and
        exclusive instructions per operation and calls per operation.

    Returns
    -------
    dict
        Call name (:data:`kvqueue.schema.MANAGER_CALLS`) -> instructions per call, the
        wrapper's own cost left out; calls that did not run are absent.
    """
    out = {}
    for call in MANAGER_CALLS:
        qualname = CALL_PREFIX + call
        if calls.get(qualname):
            own = exclusive.get(qualname, 0.0)
            out[call] = (inclusive.get(qualname, 0.0) - own) / calls[qualname]
    return out


def _cell(rows: pd.DataFrame, label: str, case: str) -> pd.DataFrame:
    return rows[
        (rows["kind"] == schema.WHERE_FUNC) & (rows["label"] == label) & (rows["case"] == case)
    ]


def _layers_of(cell: pd.DataFrame) -> dict[str, float]:
    keyed = {
        (str(r.part) if isinstance(r.part, str) else "", str(r.name)): float(r.per_op)
        for r in cell.itertuples()
        if r.name != schema.WHERE_REST
    }
    costs = layer_costs(keyed)
    rest = cell[cell["name"] == schema.WHERE_REST]["per_op"].sum()
    costs["outside"] += float(rest)
    return costs


def layer_table(rows: pd.DataFrame, labels: Sequence[str], case: str) -> pd.DataFrame:
    """Each layer's exclusive instructions per operation and share of the path, per
    label (``rows``: ``count_where`` rows of one host × interpreter × run); empty where
    no label has ``func`` rows for ``case``."""
    columns: dict[str, list[str]] = {"Layer": list(PATH_LAYERS)}
    found = False
    for label in labels:
        cell = _cell(rows, label, case)
        if cell.empty:
            continue
        found = True
        costs = _layers_of(cell)
        shares = layer_shares(costs)
        columns[f"{label}: instr/op"] = [f"{costs[x]:,.0f}" for x in PATH_LAYERS]
        columns[f"{label}: share"] = [f"{shares[x]:.1%}" for x in PATH_LAYERS]
    return pd.DataFrame(columns) if found else pd.DataFrame()


def call_table(rows: pd.DataFrame, labels: Sequence[str], case: str) -> pd.DataFrame:
    """Instructions per scheduler call (:func:`call_costs`) and calls per operation, per
    label; empty where no named call ran in ``case`` (a sweep calls the manager
    directly)."""
    columns: dict[str, list[str]] = {"Call": list(MANAGER_CALLS)}
    found = False
    for label in labels:
        cell = _cell(rows, label, case)
        named = cell[cell["name"].astype(str).str.startswith(CALL_PREFIX)]
        if named.empty:
            continue
        found = True
        ops = named["ops"].astype(float)
        inclusive = dict(zip(named["name"], named["detail"].astype(float) / ops, strict=True))
        exclusive = dict(zip(named["name"], named["per_op"].astype(float), strict=True))
        calls = dict(zip(named["name"], named["line"].astype(float) / ops, strict=True))
        per_call = call_costs(inclusive, exclusive, calls)
        columns[f"{label}: instr/call"] = [
            f"{per_call[c]:,.0f}" if c in per_call else "–" for c in MANAGER_CALLS
        ]
        columns[f"{label}: calls/op"] = [
            f"{calls.get(CALL_PREFIX + c, 0.0):,.2f}" for c in MANAGER_CALLS
        ]
    return pd.DataFrame(columns) if found else pd.DataFrame()
